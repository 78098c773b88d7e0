//! What a schedule's reservation lanes draw: the coordinates (capacities, limit rows, rows
//! written before the ledger) and the steps. The limit rows, legacy rows and limit changes come
//! from a generator of their own ([`ROWS_SALT`]): a schedule drawn without them keeps every draw
//! it had, and one drawn with them keeps its lanes but for the operator's limit changes and the
//! size of bursts on coordinates of three or four ledger shards.

use crate::schedule::{side_lanes, side_rng, Op, Step};

/// Salts the reservation draws apart from the WebSocket ones: a seed's WebSocket steps are the
/// same whether or not its schedule also has reservations (the mutation seeds stay valid).
const SALT: u64 = 0x7e5e_27a7_0101_0102;

/// Salts the limit rows, legacy rows and limit changes apart from the other reservation draws.
const ROWS_SALT: u64 = 0x11e1_7a0e_0101_0103;

/// The share of reservation schedules (percent) with limit rows, legacy rows or a coordinate of
/// three or four ledger shards; the others draw as before these existed.
const ROWS_PCT: u32 = 60;

/// The largest capacity drawn (four ledger shards of 16).
pub const MAX_DRAWN: u64 = 64;

/// What a schedule with reservations draws: the coordinates and the resources.
#[derive(Debug, Clone, PartialEq)]
pub struct ResSpec {
    /// Each coordinate's capacity at the start: 1-4, so the limit is reached, 17-24, so two
    /// ledger shards exist, or 33-64, so three or four do.
    pub capacities: Vec<u64>,
    /// Whether a coordinate's capacity is a limit row (loaded as the schedule's service, as an
    /// operator does) rather than the reservations' default limit, which its clients then pass
    /// far above any capacity drawn.
    pub limit_rows: Vec<bool>,
    /// Each coordinate's rows written before its ledger (rate-limiter-py's layout), present at
    /// the start.
    pub legacy: Vec<Vec<Legacy>>,
    /// Resources (EMR clusters) tokens are bound to.
    pub resources: u32,
}

/// A row rate-limiter-py wrote: a reservation, or a token bound to a resource.
#[derive(Debug, Clone, Copy, PartialEq)]
pub struct Legacy {
    /// How long after the schedule's start it expires.
    pub ttl_secs: u64,
    /// The resource it is bound to (a token).
    pub bound: Option<u32>,
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
    /// The operator loads the schedule's limits file with coordinate `coord`'s limit set to
    /// `limit` (`turnstile limits load`); one whose command died runs it again.
    SetLimit { coord: usize, limit: u64 },
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
    hunt_rows: bool,
) -> Option<(ResSpec, Vec<Vec<Vec<Step>>>)> {
    let mut rng = side_rng(seed, SALT, pct)?;
    if rebinds {
        return Some(rebind_heavy(&mut rng, rounds, crash_pct));
    }
    if binds {
        return Some(bind_heavy(&mut rng, rounds, crash_pct));
    }
    let mut capacities = (0..rng.usize(1..=2))
        .map(|_| {
            if rng.u32(0..10) < 6 {
                rng.u64(1..=4)
            } else {
                rng.u64(17..=24)
            }
        })
        .collect::<Vec<_>>();
    let resources = rng.u32(2..=4);
    let mut rows = fastrand::Rng::with_seed(seed ^ ROWS_SALT);
    let extended = rows.u32(0..100) < ROWS_PCT || hunt_rows;
    let (limit_rows, legacy) = if extended {
        draw_rows(&mut rows, &mut capacities, resources, hunt_rows)
    } else {
        (
            vec![false; capacities.len()],
            vec![Vec::new(); capacities.len()],
        )
    };
    // A burst on three or four shards is three times as large, so that they fill too.
    let bursts: Vec<u32> = capacities
        .iter()
        .map(|c| if *c > 32 { 3 } else { 1 })
        .collect();
    let mut next = 0u32;
    let mut lanes = side_lanes(&mut rng, rounds, crash_pct, |rng| {
        Op::Res(draw(rng, &bursts, resources, &mut next))
    });
    if extended {
        limit_changes(
            &mut rows,
            &mut lanes,
            (&capacities, &limit_rows),
            crash_pct,
            hunt_rows,
        );
    }
    Some((
        ResSpec {
            capacities,
            limit_rows,
            legacy,
            resources,
        },
        lanes,
    ))
}

/// Per coordinate: one in three gets a capacity of three or four ledger shards, about two in
/// three a limit row, and two in five rows written before the ledger (at most its capacity, a
/// quarter of them tokens bound to a resource: rate-limiter-py's 8 hours). `hunt`: every one a
/// limit row and legacy rows.
fn draw_rows(
    rows: &mut fastrand::Rng,
    capacities: &mut [u64],
    resources: u32,
    hunt: bool,
) -> (Vec<bool>, Vec<Vec<Legacy>>) {
    let mut limit_rows = Vec::new();
    let mut legacy = Vec::new();
    for cap in capacities.iter_mut() {
        if rows.u32(0..3) == 0 {
            *cap = rows.u64(33..=MAX_DRAWN);
        }
        limit_rows.push(rows.u32(0..100) < 65 || hunt);
        let n = if rows.u32(0..100) < 40 || hunt {
            rows.u64(1..=(*cap).min(20))
        } else {
            0
        };
        legacy.push(
            (0..n)
                .map(|_| {
                    let bound = (rows.u32(0..4) == 0).then(|| rows.u32(0..resources));
                    Legacy {
                        ttl_secs: if bound.is_some() {
                            8 * 3600
                        } else {
                            rows.u64(10..=300)
                        },
                        bound,
                    }
                })
                .collect(),
        );
    }
    (limit_rows, legacy)
}

/// The operator's limit changes: in a round after the first, each coordinate with a limit row
/// has its limit lowered (below what may be held), raised (up to twice, across shard counts) or
/// set back, one in four rounds, as a lane of its own beside the round's reservations. `hunt`:
/// lowered only, in half the rounds.
fn limit_changes(
    rows: &mut fastrand::Rng,
    lanes: &mut [Vec<Vec<Step>>],
    (capacities, limit_rows): (&[u64], &[bool]),
    crash_pct: u32,
    hunt: bool,
) {
    let mut now: Vec<u64> = capacities.to_vec();
    let pct = if hunt { 50 } else { 25 };
    for round in lanes.iter_mut().skip(1) {
        for (coord, row) in limit_rows.iter().enumerate() {
            if !*row || rows.u32(0..100) >= pct {
                continue;
            }
            let cur = now[coord];
            let how = if hunt { 0 } else { rows.u32(0..3) };
            let limit = match how {
                0 if cur > 1 => rows.u64(1..cur),
                1 if cur < MAX_DRAWN => rows.u64(cur + 1..=(cur * 2).min(MAX_DRAWN)),
                _ => capacities[coord],
            };
            now[coord] = limit;
            let crash_ms = (rows.u32(0..100) < crash_pct).then(|| rows.u16(0..=40));
            round.push(vec![Step {
                op: Op::Res(ResOp::SetLimit { coord, limit }),
                crash_ms,
            }]);
        }
    }
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
            limit_rows: vec![false],
            legacy: vec![Vec::new()],
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
            limit_rows: vec![false],
            legacy: vec![Vec::new()],
            resources: 1,
        },
        lanes,
    )
}

/// One step of the default shape; a burst on coordinate `c` is `bursts[c]` times as large.
fn draw(rng: &mut fastrand::Rng, bursts: &[u32], resources: u32, next: &mut u32) -> ResOp {
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
            let coord = rng.usize(0..bursts.len());
            let count = count * bursts[coord];
            *next += count;
            ResOp::Reserve {
                coord,
                r: drawn,
                count,
                process,
            }
        }
    }
}
