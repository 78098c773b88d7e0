//! Binding a reservation to a resource ([`Reservation::create_token`]), releasing it
//! ([`NonFungibleLimiter::release`]) and the scoped form. Never a transaction: single-item writes in
//! a fixed order that makes a crash between them harmless (decision 0101):
//!
//! | operation | writes, in order | a crash between leaves |
//! |---|---|---|
//! | bind | the bound row in the resource's partition ([`super::ended`]); (after the ended marker read, strongly consistent) the ledger entry → the row's binding, if still unbound or already that | a row whose entry expires with the reservation: as if never bound |
//! | release | the ledger entry removed | — |
//!
//! Capacity is decided by the ledger alone, so no order can over-admit; binding writes the row
//! first so that a bound token is always findable by the remover before it holds capacity for 8 h.
//! A release leaves the bound row (it holds nothing; TTL removes it at its expiry, and the remover
//! releases only an entry still holding that row's binding). A bind that fails never takes a
//! binding: it gives back only an entry still unbound (or, its resource having ended, one holding
//! its own row's binding), and deletes only a row it wrote itself.

use std::future::Future;
use std::panic::AssertUnwindSafe;

use aws_sdk_dynamodb::operation::delete_item::DeleteItemError;
use futures::FutureExt;

use super::ended::BoundRow;
use super::ledger::{expiry_secs, is_live, Binding, Ledger, LEDGER_MAP};
use super::limiter::{attempt_of, update_attempt, Attempt, MAX_ATTEMPTS};
use super::shard;
use super::{NonFungibleLimiter, Reservation, ReservationError, Token};
use crate::clock::Timestamp;
use crate::dynamo::item::n;
use crate::dynamo::retry::Backoff;
use crate::error::{Error, Result};
use crate::interleave::Point;

/// What a bind's ledger write found when its condition failed: the entry `held` (its expiry, if
/// any) is bound to another resource while live, else the reservation is gone.
pub(super) fn bind_refusal(
    held: Option<i64>,
    (coordinate, id): (&str, &str),
    now: Timestamp,
) -> ReservationError {
    match held {
        Some(e) if is_live(e, now) => ReservationError::AlreadyBound {
            reservation_id: id.to_string(),
            bound_until: e,
        },
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

/// Which entries a ledger removal may take.
#[derive(Debug, Clone, Copy)]
enum Holding {
    /// Whatever the entry holds (a client's release).
    Any,
    /// Only an entry not bound yet (expiring by `unbound_until`): a bind that cannot tell whether
    /// its resource ended gives back its reservation, never a binding.
    Unbound { unbound_until: i64 },
    /// Only the binding a bound row records, or an entry not bound yet: the remover's release, and
    /// a bind's whose resource ended; never an entry bound to another resource.
    Binding {
        binding: Binding,
        unbound_until: i64,
    },
}

/// What a conditional ledger removal did.
#[derive(Debug, Clone, Copy, PartialEq)]
enum Removal {
    Released,
    /// The condition failed: the entry's expiry as it is, `None` when absent.
    Kept(Option<i64>),
}

impl NonFungibleLimiter {
    /// The latest expiry an entry can have while unbound, for a bind at `at` (epoch seconds): a
    /// reservation lives one reservation TTL, doubled to allow for the clock skew between the
    /// process that reserved and this one. A token lives far longer (8 h against 5 min), so a
    /// larger expiry is a binding; one in its last 2 × reservation TTL passes for unbound and may be
    /// bound again (the binding then moves: decision 0101, "Bound rows").
    fn unbound_until(&self, at: i64) -> i64 {
        at + 2 * self.inner.reservation_ttl.as_secs() as i64
    }

    /// Binds a live reservation to `resource_id` for the token TTL (8 h default). **3** calls, in
    /// order: the bound row, a strongly consistent read of the resource's ended marker, then the
    /// ledger entry (only while live and unbound, or already this row's binding): 2 WCU + ½ RCU.
    /// An expired or deleted reservation is [`ReservationError::Gone`], one bound to another
    /// resource [`ReservationError::AlreadyBound`]: the row is deleted again if this call wrote it
    /// (+1 DeleteItem). A resource that already ended is [`ReservationError::ResourceEnded`], the
    /// reservation released (+1, and +1 for the row this call wrote); a binding is never released
    /// here ([`Self::give_back`]). Binding again to the same resource is the same bind: it keeps
    /// the first bind's binding.
    async fn bind(&self, r: &Reservation, resource_id: &str) -> Result<Token, ReservationError> {
        let now = self.inner.clock.now();
        let drawn = Binding::draw(expiry_secs(now.plus(self.inner.token_ttl)));
        let row = self.write_bound_row(r, resource_id, drawn).await?;
        self.inner.interleave.at(Point::BindAfterRow).await;
        // The ended-resource check after the row write (what the remover's Query finds) and
        // *before* the ledger entry is extended: a bind stopped anywhere (a Lambda timeout, a
        // crash) then never leaves an 8-hour entry for a resource whose event was already
        // handled — extended only when the marker was absent, so any later remover run finds the
        // row written before (decision 0101, "Ended resources").
        let mut ended = self.has_ended(resource_id).await;
        self.inner.interleave.at(Point::BindAfterMarkerRead).await;
        if crate::mutation::active_on(
            &self.inner.table,
            crate::mutation::Mutation::BindIgnoresEnded,
        ) {
            ended = Ok(false);
        }
        if !matches!(ended, Ok(false)) {
            return Err(self.give_back(r, resource_id, row, ended, now).await);
        }
        match self.extend_ledger(r, row.binding, now).await {
            Ok(()) => {
                self.extend_entry(&r.coordinate, &r.id, row.binding);
                Ok(Token {
                    coordinate: r.coordinate.clone(),
                    reservation_id: r.id.clone(),
                    resource_id: resource_id.to_string(),
                    expiration_time: row.binding.exp,
                })
            }
            Err(failure) => {
                self.delete_own_row(resource_id, &r.id, row).await;
                Err(failure)
            }
        }
    }

    /// A bind whose resource ended (`Ok(true)`), or whose marker read failed: gives the unit back
    /// only while the entry is still a reservation (an unbound expiry) or, the resource having
    /// ended, holds this row's own binding — never a binding to another resource, nor one it
    /// cannot prove ended — rather than hold it for a token's lifetime with no remover event left
    /// to come. Deletes the row only if this call wrote it. 1 UpdateItem (+1 DeleteItem).
    /// Answers `ResourceEnded` when it released the entry, `AlreadyBound` or `Gone` from the
    /// entry it kept, and the read's error when it could not tell.
    async fn give_back(
        &self,
        r: &Reservation,
        resource_id: &str,
        row: BoundRow,
        ended: Result<bool>,
        now: Timestamp,
    ) -> ReservationError {
        let unbound_until = self.unbound_until(now.as_secs());
        let holding = match ended {
            _ if crate::mutation::active_on(
                &self.inner.table,
                crate::mutation::Mutation::BindReleasesBoundElsewhere,
            ) =>
            {
                Holding::Any
            }
            Ok(_) => Holding::Binding {
                binding: row.binding,
                unbound_until,
            },
            Err(_) => Holding::Unbound { unbound_until },
        };
        let removed = self.remove_entry(&r.coordinate, &r.id, holding).await;
        self.delete_own_row(resource_id, &r.id, row).await;
        match (ended, removed) {
            (Err(e), _) | (Ok(_), Err(e)) => e.into(),
            (Ok(_), Ok(Removal::Released)) => ReservationError::ResourceEnded {
                reservation_id: r.id.clone(),
                resource_id: resource_id.to_string(),
            },
            (Ok(_), Ok(Removal::Kept(held))) => bind_refusal(held, (&r.coordinate, &r.id), now),
        }
    }

    /// Deletes a failed bind's row if this call wrote it (conditioned on its binding); a row that
    /// was there before is another bind's (or this reservation's binding to this resource), which
    /// the remover still needs.
    async fn delete_own_row(&self, resource_id: &str, id: &str, row: BoundRow) {
        let mutated = crate::mutation::active_on(
            &self.inner.table,
            crate::mutation::Mutation::BindDeletesOriginalRow,
        );
        if row.created || mutated {
            self.delete_bound_row(resource_id, id, row.binding).await;
        }
    }

    /// Bind's second write: the ledger entry (in the shard its id names) moved to the bound row's
    /// binding, only while the entry is live and unbound, or already holds that binding (the same
    /// bind again, or its own write re-sent after a lost answer). 1 UpdateItem; a refusal is decided
    /// from the entry as it is ([`bind_refusal`]). Liveness is `>= now + 1`: a binding's value has a
    /// fraction, and it is live while its whole part is ahead of `now`, as [`is_live`] reads it.
    async fn extend_ledger(
        &self,
        r: &Reservation,
        binding: Binding,
        now: Timestamp,
    ) -> Result<(), ReservationError> {
        let mut attempt = 0;
        let (mut k, mut searched) = (first_shard(&r.id), false);
        loop {
            let req = self
                .update_row(&r.coordinate, &shard::sort_key(k))
                .update_expression("SET #live.#id = :bind")
                .condition_expression(
                    "#live.#id >= :next AND (#live.#id <= :unbound OR #live.#id = :bind)",
                )
                .expression_attribute_names("#live", LEDGER_MAP)
                .expression_attribute_names("#id", &r.id)
                .expression_attribute_values(":bind", binding.value())
                .expression_attribute_values(":next", n(now.as_secs() + 1))
                .expression_attribute_values(":unbound", n(self.unbound_until(now.as_secs())));
            match update_attempt(req).await? {
                Attempt::Done(()) => return Ok(()),
                Attempt::Failed(old) => {
                    let held = Ledger::parse(&self.inner.table, old.as_ref())?
                        .live
                        .get(&r.id)
                        .map(|(e, _)| *e);
                    if held.is_none() && !searched {
                        searched = true;
                        if let Some(found) = self.find_unsuffixed(&r.coordinate, &r.id, k).await? {
                            k = found;
                            continue;
                        }
                    }
                    let refusal = bind_refusal(held, (&r.coordinate, &r.id), now);
                    if matches!(refusal, ReservationError::Gone { .. }) {
                        self.forget_entry(&r.coordinate, &r.id);
                    }
                    return Err(refusal);
                }
                Attempt::Retry => Self::pause(&mut attempt, &r.coordinate).await?,
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
    pub(super) async fn pause(attempt: &mut u32, coordinate: &str) -> Result<()> {
        *attempt += 1;
        if *attempt >= MAX_ATTEMPTS {
            return Err(Error::contended(coordinate, MAX_ATTEMPTS));
        }
        Backoff::CONDITIONAL.wait(*attempt).await;
        Ok(())
    }

    /// Deletes a reservation or token and releases its capacity. Idempotent: deleting what is already
    /// gone is a no-op. **1** call: UpdateItem removing the ledger entry from the shard its id names
    /// (1 WCU). A token's bound row is left to its TTL (it holds nothing). Returns whether a ledger
    /// entry was released.
    pub async fn release(&self, coordinate: &str, id: &str) -> Result<bool> {
        Self::check_id(id)?;
        let removal = self.remove_entry(coordinate, id, Holding::Any).await?;
        Ok(removal == Removal::Released)
    }

    /// The remover's release of the entry a bound row names: only while the entry still holds that
    /// row's binding or is not bound yet (a bind between its row and its ledger write), so a row
    /// left behind by a bind that failed never releases a later binding to another resource, even
    /// one expiring in the same second (its bind id differs).
    pub(super) async fn release_binding(
        &self,
        coordinate: &str,
        id: &str,
        binding: Binding,
    ) -> Result<bool> {
        Self::check_id(id)?;
        let token_ttl = self.inner.token_ttl.as_secs() as i64;
        let holding = if crate::mutation::active_on(
            &self.inner.table,
            crate::mutation::Mutation::RemoverReleasesAnyBinding,
        ) {
            Holding::Any
        } else {
            Holding::Binding {
                binding,
                unbound_until: self.unbound_until(binding.exp - token_ttl),
            }
        };
        let removal = self.remove_entry(coordinate, id, holding).await?;
        Ok(removal == Removal::Released)
    }

    /// Removes an entry from the shard its id names (or, for ids without a shard number, the one
    /// holding it), under `holding`'s condition. 1 UpdateItem; a failed condition answers the
    /// entry as it is (ALL_OLD).
    async fn remove_entry(&self, coordinate: &str, id: &str, holding: Holding) -> Result<Removal> {
        let mut attempt = 0;
        let (mut k, mut searched) = (first_shard(id), false);
        let removal = loop {
            let req = self
                .update_row(coordinate, &shard::sort_key(k))
                .update_expression("REMOVE #live.#id")
                .expression_attribute_names("#live", LEDGER_MAP)
                .expression_attribute_names("#id", id);
            let req = match holding {
                Holding::Any => req.condition_expression("attribute_exists(#live.#id)"),
                Holding::Unbound { unbound_until } => req
                    .condition_expression("#live.#id <= :unbound")
                    .expression_attribute_values(":unbound", n(unbound_until)),
                Holding::Binding {
                    binding,
                    unbound_until,
                } => req
                    .condition_expression("#live.#id = :bind OR #live.#id <= :unbound")
                    .expression_attribute_values(":bind", binding.value())
                    .expression_attribute_values(":unbound", n(unbound_until)),
            };
            match update_attempt(req).await? {
                Attempt::Done(()) => break Removal::Released,
                Attempt::Failed(old) => {
                    let held = Ledger::parse(&self.inner.table, old.as_ref())?
                        .live
                        .get(id)
                        .map(|(e, _)| *e);
                    if held.is_some() || searched {
                        break Removal::Kept(held);
                    }
                    searched = true;
                    match self.find_unsuffixed(coordinate, id, k).await? {
                        Some(found) => k = found,
                        None => break Removal::Kept(None),
                    }
                }
                Attempt::Retry => Self::pause(&mut attempt, coordinate).await?,
            }
        };
        if let Removal::Released | Removal::Kept(None) = removal {
            self.forget_entry(coordinate, id);
        }
        Ok(removal)
    }

    /// Deletes a token row keyed by its coordinate (written before bound rows, or by rate-limiter-py)
    /// once the remover has released it. 1 DeleteItem.
    pub(super) async fn delete_coordinate_row(&self, coordinate: &str, id: &str) -> Result<()> {
        let mut attempt = 0;
        loop {
            match self.delete_row(coordinate, id).send().await {
                Ok(_) => return Ok(()),
                Err(err) => match attempt_of("DeleteItem", err, |_: &DeleteItemError| None)? {
                    Attempt::Retry => Self::pause(&mut attempt, coordinate).await?,
                    Attempt::Done(()) | Attempt::Failed(_) => return Ok(()),
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
    /// remover has seen end is [`ReservationError::ResourceEnded`] (the reservation released); one
    /// bound to another resource is [`ReservationError::AlreadyBound`], whether or not this resource
    /// ended, and keeps its binding, as it does through any failed bind. **3** calls, 2 WCU.
    pub async fn create_token(&self, resource_id: &str) -> Result<Token, ReservationError> {
        self.limiter.bind(self, resource_id).await
    }

    /// Deletes the reservation (or its token) and releases its capacity; idempotent. **1** call.
    pub async fn delete(&self) -> Result<(), ReservationError> {
        self.limiter.release(&self.coordinate, &self.id).await?;
        Ok(())
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_refused_bind_is_already_bound_only_while_the_entry_is_live() {
        let now = Timestamp::from_secs(100);
        let refuse = |held: Option<i64>| match bind_refusal(held, ("emr:1", "r"), now) {
            ReservationError::AlreadyBound { bound_until, .. } => format!("bound:{bound_until}"),
            ReservationError::Gone { .. } => "gone".into(),
            other => format!("{other}"),
        };
        assert_eq!(refuse(Some(200)), "bound:200");
        assert_eq!(refuse(Some(100)), "gone", "that token has expired");
        assert_eq!(refuse(None), "gone", "released, or never there");
    }
}
