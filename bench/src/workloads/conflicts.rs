//! The transactional paths with DynamoDB's `TransactionConflict` injected: the same
//! workloads as `websocket-handlers` and `reservation-lifecycle`, but their client talks to
//! DynamoDB Local through `turnstile-faultproxy` with conflicts on, so a transaction that overlaps
//! in time with another on the same item is cancelled as DynamoDB cancels it (DynamoDB Local itself
//! serialises them and never does). Retries show as calls per decision above the uncontended
//! promise; decisions that gave up show as errors; the share of transactions cancelled is printed
//! to stderr when the run ends (`bench: conflicts ...`). See `docs/decisions/0900-fault-proxy.md`.

use std::sync::Arc;

use futures::future::BoxFuture;
use turnstile_faultproxy::{FaultProxy, Policy};

use crate::error::BenchError;
use crate::workload::{BenchCtx, Decision, Factory, Params, Workload};

/// A workload whose DynamoDB calls go through a conflict-injecting proxy.
pub struct WithConflicts {
    name: &'static str,
    inner: Arc<dyn Workload>,
    proxy: FaultProxy,
}

async fn behind_proxy(ctx: &BenchCtx) -> Result<(FaultProxy, BenchCtx), BenchError> {
    let proxy = FaultProxy::start(&ctx.endpoint)
        .await
        .map_err(|e| BenchError::Other(format!("starting the fault proxy: {e}")))?;
    let mut proxied = ctx.clone();
    proxied.client = shared::dynamo::local_client(&proxy.url(), Some(&ctx.counter));
    Ok((proxy, proxied))
}

/// `websocket-handlers` (authorizer + `$connect` + `$disconnect`) with conflicts injected.
pub async fn build_websocket(ctx: &BenchCtx, p: &Params) -> Result<Arc<dyn Workload>, BenchError> {
    let build: Factory = |ctx, p| Box::pin(super::websocket::build(ctx, p));
    with_conflicts("websocket-handlers-conflicts", build, ctx, p).await
}

/// `reservation-lifecycle` with conflicts injected.
pub async fn build_reservation(
    ctx: &BenchCtx,
    p: &Params,
) -> Result<Arc<dyn Workload>, BenchError> {
    let build: Factory = |ctx, p| Box::pin(super::reservation::build(ctx, p));
    with_conflicts("reservation-conflicts", build, ctx, p).await
}

/// The workload `build` makes, behind a fault proxy that injects conflicts once it is built.
async fn with_conflicts(
    name: &'static str,
    build: Factory,
    ctx: &BenchCtx,
    p: &Params,
) -> Result<Arc<dyn Workload>, BenchError> {
    let (proxy, proxied) = behind_proxy(ctx).await?;
    let inner = build(&proxied, p).await?;
    proxy.set_policy(Policy::conflicts());
    proxy.reset_stats();
    Ok(Arc::new(WithConflicts { name, inner, proxy }))
}

impl Workload for WithConflicts {
    fn decide(&self, worker: usize, seq: u64) -> BoxFuture<'_, Result<Decision, BenchError>> {
        self.inner.decide(worker, seq)
    }
}

impl Drop for WithConflicts {
    fn drop(&mut self) {
        let s = self.proxy.stats();
        eprintln!(
            "bench: conflicts {}: {} of {} TransactWriteItems cancelled with TransactionConflict \
             ({:.1}%), {} single writes refused with TransactionConflictException",
            self.name,
            s.conflicts,
            s.transactions,
            s.conflict_rate() * 100.0,
            s.conflict_exceptions,
        );
    }
}
