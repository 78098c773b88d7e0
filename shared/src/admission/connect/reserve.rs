//! Step 1 of `$connect` and its undo: the conditional writes on the tenant's counter item
//! (`{tenant}`, or one shard of it) that reserve one open connection and one of this minute's, and
//! give them back when step 2 did not apply.

use super::counter::{count_move, reserve_on, Ask};
use super::{refusal, zero_limit, Admission, Hints, Minute, Reservation, TENANT_MINUTE};
use crate::admission::shards::Counter;
use crate::admission::write::{self, ConditionalUpdate, UpdateOutcome};
use crate::admission::Limit;
use crate::counter::{attr as counter_attr, keys};
use crate::dynamo::item::{n, s, Item};
use crate::error::Result;
use crate::gcra;
use crate::ids::{SessionId, TenantId};
use crate::tenant::Limits;
use crate::Deps;

/// Step 1: reserves one open connection and one of this minute's connections on the tenant's
/// counter (on its shards when `connectionShards` > 1: [`super::sharded::reserve`]).
/// `Err(answer)` when refused (nothing written). 1 `UpdateItem` when the guess is right.
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
            super::sharded::reserve(ask).await?
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

/// Gives a reservation back: the open connection, and this minute's connection when its window
/// is still the current one (fixed) or as a GCRA refund that is never more generous than the
/// spend (`inc` minus the time since the spend). 1 `UpdateItem`; 2 when the window moved on.
/// Sent at most once: a repeated decrement would undercount.
pub async fn undo(deps: &Deps, r: &Reservation) -> Result<()> {
    let key = Item::from([(counter_attr::KEY.to_string(), s(r.key.clone()))]);
    let base = || {
        let mut p = ConditionalUpdate::default();
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
            UpdateOutcome::Applied(_) => return Ok(()),
            UpdateOutcome::Refused(_) => continue,
        }
    }
    tracing::warn!(tenant = %r.tenant, "nothing to give back: the tenant's count is already 0");
    Ok(())
}
