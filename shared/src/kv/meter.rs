//! The kv limiter's decisions as metrics (`Decisions` with `Path` kv, `Refusals` by limit name).

use std::time::Instant;

use super::limiter::{KvError, Limiter, Outcome};
use crate::clock::Timestamp;
use crate::telemetry::catalogue::{self, Path};

impl Limiter {
    /// Spends `cost` (≥ 1) tokens of `name`'s bucket for `id`, and meters the decision. Calls and
    /// cost: those of [`Limiter::spend_unmetered`]. Bad input (an unknown name, a bad id, cost 0)
    /// is not a decision and is not metered.
    pub async fn spend(
        &self,
        name: &str,
        id: &str,
        cost: u64,
        now: Timestamp,
    ) -> Result<Outcome, KvError> {
        let started = Instant::now();
        let out = self.spend_unmetered(name, id, cost, now).await;
        let (outcome, limit) = match &out {
            Ok(o) if o.decision.allowed => (catalogue::Outcome::Admitted, None),
            Ok(_) => (catalogue::Outcome::Refused, Some(name)),
            Err(KvError::Key(_) | KvError::ZeroCost) => return out,
            Err(_) => (catalogue::Outcome::Error, None),
        };
        catalogue::decision(Path::Kv, outcome, limit, None, started.elapsed());
        out
    }
}
