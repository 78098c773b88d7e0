//! The reconciler's reads and repair write for a sharded tenant (decision 1502): 0306's three
//! phases run on sums over the `N` shards. A read is 1 BatchGetItem of every shard; the repair is
//! one `TransactWriteItems` over all of them: every shard `SET truthAt` under its `relTotal`
//! unchanged since the last read (so no release anywhere lands unseen between that read and the
//! write), and shard 0 also `ADD itemCount −leak`, `repairs + 1` under `repairs` unchanged (two
//! reconcilers never subtract the same leak). Only the sum matters (releases credit any shard),
//! and lowering one shard's count keeps every `cᵢ ≤ sᵢ`.

use super::reconcile::{unchanged, Snapshot};
use super::shards;
use super::write::Parts;
use crate::counter::{attr as cattr, keys};
use crate::dynamo::item::{self, n, s, Item};
use crate::dynamo::txn;
use crate::error::{Error, Result};
use crate::ids::TenantId;
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
        add(&mut snap.count, num(cattr::ITEM_COUNT));
        add(&mut snap.ver, num(cattr::VERSION));
        add(&mut snap.reserved, num(cattr::RESERVED_TOTAL));
        add(&mut snap.released, num(cattr::RELEASED_TOTAL));
        if i == 0 {
            snap.repairs = num(cattr::REPAIRS);
        }
        released.push(num(cattr::RELEASED_TOTAL));
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
        let mut p = Parts::default();
        unchanged(&mut p, "#rl", cattr::RELEASED_TOTAL, ":rl0", *rel);
        p.name("#ta", cattr::TRUTH_AT);
        p.value(":at", n(truth_at));
        p.set.push("#ta = :at".into());
        if i == 0 {
            unchanged(&mut p, "#rp", cattr::REPAIRS, ":rp0", repairs);
            p.name("#c", cattr::ITEM_COUNT).name("#v", cattr::VERSION);
            p.value(":neg", n(-leak)).value(":one", n(1));
            p.add.push("#c :neg".into());
            p.add.push("#v :one".into());
            p.add.push("#rp :one".into());
        }
        let key = Item::from([(
            cattr::KEY.to_string(),
            s(keys::connection_shard(t, i as u64)?),
        )]);
        items.push(p.transact_update(&deps.tables.counters, key, "a shard repair")?);
    }
    Ok(matches!(
        txn::send(&deps.dynamo, items).await?,
        txn::Outcome::Committed
    ))
}
