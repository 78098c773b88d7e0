//! Sharded fungible buckets (decision 1500): a resource declared with `N` shards keeps each
//! account's bucket as `N` rows, shard `i` under the partition key `{resource}#shard{i}` with its
//! exact share of the limit (`shard::share`); a take tries up to [`TRIES`] random shards.

use super::fungible::{Bucket, Decision, FungibleLimiter, Seen};
use crate::clock::Timestamp;
use crate::error::{Error, Result};
use crate::limit::{Effective, Quota};
use crate::shard::{self, share, MAX_SHARDS, TRIES};

/// Shard `i`'s partition key value.
pub(super) fn shard_key(resource: &str, i: u32) -> String {
    format!("{resource}#shard{i}")
}

impl FungibleLimiter {
    /// Spreads `resource`'s buckets over `n` rows (1: one row, as before).
    pub fn with_shards(self, resource: &str, n: u32) -> Self {
        if let Ok(mut m) = self.inner.shards.lock() {
            m.insert(resource.to_string(), n.clamp(1, MAX_SHARDS));
        }
        self
    }

    /// Seeds the random shard choices (tests: reproducible runs).
    pub fn with_shard_seed(self, seed: u64) -> Self {
        self.inner.picker.reseed(seed);
        self
    }

    pub(super) fn shards_of(&self, resource: &str) -> u32 {
        self.inner
            .shards
            .lock()
            .ok()
            .and_then(|m| m.get(resource).copied())
            .unwrap_or(1)
    }

    /// `get_token` on a sharded resource. The limit row is read as usual (cached, or **1** GetItem
    /// cold); the shard count is lowered to the limit if smaller (each row holds at least one
    /// token). Each shard tried costs what an unsharded take costs on its row: **1** UpdateItem
    /// warm, **0** when the last state seen shows it empty (rejection cache), +1 if its state was
    /// unknown or stale. A warm refusal: **2** UpdateItem (2 WCU), or 0 from the cache. The
    /// decision's `remaining` and `limit` are the deciding shard's.
    pub(super) async fn get_token_sharded(
        &self,
        resource: &str,
        account: &str,
        default: Quota,
        n: u32,
        now: Timestamp,
    ) -> Result<Decision> {
        let row = match self.inner.limits.cached(resource, account) {
            Some(row) => row,
            None => self.inner.limits.get(resource, account).await?,
        };
        let (limit, window) =
            match Effective::resolve(row.as_ref(), default, self.inner.limits.table())? {
                Effective::Blocked => return Ok(self.blocked(resource, account, now)),
                Effective::Limited { limit, window_ms } => (limit, window_ms),
            };
        let n = shard::effective(n, &[limit]);
        let mut refused: Option<Decision> = None;
        for i in self.inner.picker.choices(n, TRIES) {
            let store = shard_key(resource, i);
            let (seen, from_cache) = match self.seen(&store, account) {
                Some(seen) => (seen, true),
                None => (Seen::default(), false),
            };
            let bucket = Bucket {
                resource,
                store: &store,
                account,
                limit: share(limit, n, i),
                window,
            };
            let d = self.take(bucket, seen, from_cache, now).await?;
            if d.granted {
                return Ok(d);
            }
            if refused
                .as_ref()
                .is_none_or(|r| d.retry_after_ms < r.retry_after_ms)
            {
                refused = Some(d);
            }
        }
        refused.ok_or_else(|| Error::Other(format!("{resource}: no shard to try")))
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn token_shards_parse_or_say_why_not() {
        use super::super::shard_vars::{shards_from_vars, TOKEN_SHARDS_VAR};
        use crate::config::Vars;
        let v = |s: &str| Vars::from_pairs([(TOKEN_SHARDS_VAR, s)]);
        let m = shards_from_vars(&v("api=8, search=4")).unwrap();
        assert_eq!((m["api"], m["search"]), (8, 4));
        assert!(shards_from_vars(&Vars::from_pairs::<&str, &str>([]))
            .unwrap()
            .is_empty());
        for bad in ["api", "api=0", "api=5000", "=3", "api=x"] {
            assert!(shards_from_vars(&v(bad)).is_err(), "{bad}");
        }
        assert_eq!(shard_key("api", 3), "api#shard3");
    }
}
