//! What the dashboard shows of the tables: tenants (typed, through `shared::tenant::store`), and the
//! rows of the session, counter and bucket tables as JSON, each table bounded to [`ROWS`] rows.

use std::collections::HashMap;

use aws_sdk_dynamodb::types::AttributeValue;
use serde::Serialize;
use serde_json::Value;
use shared::catalog;
use shared::table::TableKind;
use shared::tenant::Tenant;
use shared::{Deps, Error, Result};

/// Rows read per table at most (the page is for a developer's machine, not for a fleet).
pub const ROWS: usize = 200;

#[derive(Debug, Serialize)]
#[serde(rename_all = "camelCase")]
pub struct Tables {
    pub tenants: Vec<Tenant>,
    /// Tenant rows that did not parse, with the reason (shown, not hidden).
    pub bad_tenants: Vec<String>,
    pub sessions: Rows,
    pub counters: Rows,
    pub buckets: Rows,
}

#[derive(Debug, Default, Serialize)]
pub struct Rows {
    /// The table's key attributes (from the catalog), shown first.
    pub keys: Vec<&'static str>,
    pub rows: Vec<Value>,
    /// True when the table holds more than [`ROWS`] rows.
    pub truncated: bool,
    /// True when the table does not exist (the stack runs without it).
    pub missing: bool,
}

/// DynamoDB calls: 1 Scan page per table (and the tenant listing's pages).
pub async fn read(deps: &Deps) -> Result<Tables> {
    let (mut tenants, bad_tenants) = shared::tenant::store::list(deps).await?;
    tenants.truncate(ROWS);
    Ok(Tables {
        tenants,
        bad_tenants,
        sessions: scan(deps, TableKind::Sessions).await?,
        counters: scan(deps, TableKind::Counters).await?,
        buckets: scan(deps, TableKind::Buckets).await?,
    })
}

async fn scan(deps: &Deps, kind: TableKind) -> Result<Rows> {
    let def = catalog::definition(kind, &deps.tables, deps.style);
    let sent = deps
        .dynamo
        .scan()
        .table_name(&def.name)
        .limit(ROWS as i32)
        .send()
        .await;
    let out = match sent {
        Ok(out) => out,
        Err(e)
            if e.as_service_error()
                .is_some_and(|se| se.is_resource_not_found_exception()) =>
        {
            return Ok(Rows {
                missing: true,
                ..Rows::default()
            })
        }
        Err(e) => return Err(Error::dynamo("Scan", e)),
    };
    Ok(Rows {
        missing: false,
        keys: std::iter::once(def.partition_key.name)
            .chain(def.sort_key.map(|k| k.name))
            .collect(),
        rows: out.items().iter().map(to_json).collect(),
        truncated: out.last_evaluated_key().is_some_and(|k| !k.is_empty()),
    })
}

/// An item as plain JSON (numbers as numbers, sets as arrays), by serde_dynamo; an item it cannot
/// express (binary attributes) is shown as the error rather than dropped.
fn to_json(item: &HashMap<String, AttributeValue>) -> Value {
    serde_dynamo::from_item::<_, Value>(item.clone())
        .unwrap_or_else(|e| serde_json::json!({ "unreadable": e.to_string() }))
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn items_read_as_plain_json() {
        let item = HashMap::from([
            ("tenantId".to_string(), AttributeValue::S("acme".into())),
            ("count".to_string(), AttributeValue::N("3".into())),
            ("rate".to_string(), AttributeValue::N("0.5".into())),
            (
                "connectionIds".to_string(),
                AttributeValue::Ss(vec!["a".into(), "b".into()]),
            ),
        ]);
        let v = to_json(&item);
        assert!(v.get("unreadable").is_none(), "{v}");
        assert_eq!(v["tenantId"], "acme");
        assert_eq!(v["count"], 3);
        assert_eq!(v["rate"], 0.5);
        assert_eq!(v["connectionIds"], serde_json::json!(["a", "b"]));
    }
}
