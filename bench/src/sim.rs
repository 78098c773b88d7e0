//! Simulation mode (decision 1500): DynamoDB's per-item write ceiling in front of
//! DynamoDB Local, and one logical GCRA limit sharded past it.
//!
//! The fault proxy (`turnstile-faultproxy`) throttles any item past `W` writes per second with
//! DynamoDB's own `ThrottlingException`, as a hot partition would. An open-loop driver offers
//! `offered` decisions per second (real time) to a `shared::kv::Limiter` whose limit is `rate`/s
//! (burst = `rate`) over `shards` items; the client does not retry throttles (the limiter moves to
//! another shard instead). Each run reports what was admitted, the single-bucket ideal on the very
//! same arrival instants (an in-memory GCRA: what a limiter without a ceiling would admit), the
//! over-admission against it (must be 0), and the multiple of one item's ceiling sustained.

use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::{Arc, Mutex};
use std::time::{Duration, Instant};

use aws_sdk_dynamodb::config::retry::RetryConfig;
use aws_sdk_dynamodb::Client;
use serde::Serialize;
use shared::clock::{Clock, SystemClock, Timestamp};
use shared::dynamo::{local_client, CallCounter};
use shared::gcra::{self, Rate};
use shared::kv::{LimitSet, Limiter, Limits};
use turnstile_faultproxy::{FaultProxy, Policy, ThrottleError, ThrottleMode};

use crate::error::BenchError;

/// One simulated run.
#[derive(Debug, Clone, Copy)]
pub struct SimConfig {
    /// Writes per second one item takes before the proxy throttles it.
    pub per_item: u32,
    /// The logical limit: `rate` per second, burst `rate`.
    pub rate: u64,
    pub shards: u32,
    /// Decisions offered per second, open loop.
    pub offered: u64,
    pub seconds: f64,
    pub workers: usize,
    pub seed: u64,
}

/// The JSON line of one run (`kind: "sim"`).
#[derive(Debug, Clone, Serialize)]
pub struct SimLine {
    pub kind: &'static str,
    pub shards: u32,
    pub per_item_ceiling: u32,
    pub limit_per_sec: u64,
    pub offered_per_sec: u64,
    pub seconds: f64,
    pub offered: u64,
    pub admitted: u64,
    /// Refused by the limiter (both shards tried refused, or an unsharded bucket empty).
    pub refused: u64,
    /// Failed with DynamoDB's throttling error (every shard tried was throttled).
    pub throttled: u64,
    /// What one GCRA bucket with the same rate, and no write ceiling, admits on the same arrivals.
    pub ideal_admitted: u64,
    /// `max(0, admitted - ideal_admitted)`: must be 0.
    pub over_admission: u64,
    pub admitted_per_sec: f64,
    /// `admitted_per_sec / per_item_ceiling`.
    pub ceiling_multiple: f64,
    /// `(ideal - admitted) / offered`, in percent (negative never: see `over_admission`).
    pub extra_refusal_pct: f64,
    /// Writes the proxy refused with a throttling answer.
    pub writes_throttled: u64,
    pub calls_per_decision: f64,
    pub write_units_per_decision: f64,
}

const NAME: &str = "Sim";

fn limits(rate: u64, shards: u32) -> String {
    format!(
        "names:\n  {NAME}: {{ id: 1, format: string }}\n\
         defaults:\n  {NAME}: {{ burst: {rate}, count: {rate}, period: 1s, shards: {shards} }}\n"
    )
}

fn err(context: &str) -> impl Fn(String) -> BenchError + '_ {
    move |e| BenchError::Other(format!("sim: {context}: {e}"))
}

/// Runs one configuration against DynamoDB Local at `endpoint` (the table is created there
/// directly; the limiter's client goes through the proxy).
pub async fn run(endpoint: &str, cfg: SimConfig) -> Result<SimLine, BenchError> {
    let table = format!("sim-{}-buckets", uuid::Uuid::new_v4().simple());
    let direct = local_client(endpoint, None);
    shared::catalog::ensure(&direct, &shared::kv::table(&table)).await?;
    let proxy = FaultProxy::start(endpoint)
        .await
        .map_err(|e| err("starting the fault proxy")(e.to_string()))?;
    proxy.set_policy(Policy::throttle(
        ThrottleError::Throttling,
        ThrottleMode::PerItem {
            writes_per_second: cfg.per_item,
        },
    ));
    let counter = CallCounter::new();
    let through = local_client(&proxy.url(), Some(&counter));
    // No SDK retry of a throttle: the limiter tries another shard, which is the point.
    let client = Client::from_conf(
        through
            .config()
            .to_builder()
            .retry_config(RetryConfig::disabled())
            .build(),
    );
    let set = LimitSet::from_yaml(&limits(cfg.rate, cfg.shards))
        .map_err(|e| err("limits")(e.to_string()))?;
    let limiter = Arc::new(
        Limiter::new(client, table.clone(), Arc::new(Limits::new(set))).with_shard_seed(cfg.seed),
    );

    let total = (cfg.offered as f64 * cfg.seconds).round() as u64;
    let seq = Arc::new(AtomicU64::new(0));
    let log: Arc<Mutex<Vec<(Timestamp, Outcome)>>> = Arc::new(Mutex::new(Vec::new()));
    let start = Instant::now();
    let gap = Duration::from_secs_f64(1.0 / cfg.offered.max(1) as f64);
    let mut tasks = Vec::new();
    for _ in 0..cfg.workers.max(1) {
        let (limiter, seq, log) = (limiter.clone(), seq.clone(), log.clone());
        tasks.push(tokio::spawn(async move {
            loop {
                let i = seq.fetch_add(1, Ordering::Relaxed);
                if i >= total {
                    return;
                }
                tokio::time::sleep_until((start + gap * i as u32).into()).await;
                let now = SystemClock.now();
                let outcome = match limiter.spend(NAME, "hot", 1, now).await {
                    Ok(o) if o.decision.allowed => Outcome::Admitted,
                    Ok(_) => Outcome::Refused,
                    Err(e) if is_throttle(&e.to_string()) => Outcome::Throttled,
                    Err(e) => Outcome::Failed(e.to_string()),
                };
                if let Ok(mut l) = log.lock() {
                    l.push((now, outcome));
                }
            }
        }));
    }
    for t in tasks {
        t.await.map_err(|e| err("driver task")(e.to_string()))?;
    }
    let elapsed = start.elapsed().as_secs_f64();
    let mut log = std::mem::take(&mut *log.lock().map_err(|e| err("log")(e.to_string()))?);
    if let Some((_, Outcome::Failed(e))) = log.iter().find(|(_, o)| matches!(o, Outcome::Failed(_)))
    {
        return Err(err("a spend failed")(e.clone()));
    }
    log.sort_by_key(|(t, _)| *t);
    let ideal = ideal_admissions(cfg.rate, log.iter().map(|(t, _)| *t))?;
    let count = |want: fn(&Outcome) -> bool| log.iter().filter(|(_, o)| want(o)).count() as u64;
    let admitted = count(|o| matches!(o, Outcome::Admitted));
    let offered = log.len() as u64;
    let units = counter.units();
    Ok(SimLine {
        kind: "sim",
        shards: cfg.shards,
        per_item_ceiling: cfg.per_item,
        limit_per_sec: cfg.rate,
        offered_per_sec: cfg.offered,
        seconds: (elapsed * 100.0).round() / 100.0,
        offered,
        admitted,
        refused: count(|o| matches!(o, Outcome::Refused)),
        throttled: count(|o| matches!(o, Outcome::Throttled)),
        ideal_admitted: ideal,
        over_admission: admitted.saturating_sub(ideal),
        admitted_per_sec: admitted as f64 / elapsed,
        ceiling_multiple: admitted as f64 / elapsed / f64::from(cfg.per_item.max(1)),
        extra_refusal_pct: (ideal as f64 - admitted as f64) / offered.max(1) as f64 * 100.0,
        writes_throttled: proxy.stats().throttled,
        calls_per_decision: counter.total() as f64 / offered.max(1) as f64,
        write_units_per_decision: units.write / offered.max(1) as f64,
    })
}

/// DynamoDB's throttling answers, as the limiter's error reports them.
fn is_throttle(message: &str) -> bool {
    message.contains("ThrottlingException") || message.contains("ProvisionedThroughputExceeded")
}

#[derive(Debug, Clone)]
enum Outcome {
    Admitted,
    Refused,
    Throttled,
    Failed(String),
}

/// What one GCRA bucket of `rate`/s (burst `rate`) admits on these arrival instants, in order.
fn ideal_admissions(
    rate: u64,
    arrivals: impl Iterator<Item = Timestamp>,
) -> Result<u64, BenchError> {
    let r =
        Rate::new(rate, rate, Duration::from_secs(1)).map_err(|e| err("rate")(e.to_string()))?;
    let (mut tat, mut admitted) = (None, 0);
    for now in arrivals {
        let d = gcra::spend(&r, tat, now, 1).map_err(|e| err("ideal")(e.to_string()))?;
        if d.allowed {
            tat = Some(d.new_tat);
            admitted += 1;
        }
    }
    Ok(admitted)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn the_ideal_admits_the_burst_then_the_rate() {
        let t0 = Timestamp::from_millis(1_000_000);
        // 10/s: 30 arrivals at one instant → 10; then one every 50 ms for 1 s → 10 more.
        let same = std::iter::repeat_n(t0, 30);
        let later = (1..=20).map(|i| t0.plus(Duration::from_millis(50 * i)));
        assert_eq!(ideal_admissions(10, same.chain(later)).unwrap(), 20);
    }

    #[test]
    fn the_generated_limits_file_is_valid() {
        let set = LimitSet::from_yaml(&limits(240, 32)).unwrap();
        assert_eq!(set.default_rate(NAME).unwrap().count, 240);
    }
}
