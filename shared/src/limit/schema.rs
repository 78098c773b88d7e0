//! The limits table: its attribute names in either naming style, and its definition.

use crate::table::{AttributeStyle, IndexDef, KeyAttr, TableDef, TableKind};

#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Attrs {
    pub resource_name: &'static str,
    pub account_id: &'static str,
    pub limit: &'static str,
    pub window_sec: &'static str,
    pub service_name: &'static str,
}

impl Attrs {
    pub const CAMEL: Attrs = Attrs {
        resource_name: "resourceName",
        account_id: "accountId",
        limit: "limit",
        window_sec: "windowSec",
        service_name: "serviceName",
    };
    /// rate-limiter-py's snake_case design names the index key `serviceName` but the attribute
    /// `service_name`; an index key must be the attribute, so snake-case tables index
    /// `service_name`.
    pub const SNAKE: Attrs = Attrs {
        resource_name: "resource_name",
        account_id: "account_id",
        limit: "limit",
        window_sec: "window_sec",
        service_name: "service_name",
    };
    pub fn of(style: AttributeStyle) -> Attrs {
        match style {
            AttributeStyle::Camel => Attrs::CAMEL,
            AttributeStyle::Snake => Attrs::SNAKE,
        }
    }
}

pub fn table(name: &str, service_index: &str, style: AttributeStyle) -> TableDef {
    let a = Attrs::of(style);
    TableDef {
        kind: TableKind::Limits,
        name: name.to_string(),
        partition_key: KeyAttr::s(a.resource_name),
        sort_key: Some(KeyAttr::s(a.account_id)),
        indexes: vec![IndexDef {
            name: service_index.to_string(),
            partition_key: KeyAttr::s(a.service_name),
            sort_key: None,
        }],
        ttl_attribute: None,
        stream: None,
    }
}
