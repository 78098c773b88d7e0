//! Binding a reservation to a resource ([`Reservation::create_token`]), releasing it
//! ([`NonFungibleLimiter::release`]) and the scoped form. Each is two single-item writes in a fixed
//! order, never a transaction; the order makes a crash between them harmless (decision 0101):
//!
//! | operation | 1st write | 2nd write | crash between leaves |
//! |---|---|---|---|
//! | bind | token row: `resourceId`, 8 h expiry | (after the ended marker read, strongly consistent) ledger entry → 8 h, if still live | a row whose entry expires with the reservation: as if never bound |
//! | release | ledger entry removed | token row deleted | a row holding no capacity (listed as not live) |
//!
//! Capacity is decided by the ledger alone, so neither order can over-admit; binding first writes
//! the row so that a bound token is always findable by the remover before it holds capacity for 8 h.

use std::future::Future;
use std::panic::AssertUnwindSafe;

use aws_sdk_dynamodb::operation::delete_item::DeleteItemError;
use aws_sdk_dynamodb::operation::update_item::UpdateItemError;
use aws_sdk_dynamodb::types::ReturnValuesOnConditionCheckFailure;
use futures::FutureExt;

use super::ended::marker_key;
use super::ledger::{expiry_secs, is_live, LEDGER_MAP};
use super::limiter::{attempt_of, Attempt, MAX_ATTEMPTS};
use super::shard;
use super::{NonFungibleLimiter, Reservation, ReservationError, Token};
use crate::clock::Timestamp;
use crate::dynamo::item::{n, opt_int, opt_str, s};
use crate::dynamo::retry::Backoff;
use crate::error::{Error, Result};
use crate::interleave::Point;

/// Why a bind's row write was refused, from the row as it is: bound to another resource and still
/// live → [`ReservationError::AlreadyBound`]; otherwise the reservation is gone.
pub(super) fn bind_refusal(
    bound: Option<String>,
    exp: Option<i64>,
    (coordinate, id): (&str, &str),
    resource_id: &str,
    now: Timestamp,
) -> ReservationError {
    match (bound, exp) {
        (Some(b), Some(e)) if b != resource_id && is_live(e, now) => {
            ReservationError::AlreadyBound {
                reservation_id: id.to_string(),
                bound_to: b,
            }
        }
        _ => ReservationError::Gone {
            coordinate: coordinate.to_string(),
            reservation_id: id.to_string(),
        },
    }
}

/// The shard an entry's write goes to first: the one its id names, else shard 0 (ids from before
/// sharding; [`NonFungibleLimiter::find_unsuffixed`] looks further on a miss).
fn first_shard(id: &str) -> u32 {
    shard::of_reservation(id).unwrap_or(0)
}

impl NonFungibleLimiter {
    /// Binds a live reservation to `resource_id` for the token TTL (8 h default). **3** calls, in
    /// order: the token row (unbound, or bound to the same id), a strongly consistent read of the
    /// resource's ended marker, then the ledger entry (only while live). An expired or deleted
    /// reservation is [`ReservationError::Gone`]: the row just written is deleted again (+1
    /// DeleteItem), so nothing is left behind; a resource that already ended is
    /// [`ReservationError::ResourceEnded`], the reservation released (+2).
    async fn bind(&self, r: &Reservation, resource_id: &str) -> Result<Token, ReservationError> {
        // Refused before any write if the id could not key its ended-resource marker.
        marker_key(resource_id)?;
        let a = self.inner.attrs;
        let now = self.inner.clock.now();
        let exp = expiry_secs(now.plus(self.inner.token_ttl));
        let mut attempt = 0;
        loop {
            let sent = self
                .update_row(&r.coordinate, &r.id)
                .update_expression("SET #rn = :rn, #acct = :acct, #rid = :rid, #exp = :exp")
                .condition_expression("attribute_not_exists(#rid) OR #rid = :rid")
                .expression_attribute_names("#rn", a.resource_name)
                .expression_attribute_names("#acct", a.account_id)
                .expression_attribute_names("#rid", a.resource_id)
                .expression_attribute_names("#exp", a.expiration_time)
                .expression_attribute_values(":rn", s(&r.resource))
                .expression_attribute_values(":acct", s(&r.account))
                .expression_attribute_values(":rid", s(resource_id))
                .expression_attribute_values(":exp", n(exp))
                .return_values_on_condition_check_failure(
                    ReturnValuesOnConditionCheckFailure::AllOld,
                )
                .send()
                .await;
            let outcome = match sent {
                Ok(_) => Attempt::Done(()),
                Err(err) => attempt_of("UpdateItem", err, |e| match e {
                    UpdateItemError::ConditionalCheckFailedException(c) => Some(c.item().cloned()),
                    _ => None,
                })?,
            };
            match outcome {
                Attempt::Done(()) => break,
                Attempt::Failed(old) => {
                    let old = old.unwrap_or_default();
                    let t = &self.inner.table;
                    let bound = opt_str(&old, t, a.resource_id)?;
                    let old_exp = opt_int(&old, t, a.expiration_time)?;
                    return Err(bind_refusal(
                        bound,
                        old_exp,
                        (&r.coordinate, &r.id),
                        resource_id,
                        now,
                    ));
                }
                Attempt::Retry => Self::pause(&mut attempt, &r.coordinate).await?,
            }
        }
        self.inner.interleave.at(Point::BindAfterRow).await;
        // The ended-resource check after the row write (what the remover's index query finds) and
        // *before* the ledger entry is extended: a bind stopped anywhere (a Lambda timeout, a
        // crash) then never leaves an 8-hour entry for a resource whose event was already
        // handled — extended only when the marker was absent, so any later remover run finds the
        // row written before (decision 0101, "Ended resources"; found by the simulation, seeds
        // 1078 and 1086).
        let mut ended = self.has_ended(resource_id).await;
        self.inner.interleave.at(Point::BindAfterMarkerRead).await;
        if crate::mutation::active_on(
            &self.inner.table,
            crate::mutation::Mutation::BindIgnoresEnded,
        ) {
            ended = Ok(false);
        }
        if !matches!(ended, Ok(false)) {
            // The resource ended (or we cannot tell): give the unit back (the entry is still the
            // reservation's) and delete the row, rather than hold it for a token's lifetime with
            // no remover event left to come.
            self.release(&r.coordinate, &r.id).await?;
            return Err(match ended {
                Ok(_) => ReservationError::ResourceEnded {
                    reservation_id: r.id.clone(),
                    resource_id: resource_id.to_string(),
                },
                Err(e) => e.into(),
            });
        }
        match self.extend_ledger(r, exp, now).await {
            Ok(()) => {
                self.extend_entry(&r.coordinate, &r.id, exp);
                Ok(Token {
                    coordinate: r.coordinate.clone(),
                    reservation_id: r.id.clone(),
                    resource_id: resource_id.to_string(),
                    expiration_time: exp,
                })
            }
            Err(failure) => {
                self.unbind(r, resource_id, exp).await;
                Err(failure)
            }
        }
    }

    /// Bind's second write: the ledger entry's expiry (in the shard its id names) moved to the
    /// token's, only while the entry is live. 1 UpdateItem; an entry expired or released is [`ReservationError::Gone`].
    async fn extend_ledger(
        &self,
        r: &Reservation,
        exp: i64,
        now: Timestamp,
    ) -> Result<(), ReservationError> {
        let mut attempt = 0;
        let (mut k, mut searched) = (first_shard(&r.id), false);
        loop {
            let sent = self
                .update_row(&r.coordinate, &shard::sort_key(k))
                .update_expression("SET #live.#id = :exp")
                .condition_expression("#live.#id > :now")
                .expression_attribute_names("#live", LEDGER_MAP)
                .expression_attribute_names("#id", &r.id)
                .expression_attribute_values(":exp", n(exp))
                .expression_attribute_values(":now", n(now.as_secs()))
                .send()
                .await;
            let outcome = match sent {
                Ok(_) => Attempt::Done(()),
                Err(err) => attempt_of("UpdateItem", err, |e| {
                    matches!(e, UpdateItemError::ConditionalCheckFailedException(_)).then_some(None)
                })?,
            };
            match outcome {
                Attempt::Done(()) => return Ok(()),
                Attempt::Failed(_) => {
                    if !searched {
                        searched = true;
                        if let Some(found) = self.find_unsuffixed(&r.coordinate, &r.id, k).await? {
                            k = found;
                            continue;
                        }
                    }
                    self.forget_entry(&r.coordinate, &r.id);
                    return Err(ReservationError::Gone {
                        coordinate: r.coordinate.clone(),
                        reservation_id: r.id.clone(),
                    });
                }
                Attempt::Retry => Self::pause(&mut attempt, &r.coordinate).await?,
            }
        }
    }

    /// Deletes the row a failed bind wrote (only if it still holds what the bind wrote). 1 DeleteItem;
    /// a failure is logged: the row holds no capacity, and listings show it as not live.
    async fn unbind(&self, r: &Reservation, resource_id: &str, exp: i64) {
        let a = self.inner.attrs;
        let sent = self
            .delete_row(&r.coordinate, &r.id)
            .condition_expression("#rid = :rid AND #exp = :exp")
            .expression_attribute_names("#rid", a.resource_id)
            .expression_attribute_names("#exp", a.expiration_time)
            .expression_attribute_values(":rid", s(resource_id))
            .expression_attribute_values(":exp", n(exp))
            .send()
            .await;
        if let Err(e) = sent {
            if !matches!(
                e.as_service_error(),
                Some(DeleteItemError::ConditionalCheckFailedException(_))
            ) {
                tracing::warn!(reservation = %r.id, error = %Error::dynamo("DeleteItem", e), "could not delete the row of a failed bind; it holds no capacity");
            }
        }
    }

    /// For an id without a shard number (written before sharding, or by rate-limiter-py) that
    /// shard `tried` does not hold: the shard that does, from one strongly consistent read of them
    /// all. `None` for ids that name their shard (their shard was the only place to look), or when
    /// no other shard holds it.
    async fn find_unsuffixed(&self, coordinate: &str, id: &str, tried: u32) -> Result<Option<u32>> {
        if shard::of_reservation(id).is_some() {
            return Ok(None);
        }
        let view = self.read_shards(coordinate).await?;
        Ok(view.holder(id).filter(|k| *k != tried))
    }

    /// Backs off before retrying a throttled write; an error after [`MAX_ATTEMPTS`].
    async fn pause(attempt: &mut u32, coordinate: &str) -> Result<()> {
        *attempt += 1;
        if *attempt >= MAX_ATTEMPTS {
            return Err(Error::contended(coordinate, MAX_ATTEMPTS));
        }
        Backoff::CONDITIONAL.wait(*attempt).await;
        Ok(())
    }

    /// Deletes a reservation or token and releases its capacity. Idempotent: deleting what is already
    /// gone is a no-op. **2** calls: UpdateItem removing the ledger entry from the shard its id
    /// names (the capacity, first),
    /// then DeleteItem of the row (a no-op for an unbound reservation, which has none).
    /// Returns whether a ledger entry was released.
    pub async fn release(&self, coordinate: &str, id: &str) -> Result<bool> {
        Self::check_id(id)?;
        let mut attempt = 0;
        let (mut k, mut searched) = (first_shard(id), false);
        let released = loop {
            let sent = self
                .update_row(coordinate, &shard::sort_key(k))
                .update_expression("REMOVE #live.#id")
                .condition_expression("attribute_exists(#live.#id)")
                .expression_attribute_names("#live", LEDGER_MAP)
                .expression_attribute_names("#id", id)
                .send()
                .await;
            let outcome = match sent {
                Ok(_) => Attempt::Done(()),
                Err(err) => attempt_of("UpdateItem", err, |e| {
                    matches!(e, UpdateItemError::ConditionalCheckFailedException(_)).then_some(None)
                })?,
            };
            match outcome {
                Attempt::Done(()) => break true,
                Attempt::Failed(_) if !searched => {
                    searched = true;
                    match self.find_unsuffixed(coordinate, id, k).await? {
                        Some(found) => k = found,
                        None => break false,
                    }
                }
                Attempt::Failed(_) => break false,
                Attempt::Retry => Self::pause(&mut attempt, coordinate).await?,
            }
        };
        self.forget_entry(coordinate, id);
        let mut attempt = 0;
        loop {
            let sent = self.delete_row(coordinate, id).send().await;
            match sent {
                Ok(_) => return Ok(released),
                Err(err) => match attempt_of("DeleteItem", err, |_: &DeleteItemError| None)? {
                    Attempt::Retry => Self::pause(&mut attempt, coordinate).await?,
                    Attempt::Done(()) | Attempt::Failed(_) => return Ok(released),
                },
            }
        }
    }

    /// Runs `work` with a fresh reservation; if `work` fails or panics the reservation is deleted
    /// (then the error is returned or the panic resumed). On success the reservation is left as the
    /// work left it: bound with `create_token`, or expiring unused after the reservation TTL.
    /// (With `panic = "abort"`, as in release Lambdas, a panic ends the process instead; the
    /// reservation then expires after its TTL.)
    pub async fn with_reservation<F, Fut, T, E>(
        &self,
        resource: &str,
        account: &str,
        default_limit: i64,
        work: F,
    ) -> std::result::Result<T, E>
    where
        F: FnOnce(Reservation) -> Fut,
        Fut: Future<Output = std::result::Result<T, E>>,
        E: From<ReservationError>,
    {
        let r = self
            .get_reservation(resource, account, default_limit)
            .await?;
        let outcome = AssertUnwindSafe(work(r.clone())).catch_unwind().await;
        match outcome {
            Ok(Ok(v)) => Ok(v),
            Ok(Err(e)) => {
                if let Err(de) = r.delete().await {
                    tracing::warn!(reservation = %r.id, error = %de, "could not delete the reservation after failed work; it expires on its own");
                }
                Err(e)
            }
            Err(panic) => {
                if let Err(de) = r.delete().await {
                    tracing::warn!(reservation = %r.id, error = %de, "could not delete the reservation after a panic; it expires on its own");
                }
                std::panic::resume_unwind(panic)
            }
        }
    }
}

impl Reservation {
    /// Binds this reservation to a resource instance for the token TTL (8 h default). An expired or
    /// deleted reservation is [`ReservationError::Gone`] and leaves nothing behind; a resource the
    /// remover has seen end is [`ReservationError::ResourceEnded`]. **3** calls.
    pub async fn create_token(&self, resource_id: &str) -> Result<Token, ReservationError> {
        self.limiter.bind(self, resource_id).await
    }

    /// Deletes the reservation (or its token) and releases its capacity; idempotent. **2** calls.
    pub async fn delete(&self) -> Result<(), ReservationError> {
        self.limiter.release(&self.coordinate, &self.id).await?;
        Ok(())
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_refused_bind_is_already_bound_only_to_a_live_other_resource() {
        let now = Timestamp::from_secs(100);
        let r = |e: ReservationError| match e {
            ReservationError::AlreadyBound { bound_to, .. } => format!("bound:{bound_to}"),
            ReservationError::Gone { .. } => "gone".into(),
            other => format!("{other}"),
        };
        let refuse = |b: Option<&str>, e: Option<i64>| {
            r(bind_refusal(
                b.map(String::from),
                e,
                ("emr:1", "r"),
                "j-1",
                now,
            ))
        };
        assert_eq!(refuse(Some("j-2"), Some(200)), "bound:j-2");
        assert_eq!(
            refuse(Some("j-2"), Some(100)),
            "gone",
            "that token has expired"
        );
        assert_eq!(refuse(None, None), "gone", "no row");
    }
}
