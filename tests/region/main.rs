//! One limit across regions (decision 4200) against DynamoDB Local: the regional hot path's cost,
//! and simulated regions under random fault schedules judged by an oracle.
//!
//! `cargo test -p turnstile-tests --test region` runs a fixed set of schedules (exact and bounded
//! mode), the deliberate defect the oracle must catch, and the last-writer-wins negative test.
//! Many schedules: `make soak-region REGION_SCHEDULES=10000` (the ignored `soak` test; seeds from
//! `TURNSTILE_REGION_FIRST_SEED`, default 1).

mod hot_path;
mod limits_file;
mod lww;
mod mrsc;
mod oracle;
mod rebalancer;
mod sim;

use std::time::Duration;

use shared::region::Mode;

const BOUNDED: Mode = Mode::Bounded {
    overdraw_permille: 250,
    overdraw_for: Duration::from_secs(3),
};

/// A test environment with a buckets table and a ledger table of its own (dropped with it).
async fn with_ledger() -> (turnstile_tests::TestEnv, shared::region::DynamoLedger) {
    let mut env = turnstile_tests::TestEnv::new(&[shared::table::TableKind::Buckets]).await;
    let table = format!("{}region-ledger", env.prefix);
    shared::region::ledger::create_table(&env.deps.dynamo, &table)
        .await
        .expect("ledger table");
    env.track_table(table.clone());
    let store = shared::region::DynamoLedger {
        client: env.deps.dynamo.clone(),
        table,
    };
    (env, store)
}

fn setup(seed: u64, mode: Mode) -> sim::Setup {
    sim::Setup {
        seed,
        steps: 300,
        mode,
        no_quarantine: false,
        calm: None,
        total: sim::TOTAL,
    }
}

fn judge(seed: u64, mode: Mode, r: &sim::Report) {
    assert!(
        r.violations.is_empty(),
        "seed {seed} ({mode:?}): {} violations, first: {}",
        r.violations.len(),
        r.violations[0]
    );
}

#[tokio::test]
async fn fixed_schedules_exact() {
    for seed in 1..=4 {
        let r = sim::run(setup(seed, Mode::Exact)).await;
        judge(seed, Mode::Exact, &r);
        assert!(r.admitted > 0 && r.moves > 0, "seed {seed}: {r:?}");
    }
}

#[tokio::test]
async fn fixed_schedules_bounded() {
    for seed in 101..=102 {
        let r = sim::run(setup(seed, BOUNDED)).await;
        judge(seed, BOUNDED, &r);
    }
}

/// The quarantine is what keeps a moved amount's two bursts out of one window: without it the
/// oracle must see a window over `L`.
#[tokio::test]
async fn without_the_quarantine_the_oracle_sees_a_window_over_the_limit() {
    let mut caught = None;
    // Seed 3 catches it (every move by hand, no quarantine); the rest are there should a change
    // of the schedule move the catch.
    for seed in 1..=40 {
        let mut s = setup(seed, Mode::Exact);
        s.no_quarantine = true;
        let r = sim::run(s).await;
        if let Some(v) = r
            .violations
            .iter()
            .find(|v| v.contains("over the GCRA bound"))
        {
            caught = Some(format!("seed {seed}: {v}"));
            break;
        }
    }
    let caught = caught.expect("no schedule without a quarantine went over the limit");
    println!("caught: {caught}");
}

/// Demand that shifts from one region to another, offered at twice `L`: the share of `L` admitted
/// by a static equal split beside allotments that follow demand, and the over-admission of a
/// counter in a last-writer-wins table beside ours. `cargo test -p turnstile-tests --test region
/// shifting_demand -- --ignored --nocapture`.
#[tokio::test]
#[ignore = "a measurement of minutes, not a check: run by hand for docs/multi-region.md's numbers"]
async fn shifting_demand() {
    let mut rows = Vec::new();
    for (name, rebalance) in [
        ("static equal split", false),
        ("allotments follow demand", true),
    ] {
        let (mut admitted, mut capacity, mut asked, mut moves, mut over) = (0, 0.0, 0, 0, 0);
        for seed in 1..=3 {
            let mut s = setup(seed, Mode::Exact);
            s.steps = 1_500;
            s.total = 120;
            s.calm = Some(sim::Calm {
                rebalance,
                offered: 2.0,
            });
            let r = sim::run(s).await;
            admitted += r.admitted;
            capacity += r.capacity;
            asked += r.asked;
            moves += r.moves;
            over += r.violations.len();
        }
        rows.push(format!(
            "| {name} | {asked} | {admitted} | {:.1} % | {moves} | {over} |",
            100.0 * admitted as f64 / capacity
        ));
    }
    let (admitted, allowed, verdict) = lww::run(7).await;
    println!("| run (3 seeds, ~4 min each, L = 120, demand 2 x L) | asked | admitted | share of L | moves | windows over L |");
    println!("|---|---|---|---|---|---|");
    for r in rows {
        println!("{r}");
    }
    println!(
        "last-writer-wins counter: {admitted} admitted of {allowed:.0} allowed; {}",
        verdict.unwrap_or_default()
    );
}

/// A counter in a last-writer-wins global table: the regions over-admit (the peers' flaw).
#[tokio::test]
async fn a_last_writer_wins_counter_over_admits() {
    let (admitted, allowed, verdict) = lww::run(7).await;
    let v = verdict.unwrap_or_else(|| panic!("{admitted} admitted and no window over L"));
    println!("last writer wins: {admitted} admitted of {allowed:.0} allowed; {v}");
}

/// Many schedules: `make soak-region REGION_SCHEDULES=N WORKERS=K`.
#[tokio::test]
#[ignore = "the long run: `make soak-region` (fixed schedules run in `make test`)"]
async fn soak() {
    use futures::StreamExt;
    let var = |name: &str, default: u64| {
        std::env::var(name)
            .ok()
            .and_then(|v| v.parse().ok())
            .unwrap_or(default)
    };
    let n = var("TURNSTILE_REGION_SCHEDULES", 100);
    let first = var("TURNSTILE_REGION_FIRST_SEED", 1);
    let workers = var("TURNSTILE_REGION_WORKERS", 6).max(1) as usize;
    let started = std::time::Instant::now();
    let mut runs = futures::stream::iter(first..first + n)
        .map(|seed| async move {
            let mode = if seed % 4 == 0 { BOUNDED } else { Mode::Exact };
            (seed, mode, sim::run(setup(seed, mode)).await)
        })
        .buffer_unordered(workers);
    let mut failed = Vec::new();
    let (mut done, mut admitted, mut moves, mut reclaims, mut conflicts) = (0, 0, 0, 0, 0);
    while let Some((seed, mode, r)) = runs.next().await {
        done += 1;
        admitted += r.admitted;
        moves += r.moves;
        reclaims += r.reclaims;
        conflicts += r.conflicts;
        if let Some(v) = r.violations.first() {
            eprintln!("seed {seed} ({mode:?}): {v}");
            failed.push(seed);
        }
        if done % 100 == 0 {
            eprintln!(
                "{done} schedules, {} violating, {:?}",
                failed.len(),
                started.elapsed()
            );
        }
    }
    println!(
        "{n} schedules from seed {first} in {:?}: {} with violations; {admitted} admitted, \
         {moves} moves, {reclaims} reclaims, {conflicts} replicated write conflicts",
        started.elapsed(),
        failed.len()
    );
    assert!(failed.is_empty(), "violating seeds: {failed:?}");
}
