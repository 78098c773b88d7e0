//! Releasing open-connection capacity, exactly once per connection. The connection row
//! `{tenant}:conn:{cid}` written at admission is deleted under `attribute_exists`, in the same
//! transaction that decrements the tenant's count: whoever deletes the row is the one that
//! decrements, so a repeated, concurrent or lost-then-replayed release never counts twice and the
//! count never goes below the number of admitted connections.
//!
//! Used by `$disconnect`, gone-connection pruning in `$default`, session DELETE, session replace and
//! the TTL sweeper.

use aws_sdk_dynamodb::types::{AttributeValue, TransactWriteItem};

use super::item::{n, s, Item};
use super::txn::{self, Outcome, Reason};
use crate::counter::{attr as cattr, keys};
use crate::error::{Error, Result};
use crate::ids::{ConnectionId, SessionId, TenantId};
use crate::session::{attr as sattr, store as sstore};
use crate::Deps;

/// Connection rows per transaction (DynamoDB allows 100 items; two are the count and the session).
const CHUNK: usize = 98;

fn counter_key(k: String) -> Item {
    Item::from([(cattr::KEY.to_string(), s(k))])
}

/// Releases one connection (`$disconnect`): deletes its row, decrements the tenant count and
/// removes it from the session. 1 TransactWriteItems; 2 when the session is already gone.
/// Returns false when it had already been released (or never admitted): nothing changed.
pub async fn disconnect(
    deps: &Deps,
    t: &TenantId,
    sid: &SessionId,
    cid: &ConnectionId,
) -> Result<bool> {
    Ok(release(deps, t, Some(sid), std::slice::from_ref(cid)).await? == 1)
}

/// Releases `cids` of tenant `t`; when `session` is given they are also removed from its
/// `connectionIds` (skipped if the session no longer exists). Returns how many were released by
/// this call; the others had been released already. 1 TransactWriteItems per 98 connections,
/// plus 1 per retry (a row released concurrently, a vanished session, or a collision).
pub async fn release(
    deps: &Deps,
    t: &TenantId,
    session: Option<&SessionId>,
    cids: &[ConnectionId],
) -> Result<u64> {
    let mut released = 0;
    for chunk in cids.chunks(CHUNK) {
        released += release_chunk(deps, t, session, chunk).await?;
    }
    Ok(released)
}

async fn release_chunk(
    deps: &Deps,
    t: &TenantId,
    session: Option<&SessionId>,
    cids: &[ConnectionId],
) -> Result<u64> {
    let mut pending: Vec<ConnectionId> = cids.to_vec();
    pending.sort();
    pending.dedup();
    let mut session = session;
    let mut attempt = 0;
    while !pending.is_empty() {
        attempt += 1;
        if attempt > txn::MAX_ATTEMPTS {
            return Err(Error::Other(format!(
                "releasing {} connection(s) of tenant {t}: still colliding after {} attempts",
                pending.len(),
                txn::MAX_ATTEMPTS
            )));
        }
        let items = build(deps, t, session, &pending)?;
        match txn::send(deps, items).await? {
            Outcome::Committed => return Ok(pending.len() as u64),
            Outcome::Cancelled(reasons) => {
                let mut changed = false;
                // Rows already gone: someone else released them.
                let before = pending.len();
                pending = pending
                    .into_iter()
                    .zip(reasons.iter())
                    .filter(|(_, r)| !matches!(r, Reason::ConditionFailed(_)))
                    .map(|(c, _)| c)
                    .collect();
                changed |= pending.len() != before;
                // The session item is last when present: its condition fails once it is deleted.
                if session.is_some() && matches!(reasons.last(), Some(Reason::ConditionFailed(_))) {
                    session = None;
                    changed = true;
                }
                if !changed {
                    tracing::debug!(attempt, ?reasons, "release transaction collided; retrying");
                    txn::backoff(attempt).await;
                }
            }
        }
    }
    Ok(0)
}

fn build(
    deps: &Deps,
    t: &TenantId,
    session: Option<&SessionId>,
    cids: &[ConnectionId],
) -> Result<Vec<TransactWriteItem>> {
    let counters = &deps.tables.counters;
    let mut items = Vec::with_capacity(cids.len() + 2);
    for c in cids {
        items.push(txn::delete_existing(
            counters,
            counter_key(keys::connection(t, c)?),
            cattr::KEY,
        )?);
    }
    items.push(txn::update(
        counters,
        counter_key(keys::tenant_connections(t)?),
        "ADD #c :minus",
        None,
        txn::names(&[("#c", cattr::ITEM_COUNT)]),
        txn::values(vec![(":minus", n(-(cids.len() as i64)))]),
    )?);
    if let Some(sid) = session {
        items.push(txn::update(
            &deps.tables.sessions,
            sstore::key(t, sid),
            "DELETE #ids :gone",
            Some("attribute_exists(#sid)"),
            txn::names(&[("#ids", sattr::CONNECTION_IDS), ("#sid", sattr::SESSION_ID)]),
            txn::values(vec![(
                ":gone",
                AttributeValue::Ss(cids.iter().map(|c| c.to_string()).collect()),
            )]),
        )?);
    }
    Ok(items)
}

/// Parses connection ids read back from a table or stream image, logging and skipping any that are
/// not valid (they cannot have been admitted: admission validates every id).
pub fn parse_ids(raw: &[String]) -> Vec<ConnectionId> {
    raw.iter()
        .filter_map(|c| match ConnectionId::parse(c) {
            Ok(c) => Some(c),
            Err(e) => {
                tracing::warn!(connection = %c, error = %e, "skipping an invalid connection id");
                None
            }
        })
        .collect()
}
