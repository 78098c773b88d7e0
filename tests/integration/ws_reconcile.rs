//! The reconciler against DynamoDB Local and the local Management API: drift
//! made on purpose is repaired, a dry run changes nothing, a connect in flight is never undercounted,
//! a leak is repaired under load, a probe error skips nothing, and a late TTL sweep does not subtract
//! what a repair already did (even from a clock running behind).

use std::time::Duration;

use futures::future::join_all;
use serde_json::json;
use shared::admission::connect::{self as admission, Admission, Hints};
use shared::clock::Clock;
use shared::ids::{ConnectionId, SessionId, TenantId};
use shared::reconcile::{self, Outcome, Pause, Report};
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
    reconcile_with(w.deps(), &w.api.url(), dry_run, grace_ms).await
}

/// A run with these deps (e.g. another clock) and this Management API endpoint.
async fn reconcile_with(
    deps: &shared::Deps,
    endpoint: &str,
    dry_run: bool,
    grace_ms: u64,
) -> Report {
    reconcile_tenant(
        deps,
        &tid(),
        endpoint,
        dry_run,
        Duration::from_millis(grace_ms),
    )
    .await
}

/// A run whose graces are `pause`: what a test does in it is half-way when the phase ends.
async fn reconcile_paced<P, F>(w: &World, pause: P) -> Report
where
    P: FnMut(Pause) -> F,
    F: std::future::Future<Output = ()>,
{
    reconcile_tenant_paced(w.deps(), &tid(), &w.api.url(), false, Duration::ZERO, pause).await
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
    w.env
        .clock
        .advance(shared::admission::release::TRUTH_MARGIN + Duration::from_secs(30));
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

/// The grace is what keeps a half-way `$connect` counted, in the order the proof is about (issue
/// 22): the reservation lands after phase 1 read the counter and before the phase-2 read (so it is
/// in `C` and in the growth of `resvTotal`), and the session write lands after the truth read (so
/// the truth leaves it out). Each write happens inside the reconciler's own pause, not on a timer.
/// Only `in_flight` keeps the repair from taking the connection's unit away.
#[tokio::test]
async fn a_connect_in_flight_during_reconcile_is_never_undercounted() {
    let w = World::new().await;
    w.put_tenant(T, LIMITS).await;
    w.put_session(T, "s1").await;
    let cid = ConnectionId::parse("in-flight").unwrap();
    let reservation = std::cell::RefCell::new(None);
    let joined = std::cell::Cell::new(false);
    let (wr, res, c, j) = (&w, &reservation, &cid, &joined);
    let report = reconcile_paced(&w, |p| async move {
        match p {
            // Reserved between phase 1 (the counter before) and phase 2 (the read).
            Pause::AfterProbe => {
                *res.borrow_mut() = Some(reserve_only(wr, "s1").await);
            }
            // Joined after the truth read, before the repair.
            Pause::AfterRead => {
                let r = res
                    .borrow_mut()
                    .take()
                    .expect("reserved in the first pause");
                let req = shared::admission::Request {
                    deps: wr.deps(),
                    t: &tid(),
                    sid: &sid("s1"),
                    cid: c,
                    limits: &LIMITS,
                    nonce: None,
                    ticket: None,
                };
                let a = admission::join(req, &Hints::default(), &r).await.unwrap();
                j.set(matches!(a, Admission::Admitted));
            }
        }
    })
    .await;
    let r = &report.tenants[0];
    assert!(joined.get(), "the in-flight connect is admitted");
    // The read counted the reservation (C = 1), the truth did not (T = 0): the one unit in flight
    // (the reservation made since phase 1) is what keeps it.
    assert_eq!((r.counted, r.truth, r.in_flight), (Some(1), 0, 1), "{r:?}");
    assert_eq!(r.outcome, Outcome::Busy);
    assert_eq!(w.count(T).await, Some(1), "never below the connection");
    assert_eq!(
        w.session(T, "s1").await.unwrap().connection_ids,
        vec!["in-flight"]
    );
    // At rest the next run finds the count exact.
    let report = reconcile(&w, false, 0).await;
    assert_eq!(report.tenants[0].outcome, Outcome::Consistent);

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
        shared::admission::Request {
            deps: w.deps(),
            t: &tid(),
            sid: &sid("s1"),
            cid: &late,
            limits: &LIMITS,
            nonce: None,
            ticket: None,
        },
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

/// Review finding 6: a count that moves while the run waits (a connect admitted meanwhile) no longer
/// makes the run give up (before: `Busy`, for ever on a busy tenant): the leak measured at the read
/// is subtracted, and the connection admitted meanwhile keeps its unit.
#[tokio::test]
async fn a_leak_is_repaired_while_a_connect_lands_during_the_run() {
    let w = World::new().await;
    w.put_tenant(T, LIMITS).await;
    w.put_session(T, "s1").await;
    reserve_only(&w, "s1").await;
    let status = std::cell::Cell::new(0);
    let (wr, st) = (&w, &status);
    let report = reconcile_paced(&w, |p| async move {
        // Between the read (after one grace) and the repair (after two).
        if p == Pause::AfterRead {
            st.set(wr.connect(T, "s1", "meanwhile", &LIMITS).await.status_code);
        }
    })
    .await;
    assert_eq!(status.get(), 200);
    assert_eq!(
        report.tenants[0].outcome,
        Outcome::Repaired { from: 2, to: 1 }
    );
    assert_eq!(w.count(T).await, Some(1), "the new connection only");
    let report = reconcile(&w, false, 0).await;
    assert_eq!(report.tenants[0].outcome, Outcome::Consistent);
}

/// Review finding 6 under steady load: a tenant connecting and disconnecting all the time (the
/// `ver` guard of before reported it busy on every run, so its leaks grew until it was refused
/// for good) has its leaks repaired while the load goes on, never below the connections held.
#[tokio::test]
async fn leaks_of_a_busy_tenant_are_repaired_under_load_never_below_the_truth() {
    let w = World::new().await;
    w.put_tenant(T, LIMITS).await;
    w.put_session(T, "s1").await;
    w.put_session(T, "busy").await;
    assert_eq!(w.connect(T, "s1", "held", &LIMITS).await.status_code, 200);
    for _ in 0..20 {
        reserve_only(&w, "s1").await;
    }
    assert_eq!(w.count(T).await, Some(21));
    let stop = std::sync::atomic::AtomicBool::new(false);
    let load = async {
        let mut i = 0;
        while !stop.load(std::sync::atomic::Ordering::Relaxed) {
            let cid = format!("b{i}");
            if w.connect(T, "busy", &cid, &LIMITS).await.status_code == 200 {
                tokio::time::sleep(Duration::from_millis(40)).await;
                w.disconnect(T, "busy", &cid).await;
            }
            tokio::time::sleep(Duration::from_millis(40)).await;
            i += 1;
        }
        i
    };
    let run = async {
        let r = reconcile(&w, false, 300).await;
        stop.store(true, std::sync::atomic::Ordering::Relaxed);
        r
    };
    let (report, cycles) = tokio::join!(run, load);
    let r = &report.tenants[0];
    eprintln!("under load ({cycles} connect/disconnect cycles): {r:?}");
    // At least two cycles overlapped the run (a loaded 2-core machine managed 3; `in_flight`
    // below is what matters).
    assert!(cycles >= 2, "the load ran during the run: {cycles}");
    assert!(r.in_flight > 0, "the load was in flight: {r:?}");
    let Outcome::Repaired { from, to } = r.outcome else {
        panic!("expected a repair under load, got {r:?}");
    };
    assert!((to as i64) < from && to >= 1, "{r:?}");
    // At rest: never below what the sessions hold, and a quiet run makes it exact.
    let held = w.session(T, "s1").await.unwrap().connection_ids.len()
        + w.session(T, "busy").await.unwrap().connection_ids.len();
    assert!(w.count(T).await.unwrap() >= held as i64);
    let last = reconcile(&w, false, 0).await;
    assert!(matches!(
        last.tenants[0].outcome,
        Outcome::Consistent | Outcome::Repaired { .. }
    ));
    assert_eq!(w.count(T).await, Some(held as i64));
}

/// Review finding 7: a probe that errors (here: no Management API at all) counts that id as live
/// and is reported; before, one error skipped the tenant, repair included.
#[tokio::test]
async fn probe_errors_count_ids_as_live_and_the_count_is_still_repaired() {
    let w = World::new().await;
    drift(&w).await;
    // A port nothing listens on.
    let dead = {
        let l = std::net::TcpListener::bind("127.0.0.1:0").unwrap();
        format!("http://{}", l.local_addr().unwrap())
    };
    let report = reconcile_with(w.deps(), &dead, false, 20).await;
    let r = &report.tenants[0];
    assert_eq!(r.probe_errors, 2, "gone-1 and live-1: {r:?}");
    assert!(r.stale_released.is_empty(), "an error proves nothing gone");
    // The reservation that died and the swept session are repaired; gone-1 stays (taken as live).
    assert_eq!(r.truth, 2);
    assert_eq!(r.outcome, Outcome::Repaired { from: 4, to: 2 });
    assert_eq!(w.count(T).await, Some(2));
}

/// Review finding 5: `truthAt` comes from the clock of the host running the reconciler. A host
/// running two minutes behind stamps a truth older than the TTL deletions it already left out; a
/// late sweep of such a deletion must still subtract nothing (before: a 5 s margin, so it did,
/// and the count fell below the connections held).
#[tokio::test]
async fn a_repair_from_a_clock_running_behind_is_not_undone_by_a_late_sweep() {
    let w = World::new().await;
    drift(&w).await;
    let behind = shared::clock::ManualClock::new(w.env.clock.now().minus(Duration::from_secs(120)));
    let mut deps = w.deps().clone();
    deps.clock = std::sync::Arc::new(behind);
    let report = reconcile_with(&deps, &w.api.url(), false, 20).await;
    assert_eq!(
        report.tenants[0].outcome,
        Outcome::Repaired { from: 3, to: 1 }
    );
    // s2 was deleted (by TTL) 10 s before the truth was read; its record arrives now.
    let now = w.env.clock.now().as_secs();
    let ev: aws_lambda_events::dynamodb::Event =
        typed(json!({ "Records": [ttl_record("s2", &["swept-1"], "late-s2", now - 10)] }));
    let res = ttl_sweeper::handle(w.deps(), &w.sweeper, ev).await;
    assert!(res.batch_item_failures.is_empty());
    assert_eq!(w.count(T).await, Some(1), "live-1 still counted");
}

/// Review finding 5: a grace shorter than the handlers' timeout plus a margin is a configuration
/// error (0 used to be accepted, and a grace of 0 repairs a half-way connect below the truth).
#[test]
fn a_grace_below_the_minimum_is_a_configuration_error() {
    for bad in ["0", "5", "14"] {
        let vars =
            shared::config::Vars::from_pairs([("TURNSTILE_RECONCILE_GRACE_SECS", bad.to_string())]);
        let err = reconciler::Config::from_vars(&vars)
            .unwrap_err()
            .to_string();
        assert!(err.contains("at least 15"), "{bad}: {err}");
    }
    let vars =
        shared::config::Vars::from_pairs([("TURNSTILE_RECONCILE_GRACE_SECS", "15".to_string())]);
    assert_eq!(
        reconciler::Config::from_vars(&vars).unwrap().grace,
        Duration::from_secs(15)
    );
    assert_eq!(
        reconciler::Config::from_vars(&shared::config::Vars::from_pairs(std::iter::empty::<(
            &str,
            String
        )>()))
        .unwrap()
        .grace,
        reconcile::DEFAULT_GRACE
    );
    assert!(reconcile::check_grace(Duration::ZERO).is_err());
    assert!(reconcile::check_grace(reconcile::MIN_GRACE).is_ok());
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
    let mut state = reconciler::init(&w.function_deps(&[("TURNSTILE_RECONCILE_GRACE_SECS", "15")]))
        .await
        .unwrap();
    assert_eq!(state.config.grace, Duration::from_secs(15));
    // Shortened after validation so the test does not wait 45 s (nothing is in flight here).
    state.config.grace = Duration::ZERO;
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
            // The grace must outlast any connect half-way (decision 0306's proof; production's
            // is 15-60 s): 60 ms did not on a loaded 2-core machine ("count 9 < held 10").
            runs.push(reconcile(&w, false, 400).await.tenants[0].outcome.clone());
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
