//! The non-fungible table: its attribute names in either naming style, and its definition.

use crate::table::{styled_attrs, AttributeStyle, TableDef, TableKind};

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
    TableDef::keyed(TableKind::NonFungibleTokens, name, a.resource_coordinate)
        .sorted_by(a.reservation_id)
        .indexed(resource_index, a.resource_id)
        .expiring(a.expiration_time)
}
