//! Key-value GCRA limits in the simulation (decision 2300): spends, refunds, batch
//! spends and leases (acquire, adjust, commit, release, expiry) through `shared::kv::Limiter` —
//! two "processes", each with its own hints — on unsharded and sharded limits (`shards: 2-3`),
//! against the same proxied DynamoDB Local, in the same rounds, faults and crashes as the other
//! lanes, with the injected clock as `now`. The oracle holds every bucket (a sharded limit's
//! shards together) to an ideal GCRA bucket:
//!
//! - **0 over-admission**: between any two admissions at `a <= b`, the cost admitted in `[a, b]`
//!   is at most `burst + (b - a) / emission interval + refunded in [a, b]` (a refund is counted
//!   when it starts, whatever its answer: conservative under lost answers and crashes). A sharded
//!   limit's shards hold exact shares, so their sum obeys the whole limit's bound. A lease counts
//!   as admitted what its client was answered granted (the estimate, or an adjust's increase over
//!   the most the lease may have held); what a lease operation may give back (an adjust down, a
//!   release, anything past its deadline: expiry) is counted as a refund when it starts.
//! - **refunds never give back more than was spent**: a client refunds only a spend it was
//!   answered allowed for, once; a refund applied twice shows as over-admission above.
//! - **documented answers**: allowed, denied or `Contended`; a store error only under an injected
//!   fault.

use std::collections::{BTreeMap, BTreeSet};
use std::sync::{Arc, Mutex};
use std::time::Duration;

use shared::clock::Timestamp;
use shared::kv::{KvError, LimitSet, Limiter, Limits};
use shared::table::TableKind;

use crate::oracle::Lane;
use crate::schedule::{side_lanes, side_rng, Op, Step};
use crate::ws_support::World;

/// Salts the kv draws apart from the others (see [`crate::reservations`]).
const SALT: u64 = 0x6b76_6763_7261_0601;

/// One limit name's rate.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct KvRate {
    pub burst: u64,
    pub count: u64,
    pub period_s: u64,
    /// `shards:` of the limit (1: unsharded). Burst and count are multiples of it, so every
    /// shard's share is exact.
    pub shards: u64,
}

impl KvRate {
    /// The largest cost one spend or lease may ask: a shard's share of the burst (a larger one is
    /// refused as bad input), at most 3.
    fn max_cost(&self) -> u64 {
        (self.burst / self.shards).clamp(1, 3)
    }
}

/// The limit names (`K0`, `K1`, ...) of a schedule with kv lanes, and how many ids each has.
#[derive(Debug, Clone, PartialEq)]
pub struct KvSpec {
    pub rates: Vec<KvRate>,
    pub ids: u32,
}

#[derive(Debug, Clone, PartialEq)]
pub enum KvOp {
    /// Spends `cost` of `K{k}` for id `i` through limiter `process`.
    Spend {
        k: usize,
        i: u32,
        cost: u64,
        process: usize,
    },
    /// Refunds the latest allowed, unrefunded spend of `K{k}` for id `i` (nothing if none).
    Refund { k: usize, i: u32, process: usize },
    /// Spends `cost` of every unsharded name for id `i` in one all-or-nothing batch.
    Batch { i: u32, cost: u64, process: usize },
    /// Acquires lease `L{lease}` of `estimate` on `K{k}` for id `i`, held for `ttl_s` (the same
    /// step again: a retried acquire).
    Acquire {
        k: usize,
        i: u32,
        lease: u32,
        estimate: u64,
        ttl_s: u64,
        process: usize,
    },
    /// Sets lease `L{lease}` to `amount`.
    Adjust {
        k: usize,
        i: u32,
        lease: u32,
        amount: u64,
        process: usize,
    },
    /// Ends lease `L{lease}` keeping its amount spent.
    Commit {
        k: usize,
        i: u32,
        lease: u32,
        process: usize,
    },
    /// Ends lease `L{lease}` giving back what is left of it; past its deadline, this is its
    /// expiry.
    Release {
        k: usize,
        i: u32,
        lease: u32,
        process: usize,
    },
}

impl KvOp {
    fn process(&self) -> usize {
        match *self {
            KvOp::Spend { process, .. }
            | KvOp::Refund { process, .. }
            | KvOp::Batch { process, .. }
            | KvOp::Acquire { process, .. }
            | KvOp::Adjust { process, .. }
            | KvOp::Commit { process, .. }
            | KvOp::Release { process, .. } => process,
        }
    }
}

/// Draws the kv lanes of each round (none in round 0), or `None` for a schedule without them.
pub fn generate(
    seed: u64,
    pct: u32,
    rounds: usize,
    crash_pct: u32,
    refunds: bool,
) -> Option<(KvSpec, Vec<Vec<Vec<Step>>>)> {
    let mut rng = side_rng(seed, SALT, pct)?;
    if refunds {
        return Some(refund_heavy(&mut rng, rounds, crash_pct));
    }
    // Counts dividing the period's nanoseconds: the emission interval is exact (a sharded
    // limit's per shard; the oracle's whole-limit interval rounds down, which only loosens it).
    let rates: Vec<KvRate> = (0..rng.usize(1..=2))
        .map(|_| {
            let shards = if rng.u32(0..3) == 0 {
                rng.u64(2..=3)
            } else {
                1
            };
            KvRate {
                burst: rng.u64(1..=5).div_ceil(shards) * shards,
                count: [1, 2, 5][rng.usize(0..3)] * shards,
                period_s: rng.u64(1..=12) * 10,
                shards,
            }
        })
        .collect();
    let ids = rng.u32(1..=2);
    // A batch spends the unsharded names (a sharded one is spent on its own).
    let batchable: Vec<usize> = (0..rates.len()).filter(|k| rates[*k].shards == 1).collect();
    let batch_cost = batchable.iter().map(|k| rates[*k].burst).min().unwrap_or(1);
    // Leases acquired so far: (k, i, lease, estimate, ttl).
    let mut leases: Vec<(usize, u32, u32, u64, u64)> = Vec::new();
    let lanes = side_lanes(&mut rng, rounds, crash_pct, |rng| {
        let k = rng.usize(0..rates.len());
        let i = rng.u32(0..ids);
        let process = rng.usize(0..2);
        let cost = rng.u64(1..=rates[k].max_cost());
        let held = (!leases.is_empty()).then(|| leases[rng.usize(0..leases.len())]);
        Op::Kv(match (rng.u32(0..100), held) {
            (0..=44, _) => KvOp::Spend {
                k,
                i,
                cost,
                process,
            },
            (45..=59, _) => KvOp::Refund { k, i, process },
            (60..=69, _) if !batchable.is_empty() => KvOp::Batch {
                i,
                cost: rng.u64(1..=2).min(batch_cost),
                process,
            },
            (60..=69, _) => KvOp::Spend {
                k,
                i,
                cost,
                process,
            },
            // A retried acquire: the same lease, estimate and ttl again.
            (70..=73, Some((k, i, lease, estimate, ttl_s))) => KvOp::Acquire {
                k,
                i,
                lease,
                estimate,
                ttl_s,
                process,
            },
            (70..=79, _) | (80.., None) => {
                let lease = leases.len() as u32;
                // Some leases end within the schedule's clock moves (expiry), some outlive it.
                let ttl_s = [5, 30, 120, 900][rng.usize(0..4)];
                leases.push((k, i, lease, cost, ttl_s));
                KvOp::Acquire {
                    k,
                    i,
                    lease,
                    estimate: cost,
                    ttl_s,
                    process,
                }
            }
            (80..=88, Some((k, i, lease, ..))) => KvOp::Adjust {
                k,
                i,
                lease,
                amount: rng.u64(1..=rates[k].max_cost()),
                process,
            },
            (89..=93, Some((k, i, lease, ..))) => KvOp::Commit {
                k,
                i,
                lease,
                process,
            },
            (_, Some((k, i, lease, ..))) => KvOp::Release {
                k,
                i,
                lease,
                process,
            },
        })
    });
    Some((KvSpec { rates, ids }, lanes))
}

/// One bucket (burst 2-3, one token per 2 minutes, so rounds rarely refill it) drained by unit
/// spends, and each round opening with a refund (two at once, from both processes, in half the
/// rounds) into the drained bucket: a refund that gives back twice shows as the spends after it.
fn refund_heavy(
    rng: &mut fastrand::Rng,
    rounds: usize,
    crash_pct: u32,
) -> (KvSpec, Vec<Vec<Vec<Step>>>) {
    let rate = KvRate {
        burst: rng.u64(2..=3),
        count: 1,
        period_s: 120,
        shards: 1,
    };
    let step = |rng: &mut fastrand::Rng, op: KvOp| Step {
        op: Op::Kv(op),
        crash_ms: (rng.u32(0..100) < crash_pct).then(|| rng.u16(0..=40)),
    };
    let mut lanes_of = vec![Vec::new()];
    for _ in 1..rounds {
        let mut lanes = Vec::new();
        for process in 0..rng.usize(1..=2) {
            let mut lane = vec![step(
                rng,
                KvOp::Refund {
                    k: 0,
                    i: 0,
                    process,
                },
            )];
            for _ in 0..rng.usize(1..=3) {
                let process = rng.usize(0..2);
                lane.push(step(
                    rng,
                    KvOp::Spend {
                        k: 0,
                        i: 0,
                        cost: 1,
                        process,
                    },
                ));
            }
            lanes.push(lane);
        }
        lanes_of.push(lanes);
    }
    (
        KvSpec {
            rates: vec![rate],
            ids: 1,
        },
        lanes_of,
    )
}

/// Creates the buckets table beside the World's (dropped with them); returns its name.
pub async fn table(w: &mut World, direct: &aws_sdk_dynamodb::Client) -> String {
    let def = shared::catalog::definition(TableKind::Buckets, &w.env.deps.tables, w.env.deps.style);
    shared::catalog::ensure(direct, &def)
        .await
        .expect("the simulation's buckets table is created");
    let name = def.name.clone();
    w.env.track_table(def.name);
    name
}

type Bucket = (usize, u32);

/// A lease as its clients can know it, through lost answers and crashes.
#[derive(Debug, Clone, Copy)]
struct LeaseSeen {
    /// The largest estimate or amount ever asked for it: an adjust up to more counts only the
    /// difference as admitted (never more than was spent, whatever answers were lost).
    most: u64,
    /// The earliest deadline any acquire of it may have set: from then on, any operation on it
    /// may settle it as expired (everything it holds given back).
    deadline: Timestamp,
}

/// The kv side of one run: the schedule's two limiters, what clients were answered, and the
/// violations found.
pub struct State {
    spec: KvSpec,
    seed: u64,
    limiters: [Arc<Limiter>; 2],
    /// Allowed spends per bucket: (instant, cost, refunded).
    admits: BTreeMap<Bucket, Vec<(Timestamp, u64, bool)>>,
    /// Refunds started per bucket: (instant, cost).
    refunds: BTreeMap<Bucket, Vec<(Timestamp, u64)>>,
    /// What the clients know of each lease id.
    leases: BTreeMap<u32, LeaseSeen>,
    /// Buckets already reported over-admitted (once each, not at every later checkpoint).
    reported: BTreeSet<Bucket>,
    pub lane: Lane,
    /// The second process's clock skew (ms).
    skew_ms: i64,
}

impl State {
    pub fn new(
        seed: u64,
        spec: &KvSpec,
        client: &aws_sdk_dynamodb::Client,
        table: &str,
        skew_ms: i64,
    ) -> State {
        let mut yaml = String::from("names:\n");
        for k in 0..spec.rates.len() {
            yaml.push_str(&format!("  K{k}: {{ id: {}, format: string }}\n", k + 1));
        }
        yaml.push_str("defaults:\n");
        for (k, r) in spec.rates.iter().enumerate() {
            yaml.push_str(&format!(
                "  K{k}: {{ burst: {}, count: {}, period: {}s, shards: {} }}\n",
                r.burst, r.count, r.period_s, r.shards
            ));
        }
        let set = LimitSet::from_yaml(&yaml).expect("the simulation's limits load");
        // Each process picks shards from a seed of its own (a replay draws the same picks).
        let limiter = |p: u64| {
            Arc::new(
                Limiter::new(client.clone(), table, Arc::new(Limits::new(set.clone())))
                    .with_shard_seed(seed.wrapping_mul(2).wrapping_add(p)),
            )
        };
        State {
            spec: spec.clone(),
            seed,
            limiters: [limiter(0), limiter(1)],
            admits: BTreeMap::new(),
            refunds: BTreeMap::new(),
            leases: BTreeMap::new(),
            reported: BTreeSet::new(),
            lane: Lane::default(),
            skew_ms,
        }
    }

    fn error(&mut self, what: &str, e: &KvError) {
        // `Contended` is a documented answer (concurrent writers on one bucket), and so are a
        // lease's: expired, not found (ended), held with another estimate; a store error is one
        // only when a fault was injected.
        let documented = matches!(
            e,
            KvError::Contended(_)
                | KvError::LeaseExpired(_)
                | KvError::LeaseNotFound(_)
                | KvError::LeaseMismatch { .. }
        ) || (matches!(e, KvError::Store(_)) && self.lane.faulted);
        let v = format!(
            "undocumented answer to {what}: {e} (fault injected: {})",
            self.lane.faulted
        );
        if matches!(e, KvError::Store(_)) && !self.lane.faulted {
            self.lane.unless_slow(v);
        } else if !documented {
            self.lane.violation(v);
        }
    }

    /// Records `cost` admitted on `bucket` at `now`; a lease's spend (`lease`) is never given
    /// back by a refund step.
    fn admitted(&mut self, bucket: Bucket, now: Timestamp, cost: u64, lease: bool) {
        self.admits
            .entry(bucket)
            .or_default()
            .push((now, cost, lease));
    }

    /// Counts what a lease operation on `bucket` starting at `now` may give back as refunded:
    /// all a lease may hold above `keeps`. The most it may hold is bounded by the largest cost
    /// asked of its limit, not by what this client asked: another lane may be adjusting the
    /// same lease up at the same instant.
    fn may_give_back(&mut self, bucket: Bucket, now: Timestamp, keeps: u64) {
        let most = self.spec.rates[bucket.0].max_cost();
        if most > keeps {
            self.refunds
                .entry(bucket)
                .or_default()
                .push((now, most - keeps));
        }
    }

    fn id(&self, i: u32) -> String {
        format!("s{:x}-{i}", self.seed)
    }

    /// The checks of one checkpoint: every bucket against the ideal GCRA bucket.
    pub fn check(&mut self) -> Vec<String> {
        let mut found = Vec::new();
        for (&(k, i), admits) in &self.admits {
            if self.reported.contains(&(k, i)) {
                continue;
            }
            let rate = self.spec.rates[k];
            let refunds = self.refunds.get(&(k, i)).map(Vec::as_slice).unwrap_or(&[]);
            if let Some(v) = over(admits, refunds, rate, self.skew_ms.unsigned_abs()) {
                found.push(((k, i), format!("over-admission: K{k}:{}: {v}", self.id(i))));
            }
        }
        for (bucket, v) in found {
            self.reported.insert(bucket);
            self.lane.violation(v);
        }
        self.lane.take()
    }
}

/// Whether the admissions of one bucket exceed the ideal GCRA bucket somewhere (its message).
fn over(
    admits: &[(Timestamp, u64, bool)],
    refunds: &[(Timestamp, u64)],
    r: KvRate,
    skew_ms: u64,
) -> Option<String> {
    let mut instants: Vec<Timestamp> = admits.iter().map(|a| a.0).collect();
    instants.sort();
    instants.dedup();
    let ei = u128::from(r.period_s) * 1_000_000_000 / u128::from(r.count);
    for (x, a) in instants.iter().enumerate() {
        for b in &instants[x..] {
            let within = |t: &Timestamp| t >= a && t <= b;
            let spent: u64 = admits.iter().filter(|s| within(&s.0)).map(|s| s.1).sum();
            let back: u64 = refunds.iter().filter(|s| within(&s.0)).map(|s| s.1).sum();
            // Two processes whose clocks differ by the skew see the interval up to twice the skew
            // longer: the bound is stated on that.
            let elapsed =
                (b.as_nanos() - a.as_nanos()).max(0) as u128 + 2 * u128::from(skew_ms) * 1_000_000;
            let allowed = u128::from(r.burst) + elapsed / ei + u128::from(back);
            if u128::from(spent) > allowed {
                return Some(format!(
                    "{spent} admitted between {a} and {b}, an ideal bucket ({r:?}) allows \
                     {allowed} ({back} refunded)"
                ));
            }
        }
    }
    None
}

/// `now` as a clock `skew_ms` off reads it.
pub fn skewed(now: Timestamp, skew_ms: i64) -> Timestamp {
    Timestamp::from_nanos(
        now.as_nanos()
            .saturating_add(skew_ms.saturating_mul(1_000_000)),
    )
}

/// Runs one kv step, recording what its client saw in `state`.
pub async fn step(op: &KvOp, state: &Mutex<State>) {
    let (limiter, now, at) = {
        let st = state.lock().unwrap();
        let p = op.process();
        // The instant the process asks at: the second one's clock is skewed (spends and refunds;
        // leases keep the simulation's clock).
        let at = if p == 1 {
            skewed(st.lane.now, st.skew_ms)
        } else {
            st.lane.now
        };
        (st.limiters[p].clone(), st.lane.now, at)
    };
    match *op {
        KvOp::Spend { k, i, cost, .. } => {
            let id = state.lock().unwrap().id(i);
            let out = limiter.spend(&format!("K{k}"), &id, cost, at).await;
            let mut st = state.lock().unwrap();
            match out {
                Ok(o) if o.decision.allowed => st.admitted((k, i), now, cost, false),
                Ok(_) => {}
                Err(e) => st.error("a spend", &e),
            }
        }
        KvOp::Refund { k, i, .. } => {
            let (id, cost) = {
                let mut st = state.lock().unwrap();
                let id = st.id(i);
                let Some(spend) = st
                    .admits
                    .get_mut(&(k, i))
                    .and_then(|a| a.iter_mut().rev().find(|s| !s.2))
                else {
                    return;
                };
                spend.2 = true;
                let cost = spend.1;
                st.refunds.entry((k, i)).or_default().push((now, cost));
                (id, cost)
            };
            let out = limiter.refund(&format!("K{k}"), &id, cost, at).await;
            if let Err(e) = out {
                state.lock().unwrap().error("a refund", &e);
            }
        }
        KvOp::Batch { i, cost, .. } => {
            let (id, ks) = {
                let st = state.lock().unwrap();
                let ks: Vec<usize> = (0..st.spec.rates.len())
                    .filter(|k| st.spec.rates[*k].shards == 1)
                    .collect();
                (st.id(i), ks)
            };
            let names: Vec<String> = ks.iter().map(|k| format!("K{k}")).collect();
            let spends: Vec<(&str, &str, u64)> = names
                .iter()
                .map(|n| (n.as_str(), id.as_str(), cost))
                .collect();
            let out = limiter.spend_batch(&spends, at).await;
            let mut st = state.lock().unwrap();
            match out {
                Ok(b) if b.decision.allowed => {
                    for &k in &ks {
                        st.admitted((k, i), now, cost, false);
                    }
                }
                Ok(_) => {}
                Err(e) => st.error("a batch spend", &e),
            }
        }
        KvOp::Acquire {
            k,
            i,
            lease,
            estimate,
            ttl_s,
            ..
        } => {
            let id = {
                let mut st = state.lock().unwrap();
                let deadline = now.plus(Duration::from_secs(ttl_s));
                let seen = st
                    .leases
                    .entry(lease)
                    .or_insert(LeaseSeen { most: 0, deadline });
                // A repeat past the first deadline may settle the old lease as expired.
                let expired = seen.deadline <= now;
                seen.most = seen.most.max(estimate);
                seen.deadline = seen.deadline.min(deadline);
                if expired {
                    st.may_give_back((k, i), now, 0);
                }
                st.id(i)
            };
            let out = limiter
                .acquire_lease(
                    &format!("K{k}"),
                    &id,
                    &format!("L{lease}"),
                    estimate,
                    Duration::from_secs(ttl_s),
                    now,
                )
                .await;
            let mut st = state.lock().unwrap();
            match out {
                Ok(o) if o.granted && !o.duplicate => st.admitted((k, i), now, estimate, true),
                Ok(_) => {}
                Err(e) => st.error("a lease acquire", &e),
            }
        }
        KvOp::Adjust {
            k,
            i,
            lease,
            amount,
            ..
        } => {
            let (id, before) = {
                let mut st = state.lock().unwrap();
                // Not acquired yet (another lane of this round): skipped.
                let Some(seen) = st.leases.get_mut(&lease) else {
                    return;
                };
                let before = seen.most;
                seen.most = seen.most.max(amount);
                // What it may hold above `amount` may come back (all of it, once expired).
                let keeps = if seen.deadline <= now { 0 } else { amount };
                st.may_give_back((k, i), now, keeps);
                (st.id(i), before)
            };
            let out = limiter
                .adjust_lease(&format!("K{k}"), &id, &format!("L{lease}"), amount, now)
                .await;
            let mut st = state.lock().unwrap();
            match out {
                // Up: at least `amount - before` was spent now (`before`: the most it may have
                // held, so this never counts more than was spent).
                Ok(o) if o.granted && !o.duplicate && amount > before => {
                    st.admitted((k, i), now, amount - before, true)
                }
                Ok(_) => {}
                Err(e) => st.error("a lease adjust", &e),
            }
        }
        KvOp::Commit { k, i, lease, .. } => {
            let id = state.lock().unwrap().id(i);
            if let Err(e) = limiter
                .commit_lease(&format!("K{k}"), &id, &format!("L{lease}"))
                .await
            {
                state.lock().unwrap().error("a lease commit", &e);
            }
        }
        KvOp::Release { k, i, lease, .. } => {
            let id = {
                let mut st = state.lock().unwrap();
                // Not acquired yet (its acquire is in another lane of this round): skipped, so
                // nothing is given back uncounted.
                if !st.leases.contains_key(&lease) {
                    return;
                }
                st.may_give_back((k, i), now, 0);
                st.id(i)
            };
            if let Err(e) = limiter
                .release_lease(&format!("K{k}"), &id, &format!("L{lease}"), now)
                .await
            {
                state.lock().unwrap().error("a lease release", &e);
            }
        }
    }
}
