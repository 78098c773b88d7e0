//! Counters: seed 003's "Limit table" of open-connection counts and per-minute counters, plus one
//! row per open connection (see `docs/decisions/0301-connection-rows.md`).

pub mod keys;
pub mod window;

use crate::table::{KeyAttr, TableDef, TableKind};

pub mod attr {
    pub const KEY: &str = "key";
    pub const ITEM_COUNT: &str = "itemCount";
    /// Epoch seconds; per-minute rows expire one second after their minute.
    pub const ITEM_TTL: &str = "itemTTL";
    /// On connection rows: the owning tenant, session and API Gateway connection id.
    pub const TENANT_ID: &str = "tenantId";
    pub const SESSION_ID: &str = "sessionId";
    pub const CONNECTION_ID: &str = "connectionId";
    /// On connection rows: epoch seconds the connection was admitted.
    pub const CONNECTED_AT: &str = "connectedAt";
}

pub fn table(name: &str) -> TableDef {
    TableDef {
        kind: TableKind::Counters,
        name: name.to_string(),
        partition_key: KeyAttr::s(attr::KEY),
        sort_key: None,
        indexes: vec![],
        ttl_attribute: Some(attr::ITEM_TTL),
        stream: None,
    }
}
