//! A bounded-time, in-memory cache of tenant rows, so a warm authorizer, `$connect`, `$default` and
//! session API spend no call on the tenant. Found tenants are kept for the configured time
//! (`TURNSTILE_TENANT_CACHE_SECS`): a deleted or changed one is seen within it — by `$default` too,
//! which holds every message against the tenant it reads here, so that time bounds how long an open
//! socket goes on under a deleted tenant, a stricter `connectAuth` or higher limits. Ids found to name no tenant are kept apart, briefly
//! ([`MISSING_TTL`]) and in a bounded set of their own: a flood of made-up ids costs one GetItem per
//! id per few seconds, never evicts a real tenant, and a tenant created a moment ago is seen within
//! seconds.

use std::time::Duration;

use super::{store, Tenant};
use crate::cache::{Cache, WhenFull};
use crate::clock::Timestamp;
use crate::config::{ConfigError, Vars};
use crate::error::Result;
use crate::ids::TenantId;
use crate::Deps;

/// Env var: seconds a tenant row may be served from memory (0 = always read).
pub const CACHE_SECS_VAR: &str = "TURNSTILE_TENANT_CACHE_SECS";
pub const DEFAULT_CACHE_SECS: u64 = 60;
/// Entries kept at most; beyond it the cache is cleared (cheap, and bounds memory under id floods).
const MAX_ENTRIES: usize = 10_000;
/// How long an id is remembered to name no tenant (at most the cache's own time).
pub const MISSING_TTL: Duration = Duration::from_secs(5);

#[derive(Debug)]
pub struct TenantCache {
    ttl: Duration,
    entries: Cache<TenantId, Tenant>,
    /// Ids that named no tenant when read; separate, so they never push a real tenant out.
    missing: Cache<TenantId, ()>,
}

impl TenantCache {
    pub fn new(ttl: Duration) -> Self {
        TenantCache {
            ttl,
            entries: Cache::new(MAX_ENTRIES, WhenFull::Clear),
            missing: Cache::new(MAX_ENTRIES, WhenFull::Clear),
        }
    }

    /// Reads `TURNSTILE_TENANT_CACHE_SECS` (default 60).
    pub fn ttl_from_vars(vars: &Vars) -> Result<Duration, ConfigError> {
        vars.secs_or(CACHE_SECS_VAR, Duration::from_secs(DEFAULT_CACHE_SECS))
    }

    pub fn ttl(&self) -> Duration {
        self.ttl
    }

    /// The tenant, from memory when fresh (0 calls), else 1 GetItem.
    pub async fn get(&self, deps: &Deps, id: &TenantId) -> Result<Option<Tenant>> {
        let now = deps.clock.now();
        if let Some(t) = self.entries.fresh(id, now) {
            return Ok(Some(t));
        }
        if self.missing.fresh(id, now).is_some() {
            return Ok(None);
        }
        let found = store::get(deps, id).await?;
        match &found {
            Some(t) => self.insert(t.clone(), now),
            None => self.remember_missing(id, now),
        }
        Ok(found)
    }

    /// Records that `id` named no tenant at `now`, for [`MISSING_TTL`] (or the cache's own time,
    /// if shorter), in the negative set of its own.
    fn remember_missing(&self, id: &TenantId, now: Timestamp) {
        if self.ttl.is_zero() {
            return;
        }
        let until = now.plus(MISSING_TTL.min(self.ttl));
        self.missing.insert_until(id.clone(), (), now, until);
    }

    pub fn insert(&self, t: Tenant, now: Timestamp) {
        if self.ttl.is_zero() {
            return;
        }
        self.entries
            .insert_until(t.tenant_id.clone(), t, now, now.plus(self.ttl));
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::tenant::Limits;

    /// A flood of made-up ids, more than the negative set holds, keeps that set
    /// within [`MAX_ENTRIES`] (it is cleared when full) and never touches a real tenant's entry.
    #[test]
    fn the_negative_cache_is_bounded_and_apart_from_real_tenants() {
        let id = |s: &str| TenantId::parse(s).unwrap();
        let cache = TenantCache::new(Duration::from_secs(60));
        let now = Timestamp::from_secs(1_764_000_000);
        let real = Tenant {
            tenant_id: id("real"),
            limits: Limits::example(60, 5, 2, 10, 300, 60),
        };
        cache.insert(real.clone(), now);
        let mut most = 0;
        for i in 0..MAX_ENTRIES + 500 {
            cache.remember_missing(&id(&format!("ghost-{i}")), now);
            most = most.max(cache.missing.len());
        }
        assert!(
            most <= MAX_ENTRIES,
            "the negative set held {most} ids (bound {MAX_ENTRIES})"
        );
        assert_eq!(cache.entries.fresh(&id("real"), now), Some(real));
        // The ids kept are remembered for MISSING_TTL only.
        let last = id(&format!("ghost-{}", MAX_ENTRIES + 499));
        assert!(cache.missing.fresh(&last, now).is_some());
        assert!(cache.missing.fresh(&last, now.plus(MISSING_TTL)).is_none());
    }
}
