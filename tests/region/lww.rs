//! The negative test: one counter for all regions in a last-writer-wins global table (DynamoDB's
//! usual mode). Each region spends on its own replica with today's conditional write, whose
//! condition sees only that replica; replication later copies the last written item over the
//! others. The oracle must find the regions admitting more than `L` in one window.

use std::sync::Arc;
use std::time::Duration;

use aws_sdk_dynamodb::types::AttributeValue;
use shared::clock::{Clock, ManualClock, Timestamp};
use shared::kv::{LimitSet, Limiter, Limits};
use shared::table::TableKind;
use turnstile_tests::TestEnv;

use super::oracle;

const PERIOD: Duration = Duration::from_secs(6);
const TOTAL: u64 = 12;

/// Copies the item `key` of `from`'s replica over every other replica (last writer wins).
async fn replicate(replicas: &[TestEnv], from: usize, key: &str) {
    let src = &replicas[from];
    let got = src
        .deps
        .dynamo
        .get_item()
        .table_name(&src.deps.tables.buckets)
        .key("bucket", AttributeValue::S(key.into()))
        .consistent_read(true)
        .send()
        .await
        .expect("read replica");
    let Some(item) = got.item else { return };
    for (i, dst) in replicas.iter().enumerate() {
        if i != from {
            dst.deps
                .dynamo
                .put_item()
                .table_name(&dst.deps.tables.buckets)
                .set_item(Some(item.clone()))
                .send()
                .await
                .expect("replicate");
        }
    }
}

/// Three regions, one limit of 12 per 6 s in a last-writer-wins table, replication one second
/// behind: returns how many were admitted, how many the limit allows over the run (one burst
/// plus the rate), and what the oracle says.
pub async fn run(seed: u64) -> (usize, f64, Option<String>) {
    let mut rng = fastrand::Rng::with_seed(seed);
    let yaml = format!(
        "names:\n  Global: {{ id: 1, format: string }}\ndefaults:\n  Global: {{ burst: {TOTAL}, \
         count: {TOTAL}, period: 6s }}\n"
    );
    let limits = Arc::new(Limits::new(LimitSet::from_yaml(&yaml).expect("limits")));
    let mut replicas = Vec::new();
    for _ in 0..3 {
        replicas.push(TestEnv::new(&[TableKind::Buckets]).await);
    }
    let key = limits
        .current()
        .bucket("Global", "t")
        .expect("bucket")
        .key();
    let limiters: Vec<Limiter> = replicas
        .iter()
        .map(|e| {
            Limiter::new(
                e.deps.dynamo.clone(),
                &e.deps.tables.buckets,
                limits.clone(),
            )
        })
        .collect();
    let real = ManualClock::starting_now();
    let start = real.now();
    let mut admitted: Vec<Timestamp> = Vec::new();
    let mut last_writer = None;
    let mut next_sync = real.now().plus(Duration::from_secs(1));
    for _ in 0..400 {
        real.advance(Duration::from_millis(rng.u64(10..100)));
        let r = rng.usize(0..3);
        let now = real.now();
        let out = limiters[r]
            .spend("Global", "t", 1, now)
            .await
            .expect("spend");
        if out.decision.allowed {
            admitted.push(now);
            last_writer = Some(r);
        }
        if now >= next_sync {
            if let Some(w) = last_writer.take() {
                replicate(&replicas, w, &key).await;
            }
            for l in &limiters {
                l.forget_hints();
            }
            next_sync = now.plus(Duration::from_secs(1));
        }
    }
    let verdict = oracle::over_window(&admitted, TOTAL, PERIOD);
    let allowed =
        TOTAL as f64 * (1.0 + real.now().since(start).as_secs_f64() / PERIOD.as_secs_f64());
    (admitted.len(), allowed, verdict)
}
