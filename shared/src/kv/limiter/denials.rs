//! Denials held in memory, per bucket item (decision 0603): what a denial did not write, kept
//! until the bucket's next write or a flush.

use std::collections::HashMap;
use std::sync::Mutex;

use crate::clock::Timestamp;

/// Hints kept per limiter before the map is cleared (a hint is only an optimisation); also the
/// most buckets with held denials.
pub(super) const MAX_HINTS: usize = 100_000;

#[derive(Debug, Clone, Copy)]
pub(super) struct BucketDenials {
    pub(super) count: u64,
    pub(super) first: Timestamp,
    /// The bucket's `version` in the item the last denial was decided from.
    pub(super) version: Option<i64>,
}

/// The denials this process holds, by bucket item: at most [`MAX_HINTS`] buckets. A plain map
/// rather than a [`crate::cache::Cache`]: a flush drains every entry, which a cache does not offer.
#[derive(Debug, Default)]
pub(super) struct HeldDenials(pub(super) Mutex<HashMap<String, BucketDenials>>);

impl HeldDenials {
    pub(super) fn take(&self, key: &str) -> Option<BucketDenials> {
        self.0.lock().ok().and_then(|mut p| p.remove(key))
    }

    /// Puts back throttles that were not written, adding `denied` new ones at `now` (decided from
    /// an item at `version`).
    pub(super) fn keep(
        &self,
        key: &str,
        taken: Option<BucketDenials>,
        denied: u64,
        now: Timestamp,
        version: Option<i64>,
    ) {
        let count = taken.map_or(0, |p| p.count) + denied;
        if count == 0 {
            return;
        }
        let first = taken.map_or(now, |p| p.first.min(now));
        let version = version.or(taken.and_then(|p| p.version));
        if let Ok(mut p) = self.0.lock() {
            if p.len() >= MAX_HINTS && !p.contains_key(key) {
                // Best effort (docs/decisions/0603): under a flood of distinct keys, drop rather
                // than grow without bound.
                return;
            }
            let e = p.entry(key.to_string()).or_insert(BucketDenials {
                count: 0,
                first,
                version,
            });
            e.count += count;
            e.first = e.first.min(first);
            if version.is_some() {
                e.version = version;
            }
        }
    }

    /// Drops a bucket's held denials (its item was deleted: its window starts over).
    pub(super) fn forget(&self, key: &str) {
        if let Ok(mut p) = self.0.lock() {
            p.remove(key);
        }
    }
}
