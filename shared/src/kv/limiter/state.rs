//! The limiter itself: its table, its limits, the hints and held denials it keeps, and where
//! each bucket lives.

use std::sync::Arc;
use std::time::Duration;

use aws_sdk_dynamodb::Client;

use super::super::config::{BucketKey, LimitSet, Limits};
use super::denials::{HeldDenials, MAX_HINTS};
use super::outcome::{KvError, Outcome};
use crate::cache::{Cache, WhenFull};
use crate::clock::Timestamp;
use crate::gcra::{Decision, Rate};
use crate::gcra_write::{self, Target};

/// Default time an idle bucket's item outlives the moment it is full again: longer than a signed
/// request can take to reach DynamoDB (15 minutes, else it is refused as expired) plus a refund's
/// own call, so no send of an applied refund can land after its item's refund id was deleted with
/// the item (decision 0605).
pub const DEFAULT_TTL_MARGIN: Duration = Duration::from_secs(16 * 60);

/// What this process last saw of a bucket's item.
#[derive(Debug, Clone)]
pub(super) struct Hint {
    pub(super) tat: Timestamp,
    /// The rate and name the item carried (`None`: not seen, so the next write sets them).
    pub(super) stamp: Option<gcra_write::RateStamp>,
}

/// A limiter over one buckets table. Cheap to share (`Arc`); its hints and pending throttle counts
/// are per process, like a Lambda sandbox's.
#[derive(Debug)]
pub struct Limiter {
    pub(super) client: Client,
    pub(super) table: String,
    pub(super) limits: Arc<Limits>,
    pub(super) ttl_margin: Duration,
    /// What this process last saw of each bucket item, to bet on the right case and to leave
    /// out a stamp the item already carries (a hint is only an optimisation: a wrong or missing
    /// one costs one more write, or a stamp written again).
    pub(super) hints: Cache<String, Hint>,
    pub(super) pending: HeldDenials,
    /// Which shards a sharded spend tries, and the write budget behind `shards: auto`.
    pub(super) picker: crate::shard::Picker,
    pub(super) item_write_budget: u64,
    /// The tenant whose key space every item key starts in ([`Limiter::for_tenant`]).
    pub(super) scope: Option<crate::ids::TenantId>,
    /// This region's allotments of global limits (decision 4200): a declared bucket spends at its
    /// region's share, decided with the same one write.
    pub(super) regional: Option<Arc<crate::region::Allotments>>,
}

impl Limiter {
    pub fn new(client: Client, table: impl Into<String>, limits: Arc<Limits>) -> Self {
        Limiter {
            client,
            table: table.into(),
            limits,
            ttl_margin: DEFAULT_TTL_MARGIN,
            hints: Cache::new(MAX_HINTS, WhenFull::Clear),
            pending: HeldDenials::default(),
            picker: crate::shard::Picker::default(),
            item_write_budget: crate::shard::DEFAULT_ITEM_WRITE_BUDGET,
            scope: None,
            regional: None,
        }
    }

    /// A limiter whose every item (bucket, shard, lease, refund marker) is keyed in `tenant`'s key
    /// space, `{tenant}:...`, so tenant-scoped credentials (`dynamodb:LeadingKeys`) confine it and
    /// the key guard checks each bucket it locates. The limits file is shared: overrides still
    /// match `Name:id`.
    pub fn for_tenant(mut self, tenant: &crate::ids::TenantId) -> Self {
        self.scope = Some(tenant.clone());
        self
    }

    /// The tenant this limiter is scoped to, if any.
    pub fn scope(&self) -> Option<&crate::ids::TenantId> {
        self.scope.as_ref()
    }

    /// Decides the buckets `allotments` declares global within this region's allotment of them.
    pub fn with_allotments(mut self, allotments: Arc<crate::region::Allotments>) -> Self {
        self.regional = Some(allotments);
        self
    }

    pub fn with_ttl_margin(mut self, margin: Duration) -> Self {
        self.ttl_margin = margin;
        self
    }

    pub fn limits(&self) -> &Arc<Limits> {
        &self.limits
    }

    /// Forgets the TATs seen, so the next operation on each bucket is cold (tests, benchmarks).
    pub fn forget_hints(&self) {
        self.hints.clear();
    }

    pub(super) fn hint(&self, key: &str) -> Option<Timestamp> {
        self.hints.update(key, |h| h.tat)
    }

    /// The TAT last seen for `key`, and whether its item was seen carrying `rate` and `name`.
    pub(super) fn seen(&self, key: &str, rate: &Rate, name: &str) -> (Option<Timestamp>, bool) {
        self.hints
            .update(key, |h| {
                let known = h
                    .stamp
                    .as_ref()
                    .is_some_and(|s| s.matches(rate, Some(name)));
                (Some(h.tat), known)
            })
            .unwrap_or((None, false))
    }

    /// A new TAT for `key`; the stamp seen stays (`None`: no TAT, the hint goes).
    pub(super) fn remember(&self, key: &str, tat: Option<Timestamp>) {
        match tat {
            Some(t) => self.hints.upsert(
                key.to_string(),
                || Hint {
                    tat: t,
                    stamp: None,
                },
                |h| h.tat = t,
            ),
            None => self.hints.remove(key).is_some(),
        };
    }

    /// A TAT and the stamp seen with it (a whole item read, or a write that set the stamp).
    pub(super) fn remember_seen(
        &self,
        key: &str,
        tat: Option<Timestamp>,
        stamp: Option<gcra_write::RateStamp>,
    ) {
        match tat {
            Some(tat) => self.hints.insert(key.to_string(), Hint { tat, stamp }),
            None => self.hints.remove(key).is_some(),
        };
    }

    /// The bucket of `name` for `id` as the limits `set` places it.
    pub(super) fn locate_in(
        &self,
        set: &LimitSet,
        name: &str,
        id: &str,
    ) -> Result<Located, KvError> {
        let mut bucket = set.bucket(name, id)?;
        if let Some(t) = &self.scope {
            bucket.scope = Some(t.to_string());
            crate::isolation::check_key(t, &bucket.key())
                .map_err(|e| KvError::Store(crate::Error::CrossTenantKey(e)))?;
        }
        let rate = set.rate(&bucket)?;
        let shards = self.shard_count(set, &bucket, &rate);
        Ok(Located {
            bucket,
            rate,
            shards,
        })
    }

    /// [`locate_in`](Self::locate_in) the current limits.
    pub(super) fn locate(&self, name: &str, id: &str) -> Result<Located, KvError> {
        self.locate_in(&self.limits.current(), name, id)
    }

    pub(super) fn target(&self, bucket: &BucketKey) -> Target {
        Target::bucket(&self.table, &bucket.key(), self.ttl_margin)
    }

    pub(super) fn outcome(bucket: &BucketKey, rate: Rate, decision: Decision) -> Outcome {
        Self::outcome_at(bucket, &bucket.key(), rate, decision)
    }

    /// An outcome decided by the item `key` (a shard's, for a sharded limit).
    pub(super) fn outcome_at(
        bucket: &BucketKey,
        key: &str,
        rate: Rate,
        decision: Decision,
    ) -> Outcome {
        Outcome {
            limit: bucket.display_name(),
            bucket: key.to_string(),
            rate,
            decision,
            shadow_denied: false,
        }
    }
}

/// A bucket as the current limits place it: its key, its rate and its number of shards.
pub(in crate::kv) struct Located {
    pub(super) bucket: BucketKey,
    pub(super) rate: Rate,
    pub(super) shards: u32,
}
