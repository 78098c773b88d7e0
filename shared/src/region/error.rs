//! What can go wrong on the ledger, as values: a refused condition is never a panic, and a
//! replicated write conflict is its own variant because it is the one failure a caller retries.

use crate::clock::Timestamp;

#[derive(Debug, thiserror::Error)]
pub enum RegionError {
    /// Two regions wrote one ledger item at once (MRSC's `ReplicatedWriteConflictException`): the
    /// refused write changed nothing and may be sent again.
    #[error("replicated write conflict on {item}")]
    Conflict { item: String },
    /// The giver holds less than the move asks for.
    #[error("region {region} holds {held} of {limit}, cannot give {asked}")]
    Short {
        limit: String,
        region: String,
        held: u64,
        asked: u64,
    },
    /// The region's item has another epoch than the caller's: it was reclaimed, and the caller
    /// must read it again before it writes.
    #[error("region {region} of {limit} was reclaimed (epoch {epoch})")]
    Fenced {
        limit: String,
        region: String,
        epoch: u64,
    },
    /// A region the ledger has no item for (never created, or a misspelt name).
    #[error("no ledger item for region {region} of {limit}")]
    NoRegion { limit: String, region: String },
    /// A move raised or recorded before it was lowered: never written, so nothing to resume.
    #[error("move {id} of {limit} was never lowered")]
    NotLowered { limit: String, id: String },
    /// The region's lease has not run out (plus the clock margin): it may still be deciding.
    #[error("region {region} of {limit} holds its lease until {until}")]
    LeaseHeld {
        limit: String,
        region: String,
        until: Timestamp,
    },
    /// A declared limit that cannot be split (its burst differs from its count, no regions...).
    #[error("global limit {limit}: {reason}")]
    BadDeclaration { limit: String, reason: String },
    /// A ledger item not in the shape this code writes.
    #[error("ledger item {item} is malformed: {reason}")]
    Malformed { item: String, reason: String },
    /// The ledger could not be reached or refused the call for another reason.
    #[error("ledger {operation} failed: {message}")]
    Store {
        operation: &'static str,
        message: String,
    },
}

impl RegionError {
    /// A failure a caller may simply send again (the write certainly changed nothing).
    pub fn is_retryable(&self) -> bool {
        matches!(self, RegionError::Conflict { .. })
    }
}
