//! Shadow mode and the failure policy (decision 1000), end to end against DynamoDB Local: what each
//! path answers, what it writes, and what it meters.

use std::sync::Arc;
use std::time::Duration;

use aws_sdk_dynamodb::types::AttributeValue;
use aws_sdk_dynamodb::Client;
use futures::future::join_all;
use shared::clock::Clock;
use shared::dynamo::{local_client, timeouts};
use shared::edge::respond;
use shared::kv::{LimitSet, Limiter, Limits as KvLimits};
use shared::table::TableKind;
use shared::tenant::{Enforcement, Limits, OnFailure};
use turnstile_faultproxy::{FaultProxy, Policy};
use turnstile_tests::TestEnv;

use crate::ws_support::{body_json, reconcile_tenant, World};
use crate::{count, invoke, parse, recorder, SERIAL};

#[tokio::test]
async fn a_shadow_tenant_is_never_refused_and_meters_exactly_the_refusals_enforce_mode_makes() {
    let _serial = SERIAL.lock().await;
    let w = World::new().await;
    // tenantConnections 3 (one session may hold 100), messagesPerMinute 1; in shadow mode.
    let limits = Limits::example(1000, 1000, 100, 3, 200, 1).with_enforcement(Enforcement::Shadow);
    let (t, s) = ("shadow-t", "s1");
    w.put_tenant(t, limits).await;
    w.put_session(t, s).await;
    recorder().take();

    // 10 concurrent connects: none refused; exactly 3 fit the cap, 7 would have been refused.
    let ids: Vec<String> = (0..10).map(|i| format!("c{i}")).collect();
    let answers = join_all(ids.iter().map(|c| w.connect(t, s, c, &limits))).await;
    let lines = parse(&recorder().take());
    for a in &answers {
        assert_eq!(a.status_code, 200, "{}", respond::body_text(&a.body));
    }
    assert_eq!(
        count(
            &lines,
            "Decisions",
            &[("Path", "connect"), ("Outcome", "admitted")]
        ),
        3
    );
    assert_eq!(
        count(
            &lines,
            "Decisions",
            &[("Path", "connect"), ("Outcome", "shadow_refused")]
        ),
        7
    );
    assert_eq!(
        count(
            &lines,
            "Refusals",
            &[
                ("Limit", "tenantConnections"),
                ("Outcome", "shadow_refused")
            ]
        ),
        7
    );
    assert_eq!(
        count(
            &lines,
            "Decisions",
            &[("Path", "connect"), ("Outcome", "refused")]
        ),
        0
    );
    // Each holds its slot, like any connection: the count is the session's members.
    let members = w.session(t, s).await.unwrap().connection_ids.len();
    assert_eq!((w.count(t).await, members), (Some(10), 10));

    // The authorizer's pre-check over the cap: allowed, metered.
    assert_eq!(w.authorize(t, s).await, authorizer::Decision::Allow);
    let lines = parse(&recorder().take());
    assert_eq!(
        count(
            &lines,
            "Decisions",
            &[("Path", "authorizer"), ("Outcome", "shadow_refused")]
        ),
        1
    );

    // Messages at 1 a minute: all three delivered, the last two metered as would-refuses.
    for (text, outcome) in [
        ("one", "admitted"),
        ("two", "shadow_refused"),
        ("three", "shadow_refused"),
    ] {
        let lines = invoke("message", w.send(t, s, "c0", &limits, text)).await;
        assert_eq!(
            count(
                &lines,
                "Decisions",
                &[("Path", "message"), ("Outcome", outcome)]
            ),
            1
        );
    }
    let a = w.send(t, s, "c0", &limits, "four").await;
    assert_eq!(a.status_code, 200);
    assert_eq!(body_json(&a)["delivered"], 10, "delivered to every member");
    recorder().take();

    // Disconnects give every slot back, and the reconciler finds the count consistent.
    for i in 0..10 {
        w.disconnect(t, s, &format!("c{i}")).await;
    }
    assert_eq!(w.count(t).await, Some(0));
    let tid = shared::ids::TenantId::parse(t).unwrap();
    let report = reconcile_tenant(w.deps(), &tid, &w.api.url(), true, Duration::ZERO).await;
    assert_eq!(
        report.tenants[0].outcome,
        shared::reconcile::Outcome::Consistent,
        "{report:?}"
    );
}

const KV_LIMITS: &str = "\
names:
  Shadowed: { id: 1, format: string, shadow: true }
  Enforced: { id: 2, format: string }
defaults:
  Shadowed: { burst: 1, count: 1, period: 60s }
  Enforced: { burst: 1, count: 1, period: 60s }
";

async fn stored_tat(env: &TestEnv, key: &str) -> Option<String> {
    let out = env
        .deps
        .dynamo
        .get_item()
        .table_name(&env.deps.tables.buckets)
        .key("bucket", AttributeValue::S(key.into()))
        .consistent_read(true)
        .send()
        .await
        .unwrap();
    out.item()
        .and_then(|i| i.get("tat"))
        .and_then(|v| v.as_n().ok().cloned())
}

#[tokio::test]
async fn a_shadow_kv_limit_never_denies_and_its_bucket_holds_what_an_enforced_one_holds() {
    let _serial = SERIAL.lock().await;
    let env = TestEnv::new(&[TableKind::Buckets]).await;
    let limits = Arc::new(KvLimits::new(LimitSet::from_yaml(KV_LIMITS).unwrap()));
    let lim = Limiter::new(env.deps.dynamo.clone(), &env.deps.tables.buckets, limits);
    recorder().take();
    let now = env.clock.now();
    let mut shadowed = Vec::new();
    let mut enforced = Vec::new();
    for _ in 0..3 {
        shadowed.push(lim.spend("Shadowed", "a", 1, now).await.unwrap());
        enforced.push(lim.spend("Enforced", "a", 1, now).await.unwrap());
    }
    let lines = parse(&recorder().take());
    assert!(shadowed.iter().all(|o| o.decision.allowed));
    assert_eq!(
        shadowed.iter().map(|o| o.shadow_denied).collect::<Vec<_>>(),
        [false, true, true]
    );
    assert_eq!(
        enforced
            .iter()
            .map(|o| o.decision.allowed)
            .collect::<Vec<_>>(),
        [true, false, false]
    );
    assert!(enforced.iter().all(|o| !o.shadow_denied));
    assert_eq!(
        count(
            &lines,
            "Refusals",
            &[("Limit", "Shadowed"), ("Outcome", "shadow_refused")]
        ),
        2
    );
    assert_eq!(
        count(
            &lines,
            "Refusals",
            &[("Limit", "Enforced"), ("Outcome", "refused")]
        ),
        2
    );
    assert_eq!(
        count(
            &lines,
            "Decisions",
            &[("Path", "kv"), ("Outcome", "admitted")]
        ),
        2
    );
    assert_eq!(
        count(
            &lines,
            "Refusals",
            &[("Limit", "Shadowed"), ("Outcome", "refused")]
        ),
        0
    );
    // A shadow denial spends nothing: both buckets hold the same TAT.
    let (a, b) = (stored_tat(&env, "1:a").await, stored_tat(&env, "2:a").await);
    assert!(a.is_some());
    assert_eq!(a, b);
    // An all-or-nothing batch cannot let one limit's would-deny through: refused before any write.
    let batch = lim
        .spend_batch(&[("Enforced", "b", 1), ("Shadowed", "b", 1)], now)
        .await;
    assert!(
        matches!(batch, Err(shared::kv::KvError::ShadowInBatch(ref n)) if n == "Shadowed:b"),
        "{batch:?}"
    );
    assert_eq!(stored_tat(&env, "2:b").await, None);
}

#[tokio::test]
async fn a_stalled_store_fails_closed_by_default_and_open_for_tenants_configured_so() {
    let _serial = SERIAL.lock().await;
    let mut w = World::new().await;
    let closed = Limits::example(1000, 1000, 10, 10, 200, 60);
    let open = closed.with_on_failure(OnFailure::Open);
    for (t, l) in [("fail-closed", closed), ("fail-open", open)] {
        w.put_tenant(t, l).await;
        w.put_session(t, "s1").await;
        // Warms the authorizer's tenant cache (a stalled tenant read fails closed: no policy known).
        assert_eq!(w.authorize(t, "s1").await, authorizer::Decision::Allow);
        assert_eq!(w.connect(t, "s1", "c0", &l).await.status_code, 200);
    }
    let proxy = FaultProxy::start(&w.env.endpoint)
        .await
        .expect("proxy starts");
    let via = local_client(&proxy.url(), Some(&w.env.counter));
    w.env.deps.dynamo = Client::from_conf(
        via.config()
            .to_builder()
            .timeout_config(timeouts(Duration::from_millis(200)))
            .build(),
    );
    proxy.set_policy(Policy::stall());
    recorder().take();

    let c = w.connect("fail-closed", "s1", "c1", &closed).await;
    assert_eq!(c.status_code, 503);
    assert_eq!(c.headers.get("Retry-After").unwrap(), "1");
    assert_eq!(body_json(&c)["status"], 503);
    let o = w.connect("fail-open", "s1", "c1", &open).await;
    assert_eq!(o.status_code, 200, "{}", respond::body_text(&o.body));
    let m = w.send("fail-closed", "s1", "c0", &closed, "hi").await;
    assert_eq!(m.status_code, 503);
    let m = w.send("fail-open", "s1", "c0", &open, "hi").await;
    assert_eq!(m.status_code, 200);
    assert_eq!(body_json(&m)["unaccounted"], true);
    let (closed_ev, open_ev) = (
        w.authorizer_event("fail-closed", "s1").await,
        w.authorizer_event("fail-open", "s1").await,
    );
    let auth = |ev| authorizer::handle(w.deps(), &w.authorizer, ev);
    assert!(
        auth(closed_ev).await.is_err(),
        "fails closed: API Gateway answers 500"
    );
    let a = auth(open_ev).await.unwrap();
    assert_eq!(authorizer::decision(&a), authorizer::Decision::Allow);
    assert!(proxy.stats().stalled > 0);

    let lines = parse(&recorder().take());
    for path in ["connect", "message", "authorizer"] {
        for outcome in ["error", "fail_open"] {
            assert_eq!(
                count(&lines, "Decisions", &[("Path", path), ("Outcome", outcome)]),
                1,
                "{path} {outcome}"
            );
        }
    }
    assert!(count(&lines, "DynamoDbErrors", &[("ErrorType", "Timeout")]) >= 1);
}
