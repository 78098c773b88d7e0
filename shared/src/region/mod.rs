//! One limit across regions (decision 4200): each region decides locally, on its own regional
//! bucket, within the *allotment* it holds of the limit's total `L`; the allotments live on a
//! strongly consistent ledger and never sum past `L`.
//!
//! - [`ledger`]: the ledger's items, its table and the store it is reached through (no
//!   transactions, no TTL: MRSC has neither).
//! - [`allotment`]: declared global limits, what a process holds, the rate a bucket spends at.
//! - [`saga`]: moving allotment, three idempotent conditional writes.
//! - [`lease`]: renewing a region's lease, reclaiming a region that stopped.
//! - [`policy`]: where allotment should go, with hysteresis.
//! - [`rebalance`]: one region's rebalancer: finish, reclaim, move.
//! - [`demand`]: what each region reports it is asked for, measured from its regional bucket.
//! - [`declarations`]: the global limits a ledger holds, declared on it.
//! - [`prune`]: removing finished moves from the regions' items.
//! - [`scheduled`]: one region's scheduled pass over them (the `region-rebalancer` function).
//! - [`error`]: what can go wrong.

pub mod allotment;
pub mod declarations;
pub mod demand;
pub mod error;
pub mod lease;
pub mod ledger;
pub mod policy;
pub mod prune;
pub mod rebalance;
pub mod saga;
pub mod scheduled;

pub use allotment::{Allotments, Declared, Held, Mode, Regional};
pub use error::RegionError;
pub use lease::LeaseTerms;
pub use ledger::{DynamoLedger, LedgerStore};
pub use rebalance::Rebalancer;
pub use saga::Move;

#[cfg(test)]
mod tests;
