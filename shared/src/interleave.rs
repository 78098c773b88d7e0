//! Named points between two writes of one operation, where a test can force another operation in
//! (a delete between a bind's two writes, the remover in the middle of a bind) instead of hoping the
//! scheduler produces that order. Production code holds [`Interleave::none`]: one branch on an
//! `Option` per point, no allocation.

use std::fmt;
use std::sync::Arc;

use futures::future::BoxFuture;

/// Where an operation may be paused, in the order its writes happen.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
pub enum Point {
    /// `create_token`: the bound row is written; neither the ledger entry extended nor the
    /// ended-resource marker read.
    BindAfterRow,
    /// `create_token`: the ended-resource marker was read (absent or not); the ledger entry not
    /// yet extended, nor the reservation released.
    BindAfterMarkerRead,
    /// The remover: the ended marker is written, the resource's tokens not yet queried.
    RemoverAfterMarker,
    /// A coordinate's first reservation: the rows written before its ledger are read; the ledger
    /// holding them not yet created.
    ReserveAfterLegacyRead,
    /// Ending a session: the row is ended (closed to joins, its session unit given back); none of
    /// its sockets closed yet.
    EndAfterMark,
    /// Ending a session (or replacing an expired one): its sockets are closed; none released yet.
    EndAfterClose,
    /// The TTL sweeper: the expired session's sockets are closed; nothing released yet.
    SweepAfterClose,
}

type Hook = Arc<dyn Fn(Point) -> BoxFuture<'static, ()> + Send + Sync>;

/// What runs at each [`Point`]: nothing, or a test's hook (awaited before the operation goes on).
#[derive(Clone, Default)]
pub struct Interleave(Option<Hook>);

impl Interleave {
    pub fn none() -> Self {
        Interleave(None)
    }

    /// Runs `hook` at every point; it decides which points matter to it.
    pub fn with(hook: impl Fn(Point) -> BoxFuture<'static, ()> + Send + Sync + 'static) -> Self {
        Interleave(Some(Arc::new(hook)))
    }

    pub async fn at(&self, point: Point) {
        if let Some(hook) = &self.0 {
            hook(point).await;
        }
    }
}

impl fmt::Debug for Interleave {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(if self.0.is_some() {
            "Interleave(hook)"
        } else {
            "Interleave(none)"
        })
    }
}
