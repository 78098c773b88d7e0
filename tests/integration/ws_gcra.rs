//! Per-tenant GCRA for the two per-minute connection limits (`rateAlgorithm = gcra`, decision 0304)
//! against DynamoDB Local: exact under concurrency, no 2× at a minute boundary, the call budget of
//! the guess, refusals spending nothing, and rows without the attribute staying fixed.

use std::time::Duration;

use authorizer::Decision;
use aws_sdk_dynamodb::types::AttributeValue;
use futures::future::join_all;
use shared::clock::{Clock, Timestamp};
use shared::tenant::{Limits, WindowAlgorithm};

use crate::ws_support::*;

const T: &str = "tenant-g";

fn gcra(l: Limits) -> Limits {
    l.with_rate_algorithm(WindowAlgorithm::Gcra)
}

/// Freezes the clock at `secs` into a fresh minute (so the fixed windows are predictable).
fn freeze_at(w: &World, secs: i64) -> Timestamp {
    let start = shared::counter::window::MinuteWindow::at(w.env.clock.now()).start;
    let t = Timestamp::from_secs(start + 120 + secs);
    w.env.clock.set(t);
    t
}

/// The tenant's per-minute GCRA TAT, folded into its counter item (decision 0306).
async fn tenant_tat(w: &World, t: &str) -> Option<i64> {
    w.counter_number(t, "connTat").await
}

/// The session's per-minute GCRA TAT, on the session item.
async fn session_tat(w: &World, t: &str, s: &str) -> Option<i64> {
    w.session_number(t, s, "connTat").await
}

const S: i64 = 1_000_000_000;

#[tokio::test]
async fn gcra_fifty_concurrent_connects_admit_exactly_the_tenant_rate() {
    let w = World::new().await;
    // tenantPerMinute 7 (GCRA); everything else out of the way.
    let limits = gcra(Limits::example(7, 1_000, 100, 1_000, 300, 60));
    w.put_tenant(T, limits).await;
    for s in ["a", "b", "c"] {
        w.put_session(T, s).await;
    }
    let now = freeze_at(&w, 5);
    w.env.counter.reset();
    let results = join_all((0..50).map(|i| {
        let w = &w;
        let s = ["a", "b", "c"][i % 3];
        async move { w.connect(T, s, &format!("c{i}"), &limits).await }
    }))
    .await;
    eprintln!(
        "gcra: 50 concurrent connects: {} calls {:?}",
        w.env.counter.total(),
        w.env.counter.by_operation()
    );
    let admitted = results.iter().filter(|r| r.status_code == 200).count();
    assert_eq!(admitted, 7, "tenant per minute under GCRA");
    for r in results.iter().filter(|r| r.status_code != 200) {
        assert_eq!(r.status_code, 429, "{:?}", r.body);
        assert_eq!(body_json(r)["violated-policies"][0], "tenantPerMinute");
        // One connection every 60/7 s ≈ 8.57 s: Retry-After rounds up.
        assert_eq!(r.headers.get("retry-after").unwrap(), "9");
    }
    assert_eq!(w.count(T).await, Some(7), "open connections");
    // The bucket holds exactly 7 emission intervals past now; no fixed window was written.
    let ei = 60 * S / 7;
    assert_eq!(tenant_tat(&w, T).await, Some(now.as_nanos() + 7 * ei));
    assert_eq!(w.counter_number(T, "connMinute").await, None);
    assert_eq!(
        w.counter_keys().await,
        vec![T.to_string(), format!("{T}:sessions")]
    );
    let mut held = 0;
    for s in ["a", "b", "c"] {
        held += w.session(T, s).await.unwrap().connection_ids.len();
    }
    assert_eq!(held, 7);
}

#[tokio::test]
async fn gcra_per_session_is_exact_and_refusals_spend_no_tenant_quota() {
    let w = World::new().await;
    // sessionPerMinute 4 (GCRA), tenantPerMinute 30.
    let limits = gcra(Limits::example(30, 4, 100, 1_000, 300, 60));
    w.put_tenant(T, limits).await;
    w.put_session(T, "one").await;
    let now = freeze_at(&w, 5);
    let results = join_all((0..50).map(|i| {
        let w = &w;
        async move { w.connect(T, "one", &format!("c{i}"), &limits).await }
    }))
    .await;
    let admitted = results.iter().filter(|r| r.status_code == 200).count();
    assert_eq!(admitted, 4, "session per minute under GCRA");
    for r in results.iter().filter(|r| r.status_code != 200) {
        assert_eq!(r.status_code, 429);
        assert_eq!(body_json(r)["violated-policies"][0], "sessionPerMinute");
        assert_eq!(r.headers.get("retry-after").unwrap(), "15");
    }
    // The 46 refused attempts spent nothing: the tenant bucket holds exactly 4 spends.
    assert_eq!(
        tenant_tat(&w, T).await,
        Some(now.as_nanos() + 4 * (60 * S / 30))
    );
    assert_eq!(
        session_tat(&w, T, "one").await,
        Some(now.as_nanos() + 4 * (60 * S / 4))
    );
    assert_eq!(w.count(T).await, Some(4));
    assert_eq!(w.session(T, "one").await.unwrap().connection_ids.len(), 4);
}

/// Fixed windows admit 2N within two seconds across a minute boundary; GCRA admits N, then only
/// what the elapsed time refilled.
#[tokio::test]
async fn at_a_minute_boundary_fixed_admits_twice_the_limit_and_gcra_does_not() {
    let w = World::new().await;
    let n = 5;
    let fixed = Limits::example(n, 1_000, 100, 1_000, 3_600, 60);
    let g = gcra(fixed);
    w.put_tenant("fixed-t", fixed).await;
    w.put_tenant(T, g).await;
    w.put_session("fixed-t", "s").await;
    w.put_session(T, "s").await;
    let t0 = freeze_at(&w, 59);
    let mut next = 0;
    let mut burst = |t: &'static str, limits: Limits| {
        let w = &w;
        let ids: Vec<String> = (0..10)
            .map(|_| {
                next += 1;
                format!("c{next}")
            })
            .collect();
        async move {
            let mut admitted = 0;
            for cid in ids {
                if w.connect(t, "s", &cid, &limits).await.status_code == 200 {
                    admitted += 1;
                }
            }
            admitted
        }
    };
    // 0:59: both admit N.
    assert_eq!(burst("fixed-t", fixed).await, 5);
    assert_eq!(burst(T, g).await, 5);
    // 1:00, one second later: the fixed window resets (2N in two seconds); GCRA has refilled
    // 1/12 of a connection.
    w.env.clock.set(t0.plus(Duration::from_secs(1)));
    assert_eq!(
        burst("fixed-t", fixed).await,
        5,
        "fixed: 2N across the boundary"
    );
    assert_eq!(burst(T, g).await, 0, "gcra: nothing refilled yet");
    // One emission interval (12 s) after 0:59: exactly one more.
    w.env.clock.set(t0.plus(Duration::from_secs(12)));
    assert_eq!(burst(T, g).await, 1);
    // A refused GCRA connect says when one fits again: at 0:59 + 24 s.
    let r = w.connect(T, "s", "late", &g).await;
    assert_eq!(r.status_code, 429);
    assert_eq!(body_json(&r)["violated-policies"][0], "tenantPerMinute");
    assert_eq!(r.headers.get("retry-after").unwrap(), "12");
    // Once the bucket is full again (TAT = 0:59 + 72 s), N at once, and no more.
    w.env.clock.set(t0.plus(Duration::from_secs(72)));
    assert_eq!(burst(T, g).await, 5);
    // In total over 73 s: fixed let 10 through in 2 s, GCRA 11 over 73 s (5 + 1 + 5).
    assert_eq!(w.count("fixed-t").await, Some(10));
    assert_eq!(w.count(T).await, Some(11));
}

#[tokio::test]
async fn gcra_connect_is_two_calls_when_the_bets_are_right_and_four_when_cold() {
    let w = World::new().await;
    let limits = gcra(Limits::example(10, 3, 100, 1_000, 300, 60));
    w.put_tenant(T, limits).await;
    w.put_session(T, "s1").await;
    freeze_at(&w, 5);
    // First connect of the process on empty buckets: the "idle" bets are right.
    w.env.counter.reset();
    assert_eq!(w.connect(T, "s1", "c1", &limits).await.status_code, 200);
    assert_eq!(
        w.env.counter.by_operation(),
        [("UpdateItem".to_string(), 2)].into()
    );
    // Warm: the hints say "draining"; right again.
    w.env.counter.reset();
    assert_eq!(w.connect(T, "s1", "c2", &limits).await.status_code, 200);
    assert_eq!(w.env.counter.total(), 2, "warm $connect");
    // Another process (no hints) bets "idle" on draining buckets: one more call per item, no read.
    let cold = connect::init(&w.function_deps(&[])).await.unwrap();
    w.env.counter.reset();
    let r = connect::handle(
        w.deps(),
        &cold,
        ws_event("connect/connect.json", T, "s1", "c3", Some(&limits)),
    )
    .await
    .unwrap();
    assert_eq!(r.status_code, 200);
    assert_eq!(
        w.env.counter.by_operation(),
        [("UpdateItem".to_string(), 4)].into(),
        "cold process: a wrong bet + retry on each item"
    );
    // The session bucket (3 a minute) is now empty. A refused attempt: the tenant's reservation,
    // the session's refusal (decided from its old item), the reservation given back — and every
    // counter is left as it was.
    let tenant_before = tenant_tat(&w, T).await;
    let session_before = session_tat(&w, T, "s1").await;
    w.env.counter.reset();
    let r = w.connect(T, "s1", "c4", &limits).await;
    assert_eq!(r.status_code, 429);
    assert_eq!(body_json(&r)["violated-policies"][0], "sessionPerMinute");
    assert_eq!(r.headers.get("retry-after").unwrap(), "20");
    assert_eq!(
        w.env.counter.by_operation(),
        [("UpdateItem".to_string(), 3)].into(),
        "reserve, refused, give back"
    );
    assert_eq!(tenant_tat(&w, T).await, tenant_before);
    assert_eq!(session_tat(&w, T, "s1").await, session_before);
    assert_eq!(w.count(T).await, Some(3));
    let ids = w.session(T, "s1").await.unwrap().connection_ids;
    assert_eq!(ids.len(), 3);
    assert!(!ids.contains(&"c4".to_string()));
}

#[tokio::test]
async fn the_authorizer_precheck_reads_the_gcra_buckets_in_its_one_batch() {
    let w = World::new().await;
    let limits = gcra(Limits::example(100, 2, 100, 1_000, 300, 60));
    w.put_tenant(T, limits).await;
    w.put_session(T, "s1").await;
    let t0 = freeze_at(&w, 5);
    assert_eq!(w.authorize(T, "s1").await, Decision::Allow);
    assert_eq!(w.connect(T, "s1", "c1", &limits).await.status_code, 200);
    w.env.counter.reset();
    assert_eq!(w.authorize(T, "s1").await, Decision::Allow);
    assert_eq!(w.env.counter.total(), 1, "warm: one BatchGetItem");
    assert_eq!(w.connect(T, "s1", "c2", &limits).await.status_code, 200);
    // The session bucket is empty: denied on the stored TAT, still one call, nothing written.
    let before = session_tat(&w, T, "s1").await;
    w.env.counter.reset();
    assert!(matches!(
        w.authorize(T, "s1").await,
        Decision::Deny(reason) if reason.contains("sessionPerMinute")
    ));
    assert_eq!(w.env.counter.total(), 1);
    assert_eq!(session_tat(&w, T, "s1").await, before);
    // Half a minute later one connection has refilled.
    w.env.clock.set(t0.plus(Duration::from_secs(30)));
    assert_eq!(w.authorize(T, "s1").await, Decision::Allow);
}

#[tokio::test]
async fn rate_algorithm_is_stored_defaults_to_fixed_and_rejects_unknown_values() {
    let w = World::new().await;
    let limits = Limits::example(5, 5, 100, 1_000, 300, 60);
    let t = shared::ids::TenantId::parse(T).unwrap();
    // Round trip of a gcra tenant.
    w.put_tenant(T, gcra(limits)).await;
    let got = shared::tenant::store::get(w.deps(), &t)
        .await
        .unwrap()
        .unwrap();
    assert_eq!(got.limits.rate_algorithm, WindowAlgorithm::Gcra);
    // A row without the attribute (as the AWS WebSocket sample writes them): fixed.
    let put_raw = |alg: Option<&str>| {
        let mut req = w
            .deps()
            .dynamo
            .put_item()
            .table_name(&w.deps().tables.tenants)
            .item("tenantId", AttributeValue::S(T.into()));
        for (k, v) in limits.fields() {
            req = req.item(k, AttributeValue::N(v.to_string()));
        }
        if let Some(a) = alg {
            req = req.item("rateAlgorithm", AttributeValue::S(a.into()));
        }
        req.send()
    };
    put_raw(None).await.unwrap();
    let got = shared::tenant::store::get(w.deps(), &t)
        .await
        .unwrap()
        .unwrap();
    assert_eq!(got.limits, limits);
    assert_eq!(got.limits.rate_algorithm, WindowAlgorithm::Fixed);
    // The authorizer passes it on; $connect (here reading the row itself) counts in fixed windows.
    w.put_session(T, "s1").await;
    freeze_at(&w, 5);
    let r = authorizer::handle(w.deps(), &w.authorizer, w.authorizer_event(T, "s1").await)
        .await
        .unwrap();
    assert_eq!(authorizer::decision(&r), Decision::Allow);
    assert_eq!(r.context["rateAlgorithm"], "fixed");
    let r = connect::handle(
        w.deps(),
        &w.connect,
        ws_event("connect/connect.json", T, "s1", "c1", None),
    )
    .await
    .unwrap();
    assert_eq!(r.status_code, 200);
    assert_eq!(w.tenant_minute_count(T).await, 1);
    assert_eq!(w.counter_number(T, "connTat").await, None);
    // An unknown value is a malformed row, not a silent fallback.
    put_raw(Some("sliding")).await.unwrap();
    let err = shared::tenant::store::get(w.deps(), &t).await.unwrap_err();
    assert!(err.to_string().contains("rateAlgorithm"), "{err}");
}

/// Seen in the random-fault soak (decision 2300, seeds 7543, 40311, 40614): a GCRA tenant at its
/// cap, with reservations still settling and other connects moving the bucket between idle and
/// draining, used step 1's attempts on two wrong bets plus the settle waits, and the client got a
/// 503 ("contended") although every attempt had a definite answer. Waiting for reservations to
/// settle must not eat the budget for wrong bets: the connect ends with the tenant's refusal.
#[tokio::test]
async fn settling_at_the_cap_after_wrong_bets_still_answers_the_refusal() {
    let w = World::new().await;
    let limits = gcra(Limits::example(60, 1_000, 100, 2, 300, 60));
    w.put_tenant(T, limits).await;
    w.put_session(T, "a").await;
    let now = freeze_at(&w, 5);
    let counter = |count: i64, tat: i64| {
        std::collections::HashMap::from([
            ("key".to_string(), AttributeValue::S(T.into())),
            (
                "itemCount".to_string(),
                AttributeValue::N(count.to_string()),
            ),
            ("connTat".to_string(), AttributeValue::N(tat.to_string())),
            (
                "reservedAt".to_string(),
                AttributeValue::N(now.as_millis().to_string()),
            ),
        ])
    };
    let (draining, idle) = (now.as_nanos() + 10 * S, now.as_nanos() - S);
    // Attempt 1 bets idle (this process has seen nothing) and meets room in a draining bucket:
    // a wrong bet. Attempt 2 meets the cap with a reservation just made: wait for it to settle.
    // Attempt 3 bets draining and meets room in an idle bucket: a second wrong bet. From then on
    // the tenant stays at its cap, every reservation recent.
    let mut script = vec![counter(1, draining), counter(2, draining), counter(1, idle)];
    script.extend((0..10).map(|_| counter(2, idle)));
    let script = std::sync::Arc::new(script);
    let table = w.deps().tables.counters.clone();
    let matched = table.clone();
    let before = Before::new(
        &w.env.endpoint,
        move |op, body| {
            op == "UpdateItem"
                && body["TableName"] == matched.as_str()
                && body["Key"]["key"]["S"] == T
        },
        move |n, client| {
            let (script, table) = (script.clone(), table.clone());
            Box::pin(async move {
                if let Some(item) = script.get(n) {
                    client
                        .put_item()
                        .table_name(table)
                        .set_item(Some(item.clone()))
                        .send()
                        .await
                        .unwrap();
                }
            })
        },
    );
    let deps = before.deps(w.deps());
    let r = connect::handle(
        &deps,
        &w.connect,
        ws_event("connect/connect.json", T, "a", "c1", Some(&limits)),
    )
    .await
    .unwrap();
    let attempts = before.seen();
    assert_eq!(
        (r.status_code, attempts),
        (429, 9),
        "2 wrong bets, 6 settle waits, then the refusal: {:?}",
        r.body
    );
    assert_eq!(body_json(&r)["violated-policies"][0], "tenantConnections");
    assert_eq!(w.count(T).await, Some(2), "nothing reserved");
}
