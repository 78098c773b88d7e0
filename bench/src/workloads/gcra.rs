//! Key-value GCRA limits: `shared::kv::Limiter::spend` of cost 1 on one bucket of the buckets table,
//! under a limits file declaring one name (`BenchSpend`, string ids) whose default is
//! `params.limit` per `params.window_secs` with a burst of the same size.
//!
//! DynamoDB calls per decision (the limiter's documented budget): **1** `UpdateItem` warm, admitted
//! or denied; ≤ 2 cold (a wrong guess of the idle/draining case, spent in the warm-up). Concurrent
//! spends do not race: the draining write is `tat = tat + inc` under `tat <= admitLimit`, which
//! DynamoDB re-evaluates against whatever TAT the previous writer left.

use std::sync::Arc;

use futures::future::BoxFuture;
use shared::clock::SharedClock;
use shared::kv::{LimitSet, Limiter, Limits};
use shared::table::TableKind;

use crate::error::BenchError;
use crate::workload::{BenchCtx, Decision, Params, Workload};

pub(crate) const NAME: &str = "BenchSpend";

pub struct GcraSpend {
    limiter: Limiter,
    clock: SharedClock,
    id: String,
}

pub fn limits_yaml(limit: u64, window_secs: u64) -> String {
    format!(
        "names:\n  {NAME}: {{ id: 1, format: string }}\n\
         defaults:\n  {NAME}: {{ burst: {limit}, count: {limit}, period: {window_secs}s }}\n"
    )
}

pub async fn build(ctx: &BenchCtx, p: &Params) -> Result<Arc<dyn Workload>, BenchError> {
    super::ensure_tables(ctx, &[TableKind::Buckets]).await?;
    let set = LimitSet::from_yaml(&limits_yaml(p.limit, p.window_secs))
        .map_err(|e| BenchError::Other(e.to_string()))?;
    let limiter = Limiter::new(
        ctx.client.clone(),
        ctx.tables.buckets.clone(),
        Arc::new(Limits::new(set)),
    );
    Ok(Arc::new(GcraSpend {
        limiter,
        clock: shared::clock::system(),
        id: p.key.clone(),
    }))
}

impl Workload for GcraSpend {
    fn decide(&self, _worker: usize, _seq: u64) -> BoxFuture<'_, Result<Decision, BenchError>> {
        Box::pin(async move {
            let out = self
                .limiter
                .spend(NAME, &self.id, 1, self.clock.now())
                .await
                .map_err(|e| BenchError::Other(format!("kv spend: {e}")))?;
            Ok(if out.decision.allowed {
                Decision::admitted(None)
            } else {
                Decision::refused(None)
            })
        })
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn the_generated_limits_file_is_valid() {
        let set = LimitSet::from_yaml(&limits_yaml(50, 3600)).expect("valid limits file");
        let rate = set.default_rate(NAME).expect("a default for the name");
        assert_eq!((rate.burst, rate.count), (50, 50));
        assert_eq!(rate.period, std::time::Duration::from_secs(3600));
    }
}
