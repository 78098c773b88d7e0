//! The reconciler (issue 12, defect 7) against DynamoDB Local and the local Management API: drift
//! made on purpose is repaired, a dry run changes nothing, a connect in flight is never undercounted,
//! a moving count is left alone, and a late TTL sweep does not subtract what a repair already did.

use std::time::Duration;

use futures::future::join_all;
use serde_json::json;
use shared::admission::connect::{self as admission, Admission, Hints};
use shared::admission::reconcile::{self, Options, Outcome, Probe, Report};
use shared::clock::Clock;
use shared::gateway::Gateway;
use shared::ids::{ConnectionId, SessionId, TenantId};
use shared::tenant::Limits;

use crate::ws_support::*;

const T: &str = "tenant-r";
const LIMITS: Limits = Limits::example(100, 100, 10, 100, 300, 60);

fn tid() -> TenantId {
    TenantId::parse(T).unwrap()
}

fn sid(s: &str) -> SessionId {
    SessionId::parse(s).unwrap()
}

async fn reconcile(w: &World, dry_run: bool, grace_ms: u64) -> Report {
    let gateway = Gateway::local(&w.api.url());
    let probe = Probe {
        gateway: &gateway,
        endpoint: w.api.url(),
    };
    let options = Options {
        tenant: Some(tid()),
        dry_run,
        grace: Duration::from_millis(grace_ms),
    };
    let deps = w.deps().clone();
    reconcile::run(w.deps(), &options, Some(&probe), |_| {
        let d = deps.clone();
        async move { Ok(d) }
    })
    .await
    .unwrap()
}

/// A `$connect` that reserved on the tenant's counter and then died before its session write.
async fn reserve_only(w: &World, s: &str) -> admission::Reservation {
    admission::reserve(w.deps(), &tid(), &sid(s), &LIMITS, &Hints::default())
        .await
        .unwrap()
        .unwrap()
}

async fn delete_session_row(w: &World, s: &str) {
    w.deps()
        .dynamo
        .delete_item()
        .table_name(&w.deps().tables.sessions)
        .set_key(Some(shared::session::store::key(&tid(), &sid(s))))
        .send()
        .await
        .unwrap();
}

/// The three leaks of the issue, one live connection, and the count 3 too high.
async fn drift(w: &World) {
    w.put_tenant(T, LIMITS).await;
    for s in ["s1", "s2", "s3"] {
        w.put_session(T, s).await;
    }
    // A connect whose second write never happened.
    reserve_only(w, "s1").await;
    // A lost $disconnect: the socket is gone, its id still in the session.
    assert_eq!(w.connect(T, "s1", "gone-1", &LIMITS).await.status_code, 200);
    w.recorder.mark_gone("gone-1");
    // A sweeper record never delivered: the session row is gone, its count not released.
    assert_eq!(
        w.connect(T, "s2", "swept-1", &LIMITS).await.status_code,
        200
    );
    delete_session_row(w, "s2").await;
    // A healthy connection.
    assert_eq!(w.connect(T, "s3", "live-1", &LIMITS).await.status_code, 200);
    assert_eq!(w.count(T).await, Some(4));
}

fn ttl_record(s: &str, ids: &[&str], event_id: &str, deleted_at_secs: i64) -> serde_json::Value {
    let mut v = sample("ttl-sweeper/ttl-expiry.json")["Records"][0].clone();
    v["eventID"] = json!(event_id);
    v["dynamodb"]["ApproximateCreationDateTime"] = json!(deleted_at_secs);
    v["dynamodb"]["Keys"] = json!({"tenantId": {"S": T}, "sessionId": {"S": s}});
    v["dynamodb"]["OldImage"] = json!({"tenantId": {"S": T}, "sessionId": {"S": s},
        "sessionTTL": {"N": "1"}, "connectionIds": {"SS": ids}});
    v
}

#[tokio::test]
async fn drift_made_on_purpose_is_repaired_and_a_late_sweep_does_not_subtract_twice() {
    let w = World::new().await;
    drift(&w).await;
    let report = reconcile(&w, false, 50).await;
    let r = &report.tenants[0];
    eprintln!("{}", serde_json::to_string(&report).unwrap());
    assert_eq!(r.stale_released, vec!["gone-1".to_string()]);
    // The stale id was released first (4 → 3); the truth is the one live connection.
    assert_eq!(r.counted, Some(3));
    assert_eq!(r.truth, 1);
    assert_eq!(r.outcome, Outcome::Repaired { from: 3, to: 1 });
    assert_eq!(report.repaired(), 1);
    assert_eq!(w.count(T).await, Some(1));
    assert!(w.session(T, "s1").await.unwrap().connection_ids.is_empty());
    assert_eq!(
        w.session(T, "s3").await.unwrap().connection_ids,
        vec!["live-1"]
    );

    // The undelivered sweep of s2 turns up after the repair: its deletion is older than the truth,
    // so it must not decrement again.
    let now = w.env.clock.now().as_secs();
    let late = ttl_record("s2", &["swept-1"], "late-s2", now - 10);
    let ev: aws_lambda_events::dynamodb::Event = typed(json!({ "Records": [late] }));
    let res = ttl_sweeper::handle(w.deps(), &w.sweeper, ev).await;
    assert!(res.batch_item_failures.is_empty());
    assert_eq!(w.count(T).await, Some(1));
    // A session deleted by TTL after the truth was read still releases through the sweeper.
    w.put_session(T, "s4").await;
    assert_eq!(w.connect(T, "s4", "late-1", &LIMITS).await.status_code, 200);
    assert_eq!(w.count(T).await, Some(2));
    delete_session_row(&w, "s4").await;
    w.env.clock.advance(Duration::from_secs(30));
    let now = w.env.clock.now().as_secs();
    let ev: aws_lambda_events::dynamodb::Event =
        typed(json!({ "Records": [ttl_record("s4", &["late-1"], "s4-del", now)] }));
    let res = ttl_sweeper::handle(w.deps(), &w.sweeper, ev).await;
    assert!(res.batch_item_failures.is_empty());
    assert_eq!(w.count(T).await, Some(1));
    // Nothing left to repair; the admissions still work from the repaired count.
    let again = reconcile(&w, false, 0).await;
    assert_eq!(again.tenants[0].outcome, Outcome::Consistent);
    assert_eq!(w.disconnect(T, "s3", "live-1").await.status_code, 200);
    assert_eq!(w.count(T).await, Some(0));
}

#[tokio::test]
async fn a_dry_run_reports_and_changes_nothing() {
    let w = World::new().await;
    drift(&w).await;
    let ver = w.counter_number(T, "ver").await;
    let keys = w.counter_keys().await;
    let report = reconcile(&w, true, 20).await;
    let r = &report.tenants[0];
    assert!(report.dry_run);
    assert_eq!(r.stale_released, vec!["gone-1".to_string()]);
    assert_eq!(r.counted, Some(4));
    assert_eq!(r.truth, 1, "the live connection; the stale one counted out");
    assert_eq!(r.outcome, Outcome::WouldRepair { from: 4, to: 1 });
    assert_eq!(w.count(T).await, Some(4));
    assert_eq!(w.counter_number(T, "ver").await, ver);
    assert_eq!(w.counter_number(T, "truthAt").await, None);
    assert_eq!(w.counter_keys().await, keys);
    assert_eq!(
        w.session(T, "s1").await.unwrap().connection_ids,
        vec!["gone-1"]
    );
}

/// The grace is what keeps a half-way `$connect` counted: its reservation was made before the
/// count was read, its session write lands during the grace, and the truth then includes it.
#[tokio::test]
async fn a_connect_in_flight_during_reconcile_is_never_undercounted() {
    let w = World::new().await;
    w.put_tenant(T, LIMITS).await;
    w.put_session(T, "s1").await;
    let reservation = reserve_only(&w, "s1").await;
    assert_eq!(w.count(T).await, Some(1));
    let cid = ConnectionId::parse("in-flight").unwrap();
    let join = async {
        tokio::time::sleep(Duration::from_millis(100)).await;
        admission::join(
            w.deps(),
            &tid(),
            &sid("s1"),
            &cid,
            &LIMITS,
            &Hints::default(),
            &reservation,
        )
        .await
        .unwrap()
    };
    let (report, joined) = tokio::join!(reconcile(&w, false, 300), join);
    assert!(matches!(joined, Admission::Admitted));
    assert_eq!(report.tenants[0].outcome, Outcome::Consistent);
    assert_eq!(w.count(T).await, Some(1), "never below the connection");
    assert_eq!(
        w.session(T, "s1").await.unwrap().connection_ids,
        vec!["in-flight"]
    );

    // Without a grace the same race undercounts — why the grace must exceed a connect's deadline.
    let reservation = reserve_only(&w, "s1").await;
    assert_eq!(w.count(T).await, Some(2));
    let report = reconcile(&w, false, 0).await;
    assert_eq!(
        report.tenants[0].outcome,
        Outcome::Repaired { from: 2, to: 1 }
    );
    let late = ConnectionId::parse("late").unwrap();
    let joined = admission::join(
        w.deps(),
        &tid(),
        &sid("s1"),
        &late,
        &LIMITS,
        &Hints::default(),
        &reservation,
    )
    .await
    .unwrap();
    assert!(matches!(joined, Admission::Admitted));
    assert_eq!(w.count(T).await, Some(1), "two connections, counted once");
    // The next run (nothing in flight) raises it back to the truth.
    let report = reconcile(&w, false, 0).await;
    assert_eq!(
        report.tenants[0].outcome,
        Outcome::Repaired { from: 1, to: 2 }
    );
    assert_eq!(w.count(T).await, Some(2));
}

/// A count that moves while the run waits (a connect admitted meanwhile) is left for the next run.
#[tokio::test]
async fn a_moving_count_is_busy_and_left_alone() {
    let w = World::new().await;
    w.put_tenant(T, LIMITS).await;
    w.put_session(T, "s1").await;
    reserve_only(&w, "s1").await;
    let connect = async {
        tokio::time::sleep(Duration::from_millis(300)).await;
        w.connect(T, "s1", "meanwhile", &LIMITS).await.status_code
    };
    let (report, status) = tokio::join!(reconcile(&w, false, 200), connect);
    assert_eq!(status, 200);
    assert_eq!(report.tenants[0].outcome, Outcome::Busy);
    assert_eq!(w.count(T).await, Some(2), "the leak and the new connection");
    let report = reconcile(&w, false, 0).await;
    assert_eq!(
        report.tenants[0].outcome,
        Outcome::Repaired { from: 2, to: 1 }
    );
    assert_eq!(w.count(T).await, Some(1));
}

/// The scheduled function runs on the sample events (every tenant; one tenant dry) and refuses a
/// malformed one.
#[tokio::test]
async fn the_reconciler_function_runs_the_sample_events() {
    let w = World::new().await;
    w.put_tenant("tenant-1", LIMITS).await;
    w.put_tenant("tenant-2", LIMITS).await;
    w.put_session("tenant-1", "s1").await;
    assert_eq!(
        w.connect("tenant-1", "s1", "c1", &LIMITS).await.status_code,
        200
    );
    admission::reserve(
        w.deps(),
        &TenantId::parse("tenant-1").unwrap(),
        &sid("s1"),
        &LIMITS,
        &Hints::default(),
    )
    .await
    .unwrap()
    .unwrap();
    let vars = shared::config::Vars::from_pairs([
        ("TURNSTILE_RECONCILE_GRACE_SECS", "0".to_string()),
        ("TURNSTILE_MANAGEMENT_ENDPOINT", w.api.url()),
    ]);
    let config = reconciler::Config::from_vars(&vars).unwrap();
    assert_eq!(config.grace, Duration::ZERO);
    let state = reconciler::State::new(&config, Gateway::local(&w.api.url()));
    let dry = reconciler::handle(
        w.deps(),
        &state,
        sample("reconciler/one-tenant-dry-run.json"),
    )
    .await
    .unwrap();
    assert_eq!(dry.tenants.len(), 1);
    assert_eq!(
        dry.tenants[0].outcome,
        Outcome::WouldRepair { from: 2, to: 1 }
    );
    assert_eq!(w.count("tenant-1").await, Some(2));
    let all = reconciler::handle(w.deps(), &state, sample("reconciler/scheduled.json"))
        .await
        .unwrap();
    let outcomes: Vec<_> = all
        .tenants
        .iter()
        .map(|t| (t.tenant_id.as_str(), t.outcome.clone()))
        .collect();
    assert_eq!(
        outcomes,
        vec![
            ("tenant-1", Outcome::Repaired { from: 2, to: 1 }),
            ("tenant-2", Outcome::Consistent),
        ]
    );
    assert_eq!(w.count("tenant-1").await, Some(1));
    // A malformed event is refused, nothing touched.
    let err = reconciler::handle(w.deps(), &state, json!({"tenantId": "a:b"}))
        .await
        .unwrap_err();
    assert!(err.to_string().contains("tenantId"), "{err}");
    let err = reconciler::handle(w.deps(), &state, json!({"detail": {"dryRun": "yes"}}))
        .await
        .unwrap_err();
    assert!(err.to_string().contains("dryRun"), "{err}");
    assert!(
        reconciler::Config::from_vars(&shared::config::Vars::from_pairs([(
            "TURNSTILE_RECONCILE_GRACE_SECS",
            "soon".to_string()
        )]))
        .is_err()
    );
}

/// Connects and disconnects churn while the reconciler runs again and again: it never repairs the
/// count below the connections held, the caps hold throughout, and at rest the count is the truth.
#[tokio::test]
async fn reconciling_under_churn_never_undercounts() {
    let w = World::new().await;
    let limits = Limits::example(10_000, 10_000, 10, 30, 300, 60);
    w.put_tenant(T, limits).await;
    let sessions = ["a", "b", "c", "d"];
    for s in sessions {
        w.put_session(T, s).await;
    }
    let stop = std::sync::atomic::AtomicBool::new(false);
    let churn = |k: usize| {
        let (w, stop) = (&w, &stop);
        async move {
            let mut admitted = 0;
            let mut i = 0;
            while !stop.load(std::sync::atomic::Ordering::Relaxed) {
                let s = sessions[(k + i) % sessions.len()];
                let cid = format!("w{k}-{i}");
                if k == 0 && i % 10 == 5 {
                    // A connect that dies after its reservation: a leak to repair.
                    admission::reserve(w.deps(), &tid(), &sid(s), &limits, &Hints::default())
                        .await
                        .unwrap()
                        .ok();
                } else if w.connect(T, s, &cid, &limits).await.status_code == 200 {
                    admitted += 1;
                    if i % 4 != 0 {
                        w.disconnect(T, s, &cid).await;
                    }
                }
                i += 1;
            }
            admitted
        }
    };
    let watch = async {
        let mut runs = Vec::new();
        for _ in 0..6 {
            runs.push(reconcile(&w, false, 60).await.tenants[0].outcome.clone());
            let mut held = 0;
            for s in sessions {
                held += w.session(T, s).await.unwrap().connection_ids.len();
            }
            assert!(held <= 30, "tenant cap: {held}");
        }
        stop.store(true, std::sync::atomic::Ordering::Relaxed);
        runs
    };
    let (runs, admitted) = tokio::join!(watch, join_all((0..8).map(churn)));
    eprintln!("reconcile outcomes under churn: {runs:?}; admitted per worker {admitted:?}");
    assert!(admitted.iter().sum::<i32>() > 0);
    let mut held = 0;
    for s in sessions {
        held += w.session(T, s).await.unwrap().connection_ids.len() as i64;
    }
    assert!(held <= 30);
    // At rest the count is at least what the sessions hold (leaks only ever make it higher, and no
    // repair went below the truth); one more run at rest brings it to exactly that.
    let count = w.count(T).await.unwrap();
    assert!(count >= held, "count {count} < held {held}");
    let last = reconcile(&w, false, 0).await;
    eprintln!(
        "at rest: count {count}, held {held}: {:?}",
        last.tenants[0].outcome
    );
    assert!(matches!(
        last.tenants[0].outcome,
        Outcome::Consistent | Outcome::Repaired { .. }
    ));
    assert_eq!(w.count(T).await, Some(held));
}
