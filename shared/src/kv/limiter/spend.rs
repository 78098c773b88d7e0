//! Spending, checking and refunding one bucket: the conditional write loop.
//!
//! [`Limiter::spend`] meters its decisions (`Decisions` with `Path` kv, `Refusals` by limit name)
//! and applies shadow limits: a denial by a limit declared `shadow: true` is logged, metered
//! `shadow_refused`, and returned allowed (decision 1000). A denial writes nothing in either mode,
//! so a shadow limit's bucket holds exactly what an enforced one would.

use std::time::Instant;

use crate::telemetry::catalogue::{self, Path};

use aws_sdk_dynamodb::error::{ProvideErrorMetadata, SdkError};
use aws_sdk_dynamodb::operation::update_item::UpdateItemError;

use super::super::config::BucketKey;
use super::outcome::{KvError, Outcome, MAX_ATTEMPTS};
use super::state::{Limiter, Located};
use crate::clock::Timestamp;
use crate::dynamo::item::num;
use crate::dynamo::retry::{self, Backoff, Jitter};
use crate::dynamo::txn::{self};
use crate::gcra::{self, Decision, Rate};
use crate::gcra_write::{self, Case, Next, SpendPlan, StateWrite, Target};
use crate::region::Regional;

/// The pause before a transaction retried after a conflict: 5, 10, 20 ms (no jitter).
pub(super) const CONFLICT_BACKOFF: Backoff = Backoff {
    first_ms: 5,
    max_doublings: MAX_ATTEMPTS as u32,
    jitter: Jitter::None,
};

impl Limiter {
    /// Spends `cost` (≥ 1) tokens of `name`'s bucket for `id`, and meters the decision; a shadow
    /// limit's denial comes back allowed, with `shadow_denied`. Calls and cost: those of
    /// [`Limiter::spend_at`]. Bad input (an unknown name, a bad id, cost 0) is not a
    /// decision and is not metered.
    pub async fn spend(
        &self,
        name: &str,
        id: &str,
        cost: u64,
        now: Timestamp,
    ) -> Result<Outcome, KvError> {
        let started = Instant::now();
        let mut out = match self.locate_cost(name, id, cost) {
            Ok(mut at) => match self.regional_share(&mut at, now) {
                None => self.spend_at(&at, cost, now).await,
                Some(refused) => Ok(refused),
            },
            Err(e) => Err(e),
        };
        let shadow = self.limits().current().name(name).is_some_and(|d| d.shadow);
        let (outcome, limit) = match &mut out {
            Ok(o) if o.decision.allowed => (catalogue::Outcome::Admitted, None),
            Ok(o) if shadow => {
                tracing::info!(limit = %o.limit, "shadow: would deny");
                o.decision.allowed = true;
                o.shadow_denied = true;
                (catalogue::Outcome::ShadowRefused, Some(name))
            }
            Ok(_) => (catalogue::Outcome::Refused, Some(name)),
            Err(KvError::Key(_) | KvError::ZeroCost) => return out,
            Err(_) => (catalogue::Outcome::Error, None),
        };
        catalogue::decision(Path::Kv, outcome, limit, None, started.elapsed());
        out
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
    pub(in crate::kv) async fn spend_at(
        &self,
        at: &Located,
        cost: u64,
        now: Timestamp,
    ) -> Result<Outcome, KvError> {
        if at.shards > 1 {
            return self.spend_sharded(at, cost, now).await;
        }
        self.write_unsharded(Op::Spend, at, cost, now).await
    }

    /// A spend or refund of `cost` on the one item of an unsharded bucket.
    async fn write_unsharded(
        &self,
        op: Op,
        at: &Located,
        cost: u64,
        now: Timestamp,
    ) -> Result<Outcome, KvError> {
        let key = at.bucket.key();
        let item = (key.as_str(), at.rate);
        let written = self.write_item(op, &at.bucket, item, cost, now).await;
        written.map_err(|(e, _)| e)
    }

    /// Sets a global limit's bucket to this region's share of it (decision 4200), or answers the
    /// refusal to give without a call when the region holds no usable allotment. No call either
    /// way.
    fn regional_share(&self, at: &mut Located, now: Timestamp) -> Option<Outcome> {
        let allotments = self.regional.as_ref()?;
        match allotments.rate_for(&at.bucket.key(), now) {
            Regional::NotGlobal => None,
            Regional::Share(rate) => {
                at.rate = rate;
                None
            }
            Regional::Refuse { retry_in } => {
                let decision = Decision {
                    allowed: false,
                    remaining: 0,
                    retry_in,
                    reset_in: retry_in,
                    new_tat: now,
                };
                Some(Self::outcome(&at.bucket, at.rate, decision))
            }
        }
    }

    /// [`locate`](Self::locate) for a spend or refund, which needs a cost of at least 1.
    pub(in crate::kv) fn locate_cost(
        &self,
        name: &str,
        id: &str,
        cost: u64,
    ) -> Result<Located, KvError> {
        if cost == 0 {
            return Err(KvError::ZeroCost);
        }
        self.locate(name, id)
    }

    /// A spend (or a refund) of `cost` on one item, `key` (the bucket's, or one shard's). A spend
    /// carries the denials this process holds for the item, and a refused one is held in turn. A
    /// failure says whether DynamoDB throttled the write (nothing was written: another shard may
    /// be tried).
    pub(super) async fn write_item(
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
            plan = plan.with_refund_id(gcra_write::RefundId::fresh());
        }
        match self.write_key(key, plan).await {
            Ok(WriteVerdict::Admitted(d)) => Ok(Self::outcome_at(bucket, key, rate, d)),
            Ok(WriteVerdict::Refused(d, version)) => {
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
    pub(super) async fn write_key(
        &self,
        key: &str,
        mut plan: SpendPlan,
    ) -> Result<WriteVerdict, (KvError, bool)> {
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
                        _ => gcra_write::stored_tat(out.attributes(), gcra_write::attr::TAT),
                    };
                    let d = plan.admitted(new_tat, None);
                    match plan.stamp() {
                        Some(stamp) => self.remember_seen(key, Some(d.new_tat), Some(stamp)),
                        None => self.remember(key, Some(d.new_tat)),
                    }
                    return Ok(WriteVerdict::Admitted(d));
                }
                Err(SdkError::ServiceError(e))
                    if matches!(e.err(), UpdateItemError::ConditionalCheckFailedException(_)) =>
                {
                    let old = match e.err() {
                        UpdateItemError::ConditionalCheckFailedException(c) => c.item().cloned(),
                        _ => None,
                    };
                    let stored = gcra_write::stored_tat(old.as_ref(), gcra_write::attr::TAT);
                    let seen = gcra_write::RateStamp::of_item(old.as_ref());
                    plan.learn_stamp(seen.as_ref());
                    self.remember_seen(key, stored, seen);
                    if let Some(id) = plan.refund_id {
                        match gcra_write::RefundId::stored(old.as_ref()) {
                            // Applied by an earlier send whose answer was lost.
                            Some(s) if s == id => {
                                return Ok(WriteVerdict::Admitted(plan.applied_as_stored(stored)))
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
                                return Ok(WriteVerdict::Admitted(plan.applied_as_stored(stored)));
                            }
                            // Every send was answered, none applied, and none can land later: a
                            // later id got there first, and this refund goes after it.
                            Some(s) if s > id => {
                                plan.refund_id = Some(gcra_write::RefundId::after(s))
                            }
                            // A smaller id (or none): not applied yet; retried under the same id.
                            _ => {}
                        }
                    }
                    match plan.on_condition_failed(old.as_ref(), gcra_write::attr::TAT) {
                        Next::Refused(d) => {
                            let version =
                                old.as_ref().and_then(|i| num(i, gcra_write::attr::VERSION));
                            return Ok(WriteVerdict::Refused(d, version));
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
                            plan = plan.with_refund_id(gcra_write::RefundId::fresh());
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
        let tat = gcra_write::stored_tat(item.as_ref(), gcra_write::attr::TAT);
        self.remember_seen(
            &bucket.key(),
            tat,
            gcra_write::RateStamp::of_item(item.as_ref()),
        );
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
        self.write_unsharded(Op::Refund, &at, cost, now).await
    }
}

/// Whether a refund whose send failed with `e` may be sent again, and if so whether that send may
/// have been applied (`Some(true)`: a 5xx, a timeout, a connection lost after sending) or surely
/// was not (`Some(false)`: throttled, or a transaction held the item). `None`: do not resend.
pub(super) fn resend(
    e: &SdkError<UpdateItemError, aws_smithy_runtime_api::http::Response>,
) -> Option<bool> {
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

/// Which way a write moves a bucket.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(super) enum Op {
    Spend,
    Refund,
}

/// What a bucket item's conditional writes came to.
pub(super) enum WriteVerdict {
    Admitted(Decision),
    /// Refused from the old item, at its `version`.
    Refused(Decision, Option<i64>),
}
