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
use crate::session::{attr as sattr, store as sstore};
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
    let old = match write::update(
        deps,
        &deps.tables.sessions,
        &sstore::key(t, sid),
        &p,
        // All of it: `connShards` (decision 1502) says which counter shard each id is on.
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
    release(deps, t, &removed, shards::of_item(&old), None).await?;
    Ok(removed.len() as u64)
}

/// Decrements the tenant's count for the connections `released` that left a session the caller
/// deleted or replaced (it holds the old image, and its `connShards`: `shards`). 1 `UpdateItem`
/// (one per shard touched when sharded); none when nothing was released.
pub async fn left_session(
    deps: &Deps,
    t: &TenantId,
    released: &[ConnectionId],
    shards: u64,
) -> Result<()> {
    let ids: Vec<&str> = released.iter().map(ConnectionId::as_str).collect();
    release(deps, t, &ids, shards, None).await?;
    Ok(())
}

/// Decrements the count for `ids`: `{tenant}` by their number, or, for a sharded tenant, each
/// shard by the ids hashing to it (decision 1502). Whether every decrement applied.
async fn release(
    deps: &Deps,
    t: &TenantId,
    ids: &[&str],
    shards: u64,
    truth_before: Option<i64>,
) -> Result<bool> {
    if ids.is_empty() {
        return Ok(true);
    }
    if shards <= 1 {
        let key = keys::tenant_connections(t)?;
        return decrement(deps, t, &key, ids.len() as u64, truth_before, true).await;
    }
    let mut per: std::collections::BTreeMap<u64, u64> = Default::default();
    for c in ids {
        *per.entry(shards::shard_of(c, shards)).or_default() += 1;
    }
    let mut all = true;
    for (i, k) in per {
        let key = keys::connection_shard(t, i)?;
        all &= decrement(deps, t, &key, k, truth_before, false).await?;
    }
    Ok(all)
}

/// Gives back the tenant's unit of session count for one session row that is gone (decision
/// 2204): `DELETE`, whose `DeleteItem` returned the row to this caller only, or a sweep (with its
/// `truth_before`, as for connections). 1 `UpdateItem`, sent at most once, floored at 0. Whether it
/// applied (a refusal leaves the count high: the safe side, for the reconciler).
pub async fn session_ended(deps: &Deps, t: &TenantId, truth_before: Option<i64>) -> Result<bool> {
    let key = keys::sessions(t)?;
    decrement(deps, t, &key, 1, truth_before, true).await
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

/// Releases a session DynamoDB deleted by TTL, once per stream record however often it is
/// delivered: a tombstone `{tenant}:swept:{session}:{eventId}` is put first (1 `PutItem`,
/// conditional), then the session count (1 `UpdateItem`; decision 2204) and the connections' count
/// (1 `UpdateItem`, none without connections) are decremented, each unless the reconciler's truth
/// already left this session out (its item's `truthAt` at or after `deleted_at`, within
/// [`TRUTH_MARGIN`]). The return value is about the connections.
pub async fn swept(
    deps: &Deps,
    t: &TenantId,
    sid: &SessionId,
    event_id: &str,
    deleted_at: Timestamp,
    ids: &[ConnectionId],
    shards: u64,
) -> Result<Swept> {
    let released = ids.len() as u64;
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
    let skip = crate::mutation::active(deps, crate::mutation::Mutation::SweepWithoutTombstone);
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
        Err(_) if skip => {}
        Err(SdkError::ServiceError(se))
            if matches!(se.err(), PutItemError::ConditionalCheckFailedException(_)) =>
        {
            return Ok(Swept::AlreadySwept)
        }
        Err(e) => return Err(Error::dynamo("PutItem", e)),
    }
    let before = deleted_at.minus(TRUTH_MARGIN).as_millis();
    session_ended(deps, t, Some(before)).await?;
    if released == 0 {
        return Ok(Swept::Released(0));
    }
    let ids: Vec<&str> = ids.iter().map(ConnectionId::as_str).collect();
    Ok(if release(deps, t, &ids, shards, Some(before)).await? {
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
    let retries = if crate::mutation::active(deps, crate::mutation::Mutation::RetriedDecrement) {
        Retries::Sdk
    } else {
        Retries::AtMostOnce
    };
    let written = write::update(
        deps,
        &deps.tables.counters,
        &key,
        &p,
        ReturnValue::None,
        retries,
    )
    .await?;
    match written {
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
