//! The all-or-nothing batch spend over several buckets (one `TransactWriteItems`, decision 0602).

use super::denials::BucketDenials;
use super::outcome::MAX_ATTEMPTS;
use super::outcome::{BatchOutcome, KvError, Outcome, MAX_BATCH};
use super::spend::CONFLICT_BACKOFF;
use super::state::{Limiter, Located};
use crate::clock::Timestamp;
use crate::dynamo::item::num;
use crate::dynamo::txn::{self, Reason};
use crate::gcra::{self, Decision};
use crate::gcra_write::{self, Case, Next, SpendPlan, StateWrite};
use aws_sdk_dynamodb::types::TransactWriteItem;
use std::collections::{HashMap, HashSet};

impl Limiter {
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
            let Located {
                bucket,
                rate,
                shards,
            } = self.locate_in(&set, name, id)?;
            if shards > 1 {
                return Err(KvError::ShardedInBatch(bucket.display_name()));
            }
            if set.name(name).is_some_and(|d| d.shadow) {
                return Err(KvError::ShadowInBatch(bucket.display_name()));
            }
            if !seen.insert(bucket.key()) {
                return Err(KvError::DuplicateInBatch(bucket.display_name()));
            }
            let hint = self.hint(&bucket.key());
            let plan = SpendPlan::spend(rate, now, *cost, hint)?;
            items.push((bucket, rate, plan, hint));
        }
        let pendings: Vec<Option<BucketDenials>> = items
            .iter()
            .map(|(b, ..)| self.pending.take(&b.key()))
            .collect();
        for ((bucket, _, plan, _), p) in items.iter_mut().zip(&pendings) {
            plan.state = Some(StateWrite {
                limit_name: Some(bucket.name.clone()),
                pending_throttles: p.map_or(0, |p| p.count),
                first_throttle: p.map(|p| p.first),
                // A transaction returns nothing on success, so the stamp is always written.
                stamp_known: false,
            });
        }
        let keys: Vec<String> = items.iter().map(|(b, ..)| b.key()).collect();
        let give_back = |denied: &HashMap<String, Option<i64>>| {
            for (key, p) in keys.iter().zip(&pendings) {
                let version = denied.get(key).copied().flatten();
                self.pending
                    .keep(key, *p, u64::from(denied.contains_key(key)), now, version);
            }
        };
        for attempt in 0..MAX_ATTEMPTS {
            let mut writes = Vec::with_capacity(items.len());
            for (bucket, _, plan, _) in &items {
                let update = plan.transact_update(&self.target(bucket))?;
                writes.push(TransactWriteItem::builder().update(update).build());
            }
            match txn::send(&self.client, writes).await {
                Err(e) => {
                    give_back(&HashMap::new());
                    return Err(e.into());
                }
                Ok(txn::Outcome::Committed) => {
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
                Ok(txn::Outcome::Cancelled(reasons)) => {
                    let mut denials = Vec::new();
                    let mut conflict = false;
                    for ((bucket, rate, plan, hint), reason) in items.iter_mut().zip(&reasons) {
                        match reason {
                            Reason::ConditionFailed(old) => {
                                let old = old.as_ref();
                                let tat = gcra_write::stored_tat(old, gcra_write::attr::TAT);
                                self.remember(&bucket.key(), tat);
                                *hint = tat;
                                match plan.on_condition_failed(old, gcra_write::attr::TAT) {
                                    Next::Refused(d) => {
                                        let version =
                                            old.and_then(|i| num(i, gcra_write::attr::VERSION));
                                        denials.push((Self::outcome(bucket, *rate, d), version));
                                    }
                                    Next::Retry(p) => *plan = p,
                                }
                            }
                            Reason::Ok => {}
                            Reason::Conflict | Reason::Other(_) => conflict = true,
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
                        CONFLICT_BACKOFF.wait(attempt as u32).await;
                    }
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
