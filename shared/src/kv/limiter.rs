//! The DynamoDB-backed key-value limiter: spend, check, refund, reset and an all-or-nothing batch
//! spend over the buckets table, one TAT per bucket (see [`super::write`] for the conditional
//! writes). Each operation's doc comment states its DynamoDB call count.

use std::collections::{HashMap, HashSet};
use std::sync::{Arc, Mutex};
use std::time::Duration;

use aws_sdk_dynamodb::error::{ProvideErrorMetadata, SdkError};
use aws_sdk_dynamodb::operation::transact_write_items::TransactWriteItemsError;
use aws_sdk_dynamodb::operation::update_item::UpdateItemError;
use aws_sdk_dynamodb::types::{AttributeValue, TransactWriteItem};
use aws_sdk_dynamodb::Client;
use serde::Serialize;

use super::config::{BucketKey, KeyError, LimitSet, Limits};
use super::write::{self, Case, Next, SpendPlan, StateWrite, Target};
use crate::clock::Timestamp;
use crate::gcra::{self, Decision, Rate, RateError};

/// Default time an idle bucket's item outlives the moment it is full again (for the state view).
pub const DEFAULT_TTL_MARGIN: Duration = Duration::from_secs(60);

/// Most conditional writes one operation makes. Two suffice unless other writers refund or reset
/// the same bucket between them (each failed write returns a TAT newer than the last), or
/// transactions conflict.
const MAX_ATTEMPTS: usize = 4;

mod batch;
mod lease;
pub use lease::{Lease, LeaseOutcome};
mod sharded;
pub use sharded::item_write_budget;

/// Most buckets in one batch spend: DynamoDB's limit of items per transaction.
pub const MAX_BATCH: usize = 100;

/// Hints kept per limiter before the map is cleared (a hint is only an optimisation); also the
/// most buckets with held denials.
const MAX_HINTS: usize = 100_000;

#[derive(Debug, thiserror::Error)]
pub enum KvError {
    #[error(transparent)]
    Key(#[from] KeyError),
    #[error(transparent)]
    Rate(#[from] RateError),
    #[error("a spend needs a cost of at least 1 (use check for 0)")]
    ZeroCost,
    #[error("bucket {0} appears more than once in a batch")]
    DuplicateInBatch(String),
    /// A batch is one transaction over fixed items; a sharded limit is spent on its own.
    #[error("limit {0} is sharded and cannot be part of a batch spend (spend it on its own)")]
    ShardedInBatch(String),
    /// A batch is all-or-nothing: a shadow limit's would-deny cannot be let through without
    /// letting the other limits' spends through too, so shadow limits are spent on their own.
    #[error(
        "limit {0} is in shadow mode and cannot be part of a batch spend (spend it on its own)"
    )]
    ShadowInBatch(String),
    #[error("no lease {0}")]
    LeaseNotFound(String),
    /// The lease's deadline had passed: its amount was returned to the bucket.
    #[error("lease {0} has expired; its amount was returned")]
    LeaseExpired(String),
    #[error("lease id {0:?} must be 1-200 printable characters")]
    BadLeaseId(String),
    #[error("a batch needs at least one limit")]
    EmptyBatch,
    #[error("a batch of {0} limits exceeds DynamoDB's {MAX_BATCH} items per transaction")]
    BatchTooLarge(usize),
    #[error("bucket {0} is contended: no decision after {MAX_ATTEMPTS} conditional writes")]
    Contended(String),
    #[error(transparent)]
    Store(#[from] crate::Error),
}

/// A decision about one bucket, with what the caller needs for headers and logs.
#[derive(Debug, Clone, PartialEq, Serialize)]
#[serde(rename_all = "camelCase")]
pub struct Outcome {
    /// `Name:id`.
    pub limit: String,
    /// The stored key, `{nameId}:{id}`.
    pub bucket: String,
    pub rate: Rate,
    #[serde(flatten)]
    pub decision: Decision,
    /// A shadow limit denied this spend and it was allowed anyway (nothing was spent).
    #[serde(skip_serializing_if = "std::ops::Not::not")]
    pub shadow_denied: bool,
}

/// The strictest of a batch's decisions, and each bucket's.
#[derive(Debug, Clone, PartialEq, Serialize)]
#[serde(rename_all = "camelCase")]
pub struct BatchOutcome {
    /// Denied if any bucket denied (the denial with the longest retry-in); otherwise allowed with
    /// the fewest remaining tokens and the longest retry-in and reset-in.
    pub decision: Decision,
    /// The bucket that decided (`Name:id`).
    pub deciding: String,
    pub each: Vec<Outcome>,
    /// False when some admitted bucket's numbers were computed from the TAT last seen rather than
    /// one DynamoDB returned (a transaction returns nothing on success).
    pub exact: bool,
}

#[derive(Debug, Clone, Copy)]
struct Pending {
    count: u64,
    first: Timestamp,
    /// The bucket's `version` in the item the last denial was decided from.
    version: Option<i64>,
}

/// A limiter over one buckets table. Cheap to share (`Arc`); its hints and pending throttle counts
/// are per process, like a Lambda sandbox's.
#[derive(Debug)]
pub struct Limiter {
    client: Client,
    table: String,
    limits: Arc<Limits>,
    ttl_margin: Duration,
    hints: Mutex<HashMap<String, Timestamp>>,
    pending: Mutex<HashMap<String, Pending>>,
    /// Which shards a sharded spend tries, and the write budget behind `shards: auto`.
    picker: crate::shard::Picker,
    item_write_budget: u64,
}

impl Limiter {
    pub fn new(client: Client, table: impl Into<String>, limits: Arc<Limits>) -> Self {
        Limiter {
            client,
            table: table.into(),
            limits,
            ttl_margin: DEFAULT_TTL_MARGIN,
            hints: Mutex::new(HashMap::new()),
            pending: Mutex::new(HashMap::new()),
            picker: crate::shard::Picker::default(),
            item_write_budget: crate::shard::DEFAULT_ITEM_WRITE_BUDGET,
        }
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
        if let Ok(mut h) = self.hints.lock() {
            h.clear();
        }
    }

    fn hint(&self, key: &str) -> Option<Timestamp> {
        self.hints.lock().ok().and_then(|h| h.get(key).copied())
    }

    fn remember(&self, key: &str, tat: Option<Timestamp>) {
        if let Ok(mut h) = self.hints.lock() {
            if h.len() >= MAX_HINTS {
                h.clear();
            }
            match tat {
                Some(t) => h.insert(key.to_string(), t),
                None => h.remove(key),
            };
        }
    }

    fn take_pending(&self, key: &str) -> Option<Pending> {
        self.pending.lock().ok().and_then(|mut p| p.remove(key))
    }

    /// Puts back throttles that were not written, adding `denied` new ones at `now` (decided from
    /// an item at `version`).
    fn keep_pending(
        &self,
        key: &str,
        taken: Option<Pending>,
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
        if let Ok(mut p) = self.pending.lock() {
            if p.len() >= MAX_HINTS && !p.contains_key(key) {
                // Best effort (docs/decisions/0603): under a flood of distinct keys, drop rather
                // than grow without bound.
                return;
            }
            let e = p.entry(key.to_string()).or_insert(Pending {
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

    /// Writes the denials this process holds onto their buckets' items, each guarded by the
    /// bucket's `version` as seen when the denial was decided (optimistic lock): if anything wrote
    /// the bucket since, the write is skipped and the denials ride on this process's next spend of
    /// that bucket instead. Returns how many buckets were written.
    ///
    /// Off the admission path: call it after answering (or from the CLI). DynamoDB calls: **1**
    /// `UpdateItem` per bucket with held denials; none when there are none.
    pub async fn flush_throttles(&self, now: Timestamp) -> Result<usize, KvError> {
        let held: Vec<(String, Pending)> = match self.pending.lock() {
            Ok(mut p) => p.drain().collect(),
            Err(_) => return Ok(0),
        };
        let mut written = 0;
        let mut first_error = None;
        for (key, p) in held {
            let Some(version) = p.version else {
                self.keep_pending(&key, Some(p), 0, now, None);
                continue;
            };
            let res = self
                .client
                .update_item()
                .table_name(&self.table)
                .key(super::attr::BUCKET, AttributeValue::S(key.clone()))
                .condition_expression("#ver = :v")
                .update_expression(
                    "SET #ta = if_not_exists(#ta, :ft), #ua = :now ADD #tc :n, #ver :one",
                )
                .expression_attribute_names("#ver", write::attr::VERSION)
                .expression_attribute_names("#ta", write::attr::THROTTLED_AT)
                .expression_attribute_names("#tc", write::attr::THROTTLE_COUNT)
                .expression_attribute_names("#ua", write::attr::UPDATED_AT)
                .expression_attribute_values(":v", AttributeValue::N(version.to_string()))
                .expression_attribute_values(
                    ":ft",
                    AttributeValue::N(p.first.as_nanos().to_string()),
                )
                .expression_attribute_values(":now", AttributeValue::N(now.as_nanos().to_string()))
                .expression_attribute_values(":n", AttributeValue::N(p.count.to_string()))
                .expression_attribute_values(":one", AttributeValue::N("1".into()))
                .send()
                .await;
            match res {
                Ok(_) => written += 1,
                Err(SdkError::ServiceError(e))
                    if matches!(e.err(), UpdateItemError::ConditionalCheckFailedException(_)) =>
                {
                    self.keep_pending(&key, Some(Pending { version: None, ..p }), 0, now, None);
                }
                Err(e) => {
                    self.keep_pending(&key, Some(p), 0, now, None);
                    first_error.get_or_insert(crate::Error::dynamo("UpdateItem", e));
                }
            }
        }
        match first_error {
            Some(e) => Err(e.into()),
            None => Ok(written),
        }
    }

    /// Denials held in memory, not yet written (tests and diagnostics).
    pub fn held_throttles(&self) -> u64 {
        self.pending
            .lock()
            .map(|p| p.values().map(|p| p.count).sum())
            .unwrap_or(0)
    }

    fn resolve(&self, set: &LimitSet, name: &str, id: &str) -> Result<(BucketKey, Rate), KvError> {
        let bucket = set.bucket(name, id)?;
        let rate = set.rate(&bucket)?;
        Ok((bucket, rate))
    }

    fn target(&self, bucket: &BucketKey) -> Target {
        Target::bucket(&self.table, &bucket.key(), self.ttl_margin)
    }

    fn outcome(bucket: &BucketKey, rate: Rate, decision: Decision) -> Outcome {
        Self::outcome_at(bucket, &bucket.key(), rate, decision)
    }

    /// An outcome decided by the item `key` (a shard's, for a sharded limit).
    fn outcome_at(bucket: &BucketKey, key: &str, rate: Rate, decision: Decision) -> Outcome {
        Outcome {
            limit: bucket.display_name(),
            bucket: key.to_string(),
            rate,
            decision,
            shadow_denied: false,
        }
    }

    /// Spends `cost` (≥ 1) tokens of `name`'s bucket for `id`.
    ///
    /// DynamoDB calls: **1** `UpdateItem` when this process has seen the bucket (warm), whether
    /// admitted or denied (a denial is decided from the old item the failed condition returns);
    /// **≤ 2** when cold (a wrong guess of the case costs one more conditional write, never a read).
    /// A denial writes nothing: its throttle count is carried into the bucket's next write.
    /// A sharded limit (`shards:` in the limits file) tries up to two of its shards: a refusal
    /// costs 2 calls (decision 1500).
    pub(super) async fn spend_unmetered(
        &self,
        name: &str,
        id: &str,
        cost: u64,
        now: Timestamp,
    ) -> Result<Outcome, KvError> {
        if cost == 0 {
            return Err(KvError::ZeroCost);
        }
        let set = self.limits.current();
        let (bucket, rate) = self.resolve(&set, name, id)?;
        let shards = self.shard_count(&set, &bucket, &rate);
        if shards > 1 {
            return self.spend_sharded(&bucket, rate, shards, cost, now).await;
        }
        self.spend_key(&bucket, &bucket.key(), rate, cost, now)
            .await
            .map_err(|(e, _)| e)
    }

    /// [`spend`](Self::spend) on one item, `key` (the bucket's, or one shard's). A failure says
    /// whether DynamoDB throttled the write (nothing was written: another shard may be tried).
    async fn spend_key(
        &self,
        bucket: &BucketKey,
        key: &str,
        rate: Rate,
        cost: u64,
        now: Timestamp,
    ) -> Result<Outcome, (KvError, bool)> {
        let key = key.to_string();
        let target = Target::bucket(&self.table, &key, self.ttl_margin);
        let pending = self.take_pending(&key);
        let state = StateWrite {
            limit_name: Some(bucket.name.clone()),
            pending_throttles: pending.map_or(0, |p| p.count),
            first_throttle: pending.map(|p| p.first),
        };
        let mut plan = SpendPlan::spend(rate, now, cost, self.hint(&key))
            .map_err(|e| (e.into(), false))?
            .with_state(state);
        for _ in 0..MAX_ATTEMPTS {
            match plan.update_item(&self.client, &target).send().await {
                Ok(out) => {
                    let new_tat = write::stored_tat(out.attributes(), write::attr::TAT);
                    let d = plan.admitted(new_tat, None);
                    self.remember(&key, Some(d.new_tat));
                    return Ok(Self::outcome_at(bucket, &key, rate, d));
                }
                Err(SdkError::ServiceError(e))
                    if matches!(e.err(), UpdateItemError::ConditionalCheckFailedException(_)) =>
                {
                    let old = match e.err() {
                        UpdateItemError::ConditionalCheckFailedException(c) => c.item().cloned(),
                        _ => None,
                    };
                    self.remember(&key, write::stored_tat(old.as_ref(), write::attr::TAT));
                    match plan.on_condition_failed(old.as_ref(), write::attr::TAT) {
                        Next::Refused(d) => {
                            let version = old
                                .as_ref()
                                .and_then(|i| write::int_attr(i, write::attr::VERSION));
                            self.keep_pending(&key, pending, 1, now, version);
                            return Ok(Self::outcome_at(bucket, &key, rate, d));
                        }
                        Next::Retry(p) => plan = p,
                    }
                }
                Err(e) => {
                    self.keep_pending(&key, pending, 0, now, None);
                    let throttled = sharded::is_throttle(e.code());
                    return Err((crate::Error::dynamo("UpdateItem", e).into(), throttled));
                }
            }
        }
        self.keep_pending(&key, pending, 0, now, None);
        Err((KvError::Contended(key), false))
    }

    /// What a spend of `cost` (≥ 0) would decide now, without writing (cost 0: the bucket as it is).
    ///
    /// DynamoDB calls: **1** strongly consistent `GetItem`.
    pub async fn check(
        &self,
        name: &str,
        id: &str,
        cost: u64,
        now: Timestamp,
    ) -> Result<Outcome, KvError> {
        let set = self.limits.current();
        let (bucket, rate) = self.resolve(&set, name, id)?;
        let shards = self.shard_count(&set, &bucket, &rate);
        if shards > 1 {
            return self.check_sharded(&bucket, rate, shards, cost, now).await;
        }
        let item = self.read(&bucket.key()).await?;
        let tat = write::stored_tat(item.as_ref(), write::attr::TAT);
        self.remember(&bucket.key(), tat);
        // The decision a spend of `cost` would get (remaining after it, as Boulder reports), with
        // the stored TAT left as it is.
        let d = gcra::spend(&rate, tat, now, cost)?;
        let d = Decision {
            new_tat: tat.map_or(now, |t| t.max(now)),
            ..d
        };
        Ok(Self::outcome(&bucket, rate, d))
    }

    /// The stored item of a bucket (`None` if absent).
    ///
    /// DynamoDB calls: **1** strongly consistent `GetItem`.
    pub async fn read(
        &self,
        bucket_key: &str,
    ) -> Result<Option<HashMap<String, AttributeValue>>, KvError> {
        let out = self
            .client
            .get_item()
            .table_name(&self.table)
            .key(
                super::attr::BUCKET,
                AttributeValue::S(bucket_key.to_string()),
            )
            .consistent_read(true)
            .send()
            .await
            .map_err(|e| crate::Error::dynamo("GetItem", e))?;
        Ok(out.item().cloned())
    }

    /// Gives `cost` tokens back to a bucket, never above its burst. Refused (not allowed) when the
    /// bucket is already full.
    ///
    /// DynamoDB calls: **1** `UpdateItem` warm or when refused; **≤ 2** cold.
    pub async fn refund(
        &self,
        name: &str,
        id: &str,
        cost: u64,
        now: Timestamp,
    ) -> Result<Outcome, KvError> {
        if cost == 0 {
            return Err(KvError::ZeroCost);
        }
        let set = self.limits.current();
        let (bucket, rate) = self.resolve(&set, name, id)?;
        let shards = self.shard_count(&set, &bucket, &rate);
        if shards > 1 {
            return self.refund_sharded(&bucket, rate, shards, cost, now).await;
        }
        self.refund_key(&bucket, &bucket.key(), rate, cost, now)
            .await
    }

    /// [`refund`](Self::refund) on one item, `key` (the bucket's, or one shard's).
    async fn refund_key(
        &self,
        bucket: &BucketKey,
        key: &str,
        rate: Rate,
        cost: u64,
        now: Timestamp,
    ) -> Result<Outcome, KvError> {
        let key = key.to_string();
        let target = Target::bucket(&self.table, &key, self.ttl_margin);
        let state = StateWrite {
            limit_name: Some(bucket.name.clone()),
            ..StateWrite::default()
        };
        let mut plan = SpendPlan::refund(rate, now, cost, self.hint(&key))?.with_state(state);
        for _ in 0..MAX_ATTEMPTS {
            match plan.update_item(&self.client, &target).send().await {
                Ok(out) => {
                    let new_tat = match plan.case {
                        Case::RefundToFull => Some(now),
                        _ => write::stored_tat(out.attributes(), write::attr::TAT),
                    };
                    let d = plan.admitted(new_tat, None);
                    self.remember(&key, Some(d.new_tat));
                    return Ok(Self::outcome_at(bucket, &key, rate, d));
                }
                Err(SdkError::ServiceError(e))
                    if matches!(e.err(), UpdateItemError::ConditionalCheckFailedException(_)) =>
                {
                    let old = match e.err() {
                        UpdateItemError::ConditionalCheckFailedException(c) => c.item().cloned(),
                        _ => None,
                    };
                    self.remember(&key, write::stored_tat(old.as_ref(), write::attr::TAT));
                    match plan.on_condition_failed(old.as_ref(), write::attr::TAT) {
                        Next::Refused(d) => return Ok(Self::outcome_at(bucket, &key, rate, d)),
                        Next::Retry(p) => plan = p,
                    }
                }
                Err(e) => return Err(crate::Error::dynamo("UpdateItem", e).into()),
            }
        }
        Err(KvError::Contended(key))
    }

    /// Empties the bucket's record, so it is full again (and its state starts over).
    ///
    /// DynamoDB calls: **1** `DeleteItem`.
    pub async fn reset(&self, name: &str, id: &str, now: Timestamp) -> Result<Outcome, KvError> {
        let set = self.limits.current();
        let (bucket, rate) = self.resolve(&set, name, id)?;
        let shards = self.shard_count(&set, &bucket, &rate);
        if shards > 1 {
            self.reset_shards(&bucket, shards).await?;
            return Ok(Self::outcome(
                &bucket,
                rate,
                gcra::spend(&rate, None, now, 0)?,
            ));
        }
        self.client
            .delete_item()
            .table_name(&self.table)
            .key(super::attr::BUCKET, AttributeValue::S(bucket.key()))
            .send()
            .await
            .map_err(|e| crate::Error::dynamo("DeleteItem", e))?;
        self.remember(&bucket.key(), None);
        if let Ok(mut p) = self.pending.lock() {
            p.remove(&bucket.key());
        }
        let d = gcra::spend(&rate, None, now, 0)?;
        Ok(Self::outcome(&bucket, rate, d))
    }
}
