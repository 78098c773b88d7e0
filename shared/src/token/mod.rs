//! Fungible tokens (seeds 001/000): a token bucket per (resource, account).

use crate::table::{AttributeStyle, KeyAttr, TableDef, TableKind};

/// The token table's attribute names in one naming style.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Attrs {
    pub resource_name: &'static str,
    pub account_id: &'static str,
    pub tokens: &'static str,
    pub last_refill: &'static str,
    pub last_token: &'static str,
}

impl Attrs {
    pub const CAMEL: Attrs = Attrs {
        resource_name: "resourceName",
        account_id: "accountId",
        tokens: "tokens",
        last_refill: "lastRefill",
        last_token: "lastToken",
    };
    pub const SNAKE: Attrs = Attrs {
        resource_name: "resource_name",
        account_id: "account_id",
        tokens: "tokens",
        last_refill: "last_refill",
        last_token: "last_token",
    };
    pub fn of(style: AttributeStyle) -> Attrs {
        match style {
            AttributeStyle::Camel => Attrs::CAMEL,
            AttributeStyle::Snake => Attrs::SNAKE,
        }
    }
}

pub fn table(name: &str, style: AttributeStyle) -> TableDef {
    let a = Attrs::of(style);
    TableDef {
        kind: TableKind::FungibleTokens,
        name: name.to_string(),
        partition_key: KeyAttr::s(a.resource_name),
        sort_key: Some(KeyAttr::s(a.account_id)),
        indexes: vec![],
        ttl_attribute: None,
        stream: None,
    }
}
