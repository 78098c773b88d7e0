//! The DynamoDB-backed key-value limiter: spend, check, refund, reset and an all-or-nothing batch
//! spend over the buckets table, one TAT per bucket (see [`crate::gcra_write`] for the conditional
//! writes). Each operation's doc comment states its DynamoDB call count.

mod batch;
mod denials;
mod items;
mod lease;
pub use items::{KeyedRefund, REFUND_KEY_TTL};
pub use lease::{Lease, LeaseOutcome};
mod sharded;
pub use sharded::item_write_budget;
mod limiter_core;
mod throttles;

pub use limiter_core::*;
