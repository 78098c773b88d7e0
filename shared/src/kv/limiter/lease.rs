//! Leases (decision 1501): hold an estimated cost on a GCRA bucket, then adjust it to the
//! real cost when it is known (LLM tokens), commit it, or let it expire and get the estimate back.
//!
//! A lease is an item `~lease:{n}:{bucket}:{leaseId}` in the buckets table (`leaseOf`, `amount`,
//! `deadline`, `heldUntil`), written in the same `TransactWriteItems` as the bucket's spend or
//! refund, so the bucket and the lease never disagree: a lease exists exactly when its amount is
//! spent. Lease ids belong to their bucket: the same id on another bucket is another lease.
//! Adjusting to an absolute amount is idempotent (a repeat finds the amount already there and writes
//! nothing). A refund gives back only what the refill has not already returned (`heldUntil`).

use std::collections::HashMap;

use aws_sdk_dynamodb::types::{AttributeValue, Delete, Put, Update};

use super::super::config::BucketKey;
use super::outcome::KvError;
use super::outcome::MAX_ATTEMPTS;
use super::spend::CONFLICT_BACKOFF;
use super::state::{Limiter, Located};
use crate::clock::Timestamp;
use crate::dynamo::item::{n, num, s};
use crate::dynamo::txn::{self, Reason};
use crate::gcra::{self, Decision, Rate};
use crate::gcra_write::{self, Case, Next, SpendPlan, Target};
use aws_sdk_dynamodb::types::TransactWriteItem;
use serde::Serialize;
use std::time::Duration;

/// Prefix of lease items; `~` is not a digit, so no bucket key `{nameId}:{id}` starts with it.
const LEASE_PREFIX: &str = "~lease:";
/// How long after its deadline a lease item stays (DynamoDB TTL), so a late expiry still refunds.
const LEASE_KEEP: Duration = Duration::from_secs(86_400);

mod lattr {
    pub const LEASE_OF: &str = "leaseOf";
    pub const AMOUNT: &str = "amount";
    pub const DEADLINE: &str = "deadline";
    pub const HELD_UNTIL: &str = "heldUntil";
}

/// A held cost.
#[derive(Debug, Clone, PartialEq, Eq, Serialize)]
#[serde(rename_all = "camelCase")]
pub struct Lease {
    pub id: String,
    /// The bucket item the amount is spent on.
    pub bucket: String,
    pub amount: u64,
    /// Epoch nanoseconds after which the lease expires and its amount is returned.
    pub deadline_ns: i64,
    /// Epoch nanoseconds until which some of the lease's tokens are not yet refilled: the TAT of
    /// a bucket that held only this lease. A refund gives back at most `heldUntil − now`, never
    /// what the refill has already returned (decision 1501). Before it was recorded: `i64::MIN`.
    pub held_until_ns: i64,
}

/// What a lease operation did.
#[derive(Debug, Clone, PartialEq, Serialize)]
#[serde(rename_all = "camelCase")]
pub struct LeaseOutcome {
    /// False when the bucket could not take the (extra) cost; the lease is then unchanged.
    pub granted: bool,
    /// The lease after the operation (`None` once committed, released or expired).
    pub lease: Option<Lease>,
    /// Whole tokens given back to the bucket by this operation: at most what the refill has not
    /// already returned, and never past full (decisions 1501, 0601).
    pub returned: u64,
    /// True when the operation had already been done (same lease id, same amount): nothing written.
    pub duplicate: bool,
    /// The bucket's decision, when the bucket was written or refused.
    pub decision: Option<Decision>,
    /// False when `decision`'s numbers were computed from the TAT this process last saw rather
    /// than known (a transaction returns nothing on success; as `BatchOutcome::exact`). The
    /// admission itself is exact either way.
    pub exact: bool,
}

impl LeaseOutcome {
    /// The answer to an operation already done: granted, nothing written or given back.
    fn already_done(lease: Option<Lease>) -> Self {
        LeaseOutcome {
            granted: true,
            lease,
            returned: 0,
            duplicate: true,
            decision: None,
            exact: true,
        }
    }
}

enum Tx {
    /// UpdateOutcome; the decision and whether its numbers are exact.
    Done(Option<Decision>, bool),
    /// The bucket's write was refused (a spend without room, a refund into a full bucket).
    BucketRefused(Decision),
    /// The lease item was not as expected (exists already, changed, gone).
    LeaseChanged,
}

/// The lease item's key, `~lease:{n}:{bucket}:{leaseId}` with `n` the length of the bucket key: ids
/// are scoped to their bucket (a lease id reused on another bucket is another lease there), and
/// the length keeps a bucket id and a lease id that both contain `:` from meeting on one key.
/// A tenant's lease keys start with `{tenant}:` like its buckets.
fn lease_key(bucket: &BucketKey, lease_id: &str) -> String {
    let b = bucket.key();
    match &bucket.scope {
        Some(t) => format!("{t}:{LEASE_PREFIX}{}:{b}:{lease_id}", b.len()),
        None => format!("{LEASE_PREFIX}{}:{b}:{lease_id}", b.len()),
    }
}

/// The condition that the lease item is still as read (`#a` amount, `#u` heldUntil), and its
/// values: a concurrent adjust changes one of them, and the loser reads again.
fn unchanged(lease: &Lease) -> (String, HashMap<String, AttributeValue>) {
    let values = HashMap::from([
        (":old".to_string(), n(lease.amount)),
        (":held".to_string(), n(lease.held_until_ns)),
    ]);
    if lease.held_until_ns == i64::MIN {
        // UpdateOutcome before `heldUntil` (or since, as that same "nothing known outstanding").
        let held = "(attribute_not_exists(#u) OR #u = :held)";
        return (format!("#a = :old AND {held}"), values);
    }
    ("#a = :old AND #u = :held".into(), values)
}

/// How much of the TAT giving `tokens` of `lease` back may move at `now`: at most their whole
/// increment, and at most `heldUntil − now`, the part of the lease the refill has not yet returned
/// (decision 1501). `None` when that is nothing.
///
/// `heldUntil` was set on the clock of the process that acquired (or last adjusted up) the lease,
/// `now` is this process's: a clock `s` behind that one gives back up to `s` of the TAT more than
/// is outstanding (never more than the tokens' increment), one ahead gives back `s` less. The same
/// skew already moves every spend, which measures the refill on its caller's clock
/// (docs/leases.md, "Clocks").
fn outstanding(rate: &Rate, lease: &Lease, tokens: u64, now: Timestamp) -> Option<Duration> {
    let all = i128::from(gcra::increment_nanos(rate, tokens));
    let left = i128::from(lease.held_until_ns) - i128::from(now.as_nanos());
    let span = all.min(left);
    (span > 0).then(|| Duration::from_nanos(u64::try_from(span).unwrap_or(u64::MAX)))
}

/// The whole tokens in a span of `inc` nanoseconds of the TAT (what a refund reports as returned).
fn whole_tokens(rate: &Rate, inc: i64) -> u64 {
    u64::try_from(inc / rate.emission_interval_nanos().max(1)).unwrap_or(0)
}

impl Limiter {
    /// Holds `estimate` (≥ 1) tokens of `name`/`id` under `lease_id` until `now + ttl`.
    ///
    /// DynamoDB calls: **1** `TransactWriteItems` (the spend and the lease item: 4 WCU) when warm,
    /// admitted or refused; ≤ 2 cold. A repeat (same bucket, id and estimate, before the deadline)
    /// is the same grant, nothing spent twice (+1 `GetItem`); the id holding another estimate is
    /// [`KvError::LeaseMismatch`], and one past its deadline is settled as a release and answered
    /// [`KvError::LeaseExpired`]. On a sharded limit the lease is held on one shard, tried as a
    /// spend tries them (2 random shards; a refusal costs 2 transactions); adjusting it up needs
    /// room on that shard.
    pub async fn acquire_lease(
        &self,
        name: &str,
        id: &str,
        lease_id: &str,
        estimate: u64,
        ttl: Duration,
        now: Timestamp,
    ) -> Result<LeaseOutcome, KvError> {
        let at = self.lease_bucket(name, id, lease_id)?;
        let lkey = lease_key(&at.bucket, lease_id);
        if estimate == 0 {
            return Err(KvError::ZeroCost);
        }
        let deadline = now.plus(ttl);
        // Unsharded: the bucket. Sharded: up to TRIES random shards, as a spend tries them.
        let candidates = if at.shards > 1 {
            self.candidates(&at, estimate, true)?
        } else {
            vec![(at.bucket.key(), at.rate)]
        };
        let mut refused = None;
        for (key, rate) in candidates {
            let plan = SpendPlan::spend(rate, now, estimate, self.hint(&key))?;
            let held_until = now.as_nanos().saturating_add(plan.inc);
            let put = Put::builder()
                .table_name(&self.table)
                .item(super::super::attr::BUCKET, s(lkey.clone()))
                .item(lattr::LEASE_OF, s(key.clone()))
                .item(lattr::AMOUNT, n(estimate))
                .item(lattr::DEADLINE, n(deadline.as_nanos()))
                .item(lattr::HELD_UNTIL, n(held_until))
                .item(
                    super::super::attr::EXPIRES_AT,
                    n(deadline.plus(LEASE_KEEP).as_secs()),
                )
                .condition_expression("attribute_not_exists(#b)")
                .expression_attribute_names("#b", super::super::attr::BUCKET)
                .build()
                .map_err(|e| crate::Error::build_request("a lease", e))?;
            let lease = TransactWriteItem::builder().put(put).build();
            match self.lease_tx(&key, Some(plan), lease).await? {
                Tx::Done(d, exact) => {
                    return Ok(LeaseOutcome {
                        granted: true,
                        lease: Some(Lease {
                            id: lease_id.to_string(),
                            bucket: key,
                            amount: estimate,
                            deadline_ns: deadline.as_nanos(),
                            held_until_ns: held_until,
                        }),
                        returned: 0,
                        duplicate: false,
                        decision: d,
                        exact,
                    })
                }
                Tx::BucketRefused(d) => refused = Some(d),
                Tx::LeaseChanged => {
                    return self.acquired_before(&at, lease_id, estimate, now).await
                }
            }
        }
        Ok(LeaseOutcome {
            granted: false,
            lease: None,
            returned: 0,
            duplicate: false,
            decision: refused,
            exact: true,
        })
    }

    /// Sets the lease's amount to `amount` (the real cost): the difference is spent (refused, lease
    /// unchanged, when the bucket has no room) or given back, as much of it as the refill has not
    /// already returned. Setting the amount it already has writes nothing (`duplicate`). An
    /// expired lease is released instead and [`KvError::LeaseExpired`] is the answer.
    ///
    /// DynamoDB calls: **1** strongly consistent `GetItem` (the lease) + **1** `TransactWriteItems`
    /// (bucket and lease: 4 WCU; the lease alone, 2 WCU, when nothing is left to give back); a
    /// duplicate costs only the `GetItem`.
    pub async fn adjust_lease(
        &self,
        name: &str,
        id: &str,
        lease_id: &str,
        amount: u64,
        now: Timestamp,
    ) -> Result<LeaseOutcome, KvError> {
        let at = self.lease_bucket(name, id, lease_id)?;
        for _ in 0..MAX_ATTEMPTS {
            let lease = self
                .read_lease(name, id, lease_id)
                .await?
                .ok_or_else(|| KvError::LeaseNotFound(format!("{lease_id} on {name}:{id}")))?;
            let rate = Self::lease_rate(&at, &lease)
                .ok_or_else(|| KvError::LeaseNotFound(format!("{lease_id} on {name}:{id}")))??;
            if lease.deadline_ns <= now.as_nanos() {
                self.release_lease(name, id, lease_id, now).await?;
                return Err(KvError::LeaseExpired(lease_id.to_string()));
            }
            if lease.amount == amount {
                return Ok(LeaseOutcome::already_done(Some(lease)));
            }
            let key = lease.bucket.clone();
            // Up: spend the difference, the lease's own TAT moves on by it. Down: give back what
            // is still outstanding of it (nothing once the refill has returned it all).
            let (plan, held_until, mut returned) = if amount > lease.amount {
                let more = SpendPlan::spend(rate, now, amount - lease.amount, self.hint(&key))?;
                let until = lease
                    .held_until_ns
                    .max(now.as_nanos())
                    .saturating_add(more.inc);
                (Some(more), until, 0)
            } else {
                match outstanding(&rate, &lease, lease.amount - amount, now) {
                    Some(span) => {
                        let back = SpendPlan::refund_span(rate, now, span, self.hint(&key));
                        let until = lease.held_until_ns.saturating_sub(back.inc);
                        let returned = whole_tokens(&rate, back.inc);
                        (Some(back), until, returned)
                    }
                    None => (None, lease.held_until_ns, 0),
                }
            };
            let update = self.lease_update(&at, &lease, amount, held_until, now)?;
            let item = || TransactWriteItem::builder().update(update.clone()).build();
            let mut tx = self.lease_tx(&key, plan, item()).await?;
            if let (Tx::BucketRefused(_), true) = (&tx, amount < lease.amount) {
                // The bucket is full: nothing to give back into it, the lease still shrinks.
                tx = self.lease_tx(&key, None, item()).await?;
                returned = 0;
            }
            let before = lease.clone();
            let after = Lease {
                amount,
                held_until_ns: held_until,
                ..lease
            };
            return Ok(match tx {
                Tx::Done(d, exact) => LeaseOutcome {
                    granted: true,
                    lease: Some(after),
                    returned,
                    duplicate: false,
                    decision: d,
                    exact,
                },
                // No room for the extra cost: the lease keeps its amount.
                Tx::BucketRefused(d) => LeaseOutcome {
                    granted: false,
                    lease: Some(before),
                    returned: 0,
                    duplicate: false,
                    decision: Some(d),
                    exact: true,
                },
                // Someone adjusted it meanwhile: read it again and decide afresh.
                Tx::LeaseChanged => continue,
            });
        }
        Err(KvError::Contended(lease_key(&at.bucket, lease_id)))
    }

    /// Ends a lease keeping its amount spent. DynamoDB calls: **1** `DeleteItem` (1 WCU).
    pub async fn commit_lease(
        &self,
        name: &str,
        id: &str,
        lease_id: &str,
    ) -> Result<LeaseOutcome, KvError> {
        let at = self.lease_bucket(name, id, lease_id)?;
        let out = self
            .client
            .delete_item()
            .table_name(&self.table)
            .key(
                super::super::attr::BUCKET,
                s(lease_key(&at.bucket, lease_id)),
            )
            .return_values(aws_sdk_dynamodb::types::ReturnValue::AllOld)
            .send()
            .await
            .map_err(|e| crate::Error::dynamo("DeleteItem", e))?;
        if out.attributes().is_none() {
            return Err(KvError::LeaseNotFound(format!("{lease_id} on {name}:{id}")));
        }
        Ok(LeaseOutcome {
            granted: true,
            lease: None,
            returned: 0,
            duplicate: false,
            decision: None,
            exact: true,
        })
    }

    /// Ends a lease and gives back what of its amount the refill has not already returned
    /// (decision 1501): an explicit release, and what expiry does. A lease already gone is a
    /// duplicate (nothing returned twice).
    ///
    /// DynamoDB calls: **1** `GetItem` + **1** `TransactWriteItems` (refund and delete: 4 WCU; the
    /// delete alone, 2 WCU, when nothing is left to give back).
    pub async fn release_lease(
        &self,
        name: &str,
        id: &str,
        lease_id: &str,
        now: Timestamp,
    ) -> Result<LeaseOutcome, KvError> {
        let at = self.lease_bucket(name, id, lease_id)?;
        for _ in 0..MAX_ATTEMPTS {
            let Some(lease) = self.read_lease(name, id, lease_id).await? else {
                return Ok(LeaseOutcome::already_done(None));
            };
            let (unchanged, values) = unchanged(&lease);
            let delete = Delete::builder()
                .table_name(&self.table)
                .key(
                    super::super::attr::BUCKET,
                    s(lease_key(&at.bucket, lease_id)),
                )
                .condition_expression(unchanged)
                .expression_attribute_names("#a", lattr::AMOUNT)
                .expression_attribute_names("#u", lattr::HELD_UNTIL)
                .set_expression_attribute_values(Some(values))
                .build()
                .map_err(|e| crate::Error::build_request("a lease delete", e))?;
            let item = || TransactWriteItem::builder().delete(delete.clone()).build();
            let rate = Self::lease_rate(&at, &lease)
                .ok_or_else(|| KvError::LeaseNotFound(format!("{lease_id} on {name}:{id}")))??;
            let key = lease.bucket.clone();
            // Only what the refill has not already returned goes back (decision 1501).
            let plan = outstanding(&rate, &lease, lease.amount, now)
                .map(|span| SpendPlan::refund_span(rate, now, span, self.hint(&key)));
            let mut returned = plan.as_ref().map_or(0, |p| whole_tokens(&rate, p.inc));
            let mut tx = self.lease_tx(&key, plan, item()).await?;
            if matches!(tx, Tx::BucketRefused(_)) {
                tx = self.lease_tx(&key, None, item()).await?;
                returned = 0;
            }
            match tx {
                Tx::Done(d, exact) => {
                    return Ok(LeaseOutcome {
                        granted: true,
                        lease: None,
                        returned,
                        duplicate: false,
                        decision: d,
                        exact,
                    })
                }
                Tx::LeaseChanged | Tx::BucketRefused(_) => continue,
            }
        }
        Err(KvError::Contended(lease_key(&at.bucket, lease_id)))
    }

    /// The lease `lease_id` of `name`/`id` as stored (`None` when there is none). DynamoDB calls:
    /// **1** strongly consistent `GetItem`.
    pub async fn read_lease(
        &self,
        name: &str,
        id: &str,
        lease_id: &str,
    ) -> Result<Option<Lease>, KvError> {
        let at = self.lease_bucket(name, id, lease_id)?;
        self.read_lease_at(&at, lease_id).await
    }

    async fn read_lease_at(&self, at: &Located, lease_id: &str) -> Result<Option<Lease>, KvError> {
        let Some(item) = self.read(&lease_key(&at.bucket, lease_id)).await? else {
            return Ok(None);
        };
        let text = |k: &str| match item.get(k) {
            Some(AttributeValue::S(s)) => Some(s.clone()),
            _ => None,
        };
        let held_until_ns = num(&item, lattr::HELD_UNTIL).unwrap_or(i64::MIN);
        let (Some(bucket), Some(amount), Some(deadline_ns)) = (
            text(lattr::LEASE_OF),
            num(&item, lattr::AMOUNT),
            num(&item, lattr::DEADLINE),
        ) else {
            return Err(crate::Error::MalformedItem {
                table: self.table.clone(),
                reason: format!("lease {lease_id} lacks leaseOf, amount or deadline"),
            }
            .into());
        };
        Ok(Some(Lease {
            id: lease_id.to_string(),
            bucket,
            amount: u64::try_from(amount).unwrap_or(0),
            deadline_ns,
            held_until_ns,
        }))
    }

    /// The lease item's update to `amount` and `held_until`, if it is still as read and not past
    /// its deadline.
    fn lease_update(
        &self,
        at: &Located,
        lease: &Lease,
        amount: u64,
        held_until: i64,
        now: Timestamp,
    ) -> Result<Update, KvError> {
        let (unchanged, mut values) = unchanged(lease);
        values.insert(":new".into(), n(amount));
        values.insert(":until".into(), n(held_until));
        values.insert(":now".into(), n(now.as_nanos()));
        Ok(Update::builder()
            .table_name(&self.table)
            .key(
                super::super::attr::BUCKET,
                s(lease_key(&at.bucket, &lease.id)),
            )
            .update_expression("SET #a = :new, #u = :until")
            .condition_expression(format!("{unchanged} AND #d > :now"))
            .expression_attribute_names("#a", lattr::AMOUNT)
            .expression_attribute_names("#u", lattr::HELD_UNTIL)
            .expression_attribute_names("#d", lattr::DEADLINE)
            .set_expression_attribute_values(Some(values))
            .build()
            .map_err(|e| crate::Error::build_request("a lease update", e))?)
    }

    /// An acquire found `lease_id` already held on this bucket: the same grant when it is this
    /// request's (same estimate, before its deadline), else a clear error, never a grant of what
    /// was not spent for it. DynamoDB calls: **1** `GetItem`; a lease past its deadline is settled
    /// as [`release_lease`](Self::release_lease) does.
    async fn acquired_before(
        &self,
        at: &Located,
        lease_id: &str,
        estimate: u64,
        now: Timestamp,
    ) -> Result<LeaseOutcome, KvError> {
        let bucket = at.bucket.display_name();
        // Gone since (committed or released meanwhile): its work is settled, so a late repeat of
        // its acquire gets no new lease under the same id.
        let lease = self
            .read_lease_at(at, lease_id)
            .await?
            .ok_or_else(|| KvError::Contended(lease_key(&at.bucket, lease_id)))?;
        if Self::lease_rate(at, &lease).is_none() || lease.amount != estimate {
            return Err(KvError::LeaseMismatch {
                lease: lease_id.to_string(),
                bucket,
                held: lease.amount,
                asked: estimate,
            });
        }
        if lease.deadline_ns <= now.as_nanos() {
            let (name, id) = (&at.bucket.name, &at.bucket.id);
            self.release_lease(name, id, lease_id, now).await?;
            return Err(KvError::LeaseExpired(lease_id.to_string()));
        }
        Ok(LeaseOutcome::already_done(Some(lease)))
    }

    fn lease_bucket(&self, name: &str, id: &str, lease_id: &str) -> Result<Located, KvError> {
        if lease_id.is_empty() || lease_id.len() > 200 || lease_id.chars().any(char::is_control) {
            return Err(KvError::BadLeaseId(lease_id.to_string()));
        }
        self.locate(name, id)
    }

    /// The rate of the item a lease is held on: the bucket's, or its shard's share. `None` when the
    /// lease is not on this bucket (or on a shard the limit no longer has).
    fn lease_rate(at: &Located, lease: &Lease) -> Option<Result<Rate, KvError>> {
        let (bucket, rate, n) = (&at.bucket, at.rate, at.shards);
        if lease.bucket == bucket.key() && n == 1 {
            return Some(Ok(rate));
        }
        (0..n)
            .find(|i| Self::shard_key(bucket, *i) == lease.bucket)
            .map(|i| Self::shard_rate(&rate, n, i).map_err(KvError::from))
    }

    /// One transaction: the bucket's write (if any) and the lease item's. Retries a wrong guess of
    /// the bucket's case (as `spend`) and transaction conflicts, up to [`MAX_ATTEMPTS`].
    async fn lease_tx(
        &self,
        key: &str,
        mut plan: Option<SpendPlan>,
        lease: TransactWriteItem,
    ) -> Result<Tx, KvError> {
        let target = Target::bucket(&self.table, key, self.ttl_margin);
        let hint = self.hint(key);
        for attempt in 0..MAX_ATTEMPTS {
            let mut items = Vec::with_capacity(2);
            if let Some(p) = &plan {
                items.push(
                    TransactWriteItem::builder()
                        .update(p.transact_update(&target)?)
                        .build(),
                );
            }
            let lease_at = items.len();
            items.push(lease.clone());
            let reasons = match txn::send(&self.client, items).await? {
                txn::Outcome::Committed => {
                    let d = plan.as_ref().map(|p| p.admitted(None, hint));
                    if let Some(d) = &d {
                        self.remember(key, Some(d.new_tat));
                    }
                    let exact = plan
                        .as_ref()
                        .is_none_or(|p| matches!(p.case, Case::Idle | Case::RefundToFull));
                    return Ok(Tx::Done(d, exact));
                }
                txn::Outcome::Cancelled(reasons) => reasons,
            };
            if matches!(reasons.get(lease_at), Some(Reason::ConditionFailed(_))) {
                return Ok(Tx::LeaseChanged);
            }
            match (&plan, reasons.first()) {
                (Some(p), Some(Reason::ConditionFailed(old))) => {
                    let old = old.as_ref();
                    self.remember(key, gcra_write::stored_tat(old, gcra_write::attr::TAT));
                    match p.on_condition_failed(old, gcra_write::attr::TAT) {
                        Next::Refused(d) => return Ok(Tx::BucketRefused(d)),
                        Next::Retry(next) => plan = Some(next),
                    }
                }
                _ => CONFLICT_BACKOFF.wait(attempt as u32).await,
            }
        }
        Err(KvError::Contended(key.to_string()))
    }
}
