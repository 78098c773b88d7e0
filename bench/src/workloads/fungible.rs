//! Fungible tokens: `shared::token::FungibleLimiter::get_token` on one (resource, account) bucket
//! in the rate-limiter-py-compatible token table, with no limit row (the caller's default quota of
//! `params.limit` per `params.window_secs` applies, as in the example of docs/tokens.md).
//!
//! DynamoDB calls per decision (the limiter's documented budget): **1** `UpdateItem` warm (limit
//! row cached, bucket state seen); 2 cold (a `BatchGetItem` first; spent in the warm-up); **+1 per
//! lost race**: the write is conditioned on the exact state last seen, so when `c` tasks share one
//! bucket, all but one of each round lose and retry with the state the failed condition returned.
//!
//! [`build_per_account`] is the same call with one bucket per task (account `{key}-w{worker}`, the
//! multi-tenant shape: concurrent callers mostly hit different accounts), so no decision races; its
//! buckets are made warm in `build`, as a long-lived process's would be.

use std::sync::Arc;

use futures::future::BoxFuture;
use shared::limit::Quota;
use shared::table::TableKind;
use shared::token::FungibleLimiter;

use crate::error::BenchError;
use crate::workload::{BenchCtx, Decision, Params, Workload};

/// Workers with a bucket of their own in the per-account variant (the largest concurrency run).
const PER_ACCOUNT_WORKERS: usize = 32;

pub struct FungibleGetToken {
    limiter: FungibleLimiter,
    resource: String,
    account: String,
    quota: Quota,
    /// One bucket per worker (`{account}-w{worker % PER_ACCOUNT_WORKERS}`) instead of one shared.
    per_account: bool,
}

pub async fn build(ctx: &BenchCtx, p: &Params) -> Result<Arc<dyn Workload>, BenchError> {
    Ok(Arc::new(make(ctx, p, false).await?))
}

pub async fn build_per_account(
    ctx: &BenchCtx,
    p: &Params,
) -> Result<Arc<dyn Workload>, BenchError> {
    let w = make(ctx, p, true).await?;
    // Warm every worker's bucket (its cold BatchGetItem), concurrently.
    futures::future::try_join_all((0..PER_ACCOUNT_WORKERS).map(|i| {
        let w = &w;
        async move {
            let account = w.account_of(i);
            w.limiter.get_token(&w.resource, &account, w.quota).await
        }
    }))
    .await?;
    Ok(Arc::new(w))
}

async fn make(
    ctx: &BenchCtx,
    p: &Params,
    per_account: bool,
) -> Result<FungibleGetToken, BenchError> {
    super::ensure_tables(ctx, &[TableKind::FungibleTokens, TableKind::Limits]).await?;
    let deps = super::deps(ctx);
    let limiter =
        FungibleLimiter::from_deps(&deps).map_err(|e| BenchError::Other(e.to_string()))?;
    Ok(FungibleGetToken {
        limiter,
        resource: "bench-resource".into(),
        account: p.key.clone(),
        quota: quota(p.limit, p.window_secs)?,
        per_account,
    })
}

pub fn quota(limit: u64, window_secs: u64) -> Result<Quota, BenchError> {
    let conv =
        |v: u64| i64::try_from(v).map_err(|_| BenchError::Other(format!("{v} is too large")));
    Ok(Quota::new(conv(limit)?, conv(window_secs)?))
}

impl FungibleGetToken {
    fn account_of(&self, worker: usize) -> String {
        format!("{}-w{}", self.account, worker % PER_ACCOUNT_WORKERS)
    }
}

impl Workload for FungibleGetToken {
    fn decide(&self, worker: usize, _seq: u64) -> BoxFuture<'_, Result<Decision, BenchError>> {
        Box::pin(async move {
            let account = if self.per_account {
                self.account_of(worker)
            } else {
                self.account.clone()
            };
            let d = self
                .limiter
                .get_token(&self.resource, &account, self.quota)
                .await?;
            Ok(if d.granted {
                Decision::admitted(None)
            } else {
                Decision::refused(None)
            })
        })
    }
}
