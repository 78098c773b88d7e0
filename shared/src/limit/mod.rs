//! Per-account limits (rate-limiter-py's): the limit and window for (resource, account), owned by a
//! service.
//!
//! [`LimitStore`] reads rows and caches them (found or not) for `TURNSTILE_LIMIT_CACHE_SECS`;
//! [`load`] diffs a rate-limiter-py limits file against the `serviceName` index.

pub mod load;
mod store;
pub use store::{
    Companion, Effective, LimitRow, LimitStore, Quota, CACHE_SECS_VAR, DEFAULT_CACHE, MAX_CAPACITY,
};
mod schema;

pub use schema::*;
