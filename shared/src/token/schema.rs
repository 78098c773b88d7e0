//! The fungible tokens table: its attribute names in either naming style, and its definition.

use crate::table::{styled_attrs, AttributeStyle, TableDef, TableKind};

/// The value at a dotted path (`detail.clusterId`) of a JSON document; array elements by index
/// (`resources.0`).
pub fn json_path<'a>(doc: &'a serde_json::Value, path: &str) -> Option<&'a serde_json::Value> {
    path.split('.').try_fold(doc, |v, part| match v {
        serde_json::Value::Object(m) => m.get(part),
        serde_json::Value::Array(a) => part.parse::<usize>().ok().and_then(|i| a.get(i)),
        _ => None,
    })
}

styled_attrs! {
    /// The token table's attribute names in one naming style.
    pub struct Attrs {
        resource_name: "resourceName" / "resource_name",
        account_id: "accountId" / "account_id",
        tokens: "tokens" / "tokens",
        last_refill: "lastRefill" / "last_refill",
        last_token: "lastToken" / "last_token",
    }
}

pub fn table(name: &str, style: AttributeStyle) -> TableDef {
    let a = Attrs::of(style);
    TableDef::keyed(TableKind::FungibleTokens, name, a.resource_name).sorted_by(a.account_id)
}

/// Property tests (docs/testing.md): paths come from configuration, documents from events.
#[cfg(test)]
mod fuzz_tests {
    use proptest::prelude::*;

    proptest! {
        #![proptest_config(crate::fuzz::config(1))]

        /// `fuzz_json_path`: any dotted path over any document finds a value or nothing.
        #[test]
        fn fuzz_json_path(
            doc in crate::fuzz::json_with_keys(&["detail", "clusterId", "0", "a", ""]),
            path in prop_oneof![crate::fuzz::text(), "(detail|clusterId|0|1|a|)(\\.(detail|clusterId|0|1|a|)){0,4}"],
        ) {
            if let Some(v) = super::json_path(&doc, &path) {
                prop_assert!(path.split('.').count() >= 1 && v == v);
            }
        }
    }
}
