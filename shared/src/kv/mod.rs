//! Key-value GCRA limits (as Boulder's `ratelimits` defines them): names and id formats
//! ([`names`]), the limits file ([`config`]), the conditional writes that spend a bucket in one
//! round trip ([`write`]), and the DynamoDB-backed limiter ([`limiter`]). The bucket's state view
//! (`RateLimitState`) is in [`crate::state`].

use crate::table::{KeyAttr, TableDef, TableKind};

pub mod config;
pub mod instant;
pub mod limiter;
mod meter;
pub mod names;
pub mod write;

pub use config::{BucketKey, KeyError, LimitSet, Limits, LoadError, NameDef, Problem};
pub use limiter::{
    item_write_budget, BatchOutcome, KeyedRefund, KvError, Lease, LeaseOutcome, Limiter, Outcome,
};
pub use names::IdFormat;

pub mod attr {
    /// `{nameId}:{id}`, the interned bucket key (Boulder's form).
    pub const BUCKET: &str = "bucket";
    /// Epoch seconds after which an idle bucket is full again and can be forgotten.
    pub const EXPIRES_AT: &str = "expiresAt";
}

pub fn table(name: &str) -> TableDef {
    TableDef {
        kind: TableKind::Buckets,
        name: name.to_string(),
        partition_key: KeyAttr::s(attr::BUCKET),
        sort_key: None,
        indexes: vec![],
        ttl_attribute: Some(attr::EXPIRES_AT),
        stream: None,
    }
}
