//! What the reservation oracle knows: what each client was granted and told, the resources'
//! ends as the remover saw them, and each coordinate's limits over time. Checked at every answer;
//! no ledger is read.

use std::collections::{BTreeMap, BTreeSet};
use std::time::Duration;

use aws_lambda_events::event::eventbridge::EventBridgeEvent;
use serde_json::Value;
use shared::clock::Timestamp;
use shared::reservation::{NonFungibleLimiter, ReservationError};

use super::limits::{self, Capacity, DECOY_DEFAULT};
use super::{ResOp, ResSpec, LEGACY_R, RESOURCE};
use crate::oracle::Lane;

/// What the model knows of one reservation its client got.
#[derive(Debug)]
pub(super) struct Held {
    pub(super) coord: usize,
    pub(super) id: String,
    /// The highest limit that may have admitted it (`None`: a row written before the ledger,
    /// seeded into it by the coordinate's first reservation).
    pub(super) granted_under: Option<u64>,
    /// The reservation's expiry (epoch s) until a bind's answer says otherwise.
    pub(super) exp: i64,
    /// The resource a bind answered Ok for, with the binding's expiry in `exp`. One only: a bind
    /// to another resource while it is bound answers `AlreadyBound`, even in the same second (the
    /// binding's id tells them apart: decision 0101, "Bound rows").
    pub(super) bound: Option<u32>,
    /// Every resource a bind of it was started for.
    pub(super) tried: BTreeSet<u32>,
    /// A release was started (or a bind released it: `ResourceEnded`).
    pub(super) released: bool,
    /// A step on it crashed or failed while it was unbound: its entry may or may not be there. A
    /// failed or stopped bind gives back only an entry still unbound (decision 0101, "Ended
    /// resources"), so a binding the client holds stays certain.
    pub(super) uncertain: bool,
}

/// A resource's end as the remover saw it.
#[derive(Debug, Default, Clone, Copy)]
pub(super) struct Ending {
    pub(super) emitted: bool,
    /// A delivery started: the ended marker may exist.
    pub(super) started: bool,
    /// A delivery was answered Ok.
    pub(super) acked: bool,
}

/// The reservation side of one run: the model, the remover's queue, the round's flags and the
/// violations found between checkpoints.
pub struct State {
    pub(super) seed: u64,
    /// The second limiter's clock skew (ms): a reservation counts only while it is live on
    /// either clock.
    pub(super) skew_ms: i64,
    pub(super) spec: ResSpec,
    pub(super) coordinates: Vec<String>,
    pub(super) resource_ids: Vec<String>,
    pub(super) held: BTreeMap<u32, Held>,
    pub(super) ended: BTreeMap<u32, Ending>,
    /// Queued events: (event number, resource).
    pub(super) queue: Vec<(u64, u32)>,
    pub(super) events: u64,
    /// Each coordinate's limits over time (a constant default limit without a limit row).
    pub(super) caps: Vec<Capacity>,
    /// How far back a grant may read a limit row.
    pub(super) window: Duration,
    /// When each coordinate first granted: its ledger exists from then on, seeded with the
    /// legacy rows live at its creation.
    pub(super) first_grant: Vec<Option<Timestamp>>,
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
            caps: spec
                .capacities
                .iter()
                .map(|c| Capacity::new(*c, Timestamp::from_secs(0)))
                .collect(),
            window: Duration::ZERO,
            first_grant: vec![None; spec.capacities.len()],
            lane: Lane::default(),
        }
    }

    /// The limit a client of coordinate `c` passes as its default.
    pub(super) fn default_limit(&self, c: usize) -> i64 {
        if self.spec.limit_rows[c] {
            DECOY_DEFAULT
        } else {
            self.spec.capacities[c] as i64
        }
    }

    /// The highest limit a grant on coordinate `c` may use now.
    pub(super) fn capacity_now(&self, c: usize) -> u64 {
        let now = self.lane.now;
        self.caps[c].highest(now.minus(self.window), now)
    }

    /// The highest limit that may have admitted `h`: a legacy row was seeded into the ledger by
    /// the coordinate's first reservation, fill-first as that limit's shares (or, more rows than
    /// the limit, all of them) allow.
    pub(super) fn granted_under(&self, h: &Held) -> u64 {
        h.granted_under.unwrap_or_else(|| {
            let until = self.first_grant[h.coord].unwrap_or(self.lane.now);
            let rows = self.spec.legacy[h.coord].len() as u64;
            rows.max(self.caps[h.coord].highest(Timestamp::from_secs(0), until))
        })
    }

    /// The schedule's limits file as the operator last asked for it.
    pub(super) fn limits_file(&self) -> Vec<shared::limit::load::LimitSpec> {
        let rows: Vec<(String, u64)> = (0..self.caps.len())
            .filter(|c| self.spec.limit_rows[*c])
            .map(|c| (account(self.seed, c), self.caps[c].current))
            .collect();
        limits::file(&rows, RESOURCE)
    }

    /// How a finding names reservation `r`.
    pub(super) fn name(&self, r: u32) -> String {
        let h = &self.held[&r];
        let what = if r >= LEGACY_R {
            format!("legacy row {}", h.id)
        } else {
            format!("r{r}")
        };
        match h.bound {
            None => what,
            Some(j) => format!("{what} (bound to {})", self.resource_ids[j as usize]),
        }
    }

    /// A store error is documented only under an injected fault.
    pub(super) fn store_error(&mut self, what: &str, e: &ReservationError) {
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
    pub(super) fn must_hold(&self, r: u32) -> bool {
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
    pub(super) fn slack(&self) -> Duration {
        Duration::from_secs(u64::from(self.skew_ms != 0))
    }

    /// Resource `j` ends: its event is queued, once.
    pub(super) fn emit(&mut self, j: u32) {
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
    /// included) are at most the capacity, plus those granted when a higher limit could be in
    /// effect (a lowered limit does not evict: [`limits`]).
    pub(super) fn check_grant(&mut self, c: usize) {
        let cap = self.capacity_now(c);
        let held: Vec<u32> = self
            .held
            .iter()
            .filter(|(r, h)| h.coord == c && self.must_hold(**r))
            .map(|(r, _)| *r)
            .collect();
        let higher = held
            .iter()
            .filter(|r| self.granted_under(&self.held[r]) > cap)
            .count() as u64;
        if held.len() as u64 > cap + higher {
            let coord = self.coordinates[c].clone();
            let which: Vec<String> = held.iter().map(|r| self.name(*r)).collect();
            let under = if higher > 0 {
                format!(" (+{higher} granted under a higher limit)")
            } else {
                String::new()
            };
            self.lane.violation(format!(
                "over-admission: clients of {coord} hold {} live reservations, capacity \
                 {cap}{under}: {}",
                held.len(),
                which.join(", ")
            ));
        }
    }

    pub(super) fn event(&mut self, j: u32) -> EventBridgeEvent<Value> {
        let mut ev: EventBridgeEvent<Value> = serde_json::from_str(include_str!(
            "../../../events/token-remover/emr-terminated.json"
        ))
        .expect("the sample event parses");
        ev.detail["clusterId"] = Value::String(self.resource_ids[j as usize].clone());
        ev.id = Some(format!("sim-{}", self.resource_ids[j as usize]));
        ev
    }
}

pub(super) fn coordinate(seed: u64, c: usize) -> String {
    NonFungibleLimiter::coordinate(RESOURCE, &account(seed, c)).expect("a valid coordinate")
}

pub(super) fn account(seed: u64, c: usize) -> String {
    format!("sim{seed:x}-{c}")
}

/// The service the schedule's limit rows belong to.
pub(super) fn service(seed: u64) -> String {
    format!("sim{seed:x}")
}
