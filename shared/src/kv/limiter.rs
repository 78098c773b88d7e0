//! The DynamoDB-backed key-value limiter: spend, check, refund, reset and an all-or-nothing batch
//! spend over the buckets table, one TAT per bucket (see [`super::write`] for the conditional
//! writes). Each operation's doc comment states its DynamoDB call count.

use std::collections::{HashMap, HashSet};
use std::sync::Arc;
use std::time::Duration;

use aws_sdk_dynamodb::error::{ProvideErrorMetadata, SdkError};
use aws_sdk_dynamodb::operation::update_item::UpdateItemError;
use aws_sdk_dynamodb::types::TransactWriteItem;
use aws_sdk_dynamodb::Client;
use serde::Serialize;

use super::config::{BucketKey, KeyError, LimitSet, Limits};
use super::write::{self, Case, Next, SpendPlan, StateWrite, Target};
use crate::cache::{Cache, WhenFull};
use crate::clock::Timestamp;
use crate::dynamo::item::{n, num, s, Item};
use crate::dynamo::retry::{self, Backoff, Jitter};
use crate::dynamo::txn::{self, Reason};
use crate::gcra::{self, Decision, Rate, RateError};

/// Default time an idle bucket's item outlives the moment it is full again: longer than a signed
/// request can take to reach DynamoDB (15 minutes, else it is refused as expired) plus a refund's
/// own call, so no send of an applied refund can land after its item's refund id was deleted with
/// the item (decision 0605).
pub const DEFAULT_TTL_MARGIN: Duration = Duration::from_secs(16 * 60);

/// Most conditional writes one operation makes. Two suffice unless other writers refund or reset
/// the same bucket between them (each failed write returns a TAT newer than the last), or
/// transactions conflict.
pub const MAX_ATTEMPTS: usize = 4;

/// The pause before a transaction retried after a conflict: 5, 10, 20 ms (no jitter).
const CONFLICT_BACKOFF: Backoff = Backoff {
    first_ms: 5,
    max_doublings: MAX_ATTEMPTS as u32,
    jitter: Jitter::None,
};

mod batch;
mod items;
mod lease;
pub use items::{KeyedRefund, REFUND_KEY_TTL};
pub use lease::{Lease, LeaseOutcome};
mod sharded;
pub use sharded::item_write_budget;
mod throttles;
use throttles::{Held, Pending};

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
    /// An acquire under a lease id that already holds another estimate on this bucket (or a lease
    /// held elsewhere): never granted, since nothing would be spent for it.
    #[error("lease {lease} on {bucket} already holds {held}, not the {asked} asked for")]
    LeaseMismatch {
        lease: String,
        bucket: String,
        held: u64,
        asked: u64,
    },
    /// The lease's deadline had passed: its amount was returned to the bucket.
    #[error("lease {0} has expired; its amount was returned")]
    LeaseExpired(String),
    #[error("lease id {0:?} must be 1-200 printable characters")]
    BadLeaseId(String),
    #[error("idempotency key {0:?} must be 1-200 printable characters")]
    BadIdempotencyKey(String),
    /// A keyed refund writes one bucket item with its marker; a sharded limit's refund goes to
    /// whichever shard has room.
    #[error("limit {0} is sharded: a refund with an idempotency key needs a limit of one item")]
    ShardedKeyedRefund(String),
    #[error("a batch needs at least one limit")]
    EmptyBatch,
    #[error("a batch of {0} limits exceeds DynamoDB's {MAX_BATCH} items per transaction")]
    BatchTooLarge(usize),
    #[error("bucket {0} is contended: no decision after {MAX_ATTEMPTS} conditional writes")]
    Contended(String),
    #[error(transparent)]
    Store(#[from] crate::Error),
}

/// What this process last saw of a bucket's item.
#[derive(Debug, Clone)]
struct Hint {
    tat: Timestamp,
    /// The rate and name the item carried (`None`: not seen, so the next write sets them).
    stamp: Option<write::Stamp>,
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

/// A limiter over one buckets table. Cheap to share (`Arc`); its hints and pending throttle counts
/// are per process, like a Lambda sandbox's.
#[derive(Debug)]
pub struct Limiter {
    client: Client,
    table: String,
    limits: Arc<Limits>,
    ttl_margin: Duration,
    /// What this process last saw of each bucket item, to bet on the right case and to leave
    /// out a stamp the item already carries (a hint is only an optimisation: a wrong or missing
    /// one costs one more write, or a stamp written again).
    hints: Cache<String, Hint>,
    pending: Held,
    /// Which shards a sharded spend tries, and the write budget behind `shards: auto`.
    picker: crate::shard::Picker,
    item_write_budget: u64,
    /// The tenant whose key space every item key starts in ([`Limiter::for_tenant`]).
    scope: Option<crate::ids::TenantId>,
}

impl Limiter {
    pub fn new(client: Client, table: impl Into<String>, limits: Arc<Limits>) -> Self {
        Limiter {
            client,
            table: table.into(),
            limits,
            ttl_margin: DEFAULT_TTL_MARGIN,
            hints: Cache::new(MAX_HINTS, WhenFull::Clear),
            pending: Held::default(),
            picker: crate::shard::Picker::default(),
            item_write_budget: crate::shard::DEFAULT_ITEM_WRITE_BUDGET,
            scope: None,
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

    fn hint(&self, key: &str) -> Option<Timestamp> {
        self.hints.update(key, |h| h.tat)
    }

    /// The TAT last seen for `key`, and whether its item was seen carrying `rate` and `name`.
    fn seen(&self, key: &str, rate: &Rate, name: &str) -> (Option<Timestamp>, bool) {
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
    fn remember(&self, key: &str, tat: Option<Timestamp>) {
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
    fn remember_seen(&self, key: &str, tat: Option<Timestamp>, stamp: Option<write::Stamp>) {
        match tat {
            Some(tat) => self.hints.insert(key.to_string(), Hint { tat, stamp }),
            None => self.hints.remove(key).is_some(),
        };
    }

    /// The bucket of `name` for `id` as the limits `set` places it.
    fn locate_in(&self, set: &LimitSet, name: &str, id: &str) -> Result<Located, KvError> {
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
    fn locate(&self, name: &str, id: &str) -> Result<Located, KvError> {
        self.locate_in(&self.limits.current(), name, id)
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

    /// Spends `cost` (≥ 1) tokens of the bucket `at` (located by
    /// [`locate_cost`](Self::locate_cost); [`Limiter::spend`] meters the decision).
    ///
    /// DynamoDB calls: **1** `UpdateItem` when this process has seen the bucket (warm), whether
    /// admitted or denied (a denial is decided from the old item the failed condition returns);
    /// **≤ 2** when cold (a wrong guess of the case costs one more conditional write, never a read).
    /// A denial writes nothing: its throttle count is carried into the bucket's next write.
    /// A sharded limit (`shards:` in the limits file) tries up to two of its shards: a refusal
    /// costs 2 calls (decision 1500).
    pub(super) async fn spend_at(
        &self,
        at: &Located,
        cost: u64,
        now: Timestamp,
    ) -> Result<Outcome, KvError> {
        if at.shards > 1 {
            return self.spend_sharded(at, cost, now).await;
        }
        let key = at.bucket.key();
        let item = (key.as_str(), at.rate);
        self.write_item(Op::Spend, &at.bucket, item, cost, now)
            .await
            .map_err(|(e, _)| e)
    }

    /// [`locate`](Self::locate) for a spend or refund, which needs a cost of at least 1.
    pub(super) fn locate_cost(&self, name: &str, id: &str, cost: u64) -> Result<Located, KvError> {
        if cost == 0 {
            return Err(KvError::ZeroCost);
        }
        self.locate(name, id)
    }

    /// A spend (or a refund) of `cost` on one item, `key` (the bucket's, or one shard's). A spend
    /// carries the denials this process holds for the item, and a refused one is held in turn. A
    /// failure says whether DynamoDB throttled the write (nothing was written: another shard may
    /// be tried).
    async fn write_item(
        &self,
        op: Op,
        bucket: &BucketKey,
        (key, rate): (&str, Rate),
        cost: u64,
        now: Timestamp,
    ) -> Result<Outcome, (KvError, bool)> {
        let pending = match op {
            Op::Spend => self.pending.take(key),
            Op::Refund => None,
        };
        let over = crate::mutation::active_on(&self.table, crate::mutation::Mutation::KvOverBurst);
        let rate = if over && op == Op::Spend {
            Rate {
                burst: rate.burst + 1,
                ..rate
            }
        } else {
            rate
        };
        let (hint, stamp_known) = self.seen(key, &rate, &bucket.name);
        let state = StateWrite {
            limit_name: Some(bucket.name.clone()),
            pending_throttles: pending.map_or(0, |p| p.count),
            first_throttle: pending.map(|p| p.first),
            stamp_known,
        };
        let plan = match op {
            Op::Spend => SpendPlan::spend(rate, now, cost, hint),
            Op::Refund => SpendPlan::refund(rate, now, cost, hint),
        };
        let mut plan = plan.map_err(|e| (e.into(), false))?.with_state(state);
        if op == Op::Refund {
            plan = plan.with_refund_id(write::RefundId::fresh());
        }
        match self.write_key(key, plan).await {
            Ok(Wrote::Admitted(d)) => Ok(Self::outcome_at(bucket, key, rate, d)),
            Ok(Wrote::Refused(d, version)) => {
                if op == Op::Spend {
                    self.pending.keep(key, pending, 1, now, version);
                }
                Ok(Self::outcome_at(bucket, key, rate, d))
            }
            Err(e) => {
                self.pending.keep(key, pending, 0, now, None);
                Err(e)
            }
        }
    }

    /// `plan`'s conditional write on the item `key`, again under the right case while the guess
    /// is wrong (up to [`MAX_ATTEMPTS`] writes, never a read). A failure says whether DynamoDB
    /// throttled the write.
    ///
    /// A refund (it carries a [`RefundId`](write::RefundId)) is sent without the SDK's retries,
    /// which would send it again after a lost answer and so give the cost back twice: its own
    /// resends (a throttle, a conflict, or an answer that may have been lost: a 5xx or a timeout,
    /// up to [`SDK_ATTEMPTS`](crate::dynamo::SDK_ATTEMPTS) sends as the SDK's) carry the same id,
    /// and the old item of a failed condition tells whether an earlier send applied. A send whose
    /// answer was lost may still land at any later moment, after the sends that followed it, so
    /// the refund takes a new id (behind another refund's later one) only while every send of it
    /// was answered: it then applies at most once whatever order its sends land in (decision
    /// 0605).
    async fn write_key(&self, key: &str, mut plan: SpendPlan) -> Result<Wrote, (KvError, bool)> {
        let target = Target::bucket(&self.table, key, self.ttl_margin);
        // Whether a send of this refund id went unanswered: it may have applied, or may still
        // land later. Never cleared: a failed condition since shows only that it has not landed yet.
        let mut unsure = false;
        let mut resends = 0;
        let mut writes = 0;
        while writes < MAX_ATTEMPTS {
            writes += 1;
            let req = plan.update_item(&self.client, &target);
            let sent = if plan.refund_id.is_some() {
                let once = aws_sdk_dynamodb::config::Builder::default()
                    .retry_config(aws_sdk_dynamodb::config::retry::RetryConfig::disabled());
                req.customize().config_override(once).send().await
            } else {
                req.send().await
            };
            match sent {
                Ok(out) => {
                    let new_tat = match plan.case {
                        Case::RefundToFull => Some(plan.now),
                        _ => write::stored_tat(out.attributes(), write::attr::TAT),
                    };
                    let d = plan.admitted(new_tat, None);
                    match plan.stamp() {
                        Some(stamp) => self.remember_seen(key, Some(d.new_tat), Some(stamp)),
                        None => self.remember(key, Some(d.new_tat)),
                    }
                    return Ok(Wrote::Admitted(d));
                }
                Err(SdkError::ServiceError(e))
                    if matches!(e.err(), UpdateItemError::ConditionalCheckFailedException(_)) =>
                {
                    let old = match e.err() {
                        UpdateItemError::ConditionalCheckFailedException(c) => c.item().cloned(),
                        _ => None,
                    };
                    let stored = write::stored_tat(old.as_ref(), write::attr::TAT);
                    let seen = write::Stamp::of_item(old.as_ref());
                    plan.learn_stamp(seen.as_ref());
                    self.remember_seen(key, stored, seen);
                    if let Some(id) = plan.refund_id {
                        match write::RefundId::stored(old.as_ref()) {
                            // Applied by an earlier send whose answer was lost.
                            Some(s) if s == id => {
                                return Ok(Wrote::Admitted(plan.applied_as_stored(stored)))
                            }
                            // A later refund came in after a send we never heard back from: it may
                            // have applied, or may land yet (then failing behind the later id),
                            // so it is not sent again under a new id (never given back twice).
                            Some(s)
                                if s > id
                                    && unsure
                                    && !crate::mutation::active_on(
                                        &self.table,
                                        crate::mutation::Mutation::KvRefundAfterUnanswered,
                                    ) =>
                            {
                                tracing::warn!(
                                    bucket = key,
                                    "refund answer lost, another refund since: counted as applied"
                                );
                                return Ok(Wrote::Admitted(plan.applied_as_stored(stored)));
                            }
                            // Every send was answered, none applied, and none can land later: a
                            // later id got there first, and this refund goes after it.
                            Some(s) if s > id => plan.refund_id = Some(write::RefundId::after(s)),
                            // A smaller id (or none): not applied yet; retried under the same id.
                            _ => {}
                        }
                    }
                    match plan.on_condition_failed(old.as_ref(), write::attr::TAT) {
                        Next::Refused(d) => {
                            let version = old.as_ref().and_then(|i| num(i, write::attr::VERSION));
                            return Ok(Wrote::Refused(d, version));
                        }
                        Next::Retry(p) => plan = p,
                    }
                }
                Err(e) => {
                    let again = plan.refund_id.and(resend(&e));
                    if let Some(maybe_applied) =
                        again.filter(|_| resends + 1 < crate::dynamo::SDK_ATTEMPTS)
                    {
                        unsure |= maybe_applied;
                        if crate::mutation::active_on(
                            &self.table,
                            crate::mutation::Mutation::KvRefundFreshId,
                        ) {
                            plan = plan.with_refund_id(write::RefundId::fresh());
                        }
                        resends += 1;
                        writes -= 1;
                        Backoff::TRANSACTION.wait(resends).await;
                        continue;
                    }
                    let throttled = retry::is_throttle(e.code());
                    return Err((crate::Error::dynamo("UpdateItem", e).into(), throttled));
                }
            }
        }
        Err((KvError::Contended(key.to_string()), false))
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
        let at = self.locate(name, id)?;
        if at.shards > 1 {
            return self.check_sharded(&at, cost, now).await;
        }
        let (bucket, rate) = (&at.bucket, at.rate);
        let item = self.read(&bucket.key()).await?;
        let tat = write::stored_tat(item.as_ref(), write::attr::TAT);
        self.remember_seen(&bucket.key(), tat, write::Stamp::of_item(item.as_ref()));
        // The decision a spend of `cost` would get (remaining after it, as Boulder reports), with
        // the stored TAT left as it is.
        let d = gcra::spend(&rate, tat, now, cost)?;
        let d = Decision {
            new_tat: tat.map_or(now, |t| t.max(now)),
            ..d
        };
        Ok(Self::outcome(bucket, rate, d))
    }

    /// Gives `cost` tokens back to a bucket, never above its burst. Refused (not allowed) when the
    /// bucket is already full. Applied at most once, even when an answer is lost and the write is
    /// sent again (decision 0601); an error after such a loss may still mean it was applied, so a
    /// caller does not repeat it (a repeat is a new refund).
    ///
    /// DynamoDB calls, each 1 WCU (a failed condition is billed too): **1** `UpdateItem` warm or
    /// when refused; **≤ 2** cold; +1 per send whose answer was lost (a 5xx, a timeout), and +1
    /// behind another process's later refund id when every send was answered. Behind a later id
    /// after an unanswered send, the refund is counted as applied without another send: a send
    /// that may still land is never joined by one under a new id (decision 0605).
    pub async fn refund(
        &self,
        name: &str,
        id: &str,
        cost: u64,
        now: Timestamp,
    ) -> Result<Outcome, KvError> {
        let at = self.locate_cost(name, id, cost)?;
        if at.shards > 1 {
            return self.refund_sharded(&at, cost, now).await;
        }
        let key = at.bucket.key();
        let item = (key.as_str(), at.rate);
        self.write_item(Op::Refund, &at.bucket, item, cost, now)
            .await
            .map_err(|(e, _)| e)
    }
}

/// Whether a refund whose send failed with `e` may be sent again, and if so whether that send may
/// have been applied (`Some(true)`: a 5xx, a timeout, a connection lost after sending) or surely
/// was not (`Some(false)`: throttled, or a transaction held the item). `None`: do not resend.
fn resend(e: &SdkError<UpdateItemError, aws_smithy_runtime_api::http::Response>) -> Option<bool> {
    match e {
        SdkError::ServiceError(se) => {
            let code = se.err().code();
            if retry::is_throttle(code) || txn::is_conflict(code) {
                Some(false)
            } else if se.raw().status().is_server_error() {
                Some(true)
            } else {
                None
            }
        }
        SdkError::TimeoutError(_) | SdkError::DispatchFailure(_) | SdkError::ResponseError(_) => {
            Some(true)
        }
        _ => None,
    }
}

/// A bucket as the current limits place it: its key, its rate and its number of shards.
pub(super) struct Located {
    bucket: BucketKey,
    rate: Rate,
    shards: u32,
}

/// Which way a write moves a bucket.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
enum Op {
    Spend,
    Refund,
}

/// What a bucket item's conditional writes came to.
enum Wrote {
    Admitted(Decision),
    /// Refused from the old item, at its `version`.
    Refused(Decision, Option<i64>),
}
