//! Releasing open-connection capacity, exactly once per connection (decision 0306). A connection id
//! leaves its session's `connectionIds` exactly once, by one atomic write on the session item whose
//! caller learns what left, and only that caller decrements the tenant's count, by that number:
//!
//! | what removes the id | how the caller learns it | here |
//! |---|---|---|
//! | `$disconnect`, pruning a gone socket, the reconciler | `UpdateItem DELETE connectionIds` with a request token, `ALL_OLD` | [`from_session`] |
//! | session `DELETE` | the image read before, the row deleted (or the known-gone ids taken out of it) on it unchanged, in a transaction with the decrements and a request token ([`exactly_once`]) | `closing::delete` |
//! | `PUT` over an expired session | the expired image, the row replaced on it unchanged, likewise | `closing::drain_expired` |
//! | DynamoDB's TTL deletion | the stream record's `OldImage`, once per record (a tombstone in the transaction of the decrements and the session count's) | [`swept`], from `closing::sweep` |
//!
//! The last three close the sockets first and release only the ones known gone (decision 2208):
//! an open socket's id stays in its row, where the reconciler's truth counts it.
//!
//! Each decrement goes to the counter the connection was charged on (`chg:{cid}`, decision 2206)
//! and comes second, sent at most once (no SDK retry of an unknown outcome): a crash or timeout
//! between the two leaves the count one too high — an under-admission that the reconciler repairs
//! — never too low. Costs: a disconnect 3 `UpdateItem` (3 WCU), 1 when nothing was released.

use aws_sdk_dynamodb::types::{AttributeValue, Put, ReturnValue, TransactWriteItem};

use super::connect::count_move;
use super::write::{self, ConditionalUpdate, Retries, UpdateOutcome};
use crate::clock::Timestamp;
use crate::counter::{attr as counter_attr, keys};
use crate::dynamo::item::{self, n, s, Item};
use crate::dynamo::retry::Backoff;
use crate::dynamo::txn;
use crate::error::{Error, Result};
use crate::ids::{ConnectionId, SessionId, TenantId};
use crate::session::{attr as session_attr, store as sstore, Charges};
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

/// Releases one connection (`$disconnect`). 3 `UpdateItem`; 1 when it had already been released,
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

/// Removes `cids` from the session's `connectionIds` and decrements the tenant's count for each
/// this call removed (the others were not members: released already, or never admitted), one id
/// at a time ([`one_from_session`]).
pub async fn from_session(
    deps: &Deps,
    t: &TenantId,
    sid: &SessionId,
    cids: &[ConnectionId],
) -> Result<u64> {
    let mut released = 0;
    for cid in cids {
        released += u64::from(one_from_session(deps, t, sid, cid).await?);
    }
    Ok(released)
}

/// A random request token (64 bits, hex): the same in every SDK retry of one request. Its length
/// is part of a session's worst-case size (`tenant::MAX_CONNECTIONS_PER_SESSION`).
pub(crate) fn request_token() -> String {
    format!("{:016x}", fastrand::u64(..))
}

/// Takes `cid` out of its session and, when this call took it, decrements the counter it was
/// charged on — exactly once even when the SDK retries the session write after a lost answer
/// (decision 2206). The write is conditioned on `contains(connectionIds, cid) OR rel:{cid} = tok`
/// and sets `rel:{cid} = tok` (this call's token): a retry whose first attempt applied passes on
/// its own token and is answered with an old image showing it, while a removal by anyone else
/// leaves another token (or none) and refuses. Then, at once, the decrement (sent at most once)
/// and the cleanup of `rel:{cid}` and `chg:{cid}` (conditioned on the token). 3 `UpdateItem`
/// when released; 1 when it was not a member or the session is gone.
async fn one_from_session(
    deps: &Deps,
    t: &TenantId,
    sid: &SessionId,
    cid: &ConnectionId,
) -> Result<bool> {
    let token = request_token();
    let rel = crate::session::release_attr(cid.as_str());
    let mut p = ConditionalUpdate::default();
    p.name("#ids", session_attr::CONNECTION_IDS)
        .name("#sid", session_attr::SESSION_ID)
        .name("#rel", &rel);
    p.value(":gone", AttributeValue::Ss(vec![cid.to_string()]))
        .value(":cid", s(cid.as_str()))
        .value(":tok", s(&token));
    p.conditions.push("attribute_exists(#sid)".into());
    let member =
        if crate::mutation::active(deps, crate::mutation::Mutation::DisconnectWithoutMembership) {
            "contains(#ids, :cid) OR #rel = :tok OR attribute_exists(#sid)"
        } else {
            "contains(#ids, :cid) OR #rel = :tok"
        };
    p.conditions.push(member.into());
    p.delete.push("#ids :gone".into());
    p.set.push("#rel = :tok".into());
    let key = sstore::key(t, sid);
    let old = match write::update(
        deps,
        &deps.tables.sessions,
        &key,
        &p,
        // All of it: `chg:{cid}` says which counter the id was charged on (decision 2206).
        ReturnValue::AllOld,
        Retries::Sdk,
    )
    .await?
    {
        UpdateOutcome::Applied(old) => old,
        // Gone from the set (someone else released it) or the session is gone (whoever deleted
        // it released its connections).
        UpdateOutcome::Refused(_) => return Ok(false),
    };
    let ids = [cid.as_str()];
    let charges = sstore::charges(&old);
    let mut clean = ConditionalUpdate::default();
    clean
        .name("#rel", &rel)
        .name("#chg", &crate::session::charge_attr(cid.as_str()));
    clean.value(":tok", s(&token));
    clean.conditions.push("#rel = :tok".into());
    clean.remove.push("#rel".into());
    clean.remove.push("#chg".into());
    let cleanup = write::update(
        deps,
        &deps.tables.sessions,
        &key,
        &clean,
        ReturnValue::None,
        Retries::Sdk,
    );
    let (released, cleaned) = futures::join!(release(deps, t, &ids, &charges, None), cleanup);
    if let Err(e) = cleaned {
        // Only a few bytes left on the session (its next DELETE or expiry takes them).
        tracing::warn!(tenant = %t, error = %e, "cleaning a release's token failed");
    }
    released?;
    Ok(true)
}

/// The counter item a connection's release decrements: the one its `chg:{cid}` names (decision
/// 2206; every join writes it with the id), else `{tenant}`. `(key, floored)`: only `{tenant}`
/// keeps its floor at zero.
pub fn target(t: &TenantId, cid: &str, charges: &Charges) -> Result<(String, bool)> {
    let shard = match charges.recorded.get(cid) {
        Some(&i) if i != crate::session::TENANT_COUNTER => Some(u64::try_from(i).unwrap_or(0)),
        _ => None,
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

/// What a TTL record says DynamoDB deleted.
#[derive(Debug, Clone)]
pub struct Expired {
    pub tenant: TenantId,
    pub session: SessionId,
    /// The record's identity (its tombstone's key).
    pub event_id: String,
    pub deleted_at: Timestamp,
    pub connection_ids: Vec<String>,
    pub charges: Charges,
    /// Every connection of the row joined at or before this (epoch seconds; decision 2208).
    pub joined_by: i64,
    /// The user who created it, whose session count is given back too (decision 3602).
    pub owner: Option<String>,
}

/// Releases a session DynamoDB deleted by TTL, once per stream record however often it is
/// delivered and whatever stops the sweeper: the tombstone `{tenant}:swept:{session}:{eventId}`
/// (conditional), the session count's decrement (decision 2204, sessions per tenant; and its
/// owner's, `{tenant}:subject:{hash}`, when a user created it: decision 3602; a row a `DELETE`
/// ended has no TTL, so DynamoDB never deletes it) and the decrement of each counter its
/// connections were charged on are one `TransactWriteItems` with a `ClientRequestToken` (a retry
/// after a lost answer applies nothing twice: decision 2206). A counter whose reconciler truth
/// already left this session out (`truthAt` at or after the deletion, within [`TRUTH_MARGIN`])
/// drops out. The return value is about the connections. The caller closes the sockets first
/// (decision 2208).
pub async fn swept(deps: &Deps, e: &Expired) -> Result<Swept> {
    let (t, sid, event_id, deleted_at) = (&e.tenant, &e.session, e.event_id.as_str(), e.deleted_at);
    let ids = parse_ids(&e.connection_ids);
    let (charges, owner) = (&e.charges, e.owner.as_deref());
    let released = ids.len() as u64;
    let mut tomb = Item::from([
        (
            counter_attr::KEY.to_string(),
            s(keys::swept(t, sid, event_id)?),
        ),
        (counter_attr::TENANT_ID.to_string(), s(t.as_str())),
        (counter_attr::SESSION_ID.to_string(), s(sid.as_str())),
        (counter_attr::ITEM_COUNT.to_string(), n(released)),
        // From the record's deletion time, not the clock: every delivery of one record must send
        // the same transaction under its token, or a redelivery within DynamoDB's 10 idempotency
        // minutes is refused as `IdempotentParameterMismatch` and the record blocks its stream
        // shard. Records are delivered within 24 hours of the deletion, well inside the TTL.
        (
            counter_attr::ITEM_TTL.to_string(),
            n(deleted_at.plus(TOMBSTONE_TTL).as_secs()),
        ),
    ]);
    tomb.retain(|_, v| !matches!(v, AttributeValue::S(s) if s.is_empty()));
    let before = deleted_at.minus(TRUTH_MARGIN).as_millis();
    let mut per: std::collections::BTreeMap<(String, bool), u64> = Default::default();
    for c in &ids {
        *per.entry(target(t, c.as_str(), charges)?).or_default() += 1;
    }
    let connection_counters = per.len();
    // The session's unit of the tenant's session count (floored at zero), in the same
    // transaction: given back exactly when the connections are.
    let session_key = (keys::sessions(t)?, true);
    per.insert(session_key.clone(), 1);
    let owner_key = owner
        .map(|o| keys::subject_sessions(t, o).map(|k| (k, true)))
        .transpose()?;
    if let Some(k) = &owner_key {
        per.insert(k.clone(), 1);
    }
    // A mutation test's defect (decision 2300): no tombstone condition and a fresh token, so a
    // redelivered record releases again.
    let unfenced = crate::mutation::active(deps, crate::mutation::Mutation::SweepWithoutTombstone);
    // Counters whose truth already left this session out (refused for `truthAt`) drop out.
    for attempt in 1..=SWEEP_ATTEMPTS {
        let plan: Vec<((String, bool), u64)> = per.iter().map(|(k, v)| (k.clone(), *v)).collect();
        if plan.is_empty() {
            return Ok(Swept::Counted);
        }
        let mut put = Put::builder()
            .table_name(&deps.tables.counters)
            .set_item(Some(tomb.clone()));
        if !unfenced {
            put = put
                .condition_expression("attribute_not_exists(#k)")
                .expression_attribute_names("#k", counter_attr::KEY);
        }
        let put = put
            .build()
            .map_err(|e| Error::build_request("a sweep tombstone", e))?;
        let lead = TransactWriteItem::builder().put(put).build();
        // The same record and plan give the same token: a retry, or a redelivery within 10
        // minutes, of a sweep that applied is answered as committed and applies nothing.
        let mut seed = event_id.to_string();
        if unfenced {
            seed.push_str(&request_token());
        }
        match exactly_once(deps, lead, &plan, Some(before), &seed).await? {
            Attempt::Committed => {
                // Only the connection counters decide: the session counts are not about them.
                let conns = plan
                    .iter()
                    .filter(|(k, _)| *k != session_key && Some(k) != owner_key.as_ref())
                    .count();
                return Ok(if conns == connection_counters {
                    Swept::Released(released)
                } else {
                    Swept::Counted
                });
            }
            Attempt::LeadRefused(_) => return Ok(Swept::AlreadySwept),
            Attempt::CountersRefused(refused) => {
                for (key, floored) in refused {
                    tracing::warn!(tenant = %t, counter = %key, "sweep not decremented: counted by the reconciler's truth");
                    per.remove(&(key, floored));
                }
            }
            Attempt::Again => Backoff::TRANSACTION.wait(attempt).await,
        }
    }
    Err(Error::contended(
        format!("sweeping a session of tenant {t}"),
        SWEEP_ATTEMPTS,
    ))
}

/// What one [`exactly_once`] transaction did. Whatever was refused, nothing applied.
#[derive(Debug)]
pub enum Attempt {
    /// Every item applied (or a retry of this very request was answered as committed).
    Committed,
    /// The lead item's condition failed: the item as it is now (`None`: absent).
    LeadRefused(Option<Item>),
    /// These counters (`(key, floored)`) refused: their floor, or a reconciler truth that already
    /// counted this release. Send again without them.
    CountersRefused(Vec<(String, bool)>),
    /// A conflict, or a throttled item: send again.
    Again,
}

/// One `TransactWriteItems` of `lead` — the item whose condition decides that this caller is the
/// one releasing: the sweep's tombstone, the session row's deletion or replacement — and `ADD
/// itemCount -k` on each counter of `plan` (floored when marked, conditioned on a reconciler
/// truth older than `truth_before` ms), sent with a `ClientRequestToken` made of the counters
/// table, `seed` and the plan. The SDK's retry of an attempt whose answer was lost carries the
/// same token and is answered as committed without applying again (decision 2206): the caller
/// learns it released, and releases once. A different plan makes a different token (DynamoDB
/// refuses a token reused with other parameters), so a caller changing anything else between
/// attempts (the lead's condition) puts that in `seed`. 1 call, 2 WCU per item (per KB).
pub async fn exactly_once(
    deps: &Deps,
    lead: TransactWriteItem,
    plan: &[((String, bool), u64)],
    truth_before: Option<i64>,
    seed: &str,
) -> Result<Attempt> {
    let mut items = vec![lead];
    for ((key, floored), k) in plan {
        let key = Item::from([(counter_attr::KEY.to_string(), s(key.clone()))]);
        let p = decrement_parts(*k, truth_before, *floored);
        items.push(p.transact_update(&deps.tables.counters, key, "a release's decrement")?);
    }
    // Tokens are the account's: the table names this deployment's request apart.
    let mut text = format!("{}|{seed}", deps.tables.counters);
    for ((key, _), k) in plan {
        text.push_str(&format!("|{key}={k}"));
    }
    let token = format!("{:016x}{:016x}", fnv(0, &text), fnv(1, &text));
    Ok(
        match txn::send_with_token(&deps.dynamo, items, &token).await? {
            txn::Outcome::Committed => Attempt::Committed,
            txn::Outcome::Cancelled(reasons) => match reasons.first() {
                Some(txn::Reason::ConditionFailed(now)) => Attempt::LeadRefused(now.clone()),
                _ => {
                    let refused: Vec<(String, bool)> = plan
                        .iter()
                        .zip(reasons.iter().skip(1))
                        .filter(|(_, r)| matches!(r, txn::Reason::ConditionFailed(_)))
                        .map(|((k, _), _)| k.clone())
                        .collect();
                    if refused.is_empty() {
                        Attempt::Again
                    } else {
                        Attempt::CountersRefused(refused)
                    }
                }
            },
        },
    )
}

/// Transactions a sweep tries (conflicts, and counters dropping out for `truthAt`).
const SWEEP_ATTEMPTS: u32 = 4;

/// 64-bit FNV-1a of `text`, seeded: a stable token part (not `std`'s hasher, whose output may
/// change between builds).
fn fnv(seed: u64, text: &str) -> u64 {
    let mut h: u64 = 0xcbf2_9ce4_8422_2325 ^ seed;
    for b in text.as_bytes() {
        h ^= u64::from(*b);
        h = h.wrapping_mul(0x0100_0000_01b3);
    }
    h
}

/// The parts of a decrement of `k` (see [`decrement`]).
fn decrement_parts(k: u64, truth_before: Option<i64>, floored: bool) -> ConditionalUpdate {
    let mut p = ConditionalUpdate::default();
    count_move(&mut p, -(k as i64));
    if floored {
        p.conditions.push("#c >= :size".into());
    }
    if let Some(before) = truth_before {
        p.name("#ta", counter_attr::TRUTH_AT);
        p.value(":before", n(before));
        p.conditions
            .push("attribute_not_exists(#ta) OR #ta < :before".into());
    }
    p
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
    let key = Item::from([(counter_attr::KEY.to_string(), s(key))]);
    let p = decrement_parts(k, truth_before, floored);
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
        UpdateOutcome::Applied(_) => Ok(true),
        UpdateOutcome::Refused(old) => {
            let count = old
                .as_ref()
                .and_then(|o| item::num(o, counter_attr::ITEM_COUNT));
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
