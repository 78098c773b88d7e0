//! Step 1 on a sharded counter (decision 1500): a reservation tries up to [`TRIES_PER_ROUND`]
//! shards with room, for [`ROUNDS`] rounds, each one conditional write on one shard.

use super::counter::{fenced, reserve_on, Ask};
use super::{refusal, Admission, Minute, Reservation, TENANT_MINUTE};
use crate::admission::shards::read_all;
use crate::admission::shards::Counter;
use crate::admission::shards::{counter, ROUNDS, TRIES_PER_ROUND};
use crate::admission::Limit;
use crate::clock::Timestamp;
use crate::counter::attr as counter_attr;
use crate::dynamo::item::{self, Item};
use crate::error::Result;
use crate::tenant::{Limits, MAX_CONNECTION_SHARDS};

/// Whether a counter item read as `old` has room for one connection under `on`'s caps at `now`
/// (the same test a refused step 1 applies to its old image).
fn has_room(limits: &Limits, on: &Counter, old: Option<&Item>, now: Timestamp) -> Result<bool> {
    let count = old
        .and_then(|o| item::num(o, counter_attr::ITEM_COUNT))
        .unwrap_or(0);
    if count >= on.cap as i64 {
        return Ok(false);
    }
    let alg = limits.rate_algorithm;
    let stored = TENANT_MINUTE.stored(alg, old);
    let m = Minute::guess(alg, Limit::TenantPerMinute, on.minute_cap, stored, now)?;
    Ok(m.refused(&TENANT_MINUTE, old).is_none())
}

/// Step 1 of a sharded tenant: 1 `UpdateItem` on a random shard when it has room; otherwise 1
/// `BatchGetItem` of every shard and up to [`TRIES_PER_ROUND`] `UpdateItem` on shards that had
/// room, at most [`ROUNDS`] times. Refused when a read finds no shard with room (or every round's
/// tries lost their room to other connects meanwhile).
pub(super) async fn reserve(ask: Ask<'_>) -> Result<std::result::Result<Reservation, Admission>> {
    let Ask {
        deps,
        t,
        sid,
        limits,
        ..
    } = ask;
    let n = limits.connection_shards.clamp(1, MAX_CONNECTION_SHARDS);
    let first = fastrand::u64(0..n);
    let mut answer = match reserve_on(ask, &counter(deps, t, limits, first)?).await? {
        Ok(r) => return Ok(Ok(r)),
        Err(a) => a,
    };
    for _ in 0..ROUNDS {
        let now = deps.clock.now();
        let rows = read_all(deps, t, n).await?;
        let mut open_room = false;
        let mut room = Vec::new();
        for i in 0..n {
            let Some(old) = rows.get(&i) else { continue };
            if let Some(layout) = fenced(old.as_ref(), n) {
                ask.relayout
                    .store(layout, std::sync::atomic::Ordering::Relaxed);
                return Ok(Err(answer));
            }
            let on = counter(deps, t, limits, i)?;
            let count = old
                .as_ref()
                .and_then(|o| item::num(o, counter_attr::ITEM_COUNT))
                .unwrap_or(0);
            open_room |= count < on.cap as i64;
            if has_room(limits, &on, old.as_ref(), now)? {
                room.push(on);
            }
        }
        if room.is_empty() {
            // Name the limit that binds the whole tenant: open connections when no shard has an
            // open slot, otherwise the minute.
            if !open_room {
                answer = refusal(Limit::TenantConnections, limits, now, t, sid, None);
            }
            return Ok(Err(answer));
        }
        fastrand::shuffle(&mut room);
        for on in room.iter().take(TRIES_PER_ROUND) {
            match reserve_on(ask, on).await? {
                Ok(r) => return Ok(Ok(r)),
                Err(a) => answer = a,
            }
        }
    }
    Ok(Err(answer))
}
