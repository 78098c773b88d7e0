//! The reconciler's reads and repair write for a sharded tenant (decision 1502): 0306's three
//! phases run on sums over the `N` shards. A read is 1 BatchGetItem of every shard; the repair is
//! one `TransactWriteItems` over all of them: every shard `SET truthAt` under its `relTotal`
//! unchanged since the last read (so no release anywhere lands unseen between that read and the
//! write), and shard 0 also `ADD itemCount −leak`, `repairs + 1` under `repairs` unchanged (two
//! reconcilers never subtract the same leak). Only the sum matters (releases credit any shard),
//! and lowering one shard's count keeps every `cᵢ ≤ sᵢ`.

use std::collections::BTreeMap;

use aws_sdk_dynamodb::types::{ReturnValuesOnConditionCheckFailure, TransactWriteItem, Update};

use super::report::Outcome;
use super::snapshot::snapshot_of;
use super::snapshot::{grew, unchanged, Snapshot};
use crate::admission::shards;
use crate::admission::write::ConditionalUpdate;
use crate::counter::{attr as counter_attr, keys};
use crate::dynamo::item::{self, n, s, Item};
use crate::dynamo::txn;
use crate::error::{Error, Result};
use crate::ids::TenantId;
use crate::session::Charges;
use crate::Deps;

/// Why a tenant is skipped when a session was counted on another layout than its row's.
pub const RESHARDED: &str = "connectionShards changed while connections were open";

/// A session (as the truth's Query reads it) counted on the tenant's `n` shards: its `connShards`
/// is `n`, or it holds no connection. Otherwise the tenant was resharded with connections open
/// and no repair can be proven: the error skips the tenant.
pub(super) fn same_layout(session: &Item, n: u64) -> Result<()> {
    let recorded = shards::of_item(session);
    let holds = !item::string_set(session, crate::session::attr::CONNECTION_IDS).is_empty();
    if recorded != n && (recorded > 1 || holds) {
        return Err(Error::Other(format!(
            "{RESHARDED}: a session records {recorded} shard(s), the tenant {n}"
        )));
    }
    Ok(())
}

/// Every shard read once: the sums (`repairs` from shard 0), and each shard's `relTotal`. A shard
/// DynamoDB left unread fails the read (a partial sum would prove nothing).
pub(super) async fn read(
    deps: &Deps,
    t: &TenantId,
    n: u64,
) -> Result<(Snapshot, Vec<Option<i64>>)> {
    let rows = shards::read_all(deps, t, n).await?;
    let mut snap = Snapshot::default();
    let mut released = Vec::new();
    let add = |acc: &mut Option<i64>, v: Option<i64>| {
        if let Some(v) = v {
            *acc = Some(acc.unwrap_or(0) + v);
        }
    };
    for i in 0..n {
        let Some(row) = rows.get(&i) else {
            // Still unprocessed after `batch_get`'s 3 calls.
            return Err(Error::contended(
                format!("reading shard {i} of tenant {t}"),
                3,
            ));
        };
        let num = |a: &str| row.as_ref().and_then(|r| item::num(r, a));
        add(&mut snap.count, num(counter_attr::ITEM_COUNT));
        add(&mut snap.ver, num(counter_attr::VERSION));
        add(&mut snap.reserved, num(counter_attr::RESERVED_TOTAL));
        add(&mut snap.released, num(counter_attr::RELEASED_TOTAL));
        if i == 0 {
            snap.repairs = num(counter_attr::REPAIRS);
        }
        snap.span = snap.span.max(num(counter_attr::LAYOUT_SPAN));
        released.push(num(counter_attr::RELEASED_TOTAL));
    }
    Ok((snap, released))
}

/// The repair: subtracts `leak` (> 0) from the sum and stamps `truth_at` on every shard, if no
/// shard's `relTotal` moved since `released` was read and shard 0's `repairs` is still `repairs`.
/// 1 TransactWriteItems of `n` items. Returns whether it committed.
pub(super) async fn subtract(
    deps: &Deps,
    t: &TenantId,
    leak: i64,
    truth_at: i64,
    released: &[Option<i64>],
    repairs: Option<i64>,
) -> Result<bool> {
    let mut items = Vec::with_capacity(released.len());
    for (i, rel) in released.iter().enumerate() {
        let mut p = ConditionalUpdate::default();
        unchanged(&mut p, "#rl", counter_attr::RELEASED_TOTAL, ":rl0", *rel);
        p.name("#ta", counter_attr::TRUTH_AT);
        p.value(":at", n(truth_at));
        p.set.push("#ta = :at".into());
        if i == 0 {
            unchanged(&mut p, "#rp", counter_attr::REPAIRS, ":rp0", repairs);
            p.name("#c", counter_attr::ITEM_COUNT)
                .name("#v", counter_attr::VERSION);
            p.value(":neg", n(-leak)).value(":one", n(1));
            p.add.push("#c :neg".into());
            p.add.push("#v :one".into());
            p.add.push("#rp :one".into());
        }
        let key = Item::from([(
            counter_attr::KEY.to_string(),
            s(keys::connection_shard(t, i as u64)?),
        )]);
        items.push(p.transact_update(&deps.tables.counters, key, "a shard repair")?);
    }
    Ok(matches!(
        txn::send(&deps.dynamo, items).await?,
        txn::Outcome::Committed
    ))
}

/// A resharded (fenced) tenant, repaired counter by counter (decision 2206): `{tenant}` and
/// shards `0..layoutSpan`, each read at the three phases, each with its own truth — the ids of
/// the tenant's sessions whose release goes to it (`release::target`: where each was charged).
#[derive(Debug, Default)]
pub(super) struct PerCounter {
    pub keys: Vec<String>,
    pub before: BTreeMap<String, Snapshot>,
    pub read: BTreeMap<String, Snapshot>,
    /// Counter key → connections whose release goes to it.
    pub truth: BTreeMap<String, i64>,
    /// Reads done so far (0: phase 1 next; 1: phase 2 next).
    reads: u8,
}

/// The counters of a tenant whose reads show a fence (`layoutSpan`), or `None`.
pub(super) fn fenced(t: &TenantId, span: Option<i64>) -> Result<Option<PerCounter>> {
    let Some(span) = span.and_then(|s| u64::try_from(s).ok()) else {
        return Ok(None);
    };
    let mut keys = vec![keys::tenant_connections(t)?];
    if span > 1 {
        keys.extend(shards::layout_keys(t, span)?);
    }
    Ok(Some(PerCounter {
        keys,
        ..PerCounter::default()
    }))
}

/// Every counter of `keys`, read strongly consistent (1 BatchGetItem per 100 keys); a key left
/// unread fails the read.
async fn read_keys(deps: &Deps, keys: &[String]) -> Result<BTreeMap<String, Snapshot>> {
    let mut out = BTreeMap::new();
    for chunk in keys.chunks(100) {
        let (rows, left) = shards::read_counters(deps, chunk).await?;
        if left.values().any(|ka| !ka.keys().is_empty()) {
            return Err(Error::contended("reading a resharded tenant's counters", 3));
        }
        for k in chunk {
            out.insert(k.clone(), Snapshot::default());
        }
        for it in rows.get(&deps.tables.counters).into_iter().flatten() {
            let Some(k) = it.get(counter_attr::KEY).and_then(|v| v.as_s().ok()) else {
                continue;
            };
            out.insert(k.clone(), snapshot_of(Some(it)));
        }
    }
    Ok(out)
}

fn sum(rows: &BTreeMap<String, Snapshot>) -> Snapshot {
    let add = |a: Option<i64>, b: Option<i64>| match (a, b) {
        (None, None) => None,
        (a, b) => Some(a.unwrap_or(0) + b.unwrap_or(0)),
    };
    rows.values().fold(Snapshot::default(), |acc, r| Snapshot {
        count: add(acc.count, r.count),
        ver: add(acc.ver, r.ver),
        reserved: add(acc.reserved, r.reserved),
        released: add(acc.released, r.released),
        repairs: acc.repairs.or(r.repairs),
        span: acc.span.max(r.span),
    })
}

impl PerCounter {
    /// Phase 1's and phase 2's reads: every counter, kept per counter; the sums for the report.
    pub async fn read_phase(&mut self, deps: &Deps) -> Result<Snapshot> {
        let rows = read_keys(deps, &self.keys).await?;
        let total = sum(&rows);
        match self.reads {
            0 => self.before = rows,
            _ => self.read = rows,
        }
        self.reads += 1;
        Ok(total)
    }

    /// Counts the ids of one session (with where each was charged) into the truth per counter.
    pub fn count_truth(&mut self, t: &TenantId, ids: &[String], charges: &Charges) -> Result<()> {
        for c in ids {
            let (key, _) = crate::admission::release::target(t, c, charges)?;
            *self.truth.entry(key).or_default() += 1;
        }
        Ok(())
    }

    /// Phase 3: each counter's provable leak is subtracted (`C − T − in_flight`, as 0306 on one
    /// item) and each provable shortfall added (`T − C − reservations since the read`: a unit of
    /// the truth not in `C` at the read is a reservation made after it, or a unit released to
    /// another counter, which is what this repairs), in one `TransactWriteItems`: `{tenant}`
    /// guards it (`repairs` unchanged), every lowered counter is conditioned on its `relTotal`
    /// unchanged since this read and stamped with `truthAt`. Retried on a cancellation, at most
    /// `attempts` times.
    pub async fn repair(
        &self,
        deps: &Deps,
        t: &TenantId,
        truth_at: i64,
        dry_run: bool,
        attempts: u32,
        layout: Option<Layout>,
    ) -> Result<(Outcome, u64)> {
        let guard = keys::tenant_connections(t)?;
        let mut in_flight_all = 0;
        for _ in 0..attempts {
            let now = read_keys(deps, &self.keys).await?;
            let repairs = |m: &BTreeMap<String, Snapshot>| m.get(&guard).and_then(|r| r.repairs);
            if repairs(&now) != repairs(&self.read) {
                return Ok((Outcome::Busy, in_flight_all));
            }
            let mut moves: Vec<(String, i64)> = Vec::new();
            let (mut from, mut exact) = (0, true);
            in_flight_all = 0;
            for k in &self.keys {
                let (b, r, n) = (self.before[k], self.read[k], now[k]);
                let c = r.count.unwrap_or(0);
                let truth = self.truth.get(k).copied().unwrap_or(0);
                let in_flight = grew(b.reserved, r.reserved) + grew(r.released, n.released);
                in_flight_all += in_flight;
                from += n.count.unwrap_or(0);
                exact &= c == truth;
                let leak = c - truth - i64::try_from(in_flight).unwrap_or(i64::MAX);
                let short =
                    truth - c - i64::try_from(grew(r.reserved, n.reserved)).unwrap_or(i64::MAX);
                if leak > 0 {
                    moves.push((k.clone(), -leak));
                } else if short > 0 {
                    moves.push((k.clone(), short));
                }
            }
            let planned = !moves.is_empty();
            if let Some(layout) = layout {
                fit_to_shares(&mut moves, &now, t, layout)?;
            }
            if moves.is_empty() {
                // `planned`: the counters differ from their truths only in where the units sit,
                // which the layout's shares leave as they are.
                return Ok((
                    if exact || planned {
                        Outcome::Consistent
                    } else {
                        Outcome::Busy
                    },
                    in_flight_all,
                ));
            }
            let to = from + moves.iter().map(|m| m.1).sum::<i64>();
            let to_u = u64::try_from(to).unwrap_or(0);
            if dry_run {
                return Ok((Outcome::WouldRepair { from, to: to_u }, in_flight_all));
            }
            let guard_repairs = repairs(&now);
            let guard_released = now[&guard].released;
            let mut items = Vec::new();
            let mut guarded = false;
            // The guard is always in the transaction, moved or not.
            if !moves.iter().any(|m| m.0 == guard) {
                moves.push((guard.clone(), 0));
            }
            for (k, by) in &moves {
                let mut p = ConditionalUpdate::default();
                if *by != 0 {
                    p.name("#c", counter_attr::ITEM_COUNT)
                        .name("#v", counter_attr::VERSION);
                    p.value(":by", n(*by)).value(":one", n(1));
                    p.add.push("#c :by".into());
                    p.add.push("#v :one".into());
                }
                if *by < 0 {
                    let was = if *k == guard {
                        guard_released
                    } else {
                        now[k].released
                    };
                    unchanged(&mut p, "#rl", counter_attr::RELEASED_TOTAL, ":rl0", was);
                    p.name("#ta", counter_attr::TRUTH_AT);
                    p.value(":at", n(truth_at));
                    p.set.push("#ta = :at".into());
                }
                if *k == guard && !guarded {
                    guarded = true;
                    unchanged(&mut p, "#rp", counter_attr::REPAIRS, ":rp0", guard_repairs);
                    p.value(":one", n(1));
                    p.add.push("#rp :one".into());
                }
                let update = Update::builder()
                    .table_name(&deps.tables.counters)
                    .key(counter_attr::KEY, s(k.clone()))
                    .set_condition_expression(p.condition())
                    .update_expression(p.update())
                    .set_expression_attribute_names(Some(p.names))
                    .set_expression_attribute_values(Some(p.values))
                    .return_values_on_condition_check_failure(
                        ReturnValuesOnConditionCheckFailure::None,
                    )
                    .build()
                    .map_err(|e| Error::build_request("a counter repair", e))?;
                items.push(TransactWriteItem::builder().update(update).build());
            }
            items.truncate(100);
            if matches!(
                txn::send(&deps.dynamo, items).await?,
                txn::Outcome::Committed
            ) {
                return Ok((Outcome::Repaired { from, to: to_u }, in_flight_all));
            }
        }
        Ok((Outcome::Busy, in_flight_all))
    }
}

/// The layout admitting now: `n` counters (1: `{tenant}`) sharing `cap` open connections.
#[derive(Debug, Clone, Copy)]
pub(super) struct Layout {
    pub n: u64,
    pub cap: u64,
}

impl Layout {
    pub(super) fn of(limits: &crate::tenant::Limits) -> Layout {
        Layout {
            n: limits.connection_shards,
            cap: limits.tenant_connections,
        }
    }
}

/// Keeps each counter of the admitting layout at or below its share. Admission is exact while no
/// counter is above its share (the room left is then the cap minus the sum); a counter may hold
/// more connections than its share once the sum-only repair (decision 1502) lowered it for a unit
/// leaked on another, and setting each to its own truth would then raise it past its share and
/// lower the other below its own: room although the tenant is full. The part of a raise past the
/// share goes to the layout's counters with room instead (none: back where it was, the tenant
/// being full either way); the sum of the moves is unchanged.
fn fit_to_shares(
    moves: &mut Vec<(String, i64)>,
    now: &BTreeMap<String, Snapshot>,
    t: &TenantId,
    layout: Layout,
) -> Result<()> {
    let counters: Vec<(String, i64)> = if layout.n <= 1 {
        vec![(keys::tenant_connections(t)?, cap_i64(layout.cap))]
    } else {
        let n = u32::try_from(layout.n).unwrap_or(u32::MAX);
        (0..n)
            .map(|i| {
                let share = crate::shard::share(layout.cap, n, i);
                Ok((keys::connection_shard(t, u64::from(i))?, cap_i64(share)))
            })
            .collect::<Result<_>>()?
    };
    let mut by: BTreeMap<String, i64> = moves.drain(..).collect();
    let count = |k: &str| now.get(k).and_then(|s| s.count).unwrap_or(0);
    let mut lifted = Vec::new();
    for (k, share) in &counters {
        let d = by.get(k).copied().unwrap_or(0);
        let past = (count(k) + d - share).clamp(0, d.max(0));
        if past > 0 {
            by.insert(k.clone(), d - past);
            lifted.push((k.clone(), past));
        }
    }
    let mut spare: i64 = lifted.iter().map(|l| l.1).sum();
    for (k, share) in &counters {
        let d = by.get(k).copied().unwrap_or(0);
        let room = (share - count(k) - d).clamp(0, spare);
        if room > 0 {
            by.insert(k.clone(), d + room);
            spare -= room;
        }
    }
    for (k, past) in lifted {
        let back = past.min(spare);
        *by.entry(k).or_default() += back;
        spare -= back;
    }
    moves.extend(by.into_iter().filter(|(_, d)| *d != 0));
    Ok(())
}

fn cap_i64(v: u64) -> i64 {
    i64::try_from(v).unwrap_or(i64::MAX)
}
