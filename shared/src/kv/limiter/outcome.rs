//! What the key-value limiter answers: one bucket's outcome, a batch's, and its errors.

use serde::Serialize;

use super::super::config::KeyError;
use crate::gcra::{Decision, Rate, RateError};

/// Most conditional writes one operation makes. Two suffice unless other writers refund or reset
/// the same bucket between them (each failed write returns a TAT newer than the last), or
/// transactions conflict.
pub const MAX_ATTEMPTS: usize = 4;

/// Most buckets in one batch spend: DynamoDB's limit of items per transaction.
pub const MAX_BATCH: usize = 100;

#[derive(Debug, thiserror::Error)]
pub enum KvError {
    #[error(transparent)]
    Key(#[from] KeyError),
    #[error(transparent)]
    Rate(#[from] RateError),
    #[error("a spend needs a cost of at least 1 (use check for 0)")]
    ZeroCost,
    #[error("bucket {0} appears more than once in a batch")]
    DuplicateInBatch(String),
    /// A batch is one transaction over fixed items; a sharded limit is spent on its own.
    #[error("limit {0} is sharded and cannot be part of a batch spend (spend it on its own)")]
    ShardedInBatch(String),
    /// A batch is all-or-nothing: a shadow limit's would-deny cannot be let through without
    /// letting the other limits' spends through too, so shadow limits are spent on their own.
    #[error(
        "limit {0} is in shadow mode and cannot be part of a batch spend (spend it on its own)"
    )]
    ShadowInBatch(String),
    #[error("no lease {0}")]
    LeaseNotFound(String),
    /// An acquire under a lease id that already holds another estimate on this bucket (or a lease
    /// held elsewhere): never granted, since nothing would be spent for it.
    #[error("lease {lease} on {bucket} already holds {held}, not the {asked} asked for")]
    LeaseMismatch {
        lease: String,
        bucket: String,
        held: u64,
        asked: u64,
    },
    /// The lease's deadline had passed: its amount was returned to the bucket.
    #[error("lease {0} has expired; its amount was returned")]
    LeaseExpired(String),
    #[error("lease id {0:?} must be 1-200 printable characters")]
    BadLeaseId(String),
    #[error("idempotency key {0:?} must be 1-200 printable characters")]
    BadIdempotencyKey(String),
    /// A keyed refund writes one bucket item with its marker; a sharded limit's refund goes to
    /// whichever shard has room.
    #[error("limit {0} is sharded: a refund with an idempotency key needs a limit of one item")]
    ShardedKeyedRefund(String),
    #[error("a batch needs at least one limit")]
    EmptyBatch,
    #[error("a batch of {0} limits exceeds DynamoDB's {MAX_BATCH} items per transaction")]
    BatchTooLarge(usize),
    #[error("bucket {0} is contended: no decision after {MAX_ATTEMPTS} conditional writes")]
    Contended(String),
    #[error(transparent)]
    Store(#[from] crate::Error),
}

/// A decision about one bucket, with what the caller needs for headers and logs.
#[derive(Debug, Clone, PartialEq, Serialize)]
#[serde(rename_all = "camelCase")]
pub struct Outcome {
    /// `Name:id`.
    pub limit: String,
    /// The stored key, `{nameId}:{id}`.
    pub bucket: String,
    pub rate: Rate,
    #[serde(flatten)]
    pub decision: Decision,
    /// A shadow limit denied this spend and it was allowed anyway (nothing was spent).
    #[serde(skip_serializing_if = "std::ops::Not::not")]
    pub shadow_denied: bool,
}

/// The strictest of a batch's decisions, and each bucket's.
#[derive(Debug, Clone, PartialEq, Serialize)]
#[serde(rename_all = "camelCase")]
pub struct BatchOutcome {
    /// Denied if any bucket denied (the denial with the longest retry-in); otherwise allowed with
    /// the fewest remaining tokens and the longest retry-in and reset-in.
    pub decision: Decision,
    /// The bucket that decided (`Name:id`).
    pub deciding: String,
    pub each: Vec<Outcome>,
    /// False when some admitted bucket's numbers were computed from the TAT last seen rather than
    /// one DynamoDB returned (a transaction returns nothing on success).
    pub exact: bool,
}
