//! The DynamoDB-backed key-value limiter: spend, check, refund, reset and an all-or-nothing batch
//! spend over the buckets table, one TAT per bucket (see [`crate::gcra_write`] for the conditional
//! writes). Each operation's doc comment states its DynamoDB call count.
//!
//! One `impl Limiter`, one file per concern: `state` (the limiter, its hints, where each bucket
//! lives), `spend` (spend, check and refund of one bucket: the write loop, metering, shadow
//! limits), `batch` (the all-or-nothing batch spend), `items` (read, reset, a keyed refund),
//! `lease`, `sharded` (limits spread over several items), `throttles` (writing held denials),
//! `denials` (held denials in memory) and `outcome` (answers and errors).

mod batch;
mod denials;
mod items;
mod lease;
mod outcome;
mod sharded;
mod spend;
mod state;
mod throttles;

pub use items::{KeyedRefund, REFUND_KEY_TTL};
pub use lease::{Lease, LeaseOutcome};
pub use outcome::*;
pub use sharded::item_write_budget;
pub use state::*;
