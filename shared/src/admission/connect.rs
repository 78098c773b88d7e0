//! `$connect`: the authoritative admission, two ordered conditional writes and no transaction
//! (decision 0306). The per-minute windows are folded into the two items, so no other row is
//! touched:
//!
//! | step | item | write | condition |
//! |---|---|---|---|
//! | 1 reserve | counter `{tenant}` | `ADD itemCount 1, ver 1, resvTotal 1`, `SET reservedAt`, the tenant's minute | `itemCount < tenantConnections`, room this minute |
//! | 2 join | the session | `ADD connectionIds {cid}`, `SET sessionTTL`, the session's minute | exists, not expired, `size(connectionIds) < connectionsPerSession`, not already a member, room this minute |
//! | undo (only when 2 refused or gave up) | counter `{tenant}` | `ADD itemCount -1, ver 1, relTotal 1`, the minute given back | — |
//!
//! The tenant goes first: a crash between the writes leaves the tenant's count one too high (an
//! under-admission that `reconcile` repairs), never too low. Every write is sent at most once (no
//! SDK retry; only throttled attempts again). Admitted: 2 `UpdateItem` (2 WCU);
//! refused by the tenant: 1 (1 WCU); refused by the session: 3 (3 WCU). No call when a limit is 0.
//!
//! The minute windows: `fixed` tenants keep `connMinute` (the window's start) and
//! `connMinuteCount` on each item; `gcra` tenants keep `connTat` (`Rate::per_minute(limit)`). Each
//! write bets on a case (same window or a new one; idle or draining bucket) from what this
//! process last saw ([`Hints`]); a wrong bet fails its condition and the `ALL_OLD` image decides:
//! refused, or the right case (one more call, no read).
//!
//! A refusal by step 1 while another connect's reservation may still be undone (`reservedAt`
//! within [`SETTLE`]) is tried again after a short backoff, so a reservation that step 2 is about
//! to give back does not turn away a connect that fits once it is given back.

use std::collections::HashMap;
use std::sync::Mutex;
use std::time::Duration;

use aws_sdk_dynamodb::types::{AttributeValue, ReturnValue};

use super::shards::Counter;
use super::write::{self, Parts, Retries, Written};
use super::Limit;
use crate::clock::Timestamp;
use crate::counter::window::MinuteWindow;
use crate::counter::{attr as cattr, keys};
use crate::dynamo::item::{self, n, s, Item};
use crate::dynamo::retry::Backoff;
use crate::error::{Error, Result};
use crate::gcra::{self, Rate};
use crate::ids::{ConnectionId, SessionId, TenantId};
use crate::kv::write::{SpendPlan, Target};
use crate::refusal::Refusal;
use crate::session::{attr as sattr, store as sstore};
use crate::tenant::{Limits, WindowAlgorithm};
use crate::Deps;

/// Attempts per step (wrong bets, settling and throttling together) before giving up.
pub const MAX_ATTEMPTS: u32 = 8;
/// How recent a reservation must be for a step-1 refusal to wait for it to settle.
pub const SETTLE: Duration = Duration::from_millis(500);
/// Step-1 refusals re-tried while reservations settle (jittered backoff up to 20, 40, 80, 160,
/// 320, 320 ms: under a second in all).
const SETTLE_ATTEMPTS: u32 = 6;
/// Step 2 is not sent later than this after step 1 (so a reservation is settled within a known
/// time: the reconciler's grace must exceed it).
pub const JOIN_DEADLINE: Duration = Duration::from_secs(5);

/// Hints kept before the map is cleared (a cleared hint only costs one wrong bet).
const MAX_HINTS: usize = 10_000;

/// What this process last saw on each folded counter (the window start of a fixed minute, or the
/// TAT in nanoseconds of a GCRA bucket), to bet on the right case. A missing or stale hint costs
/// one more call, never a wrong decision.
#[derive(Debug, Default)]
pub struct Hints(Mutex<HashMap<String, i64>>);

impl Hints {
    pub fn get(&self, key: &str) -> Option<i64> {
        self.0.lock().ok().and_then(|m| m.get(key).copied())
    }

    fn set(&self, key: &str, v: Option<i64>) {
        let Ok(mut m) = self.0.lock() else { return };
        match v {
            Some(v) => {
                if m.len() >= MAX_HINTS && !m.contains_key(key) {
                    m.clear();
                }
                m.insert(key.to_string(), v);
            }
            None => {
                m.remove(key);
            }
        }
    }
}

/// The per-minute part of one write.
#[derive(Debug, Clone)]
pub(super) enum Minute {
    /// The stored window starts at `m`: increment it, if under `cap`.
    Same { m: i64, cap: u64 },
    /// The stored window is older (or absent): start `m` at 1.
    New { m: i64, cap: u64 },
    /// A GCRA spend of one connection.
    Gcra(SpendPlan),
}

/// Attribute names of a folded minute on one item.
pub(super) struct MinuteAttrs {
    minute: &'static str,
    count: &'static str,
    tat: &'static str,
}

pub(super) const TENANT_MINUTE: MinuteAttrs = MinuteAttrs {
    minute: cattr::CONN_MINUTE,
    count: cattr::CONN_MINUTE_COUNT,
    tat: cattr::CONN_TAT,
};
const SESSION_MINUTE: MinuteAttrs = MinuteAttrs {
    minute: sattr::CONN_MINUTE,
    count: sattr::CONN_MINUTE_COUNT,
    tat: sattr::CONN_TAT,
};

impl MinuteAttrs {
    /// What a hint remembers of an item: its window start or its TAT.
    pub(super) fn stored(&self, alg: WindowAlgorithm, old: Option<&Item>) -> Option<i64> {
        let attr = match alg {
            WindowAlgorithm::Fixed => self.minute,
            WindowAlgorithm::Gcra => self.tat,
        };
        old.and_then(|o| item::num(o, attr))
    }
}

fn rate(limit: Limit, cap: u64) -> Result<Rate> {
    Rate::per_minute(cap).map_err(|e| Error::Other(format!("{} = {cap}: {e}", limit.name())))
}

impl Minute {
    /// The bet for a limit of `cap` a minute at `now`, from what was last seen (`stored`).
    pub(super) fn bet(
        alg: WindowAlgorithm,
        limit: Limit,
        cap: u64,
        stored: Option<i64>,
        now: Timestamp,
    ) -> Result<Minute> {
        let m = MinuteWindow::at(now).start;
        Ok(match alg {
            WindowAlgorithm::Fixed => match stored {
                Some(sm) if sm >= m => Minute::Same { m: sm, cap },
                _ => Minute::New { m, cap },
            },
            WindowAlgorithm::Gcra => Minute::Gcra(
                SpendPlan::spend(rate(limit, cap)?, now, 1, stored.map(Timestamp::from_nanos))
                    .map_err(|e| Error::Other(format!("{}: {e}", limit.name())))?,
            ),
        })
    }

    fn same_bet(&self, other: &Minute) -> bool {
        match (self, other) {
            (Minute::Same { m: a, .. }, Minute::Same { m: b, .. }) => a == b,
            (Minute::New { m: a, .. }, Minute::New { m: b, .. }) => a == b,
            (Minute::Gcra(a), Minute::Gcra(b)) => a.case == b.case,
            _ => false,
        }
    }

    /// Adds this bet's condition and update to `p`.
    fn write(&self, p: &mut Parts, a: &MinuteAttrs) {
        match self {
            Minute::Same { m, cap } => {
                p.name("#cm", a.minute).name("#cn", a.count);
                p.value(":m", n(m))
                    .value(":mcap", n(cap))
                    .value(":one", n(1));
                p.conditions.push("#cm = :m AND #cn < :mcap".into());
                p.set.push("#cn = #cn + :one".into());
            }
            Minute::New { m, cap } => {
                p.name("#cm", a.minute).name("#cn", a.count);
                p.value(":m", n(m)).value(":one", n(1));
                // A zero cap never gets here (refused before any call); even so it admits nothing.
                if *cap == 0 {
                    p.value(":mcap", n(0));
                    p.conditions.push("#cn < :mcap".into());
                }
                p.conditions
                    .push("attribute_not_exists(#cm) OR #cm < :m".into());
                p.set.push("#cm = :m".into());
                p.set.push("#cn = :one".into());
            }
            Minute::Gcra(plan) => {
                let mut target = Target::new("", "k", "", None, Duration::ZERO);
                target.tat_attr = a.tat.to_string();
                let e = plan.expression(&target);
                p.conditions.push(e.condition);
                p.set.push(e.update.trim_start_matches("SET ").to_string());
                p.names.extend(e.names);
                p.values.extend(e.values);
            }
        }
    }

    /// Whether the old item has no room for one more connection this minute (the refusal, with
    /// the GCRA decision for a GCRA limit).
    pub(super) fn refused(
        &self,
        a: &MinuteAttrs,
        old: Option<&Item>,
    ) -> Option<Option<gcra::Decision>> {
        match self {
            Minute::Same { m, cap } | Minute::New { m, cap } => {
                let stored = old.and_then(|o| item::num(o, a.minute));
                let count = old.and_then(|o| item::num(o, a.count)).unwrap_or(0);
                let full = stored.is_some_and(|sm| sm >= *m) && count >= *cap as i64;
                full.then_some(None)
            }
            Minute::Gcra(plan) => {
                let tat = old
                    .and_then(|o| item::num(o, a.tat))
                    .map(Timestamp::from_nanos);
                match gcra::spend(&plan.rate, tat, plan.now, 1) {
                    Ok(d) if !d.allowed => Some(Some(d)),
                    _ => None,
                }
            }
        }
    }
}

/// The result of an admission.
#[derive(Debug)]
pub enum Admission {
    /// The connection now holds its capacity.
    Admitted,
    /// This connection id had already been admitted (a repeated `$connect`): nothing changed.
    AlreadyAdmitted,
    /// Over a limit; nothing is spent (a reservation made on the way was given back).
    Refused { limit: Limit, refusal: Refusal },
    /// The session does not exist or has expired; nothing is spent.
    NoSession,
}

/// A held reservation on the tenant's counter: what step 1 wrote, so it can be undone exactly.
#[derive(Debug, Clone)]
pub struct Reservation {
    tenant: TenantId,
    /// The counter item charged: `{tenant}`, or one shard of a sharded tenant (decision 1502).
    key: String,
    /// A shard's count may be below zero (releases credit the shard their id hashes to).
    sharded: bool,
    minute: Minute,
    /// The decision instant (the GCRA spend's `now`).
    at: Timestamp,
    /// When step 1 applied (process time), for [`JOIN_DEADLINE`].
    reserved: std::time::Instant,
}

/// The first limit that is 0 (it blocks its dimension: refused with no call).
pub fn zero_limit(limits: &Limits) -> Option<Limit> {
    [
        Limit::TenantConnections,
        Limit::ConnectionsPerSession,
        Limit::TenantPerMinute,
        Limit::SessionPerMinute,
    ]
    .into_iter()
    .find(|l| l.cap(limits) == 0)
}

fn who(limit: Limit, t: &TenantId, sid: &SessionId) -> String {
    match limit {
        Limit::TenantConnections | Limit::TenantPerMinute => format!("tenant {t}"),
        _ => format!("session {sid} of tenant {t}"),
    }
}

pub(super) fn refusal(
    limit: Limit,
    limits: &Limits,
    now: Timestamp,
    t: &TenantId,
    sid: &SessionId,
    gcra: Option<gcra::Decision>,
) -> Admission {
    let refusal = match gcra.and_then(|d| rate(limit, limit.cap(limits)).ok().map(|r| (r, d))) {
        Some((rate, d)) => {
            let detail = format!(
                "{} opened connections at its limit of {} per minute",
                who(limit, t, sid),
                rate.count
            );
            Refusal::from_gcra(limit.name(), &rate, &d, detail)
        }
        None => limit.refusal(limits, now, &who(limit, t, sid)),
    };
    Admission::Refused { limit, refusal }
}

/// Admits `cid` into the session under `limits`, without hints (a GCRA tenant's first bets are
/// "idle"): use [`admit_hinted`] with hints kept across invocations.
pub async fn admit(
    deps: &Deps,
    t: &TenantId,
    sid: &SessionId,
    cid: &ConnectionId,
    limits: &Limits,
) -> Result<Admission> {
    admit_hinted(deps, t, sid, cid, limits, &Hints::default()).await
}

/// [`admit`], betting on each minute's case from `hints` (and updating them). 2 `UpdateItem` when
/// admitted and the bets are right; each wrong bet costs one more.
pub async fn admit_hinted(
    deps: &Deps,
    t: &TenantId,
    sid: &SessionId,
    cid: &ConnectionId,
    limits: &Limits,
    hints: &Hints,
) -> Result<Admission> {
    let now = deps.clock.now();
    if let Some(limit) = zero_limit(limits) {
        return Ok(refusal(limit, limits, now, t, sid, None));
    }
    let reservation = match reserve(deps, t, sid, limits, hints).await? {
        Ok(r) => r,
        Err(refused) => return Ok(refused),
    };
    complete(deps, t, sid, cid, limits, hints, &reservation).await
}

/// Step 2 for a held reservation, then the undo when step 2 certainly did not apply: refused by
/// its condition, or given up (the join deadline, or no decision after [`MAX_ATTEMPTS`]: every
/// attempt before either was refused, so none applied). An error of the session write itself
/// (its outcome unknown) keeps the reservation: a count one too high, repaired by `reconcile`.
pub async fn complete(
    deps: &Deps,
    t: &TenantId,
    sid: &SessionId,
    cid: &ConnectionId,
    limits: &Limits,
    hints: &Hints,
    reservation: &Reservation,
) -> Result<Admission> {
    let (answer, gave_up) = match join_inner(deps, t, sid, cid, limits, hints, reservation).await? {
        Joined::Answer(a) => (Some(a), None),
        Joined::GaveUp(e) => (None, Some(e)),
    };
    if !matches!(answer, Some(Admission::Admitted)) {
        if let Err(e) = undo(deps, reservation).await {
            // The count stays one too high: an under-admission the reconciler repairs.
            tracing::warn!(tenant = %t, error = %e, "giving back a $connect reservation failed");
        }
    }
    match (answer, gave_up) {
        (Some(a), _) => Ok(a),
        (None, Some(e)) => Err(e),
        (None, None) => Err(Error::Other("joining: no answer".into())),
    }
}

/// What step 2 ended with: an answer, or giving up with no attempt applied.
enum Joined {
    Answer(Admission),
    GaveUp(Error),
}

/// Step 1: reserves one open connection and one of this minute's connections on the tenant's
/// counter (on its shards when `connectionShards` > 1: [`super::shards::reserve`]). `Err(answer)`
/// when refused (nothing written). 1 `UpdateItem` when the bet is right.
pub async fn reserve(
    deps: &Deps,
    t: &TenantId,
    sid: &SessionId,
    limits: &Limits,
    hints: &Hints,
) -> Result<std::result::Result<Reservation, Admission>> {
    let now = deps.clock.now();
    if let Some(limit) = zero_limit(limits) {
        return Ok(Err(refusal(limit, limits, now, t, sid, None)));
    }
    if limits.connection_shards > 1 {
        return super::shards::reserve(deps, t, sid, limits, hints).await;
    }
    let on = Counter {
        key: keys::tenant_connections(t)?,
        cap: limits.tenant_connections,
        minute_cap: limits.tenant_per_minute,
        sharded: false,
    };
    reserve_on(deps, t, sid, limits, hints, &on).await
}

/// Step 1 on one counter item: `ADD itemCount 1` under `itemCount < cap` and room this minute.
pub(super) async fn reserve_on(
    deps: &Deps,
    t: &TenantId,
    sid: &SessionId,
    limits: &Limits,
    hints: &Hints,
    on: &Counter,
) -> Result<std::result::Result<Reservation, Admission>> {
    let now = deps.clock.now();
    let key_text = on.key.clone();
    let key = Item::from([(cattr::KEY.to_string(), s(key_text.clone()))]);
    let alg = limits.rate_algorithm;
    let cap = on.cap;
    let mut minute = Minute::bet(
        alg,
        Limit::TenantPerMinute,
        on.minute_cap,
        hints.get(&key_text),
        now,
    )?;
    let mut settling = 0;
    for _ in 0..MAX_ATTEMPTS {
        let mut p = Parts::default();
        count_move(&mut p, 1);
        p.name("#at", cattr::RESERVED_AT);
        p.value(":cap", n(cap)).value(":at", n(now.as_millis()));
        p.conditions
            .push("attribute_not_exists(#c) OR #c < :cap".into());
        minute.write(&mut p, &TENANT_MINUTE);
        p.set.push("#at = :at".into());
        match write::update(
            deps,
            &deps.tables.counters,
            &key,
            &p,
            ReturnValue::None,
            // At most once: an SDK retry of an attempt that applied but lost its answer would
            // reserve twice, or fail its condition and refuse while holding a unit. A lost answer
            // is an error (a 5xx) and at worst a count one too high, which `reconcile` repairs.
            Retries::AtMostOnce,
        )
        .await?
        {
            Written::Applied(_) => {
                hints.set(&key_text, after(&minute));
                return Ok(Ok(Reservation {
                    tenant: t.clone(),
                    key: key_text,
                    sharded: on.sharded,
                    minute,
                    at: now,
                    reserved: std::time::Instant::now(),
                }));
            }
            Written::Refused(old) => {
                let old = old.as_ref();
                hints.set(&key_text, TENANT_MINUTE.stored(alg, old));
                let count = old
                    .and_then(|o| item::num(o, cattr::ITEM_COUNT))
                    .unwrap_or(0);
                let refused = if count >= cap as i64 {
                    Some(refusal(Limit::TenantConnections, limits, now, t, sid, None))
                } else {
                    minute
                        .refused(&TENANT_MINUTE, old)
                        .map(|d| refusal(Limit::TenantPerMinute, limits, now, t, sid, d))
                };
                let stored = TENANT_MINUTE.stored(alg, old);
                let next = Minute::bet(alg, Limit::TenantPerMinute, on.minute_cap, stored, now)?;
                if let Some(answer) = refused {
                    let recent = old
                        .and_then(|o| item::num(o, cattr::RESERVED_AT))
                        .is_some_and(|at| at >= now.minus(SETTLE).as_millis());
                    if on.sharded || !recent || settling >= SETTLE_ATTEMPTS {
                        return Ok(Err(answer));
                    }
                    settling += 1;
                    Backoff::TRANSACTION.wait(settling).await;
                } else if next.same_bet(&minute) {
                    tracing::debug!(tenant = %t, "reservation refused with room; retrying");
                }
                minute = next;
            }
        }
    }
    Err(Error::Other(format!(
        "reserving a connection for tenant {t}: no decision after {MAX_ATTEMPTS} attempts"
    )))
}

/// What a hint should remember after a successful write of `minute`.
fn after(minute: &Minute) -> Option<i64> {
    match minute {
        Minute::Same { m, .. } | Minute::New { m, .. } => Some(*m),
        Minute::Gcra(plan) => Some(plan.admitted(None, None).new_tat.as_nanos()),
    }
}

/// Step 2: adds `cid` to the session, counted against the session's caps. Sent at most once per
/// attempt (no SDK retry: a committed write retried would look like a repeated `$connect`).
/// `Admission::Admitted` when it joined; any other answer means the reservation must be undone.
pub async fn join(
    deps: &Deps,
    t: &TenantId,
    sid: &SessionId,
    cid: &ConnectionId,
    limits: &Limits,
    hints: &Hints,
    reservation: &Reservation,
) -> Result<Admission> {
    match join_inner(deps, t, sid, cid, limits, hints, reservation).await? {
        Joined::Answer(a) => Ok(a),
        Joined::GaveUp(e) => Err(e),
    }
}

async fn join_inner(
    deps: &Deps,
    t: &TenantId,
    sid: &SessionId,
    cid: &ConnectionId,
    limits: &Limits,
    hints: &Hints,
    reservation: &Reservation,
) -> Result<Joined> {
    let now = reservation.at;
    let alg = limits.rate_algorithm;
    let key = sstore::key(t, sid);
    let hint_key = format!("{t}\u{1f}{sid}");
    let cap = limits.connections_per_session;
    let ttl = now
        .as_secs()
        .saturating_add(i64::try_from(limits.session_ttl).unwrap_or(i64::MAX / 2));
    let mut minute = Minute::bet(
        alg,
        Limit::SessionPerMinute,
        limits.session_per_minute,
        hints.get(&hint_key),
        now,
    )?;
    for _ in 0..MAX_ATTEMPTS {
        // Process time or the injected clock, whichever moved more (the tests move the clock).
        let waited = reservation
            .reserved
            .elapsed()
            .max(deps.clock.now().since(reservation.at));
        if waited > JOIN_DEADLINE {
            return Ok(Joined::GaveUp(Error::Other(format!(
                "joining {cid} to {t}/{sid}: past the {JOIN_DEADLINE:?} deadline"
            ))));
        }
        let mut p = Parts::default();
        p.name("#ids", sattr::CONNECTION_IDS)
            .name("#ttl", sattr::SESSION_TTL)
            .name("#sid", sattr::SESSION_ID);
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
        if limits.connection_shards > 1 {
            p.name("#nsh", sattr::CONNECTION_SHARDS);
            p.value(":nsh", n(limits.connection_shards));
            p.set.push("#nsh = :nsh".into());
        }
        match write::update(
            deps,
            &deps.tables.sessions,
            &key,
            &p,
            ReturnValue::None,
            Retries::AtMostOnce,
        )
        .await?
        {
            Written::Applied(_) => {
                hints.set(&hint_key, after(&minute));
                return Ok(Joined::Answer(Admission::Admitted));
            }
            Written::Refused(old) => {
                let old = old.as_ref();
                hints.set(&hint_key, SESSION_MINUTE.stored(alg, old));
                let Some(o) = old else {
                    return Ok(Joined::Answer(Admission::NoSession));
                };
                if item::num(o, sattr::SESSION_TTL).unwrap_or(0) <= now.as_secs() {
                    return Ok(Joined::Answer(Admission::NoSession));
                }
                let ids = item::string_set(o, sattr::CONNECTION_IDS);
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
                minute = Minute::bet(
                    alg,
                    Limit::SessionPerMinute,
                    limits.session_per_minute,
                    SESSION_MINUTE.stored(alg, old),
                    now,
                )?;
            }
        }
    }
    Ok(Joined::GaveUp(Error::Other(format!(
        "joining {cid} to {t}/{sid}: no decision after {MAX_ATTEMPTS} attempts"
    ))))
}

/// The open-count part of every write to `{tenant}`'s count (decision 0306): `ADD itemCount` by
/// `by`, `ver` + 1, and `|by|` added to the running total of its direction (`resvTotal` up,
/// `relTotal` down), all in the one write, so the reconciler can bound what is in flight.
/// Names `#c`, `#v`, `#tot`; values `:d`, `:size`, `:one` (a caller's condition may use them).
pub(super) fn count_move(p: &mut Parts, by: i64) {
    let total = if by > 0 {
        cattr::RESERVED_TOTAL
    } else {
        cattr::RELEASED_TOTAL
    };
    p.name("#c", cattr::ITEM_COUNT)
        .name("#v", cattr::VERSION)
        .name("#tot", total);
    p.value(":d", n(by))
        .value(":size", n(by.unsigned_abs()))
        .value(":one", n(1));
    p.add.push("#c :d".into());
    p.add.push("#v :one".into());
    p.add.push("#tot :size".into());
}

/// Gives a reservation back: the open connection, and this minute's connection when its window
/// is still the current one (fixed) or as a GCRA refund that is never more generous than the
/// spend (`inc` minus the time since the spend). 1 `UpdateItem`; 2 when the window moved on.
/// Sent at most once: a repeated decrement would undercount.
pub async fn undo(deps: &Deps, r: &Reservation) -> Result<()> {
    let key = Item::from([(cattr::KEY.to_string(), s(r.key.clone()))]);
    let base = || {
        let mut p = Parts::default();
        count_move(&mut p, -1);
        if !r.sharded {
            p.conditions.push("#c >= :one".into());
        }
        p
    };
    let mut with_minute = base();
    match &r.minute {
        Minute::Same { m, .. } | Minute::New { m, .. } => {
            with_minute
                .name("#cm", TENANT_MINUTE.minute)
                .name("#cn", TENANT_MINUTE.count);
            with_minute.value(":m", n(m));
            with_minute
                .conditions
                .push("#cm = :m AND #cn >= :one".into());
            with_minute.set.push("#cn = #cn - :one".into());
        }
        Minute::Gcra(plan) => {
            let elapsed = crate::clock::duration_nanos(deps.clock.now().since(r.at));
            let give = gcra::increment_nanos(&plan.rate, 1).saturating_sub(elapsed);
            if give > 0 {
                with_minute.name("#tat", TENANT_MINUTE.tat);
                with_minute.value(":give", n(give));
                with_minute.conditions.push("attribute_exists(#tat)".into());
                with_minute.set.push("#tat = #tat - :give".into());
            }
        }
    }
    let counters = &deps.tables.counters;
    for parts in [with_minute, base()] {
        match write::update(
            deps,
            counters,
            &key,
            &parts,
            ReturnValue::None,
            Retries::AtMostOnce,
        )
        .await?
        {
            Written::Applied(_) => return Ok(()),
            Written::Refused(_) => continue,
        }
    }
    tracing::warn!(tenant = %r.tenant, "nothing to give back: the tenant's count is already 0");
    Ok(())
}

impl Reservation {
    /// The tenant whose counter holds this reservation.
    pub fn tenant(&self) -> &TenantId {
        &self.tenant
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::kv::write::Case;

    fn old(pairs: &[(&str, i64)]) -> Item {
        pairs.iter().map(|(k, v)| (k.to_string(), n(v))).collect()
    }

    #[test]
    fn a_zero_limit_is_found_in_the_seeds_order() {
        let mut l = Limits::example(60, 5, 2, 10, 200, 60);
        assert_eq!(zero_limit(&l), None);
        l.session_per_minute = 0;
        assert_eq!(zero_limit(&l), Some(Limit::SessionPerMinute));
        l.tenant_connections = 0;
        assert_eq!(zero_limit(&l), Some(Limit::TenantConnections));
    }

    #[test]
    fn fixed_minute_bets_and_refusals_come_from_the_old_item() {
        let now = Timestamp::from_secs(1_700_000_070);
        let m = MinuteWindow::at(now).start;
        let alg = WindowAlgorithm::Fixed;
        let bet = |stored| Minute::bet(alg, Limit::TenantPerMinute, 3, stored, now).unwrap();
        assert!(matches!(bet(None), Minute::New { .. }));
        assert!(matches!(bet(Some(m - 60)), Minute::New { .. }));
        assert!(matches!(bet(Some(m)), Minute::Same { .. }));
        let a = &TENANT_MINUTE;
        let full = old(&[(a.minute, m), (a.count, 3)]);
        assert_eq!(bet(None).refused(a, Some(&full)), Some(None));
        let room = old(&[(a.minute, m), (a.count, 2)]);
        assert_eq!(bet(None).refused(a, Some(&room)), None);
        let stale = old(&[(a.minute, m - 60), (a.count, 3)]);
        assert_eq!(bet(Some(m)).refused(a, Some(&stale)), None);
        // Every placeholder the expressions use is defined, and nothing else is.
        for b in [bet(None), bet(Some(m))] {
            let mut p = Parts::default();
            b.write(&mut p, a);
            let text = format!("{} {}", p.condition().unwrap(), p.update());
            for k in p.names.keys().chain(p.values.keys()) {
                assert!(text.contains(k.as_str()), "{k} unused in {text}");
            }
        }
    }

    #[test]
    fn gcra_minute_bets_use_the_stored_tat() {
        let now = Timestamp::from_secs(1_700_000_070);
        let alg = WindowAlgorithm::Gcra;
        let a = &SESSION_MINUTE;
        let idle = Minute::bet(alg, Limit::SessionPerMinute, 4, None, now).unwrap();
        assert!(matches!(&idle, Minute::Gcra(p) if p.case == Case::Idle));
        let ahead = now.plus(Duration::from_secs(30)).as_nanos();
        let draining = Minute::bet(alg, Limit::SessionPerMinute, 4, Some(ahead), now).unwrap();
        assert!(matches!(&draining, Minute::Gcra(p) if p.case == Case::Draining));
        assert!(!idle.same_bet(&draining));
        // Four connections a minute: a TAT a full minute ahead has no room; retry in 15 s.
        let full = old(&[(a.tat, now.plus(Duration::from_secs(60)).as_nanos())]);
        match idle.refused(a, Some(&full)) {
            Some(Some(d)) => assert_eq!(d.retry_in, Duration::from_secs(15)),
            other => panic!("{other:?}"),
        }
        let mut p = Parts::default();
        draining.write(&mut p, a);
        assert!(
            p.update().starts_with("SET #tat = #tat + :inc"),
            "{}",
            p.update()
        );
    }
}
