//! Admission: [`NonFungibleLimiter::get_reservation`] is one conditional UpdateItem on the
//! coordinate's ledger item (decision 0101). No row is written for an unbound reservation: the
//! ledger entry is the reservation, and it stops counting at its expiry.

use aws_sdk_dynamodb::operation::update_item::UpdateItemError;
use aws_sdk_dynamodb::types::ReturnValuesOnConditionCheckFailure;

use super::ledger::{expiry_secs, reserve_expr, Ledger, Plan, Prune, LEDGER_ID};
use super::limiter::{attempt_of, Attempt, MAX_ATTEMPTS};
use super::{NonFungibleLimiter, Reservation, ReservationError};
use crate::clock::Timestamp;
use crate::dynamo::item::n;
use crate::dynamo::retry::Backoff;
use crate::error::{Error, Result};
use crate::limit::Effective;

impl NonFungibleLimiter {
    /// Reserves one unit of (resource, account)'s capacity for the reservation TTL (5 min default).
    ///
    /// `default_limit` applies when no limit row exists; `limit <= 0` blocks. Exact under
    /// concurrency: the ledger entry is added by one UpdateItem whose condition is the ledger's size,
    /// so at most `limit` entries can ever exist. Expired entries seen in the ledger are pruned in
    /// the same write (each conditioned on its old value).
    /// Calls: **1** warm, **2** cold, **3** on a coordinate's first use (its ledger is created,
    /// counting rows that exist without one), +1 per lost race, +1 to confirm a cached refusal.
    pub async fn get_reservation(
        &self,
        resource: &str,
        account: &str,
        default_limit: i64,
    ) -> Result<Reservation, ReservationError> {
        let coordinate = Self::coordinate(resource, account)?;
        let now = self.inner.clock.now();
        let (row, mut ledger, mut cached) = match (
            self.inner.limits.cached(resource, account),
            self.cached_ledger(&coordinate),
        ) {
            (Some(row), Some(l)) => (row, l, true),
            (Some(row), None) => (row, self.read_ledger(&coordinate).await?, false),
            (None, Some(l)) => (self.inner.limits.get(resource, account).await?, l, true),
            (None, None) => {
                let (row, l) = self.read_cold(resource, account, &coordinate).await?;
                (row, l, false)
            }
        };
        let limit = match Effective::capacity(row.as_ref(), default_limit) {
            Effective::Blocked => return Err(ReservationError::Blocked { coordinate }),
            Effective::Limited { limit, .. } => limit,
        };
        let exp = expiry_secs(now.plus(self.inner.reservation_ttl));
        let mut legacy_checked = false;
        for attempt in 0..MAX_ATTEMPTS {
            if !ledger.exists && !legacy_checked {
                // No ledger yet: count live rows written without one (by rate-limiter-py, before
                // the switch), so they hold capacity until they expire. One Query, once.
                legacy_checked = true;
                for row in self.list_rows(&coordinate, now).await? {
                    if let (true, Some(e)) = (row.live, row.expiration_time) {
                        ledger.live.insert(row.reservation_id, (e, n(e)));
                    }
                }
            }
            let prune = match ledger.plan(now, limit) {
                Plan::Full { live } => {
                    if cached {
                        // Others may have released since we looked: confirm with one read.
                        ledger = self.read_ledger(&coordinate).await?;
                        cached = false;
                        continue;
                    }
                    return Err(ReservationError::Limited {
                        coordinate,
                        limit,
                        live,
                    });
                }
                Plan::PruneFirst(prune) => {
                    self.prune(&coordinate, &prune).await?;
                    ledger = self.read_ledger(&coordinate).await?;
                    continue;
                }
                Plan::Reserve(prune) => prune,
            };
            let id = uuid::Uuid::new_v4().to_string();
            let pair = (resource, account);
            let admitted = match self
                .try_reserve(&coordinate, &id, exp, &ledger, &prune, limit, pair)
                .await?
            {
                Attempt::Done(()) => {
                    ledger.admitted(&prune, &id, exp);
                    true
                }
                Attempt::Failed(actual) => {
                    ledger = Ledger::parse(&self.inner.table, actual.as_ref())?;
                    // A ledger that vanished is rebuilt from the rows, as on first use.
                    legacy_checked = ledger.exists;
                    cached = false;
                    // Holding our entry means our own write applied and its answer was lost: the
                    // SDK re-sent it and the retry failed on what the first attempt wrote. The id
                    // is a fresh uuid, so the entry is ours (issue 22 item 11b).
                    ledger.holds(&id, exp)
                }
                Attempt::Retry => {
                    Backoff::CONDITIONAL.wait(attempt).await;
                    continue;
                }
            };
            self.remember(&coordinate, ledger.clone());
            if admitted {
                return Ok(Reservation {
                    limiter: self.clone(),
                    resource: resource.to_string(),
                    account: account.to_string(),
                    coordinate,
                    id,
                    expires_at: Some(Timestamp::from_secs(exp)),
                });
            }
        }
        Err(Error::contended(coordinate, MAX_ATTEMPTS).into())
    }

    /// The admission write: 1 UpdateItem on the ledger ([`reserve_expr`]). A failed condition hands
    /// back the ledger as it is (ALL_OLD), from which the caller decides again without a read.
    #[allow(clippy::too_many_arguments)]
    async fn try_reserve(
        &self,
        coordinate: &str,
        id: &str,
        exp: i64,
        ledger: &Ledger,
        prune: &Prune,
        limit: u64,
        pair: (&str, &str),
    ) -> Result<Attempt<()>> {
        let a = self.inner.attrs;
        let e = reserve_expr(
            ledger,
            prune,
            id,
            exp,
            limit,
            (a.resource_name, a.account_id),
            pair,
        );
        let sent = self
            .update_row(coordinate, LEDGER_ID)
            .update_expression(e.update)
            .condition_expression(e.condition)
            .set_expression_attribute_names(Some(e.names))
            .set_expression_attribute_values(Some(e.values))
            .return_values_on_condition_check_failure(ReturnValuesOnConditionCheckFailure::AllOld)
            .send()
            .await;
        match sent {
            Ok(_) => Ok(Attempt::Done(())),
            Err(err) => attempt_of("UpdateItem", err, |e| match e {
                UpdateItemError::ConditionalCheckFailedException(c) => Some(c.item().cloned()),
                _ => None,
            }),
        }
    }

    /// Removes expired ledger entries (each conditioned on its old value). 1 UpdateItem.
    async fn prune(&self, coordinate: &str, prune: &Prune) -> Result<()> {
        if prune.is_empty() {
            return Ok(());
        }
        let mut req = self
            .update_row(coordinate, LEDGER_ID)
            .expression_attribute_names("#live", super::LEDGER_MAP);
        let mut removes = Vec::new();
        let mut cond = Vec::new();
        for (i, (k, raw)) in prune.iter().enumerate() {
            req = req
                .expression_attribute_names(format!("#x{i}"), k)
                .expression_attribute_values(format!(":x{i}"), raw.clone());
            removes.push(format!("#live.#x{i}"));
            cond.push(format!("#live.#x{i} = :x{i}"));
        }
        let sent = req
            .update_expression(format!("REMOVE {}", removes.join(", ")))
            .condition_expression(cond.join(" AND "))
            .send()
            .await;
        match sent {
            // A failed condition: someone else pruned or changed them; the caller re-reads.
            Ok(_) => Ok(()),
            Err(err) => match attempt_of("UpdateItem", err, |e| {
                matches!(e, UpdateItemError::ConditionalCheckFailedException(_)).then_some(None)
            })? {
                Attempt::Done(()) | Attempt::Failed(_) => Ok(()),
                Attempt::Retry => {
                    Backoff::CONDITIONAL.wait(0).await;
                    Ok(())
                }
            },
        }
    }
}
