//! The key-value limits table: its attribute names and its definition.

use crate::table::{KeyAttr, TableDef, TableKind};

pub mod attr {
    /// `{nameId}:{id}`, the interned bucket key (Boulder's form).
    pub const BUCKET: &str = "bucket";
    /// Epoch seconds after which an idle bucket is full again and can be forgotten.
    pub const EXPIRES_AT: &str = "expiresAt";
}

pub fn table(name: &str) -> TableDef {
    TableDef {
        kind: TableKind::Buckets,
        name: name.to_string(),
        partition_key: KeyAttr::s(attr::BUCKET),
        sort_key: None,
        indexes: vec![],
        ttl_attribute: Some(attr::EXPIRES_AT),
        stream: None,
    }
}
