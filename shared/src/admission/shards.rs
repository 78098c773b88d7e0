//! Sharded tenant connection counters (decision 1502): a tenant with
//! `connectionShards: n` (2..=100) counts its open connections on `n` items `{tenant}:shard:{i}`
//! instead of the one `{tenant}` item, so its connects are not capped by one item's write ceiling.
//!
//! Shard `i` admits while its `itemCount` is below `share(tenantConnections, n, i)` (and its
//! minute below `share(tenantPerMinute, n, i)`); every increment is that one conditional write, so
//! each shard's count is at most its share after every increment and only falls between them, and
//! the shares sum to the cap: the tenant never holds more than `tenantConnections`.
//!
//! A connect charges a random shard and its join records which (`chg:{cid}`); a release
//! (disconnect, session delete, TTL sweep) decrements that shard, with no lookup (decision 2206).
//! A connect refused by its shard reads every shard (1 BatchGetItem) and tries shards that had
//! room, at most [`TRIES_PER_ROUND`] per read and [`ROUNDS`] reads.

use std::collections::HashMap;

use aws_sdk_dynamodb::types::KeysAndAttributes;

use crate::counter::{attr as counter_attr, keys};
use crate::dynamo::item::{self, s, Item};
use crate::error::{Error, Result};
use crate::ids::TenantId;
use crate::shard::share;
use crate::tenant::{Limits, MAX_CONNECTION_SHARDS};
use crate::Deps;

/// Shards with room tried after one read of all shards.
pub const TRIES_PER_ROUND: usize = 3;
/// Reads of all shards before a refusal stands.
pub const ROUNDS: u32 = 3;

pub use crate::session::store::connection_shards as of_item;

/// One counter item step 1 may charge, and its caps.
pub struct Counter {
    pub key: String,
    /// Open connections it may count (the tenant's cap, or a shard's share of it).
    pub cap: u64,
    /// Connections it may count per minute.
    pub minute_cap: u64,
    /// A shard: no settling waits (another shard is tried instead) and no floor at zero.
    pub sharded: bool,
    /// What a connection charged here records (`chg:{cid}`): the shard, or
    /// `session::TENANT_COUNTER`.
    pub index: i64,
}

/// Shard `i` of a tenant of `limits` (n > 1).
pub(crate) fn counter(deps: &Deps, t: &TenantId, limits: &Limits, i: u64) -> Result<Counter> {
    let over = u64::from(crate::mutation::active(
        deps,
        crate::mutation::Mutation::ShardOverShare,
    ));
    let n = u32::try_from(limits.connection_shards).unwrap_or(1);
    let i32_ = u32::try_from(i).unwrap_or(0);
    Ok(Counter {
        key: keys::connection_shard(t, i)?,
        cap: share(limits.tenant_connections, n, i32_) + over,
        minute_cap: share(limits.tenant_per_minute, n, i32_),
        sharded: true,
        index: i64::from(i32_),
    })
}

/// Every shard of `t` (strongly consistent), by index; a shard with no item maps to `None`. 1
/// `BatchGetItem` (n ≤ 100); keys DynamoDB leaves unprocessed are asked again at most twice, and
/// a shard still unread is missing from the map (not tried).
pub async fn read_all(deps: &Deps, t: &TenantId, n: u64) -> Result<HashMap<u64, Option<Item>>> {
    let mut index = HashMap::new();
    let mut wanted = Vec::new();
    for i in 0..n {
        let k = keys::connection_shard(t, i)?;
        wanted.push(k.clone());
        index.insert(k, i);
    }
    let (rows, request) = read_counters(deps, &wanted).await?;
    let mut out: HashMap<u64, Option<Item>> = HashMap::new();
    for it in rows.get(&deps.tables.counters).into_iter().flatten() {
        if let Some(i) = it
            .get(counter_attr::KEY)
            .and_then(|v| v.as_s().ok())
            .and_then(|k| index.get(k))
        {
            out.insert(*i, Some(it.clone()));
        }
    }
    let unread: Vec<u64> = request
        .values()
        .flat_map(|ka| ka.keys())
        .filter_map(|k| k.get(counter_attr::KEY).and_then(|v| v.as_s().ok()))
        .filter_map(|k| index.get(k).copied())
        .collect();
    for i in 0..n {
        if !unread.contains(&i) {
            out.entry(i).or_insert(None);
        }
    }
    Ok(out)
}

/// One strongly consistent `BatchGetItem` of these counter keys (≤ 100): the rows, and what
/// DynamoDB left unprocessed after `batch_get`'s retries.
pub(crate) async fn read_counters(
    deps: &Deps,
    keys: &[String],
) -> Result<(
    HashMap<String, Vec<Item>>,
    HashMap<String, KeysAndAttributes>,
)> {
    let wanted = keys
        .iter()
        .map(|k| Item::from([(counter_attr::KEY.to_string(), s(k.clone()))]))
        .collect();
    let built = KeysAndAttributes::builder()
        .set_keys(Some(wanted))
        .consistent_read(true)
        .build()
        .map_err(|e| Error::build_request("BatchGetItem", e))?;
    let request = HashMap::from([(deps.tables.counters.clone(), built)]);
    crate::dynamo::batch_get(&deps.dynamo, request).await
}

/// The open connections counted over every shard (a sum of consistent reads, not one snapshot:
/// for reports and tests). Unread shards count 0.
pub async fn open_count(deps: &Deps, t: &TenantId, n: u64) -> Result<i64> {
    Ok(read_all(deps, t, n)
        .await?
        .values()
        .flatten()
        .filter_map(|it| item::num(it, counter_attr::ITEM_COUNT))
        .sum())
}

/// The counter items of a layout of `n` shards: `{tenant}` when `n` is 1, else its shards.
pub(crate) fn layout_keys(t: &TenantId, n: u64) -> Result<Vec<String>> {
    if n <= 1 {
        return Ok(vec![keys::tenant_connections(t)?]);
    }
    (0..n.min(MAX_CONNECTION_SHARDS))
        .map(|i| Ok(keys::connection_shard(t, i)?))
        .collect()
}

/// Fences a reshard of `t` from `from` to `to` shards (decision 2206), before the tenant row is
/// changed: every counter item of the old layout gets `layout = to` in one write (a
/// `TransactWriteItems` of up to 100 updates, so no old item admits once any refuses), then
/// every item of the new layout that is not one of those. From then on a step 1 planned on an
/// older row is refused by the first item it tries and planned again on `to`: two layouts never
/// admit side by side, whatever the authorizers' caches hold. 1 call when `from` is 1, otherwise
/// 1 `TransactWriteItems`; plus 1 for the new layout's other items.
pub async fn fence(deps: &Deps, t: &TenantId, from: u64, to: u64) -> Result<()> {
    if from == to {
        return Ok(());
    }
    let old = layout_keys(t, from)?;
    let new: Vec<String> = layout_keys(t, to)?
        .into_iter()
        .filter(|k| !old.contains(k))
        .collect();
    for group in [old, new] {
        let mut items = Vec::with_capacity(group.len());
        for k in group {
            let update = aws_sdk_dynamodb::types::Update::builder()
                .table_name(&deps.tables.counters)
                .key(counter_attr::KEY, s(k))
                .update_expression("SET #lay = :lay, #span = :span")
                .expression_attribute_names("#lay", counter_attr::LAYOUT)
                .expression_attribute_names("#span", counter_attr::LAYOUT_SPAN)
                .expression_attribute_values(":lay", item::n(to))
                .expression_attribute_values(":span", item::n(from.max(to)))
                .build()
                .map_err(|e| Error::build_request("a layout fence", e))?;
            items.push(
                aws_sdk_dynamodb::types::TransactWriteItem::builder()
                    .update(update)
                    .build(),
            );
        }
        if items.is_empty() {
            continue;
        }
        match crate::dynamo::txn::send(&deps.dynamo, items).await? {
            crate::dynamo::txn::Outcome::Committed => {}
            crate::dynamo::txn::Outcome::Cancelled(r) => {
                return Err(Error::Other(format!(
                    "fencing the counters of tenant {t} for {to} shard(s) was cancelled: {r:?}"
                )))
            }
        }
    }
    Ok(())
}
