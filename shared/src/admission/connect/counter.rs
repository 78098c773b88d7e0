//! Step 1 on one counter item: the conditional write that reserves a connection, and the
//! open-count part every write to a tenant's count carries.

use super::{
    after, refusal, Admission, Hints, Minute, Reservation, MAX_ATTEMPTS, SETTLE, SETTLE_ATTEMPTS,
    TENANT_MINUTE,
};
use crate::admission::shards::Counter;
use crate::admission::write::{self, ConditionalUpdate, UpdateOutcome};
use crate::admission::Limit;
use crate::counter::attr as counter_attr;
use crate::dynamo::item::{self, n, s, Item};
use crate::dynamo::retry::Backoff;
use crate::error::{Error, Result};
use crate::ids::{SessionId, TenantId};
use crate::tenant::Limits;
use crate::Deps;

/// The layout a counter item is fenced for, when it differs from `believed` (decision 2206).
pub(crate) fn fenced(old: Option<&Item>, believed: u64) -> Option<u64> {
    let layout = old
        .and_then(|o| item::num(o, counter_attr::LAYOUT))
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
    let key = Item::from([(counter_attr::KEY.to_string(), s(key_text.clone()))]);
    let alg = limits.rate_algorithm;
    let cap = on.cap;
    let minute_cap = on.minute_cap
        + u64::from(crate::mutation::active(
            deps,
            crate::mutation::Mutation::TenantMinuteOffByOne,
        ));
    let guess = |stored| Minute::guess(alg, Limit::TenantPerMinute, minute_cap, stored, now);
    let mut minute = guess(hints.get(&key_text))?;
    // Two budgets: waiting for reservations to settle is not a wrong guess, and a connect that used
    // both up on one item still had a definite answer each time (seen in the random-fault soak,
    // decision 2300: two wrong bets and six settle waits answered 503 instead of the refusal).
    let mut settling = 0;
    let mut wrong_bets = 0;
    while wrong_bets < MAX_ATTEMPTS {
        let mut p = ConditionalUpdate::default();
        count_move(&mut p, 1);
        p.name("#at", counter_attr::RESERVED_AT);
        p.value(":cap", n(cap)).value(":at", n(now.as_millis()));
        p.conditions
            .push("attribute_not_exists(#c) OR #c < :cap".into());
        p.name("#lay", counter_attr::LAYOUT);
        p.value(":lay", n(limits.connection_shards));
        p.conditions
            .push("attribute_not_exists(#lay) OR #lay = :lay".into());
        minute.write(&mut p, &TENANT_MINUTE);
        p.set.push("#at = :at".into());
        // At most once: an SDK retry of an attempt that applied but lost its answer would
        // reserve twice, or fail its condition and refuse while holding a unit. A lost answer
        // is an error (a 5xx) and at worst a count one too high, which `reconcile` repairs.
        match write::update_once(deps, &deps.tables.counters, &key, &p).await? {
            UpdateOutcome::Applied(_) => {
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
            UpdateOutcome::Refused(old) => {
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
                    .and_then(|o| item::num(o, counter_attr::ITEM_COUNT))
                    .unwrap_or(0);
                let refused = if count >= cap as i64 {
                    Some(refusal(Limit::TenantConnections, limits, now, t, sid, None))
                } else {
                    minute
                        .refused(&TENANT_MINUTE, old)
                        .map(|d| refusal(Limit::TenantPerMinute, limits, now, t, sid, d))
                };
                let next = guess(TENANT_MINUTE.stored(alg, old))?;
                if let Some(answer) = refused {
                    let recent = old
                        .and_then(|o| item::num(o, counter_attr::RESERVED_AT))
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
pub(crate) fn count_move(p: &mut ConditionalUpdate, by: i64) {
    let total = if by > 0 {
        counter_attr::RESERVED_TOTAL
    } else {
        counter_attr::RELEASED_TOTAL
    };
    p.name("#c", counter_attr::ITEM_COUNT)
        .name("#v", counter_attr::VERSION)
        .name("#tot", total);
    p.value(":d", n(by))
        .value(":size", n(by.unsigned_abs()))
        .value(":one", n(1));
    p.add.push("#c :d".into());
    p.add.push("#v :one".into());
    p.add.push("#tot :size".into());
}
