//! Simulated regions under a random fault schedule (one seed decides everything): three regions,
//! each its own table namespace on DynamoDB Local for its regional buckets and two processes
//! (a process's allotment may be a refresh behind its neighbour's), one ledger table behind the
//! MRSC model of [`super::mrsc`], and a rebalancer in each region.
//!
//! Faults: region loss (and return), partitions from the ledger, clock skew within the stated
//! margin, process crashes (a new sandbox starts with no allotment), crashes between saga steps,
//! retried calls, lost answers and replicated write conflicts. Demand shifts from one region to
//! another over the schedule. The oracle ([`super::oracle`]) judges every step and the end.

use std::sync::{Arc, Mutex};
use std::time::Duration;

use shared::clock::{Clock, ManualClock, Timestamp};
use shared::kv::{LimitSet, Limiter, Limits};
use shared::region::ledger::{self, read_all};
use shared::region::policy::Order;
use shared::region::rebalance::again;
use shared::region::saga;
use shared::region::{
    lease, Allotments, Declared, DynamoLedger, LeaseTerms, Mode, Rebalancer, RegionError,
};
use shared::table::TableKind;
use turnstile_tests::TestEnv;

use super::mrsc::{Mrsc, Net};
use super::oracle;

/// 7,207.2 ms: divisible into whole nanoseconds by every allotment from 1 to 16, so with a total
/// of at most 16 each region's emission interval is exact and the oracle needs no rounding
/// allowance.
const PERIOD: Duration = Duration::from_micros(7_207_200);
/// The fault schedules' total: small, so that one token is a large share and every mistake shows.
pub const TOTAL: u64 = 12;
const REGIONS: [&str; 3] = ["us-east-1", "us-east-2", "us-west-2"];
const REFRESH: Duration = Duration::from_millis(1_000);
const TERMS: LeaseTerms = LeaseTerms {
    lease: Duration::from_secs(6),
    renew_every: Duration::from_secs(2),
    clock_margin: Duration::from_millis(500),
};

/// What a schedule runs.
#[derive(Debug, Clone, Copy)]
pub struct Setup {
    pub seed: u64,
    pub steps: usize,
    pub mode: Mode,
    /// A deliberate defect: moves released with no quarantine (the oracle must catch it).
    pub no_quarantine: bool,
    /// No faults, steady demand: the measurement of how much of `L` is admitted.
    pub calm: Option<Calm>,
    /// `L`.
    pub total: u64,
}

/// A fault-free run under steady demand that shifts from the first region to the second.
#[derive(Debug, Clone, Copy)]
pub struct Calm {
    /// Whether allotment follows demand (else the first equal split stays).
    pub rebalance: bool,
    /// Demand offered, in multiples of `L` per period.
    pub offered: f64,
}

/// What a schedule saw.
#[derive(Debug, Default)]
pub struct Report {
    pub violations: Vec<String>,
    /// What the limit could admit over the run: `L` per period, plus one burst.
    pub capacity: f64,
    pub admitted: usize,
    pub asked: usize,
    pub moves: usize,
    pub reclaims: usize,
    pub conflicts: u64,
    pub lost_answers: u64,
}

struct Process {
    allot: Arc<Allotments>,
    lim: Limiter,
    next_refresh: Timestamp,
}

struct Region {
    name: &'static str,
    skew_ms: i64,
    store: Mrsc,
    procs: Vec<Process>,
    down_until: Option<Timestamp>,
    epoch: u64,
    next_renew: Timestamp,
    /// Real instants of requests asked of this region (its reported demand).
    asked: Vec<Timestamp>,
    env: TestEnv,
}

impl Region {
    fn now(&self, real: Timestamp) -> Timestamp {
        Timestamp::from_nanos(real.as_nanos() + self.skew_ms * 1_000_000)
    }
    fn up(&self, real: Timestamp) -> bool {
        self.down_until.is_none_or(|t| real >= t)
    }
}

struct World {
    setup: Setup,
    rng: fastrand::Rng,
    real: ManualClock,
    net: Arc<Mutex<Net>>,
    truth: DynamoLedger,
    declared: Declared,
    limits: Arc<Limits>,
    regions: Vec<Region>,
    admitted: Vec<Timestamp>,
    report: Report,
    /// The end of the schedule: no new moves, only resumptions and reclaims.
    settling: bool,
    busy: Vec<bool>,
}

fn limits(total: u64) -> Arc<Limits> {
    let yaml = format!(
        "names:\n  Global: {{ id: 1, format: string }}\ndefaults:\n  Global: {{ burst: {total}, \
         count: {total}, period: {}us }}\n",
        PERIOD.as_micros()
    );
    Arc::new(Limits::new(LimitSet::from_yaml(&yaml).expect("limits")))
}

async fn world(setup: Setup) -> World {
    let mut rng = fastrand::Rng::with_seed(setup.seed);
    let limits = limits(setup.total);
    let set = limits.current();
    let bucket = set.bucket("Global", "t").expect("bucket").key();
    let global = set
        .rate(&set.bucket("Global", "t").expect("bucket"))
        .expect("rate");
    let names = REGIONS.iter().map(|r| r.to_string()).collect();
    let declared = Declared::new(&bucket, global, names, setup.mode).expect("declared");
    let first = TestEnv::new(&[TableKind::Buckets]).await;
    let real = ManualClock::starting_now();
    let truth = DynamoLedger {
        client: first.deps.dynamo.clone(),
        table: format!("{}ledger", first.prefix),
    };
    ledger::create_table(&truth.client, &truth.table)
        .await
        .expect("ledger table");
    let net = Arc::new(Mutex::new(Net {
        rng: Some(fastrand::Rng::with_seed(setup.seed ^ 0x5eed)),
        lose_answer_permille: if setup.calm.is_some() {
            0
        } else {
            rng.u32(0..60)
        },
        conflict_permille: if setup.calm.is_some() {
            0
        } else {
            rng.u32(0..60)
        },
        total: setup.total,
        ..Net::default()
    }));
    let t0 = real.now();
    ledger::init(&truth, &bucket, &declared.split(), t0.plus(TERMS.lease))
        .await
        .expect("init");
    let mut regions = Vec::new();
    let mut env = Some(first);
    for name in REGIONS {
        let env = match env.take() {
            Some(e) => e,
            None => TestEnv::new(&[TableKind::Buckets]).await,
        };
        let half = TERMS.clock_margin.as_millis() as i64 / 2;
        let procs = (0..2)
            .map(|_| {
                let allot = Arc::new(Allotments::new(name, REFRESH));
                allot.declare(declared.clone());
                let lim = Limiter::new(
                    env.deps.dynamo.clone(),
                    &env.deps.tables.buckets,
                    limits.clone(),
                )
                .with_allotments(allot.clone());
                Process {
                    allot,
                    lim,
                    next_refresh: t0,
                }
            })
            .collect();
        regions.push(Region {
            name,
            skew_ms: rng.i64(-half..=half),
            store: Mrsc {
                inner: truth.clone(),
                region: name.to_string(),
                net: net.clone(),
                real: real.clone(),
                latency: Duration::from_millis(100),
            },
            procs,
            down_until: None,
            epoch: 0,
            next_renew: t0,
            asked: Vec::new(),
            env,
        });
    }
    World {
        setup,
        rng,
        real,
        net,
        truth,
        declared,
        limits,
        regions,
        admitted: Vec::new(),
        report: Report::default(),
        settling: false,
        busy: vec![true; REGIONS.len()],
    }
}

impl World {
    fn bucket(&self) -> String {
        self.declared.bucket.clone()
    }

    /// Clients ask; answers that say admitted are what the oracle judges. Demand shifts from the
    /// first region to the second over the schedule, and each region goes quiet and busy again at
    /// random (a quiet region's bucket fills, and it spends its whole burst when busy again).
    async fn requests(&mut self, progress: f64, dt: Duration) {
        let weights = [0.8 * (1.0 - progress) + 0.1, 0.8 * progress + 0.1, 0.1];
        if let Some(calm) = self.setup.calm {
            let per_sec = calm.offered * self.declared.total as f64 / PERIOD.as_secs_f64();
            for (r, w) in weights.iter().enumerate() {
                let expected = per_sec * w * dt.as_secs_f64();
                let asks =
                    expected.floor() as usize + usize::from(self.rng.f64() < expected.fract());
                for _ in 0..asks {
                    self.ask(r).await;
                }
            }
            return;
        }
        for (r, w) in weights.iter().enumerate() {
            if self.rng.u32(0..100) < 4 {
                self.busy[r] = !self.busy[r];
            }
            let asks = if self.busy[r] {
                (self.rng.f64() * 8.0 * w).round() as usize
            } else {
                usize::from(self.rng.u32(0..20) == 0)
            };
            for _ in 0..asks {
                self.ask(r).await;
            }
        }
    }

    async fn ask(&mut self, r: usize) {
        let real = self.real.now();
        let region = &mut self.regions[r];
        region.asked.push(real);
        self.report.asked += 1;
        if !region.up(real) {
            return;
        }
        let p = self.rng.usize(0..region.procs.len());
        let now = region.now(real);
        let out = region.procs[p].lim.spend("Global", "t", 1, now).await;
        if out.expect("regional spend").decision.allowed {
            self.admitted.push(real);
            self.report.admitted += 1;
        }
    }

    /// Each live region renews its lease and its processes refresh, when due.
    async fn upkeep(&mut self) {
        let bucket = self.bucket();
        let real = self.real.now();
        for region in &mut self.regions {
            if !region.up(real) {
                continue;
            }
            let now = region.now(real);
            if now >= region.next_renew {
                let renewed = again(|| {
                    lease::renew(
                        &region.store,
                        &bucket,
                        region.name,
                        region.epoch,
                        now,
                        &TERMS,
                    )
                })
                .await;
                match renewed {
                    Ok(_) => region.next_renew = now.plus(TERMS.renew_every),
                    Err(RegionError::Fenced { .. }) => {
                        let back =
                            lease::rejoin(&region.store, &bucket, region.name, now, &TERMS).await;
                        if let Ok((epoch, _)) = back {
                            region.epoch = epoch;
                            region.next_renew = now.plus(TERMS.renew_every);
                        }
                    }
                    Err(_) => {}
                }
            }
            for p in &mut region.procs {
                if now >= p.next_refresh {
                    if let Ok(held) = p.allot.refresh(&region.store, &bucket, now).await {
                        region.epoch = region.epoch.max(held.epoch);
                    }
                    p.next_refresh = now.plus(REFRESH / 2);
                }
            }
        }
    }

    /// One region's rebalancer: resumes moves it gives or receives, reclaims regions whose lease
    /// ran out, and, if it is the giver the policy picks, starts a move.
    async fn rebalance(&mut self, r: usize) {
        if self.setup.calm.is_some_and(|c| !c.rebalance) {
            return;
        }
        let real = self.real.now();
        if !self.regions[r].up(real) {
            return;
        }
        let now = self.regions[r].now(real);
        let store = self.regions[r].store.clone();
        let name = self.regions[r].name;
        let mut rb = Rebalancer::new(&self.declared, name, REFRESH, TERMS);
        if self.setup.no_quarantine {
            rb.quarantine = Duration::ZERO;
        }
        let Ok((rows, _)) = read_all(&store, &self.declared.bucket).await else {
            return;
        };
        rb.finish_incoming(&store, &rows, now).await;
        let reclaimed = rb.reclaim_expired(&store, &rows, now).await;
        self.report.reclaims += reclaimed.len();
        if self.settling {
            return;
        }
        // One move in three is by hand (the CLI's `move`): any amount the giver holds, to any
        // region, whatever the demand. (Hunting the missing quarantine, every move is by hand:
        // the policy's moves follow demand, so they seldom land on an idle region with a full
        // bucket.)
        let by_hand =
            self.setup.calm.is_none() && (self.setup.no_quarantine || self.rng.u32(0..3) == 0);
        let order = if by_hand {
            let own = rows.iter().find(|row| row.region == name);
            let to = REGIONS[self.rng.usize(0..REGIONS.len())];
            own.filter(|row| row.allotment > 0 && to != name)
                .map(|row| Order {
                    from: name.to_string(),
                    to: to.to_string(),
                    amount: self.rng.u64(1..=row.allotment),
                })
        } else {
            // Demand smoothed over two periods: one period's count is too noisy to move on.
            let since = real.minus(PERIOD * 2);
            let demand = |region: &str| {
                let i = REGIONS.iter().position(|x| *x == region).unwrap_or(0);
                self.regions[i].asked.iter().filter(|t| **t > since).count() as u64 / 2
            };
            rb.order(&rb.standings(&rows, demand, now))
        };
        let Some(order) = order else {
            return;
        };
        let epoch = self.regions[r].epoch;
        let Ok(mv) = rb.lower(&store, order, epoch, now).await else {
            return;
        };
        self.report.moves += 1;
        // A crash between the steps: the move is finished later by the receiver's resumption.
        if self.setup.calm.is_none() && self.rng.u32(0..10) == 0 {
            return;
        }
        let _ = rb.record(&store, &mv).await;
    }

    fn faults(&mut self) {
        if self.setup.calm.is_some() {
            return;
        }
        let real = self.real.now();
        let roll = self.rng.u32(0..1000);
        let r = self.rng.usize(0..self.regions.len());
        match roll {
            0..=7 => {
                let down = Duration::from_millis(self.rng.u64(1_000..15_000));
                self.regions[r].down_until = Some(real.plus(down));
            }
            8..=15 => {
                let mut net = self.net.lock().expect("net");
                if !net.partitioned.insert(REGIONS[r].to_string()) {
                    net.partitioned.remove(REGIONS[r]);
                }
            }
            16..=23 => {
                let p = self.rng.usize(0..self.regions[r].procs.len());
                let region = &mut self.regions[r];
                let allot = Arc::new(Allotments::new(region.name, REFRESH));
                allot.declare(self.declared.clone());
                let fresh = Limiter::new(
                    region.env.deps.dynamo.clone(),
                    &region.env.deps.tables.buckets,
                    self.limits.clone(),
                )
                .with_allotments(allot.clone());
                region.procs[p] = Process {
                    allot,
                    lim: fresh,
                    next_refresh: region.now(real),
                };
            }
            _ => {}
        }
    }

    async fn check_ledger(&mut self, step: usize) {
        let rows = match read_all(&self.truth, &self.declared.bucket).await {
            Ok((rows, _)) => rows,
            Err(e) => {
                self.report
                    .violations
                    .push(format!("step {step}: ledger unreadable: {e}"));
                return;
            }
        };
        if let Some(v) = oracle::sum_violation(&rows, self.declared.total) {
            self.report.violations.push(format!("step {step}: {v}"));
        }
    }
}

/// Runs one schedule and judges it.
pub async fn run(setup: Setup) -> Report {
    let mut w = world(setup).await;
    let start = w.real.now();
    for step in 0..setup.steps {
        let dt = Duration::from_millis(w.rng.u64(20..300));
        w.real.advance(dt);
        w.faults();
        w.upkeep().await;
        w.requests(step as f64 / setup.steps as f64, dt).await;
        if w.rng.u32(0..4) == 0 {
            let r = w.rng.usize(0..w.regions.len());
            w.rebalance(r).await;
        }
        w.check_ledger(step).await;
    }
    let run = w.real.now().since(start);
    let total = w.declared.total;
    w.report.capacity = total as f64 * (1.0 + run.as_secs_f64() / PERIOD.as_secs_f64());
    if setup.calm.is_some() {
        if let Some(v) = oracle::over_window(&w.admitted, w.declared.published_bound(), PERIOD) {
            w.report.violations.push(v);
        }
        let found = std::mem::take(&mut w.net.lock().expect("net").violations);
        w.report.violations.extend(found);
        return w.report;
    }
    // The end: every fault healed, one region gone for good; after its lease, grace and the
    // quarantine, everything it held and everything in transit is back with the live regions.
    let gone = w.rng.usize(0..w.regions.len());
    w.settling = true;
    w.net.lock().expect("net").partitioned.clear();
    w.net.lock().expect("net").conflict_permille = 0;
    w.net.lock().expect("net").lose_answer_permille = 0;
    let real = w.real.now();
    for (i, region) in w.regions.iter_mut().enumerate() {
        region.down_until = (i == gone).then_some(Timestamp::MAX);
    }
    let settle = TERMS.lease
        + TERMS.clock_margin * 2
        + w.declared.overdraw_for() * 2
        + saga::quarantine(&w.declared, REFRESH, TERMS.clock_margin) * 2;
    while w.real.now() < real.plus(settle) {
        w.real.advance(Duration::from_millis(1_000));
        w.upkeep().await;
        w.requests(1.0, Duration::from_millis(1_000)).await;
        for r in 0..w.regions.len() {
            w.rebalance(r).await;
        }
        w.check_ledger(setup.steps).await;
    }
    if let Ok((rows, _)) = read_all(&w.truth, &w.declared.bucket).await {
        let (held, moving) = oracle::sums(&rows);
        let stranded: u64 = rows
            .iter()
            .filter(|r| r.region == REGIONS[gone])
            .map(|r| r.allotment)
            .sum();
        if std::env::var("TURNSTILE_REGION_DEBUG").is_ok() {
            for r in &rows {
                eprintln!("{r:?}");
            }
            eprintln!("now {}", w.real.now());
        }
        if moving != 0 || stranded != 0 || held != total {
            w.report.violations.push(format!(
                "stranded after expiry: gone region {} holds {stranded}, {moving} in transit, \
                 live regions hold {}",
                REGIONS[gone],
                held - stranded,
            ));
        }
    }
    if let Some(v) = oracle::over_window(&w.admitted, w.declared.published_bound(), PERIOD) {
        w.report.violations.push(v);
    }
    let mut net = w.net.lock().expect("net");
    w.report.violations.append(&mut net.violations);
    w.report.conflicts = net.conflicts;
    w.report.lost_answers = net.lost_answers;
    drop(net);
    w.report
}
