//! The kv limiter's decisions as metrics (`Decisions` with `Path` kv, `Refusals` by limit name),
//! and shadow limits: a denial by a limit declared `shadow: true` is logged, metered
//! `shadow_refused`, and returned allowed (decision 1000). A denial writes nothing in either mode,
//! so a shadow limit's bucket holds exactly what an enforced one would.

use std::time::Instant;

use super::limiter::{KvError, Limiter, Outcome};
use crate::clock::Timestamp;
use crate::telemetry::catalogue::{self, Path};

impl Limiter {
    /// Spends `cost` (≥ 1) tokens of `name`'s bucket for `id`, and meters the decision; a shadow
    /// limit's denial comes back allowed, with `shadow_denied`. Calls and cost: those of
    /// [`Limiter::spend_at`]. Bad input (an unknown name, a bad id, cost 0) is not a
    /// decision and is not metered.
    pub async fn spend(
        &self,
        name: &str,
        id: &str,
        cost: u64,
        now: Timestamp,
    ) -> Result<Outcome, KvError> {
        let started = Instant::now();
        let mut out = match self.locate_cost(name, id, cost) {
            Ok(at) => self.spend_at(&at, cost, now).await,
            Err(e) => Err(e),
        };
        let shadow = self.limits().current().name(name).is_some_and(|d| d.shadow);
        let (outcome, limit) = match &mut out {
            Ok(o) if o.decision.allowed => (catalogue::Outcome::Admitted, None),
            Ok(o) if shadow => {
                tracing::info!(limit = %o.limit, "shadow: would deny");
                o.decision.allowed = true;
                o.shadow_denied = true;
                (catalogue::Outcome::ShadowRefused, Some(name))
            }
            Ok(_) => (catalogue::Outcome::Refused, Some(name)),
            Err(KvError::Key(_) | KvError::ZeroCost) => return out,
            Err(_) => (catalogue::Outcome::Error, None),
        };
        catalogue::decision(Path::Kv, outcome, limit, None, started.elapsed());
        out
    }
}
