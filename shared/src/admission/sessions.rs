//! The tenant's session count (`maxSessions`, decision 2204): a session row is created only together
//! with a unit of `{tenant}:sessions`, in one `TransactWriteItems`, so no create is ever admitted
//! past the cap (DynamoDB evaluates the count's condition on the item as serialised writes leave
//! it) and no crash leaves a row uncounted. The unit is given back exactly once, by whoever ends
//! the row: session `DELETE` (`closing::delete`: the row's deletion, or for a row still holding
//! connections its end mark, with the unit in one transaction with a request token, so the SDK's
//! retry after a lost answer is answered as committed) and the TTL sweeper (once per stream
//! record, in its tombstone's transaction: decision 2206; not for a row a `DELETE` ended). A
//! give-back lost otherwise (a caller stopped after its transaction) leaves the count high
//! (refusing early: the safe side) until the reconciler, whose truth is the rows not ended,
//! repairs it.
//!
//! | path | calls | write units |
//! |---|---|---|
//! | `PUT` of a new session (no `sessionId`) | 1 TransactWriteItems (count + row) | 4 |
//! | `PUT` naming a session that does not exist | 1 UpdateItem (refused) + 1 TransactWriteItems | 5 |
//! | `PUT` refreshing a live session | 1 UpdateItem, as before | 1 |
//! | `PUT` over an expired row | 1 UpdateItem (refused) + 1 GetItem + 1 DeleteConnection per connection + 1 TransactWriteItems of the replacement and the connections' decrements, with a request token (one session replaces another) | 3 + 2 per counter charged |
//! | `PUT` refused by the cap | 1 TransactWriteItems (cancelled) | 4 as metered (a cancelled transaction charged in full) |
//! | `DELETE` | `closing::delete`: 1 GetItem + 1 TransactWriteItems (row + count) without connections; with them 1 more (the end mark + count), the closes, then the release | 4; 4 + 2 per item of the release |
//! | TTL sweep of a session | + 1 item in the sweep's TransactWriteItems (1 call of tombstone + session count when it held no connection) | + 2 (4 without connections) |
//!
//! A `PUT` over an expired row closes its sockets first and replaces the row only once every one
//! is known gone (decision 2208): a socket not known gone yet (a failed close, a 410 within a grace
//! of its join) leaves the row as it is, counting it, and the `PUT` answers that the session is
//! still closing. An expired row a `DELETE` ended (its unit given back) is deleted instead, and a
//! counted session created in its place.

use aws_sdk_dynamodb::types::{Put, TransactWriteItem};

use super::closing::{self, Drained, Sockets};
use super::connect::count_move;
use super::write::Parts;
use crate::counter::{attr as cattr, keys};
use crate::dynamo::item::{n, s, Item};
use crate::dynamo::retry::Backoff;
use crate::dynamo::txn::{self, Reason};
use crate::error::{Error, Result};
use crate::ids::{SessionId, TenantId};
use crate::session::store::{self as sstore, Refresh};
use crate::session::{attr as sattr, Session};
use crate::Deps;

/// Creates that met a concurrent create of the same id, an expired row changing under its
/// replacement, or a transaction conflict, tried again.
const ATTEMPTS: u32 = 4;

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
    /// The tenant holds `cap` sessions: nothing was written.
    Full { cap: u64 },
}

/// Creates the session (counted against `cap`) or refreshes it to `ttl` (epoch seconds). `new`:
/// the id was just generated, so there is nothing to refresh and the create is tried first. An
/// expired row is replaced once its sockets, closed through `sockets`, are all known gone.
pub async fn open(
    deps: &Deps,
    t: &TenantId,
    sid: &SessionId,
    ttl: i64,
    cap: u64,
    new: bool,
    sockets: &dyn Sockets,
) -> Result<Opened> {
    let mut try_create = new;
    for attempt in 1..=ATTEMPTS {
        if !try_create {
            match sstore::refresh(deps, t, sid, ttl).await? {
                Refresh::Live(s) => return Ok(Opened::Live(s)),
                Refresh::Expired(_) => {
                    let nonce = sstore::new_nonce()?;
                    let fresh = sstore::new_row(t, sid, ttl, &nonce);
                    match closing::drain_expired(deps, t, sid, fresh, sockets).await? {
                        Drained::Replaced(stale) => {
                            let session = sstore::fresh(t, sid, ttl, nonce);
                            return Ok(Opened::Replaced { session, stale });
                        }
                        Drained::Closing(pending) => return Ok(Opened::Closing { pending }),
                        // Deleted (it had been ended: create a counted one), or another PUT
                        // replaced it or it changed meanwhile: the next round looks again.
                        Drained::Deleted(_) => try_create = true,
                        Drained::Changed => Backoff::TRANSACTION.wait(attempt).await,
                    }
                    continue;
                }
                Refresh::Missing => {}
            }
        }
        if cap == 0 {
            return Ok(Opened::Full { cap });
        }
        let nonce = sstore::new_nonce()?;
        let items = vec![
            count_item(deps, t, cap)?,
            row_item(deps, sstore::new_row(t, sid, ttl, &nonce))?,
        ];
        match txn::send(&deps.dynamo, items).await? {
            txn::Outcome::Committed => {
                return Ok(Opened::Live(sstore::fresh(t, sid, ttl, nonce)));
            }
            txn::Outcome::Cancelled(reasons) => {
                if let Some(Reason::ConditionFailed(_)) = reasons.first() {
                    return Ok(Opened::Full { cap });
                }
                match reasons.get(1) {
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

/// `{tenant}:sessions`: `ADD itemCount 1` (and `ver`, `resvTotal`) while under `cap`.
fn count_item(deps: &Deps, t: &TenantId, cap: u64) -> Result<TransactWriteItem> {
    let mut p = Parts::default();
    count_move(&mut p, 1);
    p.value(":cap", n(cap));
    p.conditions
        .push("attribute_not_exists(#c) OR #c < :cap".into());
    let key = Item::from([(cattr::KEY.to_string(), s(keys::sessions(t)?))]);
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
