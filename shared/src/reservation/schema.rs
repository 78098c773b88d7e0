//! The non-fungible table: its attribute names in either naming style, and its definition.

use crate::table::{styled_attrs, AttributeStyle, IndexDef, KeyAttr, TableDef, TableKind};

styled_attrs! {
    /// The non-fungible table's attribute names in one naming style.
    pub struct Attrs {
        resource_coordinate: "resourceCoordinate" / "resource_coordinate",
        reservation_id: "reservationId" / "reservation_id",
        resource_id: "resourceId" / "resource_id",
        resource_name: "resourceName" / "resource_name",
        expiration_time: "expirationTime" / "expiration_time",
        account_id: "accountId" / "account_id",
        /// A bound row's binding: its expiry and bind id, as its ledger entry holds them.
        binding: "binding" / "binding",
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
