//! The non-fungible table: its attribute names in either naming style, and its definition.

use crate::table::{AttributeStyle, IndexDef, KeyAttr, TableDef, TableKind};

#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Attrs {
    pub resource_coordinate: &'static str,
    pub reservation_id: &'static str,
    pub resource_id: &'static str,
    pub resource_name: &'static str,
    pub expiration_time: &'static str,
    pub account_id: &'static str,
    /// A bound row's binding: its expiry and bind id, as its ledger entry holds them.
    pub binding: &'static str,
}

impl Attrs {
    pub const CAMEL: Attrs = Attrs {
        resource_coordinate: "resourceCoordinate",
        reservation_id: "reservationId",
        resource_id: "resourceId",
        resource_name: "resourceName",
        expiration_time: "expirationTime",
        account_id: "accountId",
        binding: "binding",
    };
    pub const SNAKE: Attrs = Attrs {
        resource_coordinate: "resource_coordinate",
        reservation_id: "reservation_id",
        resource_id: "resource_id",
        resource_name: "resource_name",
        expiration_time: "expiration_time",
        account_id: "account_id",
        binding: "binding",
    };
    pub fn of(style: AttributeStyle) -> Attrs {
        match style {
            AttributeStyle::Camel => Attrs::CAMEL,
            AttributeStyle::Snake => Attrs::SNAKE,
        }
    }
}

pub fn table(name: &str, resource_index: &str, style: AttributeStyle) -> TableDef {
    let a = Attrs::of(style);
    TableDef {
        kind: TableKind::NonFungibleTokens,
        name: name.to_string(),
        partition_key: KeyAttr::s(a.resource_coordinate),
        sort_key: Some(KeyAttr::s(a.reservation_id)),
        indexes: vec![IndexDef {
            name: resource_index.to_string(),
            partition_key: KeyAttr::s(a.resource_id),
            sort_key: None,
        }],
        ttl_attribute: Some(a.expiration_time),
        stream: None,
    }
}
