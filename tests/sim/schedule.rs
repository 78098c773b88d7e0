//! Schedules: a pure function of a seed (decision 2300). A schedule names tenants, sessions and
//! connection ids symbolically and never depends on what an earlier step answered, so the same
//! seed always prints and runs the same steps.

use std::fmt;

use shared::tenant::{Limits, WindowAlgorithm};

use crate::kv::{self, KvOp, KvSpec};
use crate::reservations::{self, ResOp, ResSpec};

/// What the fault proxy does during one round (decision 0900's policies).
#[derive(Debug, Clone, Copy, PartialEq)]
pub enum Fault {
    None,
    /// Each request throttled with this probability (percent).
    Throttle(u8),
    /// Each `GetItem` throttled with this probability (percent): a read that fails after its
    /// writes before it landed. Drawn only by shapes that ask for it (`only_fault`).
    ThrottleReads(u8),
    /// Each `DeleteItem` throttled with this probability (percent): a failed bind's row left
    /// behind. Drawn only by shapes that ask for it (`only_fault`).
    ThrottleDeletes(u8),
    /// Each request forwarded this many ms late (its items held meanwhile).
    Delay(u16),
    /// Each `UpdateItem` forwarded this many ms late, reads at once: a `$connect` is half-way
    /// between its two writes while others read. Drawn only by shapes that ask for it.
    DelayUpdates(u16),
    /// The next n requests are applied and answered 500 (the answer lost).
    LoseAnswers(u8),
    /// The same for the next n `UpdateItem`s only (counts and session sets).
    LoseUpdateAnswers(u8),
    /// Overlapping writes cancelled as `TransactionConflict`.
    Conflicts,
    /// `UpdateItem`s never answered (the client's timeout ends them).
    StallUpdates,
    /// The `nth` write (`UpdateItem`, or `TransactWriteItems` when `tx`) of the round is held by
    /// the proxy: its client times out and retries, other requests follow, and the held one lands
    /// when the round's lanes are done (a request delivered late).
    Late {
        nth: u8,
        tx: bool,
    },
    /// The endpoint goes down `after_ms` into the round for `down_ms`, as during a restart of
    /// DynamoDB: the next `lose` answers before it are lost (written, never answered), and every
    /// connection meanwhile is closed unanswered.
    Outage {
        lose: u8,
        after_ms: u16,
        down_ms: u16,
    },
}

impl Fault {
    pub fn kind(&self) -> &'static str {
        match self {
            Fault::None => "none",
            Fault::Throttle(_) | Fault::ThrottleReads(_) | Fault::ThrottleDeletes(_) => "throttle",
            Fault::Delay(_) | Fault::DelayUpdates(_) => "delay",
            Fault::LoseAnswers(_) | Fault::LoseUpdateAnswers(_) => "lost-answer",
            Fault::Conflicts => "conflict",
            Fault::StallUpdates => "stall",
            Fault::Late { .. } => "late",
            Fault::Outage { .. } => "outage",
        }
    }
}

/// One step of a lane. Tenants and sessions are indexes; connection ids are numbered per schedule.
#[derive(Debug, Clone, PartialEq)]
pub enum Op {
    PutSession {
        t: usize,
        s: usize,
    },
    DeleteSession {
        t: usize,
        s: usize,
    },
    /// `$connect` of a new connection id, delivered twice when `twice` (at once, as a retried
    /// invocation).
    Connect {
        t: usize,
        s: usize,
        c: u32,
        twice: bool,
    },
    /// The client leaves; its `$disconnect` is delivered `times` times (0: never).
    Leave {
        t: usize,
        s: usize,
        c: u32,
        times: u8,
    },
    /// `$disconnect` delivered before its `$connect` finished (both at once); the client is gone.
    DisconnectFirst {
        t: usize,
        s: usize,
        c: u32,
    },
    Message {
        t: usize,
        s: usize,
        c: u32,
    },
    /// DynamoDB's TTL process deletes the session if its TTL has passed; the stream record is
    /// queued.
    Expire {
        t: usize,
        s: usize,
    },
    /// Deliver a queued stream record (`pick` modulo the queue: out of order); kept for another
    /// delivery when `again`.
    Deliver {
        pick: u32,
        again: bool,
    },
    /// A reconciler run over the tenant (its graces real, other lanes running meanwhile).
    Reconcile {
        t: usize,
    },
    /// The tenant's caps change (its layout and algorithm stay).
    Limits {
        t: usize,
        caps: Caps,
    },
    /// The operator reshards the tenant to `shards` counter items with `caps`, as the docs say
    /// (decisions 1502, 2206): drained first (every session deleted: its connections closed and
    /// released), then `tenant put --reshard-drained` (the counters fenced, then the row), then
    /// the sessions created again. A round without other WebSocket steps, after the clock moved
    /// past the minute of the last connects.
    Reshard {
        t: usize,
        shards: u64,
        caps: Caps,
    },
    /// A reservation or token-remover step ([`reservations`]).
    Res(ResOp),
    /// A kv limit step ([`kv`]).
    Kv(KvOp),
}

/// A step with its harness fault: a Lambda "crash" (the future dropped) after this many ms.
#[derive(Debug, Clone, PartialEq)]
pub struct Step {
    pub op: Op,
    pub crash_ms: Option<u16>,
}

/// The caps of one tenant (small, so limits are reached).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Caps {
    pub tenant_connections: u64,
    pub per_session: u64,
    pub tenant_per_minute: u64,
    pub session_per_minute: u64,
    pub messages_per_minute: u64,
}

#[derive(Debug, Clone, PartialEq)]
pub struct TenantSpec {
    pub caps: Caps,
    pub shards: u64,
    pub gcra: bool,
    pub session_ttl: u64,
}

impl TenantSpec {
    /// The tenant's limits with `caps` over `shards` counter items.
    pub fn limits(&self, caps: &Caps, shards: u64) -> Limits {
        let mut l = Limits::example(
            caps.tenant_per_minute,
            caps.session_per_minute,
            caps.per_session,
            caps.tenant_connections,
            self.session_ttl,
            caps.messages_per_minute,
        );
        l.connection_shards = shards;
        if self.gcra {
            l.rate_algorithm = WindowAlgorithm::Gcra;
        }
        l
    }
}

#[derive(Debug, Clone, PartialEq)]
pub struct Round {
    pub fault: Fault,
    /// Seconds the clock moves before the round.
    pub advance: u64,
    pub lanes: Vec<Vec<Step>>,
}

#[derive(Debug, Clone, PartialEq)]
pub struct Schedule {
    pub seed: u64,
    pub tenants: Vec<TenantSpec>,
    pub sessions: usize,
    pub rounds: Vec<Round>,
    /// The coordinates and resources of the reservation lanes, if the schedule has them.
    pub res: Option<ResSpec>,
    /// The limit names of the kv lanes, if the schedule has them.
    pub kv: Option<KvSpec>,
    /// The clock skew of the second "process" of the reservation and kv lanes (ms, either sign):
    /// two Lambda instances' clocks differ by tens of ms.
    pub skew_ms: i64,
    /// A socket admitted opens up to this many ms after its `$connect` answered (0: at once).
    pub open_ms: u16,
    /// The reconciler's lane starts this long after the round's other lanes, which then start
    /// at once (`None`: they are spread over its phases instead).
    pub reconcile_after_ms: Option<u64>,
    /// In the reconciler's round, each lane of deliveries starts this long (150 ms more for each
    /// further lane) after the others, which start at once (`None`: lanes are spread).
    pub deliver_at_ms: Option<u64>,
    /// Lanes of session DELETEs only start this long after the round's others (`None`: at once).
    pub delete_after_ms: Option<u64>,
}

/// The largest clock skew between two simulated instances (ms).
pub const MAX_SKEW_MS: i64 = 400;

/// How the generator draws (the make-test run and the soak use the defaults).
#[derive(Debug, Clone, Copy)]
pub struct Shape {
    pub rounds: (usize, usize),
    pub max_lanes: usize,
    pub max_steps: usize,
    /// Percent of rounds with an injected proxy fault.
    pub fault_pct: u32,
    /// Percent of steps that crash.
    pub crash_pct: u32,
    /// Percent of schedules with a reconciler run mid-schedule.
    pub reconcile_pct: u32,
    /// Every faulted round gets this fault (a mutation's test aims at its defect).
    pub only_fault: Option<Fault>,
    /// Sessions' TTL in seconds (short ones expire within a schedule).
    pub session_ttl: (u64, u64),
    /// Percent of steps drawn as a TTL expiry or a record's delivery before the usual mix.
    pub ttl_pct: u32,
    /// Percent of steps drawn as a message from a connection of the schedule.
    pub message_pct: u32,
    /// Percent of schedules that also have reservation lanes (drawn from a generator of their
    /// own: the WebSocket steps of a seed are the same either way).
    pub reservation_pct: u32,
    /// Percent of schedules that also have kv lanes (a generator of their own too).
    pub kv_pct: u32,
    /// Percent of schedules with a reshard round (a tenant drained, resharded, resumed).
    pub reshard_pct: u32,
    /// Reservation lanes mostly of binds, ends and deliveries on one small coordinate.
    pub binds: bool,
    /// Reservation lanes of reserves and binds, again and again, to one resource that ends only
    /// at the schedule's end (a repeated bind that fails must keep the first one's row).
    pub rebinds: bool,
    /// Reservation lanes whose every coordinate has a limit row, lowered in early rounds, and
    /// rows written before the ledger.
    pub limit_rows: bool,
    /// Tenants whose `tenantPerMinute` binds before their connection caps.
    pub rate_bound: bool,
    /// Kv lanes mostly of refunds and unit spends on one small, slow bucket, two lanes a round
    /// (a refund applied twice shows as the spends it lets in).
    pub refunds: bool,
    /// WebSocket lanes after round 0 (drawn either way, so the other draws of a seed stay).
    pub ws_lanes: bool,
    /// A socket admitted opens up to this many ms after its `$connect` answered 200, as API
    /// Gateway's does after the answer reaches it (its Management API answers 410 meanwhile).
    pub open_ms: u16,
    /// See [`Schedule::reconcile_after_ms`].
    pub reconcile_after_ms: Option<u64>,
    /// The reconciler's round holds `$connect`s to its tenant only, and its run never crashes.
    pub reconcile_connects: bool,
    /// The reconciler's round holds TTL deletions of its tenant's sessions as it starts and their
    /// records' deliveries [`Schedule::deliver_at_ms`] later, and its run never crashes.
    pub reconcile_sweeps: bool,
    /// Each round also holds a `$connect` and a DELETE of its session, the DELETE's lane
    /// starting 60 ms later (inside the socket's opening, with `open_ms`).
    pub end_races: bool,
}

impl Default for Shape {
    fn default() -> Shape {
        Shape {
            rounds: (5, 9),
            max_lanes: 4,
            max_steps: 3,
            fault_pct: 40,
            crash_pct: 8,
            reconcile_pct: 35,
            only_fault: None,
            session_ttl: (60, 240),
            ttl_pct: 0,
            message_pct: 0,
            reservation_pct: 50,
            kv_pct: 50,
            reshard_pct: 25,
            binds: false,
            rebinds: false,
            limit_rows: false,
            rate_bound: false,
            refunds: false,
            ws_lanes: true,
            open_ms: 0,
            reconcile_after_ms: None,
            reconcile_connects: false,
            reconcile_sweeps: false,
            end_races: false,
        }
    }
}

/// Caps for a tenant of `shards` counter items (each shard needs a share of at least one).
fn caps(rng: &mut fastrand::Rng, shards: u64) -> Caps {
    Caps {
        tenant_connections: rng.u64(2..=5).max(shards),
        per_session: rng.u64(1..=3),
        tenant_per_minute: rng.u64(3..=8).max(shards),
        session_per_minute: rng.u64(2..=5),
        messages_per_minute: rng.u64(1..=4),
    }
}

impl Schedule {
    pub fn generate(seed: u64, shape: &Shape) -> Schedule {
        let mut rng = fastrand::Rng::with_seed(seed);
        let tenants: Vec<TenantSpec> = (0..rng.usize(1..=2))
            .map(|_| {
                let shards = if rng.bool() { 1 } else { rng.u64(2..=4) };
                let mut caps = caps(&mut rng, shards);
                if shape.rate_bound {
                    // The per-minute cap binds before the connection caps do.
                    caps.tenant_connections = caps.tenant_connections.max(8);
                    caps.per_session = 3;
                    caps.tenant_per_minute = shards.max(2);
                }
                TenantSpec {
                    caps,
                    shards,
                    gcra: rng.u32(0..4) == 0,
                    session_ttl: rng.u64(shape.session_ttl.0..=shape.session_ttl.1),
                }
            })
            .collect();
        let sessions = rng.usize(2..=3);
        let mut next_c = 0u32;
        // Each tenant's counter layout as the schedule reshards it.
        let mut layout: Vec<u64> = tenants.iter().map(|t| t.shards).collect();
        // Connection ids generated so far, with their tenant and session.
        let mut conns: Vec<(usize, usize, u32)> = Vec::new();
        let n_rounds = rng.usize(shape.rounds.0..=shape.rounds.1);
        let reconcile_round =
            (rng.u32(0..100) < shape.reconcile_pct).then(|| rng.usize(1..n_rounds));
        let reshard_round = (rng.u32(0..100) < shape.reshard_pct).then(|| rng.usize(2..n_rounds));
        let mut rounds = Vec::new();
        for r in 0..n_rounds {
            let fault = if r == 0 || rng.u32(0..100) >= shape.fault_pct {
                Fault::None
            } else {
                match rng.u32(0..9) {
                    0 => Fault::Throttle(rng.u8(20..=70)),
                    1 => Fault::Delay(rng.u16(20..=120)),
                    2 => Fault::LoseAnswers(rng.u8(1..=4)),
                    3 => Fault::LoseUpdateAnswers(rng.u8(1..=4)),
                    4 | 5 => Fault::Conflicts,
                    6 => Fault::StallUpdates,
                    7 => Fault::Late {
                        nth: rng.u8(0..=5),
                        tx: rng.bool(),
                    },
                    _ => Fault::Outage {
                        lose: rng.u8(0..=3),
                        after_ms: rng.u16(0..=60),
                        down_ms: rng.u16(100..=1500),
                    },
                }
            };
            let fault = match (fault, shape.only_fault) {
                (Fault::None, _) | (_, None) => fault,
                (_, Some(f)) => f,
            };
            let advance = match rng.u32(0..10) {
                0..=3 => 0,
                4..=6 => rng.u64(1..=20),
                7 | 8 => rng.u64(30..=70),
                _ => rng.u64(100..=300),
            };
            if reshard_round == Some(r) {
                let t = rng.usize(0..tenants.len());
                let shards = (layout[t] + rng.u64(1..=3)) % 4 + 1;
                layout[t] = shards;
                rounds.push(Round {
                    fault: Fault::None,
                    advance: rng.u64(61..=120),
                    lanes: vec![vec![Step {
                        op: Op::Reshard {
                            t,
                            shards,
                            caps: caps(&mut rng, shards),
                        },
                        crash_ms: None,
                    }]],
                });
                continue;
            }
            let mut lanes = Vec::new();
            if r == 0 {
                // Every session exists at the start.
                for t in 0..tenants.len() {
                    let lane = (0..sessions)
                        .map(|s| Step {
                            op: Op::PutSession { t, s },
                            crash_ms: None,
                        })
                        .collect();
                    lanes.push(lane);
                }
            } else {
                for _ in 0..rng.usize(1..=shape.max_lanes) {
                    let steps = (0..rng.usize(1..=shape.max_steps))
                        .map(|_| {
                            let op = if rng.u32(0..100) < shape.ttl_pct {
                                ttl_op(&mut rng, tenants.len(), sessions)
                            } else if !conns.is_empty() && rng.u32(0..100) < shape.message_pct {
                                let (t, s, c) = conns[rng.usize(0..conns.len())];
                                Op::Message { t, s, c }
                            } else {
                                op(&mut rng, &layout, sessions, &mut conns, &mut next_c)
                            };
                            let crash_ms =
                                (rng.u32(0..100) < shape.crash_pct).then(|| rng.u16(0..=40));
                            Step { op, crash_ms }
                        })
                        .collect();
                    if shape.ws_lanes {
                        lanes.push(steps);
                    }
                }
                if shape.end_races {
                    // A `$connect` and its session's DELETE, the DELETE a moment later.
                    let t = rng.usize(0..tenants.len());
                    let s = rng.usize(0..sessions);
                    next_c += 1;
                    conns.push((t, s, next_c));
                    let connect = Op::Connect {
                        t,
                        s,
                        c: next_c,
                        twice: false,
                    };
                    for op in [connect, Op::DeleteSession { t, s }] {
                        lanes.push(vec![Step { op, crash_ms: None }]);
                    }
                }
                if reconcile_round == Some(r) {
                    let t = rng.usize(0..tenants.len());
                    // A third of the runs crash, anywhere in their two graces.
                    let mut crash_ms = (rng.u32(0..3) == 0).then(|| rng.u16(0..=3500));
                    if shape.reconcile_sweeps {
                        // The tenant's sessions deleted by TTL as the reconciler starts, their
                        // records delivered while it waits between its read and its repair.
                        crash_ms = None;
                        let deliver = |rng: &mut fastrand::Rng| {
                            let op = Op::Deliver {
                                pick: rng.u32(..),
                                again: false,
                            };
                            vec![Step { op, crash_ms: None }]
                        };
                        lanes = vec![(0..sessions)
                            .map(|s| Step {
                                op: Op::Expire { t, s },
                                crash_ms: None,
                            })
                            .collect()];
                        for _ in 0..3 {
                            lanes.push(deliver(&mut rng));
                        }
                    }
                    if shape.reconcile_connects {
                        // `$connect`s to the reconciled tenant beside it, and no crash.
                        crash_ms = None;
                        lanes = (0..2)
                            .map(|_| {
                                let s = rng.usize(0..sessions);
                                next_c += 1;
                                conns.push((t, s, next_c));
                                let op = Op::Connect {
                                    t,
                                    s,
                                    c: next_c,
                                    twice: false,
                                };
                                vec![Step { op, crash_ms: None }]
                            })
                            .collect();
                    }
                    lanes.push(vec![Step {
                        op: Op::Reconcile { t },
                        crash_ms,
                    }]);
                }
            }
            // Sessions of TTL at most 20 s have expired by the reconciler's round.
            let advance = if shape.reconcile_sweeps && reconcile_round == Some(r) {
                advance.max(30)
            } else {
                advance
            };
            rounds.push(Round {
                fault,
                advance,
                lanes,
            });
        }
        let res = reservations::generate(
            seed,
            shape.reservation_pct,
            n_rounds,
            shape.crash_pct,
            shape.binds,
            shape.rebinds,
            shape.limit_rows,
        )
        .map(|(spec, lanes)| {
            for (round, lanes) in rounds.iter_mut().zip(lanes) {
                round.lanes.extend(lanes);
            }
            spec
        });
        let kv = kv::generate(seed, shape.kv_pct, n_rounds, shape.crash_pct, shape.refunds).map(
            |(spec, lanes)| {
                for (round, lanes) in rounds.iter_mut().zip(lanes) {
                    round.lanes.extend(lanes);
                }
                spec
            },
        );
        // Drawn apart (salted), so the other draws of a seed stay as they were.
        let skew_ms = side_rng(seed, 0x5e3e_c10c_0000_0001, 50).map_or(0, |mut r| {
            let ms = r.i64(1..=MAX_SKEW_MS);
            if r.bool() {
                ms
            } else {
                -ms
            }
        });
        Schedule {
            seed,
            tenants,
            sessions,
            rounds,
            res,
            kv,
            skew_ms,
            open_ms: shape.open_ms,
            reconcile_after_ms: shape.reconcile_after_ms,
            deliver_at_ms: shape.reconcile_sweeps.then_some(2200),
            delete_after_ms: shape.end_races.then_some(60),
        }
    }

    pub fn steps(&self) -> usize {
        self.rounds
            .iter()
            .flat_map(|r| &r.lanes)
            .map(Vec::len)
            .sum()
    }
}

/// The generator of a side's lanes (reservations, kv), salted apart from the WebSocket draws so a
/// seed's WebSocket steps are the same with or without it; `None` for the `100 - pct` percent of
/// schedules without that side.
pub fn side_rng(seed: u64, salt: u64, pct: u32) -> Option<fastrand::Rng> {
    let mut rng = fastrand::Rng::with_seed(seed ^ salt);
    (rng.u32(0..100) < pct).then_some(rng)
}

/// A side's lanes per round: none in round 0 (sessions are created), then 1-2 lanes of 1-3 steps,
/// each drawn by `draw` and crashing as the WebSocket steps do.
pub fn side_lanes(
    rng: &mut fastrand::Rng,
    rounds: usize,
    crash_pct: u32,
    mut draw: impl FnMut(&mut fastrand::Rng) -> Op,
) -> Vec<Vec<Vec<Step>>> {
    let mut lanes_of = vec![Vec::new()];
    for _ in 1..rounds {
        let mut lanes = Vec::new();
        for _ in 0..rng.usize(1..=2) {
            let mut lane = Vec::new();
            for _ in 0..rng.usize(1..=3) {
                let op = draw(rng);
                let crash_ms = (rng.u32(0..100) < crash_pct).then(|| rng.u16(0..=40));
                lane.push(Step { op, crash_ms });
            }
            lanes.push(lane);
        }
        lanes_of.push(lanes);
    }
    lanes_of
}

fn ttl_op(rng: &mut fastrand::Rng, tenants: usize, sessions: usize) -> Op {
    if rng.bool() {
        Op::Expire {
            t: rng.usize(0..tenants),
            s: rng.usize(0..sessions),
        }
    } else {
        Op::Deliver {
            pick: rng.u32(..),
            again: rng.bool(),
        }
    }
}

fn op(
    rng: &mut fastrand::Rng,
    layout: &[u64],
    sessions: usize,
    conns: &mut Vec<(usize, usize, u32)>,
    next_c: &mut u32,
) -> Op {
    let t = rng.usize(0..layout.len());
    let s = rng.usize(0..sessions);
    let mut fresh = |conns: &mut Vec<(usize, usize, u32)>| {
        *next_c += 1;
        conns.push((t, s, *next_c));
        *next_c
    };
    let old = |rng: &mut fastrand::Rng, conns: &[(usize, usize, u32)]| {
        (!conns.is_empty()).then(|| conns[rng.usize(0..conns.len())])
    };
    match rng.u32(0..100) {
        0..=29 => Op::Connect {
            t,
            s,
            c: fresh(conns),
            twice: rng.u32(0..8) == 0,
        },
        30..=34 => Op::DisconnectFirst {
            t,
            s,
            c: fresh(conns),
        },
        35..=52 => match old(rng, conns) {
            Some((t, s, c)) => Op::Leave {
                t,
                s,
                c,
                times: [0, 1, 1, 1, 2][rng.usize(0..5)],
            },
            None => Op::PutSession { t, s },
        },
        53..=64 => match old(rng, conns) {
            Some((t, s, c)) => Op::Message { t, s, c },
            None => Op::PutSession { t, s },
        },
        65..=72 => Op::PutSession { t, s },
        73..=76 => Op::DeleteSession { t, s },
        77..=84 => Op::Expire { t, s },
        85..=95 => Op::Deliver {
            pick: rng.u32(..),
            again: rng.u32(0..4) == 0,
        },
        _ => Op::Limits {
            t,
            caps: caps(rng, layout[t]),
        },
    }
}

impl fmt::Display for Schedule {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        writeln!(
            f,
            "schedule seed={} sessions/tenant={}",
            self.seed, self.sessions
        )?;
        for (i, t) in self.tenants.iter().enumerate() {
            writeln!(f, "  tenant t{i}: {t:?}")?;
        }
        if let Some(res) = &self.res {
            writeln!(f, "  reservations: {res:?}")?;
        }
        if let Some(kv) = &self.kv {
            writeln!(f, "  kv limits: {kv:?}")?;
        }
        writeln!(f, "  skew of the second process: {} ms", self.skew_ms)?;
        for (i, r) in self.rounds.iter().enumerate() {
            writeln!(f, "  round {i}: +{}s fault={:?}", r.advance, r.fault)?;
            for (j, lane) in r.lanes.iter().enumerate() {
                let steps: Vec<String> = lane
                    .iter()
                    .map(|s| match s.crash_ms {
                        Some(ms) => format!("{:?} [crash after {ms} ms]", s.op),
                        None => format!("{:?}", s.op),
                    })
                    .collect();
                writeln!(f, "    lane {j}: {}", steps.join(" ; "))?;
            }
        }
        Ok(())
    }
}
