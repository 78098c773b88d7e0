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
//!
//! For a tenant with `rateAlgorithm = gcra`, items 2 and 3 are instead GCRA conditional updates
//! (`kv::write::SpendPlan`, `Rate::per_minute(limit)`) on `{tenant}:gcra:minute` and
//! `{tenant}:{session}:gcra:minute`: still one TransactWriteItems. Each bets on a case (idle or
//! draining) from the TAT this process last saw ([`GcraHints`]); a wrong bet cancels the
//! transaction, the `ALL_OLD` image at that index decides refused (429 with the GCRA retry time) or
//! retry under the right case (one more call, no read). See `docs/decisions/0304-gcra-per-minute.md`.

use super::item::{n, s, Item};
use super::txn::{self, Outcome, Reason};
use super::Limit;
use crate::clock::Timestamp;
use crate::counter::window::{self, MinuteWindow};
use crate::counter::{attr as cattr, keys};
use crate::error::{Error, Result};
use crate::gcra::Rate;
use crate::ids::{ConnectionId, SessionId, TenantId};
use crate::kv::write::{self as gw, Next, SpendPlan, Target};
use crate::refusal::Refusal;
use crate::session::{attr as sattr, store as sstore};
use crate::tenant::{Limits, WindowAlgorithm};
use crate::Deps;

/// How long a per-minute GCRA bucket outlives the moment it is full again (its `itemTTL`).
pub const GCRA_TTL_MARGIN: std::time::Duration = std::time::Duration::from_secs(60);

/// Hints kept before the map is cleared (a cleared hint only costs one wrong guess).
const MAX_HINTS: usize = 10_000;

/// The TAT this process last saw for each per-minute GCRA bucket, to guess the case of the next
/// spend (kept in the `$connect` function's state, like `$default`'s `MinuteHint`). A missing or
/// stale hint costs at most one more TransactWriteItems, never a wrong decision.
#[derive(Debug, Default)]
pub struct GcraHints(std::sync::Mutex<std::collections::HashMap<String, Timestamp>>);

impl GcraHints {
    pub fn get(&self, key: &str) -> Option<Timestamp> {
        self.0.lock().ok().and_then(|m| m.get(key).copied())
    }

    fn set(&self, key: &str, tat: Option<Timestamp>) {
        let Ok(mut m) = self.0.lock() else { return };
        match tat {
            Some(t) => {
                if m.len() >= MAX_HINTS && !m.contains_key(key) {
                    m.clear();
                }
                m.insert(key.to_string(), t);
            }
            None => {
                m.remove(key);
            }
        }
    }
}

/// One per-minute GCRA bucket of a `$connect` attempt (transaction index 2 or 3).
#[derive(Debug, Clone)]
struct Bucket {
    index: usize,
    limit: Limit,
    rate: Rate,
    target: Target,
    hint: Option<Timestamp>,
    plan: SpendPlan,
}

impl Bucket {
    fn new(
        deps: &Deps,
        index: usize,
        limit: Limit,
        cap: u64,
        key: String,
        now: Timestamp,
        hints: &GcraHints,
    ) -> Result<Bucket> {
        let rate = Rate::per_minute(cap)
            .map_err(|e| Error::Other(format!("{} = {cap}: {e}", limit.name())))?;
        let hint = hints.get(&key);
        let plan = SpendPlan::spend(rate, now, 1, hint)
            .map_err(|e| Error::Other(format!("{}: {e}", limit.name())))?;
        let target = Target::new(
            &deps.tables.counters,
            cattr::KEY,
            &key,
            Some(cattr::ITEM_TTL),
            GCRA_TTL_MARGIN,
        );
        Ok(Bucket {
            index,
            limit,
            rate,
            target,
            hint,
            plan,
        })
    }

    fn key(&self) -> &str {
        match self.target.key.get(cattr::KEY) {
            Some(aws_sdk_dynamodb::types::AttributeValue::S(k)) => k,
            _ => "",
        }
    }

    fn item(&self) -> Result<aws_sdk_dynamodb::types::TransactWriteItem> {
        Ok(aws_sdk_dynamodb::types::TransactWriteItem::builder()
            .update(self.plan.transact_update(&self.target)?)
            .build())
    }
}

/// The two per-minute buckets of a GCRA tenant, or `None` for a fixed-window tenant.
fn buckets(
    deps: &Deps,
    t: &TenantId,
    sid: &SessionId,
    limits: &Limits,
    now: Timestamp,
    hints: &GcraHints,
) -> Result<Option<[Bucket; 2]>> {
    if limits.rate_algorithm != WindowAlgorithm::Gcra {
        return Ok(None);
    }
    Ok(Some([
        Bucket::new(
            deps,
            2,
            Limit::TenantPerMinute,
            limits.tenant_per_minute,
            keys::tenant_gcra_minute(t)?,
            now,
            hints,
        )?,
        Bucket::new(
            deps,
            3,
            Limit::SessionPerMinute,
            limits.session_per_minute,
            keys::session_gcra_minute(t, sid)?,
            now,
            hints,
        )?,
    ]))
}

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
/// transactions collide (jittered retries, at most [`txn::MAX_ATTEMPTS`]). A GCRA tenant's buckets
/// start from no hint: use [`admit_hinted`] with hints kept across invocations.
pub async fn admit(
    deps: &Deps,
    t: &TenantId,
    sid: &SessionId,
    cid: &ConnectionId,
    limits: &Limits,
) -> Result<Admission> {
    admit_hinted(deps, t, sid, cid, limits, &GcraHints::default()).await
}

/// [`admit`], guessing a GCRA tenant's bucket cases from `hints` (and updating them). 1
/// TransactWriteItems when the guesses are right; a wrong guess costs one more (no read, no
/// backoff); all attempts together are bounded by [`txn::MAX_ATTEMPTS`].
pub async fn admit_hinted(
    deps: &Deps,
    t: &TenantId,
    sid: &SessionId,
    cid: &ConnectionId,
    limits: &Limits,
    hints: &GcraHints,
) -> Result<Admission> {
    if limits.rate_algorithm == WindowAlgorithm::Gcra {
        // A zero per-minute limit blocks the dimension entirely (and is no valid GCRA rate).
        let now = deps.clock.now();
        for (limit, who) in [
            (Limit::TenantPerMinute, format!("tenant {t}")),
            (
                Limit::SessionPerMinute,
                format!("session {sid} of tenant {t}"),
            ),
        ] {
            if limit.cap(limits) == 0 {
                return Ok(Admission::Refused {
                    limit,
                    refusal: limit.refusal(limits, now, &who),
                });
            }
        }
    }
    for attempt in 1..=txn::MAX_ATTEMPTS {
        let now = deps.clock.now();
        let gcra = buckets(deps, t, sid, limits, now, hints)?;
        let items = build(deps, t, sid, cid, limits, now, gcra.as_ref())?;
        match txn::send(deps, items).await? {
            Outcome::Committed => {
                for b in gcra.iter().flatten() {
                    hints.set(b.key(), Some(b.plan.admitted(None, b.hint).new_tat));
                }
                return Ok(Admission::Admitted);
            }
            Outcome::Cancelled(reasons) => {
                let collided = reasons
                    .iter()
                    .any(|r| matches!(r, Reason::Conflict | Reason::Other(_)));
                let (reasons, refused) = match &gcra {
                    Some(bs) => gcra_reasons(reasons, bs, hints),
                    None => (reasons, Vec::new()),
                };
                if let Some(decided) = decide(&reasons, limits, now, t, sid) {
                    return Ok(with_gcra_refusal(decided, &refused, t, sid));
                }
                if collided {
                    tracing::debug!(attempt, ?reasons, "connect transaction collided; retrying");
                    txn::backoff(attempt).await;
                } else {
                    tracing::debug!(attempt, "connect GCRA guess was wrong; retrying");
                }
            }
        }
    }
    Err(Error::Other(format!(
        "admitting connection {cid} to {t}/{sid}: still colliding after {} attempts",
        txn::MAX_ATTEMPTS
    )))
}

/// Reads the GCRA items' failed conditions: each updates its hint from the old item and is either
/// refused (kept as a failed condition, its decision returned) or a wrong guess (turned into a
/// collision, so [`decide`] retries).
fn gcra_reasons(
    mut reasons: Vec<Reason>,
    buckets: &[Bucket; 2],
    hints: &GcraHints,
) -> (Vec<Reason>, Vec<(Limit, Rate, crate::gcra::Decision)>) {
    let mut refused = Vec::new();
    for b in buckets {
        let Some(Reason::ConditionFailed(old)) = reasons.get(b.index) else {
            continue;
        };
        let old = old.as_ref();
        hints.set(b.key(), gw::stored_tat(old, gw::attr::TAT));
        match b.plan.on_condition_failed(old, gw::attr::TAT) {
            Next::Refused(d) => refused.push((b.limit, b.rate, d)),
            Next::Retry(_) => reasons[b.index] = Reason::Conflict,
        }
    }
    (reasons, refused)
}

/// A per-minute refusal of a GCRA tenant carries the GCRA decision (Retry-After = when one
/// connection fits again), not the fixed window's.
fn with_gcra_refusal(
    decided: Admission,
    refused: &[(Limit, Rate, crate::gcra::Decision)],
    t: &TenantId,
    sid: &SessionId,
) -> Admission {
    let Admission::Refused { limit, refusal } = decided else {
        return decided;
    };
    match refused.iter().find(|(l, _, _)| *l == limit) {
        Some((l, rate, d)) => {
            let who = match l {
                Limit::TenantPerMinute => format!("tenant {t}"),
                _ => format!("session {sid} of tenant {t}"),
            };
            let detail = format!(
                "{who} opened connections at its limit of {} per minute",
                rate.count
            );
            Admission::Refused {
                limit,
                refusal: Refusal::from_gcra(l.name(), rate, d, detail),
            }
        }
        None => Admission::Refused { limit, refusal },
    }
}

fn build(
    deps: &Deps,
    t: &TenantId,
    sid: &SessionId,
    cid: &ConnectionId,
    limits: &Limits,
    now: crate::clock::Timestamp,
    gcra: Option<&[Bucket; 2]>,
) -> Result<Vec<aws_sdk_dynamodb::types::TransactWriteItem>> {
    let counters = &deps.tables.counters;
    let now_secs = now.as_secs();
    let w = MinuteWindow::at(now);
    let session_ttl =
        now_secs.saturating_add(i64::try_from(limits.session_ttl).unwrap_or(i64::MAX / 2));
    let mut conn_row = counter_key(keys::connection(t, cid)?);
    conn_row.insert(cattr::TENANT_ID.into(), s(t.as_str()));
    conn_row.insert(cattr::SESSION_ID.into(), s(sid.as_str()));
    conn_row.insert(cattr::CONNECTION_ID.into(), s(cid.as_str()));
    conn_row.insert(cattr::CONNECTED_AT.into(), n(now_secs));
    Ok(vec![
        txn::update(
            counters,
            counter_key(keys::tenant_connections(t)?),
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
        match gcra {
            Some([tenant, _]) => tenant.item()?,
            None => window::admit_item(
                counters,
                keys::tenant_minute(t, w.start)?,
                limits.tenant_per_minute,
                now,
            )?,
        },
        match gcra {
            Some([_, session]) => session.item()?,
            None => window::admit_item(
                counters,
                keys::session_minute(t, sid, w.start)?,
                limits.session_per_minute,
                now,
            )?,
        },
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

    fn bucket(index: usize, limit: Limit, cap: u64, key: &str, now: Timestamp) -> Bucket {
        let rate = Rate::per_minute(cap).unwrap();
        Bucket {
            index,
            limit,
            rate,
            target: Target::new(
                "counters",
                cattr::KEY,
                key,
                Some(cattr::ITEM_TTL),
                GCRA_TTL_MARGIN,
            ),
            hint: None,
            plan: SpendPlan::spend(rate, now, 1, None).unwrap(),
        }
    }

    fn tat_item(tat: Timestamp) -> Option<Item> {
        Some(Item::from([(gw::attr::TAT.to_string(), n(tat.as_nanos()))]))
    }

    #[test]
    fn gcra_failures_retry_on_a_wrong_guess_and_refuse_with_the_gcra_retry_time() {
        let (t, s) = ids();
        let l =
            Limits::example(6, 4, 100, 1_000, 300, 60).with_rate_algorithm(WindowAlgorithm::Gcra);
        let now = Timestamp::from_secs(1_700_000_070);
        let bs = [
            bucket(2, Limit::TenantPerMinute, 6, "acme:gcra:minute", now),
            bucket(3, Limit::SessionPerMinute, 4, "acme:s1:gcra:minute", now),
        ];
        let hints = GcraHints::default();
        let ok = Reason::Ok;
        // Both "idle" guesses were wrong but both buckets have room: retry, hints corrected.
        let tenant_tat = now.plus(std::time::Duration::from_secs(10));
        let session_tat = now.plus(std::time::Duration::from_secs(15));
        let r = vec![
            ok.clone(),
            ok.clone(),
            Reason::ConditionFailed(tat_item(tenant_tat)),
            Reason::ConditionFailed(tat_item(session_tat)),
            ok.clone(),
        ];
        let (r, refused) = gcra_reasons(r, &bs, &hints);
        assert!(refused.is_empty());
        assert_eq!(r[2], Reason::Conflict);
        assert!(decide(&r, &l, now, &t, &s).is_none());
        assert_eq!(hints.get("acme:gcra:minute"), Some(tenant_tat));
        assert_eq!(hints.get("acme:s1:gcra:minute"), Some(session_tat));
        // The session bucket is empty (TAT a full minute ahead): refused with its own retry time.
        let full = now.plus(std::time::Duration::from_secs(60));
        let r = vec![
            ok.clone(),
            ok.clone(),
            ok.clone(),
            Reason::ConditionFailed(tat_item(full)),
            ok.clone(),
        ];
        let (r, refused) = gcra_reasons(r, &bs, &hints);
        let decided = decide(&r, &l, now, &t, &s).unwrap();
        match with_gcra_refusal(decided, &refused, &t, &s) {
            Admission::Refused { limit, refusal } => {
                assert_eq!(limit, Limit::SessionPerMinute);
                assert_eq!(refusal.retry_after, std::time::Duration::from_secs(15));
                assert_eq!(refusal.to_http().header("retry-after"), Some("15"));
            }
            other => panic!("{other:?}"),
        }
        // A repeated $connect still wins over everything.
        let r = vec![
            ok.clone(),
            ok.clone(),
            ok.clone(),
            Reason::ConditionFailed(tat_item(full)),
            Reason::ConditionFailed(None),
        ];
        let (r, _) = gcra_reasons(r, &bs, &hints);
        assert!(matches!(
            decide(&r, &l, now, &t, &s),
            Some(Admission::AlreadyAdmitted)
        ));
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
