//! Non-fungible tokens: `NonFungibleLimiter::get_reservation` then `Reservation::create_token` (bind
//! the reservation to a resource instance, as a caller does once its EMR cluster id is known), on one
//! (resource, account) coordinate whose capacity is `params.limit` (no limit row: the caller's
//! default applies). One decision = one reservation, bound. Nothing is released during a run, so the
//! coordinate's ledger item grows by one entry per decision (≤ 2,100 entries in a full run).
//!
//! DynamoDB calls per decision, **3 single-item writes and 1 read, no transaction** (decision 0101):
//! 1 `UpdateItem` for the reservation (a ledger entry under `size(live) < capacity`; no row), and 3
//! for `create_token` (the token row, then at once the ledger entry's expiry and a strongly
//! consistent `GetItem` of the resource's ended marker, which adds no write unit). Write units: 1 + 2 × the ledger's
//! size in KB (rounded up), against 4 + 4 × that for the two transactions this replaced. Cold adds
//! a `BatchGetItem` and, on a coordinate's first use, a `Query` (spent in the warm-up). Concurrent
//! admissions do not invalidate each other (the condition is the ledger's size, not its exact state);
//! a throttled write is a retry, counted.

use std::sync::Arc;

use futures::future::BoxFuture;
use shared::reservation::{NonFungibleLimiter, ReservationError};
use shared::table::TableKind;

use crate::error::BenchError;
use crate::workload::{BenchCtx, Decision, Params, Workload};

pub struct ReservationCreateToken {
    limiter: NonFungibleLimiter,
    resource: String,
    account: String,
    capacity: i64,
}

pub async fn build(ctx: &BenchCtx, p: &Params) -> Result<Arc<dyn Workload>, BenchError> {
    super::ensure_tables(ctx, &[TableKind::NonFungibleTokens, TableKind::Limits]).await?;
    let deps = super::deps(ctx);
    let limiter =
        NonFungibleLimiter::from_deps(&deps).map_err(|e| BenchError::Other(e.to_string()))?;
    Ok(Arc::new(ReservationCreateToken {
        limiter,
        resource: "bench-cluster".into(),
        account: p.key.clone(),
        capacity: i64::try_from(p.limit)
            .map_err(|_| BenchError::Other(format!("capacity {} is too large", p.limit)))?,
    }))
}

impl Workload for ReservationCreateToken {
    fn decide(&self, _worker: usize, seq: u64) -> BoxFuture<'_, Result<Decision, BenchError>> {
        Box::pin(async move {
            let r = match self
                .limiter
                .get_reservation(&self.resource, &self.account, self.capacity)
                .await
            {
                Ok(r) => r,
                Err(ReservationError::Limited { .. }) => return Ok(Decision::refused(None)),
                Err(e) => return Err(BenchError::Other(format!("get_reservation: {e}"))),
            };
            r.create_token(&format!("j-BENCH{seq:08}"))
                .await
                .map_err(|e| BenchError::Other(format!("create_token: {e}")))?;
            Ok(Decision::admitted(None))
        })
    }
}
