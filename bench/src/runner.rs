//! Runs a workload: closed-loop tasks, per-decision latency, calls and write units, and the
//! concurrent accuracy test. How and why latency is measured this way: docs/decisions/0801.

use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::{Arc, Mutex};
use std::time::{Duration, Instant};

use serde::Serialize;

use crate::error::BenchError;
use crate::workload::{BenchCtx, Params, Spec, Workload};

/// Latency summary of one run, in milliseconds.
#[derive(Debug, Clone, Serialize, PartialEq)]
pub struct Latency {
    pub p50_ms: f64,
    pub p90_ms: f64,
    pub p99_ms: f64,
    pub max_ms: f64,
    pub mean_ms: f64,
    /// Decisions that took longer than one second (a starved task shows up here, not in p50).
    pub over_1s: u64,
}

/// Nearest-rank percentile of sorted samples (`q` in 0..=1).
pub fn percentile(sorted: &[Duration], q: f64) -> Duration {
    if sorted.is_empty() {
        return Duration::ZERO;
    }
    let rank = (q * sorted.len() as f64).ceil() as usize;
    sorted[rank.clamp(1, sorted.len()) - 1]
}

pub fn summarize(mut samples: Vec<Duration>) -> Latency {
    samples.sort_unstable();
    let ms = |d: Duration| d.as_secs_f64() * 1000.0;
    let total: Duration = samples.iter().sum();
    Latency {
        p50_ms: ms(percentile(&samples, 0.50)),
        p90_ms: ms(percentile(&samples, 0.90)),
        p99_ms: ms(percentile(&samples, 0.99)),
        max_ms: ms(samples.last().copied().unwrap_or_default()),
        mean_ms: if samples.is_empty() {
            0.0
        } else {
            ms(total) / samples.len() as f64
        },
        over_1s: samples
            .iter()
            .filter(|d| **d > Duration::from_secs(1))
            .count() as u64,
    }
}

/// One JSON line of a throughput run (the schema the Python peer drivers emit too).
#[derive(Debug, Clone, Serialize)]
pub struct ThroughputLine {
    pub kind: &'static str,
    pub implementation: String,
    pub workload: String,
    pub concurrency: usize,
    pub decisions: u64,
    pub admitted: u64,
    pub refused: u64,
    pub errors: u64,
    pub first_error: Option<String>,
    #[serde(flatten)]
    pub latency: Latency,
    pub wall_s: f64,
    pub decisions_per_s: f64,
    pub calls_per_decision: f64,
    pub calls_by_operation: std::collections::BTreeMap<String, u64>,
    pub calls_source: &'static str,
    /// Write units per timed decision (see [`CAPACITY_SOURCE`]).
    pub write_units_per_decision: Option<f64>,
    /// Read units per timed decision.
    pub read_units_per_decision: Option<f64>,
    pub capacity_source: &'static str,
    pub warmup_decisions: u64,
}

/// How the write and read units of our workloads are obtained (decision 0801).
pub const CAPACITY_SOURCE: &str = "shared::dynamo::CallCounter: DynamoDB's ConsumedCapacity \
     (ReturnConsumedCapacity=TOTAL) for answered single-item and batch calls; shared::capacity's \
     rules for transactions and writes refused on their condition";

/// One JSON line of the concurrent accuracy test.
#[derive(Debug, Clone, Serialize)]
pub struct AccuracyLine {
    pub kind: &'static str,
    pub implementation: String,
    pub workload: String,
    pub limit: u64,
    pub workers: usize,
    pub attempts_per_worker: u64,
    pub attempts: u64,
    pub admitted: u64,
    pub allowed: u64,
    pub over_admission: i64,
    pub errors: u64,
    pub first_error: Option<String>,
    pub wall_s: f64,
}

#[derive(Default)]
pub(crate) struct Tally {
    pub(crate) samples: Vec<Duration>,
    pub(crate) admitted: u64,
    pub(crate) refused: u64,
    pub(crate) errors: u64,
    pub(crate) first_error: Option<String>,
}

/// Runs `decisions` decisions from `concurrency` tasks, each taking the next decision number from a
/// shared counter until the budget is spent (closed loop: a task sends its next request when the
/// previous one returns).
pub(crate) async fn drive(
    workload: Arc<dyn Workload>,
    concurrency: usize,
    decisions: u64,
    seq_base: u64,
) -> (Tally, Duration) {
    let next = Arc::new(AtomicU64::new(0));
    let tally = Arc::new(Mutex::new(Tally::default()));
    let started = Instant::now();
    let mut tasks = Vec::with_capacity(concurrency);
    for worker in 0..concurrency {
        let (workload, next, tally) = (workload.clone(), next.clone(), tally.clone());
        tasks.push(tokio::spawn(async move {
            let mut local = Tally::default();
            loop {
                let seq = next.fetch_add(1, Ordering::Relaxed);
                if seq >= decisions {
                    break;
                }
                let t0 = Instant::now();
                let out = workload.decide(worker, seq_base + seq).await;
                local.samples.push(t0.elapsed());
                match out {
                    Ok(d) => {
                        if d.admitted {
                            local.admitted += 1;
                        } else {
                            local.refused += 1;
                        }
                    }
                    Err(e) => {
                        local.errors += 1;
                        local.first_error.get_or_insert_with(|| e.to_string());
                    }
                }
            }
            if let Ok(mut t) = tally.lock() {
                t.samples.append(&mut local.samples);
                t.admitted += local.admitted;
                t.refused += local.refused;
                t.errors += local.errors;
                if t.first_error.is_none() {
                    t.first_error = local.first_error;
                }
            }
        }));
    }
    for t in tasks {
        // A task only ends early if it panicked, which the harness never does on outside data.
        let _ = t.await;
    }
    let wall = started.elapsed();
    let tally = Arc::try_unwrap(tally)
        .ok()
        .and_then(|m| m.into_inner().ok())
        .unwrap_or_default();
    (tally, wall)
}

/// A throughput run of one workload at one concurrency: a fresh bucket whose limit is above the
/// budget (every decision is an admission), `warmup` untimed decisions, then `decisions` timed ones.
pub async fn throughput(
    ctx: &BenchCtx,
    spec: &Spec,
    build: crate::workload::Factory,
    concurrency: usize,
    decisions: u64,
    warmup: u64,
) -> Result<ThroughputLine, BenchError> {
    let run = format!("c{concurrency}");
    let params = Params::fresh(spec, &run, (decisions + warmup) * 10, false);
    let workload = build(ctx, &params).await?;
    let (warm, _) = drive(workload.clone(), concurrency, warmup, 0).await;
    if let Some(e) = warm.first_error {
        return Err(BenchError::Other(format!(
            "{} warm-up at concurrency {concurrency}: {e}",
            spec.id
        )));
    }
    ctx.counter.reset();
    let (t, wall) = drive(workload, concurrency, decisions, warmup).await;
    let calls = ctx.counter.total();
    let units = ctx.counter.units();
    let n = t.samples.len() as u64;
    let per = |x: f64| (n > 0).then(|| x / n as f64);
    Ok(ThroughputLine {
        kind: "throughput",
        implementation: "turnstile".into(),
        workload: spec.id.into(),
        concurrency,
        decisions: n,
        admitted: t.admitted,
        refused: t.refused,
        errors: t.errors,
        first_error: t.first_error,
        latency: summarize(t.samples),
        wall_s: wall.as_secs_f64(),
        decisions_per_s: if wall.is_zero() {
            0.0
        } else {
            n as f64 / wall.as_secs_f64()
        },
        calls_per_decision: if n == 0 { 0.0 } else { calls as f64 / n as f64 },
        calls_by_operation: ctx.counter.by_operation(),
        calls_source: "shared::dynamo::CallCounter (SDK interceptor, one per HTTP attempt)",
        write_units_per_decision: per(units.write),
        read_units_per_decision: per(units.read),
        capacity_source: CAPACITY_SOURCE,
        warmup_decisions: warmup,
    })
}

/// The concurrent accuracy test: a fresh bucket with `limit` in one window, `workers` tasks making
/// `attempts` decisions each, all at once. Over-admission = admitted − allowed (must be 0).
pub async fn accuracy(
    ctx: &BenchCtx,
    spec: &Spec,
    build: crate::workload::Factory,
    limit: u64,
    workers: usize,
    attempts: u64,
) -> Result<AccuracyLine, BenchError> {
    let params = Params::fresh(spec, "accuracy", limit, true);
    let workload = build(ctx, &params).await?;
    let total = attempts * workers as u64;
    let (t, wall) = drive(workload, workers, total, 0).await;
    // Refill during the test: limit/window per second (well under one token for a 1-hour window).
    let refill = (limit as f64 * wall.as_secs_f64() / params.window_secs as f64).floor() as u64;
    let allowed = (limit + refill).min(total);
    Ok(AccuracyLine {
        kind: "accuracy",
        implementation: "turnstile".into(),
        workload: spec.id.into(),
        limit,
        workers,
        attempts_per_worker: attempts,
        attempts: total,
        admitted: t.admitted,
        allowed,
        over_admission: t.admitted as i64 - allowed as i64,
        errors: t.errors,
        first_error: t.first_error,
        wall_s: wall.as_secs_f64(),
    })
}

pub fn short_id() -> String {
    uuid::Uuid::new_v4().simple().to_string()[..8].to_string()
}

#[cfg(test)]
mod tests {
    use super::*;
    use serde_json::Value;
    use shared::capacity::{self, Consistency, Units};

    /// The units `shared::capacity` gives a request body of `operation` (sizes an `Update`, `Delete`
    /// or `ConditionCheck` finds on the server are not in the request: one item under 1 KB).
    fn units_of(operation: &str, req: &Value) -> Units {
        let consistency = |v: &Value| {
            if v["ConsistentRead"].as_bool() == Some(true) {
                Consistency::Strong
            } else {
                Consistency::Eventual
            }
        };
        match operation {
            "PutItem" => Units::write(capacity::write_units(capacity::item_size(&req["Item"]))),
            "UpdateItem" | "DeleteItem" => Units::write(capacity::write_units(0)),
            "TransactWriteItems" => capacity::transact_write(req),
            "TransactGetItems" => capacity::transact_get(req, None),
            "GetItem" | "Query" | "Scan" => Units::read(capacity::read_units(0, consistency(req))),
            "BatchGetItem" => Units::read(
                req["RequestItems"]
                    .as_object()
                    .map(|tables| {
                        tables
                            .values()
                            .map(|spec| {
                                let keys = spec["Keys"].as_array().map_or(0, Vec::len);
                                keys as f64 * capacity::read_units(0, consistency(spec))
                            })
                            .sum()
                    })
                    .unwrap_or(0.0),
            ),
            other => panic!("no case for {other}"),
        }
    }

    /// The Rust meter's calculator and the peers' (bench/peers/capacity.py, run by every bench)
    /// agree on the same request bodies, item sizes included.
    #[test]
    fn the_rust_calculator_agrees_with_the_shared_capacity_cases() {
        let doc: Value = serde_json::from_str(include_str!("../capacity-cases.json")).unwrap();
        let cases = doc["cases"].as_array().unwrap();
        assert!(cases.len() >= 10);
        for c in cases {
            let name = c["name"].as_str().unwrap();
            let op = c["operation"].as_str().unwrap();
            let req = &c["request"];
            let got = units_of(op, req);
            let want = Units {
                write: c["write_units"].as_f64().unwrap(),
                read: c["read_units"].as_f64().unwrap(),
            };
            assert_eq!(got, want, "{name}");
            if let Some(size) = c["item_size"].as_u64() {
                let item = if req["Item"].is_object() {
                    &req["Item"]
                } else {
                    &req["Key"]
                };
                assert_eq!(capacity::item_size(item), size, "{name}: item size");
            }
        }
    }

    #[test]
    fn nearest_rank_percentiles() {
        let s: Vec<Duration> = (1..=100).map(Duration::from_millis).collect();
        assert_eq!(percentile(&s, 0.50), Duration::from_millis(50));
        assert_eq!(percentile(&s, 0.99), Duration::from_millis(99));
        assert_eq!(percentile(&s, 1.0), Duration::from_millis(100));
        assert_eq!(percentile(&[], 0.5), Duration::ZERO);
        let one = [Duration::from_millis(7)];
        assert_eq!(percentile(&one, 0.01), Duration::from_millis(7));
    }

    #[test]
    fn summary_of_known_samples() {
        let s: Vec<Duration> = (1..=10).rev().map(Duration::from_millis).collect();
        let l = summarize(s);
        assert_eq!(l.p50_ms, 5.0);
        assert_eq!(l.max_ms, 10.0);
        assert!((l.mean_ms - 5.5).abs() < 1e-9);
    }
}
