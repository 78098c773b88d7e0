//! Non-fungible tokens (decision 0101), as a caller uses them, on one (resource, account)
//! coordinate (no limit row: the caller's default applies).
//!
//! - `reservation-lifecycle`: one decision = `get_reservation`, `Reservation::create_token` (bind
//!   the reservation to the resource instance, as a caller does once its EMR cluster id is known),
//!   then `Reservation::delete` (the resource ended). **5 calls, 4 write units, no transaction**:
//!   1 `UpdateItem` on one ledger shard for the reservation; 3 for the bind (the bound row in the
//!   resource's partition, a strongly consistent `GetItem` of the ended marker, which adds no write
//!   unit, then the shard entry's expiry); 1 for the release (the shard entry). The bound row has no
//!   `resourceId`, so the resource index is not written. The coordinate holds what is in flight,
//!   so this is the steady-state cost. The accuracy test binds without releasing
//!   (a released unit may be admitted again, so "admitted ≤ limit" would not be the check).
//! - `reservation-at-1000-live`: one decision = reserve + bind on a coordinate already holding
//!   1,000 live reservations (filled before the run, untimed). **4 calls, 3 write units**: every
//!   ledger write goes to one shard of at most 16 entries (under 1 KB), whatever the coordinate
//!   holds.
//!
//! Cold adds a `BatchGetItem` and, on a coordinate's first use, a `Query` (spent in the warm-up).
//! Concurrent admissions spread over the shards at random; a full shard met costs one more call.

use std::sync::Arc;

use futures::future::BoxFuture;
use shared::reservation::{NonFungibleLimiter, ReservationError};
use shared::table::TableKind;

use crate::error::BenchError;
use crate::workload::{BenchCtx, Decision, Params, Workload};

/// Live reservations the `reservation-at-1000-live` coordinate holds before the run.
pub const PREFILLED: u64 = 1_000;

pub struct ReservationPath {
    limiter: NonFungibleLimiter,
    resource: String,
    account: String,
    capacity: i64,
    /// Delete each reservation after binding it (the lifecycle).
    release: bool,
}

async fn limiter(ctx: &BenchCtx) -> Result<NonFungibleLimiter, BenchError> {
    super::ensure_tables(ctx, &[TableKind::NonFungibleTokens, TableKind::Limits]).await?;
    NonFungibleLimiter::from_deps(&super::deps(ctx)).map_err(|e| BenchError::Other(e.to_string()))
}

fn capacity(limit: u64) -> Result<i64, BenchError> {
    i64::try_from(limit).map_err(|_| BenchError::Other(format!("capacity {limit} is too large")))
}

/// Reserve, bind, release (reserve and bind only in the accuracy test).
pub async fn build(ctx: &BenchCtx, p: &Params) -> Result<Arc<dyn Workload>, BenchError> {
    Ok(Arc::new(ReservationPath {
        limiter: limiter(ctx).await?,
        resource: "bench-cluster".into(),
        account: p.key.clone(),
        capacity: capacity(p.limit)?,
        release: !p.accuracy,
    }))
}

/// Reserve and bind on a coordinate holding [`PREFILLED`] live reservations (capacity raised by
/// as much, so the run's own limit is what is left).
///
/// The prefill runs on a limiter of its own, as another process would: eight tasks filling one
/// coordinate leave their shared view of it a hint that may have lost an entry (a refused write's
/// shard state can land after a newer admission's), and a timed c = 1 run starting from that view
/// would pay for the prefill's races. The timed limiter starts cold and reads the shards in its
/// warm-up, the steady state of a process that did not do the filling.
pub async fn build_at_1000_live(
    ctx: &BenchCtx,
    p: &Params,
) -> Result<Arc<dyn Workload>, BenchError> {
    let w = ReservationPath {
        limiter: limiter(ctx).await?,
        resource: "bench-cluster".into(),
        account: p.key.clone(),
        capacity: capacity(p.limit + PREFILLED)?,
        release: false,
    };
    let fill = (0..8).map(|t| {
        let w = &w;
        async move {
            for _ in (t..PREFILLED).step_by(8) {
                w.limiter
                    .get_reservation(&w.resource, &w.account, w.capacity)
                    .await
                    .map_err(|e| BenchError::Other(format!("prefill: {e}")))?;
            }
            Ok::<_, BenchError>(())
        }
    });
    for r in futures::future::join_all(fill).await {
        r?;
    }
    Ok(Arc::new(ReservationPath {
        limiter: limiter(ctx).await?,
        ..w
    }))
}

impl Workload for ReservationPath {
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
            if self.release {
                r.delete()
                    .await
                    .map_err(|e| BenchError::Other(format!("delete: {e}")))?;
            }
            Ok(Decision::admitted(None))
        })
    }
}
