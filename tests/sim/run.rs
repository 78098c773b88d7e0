//! Runs a [`Schedule`] against the real handlers (through their `lib.rs` entry points, as the
//! integration suite calls them) and DynamoDB Local behind `turnstile-faultproxy`, recording what
//! each client saw for the [`oracle`](crate::oracle).

use std::collections::{BTreeMap, BTreeSet};
use std::future::Future;
use std::sync::Mutex;
use std::time::Duration;

use aws_sdk_dynamodb::types::{AttributeValue, ReturnValue};
use futures::future::join_all;

use crate::clocks::Instance;
use shared::dynamo::{local_client, timeouts};
use shared::ids::TenantId;
use shared::mutation::Mutation;
use shared::session::attr as session_attr;
use shared::tenant::{Limits, Tenant};
use turnstile_faultproxy::{FaultProxy, Policy, Throttle, ThrottleError, ThrottleMode};

use crate::kv;
use crate::oracle::Seen;
use crate::reservations::{self, Actors};
use crate::schedule::{Caps, Fault, Op, Schedule, Step};
use crate::ws_support::{ws_event, World};

/// Per-attempt DynamoDB timeout of the handlers' client (the whole call: 3 x this).
pub const ATTEMPT: Duration = Duration::from_millis(500);
/// An upstream answer at least this slow, in a round with no injected fault, is the machine's
/// own stall (DynamoDB Local on a loaded machine): that round's 5xx answers and store errors are
/// judged as under a fault, and the soak counts it (`slow-machine`). Counts and limits are
/// checked all the same.
pub const SLOW: Duration = Duration::from_millis(300);
/// The runtime waking a ticker this late is a machine too loaded to keep the handlers' 500 ms
/// attempts (a quiet machine wakes it within a few ms).
pub const LAG: Duration = Duration::from_millis(100);
/// The "Lambda timeout": a step still running after this is dropped (a crash).
pub const LAMBDA_TIMEOUT: Duration = Duration::from_millis(1200);
/// The reconciler's grace: longer than any step can be half-way (the Lambda timeout, plus the
/// proxy's longest delay and a margin), as `reconcile::MIN_GRACE` is in production.
pub const GRACE: Duration = Duration::from_millis(1500);

/// Totals over schedules, for the summary.
#[derive(Debug, Default, Clone)]
pub struct Totals {
    pub schedules: u64,
    pub steps: u64,
    pub calls: u64,
    pub faults: BTreeMap<&'static str, u64>,
    pub crashes: u64,
    pub violations: Vec<String>,
}

impl Totals {
    pub fn add(&mut self, o: &Outcome) {
        self.schedules += 1;
        self.steps += o.steps;
        self.calls += o.calls;
        for (k, v) in &o.faults {
            *self.faults.entry(k).or_default() += v;
        }
        self.crashes += o.crashes;
        self.violations
            .extend(o.violations.iter().map(|v| format!("seed {}: {v}", o.seed)));
    }

    /// Another worker's totals (the soak runs several at once).
    pub fn merge(&mut self, other: Totals) {
        self.schedules += other.schedules;
        self.steps += other.steps;
        self.calls += other.calls;
        for (k, v) in other.faults {
            *self.faults.entry(k).or_default() += v;
        }
        self.crashes += other.crashes;
        self.violations.extend(other.violations);
    }
}

/// What one schedule did and what the oracle found.
#[derive(Debug, Default)]
pub struct Outcome {
    pub seed: u64,
    pub steps: u64,
    pub calls: u64,
    pub faults: BTreeMap<&'static str, u64>,
    pub crashes: u64,
    pub violations: Vec<String>,
}

/// One World (tables, Management API, the functions' state) behind a fault proxy, reused by every
/// schedule of a test: each schedule has its own tenants.
pub struct Sim {
    pub w: World,
    pub proxy: FaultProxy,
    /// Unproxied, for the oracle's reads and DynamoDB's own TTL deletions.
    pub direct: aws_sdk_dynamodb::Client,
    /// The reservation lanes' limiters and token remover.
    pub res: Actors,
    /// The kv lanes' buckets table.
    pub buckets: String,
    /// A second authorizer instance's tenant cache (the World's authorizer holds the first): a
    /// `$connect` carries the limits one of them served, as API Gateway passes the authorizer's
    /// context, stale by up to the cache's time after a change.
    authorizer_b: shared::tenant::TenantCache,
    /// One tenant change at a time, as one operator runs `turnstile tenant put`.
    operator: tokio::sync::Mutex<()>,
    /// The next request the proxy holds ([`Fault::Late`]) is numbered this.
    late_next: std::sync::atomic::AtomicUsize,
    /// The longest this process's runtime woke a ticker late since [`Sim::reset_slow`] (µs): a
    /// machine too loaded to run the handlers on time, whatever DynamoDB Local answered.
    lag_us: std::sync::Arc<std::sync::atomic::AtomicU64>,
    /// A step took a whole attempt timeout since [`Sim::reset_slow`].
    stalled: std::sync::atomic::AtomicBool,
    /// Each WebSocket function instance's dependencies, with its own clock.
    inst: crate::clocks::Instances,
}

/// The state of a run's reservation and kv lanes (`None`: the schedule has none).
type Lanes<'a> = (
    Option<&'a Mutex<reservations::State>>,
    Option<&'a Mutex<kv::State>>,
);

/// A TTL stream record waiting for (re)delivery.
#[derive(Clone)]
struct Record {
    event: aws_lambda_events::dynamodb::Event,
}

/// The mutable state of one run: the model's limits, the stream's queue, what clients saw.
struct Run {
    caps: Vec<Caps>,
    /// Each tenant's `connectionShards` now (resharded by `Op::Reshard`).
    shards: Vec<u64>,
    /// Each tenant's highest `tenantConnections` since it was last resharded (or created).
    high: Vec<u64>,
    queue: Vec<Record>,
    records: u32,
    seen: Seen,
    crashes: u64,
    gone: BTreeSet<String>,
}

impl Run {
    /// For each sharded tenant, the cap the oracle allows while a lowered cap is not yet exact
    /// (see [`Oracle::check`]); 0 for an unsharded one (exact at once).
    fn lowered(&self) -> Vec<u64> {
        self.shards
            .iter()
            .zip(&self.high)
            .map(|(n, h)| if *n > 1 { *h } else { 0 })
            .collect()
    }
}

impl Sim {
    pub async fn new(mutation: Option<Mutation>) -> Sim {
        let mut w = World::new().await;
        let proxy = FaultProxy::start(&w.env.endpoint)
            .await
            .expect("fault proxy starts");
        let c = local_client(&proxy.url(), Some(&w.env.counter));
        w.env.deps.dynamo = aws_sdk_dynamodb::Client::from_conf(
            c.config()
                .to_builder()
                .timeout_config(timeouts(ATTEMPT))
                .build(),
        );
        let direct = local_client(&w.env.endpoint, None);
        let res = Actors::new(&mut w, &direct).await;
        let buckets = kv::table(&mut w, &direct).await;
        if let Some(m) = mutation {
            shared::mutation::enable(&w.env.deps.tables.counters, m);
            shared::mutation::enable(res.table(), m);
            shared::mutation::enable(&w.env.deps.tables.limits, m);
            shared::mutation::enable(&buckets, m);
        }
        let authorizer_b = shared::tenant::TenantCache::new(w.authorizer.tenants.ttl());
        let inst = crate::clocks::Instances::new(&w.env.deps, &w.env.clock);
        Sim {
            w,
            proxy,
            direct,
            res,
            buckets,
            authorizer_b,
            operator: tokio::sync::Mutex::new(()),
            late_next: std::sync::atomic::AtomicUsize::new(0),
            lag_us: ticker(),
            stalled: std::sync::atomic::AtomicBool::new(false),
            inst,
        }
    }

    fn tenant(&self, s: &Schedule, t: usize) -> TenantId {
        TenantId::parse(&format!("sim{:x}-t{t}", s.seed)).expect("valid tenant id")
    }

    fn sid(s: usize) -> String {
        format!("s{s}")
    }

    fn cid(sch: &Schedule, c: u32) -> String {
        format!("k{:x}c{c}", sch.seed)
    }

    async fn put_tenant(&self, t: &TenantId, limits: Limits) {
        let direct = shared::Deps {
            dynamo: self.direct.clone(),
            ..self.w.env.deps.clone()
        };
        shared::tenant::store::put(
            &direct,
            &Tenant {
                tenant_id: t.clone(),
                limits,
            },
        )
        .await
        .expect("tenant row written");
    }

    fn set_fault(&self, f: Fault) {
        let mut p = Policy::default();
        match f {
            Fault::None => {}
            Fault::Throttle(pct) => {
                p.throttle = Some(Throttle {
                    error: ThrottleError::Throttling,
                    mode: ThrottleMode::Fraction(f64::from(pct) / 100.0),
                })
            }
            Fault::ThrottleReads(pct) | Fault::ThrottleDeletes(pct) => {
                p.throttle = Some(Throttle {
                    error: ThrottleError::Throttling,
                    mode: ThrottleMode::Fraction(f64::from(pct) / 100.0),
                });
                let op = if matches!(f, Fault::ThrottleReads(_)) {
                    "GetItem"
                } else {
                    "DeleteItem"
                };
                p.only = vec![op.into()];
            }
            Fault::Delay(ms) => p.delay = Some(Duration::from_millis(u64::from(ms))),
            Fault::DelayUpdates(ms) => {
                p.delay = Some(Duration::from_millis(u64::from(ms)));
                p.only = vec!["UpdateItem".into()];
            }
            Fault::LoseAnswers(n) => p.lose_answers = u64::from(n),
            Fault::LoseUpdateAnswers(n) => {
                p.lose_answers = u64::from(n);
                p.only = vec!["UpdateItem".into()];
            }
            Fault::Conflicts => p.conflicts = true,
            Fault::StallUpdates => {
                p.stall = true;
                p.only = vec!["UpdateItem".into()];
            }
            Fault::Late { nth, tx } => {
                p.hold = vec![u64::from(nth)];
                p.only = vec![if tx {
                    "TransactWriteItems"
                } else {
                    "UpdateItem"
                }
                .into()];
            }
            // The answers before the outage; [`Sim::outage`] takes the endpoint down.
            Fault::Outage { lose, .. } => p.lose_answers = u64::from(lose),
        }
        self.proxy.set_policy(p);
    }

    /// The endpoint down for a while within the round (`Fault::Outage`), as clients see a
    /// restart of DynamoDB: connections closed unanswered, then back up. Why not a real restart
    /// of DynamoDB Local: decision 2300.
    async fn outage(&self, fault: Fault) {
        if let Fault::Outage {
            after_ms, down_ms, ..
        } = fault
        {
            tokio::time::sleep(Duration::from_millis(u64::from(after_ms))).await;
            self.proxy.set_policy(Policy::refuse());
            tokio::time::sleep(Duration::from_millis(u64::from(down_ms))).await;
            self.proxy.set_policy(Policy::default());
        }
    }

    /// Runs `attempt` until it succeeds, again while DynamoDB Local was slow during it (4 tries
    /// at most): the failure of an attempt during which every answer was fast, if any.
    async fn again_while_slow<E, F: Future<Output = Result<(), E>>>(
        &self,
        mut attempt: impl FnMut() -> F,
    ) -> Option<E> {
        for _ in 0..4 {
            self.reset_slow();
            match attempt().await {
                Ok(()) => return None,
                Err(e) if !self.slow() => return Some(e),
                Err(_) => {}
            }
        }
        None
    }

    /// Whether DynamoDB Local answered some request slower than [`SLOW`], or this process's
    /// runtime woke as late, since [`Sim::reset_slow`].
    fn slow(&self) -> bool {
        let lag = self.lag_us.load(std::sync::atomic::Ordering::SeqCst);
        if Duration::from_micros(lag) >= LAG
            || self.stalled.load(std::sync::atomic::Ordering::SeqCst)
        {
            return true;
        }
        self.proxy.stats().slowest_upstream >= SLOW
    }

    /// Starts a new measure of slowness: the proxy's stats and the runtime's lag.
    fn reset_slow(&self) {
        self.proxy.reset_stats();
        self.lag_us.store(0, std::sync::atomic::Ordering::SeqCst);
        self.stalled
            .store(false, std::sync::atomic::Ordering::SeqCst);
    }

    /// Delivers the requests the proxy held ([`Fault::Late`]), now that their clients gave up
    /// and retried and the round's later requests landed.
    async fn deliver_late(&self) {
        use std::sync::atomic::Ordering;
        loop {
            let i = self.late_next.load(Ordering::SeqCst);
            match self.proxy.deliver(i).await {
                Ok(_) | Err(turnstile_faultproxy::DeliverError::Upstream { .. }) => {
                    self.late_next.fetch_add(1, Ordering::SeqCst);
                }
                Err(turnstile_faultproxy::DeliverError::AlreadyDelivered(_)) => {
                    self.late_next.fetch_add(1, Ordering::SeqCst);
                }
                Err(turnstile_faultproxy::DeliverError::NotHeld(_)) => break,
            }
        }
    }

    /// Lets requests of dropped steps land: a crashed step's request may still be on its way to
    /// DynamoDB Local (held by the round's delay, if any). Stalled requests never land.
    async fn settle(&self, fault: Fault, crashed: bool) {
        let delay = match fault {
            Fault::Delay(ms) | Fault::DelayUpdates(ms) => u64::from(ms),
            _ => 0,
        };
        if crashed || delay > 0 {
            tokio::time::sleep(Duration::from_millis(delay + 150)).await;
        }
    }

    /// Runs one schedule and checks it; never panics on what the handlers answer.
    pub async fn run(&self, sch: &Schedule) -> Outcome {
        let mut out = Outcome {
            seed: sch.seed,
            steps: sch.steps() as u64,
            ..Outcome::default()
        };
        self.set_fault(Fault::None);
        self.w.env.counter.reset();
        let tenants: Vec<TenantId> = (0..sch.tenants.len())
            .map(|t| self.tenant(sch, t))
            .collect();
        for (t, spec) in tenants.iter().zip(&sch.tenants) {
            self.put_tenant(t, spec.limits(&spec.caps, spec.shards))
                .await;
        }
        let mut violations: Vec<String> = Vec::new();
        let mut found = |v: String| {
            if !violations.contains(&v) {
                violations.push(v);
            }
        };
        // The Management API's log is read from the start of this schedule.
        self.w.api.clear();
        let run = Mutex::new(Run {
            caps: sch.tenants.iter().map(|t| t.caps).collect(),
            shards: sch.tenants.iter().map(|t| t.shards).collect(),
            high: sch
                .tenants
                .iter()
                .map(|t| t.caps.tenant_connections)
                .collect(),
            queue: Vec::new(),
            records: 0,
            seen: Seen::new(
                sch,
                tenants.iter().map(|t| t.to_string()).collect(),
                self.w.authorizer.tenants.ttl(),
            ),
            crashes: 0,
            gone: BTreeSet::new(),
        });
        let res = sch
            .res
            .as_ref()
            .map(|spec| Mutex::new(reservations::State::new(sch.seed, spec, sch.skew_ms)));
        self.res.set_skew(sch.skew_ms);
        self.inst.start(sch.seed);
        let res = res.as_ref();
        if let Some(st) = res {
            reservations::start(&self.res, st, self.inst.moving.now()).await;
        }
        let kvs = sch.kv.as_ref().map(|spec| {
            Mutex::new(kv::State::new(
                sch.seed,
                spec,
                &self.w.env.deps.dynamo,
                &self.buckets,
                sch.skew_ms,
            ))
        });
        let kvs = kvs.as_ref();
        for (i, round) in sch.rounds.iter().enumerate() {
            self.inst
                .moving
                .next_round(Duration::from_secs(round.advance));
            let now = self.inst.moving.now();
            if round.fault != Fault::None {
                *out.faults.entry(round.fault.kind()).or_default() += 1;
            }
            {
                let mut r = run.lock().unwrap();
                let (caps, lowered) = (r.caps.clone(), r.lowered());
                r.seen
                    .round_start(i, now, round.fault != Fault::None, &caps);
                r.seen.set_lowered(lowered);
            }
            let faulted = round.fault != Fault::None;
            if let Some(st) = res {
                st.lock().unwrap().lane.start(i, now, faulted);
            }
            if let Some(st) = kvs {
                st.lock().unwrap().lane.start(i, now, faulted);
            }
            self.set_fault(round.fault);
            self.reset_slow();
            let reconciling = round
                .lanes
                .iter()
                .any(|l| l.iter().any(|s| matches!(s.op, Op::Reconcile { .. })));
            let lanes = round.lanes.iter().enumerate().map(|(j, lane)| {
                let run = &run;
                let tenants = &tenants;
                async move {
                    let reconciler = lane.iter().any(|s| matches!(s.op, Op::Reconcile { .. }));
                    let deletes = lane
                        .iter()
                        .all(|s| matches!(s.op, Op::DeleteSession { .. }));
                    if let (Some(ms), true) = (sch.delete_after_ms, deletes) {
                        tokio::time::sleep(Duration::from_millis(ms)).await;
                    }
                    let delivers = lane.iter().all(|s| matches!(s.op, Op::Deliver { .. }));
                    if let (Some(ms), true, true) = (sch.deliver_at_ms, reconciling, delivers) {
                        let later = 150 * j as u64;
                        tokio::time::sleep(Duration::from_millis(ms + later)).await;
                    }
                    match sch.reconcile_after_ms {
                        _ if reconciling && sch.deliver_at_ms.is_some() => {}
                        // The reconciler starts once the other lanes are under way.
                        Some(ms) if reconciler => {
                            tokio::time::sleep(Duration::from_millis(ms)).await;
                        }
                        Some(_) => {}
                        None if reconciling && !reconciler => {
                            // Spread the other lanes over the reconciler's phases.
                            let at = (sch.seed.wrapping_mul(31).wrapping_add((i * 7 + j) as u64))
                                % (2 * GRACE.as_millis() as u64 + 200);
                            tokio::time::sleep(Duration::from_millis(at)).await;
                        }
                        None => {}
                    }
                    for step in lane {
                        self.step(sch, tenants, step, run, (res, kvs)).await;
                    }
                }
            });
            let crashes_before = run.lock().unwrap().crashes;
            futures::future::join(join_all(lanes), self.outage(round.fault)).await;
            self.set_fault(Fault::None);
            self.deliver_late().await;
            let crashed = run.lock().unwrap().crashes > crashes_before;
            self.settle(round.fault, crashed).await;
            if !faulted && run.lock().unwrap().seen.failed() {
                // A 5xx with no fault: let a request its handler gave up on finish upstream, so
                // its time is in the proxy's stats before they are read.
                tokio::time::sleep(ATTEMPT + Duration::from_millis(200)).await;
            }
            let slow = !faulted && self.slow();
            if slow {
                *out.faults.entry("slow-machine").or_default() += 1;
                run.lock().unwrap().seen.excuse_slow();
            }
            {
                let mut r = run.lock().unwrap();
                r.seen.sync_closed(&self.w.api.received());
                r.seen.end_round();
                for v in r.seen.take() {
                    found(v);
                }
            }
            if let Some(st) = res {
                st.lock().unwrap().lane.end_round(slow);
                for v in reservations::checkpoint(st) {
                    found(v);
                }
            }
            if let Some(st) = kvs {
                let mut st = st.lock().unwrap();
                st.lane.end_round(slow);
                for v in st.check() {
                    found(v);
                }
            }
        }
        // The end: every queued record delivered until acknowledged (the event source retries),
        // then a reconciler run with nothing in flight, after which every count is the truth.
        self.set_fault(Fault::None);
        let pending: Vec<Record> = std::mem::take(&mut run.lock().unwrap().queue);
        for rec in pending {
            // Redelivered while DynamoDB Local is slow, as the event source retries.
            let failed = self
                .again_while_slow(|| async {
                    let ev = rec.event.clone();
                    let r =
                        ttl_sweeper::handle(self.inst.deps(Instance::Sweeper), &self.w.sweeper, ev)
                            .await;
                    r.batch_item_failures.is_empty().then_some(()).ok_or(())
                })
                .await;
            if failed.is_some() {
                found("a TTL record failed with no fault injected".into());
            }
        }
        // Before the repair: every tenant filled to its cap and one past it. A leak may refuse
        // (the reconciler has not run), but a capacity released twice, or a count the reconciler
        // took too much off, admits past the cap here, where the final repair would hide it.
        self.fill(sch, &tenants, &run).await;
        {
            let mut r = run.lock().unwrap();
            for v in r.seen.take() {
                found(v);
            }
        }
        // Twice: the first run's own releases of gone sockets move the count, so its repair may
        // wait (`Busy`) for a quiet run; the second one is quiet. A run skipped while DynamoDB
        // Local was slow is run again.
        for t in tenants.iter().chain(&tenants) {
            let failed = self
                .again_while_slow(|| async {
                    let report = crate::ws_support::reconcile_tenant(
                        self.inst.deps(Instance::Reconciler),
                        t,
                        &self.w.api.url(),
                        false,
                        Duration::from_millis(20),
                    )
                    .await;
                    if skipped(&report) {
                        // No fault is injected now: a request that timed out waited on the machine.
                        if format!("{report:?}").contains("timed out") {
                            self.stalled
                                .store(true, std::sync::atomic::Ordering::SeqCst);
                        }
                        Err(report)
                    } else {
                        Ok(())
                    }
                })
                .await;
            if let Some(report) = failed {
                found(format!("the final reconcile skipped {t}: {report:?}"));
            }
        }
        for v in self.probe(sch, &tenants, &run).await {
            found(v);
        }
        out.crashes = run.lock().unwrap().crashes;
        if let Some(st) = res {
            self.reset_slow();
            let slow = || self.slow();
            for v in reservations::finish(&self.res, &self.w, st, &slow).await {
                found(v);
            }
        }
        out.calls = self.w.env.counter.total();
        if out.crashes > 0 {
            *out.faults.entry("crash").or_default() += out.crashes;
        }
        out.violations = violations;
        out
    }

    /// Runs one step under its crash budget and the Lambda timeout, recording what its client saw.
    async fn step(
        &self,
        sch: &Schedule,
        tenants: &[TenantId],
        step: &Step,
        run: &Mutex<Run>,
        lanes: Lanes<'_>,
    ) {
        // The reconciler's Lambda outlives its two graces.
        let limit = match step.op {
            Op::Reconcile { .. } => 3 * GRACE,
            _ => LAMBDA_TIMEOUT,
        };
        // `Expire` is DynamoDB's TTL service, not a Lambda: it never stops between deleting the
        // row and emitting its stream record, so a crash drawn for it is not applied.
        let crash_ms = match step.op {
            Op::Expire { .. } => None,
            _ => step.crash_ms,
        };
        let budget = crash_ms
            .map(|ms| Duration::from_millis(u64::from(ms)))
            .unwrap_or(limit);
        let began = std::time::Instant::now();
        let done = tokio::time::timeout(budget, self.op(sch, tenants, &step.op, run, lanes)).await;
        // One handler step that took a whole attempt timeout: with no fault injected, only the
        // machine makes a request wait that long (the operator's steps and the reconciler's graces
        // are longer by design).
        if began.elapsed() >= ATTEMPT
            && !matches!(step.op, Op::Reconcile { .. } | Op::Reshard { .. })
        {
            self.stalled
                .store(true, std::sync::atomic::Ordering::SeqCst);
        }
        if done.is_err() {
            if let (Op::Res(o), Some(st)) = (&step.op, lanes.0) {
                st.lock().unwrap().crashed(o);
            }
            let mut r = run.lock().unwrap();
            r.crashes += 1;
            r.seen.crashed(&step.op);
            // A crashed `$connect` is refused by API Gateway: the socket never opens.
            if let Op::Connect { c, .. } | Op::DisconnectFirst { c, .. } = step.op {
                let cid = Self::cid(sch, c);
                self.w.recorder.mark_gone(&cid);
                r.gone.insert(cid);
            }
            // A crashed delivery is retried by the event source: its record stays queued.
        }
        // An operator whose `turnstile tenant put` (or `turnstile limits load`) died runs it
        // again until it answers: what they asked for is in effect from then on.
        if done.is_err()
            && matches!(
                step.op,
                Op::Limits { .. } | Op::Res(reservations::ResOp::SetLimit { .. })
            )
        {
            self.op(sch, tenants, &step.op, run, lanes).await;
        }
    }

    fn limits(&self, sch: &Schedule, run: &Mutex<Run>, t: usize) -> Limits {
        let r = run.lock().unwrap();
        sch.tenants[t].limits(&r.caps[t], r.shards[t])
    }

    /// The limits the authorizer puts in `$connect`'s context for connection `c` of tenant `t`:
    /// the tenant row as one of two authorizer instances' tenant caches holds it (production's
    /// cache and time: a change reaches `$connect` within that time). The authorizer's read is
    /// unproxied: its failures refuse the socket before `$connect`, which is not judged here.
    async fn authorized(
        &self,
        sch: &Schedule,
        tenants: &[TenantId],
        run: &Mutex<Run>,
        t: usize,
        c: u32,
    ) -> Limits {
        let (cache, i) = if sch.seed.wrapping_add(u64::from(c)) % 2 == 0 {
            (&self.w.authorizer.tenants, Instance::AuthorizerA)
        } else {
            (&self.authorizer_b, Instance::AuthorizerB)
        };
        let direct = shared::Deps {
            dynamo: self.direct.clone(),
            ..self.inst.deps(i).clone()
        };
        match cache.get(&direct, &tenants[t]).await {
            Ok(Some(tenant)) => tenant.limits,
            _ => self.limits(sch, run, t),
        }
    }

    /// The session API's `PUT` or `DELETE` of session `s`.
    async fn session_call(&self, method: &str, t: &TenantId, s: usize) -> Answer {
        let sid = Self::sid(s);
        let ev = crate::ws_support::session_event(
            method,
            "/session",
            &[("tenantId", t.as_str()), ("sessionId", &sid)],
            None,
        );
        answer(
            session_api::handle(
                self.inst.deps(Instance::SessionApi),
                &self.w.session_api,
                ev,
            )
            .await
            .map(|r| (r.status_code, String::new())),
        )
    }

    async fn connect(&self, t: &TenantId, s: &str, cid: &str, l: &Limits) -> Answer {
        let ev = event("connect/connect.json", t, s, cid, l);
        // Two `$connect` instances, each socket's retries on the same one.
        let i = if cid.bytes().map(u32::from).sum::<u32>() % 2 == 0 {
            Instance::ConnectA
        } else {
            Instance::ConnectB
        };
        answer(connect::handle(self.inst.deps(i), &self.w.connect, ev).await)
    }

    async fn disconnect(&self, t: &TenantId, s: &str, cid: &str, l: &Limits) -> Answer {
        let ev = event("disconnect/disconnect.json", t, s, cid, l);
        answer(
            disconnect::handle(self.inst.deps(Instance::Disconnect), &self.w.disconnect, ev).await,
        )
    }

    async fn op(
        &self,
        sch: &Schedule,
        tenants: &[TenantId],
        op: &Op,
        run: &Mutex<Run>,
        (res, kvs): Lanes<'_>,
    ) {
        let now = self.inst.moving.now();
        match *op {
            Op::Res(ref o) => {
                if let Some(st) = res {
                    reservations::step(&self.res, sch.seed, o, st).await;
                }
            }
            Op::Kv(ref o) => {
                if let Some(st) = kvs {
                    kv::step(o, st).await;
                }
            }
            Op::PutSession { t, s } | Op::DeleteSession { t, s } => {
                let method = if matches!(op, Op::PutSession { .. }) {
                    "PUT"
                } else {
                    "DELETE"
                };
                let a = self.session_call(method, &tenants[t], s).await;
                run.lock().unwrap().seen.answer(op, a);
            }
            Op::Connect { t, s, c, twice } => {
                let l = self.authorized(sch, tenants, run, t, c).await;
                let cid = Self::cid(sch, c);
                let sid = Self::sid(s);
                let n = if twice { 2 } else { 1 };
                let inc = run.lock().unwrap().seen.incarnation(t, s);
                // Inside its `$connect`, the socket answers the Management API 410, as API
                // Gateway's does.
                self.w.recorder.mark_gone(&cid);
                let answers =
                    join_all((0..n).map(|_| self.connect(&tenants[t], &sid, &cid, &l))).await;
                let admitted = answers.iter().any(|a| a.status() == Some(200));
                if admitted && sch.open_ms > 0 {
                    // API Gateway opens the socket after the 200 reaches it: until then the
                    // Management API answers 410 for it.
                    let ms = sch.seed.wrapping_mul(31).wrapping_add(u64::from(c) * 17)
                        % u64::from(sch.open_ms);
                    tokio::time::sleep(Duration::from_millis(ms)).await;
                }
                let mut r = run.lock().unwrap();
                for a in answers {
                    r.seen.answer(op, a);
                }
                if admitted {
                    // Its client may have left meanwhile: then the socket stays gone.
                    if !r.gone.contains(&cid) {
                        self.w.recorder.mark_live(&cid);
                    }
                    r.seen.sync_closed(&self.w.api.received());
                    r.seen.admitted(t, s, inc, &cid, now);
                } else {
                    self.w.recorder.mark_gone(&cid);
                    r.gone.insert(cid);
                }
            }
            Op::DisconnectFirst { t, s, c } => {
                let l = self.authorized(sch, tenants, run, t, c).await;
                let cid = Self::cid(sch, c);
                let sid = Self::sid(s);
                self.w.recorder.mark_gone(&cid);
                run.lock().unwrap().gone.insert(cid.clone());
                let (d, a) = futures::join!(
                    self.disconnect(&tenants[t], &sid, &cid, &l),
                    self.connect(&tenants[t], &sid, &cid, &l)
                );
                let mut r = run.lock().unwrap();
                if a.status() == Some(200) {
                    // Admitted, and its client already gone.
                    let inc = r.seen.incarnation(t, s);
                    r.seen.sync_closed(&self.w.api.received());
                    r.seen.admitted(t, s, inc, &cid, now);
                    r.seen.left(&cid);
                }
                r.seen.answer(op, d);
                r.seen.answer(op, a);
            }
            Op::Leave { t, s, c, times } => {
                let l = self.limits(sch, run, t);
                let cid = Self::cid(sch, c);
                {
                    // Gone first, then marked: a `$connect` answered meanwhile sees the client left.
                    let mut r = run.lock().unwrap();
                    r.gone.insert(cid.clone());
                    r.seen.left(&cid);
                }
                self.w.recorder.mark_gone(&cid);
                for _ in 0..times {
                    let a = self.disconnect(&tenants[t], &Self::sid(s), &cid, &l).await;
                    run.lock().unwrap().seen.answer(op, a);
                }
            }
            Op::Message { t, s, c } => {
                let l = self.limits(sch, run, t);
                let cid = Self::cid(sch, c);
                let sid = Self::sid(s);
                {
                    let mut r = run.lock().unwrap();
                    r.seen.sync_closed(&self.w.api.received());
                    // A client sends only on a socket it holds: admitted, not left, not closed.
                    if r.gone.contains(&cid) || !r.seen.holds(&cid) {
                        return;
                    }
                }
                let mut ev = event("message/message.json", &tenants[t], &sid, &cid, &l);
                ev.body = Some("hello".into());
                let a = answer(
                    message::handle(self.inst.deps(Instance::Message), &self.w.message, ev).await,
                );
                let mut r = run.lock().unwrap();
                if a.status() == Some(200) {
                    r.seen.sync_closed(&self.w.api.received());
                    r.seen.message(&cid, now);
                }
                r.seen.answer(op, a);
            }
            Op::Expire { t, s } => {
                if let Some(event) = self.expire(sch, &tenants[t], s, run).await {
                    run.lock().unwrap().queue.push(Record { event });
                }
            }
            Op::Deliver { pick, again } => {
                let rec = {
                    let r = run.lock().unwrap();
                    if r.queue.is_empty() {
                        return;
                    }
                    let i = pick as usize % r.queue.len();
                    (i, r.queue[i].clone())
                };
                let res = ttl_sweeper::handle(
                    self.inst.deps(Instance::Sweeper),
                    &self.w.sweeper,
                    rec.1.event.clone(),
                )
                .await;
                let mut r = run.lock().unwrap();
                let ok = res.batch_item_failures.is_empty();
                r.seen
                    .answer(op, Answer::Status(if ok { 200 } else { 500 }));
                if ok && !again {
                    // Acknowledged: the event source stops delivering it (find it again: other
                    // lanes may have changed the queue meanwhile).
                    let id = rec.1.event.records[0].event_id.clone();
                    if let Some(k) = r
                        .queue
                        .iter()
                        .position(|q| q.event.records[0].event_id == id)
                    {
                        r.queue.remove(k);
                    }
                }
            }
            Op::Reconcile { t } => {
                let deps = self.inst.deps(Instance::Reconciler);
                let report = reconcile(&self.w, deps, &tenants[t], GRACE).await;
                let a = match report {
                    Ok(rep) if !skipped(&rep) => Answer::Status(200),
                    Ok(_) => Answer::Status(500),
                    Err(e) => Answer::Error(e),
                };
                run.lock().unwrap().seen.answer(op, a);
            }
            Op::Limits { t, caps } => {
                let _one = self.operator.lock().await;
                // The new caps may be in effect from the moment the write is sent (DynamoDB may
                // apply it before answering, or the operator's process may die before reading
                // the answer), so the oracle allows them from then on.
                let shards = {
                    let mut r = run.lock().unwrap();
                    r.high[t] = r.high[t].max(caps.tenant_connections);
                    r.seen.caps_in_effect(t, caps, now);
                    let lowered = r.lowered();
                    r.seen.set_lowered(lowered);
                    r.shards[t]
                };
                self.put_tenant(&tenants[t], sch.tenants[t].limits(&caps, shards))
                    .await;
                run.lock().unwrap().caps[t] = caps;
            }
            Op::Reshard { t, shards, caps } => {
                let _one = self.operator.lock().await;
                // Drained: every session deleted (its connections closed and released); the
                // operator repeats a DELETE that failed (a slow machine's timeout) until it is done.
                for s in 0..sch.sessions {
                    for _ in 0..5 {
                        let a = self.session_call("DELETE", &tenants[t], s).await;
                        let done = matches!(a.status(), Some(200 | 404));
                        let op = Op::DeleteSession { t, s };
                        run.lock().unwrap().seen.answer(&op, a);
                        if done {
                            break;
                        }
                    }
                }
                // `turnstile tenant put --connection-shards M --reshard-drained` (decision 2206):
                // the counters fenced first, then the row.
                let was = run.lock().unwrap().shards[t];
                let direct = shared::Deps {
                    dynamo: self.direct.clone(),
                    ..self.w.env.deps.clone()
                };
                shared::admission::shards::fence(&direct, &tenants[t], was, shards)
                    .await
                    .expect("the reshard's fence is written");
                self.put_tenant(&tenants[t], sch.tenants[t].limits(&caps, shards))
                    .await;
                {
                    let mut r = run.lock().unwrap();
                    r.caps[t] = caps;
                    r.shards[t] = shards;
                    r.high[t] = caps.tenant_connections;
                    r.seen.caps_in_effect(t, caps, now);
                    let lowered = r.lowered();
                    r.seen.set_lowered(lowered);
                }
                for s in 0..sch.sessions {
                    let a = self.session_call("PUT", &tenants[t], s).await;
                    run.lock().unwrap().seen.answer(&Op::PutSession { t, s }, a);
                }
            }
        }
    }

    /// DynamoDB's TTL process: deletes the session if its TTL has passed (unfaulted: it is not
    /// a client of the proxy) and returns the stream record it would emit. The sweeper closes the
    /// sockets: their clients are gone.
    async fn expire(
        &self,
        sch: &Schedule,
        t: &TenantId,
        s: usize,
        run: &Mutex<Run>,
    ) -> Option<aws_lambda_events::dynamodb::Event> {
        let now = self.inst.moving.now();
        let sid = shared::ids::SessionId::parse(&Self::sid(s)).ok()?;
        let out = self
            .direct
            .delete_item()
            .table_name(&self.w.env.deps.tables.sessions)
            .set_key(Some(shared::session::store::key(t, &sid)))
            .condition_expression("#ttl < :now")
            .expression_attribute_names("#ttl", session_attr::SESSION_TTL)
            .expression_attribute_values(":now", AttributeValue::N(now.as_secs().to_string()))
            .return_values(ReturnValue::AllOld)
            .send()
            .await
            .ok()?;
        let old = out.attributes()?.clone();
        let mut r = run.lock().unwrap();
        for c in old
            .get(session_attr::CONNECTION_IDS)
            .and_then(|v| v.as_ss().ok())
            .cloned()
            .unwrap_or_default()
        {
            // Their clients are gone with the session: no longer held (the sweeper's close of
            // a gone socket answers 410, never the 204 the oracle otherwise waits for).
            self.w.recorder.mark_gone(&c);
            r.seen.left(&c);
            r.gone.insert(c);
        }
        r.seen.churned(t_index(sch, t), s);
        r.records += 1;
        let id = format!("sim-{:x}-{}", sch.seed, r.records);
        let image: serde_json::Map<String, serde_json::Value> = old
            .iter()
            .map(|(k, v)| (k.clone(), stream_json(v)))
            .collect();
        let keys = serde_json::json!({
            session_attr::TENANT_ID: {"S": t.as_str()}, session_attr::SESSION_ID: {"S": Self::sid(s)}
        });
        let ev = serde_json::json!({"Records": [{
            "eventID": id,
            "eventName": "REMOVE",
            "eventVersion": "1.1",
            "eventSource": "aws:dynamodb",
            "awsRegion": "eu-west-1",
            "userIdentity": {"type": "Service", "principalId": "dynamodb.amazonaws.com"},
            "dynamodb": {
                "ApproximateCreationDateTime": now.as_secs(),
                "Keys": keys,
                "OldImage": image,
                "SequenceNumber": format!("{}{:08}", 1000 + r.records, sch.seed % 100_000_000),
                "SizeBytes": 100,
                "StreamViewType": "NEW_AND_OLD_IMAGES"
            },
            "eventSourceARN": "arn:aws:dynamodb:eu-west-1:123456789012:table/sim/stream/2024-01-01T00:00:00.000"
        }]});
        match serde_json::from_value(ev) {
            Ok(ev) => Some(ev),
            Err(e) => panic!("the simulated stream record does not parse: {e}"),
        }
    }

    /// The leak check, from the outside: after the final deliveries and reconciler runs (the
    /// documented repair), each tenant admits as many new sockets as its cap leaves free beside
    /// the ones its clients hold, each in a new session a minute after the last (every
    /// per-minute window has room again). A refusal is capacity clients cannot get.
    async fn probe(&self, sch: &Schedule, tenants: &[TenantId], run: &Mutex<Run>) -> Vec<String> {
        let mut found = Vec::new();
        for (t, tid) in tenants.iter().enumerate() {
            let (cap, held, ids) = {
                let mut r = run.lock().unwrap();
                r.seen.sync_closed(&self.w.api.received());
                let ids = r.seen.held_ids(t);
                (r.caps[t].tenant_connections, ids.len() as u64, ids)
            };
            let free = cap.saturating_sub(held);
            let mut answers = Vec::new();
            let mut admitted = 0;
            for k in 0..free as usize {
                self.w.env.clock.advance(Duration::from_secs(61));
                let s = 100 + k;
                // A 5xx while DynamoDB Local is slow is tried again (a new socket each time).
                for attempt in 0..3 {
                    self.reset_slow();
                    let put = self.session_call("PUT", tid, s).await;
                    let l = self.limits(sch, run, t);
                    let cid = format!("k{:x}p{t}x{k}a{attempt}", sch.seed);
                    let a = self.connect(tid, &Self::sid(s), &cid, &l).await;
                    let status = a.status();
                    answers.push(format!(
                        "PUT {} / $connect {}",
                        put.describe(),
                        a.describe()
                    ));
                    if status == Some(200) {
                        admitted += 1;
                    }
                    if matches!(status, Some(200 | 429)) {
                        break;
                    }
                    // A 5xx (a timeout on a loaded machine): API Gateway refuses the socket, the
                    // reconciler repairs what it may have charged, and the client tries again.
                    // (A minute on, past the grace a 410 needs after a join, then two runs.)
                    self.w.recorder.mark_gone(&cid);
                    self.w.env.clock.advance(Duration::from_secs(61));
                    for _ in 0..2 {
                        crate::ws_support::reconcile_tenant(
                            self.inst.deps(Instance::Reconciler),
                            tid,
                            &self.w.api.url(),
                            false,
                            Duration::from_millis(20),
                        )
                        .await;
                    }
                }
            }
            // One more, a minute on: the tenant is full as far as its clients can tell (beside
            // a sharded tenant's allowance after a lowered cap), so it must be refused.
            let allowed = {
                let r = run.lock().unwrap();
                cap.max(r.lowered()[t])
            };
            if admitted == free && held + free + 1 > allowed {
                self.w.env.clock.advance(Duration::from_secs(61));
                let s = 100 + free as usize;
                self.session_call("PUT", tid, s).await;
                let l = self.limits(sch, run, t);
                let cid = format!("k{:x}p{t}over", sch.seed);
                let a = self.connect(tid, &Self::sid(s), &cid, &l).await;
                self.w.recorder.mark_gone(&cid);
                if a.status() == Some(200) {
                    found.push(format!(
                        "over-admission at the end: tenant {tid} admitted a socket past its cap \
                         {allowed} with {} held by its clients ({ids:?}) and {free} new; the \
                         product's state, for diagnosis: {}",
                        held + free,
                        self.diagnose(tid).await
                    ));
                }
            }
            if admitted < free {
                found.push(format!(
                    "leaked: tenant {tid} admitted {admitted} of the {free} new sockets its cap \
                     {cap} leaves beside the {held} its clients hold ({ids:?}; {}); the product's \
                     state, for diagnosis: {}; closes: {:?}",
                    answers.join(", "),
                    self.diagnose(tid).await,
                    self.w
                        .api
                        .received_by("DELETE")
                        .iter()
                        .map(|r| format!("{} {}", r.connection_id, r.status))
                        .collect::<Vec<_>>()
                ));
            }
        }
        found
    }

    /// Fills every tenant before the final repair: one more new socket than its cap leaves free
    /// beside the ones its clients hold, each in a new session a minute on (rates never bind),
    /// judged by the oracle as any admission; the sockets admitted stay open and held.
    async fn fill(&self, sch: &Schedule, tenants: &[TenantId], run: &Mutex<Run>) {
        for (t, tid) in tenants.iter().enumerate() {
            let tries = {
                let mut r = run.lock().unwrap();
                r.seen.sync_closed(&self.w.api.received());
                let held = r.seen.held_in(t) as u64;
                r.caps[t].tenant_connections.saturating_sub(held) + 1
            };
            for k in 0..tries {
                self.w.env.clock.advance(Duration::from_secs(61));
                let now = self.inst.moving.now();
                let s = 200 + k as usize;
                let put = self.session_call("PUT", tid, s).await;
                if put.status() != Some(200) {
                    continue;
                }
                let l = self.limits(sch, run, t);
                let cid = format!("k{:x}f{t}x{k}", sch.seed);
                let a = self.connect(tid, &Self::sid(s), &cid, &l).await;
                let mut r = run.lock().unwrap();
                if a.status() == Some(200) {
                    self.w.recorder.mark_live(&cid);
                    r.seen.sync_closed(&self.w.api.received());
                    let inc = r.seen.incarnation(t, s);
                    r.seen.admitted(t, s, inc, &cid, now);
                } else {
                    // A leak (not repaired yet) or a shard at its share: the next one may land.
                    self.w.recorder.mark_gone(&cid);
                }
            }
        }
    }

    /// For a violation's message only (never a judge): the sum of the tenant's counter items and
    /// the ids its session rows hold (unproxied, strongly consistent).
    async fn diagnose(&self, t: &TenantId) -> String {
        let Ok(out) = self
            .direct
            .query()
            .table_name(&self.w.env.deps.tables.sessions)
            .key_condition_expression("#t = :t")
            .expression_attribute_names("#t", session_attr::TENANT_ID)
            .expression_attribute_values(":t", AttributeValue::S(t.to_string()))
            .consistent_read(true)
            .send()
            .await
        else {
            return "unread".into();
        };
        let mut ids: Vec<String> = Vec::new();
        for it in out.items() {
            let sid = it
                .get(session_attr::SESSION_ID)
                .and_then(|v| v.as_s().ok())
                .cloned()
                .unwrap_or_default();
            for c in it
                .get(session_attr::CONNECTION_IDS)
                .and_then(|v| v.as_ss().ok())
                .cloned()
                .unwrap_or_default()
            {
                ids.push(format!("{sid}/{c}"));
            }
        }
        // Every layout the schedule may have used.
        let keys: Vec<String> = std::iter::once(shared::counter::keys::tenant_connections(t))
            .chain((0..4).map(|k| shared::counter::keys::connection_shard(t, k)))
            .filter_map(|k| k.ok())
            .collect();
        let mut counts = Vec::new();
        for k in keys {
            let n = self
                .direct
                .get_item()
                .table_name(&self.w.env.deps.tables.counters)
                .key("key", AttributeValue::S(k.clone()))
                .consistent_read(true)
                .send()
                .await
                .ok()
                .and_then(|o| {
                    o.item()
                        .and_then(|i| i.get("itemCount"))
                        .and_then(|v| v.as_n().ok())
                        .and_then(|v| v.parse::<i64>().ok())
                });
            if let Some(n) = n {
                counts.push(format!("{k}={n}"));
            }
        }
        format!("counters {counts:?}, session rows hold {ids:?}")
    }
}

/// A task waking every 20 ms that records how late the runtime woke it (the largest lateness, in
/// µs, until reset): with two cores shared by other work, a handler's 500 ms attempt timeout can
/// pass while its request waits for the CPU, not for DynamoDB Local.
fn ticker() -> std::sync::Arc<std::sync::atomic::AtomicU64> {
    let lag = std::sync::Arc::new(std::sync::atomic::AtomicU64::new(0));
    let mine = std::sync::Arc::clone(&lag);
    tokio::spawn(async move {
        let tick = Duration::from_millis(20);
        loop {
            let began = std::time::Instant::now();
            tokio::time::sleep(tick).await;
            let late = began.elapsed().saturating_sub(tick);
            let us = u64::try_from(late.as_micros()).unwrap_or(u64::MAX);
            mine.fetch_max(us, std::sync::atomic::Ordering::SeqCst);
        }
    });
    lag
}

/// A WebSocket route's event with the context the authorizer builds for `limits` (its
/// `connectionShards` included).
fn event(
    sample: &str,
    t: &TenantId,
    s: &str,
    cid: &str,
    l: &Limits,
) -> aws_lambda_events::apigw::ApiGatewayWebsocketProxyRequest {
    let mut ev = ws_event(sample, t.as_str(), s, cid, Some(l));
    let sid = shared::ids::SessionId::parse(s).expect("valid session id");
    if let serde_json::Value::Object(m) = shared::edge::context::build(t, &sid, l) {
        ev.request_context.authorizer.fields.extend(m);
    }
    ev
}

fn skipped(r: &shared::reconcile::Report) -> bool {
    r.tenants
        .iter()
        .any(|t| matches!(t.outcome, shared::reconcile::Outcome::Skipped { .. }))
}

fn t_index(sch: &Schedule, t: &TenantId) -> usize {
    t.as_str()
        .rsplit("-t")
        .next()
        .and_then(|i| i.parse().ok())
        .unwrap_or(0)
        .min(sch.tenants.len().saturating_sub(1))
}

/// One reconciler run over `t`, with `grace` between its phases, probing the local Management API.
pub async fn reconcile(
    w: &World,
    deps: &shared::Deps,
    t: &TenantId,
    grace: Duration,
) -> Result<shared::reconcile::Report, String> {
    use shared::reconcile::{self, Options, Probe};
    let gateway = shared::gateway::Gateway::local(&w.api.url());
    let probe = Probe {
        gateway: &gateway,
        endpoint: w.api.url(),
    };
    let options = Options {
        tenant: Some(t.clone()),
        dry_run: false,
        grace,
        budget: reconcile::Budget::for_grace(reconcile::MAX_GRACE),
    };
    let scoped = deps.clone();
    reconcile::run(deps, &options, Some(&probe), |_| {
        let d = scoped.clone();
        async move { Ok(d) }
    })
    .await
    .map_err(|e| e.to_string())
}

/// DynamoDB's attribute JSON, as a stream record carries it.
fn stream_json(v: &AttributeValue) -> serde_json::Value {
    use serde_json::json;
    match v {
        AttributeValue::S(s) => json!({ "S": s }),
        AttributeValue::N(n) => json!({ "N": n }),
        AttributeValue::Ss(ss) => json!({ "SS": ss }),
        AttributeValue::Ns(ns) => json!({ "NS": ns }),
        AttributeValue::Bool(b) => json!({ "BOOL": b }),
        AttributeValue::L(l) => json!({ "L": l.iter().map(stream_json).collect::<Vec<_>>() }),
        AttributeValue::M(m) => {
            let m: serde_json::Map<String, serde_json::Value> =
                m.iter().map(|(k, v)| (k.clone(), stream_json(v))).collect();
            json!({ "M": m })
        }
        _ => json!({ "NULL": true }),
    }
}

/// What a client saw: a status, or the handler's error (the Lambda runtime answers 5xx for it).
#[derive(Debug, Clone)]
pub enum Answer {
    Status(i64),
    Error(String),
}

impl Answer {
    /// The status, or the error's text (for a violation's message).
    pub fn describe(&self) -> String {
        match self {
            Answer::Status(s) => s.to_string(),
            Answer::Error(e) => format!("error: {e}"),
        }
    }

    pub fn status(&self) -> Option<i64> {
        match self {
            Answer::Status(s) => Some(*s),
            Answer::Error(_) => None,
        }
    }
}

fn answer<R: Into<Reply>, E: std::fmt::Display>(r: Result<R, E>) -> Answer {
    match r {
        Ok(r) => Answer::Status(r.into().0),
        Err(e) => Answer::Error(e.to_string()),
    }
}

/// A handler's answer reduced to its status.
pub struct Reply(i64);

impl From<aws_lambda_events::apigw::ApiGatewayProxyResponse> for Reply {
    fn from(r: aws_lambda_events::apigw::ApiGatewayProxyResponse) -> Reply {
        Reply(r.status_code)
    }
}

impl From<(i64, String)> for Reply {
    fn from(r: (i64, String)) -> Reply {
        Reply(r.0)
    }
}
