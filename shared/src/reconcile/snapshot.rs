//! One read of a counter item, and the repair write conditioned on it being unchanged.

use crate::dynamo::{self, item};

use aws_sdk_dynamodb::types::ReturnValue;

use crate::admission::write::{self, ConditionalUpdate, Retries, UpdateOutcome};
use crate::counter::attr as counter_attr;
use crate::dynamo::item::{n, s, Item};
use crate::error::Result;
use crate::Deps;

/// What one read of the tenant's counter showed.
/// For a sharded tenant, the sums over its shards (`repairs` from shard 0; decision 1502).
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq)]
pub(in crate::reconcile) struct Snapshot {
    pub count: Option<i64>,
    pub ver: Option<i64>,
    pub reserved: Option<i64>,
    pub released: Option<i64>,
    pub repairs: Option<i64>,
    /// `layoutSpan`: the tenant was resharded and fenced (decision 2206).
    pub span: Option<i64>,
}

/// One counter item (`{tenant}`, or `{tenant}:sessions`) as a snapshot: 1 GetItem.
pub(in crate::reconcile) async fn read_item(deps: &Deps, key: &str) -> Result<Snapshot> {
    let key = Item::from([(counter_attr::KEY.to_string(), s(key))]);
    let item = dynamo::get_consistent(&deps.dynamo, &deps.tables.counters, key).await?;
    Ok(snapshot_of(item.as_ref()))
}

/// Adds `#name = :value`, or `attribute_not_exists(#name)` when it was absent.
pub(in crate::reconcile) fn unchanged(
    p: &mut ConditionalUpdate,
    name: &str,
    attr: &str,
    value: &str,
    was: Option<i64>,
) {
    p.name(name, attr);
    match was {
        Some(v) => {
            p.value(value, n(v));
            p.conditions.push(format!("{name} = {value}"));
        }
        None => p.conditions.push(format!("attribute_not_exists({name})")),
    }
}

/// Lowers the count by `leak` (> 0), only if no release landed since `released` was read and the
/// count still holds the leak (a subtraction never undoes admissions made meanwhile).
pub(in crate::reconcile) fn subtract_leak(
    p: &mut ConditionalUpdate,
    released: Option<i64>,
    leak: i64,
) {
    unchanged(p, "#rl", counter_attr::RELEASED_TOTAL, ":rl0", released);
    p.name("#c", counter_attr::ITEM_COUNT);
    p.value(":leak", n(leak)).value(":neg", n(-leak));
    p.conditions.push("#c >= :leak".into());
    p.add.push("#c :neg".into());
}

/// How much a running total grew between two reads (0 when it did not).
pub(in crate::reconcile) fn grew(from: Option<i64>, to: Option<i64>) -> u64 {
    u64::try_from(to.unwrap_or(0) - from.unwrap_or(0)).unwrap_or(0)
}

/// A repair's write on one counter item (`key`): `p` (the change and its conditions), plus
/// `repairs` unchanged since the read (two reconcilers never repair the same thing), `truthAt`
/// stamped, `ver` and `repairs` + 1. 1 UpdateItem, at most once. Whether it applied.
pub(in crate::reconcile) async fn stamp_repair(
    deps: &Deps,
    key: &str,
    mut p: ConditionalUpdate,
    repairs: Option<i64>,
    truth_at: i64,
) -> Result<bool> {
    unchanged(&mut p, "#rp", counter_attr::REPAIRS, ":rp0", repairs);
    p.name("#v", counter_attr::VERSION)
        .name("#ta", counter_attr::TRUTH_AT);
    p.value(":one", n(1)).value(":at", n(truth_at));
    p.set.push("#ta = :at".into());
    p.add.push("#v :one".into());
    p.add.push("#rp :one".into());
    let key = Item::from([(counter_attr::KEY.to_string(), s(key))]);
    let table = &deps.tables.counters;
    Ok(matches!(
        write::update(
            deps,
            table,
            &key,
            &p,
            ReturnValue::None,
            Retries::AtMostOnce
        )
        .await?,
        UpdateOutcome::Applied(_)
    ))
}

/// One counter item as a [`Snapshot`].
pub(in crate::reconcile) fn snapshot_of(it: Option<&Item>) -> Snapshot {
    let num = |a: &str| it.and_then(|i| item::num(i, a));
    Snapshot {
        count: num(counter_attr::ITEM_COUNT),
        ver: num(counter_attr::VERSION),
        reserved: num(counter_attr::RESERVED_TOTAL),
        released: num(counter_attr::RELEASED_TOTAL),
        repairs: num(counter_attr::REPAIRS),
        span: num(counter_attr::LAYOUT_SPAN),
    }
}
