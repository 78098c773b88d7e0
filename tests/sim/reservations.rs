//! Reservations and the token remover in the simulation (decision 2300). Steps reserve,
//! bind, release and end resources through `NonFungibleLimiter` — two "processes", each with its
//! own ledger cache, as two Lambda instances would be — and the token remover's `handle`, against
//! the same proxied DynamoDB Local as the WebSocket steps and in the same rounds, faults and
//! crashes. The oracle is what the clients were told, checked at every answer; it reads no
//! ledger:
//!
//! - **0 over-admission**: when a reservation is granted, the reservations clients of its
//!   coordinate hold (granted, not released by them, not told gone, not expired, and — bound —
//!   their resource's event not yet delivered; unbound, no failed or stopped bind of them, which
//!   may give back an unbound entry) are at most its capacity. A capacity released twice (a bind,
//!   a release or the remover freeing what a client still holds) shows here, as the grant it lets
//!   in.
//! - **one binding**: a reservation bound to a resource is never bound to a second one, nor told
//!   `ResourceEnded` for another while its binding holds.
//! - **documented answers**: `Limited`, `Gone`, `AlreadyBound`, `ResourceEnded` only where the
//!   model allows them; a store error only in a round with an injected fault; a bind after its
//!   resource's event was acknowledged never holds capacity.
//! - **0 leaked**: at the end every resource ends, every event is delivered until acknowledged,
//!   and the clock passes the reservation TTL: each coordinate then grants its whole capacity.

use std::collections::{BTreeMap, BTreeSet};
use std::sync::atomic::{AtomicI64, Ordering};
use std::sync::{Arc, Mutex};
use std::time::Duration;

use aws_lambda_events::event::eventbridge::EventBridgeEvent;
use futures::future::join_all;
use serde_json::Value;
use shared::clock::{Clock, ManualClock, Timestamp};
use shared::reservation::{NonFungibleLimiter, ReservationError, DEFAULT_RESERVATION_TTL};
use shared::table::TableKind;
use token_remover::{Outcome as Removal, Processors, Remover};

use crate::oracle::Lane;
use crate::schedule::{side_lanes, side_rng, Op, Step};
use crate::ws_support::World;

/// The resource name of every coordinate (its account names the schedule).
const RESOURCE: &str = "emr";

/// Salts the reservation draws apart from the WebSocket ones: a seed's WebSocket steps are the
/// same whether or not its schedule also has reservations (the mutation seeds stay valid).
const SALT: u64 = 0x7e5e_27a7_0101_0102;

/// What a schedule with reservations draws: the coordinates and the resources.
#[derive(Debug, Clone, PartialEq)]
pub struct ResSpec {
    /// Each coordinate's capacity (the reservations' default limit; no limit row): 1-4, so the
    /// limit is reached, or 17-24, so two ledger shards exist.
    pub capacities: Vec<u64>,
    /// Resources (EMR clusters) tokens are bound to.
    pub resources: u32,
}

/// One reservation step. Reservations are numbered per schedule; a step naming one its client
/// never got (refused, crashed) does nothing.
#[derive(Debug, Clone, PartialEq)]
pub enum ResOp {
    /// `count` reservations at once on coordinate `coord` through limiter `process`, numbered
    /// from `r`.
    Reserve {
        coord: usize,
        r: u32,
        count: u32,
        process: usize,
    },
    /// Binds reservation `r` to resource `j` (through any process: a handle by id).
    Bind { r: u32, j: u32, process: usize },
    /// Deletes reservation `r` (or its token).
    Release { r: u32, process: usize },
    /// Resource `j` ends: its event is queued for the remover (once).
    End { j: u32 },
    /// Delivers a queued event (`pick` modulo the queue: out of order); kept for another delivery
    /// when `again` (EventBridge delivers at least once). A failed or crashed one stays queued.
    Deliver { pick: u32, again: bool },
}

/// Draws the reservation lanes of each round (none in round 0), or `None` for a schedule
/// without reservations (`pct` percent have them).
pub fn generate(
    seed: u64,
    pct: u32,
    rounds: usize,
    crash_pct: u32,
    binds: bool,
    rebinds: bool,
) -> Option<(ResSpec, Vec<Vec<Vec<Step>>>)> {
    let mut rng = side_rng(seed, SALT, pct)?;
    if rebinds {
        return Some(rebind_heavy(&mut rng, rounds, crash_pct));
    }
    if binds {
        return Some(bind_heavy(&mut rng, rounds, crash_pct));
    }
    let capacities = (0..rng.usize(1..=2))
        .map(|_| {
            if rng.u32(0..10) < 6 {
                rng.u64(1..=4)
            } else {
                rng.u64(17..=24)
            }
        })
        .collect::<Vec<_>>();
    let resources = rng.u32(2..=4);
    let mut next = 0u32;
    let coords = capacities.len();
    let lanes = side_lanes(&mut rng, rounds, crash_pct, |rng| {
        Op::Res(draw(rng, coords, resources, &mut next))
    });
    Some((
        ResSpec {
            capacities,
            resources,
        },
        lanes,
    ))
}

/// One small coordinate (capacity 1-2), two resources, and mostly binds, ends and deliveries: a
/// reservation bound to one resource is often bound again to the other after its end.
fn bind_heavy(
    rng: &mut fastrand::Rng,
    rounds: usize,
    crash_pct: u32,
) -> (ResSpec, Vec<Vec<Vec<Step>>>) {
    let capacities = vec![rng.u64(1..=2)];
    let mut next = 0u32;
    let lanes = side_lanes(rng, rounds, crash_pct, |rng| {
        let process = rng.usize(0..2);
        let j = rng.u32(0..2);
        let drawn = next;
        Op::Res(match rng.u32(0..100) {
            0..=44 if drawn > 0 => ResOp::Bind {
                r: rng.u32(drawn.saturating_sub(2)..drawn),
                j,
                process,
            },
            45..=59 => ResOp::End { j },
            60..=79 => ResOp::Deliver {
                pick: rng.u32(..),
                again: rng.bool(),
            },
            _ => {
                next += 1;
                ResOp::Reserve {
                    coord: 0,
                    r: drawn,
                    count: 1,
                    process,
                }
            }
        })
    });
    (
        ResSpec {
            capacities,
            resources: 2,
        },
        lanes,
    )
}

/// One coordinate of capacity 1-2, one resource that ends only at the schedule's end, and
/// reserves and binds to it, each reservation bound again and again (a client repeating its
/// bind): the end's delivery then releases every binding, and the leak probe sees what a repeat
/// lost of the first bind's row.
fn rebind_heavy(
    rng: &mut fastrand::Rng,
    rounds: usize,
    crash_pct: u32,
) -> (ResSpec, Vec<Vec<Vec<Step>>>) {
    let capacities = vec![rng.u64(1..=2)];
    let mut next = 0u32;
    let lanes = side_lanes(rng, rounds, crash_pct, |rng| {
        let process = rng.usize(0..2);
        let drawn = next;
        Op::Res(if drawn > 0 && rng.u32(0..100) < 75 {
            ResOp::Bind {
                r: rng.u32(drawn.saturating_sub(2)..drawn),
                j: 0,
                process,
            }
        } else {
            next += 1;
            ResOp::Reserve {
                coord: 0,
                r: drawn,
                count: 1,
                process,
            }
        })
    });
    (
        ResSpec {
            capacities,
            resources: 1,
        },
        lanes,
    )
}

fn draw(rng: &mut fastrand::Rng, coords: usize, resources: u32, next: &mut u32) -> ResOp {
    let process = rng.usize(0..2);
    let j = rng.u32(0..resources);
    let drawn = *next;
    match rng.u32(0..100) {
        35..=59 if drawn > 0 => ResOp::Bind {
            r: rng.u32(0..drawn),
            j,
            process,
        },
        60..=71 if drawn > 0 => ResOp::Release {
            r: rng.u32(0..drawn),
            process,
        },
        72..=81 => ResOp::End { j },
        82..=99 => ResOp::Deliver {
            pick: rng.u32(..),
            again: rng.u32(0..4) == 0,
        },
        _ => {
            // Now and then a burst, so a capacity of 17-24 fills too.
            let count = if rng.u32(0..4) == 0 {
                rng.u32(3..=8)
            } else {
                1
            };
            *next += count;
            ResOp::Reserve {
                coord: rng.usize(0..coords),
                r: drawn,
                count,
                process,
            }
        }
    }
}

/// The limiters and the remover a simulation's steps run through (the World's proxied client).
pub struct Actors {
    limiters: [NonFungibleLimiter; 2],
    /// The second limiter's clock skew (ms), set per schedule.
    skew: Arc<AtomicI64>,
    remover: Remover,
    table: String,
}

impl Actors {
    /// Creates the non-fungible and limit tables beside the World's (dropped with them) and
    /// builds two limiters and the remover on the World's (proxied) deps.
    pub async fn new(w: &mut World, direct: &aws_sdk_dynamodb::Client) -> Actors {
        for kind in [TableKind::NonFungibleTokens, TableKind::Limits] {
            let def = shared::catalog::definition(kind, &w.env.deps.tables, w.env.deps.style);
            shared::catalog::ensure(direct, &def)
                .await
                .expect("the simulation's reservation tables are created");
            w.env.track_table(def.name);
        }
        let deps = &w.env.deps;
        let skew = Arc::new(AtomicI64::new(0));
        let skewed = shared::Deps {
            clock: Arc::new(Skewed {
                base: w.env.clock.clone(),
                offset_ms: Arc::clone(&skew),
            }),
            ..deps.clone()
        };
        let limiter = |d| NonFungibleLimiter::from_deps(d).expect("limiter from deps");
        let processors = Processors::parse(include_str!(
            "../../functions/token-remover/processors.example.yaml"
        ))
        .expect("the example processors parse");
        Actors {
            limiters: [limiter(deps), limiter(&skewed)],
            skew,
            remover: Remover::new(deps, token_remover::Config { processors }),
            table: deps.tables.non_fungible_tokens.clone(),
        }
    }

    /// The second limiter's clock is `ms` off the simulation's from now on.
    pub fn set_skew(&self, ms: i64) {
        self.skew.store(ms, Ordering::SeqCst);
    }

    /// The non-fungible table (a reservation mutation is switched on by its name).
    pub fn table(&self) -> &str {
        &self.table
    }
}

/// A clock `offset_ms` off the simulation's: another Lambda instance's.
#[derive(Debug)]
struct Skewed {
    base: ManualClock,
    offset_ms: Arc<AtomicI64>,
}

impl Clock for Skewed {
    fn now(&self) -> Timestamp {
        crate::kv::skewed(self.base.now(), self.offset_ms.load(Ordering::SeqCst))
    }
}

/// What the model knows of one reservation its client got.
#[derive(Debug)]
struct Held {
    coord: usize,
    id: String,
    /// The reservation's expiry (epoch s) until a bind's answer says otherwise.
    exp: i64,
    /// The resource a bind answered Ok for, with the binding's expiry in `exp`. One only: a bind
    /// to another resource while it is bound answers `AlreadyBound`, even in the same second (the
    /// binding's id tells them apart: decision 0101, "Bound rows").
    bound: Option<u32>,
    /// Every resource a bind of it was started for.
    tried: BTreeSet<u32>,
    /// A release was started (or a bind released it: `ResourceEnded`).
    released: bool,
    /// A step on it crashed or failed while it was unbound: its entry may or may not be there. A
    /// failed or stopped bind gives back only an entry still unbound (decision 0101, "Ended
    /// resources"), so a binding the client holds stays certain.
    uncertain: bool,
}

/// A resource's end as the remover saw it.
#[derive(Debug, Default, Clone, Copy)]
struct Ending {
    emitted: bool,
    /// A delivery started: the ended marker may exist.
    started: bool,
    /// A delivery was answered Ok.
    acked: bool,
}

/// The reservation side of one run: the model, the remover's queue, the round's flags and the
/// violations found between checkpoints.
pub struct State {
    seed: u64,
    /// The second limiter's clock skew (ms): a reservation counts only while it is live on
    /// either clock.
    skew_ms: i64,
    spec: ResSpec,
    coordinates: Vec<String>,
    resource_ids: Vec<String>,
    held: BTreeMap<u32, Held>,
    ended: BTreeMap<u32, Ending>,
    /// Queued events: (event number, resource).
    queue: Vec<(u64, u32)>,
    events: u64,
    pub lane: Lane,
}

impl State {
    pub fn new(seed: u64, spec: &ResSpec, skew_ms: i64) -> State {
        State {
            seed,
            skew_ms,
            spec: spec.clone(),
            coordinates: (0..spec.capacities.len())
                .map(|c| coordinate(seed, c))
                .collect(),
            resource_ids: (0..spec.resources)
                .map(|j| format!("j-{seed:x}-{j}"))
                .collect(),
            held: BTreeMap::new(),
            ended: BTreeMap::new(),
            queue: Vec::new(),
            events: 0,
            lane: Lane::default(),
        }
    }

    /// A store error is documented only under an injected fault.
    fn store_error(&mut self, what: &str, e: &ReservationError) {
        let store = matches!(e, ReservationError::Store(_));
        let v = format!(
            "undocumented answer to {what}: {e} (fault injected: {})",
            self.lane.faulted
        );
        if store && !self.lane.faulted {
            self.lane.unless_slow(v);
        } else if !store {
            self.lane.violation(v);
        }
    }

    /// Whether the client of `r` holds live capacity the ledger must show.
    fn must_hold(&self, r: u32) -> bool {
        let Some(h) = self.held.get(&r) else {
            return false;
        };
        // Once bound, only its resource's end releases it: a row that another, failed bind left
        // under another resource names an expiry the entry no longer holds (decision 0101, "Bound
        // rows"). Before, a delivery for any resource a bind of it named may have found that
        // bind's row and released the unbound entry.
        let ending = |j: &u32| self.ended.get(j).is_some_and(|e| e.started);
        let released_by_an_end = match h.bound {
            None => h.tried.iter().any(ending),
            Some(j) => ending(&j),
        };
        !h.released
            && (h.bound.is_some() || !h.uncertain)
            && !released_by_an_end
            && Timestamp::from_secs(h.exp) > self.lane.now.plus(self.slack())
    }

    /// How much sooner the skewed process may see an expiry pass (whole seconds, as expiries are).
    fn slack(&self) -> Duration {
        Duration::from_secs(u64::from(self.skew_ms != 0))
    }

    /// Resource `j` ends: its event is queued, once.
    fn emit(&mut self, j: u32) {
        let e = self.ended.entry(j).or_default();
        if !e.emitted {
            e.emitted = true;
            self.events += 1;
            let n = self.events;
            self.queue.push((n, j));
        }
    }

    /// A crashed step: a bind's writes may be half done, which matters only to an entry not bound
    /// yet (a bind never releases a binding: it may give back a reservation only).
    pub fn crashed(&mut self, op: &ResOp) {
        if let ResOp::Bind { r, .. } = op {
            if let Some(h) = self.held.get_mut(r) {
                if h.bound.is_none() {
                    h.uncertain = true;
                }
            }
        }
    }

    /// A reservation of coordinate `c` was granted: the reservations its clients hold (this one
    /// included) are at most the capacity.
    fn check_grant(&mut self, c: usize) {
        let cap = self.spec.capacities[c];
        let held: Vec<u32> = self
            .held
            .iter()
            .filter(|(r, h)| h.coord == c && self.must_hold(**r))
            .map(|(r, _)| *r)
            .collect();
        if held.len() as u64 > cap {
            let coord = self.coordinates[c].clone();
            let which: Vec<String> = held
                .iter()
                .map(|r| match self.held[r].bound {
                    None => format!("r{r}"),
                    Some(j) => format!("r{r} (bound to {})", self.resource_ids[j as usize]),
                })
                .collect();
            self.lane.violation(format!(
                "over-admission: clients of {coord} hold {} live reservations, capacity {cap}: {}",
                held.len(),
                which.join(", ")
            ));
        }
    }

    fn event(&mut self, j: u32) -> EventBridgeEvent<Value> {
        let mut ev: EventBridgeEvent<Value> = serde_json::from_str(include_str!(
            "../../events/token-remover/emr-terminated.json"
        ))
        .expect("the sample event parses");
        ev.detail["clusterId"] = Value::String(self.resource_ids[j as usize].clone());
        ev.id = Some(format!("sim-{}", self.resource_ids[j as usize]));
        ev
    }
}

fn coordinate(seed: u64, c: usize) -> String {
    NonFungibleLimiter::coordinate(RESOURCE, &account(seed, c)).expect("a valid coordinate")
}

fn account(seed: u64, c: usize) -> String {
    format!("sim{seed:x}-{c}")
}

/// Runs one reservation step, recording what its client saw in `state`.
pub async fn step(a: &Actors, seed: u64, op: &ResOp, state: &Mutex<State>) {
    match *op {
        ResOp::Reserve {
            coord,
            r,
            count,
            process,
        } => {
            let cap = state.lock().unwrap().spec.capacities[coord];
            let acct = account(seed, coord);
            let limiter = &a.limiters[process];
            let answers =
                join_all((0..count).map(|_| limiter.get_reservation(RESOURCE, &acct, cap as i64)))
                    .await;
            let mut st = state.lock().unwrap();
            for (i, ans) in answers.into_iter().enumerate() {
                match ans {
                    Ok(res) => {
                        let exp = res.expires_at.map_or(0, |t| t.as_secs());
                        st.held.insert(
                            r + i as u32,
                            Held {
                                coord,
                                id: res.id,
                                exp,
                                bound: None,
                                tried: BTreeSet::new(),
                                released: false,
                                uncertain: false,
                            },
                        );
                    }
                    Err(ReservationError::Limited { .. }) => {}
                    Err(e) => st.store_error("a reservation", &e),
                }
            }
            st.check_grant(coord);
        }
        ResOp::Bind { r, j, process } => {
            let (handle, acked) = {
                let mut st = state.lock().unwrap();
                let acked = st.ended.get(&j).is_some_and(|e| e.acked);
                let Some(h) = st.held.get_mut(&r) else {
                    return;
                };
                h.tried.insert(j);
                let (c, id) = (h.coord, h.id.clone());
                let handle = a.limiters[process].reservation(RESOURCE, &account(seed, c), &id);
                (handle, acked)
            };
            let Ok(handle) = handle else {
                return;
            };
            let rid = state.lock().unwrap().resource_ids[j as usize].clone();
            let ans = handle.create_token(&rid).await;
            let mut st = state.lock().unwrap();
            let must = st.must_hold(r);
            let started = st.ended.get(&j).is_some_and(|e| e.started);
            let other = st.held[&r].tried.iter().any(|t| *t != j);
            // Bound to another resource whose end has not started: no bind may release it, nor
            // bind it again.
            let bound = must && st.held[&r].bound.is_some();
            let elsewhere = bound && st.held[&r].bound != Some(j);
            let first = st.held[&r]
                .bound
                .map(|b| st.resource_ids[b as usize].clone())
                .unwrap_or_default();
            let h = st.held.get_mut(&r).expect("held");
            let verdict = match ans {
                Ok(_) if elsewhere => Some(format!(
                    "r{r} bound to {rid} while its binding to {first} still holds it: one \
                     reservation bound to two resources"
                )),
                Ok(token) => {
                    h.bound = Some(j);
                    h.exp = token.expiration_time;
                    acked.then(|| {
                        format!(
                            "a bind of r{r} to {rid} after its end was acknowledged held capacity"
                        )
                    })
                }
                Err(ReservationError::Gone { .. }) => {
                    h.uncertain = true;
                    must.then(|| {
                        format!("a bind of r{r}, which its client holds live, answered Gone")
                    })
                }
                Err(ReservationError::AlreadyBound { bound_until, .. }) => (!other).then(|| {
                    format!(
                        "r{r} answered AlreadyBound (until {bound_until}) with no other bind tried"
                    )
                }),
                Err(ReservationError::ResourceEnded { .. }) if elsewhere => Some(format!(
                    "r{r} answered ResourceEnded for {rid} while bound to another resource its \
                     client still holds (AlreadyBound)"
                )),
                Err(ReservationError::ResourceEnded { .. }) => {
                    h.released = true;
                    (!started).then(|| format!("r{r} answered ResourceEnded before {rid}'s event"))
                }
                Err(e) => {
                    // A bind that fails gives back an unbound entry at most.
                    h.uncertain |= !bound;
                    st.store_error("a bind", &e);
                    None
                }
            };
            if let Some(v) = verdict {
                st.lane.violation(v);
            }
        }
        ResOp::Release { r, process } => {
            let handle = {
                let mut st = state.lock().unwrap();
                let Some(h) = st.held.get_mut(&r) else {
                    return;
                };
                h.released = true;
                let (c, id) = (h.coord, h.id.clone());
                a.limiters[process].reservation(RESOURCE, &account(seed, c), &id)
            };
            let Ok(handle) = handle else {
                return;
            };
            if let Err(e) = handle.delete().await {
                state.lock().unwrap().store_error("a release", &e);
            }
        }
        ResOp::End { j } => state.lock().unwrap().emit(j),
        ResOp::Deliver { pick, again } => {
            let (n, j, ev) = {
                let mut st = state.lock().unwrap();
                if st.queue.is_empty() {
                    return;
                }
                let (n, j) = st.queue[pick as usize % st.queue.len()];
                st.ended.entry(j).or_default().started = true;
                (n, j, st.event(j))
            };
            deliver(a, state, n, j, ev, !again).await;
        }
    }
}

/// One delivery of event `n` (resource `j`) to the remover; acknowledged (dequeued when `ack`) on
/// `Removed`. Returns whether it succeeded.
async fn deliver(
    a: &Actors,
    state: &Mutex<State>,
    n: u64,
    j: u32,
    ev: EventBridgeEvent<Value>,
    ack: bool,
) -> bool {
    let out = token_remover::handle(&a.remover, ev).await;
    let mut st = state.lock().unwrap();
    match out {
        Ok(Removal::Removed { .. }) => {
            st.ended.entry(j).or_default().acked = true;
            if ack {
                st.queue.retain(|q| q.0 != n);
            }
            true
        }
        Ok(other) => {
            st.lane.violation(format!(
                "the remover did not remove for an ended resource: {other:?}"
            ));
            false
        }
        Err(e) => {
            if !st.lane.faulted {
                st.lane
                    .unless_slow(format!("the remover failed with no fault injected: {e}"));
            }
            false
        }
    }
}

/// The violations found since the last call (at every answer: nothing is read).
pub fn checkpoint(st: &Mutex<State>) -> Vec<String> {
    st.lock().unwrap().lane.take()
}

/// The end: every resource ends and its event is delivered until acknowledged (no fault, nothing
/// in flight), the clock passes the reservation TTL, and then every coordinate grants its whole
/// capacity (what it refuses is leaked).
pub async fn finish(
    a: &Actors,
    w: &World,
    st: &Mutex<State>,
    slow: &(dyn Fn() -> bool + Sync),
) -> Vec<String> {
    let pending = {
        let mut s = st.lock().unwrap();
        let now = w.env.clock.now();
        let round = s.lane.round + 1;
        s.lane.start(round, now, false);
        for j in 0..s.spec.resources {
            s.emit(j);
        }
        s.queue.clone()
    };
    for (n, j) in pending {
        // Until acknowledged: with no fault, a failure is already a violation unless DynamoDB
        // Local was slow meanwhile; tries bound the loop.
        for attempt in 0..8 {
            let ev = {
                let mut s = st.lock().unwrap();
                s.ended.entry(j).or_default().started = true;
                s.event(j)
            };
            if deliver(a, st, n, j, ev, true).await || (attempt >= 2 && !slow()) {
                break;
            }
        }
    }
    let slow = slow();
    st.lock().unwrap().lane.end_round(slow);
    w.env
        .clock
        .advance(DEFAULT_RESERVATION_TTL + Duration::from_secs(1));
    let (caps, seed) = {
        let s = st.lock().unwrap();
        (s.spec.capacities.clone(), s.seed)
    };
    for (c, cap) in caps.into_iter().enumerate() {
        let acct = account(seed, c);
        let mut granted = 0;
        let mut refused = Vec::new();
        for _ in 0..cap {
            // A store error (a loaded machine's timeout) is tried again; a refusal is not.
            for _ in 0..3 {
                match a.limiters[0]
                    .get_reservation(RESOURCE, &acct, cap as i64)
                    .await
                {
                    Ok(_) => granted += 1,
                    Err(ReservationError::Store(e)) => {
                        refused.push(e.to_string());
                        continue;
                    }
                    Err(e) => refused.push(e.to_string()),
                }
                break;
            }
        }
        if granted < cap {
            let mut s = st.lock().unwrap();
            let coord = s.coordinates[c].clone();
            refused.dedup();
            s.lane.violation(format!(
                "leaked: after every resource ended and every reservation expired, {coord} grants \
                 {granted} of its capacity {cap}: {}",
                refused.join("; ")
            ));
        }
    }
    let mut s = st.lock().unwrap();
    s.lane.take()
}
