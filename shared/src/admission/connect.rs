//! `$connect`: the authoritative admission, one TransactWriteItems over five items, all or nothing.
//!
//! | # | item | write | condition |
//! |---|---|---|---|
//! | 0 | counter `{tenant}` | `ADD itemCount 1` | `itemCount < tenantConnections` (or no row) |
//! | 1 | the session | `ADD connectionIds {cid}`, `SET sessionTTL` | exists, not expired, `size(connectionIds) < connectionsPerSession` |
//! | 2 | counter `{tenant}:minute:{m}` | `ADD itemCount 1`, `SET itemTTL` | `itemCount < tenantPerMinute` (or no row) |
//! | 3 | counter `{tenant}:{session}:minute:{m}` | same | `itemCount < sessionPerMinute` (or no row) |
//! | 4 | counter `{tenant}:conn:{cid}` | Put | no such row (a repeated `$connect` is idempotent) |
//!
//! A refused attempt writes nothing, so it spends no other limit's quota. Open-connection capacity is
//! taken only here, when API Gateway is about to establish the connection.

use super::item::{n, s, Item};
use super::txn::{self, Outcome, Reason};
use super::Limit;
use crate::counter::window::{self, MinuteWindow};
use crate::counter::{attr as cattr, keys};
use crate::error::{Error, Result};
use crate::ids::{ConnectionId, SessionId, TenantId};
use crate::refusal::Refusal;
use crate::session::{attr as sattr, store as sstore};
use crate::tenant::Limits;
use crate::Deps;

/// The result of an admission.
#[derive(Debug)]
pub enum Admission {
    /// The connection now holds its capacity.
    Admitted,
    /// This connection id had already been admitted (a repeated `$connect`): nothing changed.
    AlreadyAdmitted,
    /// Over a limit; nothing was written.
    Refused { limit: Limit, refusal: Refusal },
    /// The session does not exist or has expired; nothing was written.
    NoSession,
}

fn counter_key(k: String) -> Item {
    Item::from([(cattr::KEY.to_string(), s(k))])
}

/// Admits `cid` into the session under `limits`. 1 TransactWriteItems; more only when concurrent
/// transactions collide (jittered retries, at most [`txn::MAX_ATTEMPTS`]).
pub async fn admit(
    deps: &Deps,
    t: &TenantId,
    sid: &SessionId,
    cid: &ConnectionId,
    limits: &Limits,
) -> Result<Admission> {
    for attempt in 1..=txn::MAX_ATTEMPTS {
        let now = deps.clock.now();
        let items = build(deps, t, sid, cid, limits, now)?;
        match txn::send(deps, items).await? {
            Outcome::Committed => return Ok(Admission::Admitted),
            Outcome::Cancelled(reasons) => {
                if let Some(decided) = decide(&reasons, limits, now, t, sid) {
                    return Ok(decided);
                }
                tracing::debug!(attempt, ?reasons, "connect transaction collided; retrying");
                txn::backoff(attempt).await;
            }
        }
    }
    Err(Error::Other(format!(
        "admitting connection {cid} to {t}/{sid}: still colliding after {} attempts",
        txn::MAX_ATTEMPTS
    )))
}

fn build(
    deps: &Deps,
    t: &TenantId,
    sid: &SessionId,
    cid: &ConnectionId,
    limits: &Limits,
    now: crate::clock::Timestamp,
) -> Result<Vec<aws_sdk_dynamodb::types::TransactWriteItem>> {
    let counters = &deps.tables.counters;
    let now_secs = now.as_secs();
    let w = MinuteWindow::at(now);
    let session_ttl =
        now_secs.saturating_add(i64::try_from(limits.session_ttl).unwrap_or(i64::MAX / 2));
    let mut conn_row = counter_key(keys::connection(t, cid));
    conn_row.insert(cattr::TENANT_ID.into(), s(t.as_str()));
    conn_row.insert(cattr::SESSION_ID.into(), s(sid.as_str()));
    conn_row.insert(cattr::CONNECTION_ID.into(), s(cid.as_str()));
    conn_row.insert(cattr::CONNECTED_AT.into(), n(now_secs));
    Ok(vec![
        txn::update(
            counters,
            counter_key(keys::tenant_connections(t)),
            "ADD #c :one",
            Some("attribute_not_exists(#c) OR #c < :cap"),
            txn::names(&[("#c", cattr::ITEM_COUNT)]),
            txn::values(vec![(":one", n(1)), (":cap", n(limits.tenant_connections))]),
        )?,
        txn::update(
            &deps.tables.sessions,
            sstore::key(t, sid),
            "ADD #ids :cid SET #ttl = :ttl",
            Some(
                "attribute_exists(#sid) AND #ttl > :now AND \
                 (attribute_not_exists(#ids) OR size(#ids) < :cap)",
            ),
            txn::names(&[
                ("#ids", sattr::CONNECTION_IDS),
                ("#ttl", sattr::SESSION_TTL),
                ("#sid", sattr::SESSION_ID),
            ]),
            txn::values(vec![
                (
                    ":cid",
                    aws_sdk_dynamodb::types::AttributeValue::Ss(vec![cid.to_string()]),
                ),
                (":ttl", n(session_ttl)),
                (":now", n(now_secs)),
                (":cap", n(limits.connections_per_session)),
            ]),
        )?,
        window::admit_item(
            counters,
            keys::tenant_minute(t, w.start),
            limits.tenant_per_minute,
            now,
        )?,
        window::admit_item(
            counters,
            keys::session_minute(t, sid, w.start),
            limits.session_per_minute,
            now,
        )?,
        txn::put_new(counters, conn_row, cattr::KEY)?,
    ])
}

/// Turns cancellation reasons into a decision, or `None` to retry (a collision).
fn decide(
    reasons: &[Reason],
    limits: &Limits,
    now: crate::clock::Timestamp,
    t: &TenantId,
    sid: &SessionId,
) -> Option<Admission> {
    let failed = |i: usize| match reasons.get(i) {
        Some(Reason::ConditionFailed(old)) => Some(old.as_ref()),
        _ => None,
    };
    if failed(4).is_some() {
        return Some(Admission::AlreadyAdmitted);
    }
    if let Some(old) = failed(1) {
        let live = old
            .and_then(|o| super::item::num(o, sattr::SESSION_TTL))
            .is_some_and(|ttl| ttl > now.as_secs());
        if !live {
            return Some(Admission::NoSession);
        }
    }
    let tenant = format!("tenant {t}");
    let session = format!("session {sid} of tenant {t}");
    for (i, limit, who) in [
        (0, Limit::TenantConnections, &tenant),
        (1, Limit::ConnectionsPerSession, &session),
        (2, Limit::TenantPerMinute, &tenant),
        (3, Limit::SessionPerMinute, &session),
    ] {
        if failed(i).is_some() {
            return Some(Admission::Refused {
                limit,
                refusal: limit.refusal(limits, now, who),
            });
        }
    }
    if reasons.iter().any(|r| matches!(r, Reason::Other(_))) {
        // Throttling and the like: retrying with backoff is the right answer too.
        tracing::warn!(
            ?reasons,
            "connect transaction cancelled for a non-condition reason"
        );
    }
    None
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::clock::Timestamp;

    fn ids() -> (TenantId, SessionId) {
        (
            TenantId::parse("acme").unwrap(),
            SessionId::parse("s1").unwrap(),
        )
    }

    fn live_session(now: i64) -> Option<Item> {
        Some(Item::from([(sattr::SESSION_TTL.to_string(), n(now + 100))]))
    }

    #[test]
    fn cancellation_reasons_decide_without_a_read() {
        let (t, s) = ids();
        let l = Limits::example(60, 5, 2, 10, 200, 60);
        let now = Timestamp::from_secs(1_700_000_070);
        let ok = Reason::Ok;
        let failed = |i: Option<Item>| Reason::ConditionFailed(i);
        // Only collisions: retry.
        let r = [
            Reason::Conflict,
            ok.clone(),
            ok.clone(),
            Reason::Conflict,
            ok.clone(),
        ];
        assert!(decide(&r, &l, now, &t, &s).is_none());
        // The connection row exists: a repeated $connect.
        let r = [
            failed(None),
            ok.clone(),
            ok.clone(),
            ok.clone(),
            failed(None),
        ];
        assert!(matches!(
            decide(&r, &l, now, &t, &s),
            Some(Admission::AlreadyAdmitted)
        ));
        // Session condition failed on a missing or expired item: no session.
        let r = [ok.clone(), failed(None), ok.clone(), ok.clone(), ok.clone()];
        assert!(matches!(
            decide(&r, &l, now, &t, &s),
            Some(Admission::NoSession)
        ));
        let expired = Some(Item::from([(
            sattr::SESSION_TTL.to_string(),
            n(now.as_secs()),
        )]));
        let r = [
            ok.clone(),
            failed(expired),
            ok.clone(),
            ok.clone(),
            ok.clone(),
        ];
        assert!(matches!(
            decide(&r, &l, now, &t, &s),
            Some(Admission::NoSession)
        ));
        // On a live session it is the per-session cap; the seed's order picks the first limit.
        let r = [
            ok.clone(),
            failed(live_session(now.as_secs())),
            failed(None),
            ok.clone(),
            ok.clone(),
        ];
        match decide(&r, &l, now, &t, &s) {
            Some(Admission::Refused { limit, refusal }) => {
                assert_eq!(limit, Limit::ConnectionsPerSession);
                assert_eq!(refusal.retry_after, super::super::OPEN_CONNECTION_RETRY);
            }
            other => panic!("{other:?}"),
        }
        let r = [ok.clone(), ok.clone(), ok.clone(), failed(None), ok.clone()];
        match decide(&r, &l, now, &t, &s) {
            Some(Admission::Refused { limit, refusal }) => {
                assert_eq!(limit, Limit::SessionPerMinute);
                assert_eq!(refusal.retry_after, std::time::Duration::from_secs(30));
                assert_eq!(refusal.to_http().header("retry-after"), Some("30"));
            }
            other => panic!("{other:?}"),
        }
    }
}
