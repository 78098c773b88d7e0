//! Key-value GCRA limits (as Boulder's `ratelimits` defines them): names and id formats
//! ([`names`]), the limits file ([`config`]), the conditional writes that spend a bucket in one
//! round trip ([`write`]), and the DynamoDB-backed limiter ([`limiter`]). The bucket's state view
//! (`RateLimitState`) is in [`crate::state`].

pub mod config;
pub mod instant;
pub mod limiter;
pub mod names;
/// The GCRA conditional write (`crate::gcra_write`, which admission uses too), at its old path.
pub use crate::gcra_write as write;
pub use config::{BucketKey, KeyError, LimitSet, Limits, LoadError, NameDef, Problem};
pub use limiter::{
    item_write_budget, BatchOutcome, KeyedRefund, KvError, Lease, LeaseOutcome, Limiter, Outcome,
};
pub use names::IdFormat;
mod table;

pub use table::*;
