//! Random fault schedules (decision 2300): a seeded generator of operation schedules
//! over the WebSocket admission paths (and, in a share of schedules, reservations with the token
//! remover and kv limits), run against the real handlers and DynamoDB Local behind
//! `turnstile-faultproxy`, with crashes (dropped futures) and late requests, judged from the
//! outside at every answer ([`oracle`]). `cargo test -p turnstile-tests --test sim` runs the fixed
//! budget (the seeds of [`BUDGET`]) and nine mutation tests; `make mutants` hunts the whole
//! catalogue; `make soak SECONDS=N` runs the ignored `soak` test for as long as asked and writes its
//! summary.

#[allow(dead_code)]
#[path = "../integration/ws_support.rs"]
mod ws_support;

mod clocks;
mod kv;
mod oracle;
mod reservations;
mod run;
mod schedule;

use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::Arc;
use std::time::{Duration, Instant};

use shared::mutation::Mutation;

use run::{Sim, Totals};
use schedule::{Schedule, Shape};

/// Schedules per test run by `cargo test` (two tests: about 40-60 s each on a loaded 2-core
/// machine; `make test` must stay within its 3 minutes for the simulation).
const BUDGET: u64 = 12;

/// Runs `seeds` in one world, printing every failing schedule with its violations.
async fn run_seeds(mutation: Option<Mutation>, seeds: impl IntoIterator<Item = u64>) -> Totals {
    let sim = Sim::new(mutation).await;
    let shape = Shape::default();
    let mut totals = Totals::default();
    for seed in seeds {
        let sch = Schedule::generate(seed, &shape);
        let out = sim.run(&sch).await;
        if !out.violations.is_empty() {
            eprintln!("SIM violation(s) with seed {seed}:\n{sch}");
            for v in &out.violations {
                eprintln!("  VIOLATION {v}");
            }
        }
        totals.add(&out);
    }
    totals
}

fn report(name: &str, t: &Totals) {
    eprintln!(
        "SIM {name}: {} schedules, {} steps, {} DynamoDB calls, faults {:?}, {} violations",
        t.schedules,
        t.steps,
        t.calls,
        t.faults,
        t.violations.len()
    );
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn fixed_seeds_find_no_violation_a() {
    let t = run_seeds(None, 0..BUDGET / 2).await;
    report("seeds 0..", &t);
    assert!(t.violations.is_empty(), "{:#?}", t.violations);
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn fixed_seeds_find_no_violation_b() {
    let t = run_seeds(None, BUDGET / 2..BUDGET).await;
    report("seeds ..", &t);
    assert!(t.violations.is_empty(), "{:#?}", t.violations);
}

/// `make soak SECONDS=N`: schedules from `TURNSTILE_SIM_FIRST_SEED` (default 1000) on, until
/// `TURNSTILE_SIM_SECONDS` have passed or `TURNSTILE_SIM_SCHEDULES` have run (whichever comes
/// first); the summary goes to `TURNSTILE_SIM_SUMMARY` (default `target/sim-soak.md`).
///
/// `TURNSTILE_SIM_WORKERS` (default 6) schedules run at once, each worker in its own World (its
/// own tables and fault proxy, so one worker's faults never reach another's requests): a
/// schedule spends most of its time waiting (graces, delays, stalls to the timeout), so workers
/// multiply schedules per hour on two cores. Seeds are handed out in order; which worker runs
/// which seed does not change the schedule.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
#[ignore = "the soak: `make soak SECONDS=N`"]
async fn soak() {
    // The handlers' ERROR events (a 5xx's cause: "failing closed: ...") go to the soak's
    // output, so a violation's answer can be traced to its cause.
    let _ = tracing_subscriber::fmt()
        .with_max_level(tracing::Level::ERROR)
        .with_writer(std::io::stderr)
        .try_init();
    let secs: u64 = env_or("TURNSTILE_SIM_SECONDS", 60);
    let first: u64 = env_or("TURNSTILE_SIM_FIRST_SEED", 1000);
    let most: u64 = env_or("TURNSTILE_SIM_SCHEDULES", u64::MAX);
    let workers: u64 = env_or("TURNSTILE_SIM_WORKERS", 6).max(1);
    let path = std::env::var("TURNSTILE_SIM_SUMMARY")
        .unwrap_or_else(|_| concat!(env!("CARGO_MANIFEST_DIR"), "/../target/sim-soak.md").into());
    let start = Instant::now();
    let deadline = start + Duration::from_secs(secs);
    let next = Arc::new(AtomicU64::new(first));
    let last = first.saturating_add(most);
    let runs = (0..workers).map(|_| {
        let next = Arc::clone(&next);
        tokio::spawn(async move {
            let sim = Sim::new(None).await;
            let shape = Shape::default();
            let mut totals = Totals::default();
            while Instant::now() < deadline {
                let seed = next.fetch_add(1, Ordering::Relaxed);
                if seed >= last {
                    break;
                }
                let sch = Schedule::generate(seed, &shape);
                let began = Instant::now();
                // Every ERROR event of this schedule names its seed (`sim{seed=…}`), so a 5xx's
                // cause is found among 16 workers' interleaved output.
                let out = tracing::Instrument::instrument(
                    sim.run(&sch),
                    tracing::error_span!("sim", seed),
                )
                .await;
                eprintln!(
                    "SIM seed {seed}: {} steps, {:?}, {} violations, {:.1} s",
                    out.steps,
                    out.faults,
                    out.violations.len(),
                    began.elapsed().as_secs_f64()
                );
                if !out.violations.is_empty() {
                    eprintln!("SIM violation(s) with seed {seed}:\n{sch}");
                    for v in &out.violations {
                        eprintln!("  VIOLATION {v}");
                    }
                }
                totals.add(&out);
            }
            totals
        })
    });
    let mut totals = Totals::default();
    for done in futures::future::join_all(runs).await {
        totals.merge(done.expect("a soak worker panicked"));
    }
    let took = start.elapsed();
    let faults: Vec<String> = totals
        .faults
        .iter()
        .map(|(k, v)| format!("| {k} | {v} |"))
        .collect();
    let summary = format!(
        "# Simulation soak\n\nSeeds {first}..{} in {:.0} s with {workers} workers: **{} schedules, {} \
         steps, {} DynamoDB calls, {} violations**.\n\nFaults injected (rounds, or steps for \
         crashes):\n\n| fault | count |\n|---|---|\n{}\n\nViolations:\n\n{}\n",
        first + totals.schedules,
        took.as_secs_f64(),
        totals.schedules,
        totals.steps,
        totals.calls,
        totals.violations.len(),
        faults.join("\n"),
        if totals.violations.is_empty() {
            "none".to_string()
        } else {
            totals
                .violations
                .iter()
                .map(|v| format!("- {v}"))
                .collect::<Vec<_>>()
                .join("\n")
        }
    );
    std::fs::write(&path, &summary).expect("writing the soak summary");
    eprintln!("{summary}\n(written to {path})");
    assert!(totals.violations.is_empty(), "{:#?}", totals.violations);
}

/// A number from the environment, or `default` when unset or not a number.
fn env_or(name: &str, default: u64) -> u64 {
    std::env::var(name)
        .ok()
        .and_then(|s| s.parse().ok())
        .unwrap_or(default)
}

/// One seed, printed with its outcome: how a failing seed is replayed.
/// `TURNSTILE_SIM_SEED=n cargo test -p turnstile-tests --test sim one_seed -- --ignored --nocapture`;
/// `TURNSTILE_SIM_MUTATION=RetriedDecrement` draws from that mutation's shape and switches it on
/// (`TURNSTILE_SIM_MUTATE=0`: the shape only).
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
#[ignore = "replays TURNSTILE_SIM_SEED"]
async fn one_seed() {
    let seed: u64 = std::env::var("TURNSTILE_SIM_SEED")
        .ok()
        .and_then(|s| s.parse().ok())
        .unwrap_or(0);
    let m = std::env::var("TURNSTILE_SIM_MUTATION")
        .ok()
        .and_then(|name| Mutation::ALL.into_iter().find(|m| format!("{m:?}") == name));
    let shape = m.map(mutation_shape).unwrap_or_default();
    let on = std::env::var("TURNSTILE_SIM_MUTATE").map_or(true, |v| v != "0");
    let sim = Sim::new(m.filter(|_| on)).await;
    let sch = Schedule::generate(seed, &shape);
    eprintln!("{sch}");
    let started = Instant::now();
    let out = sim.run(&sch).await;
    eprintln!("{out:#?} in {:?}", started.elapsed());
    assert!(out.violations.is_empty());
}

/// The shape each mutation's test draws from: the paths and faults that reach its defect often.
fn mutation_shape(m: Mutation) -> Shape {
    let base = Shape::default();
    match m {
        Mutation::MessageOffByOne => Shape {
            fault_pct: 0,
            crash_pct: 0,
            reconcile_pct: 0,
            message_pct: 50,
            reservation_pct: 0,
            kv_pct: 0,
            ..base
        },
        // WebSocket paths without faults (for DisconnectWithoutMembership: redelivered
        // `$disconnect`s).
        Mutation::UndoAfterJoin
        | Mutation::ShardOverShare
        | Mutation::SessionOverCap
        | Mutation::DisconnectWithoutMembership => Shape {
            fault_pct: 0,
            crash_pct: 0,
            reconcile_pct: 0,
            reservation_pct: 0,
            kv_pct: 0,
            ..base
        },
        // Sessions that expire within the schedule, their records delivered twice.
        // (Redelivered, each takes the count down again: visible once the tenant fills up.)
        Mutation::SweepWithoutTombstone => Shape {
            fault_pct: 0,
            crash_pct: 0,
            reconcile_pct: 0,
            session_ttl: (10, 30),
            ttl_pct: 35,
            max_lanes: 6,
            max_steps: 4,
            reservation_pct: 0,
            kv_pct: 0,
            ..base
        },
        // The reconciled tenant's sessions deleted by TTL as the reconciler starts, their records
        // delivered in its grace between its read and its repair: the sweeps' releases land
        // after its read, and the leak it read (counted, not in the truth) is no leak.
        Mutation::ReconcileMissesLateReleases => Shape {
            fault_pct: 0,
            crash_pct: 0,
            reconcile_pct: 100,
            reconcile_sweeps: true,
            reshard_pct: 0,
            session_ttl: (5, 20),
            reservation_pct: 0,
            kv_pct: 0,
            ..base
        },
        // Every UpdateItem slowed 300 ms, reads not, and `$connect`s to the reconciled tenant
        // beside it: one has reserved and not yet joined when the reconciler, started 330 ms
        // into the round, reads the count and the truth (its graces wait it out).
        Mutation::ReconcileWithoutGrace => Shape {
            fault_pct: 100,
            crash_pct: 0,
            reconcile_pct: 100,
            reshard_pct: 0,
            max_lanes: 2,
            only_fault: Some(schedule::Fault::DelayUpdates(300)),
            reconcile_after_ms: Some(330),
            reconcile_connects: true,
            reservation_pct: 0,
            kv_pct: 0,
            ..base
        },
        // One step a round: a `$disconnect` sends its session write, then its decrement and
        // the token's cleanup at once; the round's second UpdateItem is held by the proxy until
        // the round ends (its client timed out meanwhile). No reconciler before the final fill,
        // where a count taken too low shows.
        Mutation::RetriedDecrement => Shape {
            fault_pct: 60,
            crash_pct: 0,
            reconcile_pct: 0,
            reshard_pct: 0,
            only_fault: Some(schedule::Fault::Late { nth: 1, tx: false }),
            max_lanes: 1,
            max_steps: 1,
            rounds: (8, 12),
            reservation_pct: 0,
            kv_pct: 0,
            ..base
        },
        // Every schedule with reservation lanes, no faults, few WebSocket lanes (a quick run).
        Mutation::ReservationOverShare | Mutation::BindIgnoresEnded => Shape {
            fault_pct: 0,
            crash_pct: 0,
            reconcile_pct: 0,
            reservation_pct: 100,
            kv_pct: 0,
            max_lanes: 2,
            ..base
        },
        // Every coordinate with a limit row, lowered in early rounds while reservations are
        // live, and rows written before the ledger; no faults, few WebSocket lanes.
        Mutation::LegacyRowsUncounted | Mutation::LimitCachedForever => Shape {
            fault_pct: 0,
            crash_pct: 0,
            reconcile_pct: 0,
            reservation_pct: 100,
            limit_rows: true,
            kv_pct: 0,
            max_lanes: 2,
            ..base
        },
        Mutation::KvOverBurst => Shape {
            fault_pct: 0,
            crash_pct: 0,
            reconcile_pct: 0,
            reservation_pct: 0,
            kv_pct: 100,
            max_lanes: 2,
            ..base
        },
        Mutation::TenantMinuteOffByOne => Shape {
            fault_pct: 0,
            crash_pct: 0,
            reconcile_pct: 0,
            reservation_pct: 0,
            kv_pct: 0,
            rate_bound: true,
            ..base
        },
        // A session's DELETE 60 ms after a `$connect` to it, whose socket opens up to 250 ms
        // after its 200 (and answers 410 until then).
        Mutation::SessionEndWithoutProof => Shape {
            fault_pct: 0,
            crash_pct: 0,
            reservation_pct: 0,
            kv_pct: 0,
            max_lanes: 4,
            open_ms: 250,
            end_races: true,
            reconcile_pct: 0,
            reshard_pct: 0,
            ..base
        },
        // A bind repeated while the first holds, its marker read throttled after its row write
        // landed (the repeat fails with the first bind's row in place), no WebSocket lanes.
        Mutation::BindDeletesOriginalRow => Shape {
            fault_pct: 70,
            only_fault: Some(schedule::Fault::ThrottleReads(80)),
            crash_pct: 0,
            reconcile_pct: 0,
            reshard_pct: 0,
            reservation_pct: 100,
            rebinds: true,
            kv_pct: 0,
            ws_lanes: false,
            ..base
        },
        // Binds to two resources, the `DeleteItem` of a failed bind's row throttled (the row of
        // a bind answered AlreadyBound stays under the other resource, whose end then comes).
        Mutation::RemoverReleasesAnyBinding => Shape {
            fault_pct: 70,
            only_fault: Some(schedule::Fault::ThrottleDeletes(90)),
            reconcile_pct: 0,
            reshard_pct: 0,
            reservation_pct: 100,
            binds: true,
            kv_pct: 0,
            ws_lanes: false,
            crash_pct: 0,
            ..base
        },
        // Reservation lanes with their faults and crashes (a bind must fail or stop).
        Mutation::BindReleasesBoundElsewhere => Shape {
            reconcile_pct: 0,
            reservation_pct: 100,
            binds: true,
            kv_pct: 0,
            max_lanes: 1,
            crash_pct: 15,
            ..base
        },
        // Refunds whose first send is applied and its answer lost (the round's first update),
        // another refund of the same bucket beside them, no WebSocket lanes to take the loss.
        Mutation::KvRefundFreshId | Mutation::KvRefundAfterUnanswered => Shape {
            fault_pct: 70,
            crash_pct: 0,
            reconcile_pct: 0,
            reservation_pct: 0,
            kv_pct: 100,
            only_fault: Some(schedule::Fault::LoseUpdateAnswers(1)),
            refunds: true,
            ws_lanes: false,
            reshard_pct: 0,
            ..base
        },
    }
}

/// Texts that mark a violation as found on the side `m` breaks (WebSocket, reservations, kv).
fn side(m: Mutation) -> &'static [&'static str] {
    match m {
        Mutation::ReservationOverShare
        | Mutation::BindIgnoresEnded
        | Mutation::BindReleasesBoundElsewhere
        | Mutation::BindDeletesOriginalRow
        | Mutation::RemoverReleasesAnyBinding
        | Mutation::LegacyRowsUncounted
        | Mutation::LimitCachedForever => &[
            "emr:",
            "a bind of r",
            "answered",
            "bound to",
            "remover",
            "resource",
        ],
        Mutation::KvOverBurst | Mutation::KvRefundFreshId | Mutation::KvRefundAfterUnanswered => {
            &[": K"]
        }
        _ => &[
            "tenant",
            "session",
            "Deliver",
            "PerMinute",
            "TTL",
            "reconcile",
        ],
    }
}

/// Runs `seeds` with `m` switched on until one finds a violation: that seed and what it found.
async fn hunt(m: Mutation, seeds: impl IntoIterator<Item = u64>) -> Option<(u64, Vec<String>)> {
    let sim = Sim::new(Some(m)).await;
    let shape = mutation_shape(m);
    for seed in seeds {
        let sch = Schedule::generate(seed, &shape);
        let out = sim.run(&sch).await;
        // A 503 with no fault injected is the loaded machine's (a handler's attempt timed out),
        // never a mutation's catch; nor is a finding outside the mutation's side.
        let side = side(m);
        let found: Vec<String> = out
            .violations
            .into_iter()
            .filter(|v| !v.contains("undocumented answer 503"))
            .filter(|v| side.iter().any(|s| v.contains(s)))
            .collect();
        if !found.is_empty() {
            eprintln!("SIM mutation {m:?} caught by seed {seed}: {found:#?}");
            return Some((seed, found));
        }
    }
    None
}

/// Each mutation's seed (first tried) and how many more seeds its test may try: the simulation
/// is not deterministic (decision 2300), so a test tries its recorded seed, then the next ones.
const MUTATION_SEEDS: u64 = 8;

/// `what`: the violation expected, one of these texts.
async fn caught(m: Mutation, seed: u64, what: &[&str]) {
    let found = hunt(m, seed..seed + MUTATION_SEEDS).await;
    let (_, violations) = found.unwrap_or_else(|| {
        panic!(
            "mutation {m:?} was not caught by seeds {seed}..{}",
            seed + MUTATION_SEEDS
        )
    });
    assert!(
        violations
            .iter()
            .any(|v| what.iter().any(|w| v.contains(w))),
        "mutation {m:?}: expected a violation about {what:?}, got {violations:#?}"
    );
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn mutation_undo_after_join_is_caught() {
    caught(Mutation::UndoAfterJoin, 0, &["over-admission"]).await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn mutation_sweep_without_tombstone_is_caught() {
    caught(
        Mutation::SweepWithoutTombstone,
        5,
        &["over-admission", "to Deliver", "final reconcile"],
    )
    .await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn mutation_shard_over_share_is_caught() {
    caught(Mutation::ShardOverShare, 1, &["over-admission"]).await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn mutation_session_over_cap_is_caught() {
    caught(Mutation::SessionOverCap, 1, &["over-admission: session"]).await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn mutation_message_off_by_one_is_caught() {
    caught(Mutation::MessageOffByOne, 0, &["messagesPerMinute"]).await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn mutation_reservation_over_share_is_caught() {
    caught(Mutation::ReservationOverShare, 0, &["over-admission: "]).await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn mutation_bind_ignores_ended_is_caught() {
    caught(Mutation::BindIgnoresEnded, 0, &["held capacity"]).await;
}

/// Rows rate-limiter-py wrote, left out of the ledger the first reservation creates: a grant
/// while they live passes the capacity.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn mutation_legacy_rows_uncounted_is_caught() {
    caught(Mutation::LegacyRowsUncounted, 0, &["over-admission: "]).await;
}

/// A limit row cached for good: a warm limiter keeps granting under a lowered limit past the
/// cache's time.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn mutation_limit_cached_forever_is_caught() {
    caught(Mutation::LimitCachedForever, 0, &["over-admission: "]).await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn mutation_kv_over_burst_is_caught() {
    caught(Mutation::KvOverBurst, 0, &["over-admission: K"]).await;
}

/// A refund re-sent under a fresh id after its answer was lost gives back twice: the spends after
/// it pass the ideal bucket.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn mutation_kv_refund_fresh_id_is_caught() {
    caught(Mutation::KvRefundFreshId, 1, &["over-admission: K"]).await;
}

/// A refund whose send went unanswered, behind another process's later refund, sent again under
/// a new id: its first send had landed. The other refund must land within the first one's
/// backoff, which a loaded machine running the whole binary at once misses (`make mutants`
/// hunts it: seed 1 in every run so far).
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
#[ignore = "timing-dependent under the parallel test run: `make mutants` hunts it"]
async fn mutation_kv_refund_after_unanswered_is_caught() {
    caught(Mutation::KvRefundAfterUnanswered, 1, &["over-admission: K"]).await;
}

/// Too slow for the make-test budget (`make mutants` hunts it): the reconciler must read while a
/// `$connect` is between its writes (about 1 schedule in 13 of its shape, 5-15 s each); the
/// count it takes too low shows in the fill before the final repair.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
#[ignore = "too slow for the make-test budget: `make mutants` hunts it"]
async fn mutation_reconcile_without_grace_is_caught() {
    caught(Mutation::ReconcileWithoutGrace, 12, &["over-admission"]).await;
}

/// Too slow for the make-test budget (`make mutants` hunts it): the lost answer must be a sweep's
/// decrement on a count nothing floors (a shard's) or another connection holds up.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
#[ignore = "too slow for the make-test budget: `make mutants` hunts it"]
async fn mutation_retried_decrement_is_caught() {
    caught(
        Mutation::RetriedDecrement,
        17,
        &["over-admission", "leaked"],
    )
    .await;
}

/// `make mutants`: every mutation of the catalogue, each hunted over at most
/// `TURNSTILE_SIM_MUTANT_SEEDS` (default 40) seeds of its shape from `TURNSTILE_SIM_FIRST_SEED`
/// (default 0); prints each one's catching seed and the schedules it took, and fails naming the
/// ones no seed caught. `TURNSTILE_SIM_MUTANTS` (names, comma-separated) picks some.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
#[ignore = "the mutation gate: `make mutants`"]
async fn mutants() {
    let first = env_or("TURNSTILE_SIM_FIRST_SEED", 0);
    let budget = env_or("TURNSTILE_SIM_MUTANT_SEEDS", 40);
    let only = std::env::var("TURNSTILE_SIM_MUTANTS").unwrap_or_default();
    let picked: Vec<Mutation> = Mutation::ALL
        .into_iter()
        .filter(|m| only.is_empty() || only.split(',').any(|n| n.trim() == format!("{m:?}")))
        .collect();
    let mut missed = Vec::new();
    let mut table = Vec::new();
    for m in picked {
        let started = Instant::now();
        let found = hunt(m, first..first + budget).await;
        let took = started.elapsed().as_secs_f64();
        match found {
            Some((seed, v)) => {
                let first_line = v.first().cloned().unwrap_or_default();
                table.push(format!(
                    "| {m:?} | {seed} | {} | {took:.0} s | {} |",
                    seed - first + 1,
                    first_line.chars().take(120).collect::<String>()
                ));
            }
            None => {
                table.push(format!("| {m:?} | none in {budget} | - | {took:.0} s | |"));
                missed.push(m);
            }
        }
        eprintln!("SIM MUTANT {}", table.last().map_or("", String::as_str));
    }
    eprintln!(
        "| mutation | seed | schedules | time | first violation |\n|---|---|---|---|---|\n{}",
        table.join("\n")
    );
    assert!(missed.is_empty(), "mutations not caught: {missed:?}");
}

/// Finds each mutation's first catching seed from `TURNSTILE_SIM_FIRST_SEED` (for the table in
/// docs/testing.md): `cargo test -p turnstile-tests --test sim mutation_seeds -- --ignored --nocapture`.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
#[ignore = "prints each mutation's first catching seed"]
async fn mutation_seeds() {
    let first: u64 = std::env::var("TURNSTILE_SIM_FIRST_SEED")
        .ok()
        .and_then(|s| s.parse().ok())
        .unwrap_or(0);
    for m in Mutation::ALL {
        let started = Instant::now();
        let found = hunt(m, first..first + 20).await;
        eprintln!(
            "SIM MUTATION {m:?}: {:?} in {:.1} s",
            found.map(|f| f.0),
            started.elapsed().as_secs_f64()
        );
    }
}
