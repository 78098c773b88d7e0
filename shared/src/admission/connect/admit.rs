//! `$connect`'s admission: step 1 reserves the connection, step 2 joins the session.

use super::hints::Hints;
use super::reserve::{reserve, undo};

use super::super::Request;
use super::answer::{refusal, zero_limit, Admission, Joined, Reservation};
use crate::error::Result;

/// Admits `cid` into the session under `limits`, without hints (a GCRA tenant's first bets are
/// "idle"): use [`admit_hinted`] with hints kept across invocations.
pub async fn admit(r: Request<'_>) -> Result<Admission> {
    admit_hinted(r, &Hints::default()).await
}

/// [`admit`], betting on each minute's case from `hints` (and updating them). 2 `UpdateItem` when
/// admitted and the bets are right; each wrong guess costs one more; a ticket's use 1 more, and its
/// give-back on a refusal another.
pub async fn admit_hinted(r: Request<'_>, hints: &Hints) -> Result<Admission> {
    let (deps, t, sid, limits) = (r.deps, r.t, r.sid, r.limits);
    let now = deps.clock.now();
    if let Some(limit) = zero_limit(limits) {
        return Ok(refusal(limit, limits, now, t, sid, None));
    }
    let Some(ticket) = r.ticket else {
        return admit_counted(r, hints).await;
    };
    if !super::ticket_use::claim(deps, t, r.cid, ticket).await? {
        return Ok(Admission::TicketSpent {
            connects: ticket.connects,
        });
    }
    let admitted = admit_counted(r, hints).await;
    // A refused connect took no slot: its use goes back to the ticket. An error keeps it (the
    // outcome may be unknown: the ticket then admits one fewer, the safe side).
    if let Ok(Admission::Refused { .. } | Admission::NoSession) = &admitted {
        if let Err(e) = super::ticket_use::give_back(deps, t, r.cid, ticket).await {
            tracing::warn!(tenant = %t, error = %e, "giving a ticket's use back failed");
        }
    }
    admitted
}

/// Steps 1 and 2 (and the undo) for a connect whose ticket, if any, admitted it.
pub(super) async fn admit_counted(r: Request<'_>, hints: &Hints) -> Result<Admission> {
    let reservation = match reserve(r.deps, r.t, r.sid, r.limits, hints).await? {
        Ok(held) => held,
        Err(refused) => return Ok(refused),
    };
    complete(r, hints, &reservation).await
}

/// Step 2 for a held reservation, then the undo when step 2 certainly did not apply: refused by
/// its condition, refused by DynamoDB before applying (`Error::DynamoRejected`: throttled,
/// invalid — a session item at the 400 KB limit —, denied, no table), or given up (the join
/// deadline, or no decision after [`MAX_ATTEMPTS`]: every attempt before either was refused, so
/// none applied). Any other error of the session write (a timeout, a lost answer: its outcome
/// unknown) keeps the reservation: a count one too high, repaired by `reconcile`.
pub async fn complete(
    r: Request<'_>,
    hints: &Hints,
    reservation: &Reservation,
) -> Result<Admission> {
    let joined = super::join::join_inner(r, hints, reservation).await?;
    let mutated = crate::mutation::active(r.deps, crate::mutation::Mutation::UndoAfterJoin);
    if mutated || !matches!(joined, Joined::Answer(Admission::Admitted)) {
        if let Err(e) = undo(r.deps, reservation).await {
            // The count stays one too high: an under-admission the reconciler repairs.
            tracing::warn!(tenant = %r.t, error = %e, "giving back a $connect reservation failed");
        }
    }
    joined.into_result()
}
