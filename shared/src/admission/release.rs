//! Releasing open-connection capacity, exactly once per connection (decision 0306). A connection id
//! leaves its session's `connectionIds` exactly once, by one atomic write on the session item whose
//! caller learns what left, and only that caller decrements the tenant's count, by that number:
//!
//! | what removes the id | how the caller learns it | here |
//! |---|---|---|
//! | `$disconnect`, pruning a gone socket, the reconciler | `UpdateItem DELETE connectionIds`, `ALL_OLD` | [`from_session`] |
//! | session `DELETE` | `DeleteItem`, `ALL_OLD` | [`left_session`] |
//! | `PUT` over an expired session | `PutItem`, `ALL_OLD` | [`left_session`] |
//! | DynamoDB's TTL deletion | the stream record's `OldImage`, once per record (a tombstone) | [`swept`] |
//!
//! The decrement comes second and is sent at most once (no SDK retry of an unknown outcome): a
//! crash or timeout between the two leaves the count one too high — an under-admission that the
//! reconciler repairs — never too low. Costs: a disconnect 2 `UpdateItem` (2 WCU), 1 when nothing
//! was released.

use aws_sdk_dynamodb::error::SdkError;
use aws_sdk_dynamodb::operation::put_item::PutItemError;
use aws_sdk_dynamodb::types::{AttributeValue, ReturnValue};

use super::connect::count_move;
use super::shards;
use super::write::{self, Parts, Retries, Written};
use crate::clock::Timestamp;
use crate::counter::{attr as cattr, keys};
use crate::dynamo::item::{self, n, s, Item};
use crate::error::{Error, Result};
use crate::ids::{ConnectionId, SessionId, TenantId};
use crate::session::{attr as sattr, store as sstore, Charges};
use crate::Deps;

/// How long a sweep's tombstone outlives its record: DynamoDB Streams keep records 24 hours.
pub const TOMBSTONE_TTL: std::time::Duration = std::time::Duration::from_secs(2 * 24 * 3600);
/// A TTL deletion this close after the reconciler's truth (or before it) is taken as already
/// counted by that truth. `truthAt` comes from the clock of whatever host ran the reconciler (an
/// operator's machine for the CLI) and stream times from AWS, rounded down to the second: this is
/// the clock skew tolerated. A host running behind by more could make a sweep subtract a session
/// the repair already left out; one running ahead only delays sweeps' decrements to the next
/// repair (the count stays high: the safe side). Decision 0306.
pub const TRUTH_MARGIN: std::time::Duration = std::time::Duration::from_secs(300);

/// Releases one connection (`$disconnect`). 2 `UpdateItem`; 1 when it had already been released,
/// never admitted, or its session is gone (whoever deleted the session released it). Returns
/// whether this call released it.
pub async fn disconnect(
    deps: &Deps,
    t: &TenantId,
    sid: &SessionId,
    cid: &ConnectionId,
) -> Result<bool> {
    Ok(from_session(deps, t, sid, std::slice::from_ref(cid)).await? == 1)
}

/// Removes `cids` from the session's `connectionIds` and decrements the tenant's count by the
/// number this call removed (the others were not members: released already, or never admitted).
/// 1 `UpdateItem`, plus 1 when something was removed.
pub async fn from_session(
    deps: &Deps,
    t: &TenantId,
    sid: &SessionId,
    cids: &[ConnectionId],
) -> Result<u64> {
    if cids.is_empty() {
        return Ok(0);
    }
    let mut p = Parts::default();
    p.name("#ids", sattr::CONNECTION_IDS)
        .name("#sid", sattr::SESSION_ID);
    p.value(
        ":gone",
        AttributeValue::Ss(cids.iter().map(|c| c.to_string()).collect()),
    );
    p.conditions.push("attribute_exists(#sid)".into());
    p.delete.push("#ids :gone".into());
    // Each id's charge record leaves with it (read back from the old image).
    for (i, c) in cids.iter().enumerate() {
        let name = format!("#chg{i}");
        p.name(&name, &crate::session::charge_attr(c.as_str()));
        p.remove.push(name);
    }
    let old = match write::update(
        deps,
        &deps.tables.sessions,
        &sstore::key(t, sid),
        &p,
        // All of it: each id's `chg:{cid}` says which counter it was charged on (decision 2204).
        ReturnValue::AllOld,
        Retries::Sdk,
    )
    .await?
    {
        Written::Applied(old) => old,
        // The session is gone: whoever deleted it released its connections.
        Written::Refused(_) => return Ok(0),
    };
    let was = item::string_set(&old, sattr::CONNECTION_IDS);
    let removed: Vec<&str> = cids
        .iter()
        .map(ConnectionId::as_str)
        .filter(|c| was.iter().any(|w| w == c))
        .collect();
    release(deps, t, &removed, &sstore::charges(&old), None).await?;
    Ok(removed.len() as u64)
}

/// Decrements the tenant's count for the connections `released` that left a session the caller
/// deleted or replaced (it holds the old image, and where each was charged: `charges`). 1
/// `UpdateItem` per counter charged; none when nothing was released.
pub async fn left_session(
    deps: &Deps,
    t: &TenantId,
    released: &[ConnectionId],
    charges: &Charges,
) -> Result<()> {
    let ids: Vec<&str> = released.iter().map(ConnectionId::as_str).collect();
    release(deps, t, &ids, charges, None).await?;
    Ok(())
}

/// The counter item a connection's release decrements: the one its `chg:{cid}` names (decision
/// 2204), or, for a connection that joined before that record existed, `{tenant}` or the shard
/// its id hashes to among the session's `connShards` (decision 1502). `(key, floored)`: only
/// `{tenant}` keeps its floor at zero.
pub fn target(t: &TenantId, cid: &str, charges: &Charges) -> Result<(String, bool)> {
    let shard = match charges.recorded.get(cid) {
        Some(&i) if i == crate::session::TENANT_COUNTER => None,
        Some(&i) => Some(u64::try_from(i).unwrap_or(0)),
        None if charges.shards <= 1 => None,
        None => Some(shards::shard_of(cid, charges.shards)),
    };
    Ok(match shard {
        None => (keys::tenant_connections(t)?, true),
        Some(i) => (keys::connection_shard(t, i)?, false),
    })
}

/// Decrements the count for `ids`, each on the counter it was charged on ([`target`]): 1
/// `UpdateItem` per counter. Whether every decrement applied.
async fn release(
    deps: &Deps,
    t: &TenantId,
    ids: &[&str],
    charges: &Charges,
    truth_before: Option<i64>,
) -> Result<bool> {
    let mut per: std::collections::BTreeMap<(String, bool), u64> = Default::default();
    for c in ids {
        *per.entry(target(t, c, charges)?).or_default() += 1;
    }
    let mut all = true;
    for ((key, floored), k) in per {
        all &= decrement(deps, t, &key, k, truth_before, floored).await?;
    }
    Ok(all)
}

/// What [`swept`] did with one TTL record.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Swept {
    /// This record's connections were released now.
    Released(u64),
    /// An earlier delivery of the same record released them.
    AlreadySwept,
    /// The reconciler set the count from a truth taken after the deletion (or the count was
    /// already lower): decrementing again would undercount.
    Counted,
}

/// Releases the connections of a session DynamoDB deleted by TTL, once per stream record however
/// often it is delivered: a tombstone `{tenant}:swept:{session}:{eventId}` is put first (1
/// `PutItem`, conditional), then the count is decremented (1 `UpdateItem`) unless the reconciler's
/// truth already left these connections out (`truthAt` at or after `deleted_at`, within
/// [`TRUTH_MARGIN`]).
pub async fn swept(
    deps: &Deps,
    t: &TenantId,
    sid: &SessionId,
    event_id: &str,
    deleted_at: Timestamp,
    ids: &[ConnectionId],
    charges: &Charges,
) -> Result<Swept> {
    let released = ids.len() as u64;
    if released == 0 {
        return Ok(Swept::Released(0));
    }
    let now = deps.clock.now();
    let mut tomb = Item::from([
        (cattr::KEY.to_string(), s(keys::swept(t, sid, event_id)?)),
        (cattr::TENANT_ID.to_string(), s(t.as_str())),
        (cattr::SESSION_ID.to_string(), s(sid.as_str())),
        (cattr::ITEM_COUNT.to_string(), n(released)),
        (
            cattr::ITEM_TTL.to_string(),
            n(now.plus(TOMBSTONE_TTL).as_secs()),
        ),
    ]);
    tomb.retain(|_, v| !matches!(v, AttributeValue::S(s) if s.is_empty()));
    let put = deps
        .dynamo
        .put_item()
        .table_name(&deps.tables.counters)
        .set_item(Some(tomb))
        .condition_expression("attribute_not_exists(#k)")
        .expression_attribute_names("#k", cattr::KEY)
        .send()
        .await;
    match put {
        Ok(_) => {}
        Err(SdkError::ServiceError(se))
            if matches!(se.err(), PutItemError::ConditionalCheckFailedException(_)) =>
        {
            return Ok(Swept::AlreadySwept)
        }
        Err(e) => return Err(Error::dynamo("PutItem", e)),
    }
    let before = deleted_at.minus(TRUTH_MARGIN).as_millis();
    let ids: Vec<&str> = ids.iter().map(ConnectionId::as_str).collect();
    Ok(if release(deps, t, &ids, charges, Some(before)).await? {
        Swept::Released(released)
    } else {
        Swept::Counted
    })
}

/// `ADD itemCount -k, ver 1` on `key` (`{tenant}`, or a shard), only while the count is at least
/// `k` when `floored` (a shard's count may go below zero: decision 1502) and, for a sweep, only
/// if the reconciler's truth is older than `truth_before` ms. Sent at most once. Returns whether
/// it applied; a refused decrement leaves the count higher (the safe side).
async fn decrement(
    deps: &Deps,
    t: &TenantId,
    key: &str,
    k: u64,
    truth_before: Option<i64>,
    floored: bool,
) -> Result<bool> {
    let key = Item::from([(cattr::KEY.to_string(), s(key))]);
    let mut p = Parts::default();
    count_move(&mut p, -(k as i64));
    if floored {
        p.conditions.push("#c >= :size".into());
    }
    if let Some(before) = truth_before {
        p.name("#ta", cattr::TRUTH_AT);
        p.value(":before", n(before));
        p.conditions
            .push("attribute_not_exists(#ta) OR #ta < :before".into());
    }
    match write::update_once(deps, &deps.tables.counters, &key, &p).await? {
        Written::Applied(_) => Ok(true),
        Written::Refused(old) => {
            let count = old.as_ref().and_then(|o| item::num(o, cattr::ITEM_COUNT));
            tracing::warn!(tenant = %t, released = k, ?count, "count not decremented");
            Ok(false)
        }
    }
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
