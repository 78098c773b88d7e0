//! The rejection cache: a refused `FungibleLimiter::get_token` on a bucket this process already
//! knows to be empty. `build` takes the bucket's only token (limit 1 per `params.window_secs`, so
//! the next token is due an hour later) and refuses once from DynamoDB's answer, so the limiter has
//! seen the bucket empty; every timed decision is then a refusal decided from memory.
//!
//! DynamoDB calls per decision: **0** (`Source::RejectionCache`), for as long as the limit row is
//! cached (the default 60 s, longer than any one run). A refusal that did reach DynamoDB is an error
//! here, so the smoke run fails loudly if the cache stops working.

use std::sync::Arc;

use futures::future::BoxFuture;
use shared::limit::Quota;
use shared::table::TableKind;
use shared::token::{FungibleLimiter, Source};

use crate::error::BenchError;
use crate::workload::{BenchCtx, Decision, Params, Workload};

pub struct CachedRejection {
    limiter: FungibleLimiter,
    resource: String,
    account: String,
    quota: Quota,
}

pub async fn build(ctx: &BenchCtx, p: &Params) -> Result<Arc<dyn Workload>, BenchError> {
    super::ensure_tables(ctx, &[TableKind::FungibleTokens, TableKind::Limits]).await?;
    let deps = super::deps(ctx);
    let limiter =
        FungibleLimiter::from_deps(&deps).map_err(|e| BenchError::Other(e.to_string()))?;
    let w = CachedRejection {
        limiter,
        resource: "bench-resource".into(),
        account: p.key.clone(),
        quota: super::fungible::quota(1, p.window_secs)?,
    };
    // Empty the bucket: the one token is granted, then a refusal comes back from DynamoDB's answer
    // (or already from the state the grant returned).
    let first = w
        .limiter
        .get_token(&w.resource, &w.account, w.quota)
        .await?;
    if !first.granted {
        return Err(BenchError::Other(format!(
            "cached-rejection: a fresh bucket refused its first token ({:?})",
            first.source
        )));
    }
    let second = w
        .limiter
        .get_token(&w.resource, &w.account, w.quota)
        .await?;
    if second.granted {
        return Err(BenchError::Other(
            "cached-rejection: a bucket of 1 granted a second token".into(),
        ));
    }
    Ok(Arc::new(w))
}

impl Workload for CachedRejection {
    fn decide(&self, _worker: usize, _seq: u64) -> BoxFuture<'_, Result<Decision, BenchError>> {
        Box::pin(async move {
            let d = self
                .limiter
                .get_token(&self.resource, &self.account, self.quota)
                .await?;
            match (d.granted, d.source) {
                (false, Source::RejectionCache) => Ok(Decision::refused(None)),
                (granted, source) => Err(BenchError::Other(format!(
                    "expected a refusal from the rejection cache, got granted={granted} from {source:?}"
                ))),
            }
        })
    }
}
