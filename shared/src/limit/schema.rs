//! The limits table: its attribute names in either naming style, and its definition.

use crate::table::{styled_attrs, AttributeStyle, TableDef, TableKind};

styled_attrs! {
    /// The limits table's attribute names in one naming style.
    pub struct Attrs {
        resource_name: "resourceName" / "resource_name",
        account_id: "accountId" / "account_id",
        limit: "limit" / "limit",
        window_sec: "windowSec" / "window_sec",
        /// rate-limiter-py's snake_case design names the index key `serviceName` but the
        /// attribute `service_name`; an index key must be the attribute, so snake-case tables
        /// index `service_name`.
        service_name: "serviceName" / "service_name",
    }
}

pub fn table(name: &str, service_index: &str, style: AttributeStyle) -> TableDef {
    let a = Attrs::of(style);
    TableDef::keyed(TableKind::Limits, name, a.resource_name)
        .sorted_by(a.account_id)
        .indexed(service_index, a.service_name)
}
