//! `$connect`'s admission: the per-minute windows, the reservation it makes, and the answer.

use super::hints::Hints;
use super::reserve::{reserve, undo};
use std::time::Duration;

use super::super::write::Parts;
use super::super::{Limit, Request};
use crate::clock::Timestamp;
use crate::counter::attr as cattr;
use crate::counter::window::MinuteWindow;
use crate::dynamo::item::{self, n, Item};
use crate::error::{Error, Result};
use crate::gcra::{self, Rate};
use crate::ids::{SessionId, TenantId};
use crate::kv::write::{SpendPlan, Target};
use crate::refusal::Refusal;
use crate::session::attr as sattr;
use crate::tenant::{Limits, WindowAlgorithm};

/// Wrong bets per step before giving up (a write refused with room: another writer moved the
/// item between this process's look and its write). Settle waits ([`SETTLE_ATTEMPTS`]) and
/// throttled attempts have budgets of their own.
pub const MAX_ATTEMPTS: u32 = 8;
/// How recent a reservation must be for a step-1 refusal to wait for it to settle.
pub const SETTLE: Duration = Duration::from_millis(500);
/// Step-1 refusals re-tried while reservations settle (jittered backoff up to 20, 40, 80, 160,
/// 320, 320 ms: under a second in all).
pub(super) const SETTLE_ATTEMPTS: u32 = 6;
/// Step 2 is not sent later than this after step 1 (so a reservation is settled within a known
/// time: the reconciler's grace must exceed it).
pub const JOIN_DEADLINE: Duration = Duration::from_secs(5);

/// The per-minute part of one write.
#[derive(Debug, Clone)]
pub(in crate::admission) enum Minute {
    /// The stored window starts at `m`: increment it, if under `cap`.
    Same { m: i64, cap: u64 },
    /// The stored window is older (or absent): start `m` at 1.
    New { m: i64, cap: u64 },
    /// A GCRA spend of one connection.
    Gcra(SpendPlan),
}

/// Attribute names of a folded minute on one item.
pub(in crate::admission) struct MinuteAttrs {
    pub(super) minute: &'static str,
    pub(super) count: &'static str,
    pub(super) tat: &'static str,
}

pub(in crate::admission) const TENANT_MINUTE: MinuteAttrs = MinuteAttrs {
    minute: cattr::CONN_MINUTE,
    count: cattr::CONN_MINUTE_COUNT,
    tat: cattr::CONN_TAT,
};
pub(super) const SESSION_MINUTE: MinuteAttrs = MinuteAttrs {
    minute: sattr::CONN_MINUTE,
    count: sattr::CONN_MINUTE_COUNT,
    tat: sattr::CONN_TAT,
};

impl MinuteAttrs {
    /// What a hint remembers of an item: its window start or its TAT.
    pub(in crate::admission) fn stored(
        &self,
        alg: WindowAlgorithm,
        old: Option<&Item>,
    ) -> Option<i64> {
        let attr = match alg {
            WindowAlgorithm::Fixed => self.minute,
            WindowAlgorithm::Gcra => self.tat,
        };
        old.and_then(|o| item::num(o, attr))
    }
}

pub(super) fn rate(limit: Limit, cap: u64) -> Result<Rate> {
    Rate::per_minute(cap).map_err(|e| Error::Other(format!("{} = {cap}: {e}", limit.name())))
}

impl Minute {
    /// The bet for a limit of `cap` a minute at `now`, from what was last seen (`stored`).
    pub(in crate::admission) fn bet(
        alg: WindowAlgorithm,
        limit: Limit,
        cap: u64,
        stored: Option<i64>,
        now: Timestamp,
    ) -> Result<Minute> {
        let m = MinuteWindow::at(now).start;
        Ok(match alg {
            WindowAlgorithm::Fixed => match stored {
                Some(sm) if sm >= m => Minute::Same { m: sm, cap },
                _ => Minute::New { m, cap },
            },
            WindowAlgorithm::Gcra => Minute::Gcra(
                SpendPlan::spend(rate(limit, cap)?, now, 1, stored.map(Timestamp::from_nanos))
                    .map_err(|e| Error::Other(format!("{}: {e}", limit.name())))?,
            ),
        })
    }

    pub(super) fn same_bet(&self, other: &Minute) -> bool {
        match (self, other) {
            (Minute::Same { m: a, .. }, Minute::Same { m: b, .. }) => a == b,
            (Minute::New { m: a, .. }, Minute::New { m: b, .. }) => a == b,
            (Minute::Gcra(a), Minute::Gcra(b)) => a.case == b.case,
            _ => false,
        }
    }

    /// Adds this bet's condition and update to `p`.
    pub(super) fn write(&self, p: &mut Parts, a: &MinuteAttrs) {
        match self {
            Minute::Same { m, cap } => {
                p.name("#cm", a.minute).name("#cn", a.count);
                p.value(":m", n(m))
                    .value(":mcap", n(cap))
                    .value(":one", n(1));
                p.conditions.push("#cm = :m AND #cn < :mcap".into());
                p.set.push("#cn = #cn + :one".into());
            }
            Minute::New { m, cap } => {
                p.name("#cm", a.minute).name("#cn", a.count);
                p.value(":m", n(m)).value(":one", n(1));
                // A zero cap never gets here (refused before any call); even so it admits nothing.
                if *cap == 0 {
                    p.value(":mcap", n(0));
                    p.conditions.push("#cn < :mcap".into());
                }
                p.conditions
                    .push("attribute_not_exists(#cm) OR #cm < :m".into());
                p.set.push("#cm = :m".into());
                p.set.push("#cn = :one".into());
            }
            Minute::Gcra(plan) => {
                let mut target = Target::new("", "k", "", None, Duration::ZERO);
                target.tat_attr = a.tat.to_string();
                let e = plan.expression(&target);
                p.conditions.push(e.condition);
                p.set.push(e.update.trim_start_matches("SET ").to_string());
                p.names.extend(e.names);
                p.values.extend(e.values);
            }
        }
    }

    /// Whether the old item has no room for one more connection this minute (the refusal, with
    /// the GCRA decision for a GCRA limit).
    pub(in crate::admission) fn refused(
        &self,
        a: &MinuteAttrs,
        old: Option<&Item>,
    ) -> Option<Option<gcra::Decision>> {
        match self {
            Minute::Same { m, cap } | Minute::New { m, cap } => {
                let stored = old.and_then(|o| item::num(o, a.minute));
                let count = old.and_then(|o| item::num(o, a.count)).unwrap_or(0);
                let full = stored.is_some_and(|sm| sm >= *m) && count >= *cap as i64;
                full.then_some(None)
            }
            Minute::Gcra(plan) => {
                let tat = old
                    .and_then(|o| item::num(o, a.tat))
                    .map(Timestamp::from_nanos);
                match gcra::spend(&plan.rate, tat, plan.now, 1) {
                    Ok(d) if !d.allowed => Some(Some(d)),
                    _ => None,
                }
            }
        }
    }
}

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

/// Admits `cid` into the session under `limits`, without hints (a GCRA tenant's first bets are
/// "idle"): use [`admit_hinted`] with hints kept across invocations.
pub async fn admit(r: Request<'_>) -> Result<Admission> {
    admit_hinted(r, &Hints::default()).await
}

/// [`admit`], betting on each minute's case from `hints` (and updating them). 2 `UpdateItem` when
/// admitted and the bets are right; each wrong bet costs one more; a ticket's use 1 more, and its
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

/// What a hint should remember after a successful write of `minute`.
pub(super) fn after(minute: &Minute) -> Option<i64> {
    match minute {
        Minute::Same { m, .. } | Minute::New { m, .. } => Some(*m),
        Minute::Gcra(plan) => Some(plan.admitted(None, None).new_tat.as_nanos()),
    }
}

impl Reservation {
    /// The tenant whose counter holds this reservation.
    pub fn tenant(&self) -> &TenantId {
        &self.tenant
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::kv::write::Case;

    fn old(pairs: &[(&str, i64)]) -> Item {
        pairs.iter().map(|(k, v)| (k.to_string(), n(v))).collect()
    }

    #[test]
    fn a_zero_limit_is_found_in_the_seeds_order() {
        let mut l = Limits::example(60, 5, 2, 10, 200, 60);
        assert_eq!(zero_limit(&l), None);
        l.session_per_minute = 0;
        assert_eq!(zero_limit(&l), Some(Limit::SessionPerMinute));
        l.tenant_connections = 0;
        assert_eq!(zero_limit(&l), Some(Limit::TenantConnections));
    }

    #[test]
    fn fixed_minute_bets_and_refusals_come_from_the_old_item() {
        let now = Timestamp::from_secs(1_700_000_070);
        let m = MinuteWindow::at(now).start;
        let alg = WindowAlgorithm::Fixed;
        let bet = |stored| Minute::bet(alg, Limit::TenantPerMinute, 3, stored, now).unwrap();
        assert!(matches!(bet(None), Minute::New { .. }));
        assert!(matches!(bet(Some(m - 60)), Minute::New { .. }));
        assert!(matches!(bet(Some(m)), Minute::Same { .. }));
        let a = &TENANT_MINUTE;
        let full = old(&[(a.minute, m), (a.count, 3)]);
        assert_eq!(bet(None).refused(a, Some(&full)), Some(None));
        let room = old(&[(a.minute, m), (a.count, 2)]);
        assert_eq!(bet(None).refused(a, Some(&room)), None);
        let stale = old(&[(a.minute, m - 60), (a.count, 3)]);
        assert_eq!(bet(Some(m)).refused(a, Some(&stale)), None);
        // Every placeholder the expressions use is defined, and nothing else is.
        for b in [bet(None), bet(Some(m))] {
            let mut p = Parts::default();
            b.write(&mut p, a);
            let text = format!("{} {}", p.condition().unwrap(), p.update());
            for k in p.names.keys().chain(p.values.keys()) {
                assert!(text.contains(k.as_str()), "{k} unused in {text}");
            }
        }
    }

    #[test]
    fn gcra_minute_bets_use_the_stored_tat() {
        let now = Timestamp::from_secs(1_700_000_070);
        let alg = WindowAlgorithm::Gcra;
        let a = &SESSION_MINUTE;
        let idle = Minute::bet(alg, Limit::SessionPerMinute, 4, None, now).unwrap();
        assert!(matches!(&idle, Minute::Gcra(p) if p.case == Case::Idle));
        let ahead = now.plus(Duration::from_secs(30)).as_nanos();
        let draining = Minute::bet(alg, Limit::SessionPerMinute, 4, Some(ahead), now).unwrap();
        assert!(matches!(&draining, Minute::Gcra(p) if p.case == Case::Draining));
        assert!(!idle.same_bet(&draining));
        // Four connections a minute: a TAT a full minute ahead has no room; retry in 15 s.
        let full = old(&[(a.tat, now.plus(Duration::from_secs(60)).as_nanos())]);
        match idle.refused(a, Some(&full)) {
            Some(Some(d)) => assert_eq!(d.retry_in, Duration::from_secs(15)),
            other => panic!("{other:?}"),
        }
        let mut p = Parts::default();
        draining.write(&mut p, a);
        assert!(
            p.update().starts_with("SET #tat = #tat + :inc"),
            "{}",
            p.update()
        );
    }
}
