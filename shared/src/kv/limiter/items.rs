//! Whole-item operations on a bucket: reading it, emptying it, and a refund applied once per
//! caller's idempotency key (the decide API's refund: a caller that retries after a lost answer
//! must not get its cost back twice, whichever process serves the retry).
//!
//! A keyed refund writes, in one `TransactWriteItems`, the bucket's refund and a marker item
//! `~refund:{n}:{bucket}:{key}` (after `{tenant}:` when scoped, as every item of a tenant's
//! limiter) that must not exist yet; the marker lives [`REFUND_KEY_TTL`] (DynamoDB TTL). A repeat
//! of the key finds the marker, writes nothing, and reads the bucket for its numbers.

use std::time::Duration;

use aws_sdk_dynamodb::types::{Put, TransactWriteItem};

use super::super::config::BucketKey;
use super::outcome::MAX_ATTEMPTS;
use super::outcome::{KvError, Outcome};
use super::spend::CONFLICT_BACKOFF;
use super::state::Limiter;
use crate::clock::Timestamp;
use crate::dynamo;
use crate::dynamo::item::{n, s, Item};
use crate::dynamo::txn::{self, Reason};
use crate::gcra::{self, Decision, Rate};
use crate::gcra_write::{self, Next, SpendPlan, StateWrite};
use serde::Serialize;

/// Prefix of refund markers; `~` is not a digit, so no bucket key `{nameId}:{id}` starts with it.
const REFUND_PREFIX: &str = "~refund:";
/// How long a refund's idempotency key is remembered.
pub const REFUND_KEY_TTL: Duration = Duration::from_secs(86_400);

/// What a refund under an idempotency key did.
#[derive(Debug, Clone, PartialEq, Serialize)]
#[serde(rename_all = "camelCase")]
pub struct KeyedRefund {
    #[serde(flatten)]
    pub outcome: Outcome,
    /// The key had been used already: nothing was given back by this call, and `outcome` is the
    /// bucket as it is now (a check of cost 0).
    pub duplicate: bool,
}

/// The marker's key: the bucket key's length first, so a bucket id and an idempotency key that
/// both contain `:` never meet on one key (as lease keys).
fn marker_key(bucket: &BucketKey, key: &str) -> String {
    let b = bucket.key();
    match &bucket.scope {
        Some(t) => format!("{t}:{REFUND_PREFIX}{}:{b}:{key}", b.len()),
        None => format!("{REFUND_PREFIX}{}:{b}:{key}", b.len()),
    }
}

impl Limiter {
    /// The bucket `name`/`id` names for this limiter (its stored key, scoped when the limiter is),
    /// its rate and its number of shards. No call.
    pub fn bucket_of(&self, name: &str, id: &str) -> Result<(BucketKey, Rate, u32), KvError> {
        let at = self.locate(name, id)?;
        Ok((at.bucket, at.rate, at.shards))
    }

    /// The bucket as this process last saw it, as a check of cost 0 would answer (`None`: not
    /// seen, or sharded). No call: for the numbers of an answer whose write returned none (a lease
    /// committed). Not exact when another process spent since.
    pub fn last_seen(
        &self,
        name: &str,
        id: &str,
        now: Timestamp,
    ) -> Result<Option<Outcome>, KvError> {
        let at = self.locate(name, id)?;
        if at.shards > 1 {
            return Ok(None);
        }
        let Some(tat) = self.hint(&at.bucket.key()) else {
            return Ok(None);
        };
        let d = gcra::spend(&at.rate, Some(tat), now, 0)?;
        let d = Decision {
            new_tat: tat.max(now),
            ..d
        };
        Ok(Some(Self::outcome(&at.bucket, at.rate, d)))
    }

    /// The stored item of a bucket (`None` if absent).
    ///
    /// DynamoDB calls: **1** strongly consistent `GetItem`.
    pub async fn read(&self, bucket_key: &str) -> Result<Option<Item>, KvError> {
        let key = Item::from([(crate::kv::attr::BUCKET.to_string(), s(bucket_key))]);
        Ok(dynamo::get_consistent(&self.client, &self.table, key).await?)
    }

    /// Empties the bucket's record, so it is full again (and its state starts over).
    ///
    /// DynamoDB calls: **1** `DeleteItem`.
    pub async fn reset(&self, name: &str, id: &str, now: Timestamp) -> Result<Outcome, KvError> {
        let at = self.locate(name, id)?;
        if at.shards > 1 {
            self.reset_shards(&at.bucket, at.shards).await?;
        } else {
            self.delete_bucket(&at.bucket.key()).await?;
        }
        let d = gcra::spend(&at.rate, None, now, 0)?;
        Ok(Self::outcome(&at.bucket, at.rate, d))
    }

    /// Deletes one bucket item and forgets what this process knew of it. DynamoDB calls: **1**
    /// `DeleteItem`.
    pub(super) async fn delete_bucket(&self, key: &str) -> Result<(), KvError> {
        self.client
            .delete_item()
            .table_name(&self.table)
            .key(crate::kv::attr::BUCKET, s(key))
            .send()
            .await
            .map_err(|e| crate::Error::dynamo("DeleteItem", e))?;
        self.remember(key, None);
        self.pending.forget(key);
        Ok(())
    }

    /// Gives `cost` tokens back to `name`/`id` once per `idempotency_key` (within
    /// [`REFUND_KEY_TTL`]): never above the burst, refused on a full bucket (nothing is then
    /// recorded, so the key may be used again).
    ///
    /// DynamoDB calls: **1** `TransactWriteItems` (the bucket and the marker: 4 WCU) warm, **≤ 2**
    /// cold; a repeated key: 1 transaction + 1 `GetItem`. Not for sharded limits (a refund there
    /// goes to whichever shard has room: [`Limiter::refund`]).
    pub async fn refund_keyed(
        &self,
        name: &str,
        id: &str,
        cost: u64,
        idempotency_key: &str,
        now: Timestamp,
    ) -> Result<KeyedRefund, KvError> {
        if idempotency_key.is_empty()
            || idempotency_key.len() > 200
            || idempotency_key.chars().any(char::is_control)
        {
            return Err(KvError::BadIdempotencyKey(idempotency_key.to_string()));
        }
        let at = self.locate_cost(name, id, cost)?;
        if at.shards > 1 {
            return Err(KvError::ShardedKeyedRefund(at.bucket.display_name()));
        }
        let key = at.bucket.key();
        let marker = marker_key(&at.bucket, idempotency_key);
        let mut hint = self.hint(&key);
        let mut plan = SpendPlan::refund(at.rate, now, cost, hint)?.with_state(StateWrite {
            limit_name: Some(at.bucket.name.clone()),
            pending_throttles: 0,
            first_throttle: None,
            // A transaction returns nothing on success, so the stamp is always written.
            stamp_known: false,
        });
        let expires = now.plus(REFUND_KEY_TTL).as_secs();
        for attempt in 0..MAX_ATTEMPTS {
            let update = plan.transact_update(&self.target(&at.bucket))?;
            let put = Put::builder()
                .table_name(&self.table)
                .item(crate::kv::attr::BUCKET, s(&marker))
                .item("refundOf", s(&key))
                .item("amount", n(cost))
                .item(crate::kv::attr::EXPIRES_AT, n(expires))
                .condition_expression("attribute_not_exists(#k)")
                .expression_attribute_names("#k", crate::kv::attr::BUCKET)
                .build()
                .map_err(|e| crate::Error::build_request("a refund marker", e))?;
            let items = vec![
                TransactWriteItem::builder().update(update).build(),
                TransactWriteItem::builder().put(put).build(),
            ];
            match txn::send(&self.client, items).await? {
                txn::Outcome::Committed => {
                    let d = plan.admitted(None, hint);
                    self.remember(&key, Some(d.new_tat));
                    return Ok(KeyedRefund {
                        outcome: Self::outcome(&at.bucket, at.rate, d),
                        duplicate: false,
                    });
                }
                txn::Outcome::Cancelled(reasons) => {
                    if matches!(reasons.get(1), Some(Reason::ConditionFailed(_))) {
                        let item = self.read(&key).await?;
                        let tat = gcra_write::stored_tat(item.as_ref(), gcra_write::attr::TAT);
                        self.remember_seen(
                            &key,
                            tat,
                            gcra_write::RateStamp::of_item(item.as_ref()),
                        );
                        let d = gcra::spend(&at.rate, tat, now, 0)?;
                        let d = Decision {
                            new_tat: tat.map_or(now, |t| t.max(now)),
                            ..d
                        };
                        return Ok(KeyedRefund {
                            outcome: Self::outcome(&at.bucket, at.rate, d),
                            duplicate: true,
                        });
                    }
                    match reasons.first() {
                        Some(Reason::ConditionFailed(old)) => {
                            let old = old.as_ref();
                            hint = gcra_write::stored_tat(old, gcra_write::attr::TAT);
                            self.remember(&key, hint);
                            match plan.on_condition_failed(old, gcra_write::attr::TAT) {
                                Next::Refused(d) => {
                                    return Ok(KeyedRefund {
                                        outcome: Self::outcome(&at.bucket, at.rate, d),
                                        duplicate: false,
                                    })
                                }
                                Next::Retry(p) => plan = p,
                            }
                        }
                        _ => CONFLICT_BACKOFF.wait(attempt as u32).await,
                    }
                }
            }
        }
        Err(KvError::Contended(key))
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn refund_markers_live_in_the_buckets_key_space_and_never_meet_a_bucket() {
        let b = BucketKey {
            name: "A".into(),
            name_id: 1,
            id: "x:y".into(),
            scope: None,
        };
        assert_eq!(marker_key(&b, "k:1"), "~refund:5:1:x:y:k:1");
        let scoped = BucketKey {
            scope: Some("acme".into()),
            ..b
        };
        assert_eq!(marker_key(&scoped, "k"), "acme:~refund:10:acme:1:x:y:k");
        assert!(crate::isolation::key_in_tenant(
            &crate::ids::TenantId::parse("acme").unwrap(),
            &marker_key(&scoped, "k")
        ));
    }
}
