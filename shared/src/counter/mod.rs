//! Counters: the AWS WebSocket sample's "Limit table" of open-connection counts and per-minute
//! counters, plus one row per open connection (see `docs/decisions/0301-connection-rows.md`).

pub mod keys;
pub mod window;

use crate::table::{TableDef, TableKind};

pub mod attr {
    pub const KEY: &str = "key";
    pub const ITEM_COUNT: &str = "itemCount";
    /// Epoch seconds; per-minute rows expire one second after their minute.
    pub const ITEM_TTL: &str = "itemTTL";
    /// On TTL-sweep tombstones: the tenant and session whose deletion they record.
    pub const TENANT_ID: &str = "tenantId";
    pub const SESSION_ID: &str = "sessionId";
    /// On `{tenant}`: incremented by every write to the open count, so the reconciler can repair
    /// the count only if nothing touched it meanwhile (decision 0306).
    pub const VERSION: &str = "ver";
    /// On `{tenant}`: epoch ms of the last `$connect` reservation (a refusal soon after it waits
    /// for that reservation to settle).
    pub const RESERVED_AT: &str = "reservedAt";
    /// On `{tenant}` (fixed windows): the start (epoch s) of the minute `connMinuteCount` counts.
    pub const CONN_MINUTE: &str = "connMinute";
    /// On `{tenant}` (fixed windows): connections opened by the tenant during `connMinute`.
    pub const CONN_MINUTE_COUNT: &str = "connMinuteCount";
    /// On `{tenant}` (`rateAlgorithm = gcra`): the per-minute bucket's TAT (epoch ns).
    pub const CONN_TAT: &str = "connTat";
    /// On `{tenant}`: epoch ms of the truth the reconciler last set the count from; a TTL sweep of
    /// a session deleted before it must not decrement again.
    pub const TRUTH_AT: &str = "truthAt";
    /// On `{tenant}`: reservations ever made (`$connect` step 1 adds 1 in the same write), so the
    /// reconciler can bound the reservations in flight at a read (decision 0306).
    pub const RESERVED_TOTAL: &str = "resvTotal";
    /// On `{tenant}`: units ever decremented by undos and releases (each adds what it subtracts
    /// in the same write), so the reconciler can bound the releases in flight at a read.
    pub const RELEASED_TOTAL: &str = "relTotal";
    /// On `{tenant}`: repairs ever applied by the reconciler; a repair is conditioned on it, so
    /// two reconcilers never subtract the same leak twice.
    pub const REPAIRS: &str = "repairs";
    /// On `{tenant}` and its shards, once the tenant was resharded: the `connectionShards` now in
    /// force. Step 1 is conditioned on it (absent, or equal to the layout the connect believes),
    /// so a process holding an older tenant row cannot charge a retired layout (decision 2206).
    pub const LAYOUT: &str = "layout";
    /// On the fenced items: the most shards either layout of the last reshard had, so the
    /// reconciler knows which counters may still hold connections (decision 2206).
    pub const LAYOUT_SPAN: &str = "layoutSpan";
}

pub fn table(name: &str) -> TableDef {
    TableDef::keyed(TableKind::Counters, name, attr::KEY).expiring(attr::ITEM_TTL)
}
