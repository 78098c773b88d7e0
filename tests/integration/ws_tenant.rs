//! Tenant rows (what `turnstile tenant` calls) and the bounded-time tenant cache.

use std::collections::HashMap;
use std::time::Duration;

use aws_sdk_dynamodb::types::AttributeValue;
use shared::tenant::{self, Limits, Tenant, TenantCache};

use crate::ws_support::*;

#[tokio::test]
async fn put_get_list_delete_and_seed_rows_without_the_new_fields() {
    let w = World::new().await;
    let d = w.deps();
    for (id, l) in [
        ("t1", SMALL),
        ("t2", MEDIUM),
        ("t3", Limits::example(180, 30, 10, 1000, 300, 6000)),
    ] {
        w.put_tenant(id, l).await;
    }
    let t2 = tenant::store::get(d, &"t2".parse().unwrap())
        .await
        .unwrap()
        .unwrap();
    assert_eq!(t2.limits, MEDIUM);
    let (all, bad) = tenant::store::list(d).await.unwrap();
    assert!(bad.is_empty());
    assert_eq!(
        all.iter().map(|t| t.tenant_id.as_str()).collect::<Vec<_>>(),
        ["t1", "t2", "t3"]
    );
    assert!(tenant::store::delete(d, &"t3".parse().unwrap())
        .await
        .unwrap());
    assert!(!tenant::store::delete(d, &"t3".parse().unwrap())
        .await
        .unwrap());
    // A row written by the AWS WebSocket sample's tooling has only its four limit fields.
    let item: HashMap<String, AttributeValue> = [
        ("tenantId", AttributeValue::S("seed".into())),
        ("connectionsPerSession", AttributeValue::N("2".into())),
        ("tenantConnections", AttributeValue::N("10".into())),
        ("sessionPerMinute", AttributeValue::N("5".into())),
        ("tenantPerMinute", AttributeValue::N("60".into())),
    ]
    .into_iter()
    .map(|(k, v)| (k.to_string(), v))
    .collect();
    d.dynamo
        .put_item()
        .table_name(&d.tables.tenants)
        .set_item(Some(item))
        .send()
        .await
        .unwrap();
    let seed = tenant::store::get(d, &"seed".parse().unwrap())
        .await
        .unwrap()
        .unwrap();
    assert_eq!(seed.limits.session_ttl, tenant::DEFAULT_SESSION_TTL_SECS);
    assert_eq!(
        seed.limits.messages_per_minute,
        tenant::DEFAULT_MESSAGES_PER_MINUTE
    );
    // A malformed row is an error naming the table, not a panic.
    d.dynamo
        .put_item()
        .table_name(&d.tables.tenants)
        .item("tenantId", AttributeValue::S("broken".into()))
        .item("tenantConnections", AttributeValue::S("ten".into()))
        .send()
        .await
        .unwrap();
    let err = tenant::store::get(d, &"broken".parse().unwrap())
        .await
        .unwrap_err();
    assert!(
        err.to_string()
            .contains("is malformed: connectionsPerSession is missing"),
        "{err}"
    );
    let (_, bad) = tenant::store::list(d).await.unwrap();
    assert_eq!(bad.len(), 1);
}

#[tokio::test]
async fn the_tenant_cache_serves_from_memory_for_its_configured_time_only() {
    let w = World::new().await;
    w.put_tenant("t1", SMALL).await;
    let cache = TenantCache::new(Duration::from_secs(30));
    let id = "t1".parse().unwrap();
    w.env.counter.reset();
    assert_eq!(
        cache.get(w.deps(), &id).await.unwrap().unwrap().limits,
        SMALL
    );
    assert_eq!(
        cache.get(w.deps(), &id).await.unwrap().unwrap().limits,
        SMALL
    );
    assert_eq!(w.env.counter.total(), 1);
    // A change is seen once the entry is older than the configured time.
    let t = Tenant {
        tenant_id: "t1".parse().unwrap(),
        limits: MEDIUM,
    };
    tenant::store::put(w.deps(), &t).await.unwrap();
    w.env.clock.advance(Duration::from_secs(29));
    assert_eq!(
        cache.get(w.deps(), &id).await.unwrap().unwrap().limits,
        SMALL
    );
    w.env.clock.advance(Duration::from_secs(1));
    assert_eq!(
        cache.get(w.deps(), &id).await.unwrap().unwrap().limits,
        MEDIUM
    );
    // Unknown tenants are remembered apart and briefly (so a flood of made-up ids costs one
    // read per id per few seconds): a tenant created later is seen once that lapses.
    let ghost = "ghost".parse().unwrap();
    w.env.counter.reset();
    assert!(cache.get(w.deps(), &ghost).await.unwrap().is_none());
    assert!(cache.get(w.deps(), &ghost).await.unwrap().is_none());
    assert_eq!(w.env.counter.total(), 1, "the second miss is from memory");
    w.put_tenant("ghost", SMALL).await;
    assert!(cache.get(w.deps(), &ghost).await.unwrap().is_none());
    w.env.clock.advance(tenant::cache::MISSING_TTL);
    assert!(cache.get(w.deps(), &ghost).await.unwrap().is_some());
    // 0 disables caching.
    let off = TenantCache::new(Duration::ZERO);
    w.env.counter.reset();
    off.get(w.deps(), &id).await.unwrap();
    off.get(w.deps(), &id).await.unwrap();
    assert_eq!(w.env.counter.total(), 2);
    // The variable is read and validated by each function's Config.
    let bad = shared::config::Vars::from_pairs([("TURNSTILE_TENANT_CACHE_SECS", "soon")]);
    let err = authorizer::Config::from_vars(&bad).unwrap_err();
    assert!(err.to_string().contains("TURNSTILE_TENANT_CACHE_SECS"));
    let missing = shared::config::Vars::from_pairs::<&str, &str>([]);
    assert!(session_api::Config::from_vars(&missing)
        .unwrap_err()
        .to_string()
        .contains("TURNSTILE_MANAGEMENT_ENDPOINT"));
    assert!(ttl_sweeper::Config::from_vars(&missing).is_err());
    assert_eq!(
        message::Config::from_vars(&missing)
            .unwrap()
            .management_endpoint,
        None
    );
    // Without ticket keys the authorizer does not start: tickets are the default.
    let err = authorizer::Config::from_vars(&missing).unwrap_err();
    assert!(
        err.to_string().contains("TURNSTILE_TICKET_KEYS_SECRET"),
        "{err}"
    );
    let keys = shared::config::Vars::from_pairs([(
        "TURNSTILE_TICKET_KEYS",
        turnstile_bench::samples::SAMPLE_KEYS,
    )]);
    assert_eq!(
        authorizer::Config::from_vars(&keys).unwrap().tenant_cache,
        Duration::from_secs(60)
    );
}

/// `turnstile tenant delete` (`closing::end_tenant`) deletes the row, then pages
/// through the tenant's sessions and ends each as the session API's `DELETE` does: its sockets
/// closed through the Management API and released, its session unit given back, the row gone.
/// More sessions than one page; another tenant is untouched.
#[tokio::test]
async fn deleting_a_tenant_ends_its_sessions_and_closes_their_sockets() {
    use shared::admission::closing;
    let w = World::new().await;
    w.put_tenant("gone", MEDIUM).await;
    w.put_tenant("kept", MEDIUM).await;
    let many = 105;
    for i in 0..many {
        w.put_session("gone", &format!("s{i:03}")).await;
    }
    for (s, c) in [("s000", "a"), ("s000", "b"), ("s104", "c")] {
        assert_eq!(w.connect("gone", s, c, &MEDIUM).await.status_code, 200);
    }
    w.put_session("kept", "k1").await;
    assert_eq!(w.connect("kept", "k1", "k", &MEDIUM).await.status_code, 200);
    let t: shared::ids::TenantId = "gone".parse().unwrap();
    assert!(closing::has_sessions(w.deps(), &t).await.unwrap());
    let sockets = shared::function::Connections::new(w.deps(), &w.api.url()).await;
    let ended = closing::end_tenant(w.deps(), &t, &sockets).await.unwrap();
    assert!(ended.deleted);
    assert_eq!((ended.sessions, ended.closed), (many, 3), "{ended:?}");
    assert!(ended.closing.is_empty(), "{ended:?}");
    assert!(tenant::store::get(w.deps(), &t).await.unwrap().is_none());
    assert!(!closing::has_sessions(w.deps(), &t).await.unwrap());
    assert_eq!(w.closed(), ["a", "b", "c"]);
    assert_eq!(w.count("gone").await, Some(0));
    assert_eq!(w.count("gone:sessions").await, Some(0));
    // The other tenant keeps its session, its socket and its counts.
    assert_eq!(w.session("kept", "k1").await.unwrap().connection_ids, ["k"]);
    assert_eq!(w.count("kept").await, Some(1));
    assert_eq!(w.count("kept:sessions").await, Some(1));
    // Again: nothing left to end, nothing to delete.
    let again = closing::end_tenant(w.deps(), &t, &sockets).await.unwrap();
    assert_eq!((again.deleted, again.sessions), (false, 0));
}
