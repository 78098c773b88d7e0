//! The DynamoDB-backed key-value limiter: spend, check, refund, reset and an all-or-nothing batch
//! spend over the buckets table, one TAT per bucket (see [`super::write`] for the conditional
//! writes). Each operation's doc comment states its DynamoDB call count.

use std::collections::{HashMap, HashSet};
use std::sync::{Arc, Mutex};
use std::time::Duration;

use aws_sdk_dynamodb::error::SdkError;
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
        Outcome {
            limit: bucket.display_name(),
            bucket: bucket.key(),
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
        let key = bucket.key();
        let target = self.target(&bucket);
        let pending = self.take_pending(&key);
        let state = StateWrite {
            limit_name: Some(bucket.name.clone()),
            pending_throttles: pending.map_or(0, |p| p.count),
            first_throttle: pending.map(|p| p.first),
        };
        let mut plan = SpendPlan::spend(rate, now, cost, self.hint(&key))?.with_state(state);
        for _ in 0..MAX_ATTEMPTS {
            match plan.update_item(&self.client, &target).send().await {
                Ok(out) => {
                    let new_tat = write::stored_tat(out.attributes(), write::attr::TAT);
                    let d = plan.admitted(new_tat, None);
                    self.remember(&key, Some(d.new_tat));
                    return Ok(Self::outcome(&bucket, rate, d));
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
                            return Ok(Self::outcome(&bucket, rate, d));
                        }
                        Next::Retry(p) => plan = p,
                    }
                }
                Err(e) => {
                    self.keep_pending(&key, pending, 0, now, None);
                    return Err(crate::Error::dynamo("UpdateItem", e).into());
                }
            }
        }
        self.keep_pending(&key, pending, 0, now, None);
        Err(KvError::Contended(key))
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
        let key = bucket.key();
        let target = self.target(&bucket);
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
                    return Ok(Self::outcome(&bucket, rate, d));
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
                        Next::Refused(d) => return Ok(Self::outcome(&bucket, rate, d)),
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

    /// Spends from several buckets at once, all or nothing: either every bucket admits its cost and
    /// all are spent, or nothing is written and the strictest denial is returned.
    ///
    /// DynamoDB calls: **1** `TransactWriteItems` when warm (admitted, or denied from the old items
    /// the cancellation reasons carry); **≤ 2** cold. Transaction conflicts with concurrent writers
    /// are retried, up to 4 transactions in all.
    pub async fn spend_batch(
        &self,
        spends: &[(&str, &str, u64)],
        now: Timestamp,
    ) -> Result<BatchOutcome, KvError> {
        if spends.is_empty() {
            return Err(KvError::EmptyBatch);
        }
        if spends.len() > MAX_BATCH {
            return Err(KvError::BatchTooLarge(spends.len()));
        }
        let set = self.limits.current();
        let mut items = Vec::with_capacity(spends.len());
        let mut seen = HashSet::new();
        for (name, id, cost) in spends {
            if *cost == 0 {
                return Err(KvError::ZeroCost);
            }
            let (bucket, rate) = self.resolve(&set, name, id)?;
            if !seen.insert(bucket.key()) {
                return Err(KvError::DuplicateInBatch(bucket.display_name()));
            }
            let hint = self.hint(&bucket.key());
            let plan = SpendPlan::spend(rate, now, *cost, hint)?;
            items.push((bucket, rate, plan, hint));
        }
        let pendings: Vec<Option<Pending>> = items
            .iter()
            .map(|(b, ..)| self.take_pending(&b.key()))
            .collect();
        for ((bucket, _, plan, _), p) in items.iter_mut().zip(&pendings) {
            plan.state = Some(StateWrite {
                limit_name: Some(bucket.name.clone()),
                pending_throttles: p.map_or(0, |p| p.count),
                first_throttle: p.map(|p| p.first),
            });
        }
        let keys: Vec<String> = items.iter().map(|(b, ..)| b.key()).collect();
        let give_back = |denied: &HashMap<String, Option<i64>>| {
            for (key, p) in keys.iter().zip(&pendings) {
                let version = denied.get(key).copied().flatten();
                self.keep_pending(key, *p, u64::from(denied.contains_key(key)), now, version);
            }
        };
        for attempt in 0..MAX_ATTEMPTS {
            let mut writes = Vec::with_capacity(items.len());
            for (bucket, _, plan, _) in &items {
                let update = plan.transact_update(&self.target(bucket))?;
                writes.push(TransactWriteItem::builder().update(update).build());
            }
            let res = self
                .client
                .transact_write_items()
                .set_transact_items(Some(writes))
                .send()
                .await;
            match res {
                Ok(_) => {
                    let mut exact = true;
                    let each: Vec<Outcome> = items
                        .iter()
                        .map(|(bucket, rate, plan, hint)| {
                            exact &= plan.case == Case::Idle;
                            let d = plan.admitted(None, *hint);
                            self.remember(&bucket.key(), Some(d.new_tat));
                            Self::outcome(bucket, *rate, d)
                        })
                        .collect();
                    return Ok(strictest(each, exact));
                }
                Err(SdkError::ServiceError(e))
                    if matches!(
                        e.err(),
                        TransactWriteItemsError::TransactionCanceledException(_)
                    ) =>
                {
                    let reasons = match e.err() {
                        TransactWriteItemsError::TransactionCanceledException(c) => {
                            c.cancellation_reasons().to_vec()
                        }
                        _ => Vec::new(),
                    };
                    let mut denials = Vec::new();
                    let mut conflict = false;
                    for (i, (bucket, rate, plan, hint)) in items.iter_mut().enumerate() {
                        let reason = reasons.get(i);
                        match reason.and_then(|r| r.code()) {
                            Some("ConditionalCheckFailed") => {
                                let old = reason.and_then(|r| r.item());
                                let tat = write::stored_tat(old, write::attr::TAT);
                                self.remember(&bucket.key(), tat);
                                *hint = tat;
                                match plan.on_condition_failed(old, write::attr::TAT) {
                                    Next::Refused(d) => {
                                        let version = old
                                            .and_then(|i| write::int_attr(i, write::attr::VERSION));
                                        denials.push((Self::outcome(bucket, *rate, d), version));
                                    }
                                    Next::Retry(p) => *plan = p,
                                }
                            }
                            Some("None") | None => {}
                            Some(_) => conflict = true,
                        }
                    }
                    if !denials.is_empty() {
                        let denied: HashMap<String, Option<i64>> = denials
                            .iter()
                            .map(|(o, v)| (o.bucket.clone(), *v))
                            .collect();
                        give_back(&denied);
                        // The others' numbers as last seen, for the caller's headers.
                        let mut each = Vec::with_capacity(items.len());
                        for (bucket, rate, plan, hint) in &items {
                            match denials.iter().find(|(o, _)| o.bucket == bucket.key()) {
                                Some((o, _)) => each.push(o.clone()),
                                None => {
                                    let d = gcra::spend(rate, *hint, now, plan.cost)?;
                                    each.push(Self::outcome(bucket, *rate, d));
                                }
                            }
                        }
                        return Ok(strictest(each, false));
                    }
                    if conflict {
                        // Another transaction held one of the items: back off briefly.
                        tokio::time::sleep(Duration::from_millis(5 << attempt)).await;
                    }
                }
                Err(e) => {
                    give_back(&HashMap::new());
                    return Err(crate::Error::dynamo("TransactWriteItems", e).into());
                }
            }
        }
        give_back(&HashMap::new());
        Err(KvError::Contended(
            items
                .iter()
                .map(|(b, ..)| b.display_name())
                .collect::<Vec<_>>()
                .join(","),
        ))
    }
}

/// Folds a batch's decisions into the strictest one.
fn strictest(each: Vec<Outcome>, exact: bool) -> BatchOutcome {
    let denied = each
        .iter()
        .filter(|o| !o.decision.allowed)
        .max_by_key(|o| o.decision.retry_in);
    let (decision, deciding) = match denied {
        Some(o) => (o.decision, o.limit.clone()),
        None => {
            let tightest = each.iter().min_by_key(|o| o.decision.remaining);
            let retry_in = each
                .iter()
                .map(|o| o.decision.retry_in)
                .max()
                .unwrap_or_default();
            let reset_in = each
                .iter()
                .map(|o| o.decision.reset_in)
                .max()
                .unwrap_or_default();
            match tightest {
                Some(o) => (
                    Decision {
                        retry_in,
                        reset_in,
                        ..o.decision
                    },
                    o.limit.clone(),
                ),
                None => (
                    Decision {
                        allowed: true,
                        remaining: 0,
                        retry_in,
                        reset_in,
                        new_tat: Timestamp::default(),
                    },
                    String::new(),
                ),
            }
        }
    };
    BatchOutcome {
        decision,
        deciding,
        each,
        exact,
    }
}
