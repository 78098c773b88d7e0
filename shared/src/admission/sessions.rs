//! The tenant's session count (`maxSessions`, decision 2204) and each signed-in user's
//! (`maxSessionsPerSubject`, decision 3602): a session row is created only together with a unit
//! of `{tenant}:sessions` — and, for a session a user creates, of `{tenant}:subject:{hash}` — in
//! one `TransactWriteItems`, so no create is ever admitted past either cap (DynamoDB evaluates
//! each count's condition on the item as serialised writes leave it) and no crash leaves a row
//! uncounted. The units are given back exactly once, by whoever learns the row is gone: session
//! `DELETE` (the row and the units in one transaction with a request token, so the SDK's retry
//! after a lost answer is answered as committed: [`delete`]) and the TTL sweeper (once per stream
//! record, in its tombstone's transaction: decision 2206). A give-back lost otherwise (a caller
//! stopped after its transaction, before closing) leaves a count high (refusing early: the safe
//! side) until the reconciler repairs the tenant's; a user's count is not repaired (decision 3602).
//!
//! A session's owner (`owner`, the creating user's `sub`) is fixed for the row's life: a replace
//! of an expired row keeps it, so a user's count never moves on a replace. A caller that reaches
//! only its own sessions ([`Caller::own_only`]) refreshes, replaces and deletes only rows it owns;
//! another's row answers as a missing one.
//!
//! | path | calls | write units |
//! |---|---|---|
//! | `PUT` of a new session (no `sessionId`) | 1 TransactWriteItems (count + row; + the user's count) | 4 (6 for a user's) |
//! | `PUT` naming a session that does not exist | 1 UpdateItem (refused) + 1 TransactWriteItems | 5 (7) |
//! | `PUT` refreshing a live session | 1 UpdateItem, as before | 1 |
//! | `PUT` over an expired row | 1 UpdateItem (refused) + 1 TransactWriteItems of the replacement, with a request token (one session replaces another) | 3 (2 before decision 2206's amendment: a `PutItem`) |
//! | `PUT` refused by a cap | 1 TransactWriteItems (cancelled) | 4 (6) as metered (a cancelled transaction charged in full) |
//! | `PUT` naming another user's session (own-only caller) | 1 UpdateItem (refused) | 1 |
//! | `DELETE` | 1 GetItem + 1 TransactWriteItems (row + count(s), with a request token) | 4 (6 with an owner; 2 before: `DeleteItem` + `UpdateItem`) |
//! | TTL sweep of a session | + 1 item (2 with an owner) in the sweep's TransactWriteItems (1 call of tombstone + session count when it held no connection) | + 2 per item (4 without connections) |

use aws_sdk_dynamodb::types::{Put, TransactWriteItem};

use super::connect::count_move;
use super::release::{self, Attempt};
use super::write::Parts;
use super::Limit;
use crate::counter::{attr as cattr, keys};
use crate::dynamo::item::{n, s, Item};
use crate::dynamo::retry::Backoff;
use crate::dynamo::txn::{self, Reason};
use crate::error::{Error, Result};
use crate::ids::{SessionId, TenantId};
use crate::session::store::{self as sstore, Refresh};
use crate::session::{attr as sattr, Session};
use crate::Deps;

/// Creates that met a concurrent create of the same id, or a transaction conflict, tried again.
const ATTEMPTS: u32 = 4;
/// Attempts of a deletion: after the row is closed to joins each refusal means a connection left
/// (or a conflict), so a session with many connections leaving at once needs more than [`ATTEMPTS`].
const DELETE_ATTEMPTS: u32 = 12;

/// Whose sessions a call reaches, and whose a create makes.
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq)]
pub struct Caller<'a> {
    /// A signed-in user's `sub`: the owner of the sessions it creates, which count under
    /// `maxSessionsPerSubject`. `None`: a backend (its sessions have no owner).
    pub subject: Option<&'a str>,
    /// The call reaches only sessions `subject` owns (a user who is no tenant admin).
    pub own_only: bool,
}

impl<'a> Caller<'a> {
    /// A backend: every session of its tenant; creates sessions without an owner.
    pub const BACKEND: Caller<'static> = Caller {
        subject: None,
        own_only: false,
    };

    /// The owner a session must have for this call to reach it (`None`: any).
    pub fn own(&self) -> Option<&'a str> {
        self.subject.filter(|_| self.own_only)
    }
}

/// The caps a create is held to: the tenant's `maxSessions` and the creating user's
/// `maxSessionsPerSubject` (used only when the caller is a user).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Caps {
    pub tenant: u64,
    pub subject: u64,
}

/// What [`open`] did.
#[derive(Debug)]
pub enum Opened {
    /// The session is live with the new TTL: created (and counted), or refreshed.
    Live(Session),
    /// A stored session had expired without DynamoDB deleting it yet: it was replaced by a fresh
    /// one and `stale` is the replaced row (as read, and replaced only while unchanged): the caller
    /// must close and release its connections, which left with it. The count is unchanged.
    Replaced { session: Session, stale: Session },
    /// The tenant (`Limit::MaxSessions`) or the creating user (`Limit::MaxSessionsPerSubject`)
    /// holds `cap` sessions: nothing was written.
    Full { limit: Limit, cap: u64 },
    /// The row is another user's and the caller reaches only its own: nothing was written.
    NotYours,
}

/// [`open_as`] for a backend: any session of the tenant, created without an owner under the
/// tenant's `cap`.
pub async fn open(
    deps: &Deps,
    t: &TenantId,
    sid: &SessionId,
    ttl: i64,
    cap: u64,
    new: bool,
) -> Result<Opened> {
    let caps = Caps {
        tenant: cap,
        subject: cap,
    };
    open_as(deps, t, sid, ttl, caps, new, Caller::BACKEND).await
}

/// Creates the session (counted against `caps`, owned by `caller.subject`) or refreshes it to
/// `ttl` (epoch seconds). `new`: the id was just generated, so there is nothing to refresh and the
/// create is tried first.
pub async fn open_as(
    deps: &Deps,
    t: &TenantId,
    sid: &SessionId,
    ttl: i64,
    caps: Caps,
    new: bool,
    caller: Caller<'_>,
) -> Result<Opened> {
    let mut try_create = new;
    let owner = caller.subject;
    for attempt in 1..=ATTEMPTS {
        if !try_create {
            match sstore::refresh(deps, t, sid, ttl, caller.own()).await? {
                Refresh::Live(s) => return Ok(Opened::Live(s)),
                Refresh::NotYours => return Ok(Opened::NotYours),
                Refresh::Expired(seen) => {
                    // The ids to release are this image's: the replacement applies only while the
                    // row still holds exactly them (a disconnect in between released its own).
                    let nonce = sstore::new_nonce()?;
                    let Some(stale) = replace(deps, t, sid, ttl, &nonce, seen, attempt).await?
                    else {
                        // Another PUT replaced it (or it was refreshed or deleted) meanwhile:
                        // the row is live or gone now, so the next round refreshes or creates.
                        continue;
                    };
                    let session = sstore::fresh(t, sid, ttl, nonce, stale.owner.clone());
                    return Ok(Opened::Replaced { session, stale });
                }
                Refresh::Missing => {}
            }
        }
        let mut counts = vec![(Limit::MaxSessions, caps.tenant, keys::sessions(t)?)];
        if let Some(o) = owner {
            let key = keys::subject_sessions(t, o)?;
            counts.push((Limit::MaxSessionsPerSubject, caps.subject, key));
        }
        if let Some((limit, cap, _)) = counts.iter().find(|(_, cap, _)| *cap == 0) {
            return Ok(Opened::Full {
                limit: *limit,
                cap: *cap,
            });
        }
        let nonce = sstore::new_nonce()?;
        let mut items = counts
            .iter()
            .map(|(_, cap, key)| count_item(deps, key, *cap))
            .collect::<Result<Vec<_>>>()?;
        let row = sstore::new_row(t, sid, ttl, &nonce, owner);
        items.push(row_item(deps, row)?);
        match txn::send(&deps.dynamo, items).await? {
            txn::Outcome::Committed => {
                let owner = owner.map(str::to_string);
                return Ok(Opened::Live(sstore::fresh(t, sid, ttl, nonce, owner)));
            }
            txn::Outcome::Cancelled(reasons) => {
                let full = counts
                    .iter()
                    .zip(&reasons)
                    .find_map(|((limit, cap, _), r)| {
                        matches!(r, Reason::ConditionFailed(_)).then_some((*limit, *cap))
                    });
                if let Some((limit, cap)) = full {
                    return Ok(Opened::Full { limit, cap });
                }
                match reasons.get(counts.len()) {
                    // Created meanwhile by another PUT of the same id: refresh it instead.
                    Some(Reason::ConditionFailed(_)) => try_create = false,
                    _ if reasons.iter().any(Reason::is_conflict) => {
                        Backoff::TRANSACTION.wait(attempt).await;
                    }
                    _ => {
                        return Err(Error::Other(format!(
                            "creating a session of tenant {t}: transaction cancelled: {reasons:?}"
                        )))
                    }
                }
            }
        }
    }
    Err(Error::contended(
        format!("creating a session of tenant {t}"),
        ATTEMPTS,
    ))
}

/// Replaces the expired row `seen` with a fresh one, exactly once under the SDK's retries: a
/// transaction of the replacement alone (one session replaces another: the count does not move)
/// with a request token ([`release::exactly_once`]), so a retry after a lost answer is answered as
/// committed and the caller still learns it must release `seen`'s connections. `None` when the
/// row is no longer that expired one with those connections (replaced, refreshed, deleted, or a
/// connection left meanwhile: a race found by the fault-schedule simulation, decision 2300).
/// 1 TransactWriteItems (2 WCU per KB of the row).
async fn replace(
    deps: &Deps,
    t: &TenantId,
    sid: &SessionId,
    ttl: i64,
    nonce: &str,
    seen: Session,
    attempt: u32,
) -> Result<Option<Session>> {
    let fresh = sstore::new_row(t, sid, ttl, nonce, seen.owner.as_deref());
    let lead = sstore::replace_item(&deps.tables.sessions, fresh, &seen)?;
    let seed = format!("replace|{t}|{sid}|{}|{attempt}", release::request_token());
    match release::exactly_once(deps, lead, &[], None, &seed).await? {
        Attempt::Committed => Ok(Some(seen)),
        Attempt::LeadRefused(_) => Ok(None),
        Attempt::CountersRefused(_) | Attempt::Again => {
            Backoff::TRANSACTION.wait(attempt).await;
            Ok(None)
        }
    }
}

/// Deletes the session and gives back its unit of the session count (and of its owner's), exactly
/// once under the SDK's retries: the row as read (strongly consistent) is deleted only while it
/// still holds exactly those connections, together with the counts' `-1`, in one transaction with
/// a request token ([`release::exactly_once`]). With `own`, only a row that user owns is deleted
/// (another's answers `None`, as a missing one). A retry after a lost answer is answered as
/// committed, so the caller still gets the row whose connections it must close and release;
/// before, a `DeleteItem` retried after a lost answer found nothing and released nothing
/// (decision 2206). A count already at zero (repaired) drops out; a row changed meanwhile is
/// deleted on its new image. `None` when there is no row (or another caller deleted it first). 1
/// GetItem + 1 TransactWriteItems of 2 items (4 WCU for a row under 1 KB; 3 items, 6 WCU, when it
/// has an owner).
///
/// A row whose connections changed under the first attempt is closed to joins before the next
/// (its TTL set to now, as an expiry would: 1 UpdateItem, [`sstore::close`]), so only leaving
/// connections can change it after that and the deletion converges instead of losing every attempt
/// to a busy session's joins (found by the random-fault soak, decision 2300). Should this call
/// stop there, the closed row is deleted by TTL and its connections released by the sweep.
pub async fn delete(
    deps: &Deps,
    t: &TenantId,
    sid: &SessionId,
    own: Option<&str>,
) -> Result<Option<Session>> {
    let Some(mut seen) = sstore::get(deps, t, sid).await? else {
        return Ok(None);
    };
    // Counts found at zero (repaired) drop out of the plan.
    let mut floored: Vec<(String, bool)> = Vec::new();
    let call = release::request_token();
    let mut closed = false;
    for attempt in 1..=DELETE_ATTEMPTS {
        if !seen.reached_by(own) {
            return Ok(None);
        }
        let mut plan = vec![((keys::sessions(t)?, true), 1)];
        if let Some(o) = &seen.owner {
            plan.push(((keys::subject_sessions(t, o)?, true), 1));
        }
        plan.retain(|(k, _)| !floored.contains(k));
        let lead = sstore::delete_item(&deps.tables.sessions, t, sid, &seen)?;
        let seed = format!("delete|{t}|{sid}|{call}|{attempt}");
        match release::exactly_once(deps, lead, &plan, None, &seed).await? {
            Attempt::Committed => return Ok(Some(seen)),
            Attempt::LeadRefused(None) => return Ok(None),
            Attempt::LeadRefused(Some(_)) if !closed => {
                closed = true;
                match sstore::close(deps, t, sid, own).await? {
                    Some(row) => seen = row,
                    None => return Ok(None),
                }
            }
            Attempt::LeadRefused(Some(now)) => {
                seen = sstore::from_item(&deps.tables.sessions, &now)?
            }
            Attempt::CountersRefused(refused) => {
                tracing::warn!(tenant = %t, counts = ?refused, "count at zero: not given back");
                floored.extend(refused);
            }
            Attempt::Again => Backoff::TRANSACTION.wait(attempt).await,
        }
    }
    Err(Error::contended(
        format!("deleting a session of tenant {t}"),
        DELETE_ATTEMPTS,
    ))
}

/// A session count (`{tenant}:sessions`, `{tenant}:subject:{hash}`): `ADD itemCount 1` (and
/// `ver`, `resvTotal`) while under `cap`.
fn count_item(deps: &Deps, key: &str, cap: u64) -> Result<TransactWriteItem> {
    let mut p = Parts::default();
    count_move(&mut p, 1);
    p.value(":cap", n(cap));
    p.conditions
        .push("attribute_not_exists(#c) OR #c < :cap".into());
    let key = Item::from([(cattr::KEY.to_string(), s(key))]);
    p.transact_update(&deps.tables.counters, key, "a session count")
}

/// The new row, only if no row has this id.
fn row_item(deps: &Deps, row: Item) -> Result<TransactWriteItem> {
    let put = Put::builder()
        .table_name(&deps.tables.sessions)
        .set_item(Some(row))
        .condition_expression("attribute_not_exists(#sid)")
        .expression_attribute_names("#sid", sattr::SESSION_ID)
        .build()
        .map_err(|e| Error::build_request("a session row", e))?;
    Ok(TransactWriteItem::builder().put(put).build())
}
