//! The reconciler finishes (decision 2205): its grace is bounded, each tenant's probes have a
//! time budget, and a run over every tenant takes new tenants only while its budget lasts and starts
//! where the last run stopped, so tenants with many sessions cannot starve one with a leak. Time is
//! the injected clock's: a clock that moves one second each time it is read stands for work that
//! takes time, so nothing here sleeps.

use std::sync::Arc;
use std::time::Duration;

use shared::admission::connect::{self as admission, Hints};
use shared::clock::{Clock, ManualClock, Timestamp};
use shared::gateway::Gateway;
use shared::ids::{SessionId, TenantId};
use shared::reconcile::{self, Budget, Options, Outcome, Probe, Report};
use shared::tenant::Limits;

use crate::ws_support::*;

const LIMITS: Limits = Limits::example(1000, 1000, 10, 1000, 3600, 60);

/// Moves `inner` (the world's clock) one second forward each time it is read.
#[derive(Debug)]
struct Ticking(ManualClock);

impl Clock for Ticking {
    fn now(&self) -> Timestamp {
        self.0.advance(Duration::from_secs(1));
        self.0.now()
    }
}

/// A tenant holding `n` open connections (sessions of 8).
async fn busy_tenant(w: &World, t: &str, n: usize) {
    w.put_tenant(t, LIMITS).await;
    for i in 0..n {
        let s = format!("s{}", i / 8);
        if i % 8 == 0 {
            w.put_session(t, &s).await;
        }
        let cid = format!("{t}-c{i}");
        assert_eq!(w.connect(t, &s, &cid, &LIMITS).await.status_code, 200);
    }
}

/// One run over every tenant, on the ticking clock, with this budget and no graces.
async fn run_all(w: &World, budget: Budget) -> Report {
    let mut deps = w.deps().clone();
    deps.clock = Arc::new(Ticking(w.env.clock.clone()));
    let gateway = Gateway::local(&w.api.url());
    let probe = Probe {
        gateway: &gateway,
        endpoint: w.api.url(),
    };
    let options = Options {
        tenant: None,
        dry_run: false,
        grace: Duration::ZERO,
        budget,
    };
    let scoped = |_| {
        let d = deps.clone();
        async move { Ok(d) }
    };
    reconcile::run_paced(&deps, &options, Some(&probe), scoped, |_| async {})
        .await
        .unwrap()
}

fn outcome<'a>(r: &'a Report, t: &str) -> &'a reconcile::TenantReport {
    r.tenants.iter().find(|x| x.tenant_id == t).unwrap()
}

/// Two tenants with many connections sort before the one with a leak. With a 16 s run (8 s to
/// take tenants) and 5 s of probing per tenant, a run takes one busy tenant and defers the rest;
/// the cursor makes the next run start after it, so the leak is repaired by the third run (it would
/// never be if every run started from the first tenant).
#[tokio::test]
async fn a_leak_beside_tenants_with_many_sessions_is_repaired_within_bounded_runs() {
    let w = World::new().await;
    busy_tenant(&w, "a-busy", 24).await;
    busy_tenant(&w, "b-busy", 24).await;
    w.put_tenant("c-leak", LIMITS).await;
    w.put_session("c-leak", "s1").await;
    admission::reserve(
        w.deps(),
        &TenantId::parse("c-leak").unwrap(),
        &SessionId::parse("s1").unwrap(),
        &LIMITS,
        &Hints::default(),
    )
    .await
    .unwrap()
    .unwrap();
    assert_eq!(w.count("c-leak").await, Some(1));
    let budget = Budget {
        run: Duration::from_secs(16),
        tenant: Duration::from_secs(5),
    };

    let mut repaired_in = None;
    for run in 1..=4 {
        let report = run_all(&w, budget).await;
        let took: Vec<&str> = report
            .tenants
            .iter()
            .filter(|t| t.outcome != Outcome::Deferred)
            .map(|t| t.tenant_id.as_str())
            .collect();
        eprintln!("run {run}: took {took:?}");
        for t in ["a-busy", "b-busy"] {
            let r = outcome(&report, t);
            if r.outcome != Outcome::Deferred {
                // Its probes stopped at the tenant's budget; the ids left are taken as live.
                assert!(r.unprobed > 0 && r.unprobed < 24, "{r:?}");
                assert_eq!(r.outcome, Outcome::Consistent, "{r:?}");
            }
        }
        if outcome(&report, "c-leak").outcome == (Outcome::Repaired { from: 1, to: 0 }) {
            repaired_in = Some(run);
            break;
        }
        assert_eq!(took.len(), 1, "one busy tenant fills a run: {report:?}");
        assert_eq!(outcome(&report, "c-leak").outcome, Outcome::Deferred);
    }
    assert_eq!(
        repaired_in,
        Some(3),
        "a run per busy tenant ahead of it, then the leak"
    );
    assert_eq!(w.count("c-leak").await, Some(0));
    // The busy tenants' counts were never touched.
    assert_eq!(w.count("a-busy").await, Some(24));
    assert_eq!(w.count("b-busy").await, Some(24));
}

/// `check_grace` has an upper bound: two graces and the work must fit the reconciler's 300 s; a
/// larger grace is refused when the function starts (its `init`), naming the maximum.
#[tokio::test]
async fn a_grace_above_the_maximum_is_refused_at_start() {
    for bad in ["61", "150", "3600"] {
        let vars =
            shared::config::Vars::from_pairs([("TURNSTILE_RECONCILE_GRACE_SECS", bad.to_string())]);
        let err = reconciler::Config::from_vars(&vars)
            .unwrap_err()
            .to_string();
        assert!(err.contains("at most 60"), "{bad}: {err}");
    }
    let w = World::new().await;
    let err = reconciler::init(&w.function_deps(&[("TURNSTILE_RECONCILE_GRACE_SECS", "61")]))
        .await
        .err()
        .expect("refused at start")
        .to_string();
    assert!(err.contains("TURNSTILE_RECONCILE_GRACE_SECS"), "{err}");
    let vars =
        shared::config::Vars::from_pairs([("TURNSTILE_RECONCILE_GRACE_SECS", "60".to_string())]);
    assert_eq!(
        reconciler::Config::from_vars(&vars).unwrap().grace,
        Duration::from_secs(60)
    );
    // The CLI's check is the same function.
    assert!(reconcile::check_grace(Duration::from_secs(61)).is_err());
    assert!(reconcile::check_grace(Duration::from_secs(60)).is_ok());
}

/// A tenant with more ids than one run's probes reach: each run starts probing where the last one
/// stopped (`probeFrom` on `{tenant}:sessions`), so a gone socket late in the order is found and
/// released within `⌈ids / probed per run⌉` runs (it never was when every run began at the first id).
#[tokio::test]
async fn probing_continues_where_the_last_run_stopped() {
    let w = World::new().await;
    busy_tenant(&w, "a-busy", 24).await;
    // The last id in probing order (session s2: c16 to c23).
    w.recorder.mark_gone("a-busy-c23");
    let budget = Budget {
        run: Duration::from_secs(60),
        tenant: Duration::from_secs(5),
    };
    let mut released_in = None;
    for run in 1..=8 {
        let report = run_all(&w, budget).await;
        let r = outcome(&report, "a-busy");
        eprintln!(
            "run {run}: unprobed {}, stale released {:?}",
            r.unprobed, r.stale_released
        );
        assert!(r.unprobed > 0, "more ids than one budget probes: {r:?}");
        if r.stale_released == ["a-busy-c23"] {
            released_in = Some(run);
            break;
        }
    }
    // About 4 probes a run over 24 ids: the last id within 6 runs, 7 with the wrap.
    let run = released_in.expect("the gone socket was released");
    assert!(run <= 7, "{run}");
    assert_eq!(w.count("a-busy").await, Some(23));
}
