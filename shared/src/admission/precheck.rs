//! The authorizer's advisory pre-check: one BatchGetItem reads the session and the three counter rows
//! the limits depend on, and refuses early what `$connect` would refuse anyway. It never writes: the
//! authoritative check is `$connect`'s transaction ([`super::connect`]), which holds under
//! concurrency where a read-then-decide cannot.
//!
//! For a tenant with `rateAlgorithm = gcra` the same BatchGetItem reads the two GCRA buckets instead
//! of the minute rows, and refuses when a stored TAT leaves no room for one connection
//! (`gcra::spend` of cost 1 on it, a pure check: nothing is written).

use aws_sdk_dynamodb::types::{KeysAndAttributes, ReturnConsumedCapacity};

use super::item::{self, s, Item};
use super::Limit;
use crate::counter::{attr as cattr, keys, window::MinuteWindow};
use crate::error::{Error, Result};
use crate::gcra::{self, Rate};
use crate::ids::{SessionId, TenantId};
use crate::kv::write as gw;
use crate::session::{attr as sattr, store as sstore};
use crate::tenant::Limits;
use crate::tenant::WindowAlgorithm;
use crate::Deps;

#[derive(Debug, Clone, PartialEq, Eq)]
pub enum Precheck {
    Allow,
    NoSession,
    Expired,
    OverLimit(Limit),
}

/// 1 BatchGetItem (strongly consistent); unprocessed keys are asked again (at most 2 more calls)
/// and, if still unprocessed, not checked here (`$connect` checks everything again).
pub async fn check(
    deps: &Deps,
    t: &TenantId,
    sid: &SessionId,
    limits: &Limits,
) -> Result<Precheck> {
    let now = deps.clock.now();
    let w = MinuteWindow::at(now);
    let gcra = limits.rate_algorithm == WindowAlgorithm::Gcra;
    let (tenant_minute, session_minute) = if gcra {
        (
            keys::tenant_gcra_minute(t)?,
            keys::session_gcra_minute(t, sid)?,
        )
    } else {
        (
            keys::tenant_minute(t, w.start)?,
            keys::session_minute(t, sid, w.start)?,
        )
    };
    let k = |key: String| Item::from([(cattr::KEY.to_string(), s(key))]);
    let counter_keys = vec![
        k(keys::tenant_connections(t)?),
        k(tenant_minute.clone()),
        k(session_minute.clone()),
    ];
    let built = |keys: Vec<Item>| {
        KeysAndAttributes::builder()
            .set_keys(Some(keys))
            .consistent_read(true)
            .build()
            .map_err(|e| Error::Other(format!("building BatchGetItem: {e}")))
    };
    let mut request = std::collections::HashMap::from([
        (
            deps.tables.sessions.clone(),
            built(vec![sstore::key(t, sid)])?,
        ),
        (deps.tables.counters.clone(), built(counter_keys)?),
    ]);
    let mut rows: std::collections::HashMap<String, Vec<Item>> = Default::default();
    // Keys DynamoDB leaves unprocessed (throttling) are asked again, at most twice.
    for _ in 0..3 {
        let out = deps
            .dynamo
            .batch_get_item()
            .set_request_items(Some(request))
            .return_consumed_capacity(ReturnConsumedCapacity::None)
            .send()
            .await
            .map_err(|e| Error::dynamo("BatchGetItem", e))?;
        for (table, items) in out.responses().cloned().unwrap_or_default() {
            rows.entry(table).or_default().extend(items);
        }
        request = out.unprocessed_keys().cloned().unwrap_or_default();
        request.retain(|_, ka| !ka.keys().is_empty());
        if request.is_empty() {
            break;
        }
    }
    let responses = Some(&rows);
    let unprocessed = |table: &str| {
        request
            .get(table)
            .map(|ka| ka.keys().to_vec())
            .unwrap_or_default()
    };
    let session_unknown = !unprocessed(&deps.tables.sessions).is_empty();
    let mut session_open = None;
    if !session_unknown {
        let session = responses
            .and_then(|r| r.get(&deps.tables.sessions))
            .and_then(|v| v.first());
        let Some(session) = session else {
            return Ok(Precheck::NoSession);
        };
        if item::num(session, sattr::SESSION_TTL).unwrap_or(0) <= now.as_secs() {
            return Ok(Precheck::Expired);
        }
        session_open = Some(item::string_set(session, sattr::CONNECTION_IDS).len() as u64);
    }
    let counters = &deps.tables.counters;
    // The seed's order: tenant connections, session connections, tenant/minute, session/minute.
    let open = [
        (
            Some(count_of(responses, counters, &keys::tenant_connections(t)?)),
            Limit::TenantConnections,
        ),
        (session_open, Limit::ConnectionsPerSession),
    ];
    for (used, limit) in open {
        if used.is_some_and(|u| u >= limit.cap(limits)) {
            return Ok(Precheck::OverLimit(limit));
        }
    }
    for (key, limit) in [
        (&tenant_minute, Limit::TenantPerMinute),
        (&session_minute, Limit::SessionPerMinute),
    ] {
        let cap = limit.cap(limits);
        let over = if gcra {
            gcra_empty(responses, counters, key, cap, now)
        } else {
            count_of(responses, counters, key) >= cap
        };
        if over {
            return Ok(Precheck::OverLimit(limit));
        }
    }
    Ok(Precheck::Allow)
}

/// The counter row with `key` in the batch answer.
fn row_of<'a>(
    responses: Option<&'a std::collections::HashMap<String, Vec<Item>>>,
    table: &str,
    key: &str,
) -> Option<&'a Item> {
    responses.and_then(|r| r.get(table)).and_then(|rows| {
        rows.iter().find(
            |r| matches!(r.get(cattr::KEY), Some(v) if v.as_s().ok().map(String::as_str) == Some(key)),
        )
    })
}

/// The `itemCount` of the counter row with `key` in the batch answer (0 when absent).
fn count_of(
    responses: Option<&std::collections::HashMap<String, Vec<Item>>>,
    table: &str,
    key: &str,
) -> u64 {
    row_of(responses, table, key)
        .and_then(|r| item::num(r, cattr::ITEM_COUNT))
        .map(|c| c.max(0) as u64)
        .unwrap_or(0)
}

/// Whether the GCRA bucket with `key` (`Rate::per_minute(cap)`) has no room for one connection at
/// `now`: a cost-1 spend decided on the stored TAT, nothing written. A cap of 0 is always empty.
fn gcra_empty(
    responses: Option<&std::collections::HashMap<String, Vec<Item>>>,
    table: &str,
    key: &str,
    cap: u64,
    now: crate::clock::Timestamp,
) -> bool {
    let Ok(rate) = Rate::per_minute(cap) else {
        return true;
    };
    let tat = gw::stored_tat(row_of(responses, table, key), gw::attr::TAT);
    gcra::spend(&rate, tat, now, 1).is_ok_and(|d| !d.allowed)
}
