//! Key-value GCRA limits in the simulation (issue 23, decision 2300): spends, refunds and batch
//! spends through `shared::kv::Limiter` — two "processes", each with its own hints — against the
//! same proxied DynamoDB Local, in the same rounds, faults and crashes as the other lanes, with the
//! injected clock as `now`. The oracle holds every bucket to an ideal GCRA bucket:
//!
//! - **0 over-admission**: between any two admissions at `a <= b`, the cost admitted in `[a, b]`
//!   is at most `burst + (b - a) / emission interval + refunded in [a, b]` (a refund is counted
//!   when it starts, whatever its answer: conservative under lost answers and crashes).
//! - **refunds never give back more than was spent**: a client refunds only a spend it was
//!   answered allowed for, once; a refund applied twice shows as over-admission above.
//! - **documented answers**: allowed, denied or `Contended`; a store error only under an injected
//!   fault.

use std::collections::{BTreeMap, BTreeSet};
use std::sync::{Arc, Mutex};

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
    /// Spends `cost` of every name for id `i` in one all-or-nothing batch.
    Batch { i: u32, cost: u64, process: usize },
}

/// Draws the kv lanes of each round (none in round 0), or `None` for a schedule without them.
pub fn generate(
    seed: u64,
    pct: u32,
    rounds: usize,
    crash_pct: u32,
) -> Option<(KvSpec, Vec<Vec<Vec<Step>>>)> {
    let mut rng = side_rng(seed, SALT, pct)?;
    // Counts dividing the period's nanoseconds: the emission interval is exact.
    let rates: Vec<KvRate> = (0..rng.usize(1..=2))
        .map(|_| KvRate {
            burst: rng.u64(1..=5),
            count: [1, 2, 5][rng.usize(0..3)],
            period_s: rng.u64(1..=12) * 10,
        })
        .collect();
    let ids = rng.u32(1..=2);
    let min_burst = rates.iter().map(|r| r.burst).min().unwrap_or(1);
    let lanes = side_lanes(&mut rng, rounds, crash_pct, |rng| {
        let k = rng.usize(0..rates.len());
        let i = rng.u32(0..ids);
        let process = rng.usize(0..2);
        Op::Kv(match rng.u32(0..100) {
            // Costs within the burst (a larger one is refused as bad input).
            0..=59 => KvOp::Spend {
                k,
                i,
                cost: rng.u64(1..=3).min(rates[k].burst),
                process,
            },
            60..=84 => KvOp::Refund { k, i, process },
            _ => KvOp::Batch {
                i,
                cost: rng.u64(1..=2).min(min_burst),
                process,
            },
        })
    });
    Some((KvSpec { rates, ids }, lanes))
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
    /// Buckets already reported over-admitted (once each, not at every later checkpoint).
    reported: BTreeSet<Bucket>,
    pub lane: Lane,
}

impl State {
    pub fn new(seed: u64, spec: &KvSpec, client: &aws_sdk_dynamodb::Client, table: &str) -> State {
        let mut yaml = String::from("names:\n");
        for k in 0..spec.rates.len() {
            yaml.push_str(&format!("  K{k}: {{ id: {}, format: string }}\n", k + 1));
        }
        yaml.push_str("defaults:\n");
        for (k, r) in spec.rates.iter().enumerate() {
            yaml.push_str(&format!(
                "  K{k}: {{ burst: {}, count: {}, period: {}s }}\n",
                r.burst, r.count, r.period_s
            ));
        }
        let set = LimitSet::from_yaml(&yaml).expect("the simulation's limits load");
        let limiter = || {
            Arc::new(Limiter::new(
                client.clone(),
                table,
                Arc::new(Limits::new(set.clone())),
            ))
        };
        State {
            spec: spec.clone(),
            seed,
            limiters: [limiter(), limiter()],
            admits: BTreeMap::new(),
            refunds: BTreeMap::new(),
            reported: BTreeSet::new(),
            lane: Lane::default(),
        }
    }

    fn error(&mut self, what: &str, e: &KvError) {
        // `Contended` is a documented answer (concurrent writers on one bucket); a store error
        // is one only when a fault was injected.
        let documented = matches!(e, KvError::Contended(_))
            || (matches!(e, KvError::Store(_)) && self.lane.faulted);
        if !documented {
            self.lane.violation(format!(
                "undocumented answer to {what}: {e} (fault injected: {})",
                self.lane.faulted
            ));
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
            if let Some(v) = over(admits, refunds, rate) {
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
            let elapsed = (b.as_nanos() - a.as_nanos()).max(0) as u128;
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

/// Runs one kv step, recording what its client saw in `state`.
pub async fn step(op: &KvOp, state: &Mutex<State>) {
    let (limiter, now) = {
        let st = state.lock().unwrap();
        let p = match *op {
            KvOp::Spend { process, .. }
            | KvOp::Refund { process, .. }
            | KvOp::Batch { process, .. } => process,
        };
        (st.limiters[p].clone(), st.lane.now)
    };
    match *op {
        KvOp::Spend { k, i, cost, .. } => {
            let id = state.lock().unwrap().id(i);
            let out = limiter.spend(&format!("K{k}"), &id, cost, now).await;
            let mut st = state.lock().unwrap();
            match out {
                Ok(o) if o.decision.allowed => st
                    .admits
                    .entry((k, i))
                    .or_default()
                    .push((now, cost, false)),
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
            let out = limiter.refund(&format!("K{k}"), &id, cost, now).await;
            if let Err(e) = out {
                state.lock().unwrap().error("a refund", &e);
            }
        }
        KvOp::Batch { i, cost, .. } => {
            let (id, names) = {
                let st = state.lock().unwrap();
                let names: Vec<String> =
                    (0..st.spec.rates.len()).map(|k| format!("K{k}")).collect();
                (st.id(i), names)
            };
            let spends: Vec<(&str, &str, u64)> = names
                .iter()
                .map(|n| (n.as_str(), id.as_str(), cost))
                .collect();
            let out = limiter.spend_batch(&spends, now).await;
            let mut st = state.lock().unwrap();
            match out {
                Ok(b) if b.decision.allowed => {
                    for k in 0..names.len() {
                        st.admits
                            .entry((k, i))
                            .or_default()
                            .push((now, cost, false));
                    }
                }
                Ok(_) => {}
                Err(e) => st.error("a batch spend", &e),
            }
        }
    }
}
