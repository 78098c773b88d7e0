//! The tenant's session count (`maxSessions`, decision 2204) and each signed-in user's
//! (`maxSessionsPerSubject`, decision 3602): a session row is created only together with a unit
//! of `{tenant}:sessions` — and, for a session a user creates, of `{tenant}:subject:{hash}` — in
//! one `TransactWriteItems`, so no create is ever admitted past either cap (DynamoDB evaluates
//! each count's condition on the item as serialised writes leave it) and no crash leaves a row
//! uncounted. The units are given back exactly once, by whoever ends the row: session `DELETE`
//! (`closing::delete`: the row's deletion, or for a row still holding connections its end mark,
//! with the units in one transaction with a request token, so the SDK's retry after a lost answer
//! is answered as committed) and the TTL sweeper (once per stream record, in its tombstone's
//! transaction: decision 2206; never for a row a `DELETE` ended, which has no TTL). A give-back
//! lost otherwise (a caller stopped after its transaction) leaves a count high (refusing early:
//! the safe side) until the reconciler, whose truth is the rows not ended, repairs the tenant's;
//! a user's count is not repaired (decision 3602).
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
//! | `PUT` over an expired row | 1 UpdateItem (refused) + 1 GetItem + 1 DeleteConnection per connection + 1 TransactWriteItems of the replacement and the connections' decrements, with a request token (one session replaces another) | 3 + 2 per counter charged |
//! | `PUT` refused by a cap | 1 TransactWriteItems (cancelled) | 4 (6) as metered (a cancelled transaction charged in full) |
//! | `PUT` naming another user's session (own-only caller) | 1 UpdateItem (refused) | 1 |
//! | `DELETE` | `closing::delete`: 1 GetItem + 1 TransactWriteItems (row + count(s)) without connections; with them 1 more (the end mark + count(s)), the closes, then the release | 4 (6 with an owner); 4 (6) + 2 per item of the release |
//! | TTL sweep of a session | + 1 item (2 with an owner) in the sweep's TransactWriteItems (1 call of tombstone + session count when it held no connection) | + 2 per item (4 without connections) |
//!
//! A `PUT` over an expired row closes its sockets first and replaces the row only once every one
//! is known gone (decision 2208): a socket not known gone yet (a failed close, a 410 within a grace
//! of its join) leaves the row as it is, counting them, and the `PUT` answers that the session is
//! still closing. An expired row a `DELETE` ended (its units given back) is deleted instead, and a
//! counted session created in its place.

use aws_sdk_dynamodb::types::{Put, TransactWriteItem};

use super::closing::{self, Drained, Sockets};
use super::connect::count_move;
use super::write::ConditionalUpdate;
use super::Limit;
use crate::counter::{attr as counter_attr, keys};
use crate::dynamo::item::{n, s, Item};
use crate::dynamo::retry::Backoff;
use crate::dynamo::txn::{self, Reason};
use crate::error::{Error, Result};
use crate::ids::{SessionId, TenantId};
use crate::session::store::{self as sstore, Refresh};
use crate::session::{attr as session_attr, Session};
use crate::Deps;

/// Creates that met a concurrent create of the same id, an expired row changing under its
/// replacement, or a transaction conflict, tried again.
const ATTEMPTS: u32 = 4;

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
    /// A stored session had expired without DynamoDB deleting it yet: its sockets were closed,
    /// and once every one was known gone it was replaced by a fresh one together with their
    /// release. `stale` is the replaced row as read. The session count is unchanged.
    Replaced { session: Session, stale: Session },
    /// A stored session had expired, and these of its sockets are not known gone yet (a failed
    /// close, or a 410 within a grace of its last join): the row stays, counting them. Try again
    /// after [`closing::MIN_GRACE`].
    Closing { pending: Vec<String> },
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
    sockets: &dyn Sockets,
) -> Result<Opened> {
    let caps = Caps {
        tenant: cap,
        subject: cap,
    };
    open_as(deps, t, sid, ttl, caps, new, Caller::BACKEND, sockets).await
}

/// Creates the session (counted against `caps`, owned by `caller.subject`) or refreshes it to
/// `ttl` (epoch seconds). `new`: the id was just generated, so there is nothing to refresh and the
/// create is tried first. An expired row is replaced once its sockets, closed through `sockets`,
/// are all known gone.
#[allow(clippy::too_many_arguments)]
pub async fn open_as(
    deps: &Deps,
    t: &TenantId,
    sid: &SessionId,
    ttl: i64,
    caps: Caps,
    new: bool,
    caller: Caller<'_>,
    sockets: &dyn Sockets,
) -> Result<Opened> {
    let mut try_create = new;
    let owner = caller.subject;
    for attempt in 1..=ATTEMPTS {
        if !try_create {
            match sstore::refresh(deps, t, sid, ttl, caller.own()).await? {
                Refresh::Live(s) => return Ok(Opened::Live(s)),
                Refresh::NotYours => return Ok(Opened::NotYours),
                Refresh::Expired(seen) => {
                    // The replacement keeps the row's owner: one session replaces another, and
                    // no count moves.
                    let nonce = sstore::new_nonce()?;
                    let owner = seen.owner.clone();
                    let fresh = sstore::new_row(t, sid, ttl, &nonce, owner.as_deref());
                    match closing::drain_expired(deps, t, sid, fresh, sockets).await? {
                        Drained::Replaced(stale) => {
                            let session = sstore::fresh(t, sid, ttl, nonce, owner);
                            return Ok(Opened::Replaced { session, stale });
                        }
                        Drained::Closing(pending) => return Ok(Opened::Closing { pending }),
                        // Deleted (it had been ended, its units given back: create a counted
                        // one), or another PUT replaced it or it changed meanwhile: the next
                        // round looks again.
                        Drained::Deleted(_) => try_create = true,
                        Drained::Changed => Backoff::TRANSACTION.wait(attempt).await,
                    }
                    continue;
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

/// A session count (`{tenant}:sessions`, `{tenant}:subject:{hash}`): `ADD itemCount 1` (and
/// `ver`, `resvTotal`) while under `cap`.
fn count_item(deps: &Deps, key: &str, cap: u64) -> Result<TransactWriteItem> {
    let mut p = ConditionalUpdate::default();
    count_move(&mut p, 1);
    p.value(":cap", n(cap));
    p.conditions
        .push("attribute_not_exists(#c) OR #c < :cap".into());
    let key = Item::from([(counter_attr::KEY.to_string(), s(key))]);
    p.transact_update(&deps.tables.counters, key, "a session count")
}

/// The new row, only if no row has this id.
fn row_item(deps: &Deps, row: Item) -> Result<TransactWriteItem> {
    let put = Put::builder()
        .table_name(&deps.tables.sessions)
        .set_item(Some(row))
        .condition_expression("attribute_not_exists(#sid)")
        .expression_attribute_names("#sid", session_attr::SESSION_ID)
        .build()
        .map_err(|e| Error::build_request("a session row", e))?;
    Ok(TransactWriteItem::builder().put(put).build())
}
