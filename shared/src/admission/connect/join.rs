//! Step 2 of `$connect`: the conditional write that adds the connection to its session, counted
//! against the session's caps, decided from the old image when it is refused.

use aws_sdk_dynamodb::types::AttributeValue;

use super::{
    after, refusal, Admission, Hints, Joined, Minute, Reservation, JOIN_DEADLINE, MAX_ATTEMPTS,
    SESSION_MINUTE,
};
use crate::admission::write::{self, ConditionalUpdate, UpdateOutcome};
use crate::admission::{Limit, Request};
use crate::dynamo::item::{self, n, s};
use crate::error::{Error, Result};
use crate::session::{attr as session_attr, store as sstore};

fn nonce_of(it: &crate::dynamo::item::Item) -> Option<&str> {
    it.get(session_attr::SESSION_NONCE)
        .and_then(|v| v.as_s().ok())
        .map(String::as_str)
}

/// Step 2: adds `cid` to the session, counted against the session's caps. Sent at most once per
/// attempt (no SDK retry: a committed write retried would look like a repeated `$connect`).
/// `Admission::Admitted` when it joined; any other answer means the reservation must be undone.
pub async fn join(r: Request<'_>, hints: &Hints, reservation: &Reservation) -> Result<Admission> {
    join_inner(r, hints, reservation).await?.into_result()
}

/// [`join`], telling a refusal or a give-up (the reservation must be undone) from an error of
/// the session write itself (its outcome unknown: the reservation is kept).
pub(super) async fn join_inner(
    r: Request<'_>,
    hints: &Hints,
    reservation: &Reservation,
) -> Result<Joined> {
    let (deps, t, sid, cid, limits) = (r.deps, r.t, r.sid, r.cid, r.limits);
    let now = reservation.at;
    let alg = limits.rate_algorithm;
    let key = sstore::key(t, sid);
    let hint_key = format!("{t}\u{1f}{sid}");
    let cap = limits.connections_per_session
        + u64::from(crate::mutation::active(
            deps,
            crate::mutation::Mutation::SessionOverCap,
        ));
    let ttl = now
        .as_secs()
        .saturating_add(i64::try_from(limits.session_ttl).unwrap_or(i64::MAX / 2));
    let per_minute = limits.session_per_minute;
    let guess = |stored| Minute::guess(alg, Limit::SessionPerMinute, per_minute, stored, now);
    let mut minute = guess(hints.get(&hint_key))?;
    for _ in 0..MAX_ATTEMPTS {
        // Process time or the injected clock, whichever moved more (the tests move the clock).
        let waited = reservation
            .reserved
            .elapsed()
            .max(deps.clock.now().since(reservation.at));
        if waited > JOIN_DEADLINE {
            return Ok(Joined::GaveUp(Error::TimedOut {
                what: format!(
                    "joining {cid} to {t}/#{} before the join deadline",
                    crate::ticket::fingerprint(sid.as_str())
                ),
                after: JOIN_DEADLINE,
            }));
        }
        let mut p = ConditionalUpdate::default();
        p.name("#ids", session_attr::CONNECTION_IDS)
            .name("#ttl", session_attr::SESSION_TTL)
            .name("#sid", session_attr::SESSION_ID);
        p.value(":cidset", AttributeValue::Ss(vec![cid.to_string()]))
            .value(":cid", s(cid.as_str()))
            .value(":ttl", n(ttl))
            .value(":nows", n(now.as_secs()))
            .value(":scap", n(cap));
        p.conditions
            .push("attribute_exists(#sid) AND #ttl > :nows".into());
        p.conditions
            .push("attribute_not_exists(#ids) OR size(#ids) < :scap".into());
        p.conditions.push("NOT contains(#ids, :cid)".into());
        minute.write(&mut p, &SESSION_MINUTE);
        p.add.push("#ids :cidset".into());
        p.set.push("#ttl = :ttl".into());
        // When the last join happened: a close answering 410 a grace later proves its socket
        // gone (decision 2208).
        p.name("#jat", session_attr::JOINED_AT);
        p.set.push("#jat = :nows".into());
        if let Some(nonce) = r.nonce {
            p.name("#nonce", session_attr::SESSION_NONCE);
            p.value(":nonce", s(nonce));
            p.conditions.push("#nonce = :nonce".into());
        }
        // Where the unit was taken travels with the connection: its release goes back there
        // whatever the session or the tenant row says then (decision 2206).
        p.name("#chg", &crate::session::charge_attr(cid.as_str()));
        p.value(":chg", n(reservation.charged));
        p.set.push("#chg = :chg".into());
        if limits.connection_shards > 1 {
            p.name("#nsh", session_attr::CONNECTION_SHARDS);
            p.value(":nsh", n(limits.connection_shards));
            p.set.push("#nsh = :nsh".into());
        }
        let written = match write::update_once(deps, &deps.tables.sessions, &key, &p).await {
            Ok(w) => w,
            // Refused by DynamoDB before it applied (throttled, invalid, denied, no table): the
            // join certainly did not happen, so the reservation is given back. Any other
            // error may have applied: the reservation is kept and the reconciler repairs it.
            Err(e @ Error::DynamoRejected { .. }) => return Ok(Joined::GaveUp(e)),
            Err(e) => return Err(e),
        };
        match written {
            UpdateOutcome::Applied(_) => {
                hints.set(&hint_key, after(&minute));
                return Ok(Joined::Answer(Admission::Admitted));
            }
            UpdateOutcome::Refused(old) => {
                let old = old.as_ref();
                hints.set(&hint_key, SESSION_MINUTE.stored(alg, old));
                let Some(o) = old else {
                    return Ok(Joined::Answer(Admission::NoSession));
                };
                if item::num(o, session_attr::SESSION_TTL).unwrap_or(0) <= now.as_secs() {
                    return Ok(Joined::Answer(Admission::NoSession));
                }
                // Another incarnation of the session than the ticket's: the ticket's is gone.
                if r.nonce.is_some() && nonce_of(o) != r.nonce {
                    return Ok(Joined::Answer(Admission::NoSession));
                }
                let ids = item::string_set(o, session_attr::CONNECTION_IDS);
                if ids.iter().any(|c| c == cid.as_str()) {
                    return Ok(Joined::Answer(Admission::AlreadyAdmitted));
                }
                if ids.len() as u64 >= cap {
                    return Ok(Joined::Answer(refusal(
                        Limit::ConnectionsPerSession,
                        limits,
                        now,
                        t,
                        sid,
                        None,
                    )));
                }
                if let Some(d) = minute.refused(&SESSION_MINUTE, old) {
                    return Ok(Joined::Answer(refusal(
                        Limit::SessionPerMinute,
                        limits,
                        now,
                        t,
                        sid,
                        d,
                    )));
                }
                minute = guess(SESSION_MINUTE.stored(alg, old))?;
            }
        }
    }
    Ok(Joined::GaveUp(Error::contended(
        format!(
            "joining {cid} to {t}/#{}",
            crate::ticket::fingerprint(sid.as_str())
        ),
        MAX_ATTEMPTS,
    )))
}
