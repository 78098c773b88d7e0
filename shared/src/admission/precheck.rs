//! The authorizer's advisory pre-check: one BatchGetItem reads the two items every limit lives on —
//! the session (its connections and its minute) and the tenant's counter (its open count and its
//! minute, decision 0306) — and refuses early what `$connect` would refuse anyway. It never writes:
//! the authoritative check is `$connect`'s conditional writes ([`super::connect`]), which hold under
//! concurrency where a read-then-decide cannot.
//!
//! For a tenant with `rateAlgorithm = gcra` the minutes are GCRA TATs on the same two items, refused
//! when a stored TAT leaves no room for one connection (`gcra::spend` of cost 1 on it, a pure
//! check: nothing is written). A limit of 0 always refuses.

use aws_sdk_dynamodb::types::KeysAndAttributes;

use super::Limit;
use crate::counter::{attr as counter_attr, keys, window::MinuteWindow};
use crate::dynamo::item::{self, s, Item};
use crate::error::{Error, Result};
use crate::gcra::{self, Rate};
use crate::gcra_write as gw;
use crate::ids::{SessionId, TenantId};
use crate::session::{attr as session_attr, store as sstore};
use crate::tenant::Limits;
use crate::tenant::WindowAlgorithm;
use crate::Deps;

#[derive(Debug, Clone, PartialEq, Eq)]
pub enum Precheck {
    Allow,
    NoSession,
    Expired,
    /// The session was deleted and re-created since the ticket was minted (its nonce differs).
    Replaced,
    OverLimit(Limit),
}

/// 1 BatchGetItem (strongly consistent); unprocessed keys are asked again (at most 2 more calls)
/// and, if still unprocessed, not checked here (`$connect` checks everything again). `nonce`: the
/// `sessionNonce` a connect ticket names, which the session row must still hold.
pub async fn check(
    deps: &Deps,
    t: &TenantId,
    sid: &SessionId,
    limits: &Limits,
    nonce: Option<&str>,
) -> Result<Precheck> {
    let now = deps.clock.now();
    let m = MinuteWindow::at(now).start;
    let gcra = limits.rate_algorithm == WindowAlgorithm::Gcra;
    let counter_key = keys::tenant_connections(t)?;
    let k = |key: String| Item::from([(counter_attr::KEY.to_string(), s(key))]);
    let built = |keys: Vec<Item>| {
        KeysAndAttributes::builder()
            .set_keys(Some(keys))
            .consistent_read(true)
            .build()
            .map_err(|e| Error::build_request("BatchGetItem", e))
    };
    let request = std::collections::HashMap::from([
        (
            deps.tables.sessions.clone(),
            built(vec![sstore::key(t, sid)])?,
        ),
        (
            deps.tables.counters.clone(),
            built(vec![k(counter_key.clone())])?,
        ),
    ]);
    // Keys DynamoDB leaves unprocessed (throttling) are asked again, at most twice.
    let (rows, request) = crate::dynamo::batch_get(&deps.dynamo, request).await?;
    let unprocessed = |table: &str| request.get(table).is_some_and(|ka| !ka.keys().is_empty());
    let session = if unprocessed(&deps.tables.sessions) {
        None
    } else {
        let Some(session) = rows.get(&deps.tables.sessions).and_then(|v| v.first()) else {
            return Ok(Precheck::NoSession);
        };
        if item::num(session, session_attr::SESSION_TTL).unwrap_or(0) <= now.as_secs() {
            return Ok(Precheck::Expired);
        }
        let held = session
            .get(session_attr::SESSION_NONCE)
            .and_then(|v| v.as_s().ok());
        if nonce.is_some_and(|n| held.map(String::as_str) != Some(n)) {
            return Ok(Precheck::Replaced);
        }
        Some(session)
    };
    // A sharded tenant's counts are on its shards (decision 1502), not `{tenant}`: not pre-checked.
    let counter = if unprocessed(&deps.tables.counters) || limits.connection_shards > 1 {
        None
    } else {
        Some(row_of(Some(&rows), &deps.tables.counters, &counter_key))
    };
    // The AWS sample's order: tenant connections, session connections, tenant/minute,
    // session/minute. An unread item (still unprocessed) is not checked here; a zero limit refuses
    // regardless.
    let open = |it: Option<&Item>| {
        it.and_then(|i| item::num(i, counter_attr::ITEM_COUNT))
            .map(|c| c.max(0) as u64)
            .unwrap_or(0)
    };
    let checks = [
        (
            Limit::TenantConnections,
            counter.map(|c| open(c) >= limits.tenant_connections),
        ),
        (
            Limit::ConnectionsPerSession,
            session.map(|s| {
                item::string_set(s, session_attr::CONNECTION_IDS).len() as u64
                    >= limits.connections_per_session
            }),
        ),
        (
            Limit::TenantPerMinute,
            counter.map(|c| {
                minute_full(
                    c,
                    gcra,
                    (
                        counter_attr::CONN_MINUTE,
                        counter_attr::CONN_MINUTE_COUNT,
                        counter_attr::CONN_TAT,
                    ),
                    limits.tenant_per_minute,
                    m,
                    now,
                )
            }),
        ),
        (
            Limit::SessionPerMinute,
            session.map(|s| {
                minute_full(
                    Some(s),
                    gcra,
                    (
                        session_attr::CONN_MINUTE,
                        session_attr::CONN_MINUTE_COUNT,
                        session_attr::CONN_TAT,
                    ),
                    limits.session_per_minute,
                    m,
                    now,
                )
            }),
        ),
    ];
    for (limit, over) in checks {
        if limit.cap(limits) == 0 || over == Some(true) {
            return Ok(Precheck::OverLimit(limit));
        }
    }
    Ok(Precheck::Allow)
}

/// Whether a folded per-minute window on `it` (attribute names: minute, count, TAT) has no room
/// for one more connection at `now` (`m`: the current minute's start). A cap of 0 is always full.
fn minute_full(
    it: Option<&Item>,
    gcra: bool,
    (minute, count, tat): (&str, &str, &str),
    cap: u64,
    m: i64,
    now: crate::clock::Timestamp,
) -> bool {
    if gcra {
        let Ok(rate) = Rate::per_minute(cap) else {
            return true;
        };
        let tat = gw::stored_tat(it, tat);
        return gcra::spend(&rate, tat, now, 1).is_ok_and(|d| !d.allowed);
    }
    let in_window = it
        .and_then(|i| item::num(i, minute))
        .is_some_and(|sm| sm >= m);
    let used = it.and_then(|i| item::num(i, count)).unwrap_or(0);
    cap == 0 || (in_window && used >= cap as i64)
}

/// The counter row with `key` in the batch answer.
fn row_of<'a>(
    responses: Option<&'a std::collections::HashMap<String, Vec<Item>>>,
    table: &str,
    key: &str,
) -> Option<&'a Item> {
    responses.and_then(|r| r.get(table)).and_then(|rows| {
        rows.iter().find(
            |r| matches!(r.get(counter_attr::KEY), Some(v) if v.as_s().ok().map(String::as_str) == Some(key)),
        )
    })
}
