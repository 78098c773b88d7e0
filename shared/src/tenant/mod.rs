//! Tenants (seed 003): each tenant's WebSocket limits.

use crate::table::{KeyAttr, TableDef, TableKind};

/// Attribute names, as seed 003 and the AWS sample write them.
pub mod attr {
    pub const TENANT_ID: &str = "tenantId";
    pub const CONNECTIONS_PER_SESSION: &str = "connectionsPerSession";
    pub const TENANT_CONNECTIONS: &str = "tenantConnections";
    pub const SESSION_PER_MINUTE: &str = "sessionPerMinute";
    pub const TENANT_PER_MINUTE: &str = "tenantPerMinute";
    pub const SESSION_TTL: &str = "sessionTTL";
    pub const MESSAGES_PER_MINUTE: &str = "messagesPerMinute";
}

pub fn table(name: &str) -> TableDef {
    TableDef {
        kind: TableKind::Tenants,
        name: name.to_string(),
        partition_key: KeyAttr::s(attr::TENANT_ID),
        sort_key: None,
        indexes: vec![],
        ttl_attribute: None,
        stream: None,
    }
}
