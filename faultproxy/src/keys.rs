//! Which operation a DynamoDB JSON request is, and which items it writes.
//!
//! DynamoDB's JSON protocol names the operation in the `X-Amz-Target` header
//! (`DynamoDB_20120810.TransactWriteItems`) and the items in the body: `Key` for Update, Delete and
//! ConditionCheck, the whole `Item` for Put. A Put's key is the item's key-schema attributes, so the
//! proxy learns each table's key schema (one DescribeTable per table) and passes it in here.

use std::collections::{BTreeMap, HashMap};

use serde_json::{Map, Value};

/// The target prefix of every DynamoDB (2012-08-10 API) operation.
pub const TARGET_PREFIX: &str = "DynamoDB_20120810.";

/// One item: its table and its key attributes in a canonical text form (attribute names sorted,
/// values as their JSON), so two requests naming the same item compare equal.
#[derive(Debug, Clone, PartialEq, Eq, Hash, PartialOrd, Ord)]
pub struct ItemKey {
    pub table: String,
    pub key: String,
}

impl ItemKey {
    /// The key of `attrs` (a DynamoDB attribute map): only the attributes named in `schema`, or all
    /// of them when the schema is unknown (`None`).
    pub fn of(table: &str, attrs: &Map<String, Value>, schema: Option<&[String]>) -> ItemKey {
        let sorted: BTreeMap<&str, String> = attrs
            .iter()
            .filter(|(name, _)| schema.is_none_or(|s| s.iter().any(|k| k == *name)))
            .map(|(name, v)| (name.as_str(), v.to_string()))
            .collect();
        let key = sorted
            .iter()
            .map(|(name, v)| format!("{name}={v}"))
            .collect::<Vec<_>>()
            .join(";");
        ItemKey {
            table: table.to_string(),
            key,
        }
    }
}

/// The key `key` in table `t`: the stand-in item of the in-flight and rate unit tests.
#[cfg(test)]
pub(crate) fn test_key(key: &str) -> ItemKey {
    ItemKey {
        table: "t".into(),
        key: key.into(),
    }
}

/// The operation name from an `X-Amz-Target` header value (`TransactWriteItems`), if it is one.
pub fn operation(target: &str) -> Option<&str> {
    target.strip_prefix(TARGET_PREFIX)
}

/// Operations that write single items, which DynamoDB cancels or refuses when a transaction holds
/// the item.
pub const SINGLE_WRITES: [&str; 3] = ["PutItem", "UpdateItem", "DeleteItem"];

/// What a request writes, for conflict and per-item throttling decisions.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum Writes {
    /// A TransactWriteItems: one key per action, index-aligned with `TransactItems` (so
    /// cancellation reasons can name the conflicting index).
    Transaction(Vec<ItemKey>),
    /// PutItem, UpdateItem or DeleteItem.
    Single(ItemKey),
    /// Anything else (reads, batches, control plane): never conflicts.
    None,
}

/// Tables whose key schema is needed to key this request (those with a Put).
pub fn put_tables(op: &str, body: &Value) -> Vec<String> {
    let mut tables = Vec::new();
    let mut push = |put: &Value| {
        if let Some(t) = put.get("TableName").and_then(Value::as_str) {
            if !tables.iter().any(|x| x == t) {
                tables.push(t.to_string());
            }
        }
    };
    match op {
        "PutItem" => push(body),
        "TransactWriteItems" => {
            for action in transact_items(body) {
                if let Some(put) = action.get("Put") {
                    push(put);
                }
            }
        }
        _ => {}
    }
    tables
}

fn transact_items(body: &Value) -> &[Value] {
    body.get("TransactItems")
        .and_then(Value::as_array)
        .map(Vec::as_slice)
        .unwrap_or(&[])
}

/// The items `op` writes. `schemas` maps table name → key attribute names (a Put on a table not in
/// it is keyed by its whole item: it then conflicts only with an identical Put). A request whose
/// body does not have the shape DynamoDB requires is `Writes::None`: the upstream will reject it.
pub fn writes(op: &str, body: &Value, schemas: &HashMap<String, Vec<String>>) -> Writes {
    match op {
        "TransactWriteItems" => {
            let items = transact_items(body);
            let keys: Option<Vec<ItemKey>> = items
                .iter()
                .map(|action| action_key(action, schemas))
                .collect();
            match keys {
                Some(k) if !k.is_empty() => Writes::Transaction(k),
                _ => Writes::None,
            }
        }
        "PutItem" => single(body, "Item", schemas),
        "UpdateItem" | "DeleteItem" => single(body, "Key", schemas),
        _ => Writes::None,
    }
}

fn single(body: &Value, field: &str, schemas: &HashMap<String, Vec<String>>) -> Writes {
    match keyed(body, field, schemas) {
        Some(k) => Writes::Single(k),
        None => Writes::None,
    }
}

/// The key of one `TransactItems` entry: `{"Put": {...}}`, `{"Update": ...}`, `{"Delete": ...}` or
/// `{"ConditionCheck": ...}` (a condition check takes part in the transaction like a write).
fn action_key(action: &Value, schemas: &HashMap<String, Vec<String>>) -> Option<ItemKey> {
    if let Some(put) = action.get("Put") {
        return keyed(put, "Item", schemas);
    }
    ["Update", "Delete", "ConditionCheck"]
        .iter()
        .find_map(|kind| action.get(*kind))
        .and_then(|a| keyed(a, "Key", schemas))
}

fn keyed(v: &Value, field: &str, schemas: &HashMap<String, Vec<String>>) -> Option<ItemKey> {
    let table = v.get("TableName")?.as_str()?;
    let attrs = v.get(field)?.as_object()?;
    let schema = if field == "Item" {
        schemas.get(table).map(Vec::as_slice)
    } else {
        None
    };
    Some(ItemKey::of(table, attrs, schema))
}

/// The key attribute names in a DescribeTable answer (`Table.KeySchema[].AttributeName`).
pub fn key_schema(describe: &Value) -> Option<Vec<String>> {
    let names: Vec<String> = describe
        .get("Table")?
        .get("KeySchema")?
        .as_array()?
        .iter()
        .filter_map(|k| k.get("AttributeName").and_then(Value::as_str))
        .map(str::to_string)
        .collect();
    (!names.is_empty()).then_some(names)
}

#[cfg(test)]
mod tests {
    use super::*;
    use serde_json::json;

    fn schemas() -> HashMap<String, Vec<String>> {
        HashMap::from([("counters".to_string(), vec!["key".to_string()])])
    }

    #[test]
    fn operation_comes_from_the_target_header() {
        assert_eq!(
            operation("DynamoDB_20120810.TransactWriteItems"),
            Some("TransactWriteItems")
        );
        assert_eq!(operation("DynamoDBStreams_20120810.GetRecords"), None);
    }

    #[test]
    fn a_transaction_is_keyed_per_action_in_order() {
        let body = json!({"TransactItems": [
            {"Update": {"TableName": "counters", "Key": {"key": {"S": "t1"}},
                        "UpdateExpression": "ADD #c :one"}},
            {"Put": {"TableName": "counters",
                     "Item": {"key": {"S": "t1:conn:c1"}, "connectedAt": {"N": "5"}}}},
            {"Delete": {"TableName": "sessions",
                        "Key": {"tenantId": {"S": "t1"}, "sessionId": {"S": "s1"}}}},
            {"ConditionCheck": {"TableName": "counters", "Key": {"key": {"S": "x"}}}}
        ]});
        assert_eq!(
            put_tables("TransactWriteItems", &body),
            vec!["counters".to_string()]
        );
        let Writes::Transaction(keys) = writes("TransactWriteItems", &body, &schemas()) else {
            panic!("a transaction");
        };
        assert_eq!(keys.len(), 4);
        assert_eq!(keys[0].table, "counters");
        assert_eq!(keys[0].key, r#"key={"S":"t1"}"#);
        // The Put is keyed by the key schema only, not its other attributes.
        assert_eq!(keys[1].key, r#"key={"S":"t1:conn:c1"}"#);
        // Composite keys: attribute names sorted, whatever the order in the request.
        assert_eq!(keys[2].key, r#"sessionId={"S":"s1"};tenantId={"S":"t1"}"#);
        assert_eq!(keys[3].key, r#"key={"S":"x"}"#);
    }

    #[test]
    fn the_same_item_compares_equal_across_operations() {
        let update = json!({"TableName": "counters", "Key": {"key": {"S": "t1"}}});
        let put = json!({"TableName": "counters", "Item": {"key": {"S": "t1"}, "n": {"N": "1"}}});
        let txn = json!({"TransactItems": [{"Update": update.clone()}]});
        let Writes::Single(a) = writes("UpdateItem", &update, &schemas()) else {
            panic!()
        };
        let Writes::Single(b) = writes("PutItem", &put, &schemas()) else {
            panic!()
        };
        let Writes::Transaction(c) = writes("TransactWriteItems", &txn, &schemas()) else {
            panic!()
        };
        assert_eq!(a, b);
        assert_eq!(a, c[0]);
        // Same key value in another table is another item.
        let other = json!({"TableName": "tenants", "Key": {"key": {"S": "t1"}}});
        let Writes::Single(d) = writes("DeleteItem", &other, &schemas()) else {
            panic!()
        };
        assert_ne!(a, d);
    }

    #[test]
    fn a_put_on_a_table_of_unknown_schema_is_keyed_by_its_whole_item() {
        let put = json!({"TableName": "other", "Item": {"pk": {"S": "a"}, "v": {"N": "1"}}});
        let Writes::Single(k) = writes("PutItem", &put, &schemas()) else {
            panic!()
        };
        assert_eq!(k.key, r#"pk={"S":"a"};v={"N":"1"}"#);
    }

    #[test]
    fn reads_batches_and_malformed_bodies_write_nothing() {
        let s = schemas();
        let get = json!({"TableName": "counters", "Key": {"key": {"S": "t1"}}});
        assert_eq!(writes("GetItem", &get, &s), Writes::None);
        assert_eq!(writes("BatchWriteItem", &json!({}), &s), Writes::None);
        assert_eq!(writes("UpdateItem", &json!({"Key": {}}), &s), Writes::None);
        assert_eq!(
            writes("TransactWriteItems", &json!({"TransactItems": []}), &s),
            Writes::None
        );
        assert_eq!(
            writes(
                "TransactWriteItems",
                &json!({"TransactItems": [{"Bogus": {}}]}),
                &s
            ),
            Writes::None
        );
    }

    #[test]
    fn key_schema_is_read_from_describe_table() {
        let d = json!({"Table": {"TableName": "s", "KeySchema": [
            {"AttributeName": "tenantId", "KeyType": "HASH"},
            {"AttributeName": "sessionId", "KeyType": "RANGE"}]}});
        assert_eq!(
            key_schema(&d),
            Some(vec!["tenantId".to_string(), "sessionId".to_string()])
        );
        assert_eq!(key_schema(&json!({"__type": "x"})), None);
    }
}
