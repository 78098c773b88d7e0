//! Counters: seed 003's "Limit table" of open-connection counts and per-minute counters.

use crate::table::{KeyAttr, TableDef, TableKind};

pub mod attr {
    pub const KEY: &str = "key";
    pub const ITEM_COUNT: &str = "itemCount";
    /// Epoch seconds; per-minute rows expire one second after their minute.
    pub const ITEM_TTL: &str = "itemTTL";
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
