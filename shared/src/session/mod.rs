//! Sessions (seed 003): a tenant's session, its live connection ids, and its expiry.

use crate::table::{KeyAttr, TableDef, TableKind};

pub mod attr {
    pub const TENANT_ID: &str = "tenantId";
    pub const SESSION_ID: &str = "sessionId";
    pub const CONNECTION_IDS: &str = "connectionIds";
    /// Epoch seconds; DynamoDB's TTL deletes the session after it, and the stream tells the sweeper.
    pub const SESSION_TTL: &str = "sessionTTL";
}

pub fn table(name: &str) -> TableDef {
    TableDef {
        kind: TableKind::Sessions,
        name: name.to_string(),
        partition_key: KeyAttr::s(attr::TENANT_ID),
        sort_key: Some(KeyAttr::s(attr::SESSION_ID)),
        indexes: vec![],
        ttl_attribute: Some(attr::SESSION_TTL),
        stream: Some("NEW_AND_OLD_IMAGES"),
    }
}
