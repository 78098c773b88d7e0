//! Step 1 of `$connect` and its undo: the conditional writes on the tenant's counter item
//! (`{tenant}`, or one shard of it) that reserve one open connection and one of this minute's, and
//! give them back when step 2 did not apply.

use super::{
    after, refusal, zero_limit, Admission, Hints, Minute, Reservation, MAX_ATTEMPTS, SETTLE,
    SETTLE_ATTEMPTS, TENANT_MINUTE,
};
use crate::admission::shards::{self, Counter};
use crate::admission::write::{self, Parts, Written};
use crate::admission::Limit;
use crate::counter::{attr as cattr, keys};
use crate::dynamo::item::{self, n, s, Item};
use crate::dynamo::retry::Backoff;
use crate::error::{Error, Result};
use crate::gcra;
use crate::ids::{SessionId, TenantId};
use crate::tenant::Limits;
use crate::Deps;

/// Step 1: reserves one open connection and one of this minute's connections on the tenant's
/// counter (on its shards when `connectionShards` > 1: [`crate::admission::shards::reserve`]).
/// `Err(answer)` when refused (nothing written). 1 `UpdateItem` when the bet is right.
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
    let none = std::sync::atomic::AtomicU64::new(0);
    let ask = Ask {
        deps,
        t,
        sid,
        limits,
        hints,
        relayout: &none,
    };
    // A counter fenced for another layout (the tenant was resharded; this process holds an older
    // row) refuses and names the layout in force: the connect is planned again on it, at most
    // twice (a third layout within one connect means the operator is resharding again).
    let relayout = std::sync::atomic::AtomicU64::new(0);
    let mut now_limits = *limits;
    let mut answer = None;
    for _ in 0..3 {
        let ask = Ask {
            limits: &now_limits,
            relayout: &relayout,
            ..ask
        };
        let got = if now_limits.connection_shards > 1 {
            shards::reserve(ask).await?
        } else {
            let on = Counter {
                key: keys::tenant_connections(t)?,
                cap: now_limits.tenant_connections,
                minute_cap: now_limits.tenant_per_minute,
                sharded: false,
                index: crate::session::TENANT_COUNTER,
            };
            reserve_on(ask, &on).await?
        };
        match (got, relayout.swap(0, std::sync::atomic::Ordering::Relaxed)) {
            (Err(refused), layout) if layout > 0 => {
                tracing::info!(tenant = %t, from = now_limits.connection_shards, to = layout, "counter layout changed; planning again");
                now_limits = now_limits.with_connection_shards(layout);
                answer = Some(refused);
            }
            (got, _) => return Ok(got),
        }
    }
    Ok(Err(answer.unwrap_or_else(|| {
        refusal(Limit::TenantConnections, limits, now, t, sid, None)
    })))
}

/// The layout a counter item is fenced for, when it differs from `believed` (decision 2206).
pub(crate) fn fenced(old: Option<&Item>, believed: u64) -> Option<u64> {
    let layout = old
        .and_then(|o| item::num(o, cattr::LAYOUT))
        .and_then(|l| u64::try_from(l).ok())?;
    (layout != believed).then_some(layout.clamp(1, crate::tenant::MAX_CONNECTION_SHARDS))
}

/// One step-1 request: for whom, under which limits, with this process's hints.
#[derive(Clone, Copy)]
pub(crate) struct Ask<'a> {
    pub deps: &'a Deps,
    pub t: &'a TenantId,
    pub sid: &'a SessionId,
    pub limits: &'a Limits,
    pub hints: &'a Hints,
    /// Set (non-zero) to the layout in force when a counter refused because it is fenced for
    /// another (decision 2206).
    pub relayout: &'a std::sync::atomic::AtomicU64,
}

/// Step 1 on one counter item: `ADD itemCount 1` under `itemCount < cap` and room this minute.
pub(crate) async fn reserve_on(
    ask: Ask<'_>,
    on: &Counter,
) -> Result<std::result::Result<Reservation, Admission>> {
    let Ask {
        deps,
        t,
        sid,
        limits,
        hints,
        relayout,
    } = ask;
    let now = deps.clock.now();
    let key_text = on.key.clone();
    let key = Item::from([(cattr::KEY.to_string(), s(key_text.clone()))]);
    let alg = limits.rate_algorithm;
    let cap = on.cap;
    let minute_cap = on.minute_cap
        + u64::from(crate::mutation::active(
            deps,
            crate::mutation::Mutation::TenantMinuteOffByOne,
        ));
    let bet = |stored| Minute::bet(alg, Limit::TenantPerMinute, minute_cap, stored, now);
    let mut minute = bet(hints.get(&key_text))?;
    // Two budgets: waiting for reservations to settle is not a wrong bet, and a connect that used
    // both up on one item still had a definite answer each time (seen in the random-fault soak,
    // decision 2300: two wrong bets and six settle waits answered 503 instead of the refusal).
    let mut settling = 0;
    let mut wrong_bets = 0;
    while wrong_bets < MAX_ATTEMPTS {
        let mut p = Parts::default();
        count_move(&mut p, 1);
        p.name("#at", cattr::RESERVED_AT);
        p.value(":cap", n(cap)).value(":at", n(now.as_millis()));
        p.conditions
            .push("attribute_not_exists(#c) OR #c < :cap".into());
        p.name("#lay", cattr::LAYOUT);
        p.value(":lay", n(limits.connection_shards));
        p.conditions
            .push("attribute_not_exists(#lay) OR #lay = :lay".into());
        minute.write(&mut p, &TENANT_MINUTE);
        p.set.push("#at = :at".into());
        // At most once: an SDK retry of an attempt that applied but lost its answer would
        // reserve twice, or fail its condition and refuse while holding a unit. A lost answer
        // is an error (a 5xx) and at worst a count one too high, which `reconcile` repairs.
        match write::update_once(deps, &deps.tables.counters, &key, &p).await? {
            Written::Applied(_) => {
                hints.set(&key_text, after(&minute));
                return Ok(Ok(Reservation {
                    tenant: t.clone(),
                    key: key_text,
                    sharded: on.sharded,
                    charged: on.index,
                    minute,
                    at: now,
                    reserved: std::time::Instant::now(),
                }));
            }
            Written::Refused(old) => {
                let old = old.as_ref();
                if let Some(layout) = fenced(old, limits.connection_shards) {
                    relayout.store(layout, std::sync::atomic::Ordering::Relaxed);
                    return Ok(Err(refusal(
                        Limit::TenantConnections,
                        limits,
                        now,
                        t,
                        sid,
                        None,
                    )));
                }
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
                let next = bet(TENANT_MINUTE.stored(alg, old))?;
                if let Some(answer) = refused {
                    let recent = old
                        .and_then(|o| item::num(o, cattr::RESERVED_AT))
                        .is_some_and(|at| at >= now.minus(SETTLE).as_millis());
                    if on.sharded || !recent || settling >= SETTLE_ATTEMPTS {
                        return Ok(Err(answer));
                    }
                    settling += 1;
                    Backoff::TRANSACTION.wait(settling).await;
                } else {
                    wrong_bets += 1;
                    if next.same_bet(&minute) {
                        tracing::debug!(tenant = %t, "reservation refused with room; retrying");
                    }
                }
                minute = next;
            }
        }
    }
    Err(Error::contended(
        format!("reserving a connection for tenant {t}"),
        MAX_ATTEMPTS,
    ))
}

/// The open-count part of every write to `{tenant}`'s count (decision 0306): `ADD itemCount` by
/// `by`, `ver` + 1, and `|by|` added to the running total of its direction (`resvTotal` up,
/// `relTotal` down), all in the one write, so the reconciler can bound what is in flight.
/// Names `#c`, `#v`, `#tot`; values `:d`, `:size`, `:one` (a caller's condition may use them).
pub(crate) fn count_move(p: &mut Parts, by: i64) {
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
        match write::update_once(deps, counters, &key, &parts).await? {
            Written::Applied(_) => return Ok(()),
            Written::Refused(_) => continue,
        }
    }
    tracing::warn!(tenant = %r.tenant, "nothing to give back: the tenant's count is already 0");
    Ok(())
}
