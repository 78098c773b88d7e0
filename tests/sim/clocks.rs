//! The WebSocket functions' clocks. Each simulated Lambda instance (two `$connect`s, `$disconnect`,
//! `$default`, the sweeper, the session API, the reconciler, two authorizers) reads its own
//! clock: the simulation's clock, plus a skew of its own (at most [`MAX_SKEW`] either way, drawn
//! per schedule), plus the real time passed since the round began (at most [`MAX_MOVE`]), so time
//! moves inside an operation — between a handler's read and its write — as it does in AWS. At
//! each round's start the time a round moved is folded into the simulation's clock, so no
//! instance's clock ever goes back.
//!
//! The oracle stamps an answer with [`Moving::now`] (the simulation's clock plus the time moved,
//! no skew) when it arrives: the time a handler read differs from that stamp by at most
//! [`UNCERTAINTY`], and every window the oracle judges is widened (or, for a fixed minute's
//! count, narrowed) by it.

use std::sync::atomic::{AtomicI64, Ordering};
use std::sync::{Arc, Mutex};
use std::time::{Duration, Instant};

use shared::clock::{duration_nanos, Clock, ManualClock, Timestamp};

/// The most an instance's clock is off the simulation's, either way (two instances: twice this).
pub const MAX_SKEW: Duration = Duration::from_millis(200);

/// The most the clocks move inside one round.
pub const MAX_MOVE: Duration = Duration::from_secs(1);

/// How far the time a handler read can be from the oracle's stamp of its answer.
pub const UNCERTAINTY: Duration = Duration::from_millis(1200);

/// The instances, in the order [`Instances::deps`] keeps them.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Instance {
    ConnectA,
    ConnectB,
    Disconnect,
    Message,
    Sweeper,
    SessionApi,
    Reconciler,
    AuthorizerA,
    AuthorizerB,
}

const COUNT: usize = 9;

/// The real time a round has moved the clocks, shared by every instance.
#[derive(Debug)]
pub struct Moving {
    base: ManualClock,
    since: Mutex<Instant>,
}

impl Moving {
    fn moved(&self) -> Duration {
        let since = *self.since.lock().unwrap_or_else(|e| e.into_inner());
        since.elapsed().min(MAX_MOVE)
    }

    /// The simulation's clock plus the time moved in this round (no instance's skew).
    pub fn now(&self) -> Timestamp {
        self.base.now().plus(self.moved())
    }

    /// A round starts: the time the last one moved becomes the simulation's, then `advance`.
    pub fn next_round(&self, advance: Duration) {
        let mut since = self.since.lock().unwrap_or_else(|e| e.into_inner());
        self.base.advance(since.elapsed().min(MAX_MOVE) + advance);
        *since = Instant::now();
    }
}

/// One instance's clock.
#[derive(Debug)]
struct InstanceClock {
    moving: Arc<Moving>,
    skew_ns: Arc<AtomicI64>,
}

impl Clock for InstanceClock {
    fn now(&self) -> Timestamp {
        let t = self.moving.now();
        Timestamp::from_nanos(
            t.as_nanos()
                .saturating_add(self.skew_ns.load(Ordering::Relaxed)),
        )
    }
}

/// The instances' dependencies, each with its own clock.
pub struct Instances {
    pub moving: Arc<Moving>,
    skews: Vec<Arc<AtomicI64>>,
    deps: Vec<shared::Deps>,
}

impl Instances {
    /// `deps` as each instance has them, with its own clock over `base`.
    pub fn new(deps: &shared::Deps, base: &ManualClock) -> Instances {
        let moving = Arc::new(Moving {
            base: base.clone(),
            since: Mutex::new(Instant::now()),
        });
        let skews: Vec<Arc<AtomicI64>> = (0..COUNT).map(|_| Arc::new(AtomicI64::new(0))).collect();
        let deps = skews
            .iter()
            .map(|s| shared::Deps {
                clock: Arc::new(InstanceClock {
                    moving: Arc::clone(&moving),
                    skew_ns: Arc::clone(s),
                }),
                ..deps.clone()
            })
            .collect();
        Instances {
            moving,
            skews,
            deps,
        }
    }

    /// Draws each instance's skew for the schedule `seed` (its own generator: the schedule's
    /// steps are the same as without it), and starts the first round's moving time.
    pub fn start(&self, seed: u64) -> Vec<i64> {
        let mut rng = fastrand::Rng::with_seed(seed ^ 0x5ce3_c10c_0000_0001);
        let max = duration_nanos(MAX_SKEW);
        let drawn: Vec<i64> = self
            .skews
            .iter()
            .map(|s| {
                let v = rng.i64(-max..=max);
                s.store(v, Ordering::Relaxed);
                v / 1_000_000
            })
            .collect();
        self.moving.next_round(Duration::ZERO);
        drawn
    }

    pub fn deps(&self, i: Instance) -> &shared::Deps {
        &self.deps[i as usize]
    }
}
