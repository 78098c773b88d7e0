//! What `$connect` answers: admitted with a reservation to give back, or refused with the limit
//! that refused it.

use super::super::Limit;
use super::minute::{rate, Minute};
use crate::clock::Timestamp;
use crate::error::{Error, Result};
use crate::gcra::{self};
use crate::ids::{SessionId, TenantId};
use crate::refusal::Refusal;
use crate::tenant::Limits;

/// The result of an admission.
#[derive(Debug)]
pub enum Admission {
    /// The connection now holds its capacity.
    Admitted,
    /// This connection id had already been admitted (a repeated `$connect`): nothing changed.
    AlreadyAdmitted,
    /// Over a limit; nothing is spent (a reservation made on the way was given back).
    Refused { limit: Limit, refusal: Refusal },
    /// The session does not exist or has expired; nothing is spent.
    NoSession,
    /// The ticket already admitted the `connects` connections it was minted for; nothing is spent.
    /// Not a limit of the tenant's: refused in shadow mode too.
    TicketSpent { connects: u64 },
}

/// A held reservation on the tenant's counter: what step 1 wrote, so it can be undone exactly.
#[derive(Debug, Clone)]
pub struct Reservation {
    pub(super) tenant: TenantId,
    /// The counter item charged: `{tenant}`, or one shard of a sharded tenant (decision 1502).
    pub(super) key: String,
    /// A shard's count may be below zero (releases credit the shard their id hashes to).
    pub(super) sharded: bool,
    /// What the join records as `chg:{cid}`: the shard charged, or `session::TENANT_COUNTER`.
    pub(super) charged: i64,
    pub(super) minute: Minute,
    /// The decision instant (the GCRA spend's `now`).
    pub(super) at: Timestamp,
    /// When step 1 applied (process time), for [`JOIN_DEADLINE`].
    pub(super) reserved: std::time::Instant,
}

/// The first limit that is 0 (it blocks its dimension: refused with no call).
pub fn zero_limit(limits: &Limits) -> Option<Limit> {
    [
        Limit::TenantConnections,
        Limit::ConnectionsPerSession,
        Limit::TenantPerMinute,
        Limit::SessionPerMinute,
    ]
    .into_iter()
    .find(|l| l.cap(limits) == 0)
}

pub(super) fn who(limit: Limit, t: &TenantId, sid: &SessionId) -> String {
    match limit {
        Limit::TenantConnections | Limit::TenantPerMinute => format!("tenant {t}"),
        _ => format!("session {sid} of tenant {t}"),
    }
}

pub(in crate::admission) fn refusal(
    limit: Limit,
    limits: &Limits,
    now: Timestamp,
    t: &TenantId,
    sid: &SessionId,
    gcra: Option<gcra::Decision>,
) -> Admission {
    let refusal = match gcra.and_then(|d| rate(limit, limit.cap(limits)).ok().map(|r| (r, d))) {
        Some((rate, d)) => {
            let detail = format!(
                "{} opened connections at its limit of {} per minute",
                who(limit, t, sid),
                rate.count
            );
            Refusal::from_gcra(limit.name(), &rate, &d, detail)
        }
        None => limit.refusal(limits, now, &who(limit, t, sid)),
    };
    Admission::Refused { limit, refusal }
}

/// What step 2 ended with: an answer, or giving up with no attempt applied.
pub(super) enum Joined {
    Answer(Admission),
    GaveUp(Error),
}

impl Joined {
    pub(super) fn into_result(self) -> Result<Admission> {
        match self {
            Joined::Answer(a) => Ok(a),
            Joined::GaveUp(e) => Err(e),
        }
    }
}

impl Reservation {
    /// The tenant whose counter holds this reservation.
    pub fn tenant(&self) -> &TenantId {
        &self.tenant
    }
}
