//! Sharded tenant connection counters (decision 1502) against DynamoDB Local:
//! 64 concurrent connects never exceed the tenant cap and admit exactly it, every release path
//! (disconnect, session DELETE, TTL sweep) decrements the shard it was charged on (decision 2206) so the shards sum
//! back to 0, the call/WCU cost of each path, and the reconciler refusing to "repair" a sharded
//! tenant.

use std::time::Duration;

use futures::future::join_all;
use serde_json::Value;
use shared::admission::shards;
use shared::reconcile::{self, Outcome, Pause};
use shared::tenant::Limits;

use crate::ws_support::*;

const T: &str = "tenant-sh";
const SHARDS: u64 = 8;

/// Cap 40 over 8 shards (5 each); sessions of 100 and minutes of 1,000 never bind.
fn limits() -> Limits {
    Limits::example(1_000, 1_000, 100, 40, 300, 600).with_connection_shards(SHARDS)
}

/// `$connect` with `limits` in the authorizer context, `connectionShards` included as the
/// authorizer writes it (`context::build`).
async fn connect(w: &World, s: &str, cid: &str, l: &Limits) -> i64 {
    let mut ev = ws_event("connect/connect.json", T, s, cid, Some(l));
    ev.request_context.authorizer.fields.insert(
        shared::tenant::attr::CONNECTION_SHARDS.into(),
        Value::String(l.connection_shards.to_string()),
    );
    connect::handle(w.deps(), &w.connect, ev)
        .await
        .unwrap()
        .status_code
}

/// Every shard's `itemCount` (0 for a shard never written).
async fn shard_counts(w: &World) -> Vec<i64> {
    let mut out = Vec::new();
    for i in 0..SHARDS {
        out.push(w.count(&format!("{T}:shard:{i}")).await.unwrap_or(0));
    }
    out
}

/// The sum of the first `n` shards' counts.
async fn shard_sum(w: &World, n: u64) -> i64 {
    let mut sum = 0;
    for i in 0..n {
        sum += w.count(&format!("{T}:shard:{i}")).await.unwrap_or(0);
    }
    sum
}

async fn held(w: &World, sessions: &[String]) -> usize {
    let mut n = 0;
    for s in sessions {
        n += w.session(T, s).await.map_or(0, |s| s.connection_ids.len());
    }
    n
}

/// 64 connects at once against a cap of 40: exactly 40 admitted, the shards sum to 40 and none
/// holds more than its share; after every disconnect they sum to 0; a second wave (now on
/// shards whose counts went below or above zero) admits exactly 40 again.
#[tokio::test]
async fn sixty_four_concurrent_connects_on_a_sharded_tenant_admit_exactly_the_cap() {
    let w = World::new().await;
    let l = limits();
    w.put_tenant(T, l).await;
    let sessions: Vec<String> = (0..8).map(|i| format!("s{i}")).collect();
    for s in &sessions {
        w.put_session(T, s).await;
    }
    for wave in 0..2 {
        let attempts = (0..64).map(|i| {
            let s = sessions[i % sessions.len()].clone();
            let w = &w;
            async move {
                let cid = format!("w{wave}-c{i:02}=");
                let status = connect(w, &s, &cid, &l).await;
                (s, cid, status)
            }
        });
        w.env.counter.reset();
        let results = join_all(attempts).await;
        eprintln!(
            "wave {wave}: 64 concurrent sharded connects: {:?}, {:?}",
            w.env.counter.by_operation(),
            w.env.counter.units()
        );
        let admitted: Vec<_> = results.iter().filter(|r| r.2 == 200).collect();
        let refused = results.iter().filter(|r| r.2 == 429).count();
        assert_eq!(admitted.len(), 40, "the tenant cap, exactly (wave {wave})");
        assert_eq!(refused, 24);
        let counts = shard_counts(&w).await;
        assert_eq!(counts.iter().sum::<i64>(), 40, "{counts:?}");
        assert_eq!(held(&w, &sessions).await, 40);
        if wave == 0 {
            // Charged shards never exceed their share (5); later waves may hold credits.
            assert!(counts.iter().all(|c| (0..=5).contains(c)), "{counts:?}");
        }
        // The one `{tenant}` item is not used by a sharded tenant.
        assert_eq!(w.count(T).await, None);
        assert_eq!(
            shards::open_count(w.deps(), &T.parse().unwrap(), SHARDS)
                .await
                .unwrap(),
            40
        );
        for (s, cid, _) in admitted {
            assert_eq!(w.disconnect(T, s, cid).await.status_code, 200);
        }
        let counts = shard_counts(&w).await;
        assert_eq!(counts.iter().sum::<i64>(), 0, "{counts:?}");
        assert_eq!(held(&w, &sessions).await, 0);
    }
}

/// The cost of each path, counted: an admitted connect and a disconnect are 2 UpdateItem each
/// (as unsharded); a connect whose random shard is full reads every shard once (1 BatchGetItem)
/// and writes a shard that had room; a refusal with the tenant full is 1 UpdateItem and 1
/// BatchGetItem. A duplicate disconnect releases nothing.
#[tokio::test]
async fn sharded_paths_cost_what_the_decision_record_states() {
    let w = World::new().await;
    // Cap 2 over 2 shards: one connection each.
    let l = Limits::example(1_000, 1_000, 10, 2, 300, 600).with_connection_shards(2);
    w.put_tenant(T, l).await;
    w.put_session(T, "s1").await;
    w.env.counter.reset();
    assert_eq!(connect(&w, "s1", "a=", &l).await, 200);
    assert_eq!(
        w.env.counter.by_operation(),
        [("UpdateItem".to_string(), 2)].into()
    );
    assert_eq!(w.env.counter.units().write, 2.0);
    // The second connect lands on the free shard (2 UpdateItem) or on the full one (refused
    // there, 1 BatchGetItem, then the free shard and the session: 3 UpdateItem).
    w.env.counter.reset();
    assert_eq!(connect(&w, "s1", "b=", &l).await, 200);
    let ops = w.env.counter.by_operation();
    let direct = [("UpdateItem".to_string(), 2)].into();
    let moved = [
        ("BatchGetItem".to_string(), 1),
        ("UpdateItem".to_string(), 3),
    ]
    .into();
    assert!(ops == direct || ops == moved, "{ops:?}");
    eprintln!("second connect: {ops:?} {:?}", w.env.counter.units());
    // Full: the random shard refuses, one read finds no room anywhere.
    w.env.counter.reset();
    assert_eq!(connect(&w, "s1", "c=", &l).await, 429);
    assert_eq!(
        w.env.counter.by_operation(),
        [
            ("BatchGetItem".to_string(), 1),
            ("UpdateItem".to_string(), 1)
        ]
        .into()
    );
    assert_eq!(w.env.counter.units().write, 1.0);
    // A disconnect: the session write, then the shard `a=` was charged on (decision 2206) beside
    // the cleanup of the release's token.
    let charged = w.session_number(T, "s1", "chg:a=").await.unwrap();
    w.env.counter.reset();
    assert_eq!(w.disconnect(T, "s1", "a=").await.status_code, 200);
    assert_eq!(
        w.env.counter.by_operation(),
        [("UpdateItem".to_string(), 3)].into()
    );
    let key = format!("{T}:shard:{charged}");
    assert!(w.counter_number(&key, "relTotal").await.unwrap_or(0) >= 1);
    // A duplicate disconnect releases nothing: 1 call, the sum stays 1.
    w.env.counter.reset();
    assert_eq!(w.disconnect(T, "s1", "a=").await.status_code, 200);
    assert_eq!(w.env.counter.total(), 1);
    let sum = shard_sum(&w, 2).await;
    assert_eq!(sum, 1);
    // The freed room is usable whichever shard holds it.
    assert_eq!(connect(&w, "s1", "d=", &l).await, 200);
    assert_eq!(connect(&w, "s1", "e=", &l).await, 429);
}

/// Session DELETE and the TTL sweeper release each id on the shard it was charged on (its
/// `chg:{cid}` on the session, decision 2206): the shards sum back to 0. The reconciler repairs leaked reservations
/// of a sharded tenant (one transaction over its shards) down to the truth, not below.
#[tokio::test]
async fn delete_and_sweep_release_to_the_right_shards_and_reconcile_repairs() {
    let w = World::new().await;
    let l = limits();
    w.put_tenant(T, l).await;
    w.put_session(T, "s1").await;
    w.put_session(T, "s2").await;
    for i in 0..10 {
        assert_eq!(connect(&w, "s1", &format!("d{i}="), &l).await, 200);
    }
    for i in 0..6 {
        assert_eq!(connect(&w, "s2", &format!("t{i}="), &l).await, 200);
    }
    assert_eq!(shard_counts(&w).await.iter().sum::<i64>(), 16);
    assert_eq!(
        w.session_number(T, "s1", "connShards").await,
        Some(SHARDS as i64)
    );

    // Two `$connect`s that died after step 1 (no session write): the shards hold 18 for 16.
    let tid: shared::ids::TenantId = T.parse().unwrap();
    let sid: shared::ids::SessionId = "s1".parse().unwrap();
    for _ in 0..2 {
        shared::admission::connect::reserve(
            w.deps(),
            &tid,
            &sid,
            &l,
            &shared::admission::connect::Hints::default(),
        )
        .await
        .unwrap()
        .unwrap();
    }
    assert_eq!(shard_counts(&w).await.iter().sum::<i64>(), 18);
    let reconcile = || async {
        reconcile::run(
            w.deps(),
            &reconcile::Options {
                tenant: Some(T.parse().unwrap()),
                dry_run: false,
                grace: Duration::from_millis(20),
                budget: reconcile::Budget::for_grace(reconcile::MAX_GRACE),
            },
            None,
            |_| async { Ok(w.deps().clone()) },
        )
        .await
        .unwrap()
    };
    let report = reconcile().await;
    assert_eq!(
        report.tenants[0].outcome,
        Outcome::Repaired { from: 18, to: 16 },
        "{report:?}"
    );
    assert_eq!(shard_counts(&w).await.iter().sum::<i64>(), 16);
    // Every shard carries the truth's time (a later TTL sweep of a session the truth left out
    // does not decrement again), and a second run finds nothing to do.
    for i in 0..SHARDS {
        let key = format!("{T}:shard:{i}");
        assert!(w.counter_number(&key, "truthAt").await.is_some(), "{key}");
    }
    let again = reconcile().await;
    assert_eq!(again.tenants[0].outcome, Outcome::Consistent, "{again:?}");

    let (status, body) = w
        .session_call("DELETE", &[("tenantId", T), ("sessionId", "s1")], None)
        .await;
    assert_eq!(status, 200, "{body}");
    assert_eq!(shard_counts(&w).await.iter().sum::<i64>(), 6);

    // s2 vanishes by TTL: the stream's old image carries its ids, `connShards` and each id's
    // charged counter (`chg:{cid}`), as DynamoDB's image of the item does.
    let ids: Vec<String> = w.session(T, "s2").await.unwrap().connection_ids;
    let mut old_image = serde_json::json!({
        "tenantId": {"S": T}, "sessionId": {"S": "s2"}, "sessionTTL": {"N": "1"},
        "connectionIds": {"SS": ids}, "connShards": {"N": SHARDS.to_string()}
    });
    for id in &ids {
        let charge = format!("chg:{id}");
        let shard = w.session_number(T, "s2", &charge).await.unwrap();
        old_image[&charge] = serde_json::json!({"N": shard.to_string()});
    }
    let mut record = sample("ttl-sweeper/ttl-expiry.json")["Records"][0].clone();
    record["eventID"] = serde_json::json!("ttl-sh-s2");
    // Deleted after the reconciler's truth (which still held s2): the sweep must release it.
    let later = shared::clock::Clock::now(&w.env.clock).as_secs() + 600;
    record["dynamodb"]["ApproximateCreationDateTime"] = serde_json::json!(later);
    record["dynamodb"]["OldImage"] = old_image;
    let ev: aws_lambda_events::dynamodb::Event = typed(serde_json::json!({ "Records": [record] }));
    for _ in 0..2 {
        // Delivered twice: released once.
        let r = ttl_sweeper::handle(w.deps(), &w.sweeper, ev.clone()).await;
        assert!(r.batch_item_failures.is_empty());
        assert_eq!(shard_counts(&w).await.iter().sum::<i64>(), 0);
    }
}

/// An unsharded tenant is untouched by all this: its one `{tenant}` item, no `connShards` on the
/// session, no shard item.
#[tokio::test]
async fn an_unsharded_tenant_keeps_its_one_counter() {
    let w = World::new().await;
    let l = Limits::example(1_000, 1_000, 100, 40, 300, 600);
    w.put_tenant(T, l).await;
    w.put_session(T, "s1").await;
    w.env.counter.reset();
    assert_eq!(connect(&w, "s1", "u=", &l).await, 200);
    assert_eq!(
        w.env.counter.by_operation(),
        [("UpdateItem".to_string(), 2)].into()
    );
    assert_eq!(w.count(T).await, Some(1));
    assert_eq!(w.session_number(T, "s1", "connShards").await, None);
    assert_eq!(
        w.counter_keys().await,
        vec![T.to_string(), format!("{T}:sessions")]
    );
    assert_eq!(w.disconnect(T, "s1", "u=").await.status_code, 200);
    assert_eq!(w.count(T).await, Some(0));
}

/// A connect the session refuses gives its unit back to the shard it charged: 30 connects into
/// sessions of 2 (6 sessions) on a cap of 40 over 8 shards admit 12 and the shards sum to 12;
/// their per-minute shares spent only for the admitted ones.
#[tokio::test]
async fn a_session_refusal_gives_back_to_the_charged_shard() {
    let w = World::new().await;
    let l = Limits::example(1_000, 1_000, 2, 40, 300, 600).with_connection_shards(SHARDS);
    w.put_tenant(T, l).await;
    let sessions: Vec<String> = (0..6).map(|i| format!("s{i}")).collect();
    for s in &sessions {
        w.put_session(T, s).await;
    }
    let attempts = (0..30).map(|i| {
        let s = sessions[i % sessions.len()].clone();
        let w = &w;
        async move { connect(w, &s, &format!("r{i:02}="), &l).await }
    });
    let statuses = join_all(attempts).await;
    assert_eq!(statuses.iter().filter(|s| **s == 200).count(), 12);
    assert_eq!(shard_counts(&w).await.iter().sum::<i64>(), 12);
    assert_eq!(held(&w, &sessions).await, 12);
    let mut minute = 0;
    for i in 0..SHARDS {
        let key = format!("{T}:shard:{i}");
        if w.counter_number(&key, "connMinute").await == Some(w.minute()) {
            minute += w.counter_number(&key, "connMinuteCount").await.unwrap_or(0);
        }
    }
    assert_eq!(minute, 12, "refused connects spent no minute share");
}

/// `tenantPerMinute` is sharded too: 16 a minute over 8 shards (2 each), 24 connects in one
/// frozen minute admit exactly 16 and the rest are refused naming `tenantPerMinute`; under GCRA
/// the same holds with each shard a bucket of its share.
#[tokio::test]
async fn the_tenant_minute_is_shared_out_exactly() {
    for alg in [
        shared::tenant::WindowAlgorithm::Fixed,
        shared::tenant::WindowAlgorithm::Gcra,
    ] {
        let w = World::new().await;
        let l = Limits::example(16, 1_000, 100, 100, 300, 600)
            .with_connection_shards(SHARDS)
            .with_rate_algorithm(alg);
        w.put_tenant(T, l).await;
        w.put_session(T, "s1").await;
        let attempts = (0..24).map(|i| {
            let w = &w;
            async move {
                let cid = format!("m{i:02}=");
                let mut ev = ws_event("connect/connect.json", T, "s1", &cid, Some(&l));
                ev.request_context.authorizer.fields.insert(
                    shared::tenant::attr::CONNECTION_SHARDS.into(),
                    Value::String(SHARDS.to_string()),
                );
                connect::handle(w.deps(), &w.connect, ev).await.unwrap()
            }
        });
        let results = join_all(attempts).await;
        let admitted = results.iter().filter(|r| r.status_code == 200).count();
        assert_eq!(admitted, 16, "{alg:?}");
        for r in results.iter().filter(|r| r.status_code != 200) {
            assert_eq!(r.status_code, 429);
            let body = body_json(r);
            assert_eq!(body["violated-policies"][0], "tenantPerMinute", "{alg:?}");
        }
        assert_eq!(shard_counts(&w).await.iter().sum::<i64>(), 16);
    }
}

/// A shadow tenant over its cap: every connect gets in (the would-refused ones re-admitted with the
/// caps lifted, on the same shards), the shards count every connection, and disconnecting them
/// all brings the shards back to 0.
#[tokio::test]
async fn a_shadow_sharded_tenant_counts_every_connection_and_releases_them() {
    let w = World::new().await;
    let l = Limits::example(1_000, 1_000, 100, 8, 300, 600)
        .with_connection_shards(4)
        .with_enforcement(shared::tenant::Enforcement::Shadow);
    w.put_tenant(T, l).await;
    w.put_session(T, "s1").await;
    let attempts = (0..20).map(|i| {
        let w = &w;
        async move {
            let mut ev = ws_event(
                "connect/connect.json",
                T,
                "s1",
                &format!("h{i:02}="),
                Some(&l),
            );
            ev.request_context.authorizer.fields.insert(
                shared::tenant::attr::CONNECTION_SHARDS.into(),
                Value::String("4".into()),
            );
            connect::handle(w.deps(), &w.connect, ev)
                .await
                .unwrap()
                .status_code
        }
    });
    let statuses = join_all(attempts).await;
    assert!(statuses.iter().all(|s| *s == 200), "{statuses:?}");
    assert_eq!(shard_sum(&w, 4).await, 20);
    for i in 0..20 {
        assert_eq!(
            w.disconnect(T, "s1", &format!("h{i:02}="))
                .await
                .status_code,
            200
        );
    }
    assert_eq!(shard_sum(&w, 4).await, 0);
}

async fn reconcile_sharded(w: &World, grace_ms: u64) -> reconcile::Report {
    let grace = Duration::from_millis(grace_ms);
    reconcile_sharded_paced(w, |_| tokio::time::sleep(grace)).await
}

/// A run (no probing) whose graces are `pause`: what a test does in it is half-way when the phase
/// ends.
async fn reconcile_sharded_paced<P, F>(w: &World, pause: P) -> reconcile::Report
where
    P: FnMut(Pause) -> F,
    F: std::future::Future<Output = ()>,
{
    let options = reconcile::Options {
        tenant: Some(T.parse().unwrap()),
        dry_run: false,
        grace: Duration::ZERO,
        budget: reconcile::Budget::for_grace(reconcile::MAX_GRACE),
    };
    let scoped = |_| async { Ok(w.deps().clone()) };
    reconcile::run_paced(w.deps(), &options, None, scoped, pause)
        .await
        .unwrap()
}

async fn reserve_only(w: &World, l: &Limits) -> shared::admission::connect::Reservation {
    shared::admission::connect::reserve(
        w.deps(),
        &T.parse().unwrap(),
        &"s1".parse().unwrap(),
        l,
        &shared::admission::connect::Hints::default(),
    )
    .await
    .unwrap()
    .unwrap()
}

/// 0306's races on a sharded tenant: a `$connect` half-way through (reserved before the run,
/// joined during it) is never repaired away; a leak is repaired while a connect lands between the
/// read and the repair, and that connection keeps its unit.
#[tokio::test]
async fn a_sharded_repair_never_goes_below_the_connections_held() {
    let w = World::new().await;
    let l = limits();
    w.put_tenant(T, l).await;
    w.put_session(T, "s1").await;
    let reservation = reserve_only(&w, &l).await;
    let joined = std::cell::Cell::new(false);
    let (wr, res, lr, j) = (&w, &reservation, &l, &joined);
    let report = reconcile_sharded_paced(&w, |p| async move {
        // Its session write lands inside the first grace, after the count was read.
        if p == Pause::AfterProbe {
            let req = shared::admission::Request {
                deps: wr.deps(),
                t: &T.parse().unwrap(),
                sid: &"s1".parse().unwrap(),
                cid: &"in-flight=".parse().unwrap(),
                limits: lr,
                nonce: None,
                ticket: None,
            };
            let hints = shared::admission::connect::Hints::default();
            let a = shared::admission::connect::join(req, &hints, res).await;
            j.set(matches!(
                a.unwrap(),
                shared::admission::connect::Admission::Admitted
            ));
        }
    })
    .await;
    assert!(joined.get(), "the in-flight connect is admitted");
    assert_eq!(report.tenants[0].outcome, Outcome::Consistent, "{report:?}");
    assert_eq!(shard_sum(&w, SHARDS).await, 1, "never below the connection");

    reserve_only(&w, &l).await;
    let status = std::cell::Cell::new(0);
    let st = &status;
    let report = reconcile_sharded_paced(&w, |p| async move {
        // Between the read (after one grace) and the repair (after two).
        if p == Pause::AfterRead {
            st.set(connect(wr, "s1", "meanwhile=", lr).await);
        }
    })
    .await;
    assert_eq!(status.get(), 200);
    assert_eq!(
        report.tenants[0].outcome,
        Outcome::Repaired { from: 3, to: 2 },
        "{report:?}"
    );
    assert_eq!(shard_sum(&w, SHARDS).await, 2, "the two connections held");
    let report = reconcile_sharded(&w, 0).await;
    assert_eq!(report.tenants[0].outcome, Outcome::Consistent);
}

/// A session counted on another layout than the row's (the tenant was resharded with connections
/// open, which the CLI refuses without `--reshard-drained`): the reconciler skips the tenant and
/// writes nothing.
#[tokio::test]
async fn a_resharded_tenant_is_skipped_not_repaired() {
    let w = World::new().await;
    let l = limits();
    w.put_tenant(T, l).await;
    w.put_session(T, "s1").await;
    assert_eq!(connect(&w, "s1", "x=", &l).await, 200);
    w.put_tenant(T, l.with_connection_shards(4)).await;
    reserve_only(&w, &l.with_connection_shards(4)).await;
    let before = shard_counts(&w).await;
    let report = reconcile_sharded(&w, 20).await;
    assert!(
        matches!(&report.tenants[0].outcome, Outcome::Skipped { reason } if reason.contains("connectionShards changed")),
        "{report:?}"
    );
    assert_eq!(shard_counts(&w).await, before, "nothing written");
}
