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
//!   may give back an unbound entry; and the rows rate-limiter-py wrote before the ledger, until
//!   they expire or their resource's event) are at most its capacity: the highest limit in
//!   effect within the limit cache's time, plus what they hold of grants made under a higher one
//!   ([`limits`]). A capacity released twice (a bind, a release or the remover freeing what a
//!   client still holds) shows here, as the grant it lets in.
//! - **one binding**: a reservation bound to a resource is never bound to a second one, nor told
//!   `ResourceEnded` for another while its binding holds.
//! - **documented answers**: `Limited`, `Gone`, `AlreadyBound`, `ResourceEnded` only where the
//!   model allows them; a store error only in a round with an injected fault; a bind after its
//!   resource's event was acknowledged never holds capacity.
//! - **0 leaked**: at the end every resource ends, every event is delivered until acknowledged,
//!   and the clock passes the reservation TTL: each coordinate then grants its whole capacity
//!   (its last limit).

mod draw;
mod limits;
mod model;

pub use draw::{generate, ResOp, ResSpec};

use std::collections::BTreeSet;
use std::sync::atomic::{AtomicI64, Ordering};
use std::sync::{Arc, Mutex};
use std::time::Duration;

use aws_lambda_events::event::eventbridge::EventBridgeEvent;
use futures::future::join_all;
use serde_json::Value;
use shared::clock::{Clock, ManualClock, Timestamp};
use shared::limit::LimitStore;
use shared::reservation::{Attrs, NonFungibleLimiter, ReservationError, DEFAULT_RESERVATION_TTL};
use shared::table::TableKind;
use token_remover::{Outcome as Removal, Processors, Remover};

use crate::ws_support::World;
pub use model::State;
use model::{account, coordinate, service, Held};

/// The resource name of every coordinate (its account names the schedule).
const RESOURCE: &str = "emr";

/// Legacy rows are numbered from here (coordinate `c`'s `i`-th: `+ 1000 c + i`), past any
/// reservation a step draws.
const LEGACY_R: u32 = 1 << 30;

/// The limiters and the remover a simulation's steps run through (the World's proxied client).
pub struct Actors {
    limiters: [NonFungibleLimiter; 2],
    /// The second limiter's clock skew (ms), set per schedule.
    skew: Arc<AtomicI64>,
    remover: Remover,
    table: String,
    /// The operator's limit table access (unproxied, as `turnstile limits load` runs).
    operator: LimitStore,
    /// One limits load at a time, as one operator runs them.
    loading: tokio::sync::Mutex<()>,
    /// Unproxied: the rows rate-limiter-py wrote before a schedule.
    direct: aws_sdk_dynamodb::Client,
    attrs: Attrs,
    /// How far back a grant may read a limit row (the limiters' limit cache and a margin).
    window: Duration,
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
        let direct_deps = shared::Deps {
            dynamo: direct.clone(),
            ..deps.clone()
        };
        Actors {
            limiters: [limiter(deps), limiter(&skewed)],
            skew,
            remover: Remover::new(deps, token_remover::Config { processors }),
            table: deps.tables.non_fungible_tokens.clone(),
            operator: LimitStore::from_deps(&direct_deps).expect("limit store from deps"),
            loading: tokio::sync::Mutex::new(()),
            direct: direct.clone(),
            attrs: Attrs::of(deps.style),
            window: limits::window(&deps.vars),
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

/// Before the first round: the schedule's limits file is loaded (unproxied, as the operator
/// does) and the rows rate-limiter-py wrote are put in its layout; the oracle counts the latter
/// as held from the start.
pub async fn start(a: &Actors, state: &Mutex<State>, now: Timestamp) {
    let (seed, spec, file, resource_ids) = {
        let mut st = state.lock().unwrap();
        st.window = a.window;
        (
            st.seed,
            st.spec.clone(),
            st.limits_file(),
            st.resource_ids.clone(),
        )
    };
    let mut failed = Vec::new();
    if !file.is_empty() {
        if let Err(e) = limits::apply(&a.operator, &service(seed), &file).await {
            failed.push(format!("the initial limits load failed: {e}"));
        }
    }
    for (c, rows) in spec.legacy.iter().enumerate() {
        if rows.is_empty() {
            continue;
        }
        let acct = account(seed, c);
        let coord = coordinate(seed, c);
        let named: Vec<_> = rows
            .iter()
            .enumerate()
            .map(|(i, row)| {
                let rid = row
                    .bound
                    .map_or(String::new(), |j| resource_ids[j as usize].clone());
                (format!("py-{seed:x}-{c}-{i}"), *row, rid)
            })
            .collect();
        let pair = (RESOURCE, acct.as_str(), coord.as_str());
        if let Err(e) = limits::write_legacy(&a.direct, &a.table, a.attrs, pair, &named, now).await
        {
            failed.push(format!("writing legacy rows failed: {e}"));
        }
        let mut st = state.lock().unwrap();
        for (i, (id, row, _)) in named.into_iter().enumerate() {
            st.held.insert(
                LEGACY_R + 1000 * c as u32 + i as u32,
                Held {
                    coord: c,
                    id,
                    granted_under: None,
                    exp: now.as_secs() + row.ttl_secs as i64,
                    bound: row.bound,
                    tried: row.bound.into_iter().collect(),
                    released: false,
                    uncertain: false,
                },
            );
        }
    }
    let mut st = state.lock().unwrap();
    for v in failed {
        st.lane.unless_slow(v);
    }
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
            let default = state.lock().unwrap().default_limit(coord);
            let acct = account(seed, coord);
            let limiter = &a.limiters[process];
            let answers =
                join_all((0..count).map(|_| limiter.get_reservation(RESOURCE, &acct, default)))
                    .await;
            let mut st = state.lock().unwrap();
            let under = st.capacity_now(coord);
            for (i, ans) in answers.into_iter().enumerate() {
                match ans {
                    Ok(res) => {
                        let exp = res.expires_at.map_or(0, |t| t.as_secs());
                        let now = st.lane.now;
                        st.first_grant[coord].get_or_insert(now);
                        st.held.insert(
                            r + i as u32,
                            Held {
                                coord,
                                id: res.id,
                                granted_under: Some(under),
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
        ResOp::SetLimit { coord, limit } => {
            let _one = a.loading.lock().await;
            let (file, span) = {
                let mut st = state.lock().unwrap();
                let now = st.lane.now;
                let span = st.caps[coord].sent(limit, now);
                (st.limits_file(), span)
            };
            let loaded = limits::apply(&a.operator, &service(seed), &file).await;
            let mut st = state.lock().unwrap();
            match loaded {
                Ok(()) => {
                    let now = st.lane.now;
                    st.caps[coord].answered(span, now);
                }
                // Unproxied: only a slow DynamoDB Local fails it. Its limit stays possible.
                Err(e) => st
                    .lane
                    .unless_slow(format!("the operator's limits load failed: {e}")),
            }
        }
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
        let caps: Vec<(u64, i64)> = (0..s.caps.len())
            .map(|c| (s.caps[c].current, s.default_limit(c)))
            .collect();
        (caps, s.seed)
    };
    for (c, (cap, default)) in caps.into_iter().enumerate() {
        let acct = account(seed, c);
        let mut granted = 0;
        // The probe's own grants that timed out: each may have applied unanswered, holding a unit
        // no later grant of the probe gets.
        let mut unanswered = 0;
        let mut refused = Vec::new();
        for _ in 0..cap {
            // A store error (a loaded machine's timeout) is tried again; a refusal is not.
            for _ in 0..3 {
                match a.limiters[0]
                    .get_reservation(RESOURCE, &acct, default)
                    .await
                {
                    Ok(_) => granted += 1,
                    Err(ReservationError::Store(e)) => {
                        unanswered += 1;
                        refused.push(e.to_string());
                        continue;
                    }
                    Err(e) => refused.push(e.to_string()),
                }
                break;
            }
        }
        if granted + unanswered < cap {
            let mut s = st.lock().unwrap();
            let coord = s.coordinates[c].clone();
            refused.dedup();
            s.lane.violation(format!(
                "leaked: after every resource ended and every reservation expired, {coord} grants \
                 {granted} of its capacity {cap} ({unanswered} unanswered): {}",
                refused.join("; ")
            ));
        }
    }
    let mut s = st.lock().unwrap();
    s.lane.take()
}
