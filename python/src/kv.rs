//! Key-value GCRA limits from the limits YAML (`shared::kv`): spend, refund, check, batch, leases
//! and the `RateLimitState` record. One `shared::kv::Limiter` per handle and process (its hints are
//! per process, like a Lambda sandbox's).

use std::sync::{Arc, Mutex};
use std::time::Duration;

use pyo3::exceptions::PyValueError;
use pyo3::prelude::*;
use shared::clock::{Clock, SystemClock, Timestamp};
use shared::kv::{item_write_budget, LimitSet, Limiter, Limits};
use shared::state::GcraReader;

use crate::bridge::Json;
use crate::core::Core;
use crate::failure::Failure;
use crate::twin::twin;

/// A limits file loaded and validated (`KvLimiter(yaml)`; bad YAML is a `ValueError` naming the
/// line), with the buckets table it spends from (`None`: `TURNSTILE_BUCKET_TABLE` or the default).
#[pyclass(module = "turnstile._native", frozen)]
#[derive(Clone)]
pub struct KvLimiter {
    limits: Arc<Limits>,
    table: Option<String>,
    /// The limiter of the process that built it (pid): rebuilt in a forked child.
    built: Arc<Mutex<Option<PerProcess>>>,
}

/// The pid a limiter was built in, and the limiter.
type PerProcess = (u32, Arc<Limiter>);

#[pymethods]
impl KvLimiter {
    #[new]
    #[pyo3(signature = (yaml, table=None))]
    fn new(yaml: &str, table: Option<String>) -> PyResult<Self> {
        let set =
            LimitSet::from_yaml(yaml).map_err(|e| PyValueError::new_err(format!("limits: {e}")))?;
        Ok(KvLimiter {
            limits: Arc::new(Limits::new(set)),
            table,
            built: Arc::new(Mutex::new(None)),
        })
    }

    /// Replaces the limits (buckets keep their state); a bad file leaves the old limits in force.
    fn reload(&self, yaml: &str) -> PyResult<()> {
        self.limits
            .reload_yaml(yaml)
            .map_err(|e| PyValueError::new_err(format!("limits: {e}")))
    }

    /// The names the file declares.
    fn names(&self) -> Vec<String> {
        self.limits
            .current()
            .names()
            .iter()
            .map(|n| n.name.clone())
            .collect()
    }
}

impl KvLimiter {
    fn limiter(&self, core: &Core) -> Result<Arc<Limiter>, Failure> {
        let pid = std::process::id();
        let mut slot = self.built.lock().unwrap_or_else(|p| p.into_inner());
        if let Some((owner, l)) = slot.as_ref() {
            if *owner == pid {
                return Ok(l.clone());
            }
        }
        let d = &core.deps;
        let table = self
            .table
            .clone()
            .unwrap_or_else(|| d.tables.buckets.clone());
        let budget = item_write_budget(&d.vars).map_err(shared::Error::from)?;
        let l = Arc::new(
            Limiter::new(d.dynamo.clone(), table, self.limits.clone())
                .with_item_write_budget(budget),
        );
        *slot = Some((pid, l.clone()));
        Ok(l)
    }

    fn table_of(&self, core: &Core) -> String {
        self.table
            .clone()
            .unwrap_or_else(|| core.deps.tables.buckets.clone())
    }
}

fn at(now_ms: Option<i64>) -> Timestamp {
    now_ms.map_or_else(|| SystemClock.now(), Timestamp::from_millis)
}

twin! {
    /// Spends `cost` tokens of `name`'s bucket for `id`: the outcome (`allowed`, `remaining`,
    /// `retryAfter`, ...), allowed or not.
    kv_spend, kv_spend_async, (limiter, name, id, cost=1, now_ms=None),
    (limiter: KvLimiter, name: String, id: String, cost: u64, now_ms: Option<i64>),
    |core| {
        let l = limiter.limiter(&core)?;
        Json::of(&l.spend(&name, &id, cost, at(now_ms)).await?)
    }
}

twin! {
    /// Gives `cost` tokens back, never above the burst.
    kv_refund, kv_refund_async, (limiter, name, id, cost=1, now_ms=None),
    (limiter: KvLimiter, name: String, id: String, cost: u64, now_ms: Option<i64>),
    |core| {
        let l = limiter.limiter(&core)?;
        Json::of(&l.refund(&name, &id, cost, at(now_ms)).await?)
    }
}

twin! {
    /// What a spend of `cost` would decide, without spending.
    kv_check, kv_check_async, (limiter, name, id, cost=0, now_ms=None),
    (limiter: KvLimiter, name: String, id: String, cost: u64, now_ms: Option<i64>),
    |core| {
        let l = limiter.limiter(&core)?;
        Json::of(&l.check(&name, &id, cost, at(now_ms)).await?)
    }
}

twin! {
    /// Spends from several buckets, all or nothing: `spends` is a list of `(name, id, cost)`.
    kv_batch, kv_batch_async, (limiter, spends, now_ms=None),
    (limiter: KvLimiter, spends: Vec<(String, String, u64)>, now_ms: Option<i64>),
    |core| {
        let l = limiter.limiter(&core)?;
        let refs: Vec<(&str, &str, u64)> =
            spends.iter().map(|(n, i, c)| (n.as_str(), i.as_str(), *c)).collect();
        Json::of(&l.spend_batch(&refs, at(now_ms)).await?)
    }
}

twin! {
    /// Holds `estimate` tokens under `lease_id` for `ttl` seconds.
    kv_acquire_lease, kv_acquire_lease_async, (limiter, name, id, lease_id, estimate, ttl=300.0, now_ms=None),
    (limiter: KvLimiter, name: String, id: String, lease_id: String, estimate: u64, ttl: f64, now_ms: Option<i64>),
    |core| {
        let ttl = Duration::try_from_secs_f64(ttl)
            .map_err(|_| Failure::Value(format!("ttl {ttl} must be a non-negative number of seconds")))?;
        let l = limiter.limiter(&core)?;
        Json::of(&l.acquire_lease(&name, &id, &lease_id, estimate, ttl, at(now_ms)).await?)
    }
}

twin! {
    /// Sets the lease's amount to the real cost (the difference is spent or given back).
    kv_adjust_lease, kv_adjust_lease_async, (limiter, name, id, lease_id, amount, now_ms=None),
    (limiter: KvLimiter, name: String, id: String, lease_id: String, amount: u64, now_ms: Option<i64>),
    |core| {
        let l = limiter.limiter(&core)?;
        Json::of(&l.adjust_lease(&name, &id, &lease_id, amount, at(now_ms)).await?)
    }
}

twin! {
    /// Ends the lease keeping its amount spent.
    kv_commit_lease, kv_commit_lease_async, (limiter, name, id, lease_id),
    (limiter: KvLimiter, name: String, id: String, lease_id: String),
    |core| {
        let l = limiter.limiter(&core)?;
        Json::of(&l.commit_lease(&name, &id, &lease_id).await?)
    }
}

twin! {
    /// Ends the lease and gives back what the refill has not already returned.
    kv_release_lease, kv_release_lease_async, (limiter, name, id, lease_id, now_ms=None),
    (limiter: KvLimiter, name: String, id: String, lease_id: String, now_ms: Option<i64>),
    |core| {
        let l = limiter.limiter(&core)?;
        Json::of(&l.release_lease(&name, &id, &lease_id, at(now_ms)).await?)
    }
}

twin! {
    /// Records denials still held in this process on their buckets (call before a process exits).
    kv_flush, kv_flush_async, (limiter, now_ms=None),
    (limiter: KvLimiter, now_ms: Option<i64>),
    |core| {
        let l = limiter.limiter(&core)?;
        Ok::<_, Failure>(l.flush_throttles(at(now_ms)).await?)
    }
}

twin! {
    /// The `RateLimitState` record of a bucket (`Name:id` or `{nameId}:{id}`), read from DynamoDB.
    kv_state, kv_state_async, (limiter, bucket, now_ms=None),
    (limiter: KvLimiter, bucket: String, now_ms: Option<i64>),
    |core| {
        let reader = GcraReader {
            client: core.deps.dynamo.clone(),
            table: limiter.table_of(&core),
            limits: Some(limiter.limits.current()),
        };
        let state = reader.state(&bucket, at(now_ms)).await.map_err(|e| match e {
            shared::state::StateError::Store(e) => Failure::from(e),
            other => Failure::Value(other.to_string()),
        })?;
        Json::of(&state)
    }
}
