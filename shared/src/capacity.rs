//! Write and read units a DynamoDB request costs, from DynamoDB's documented billing rules.
//!
//! Why a calculator and not only the `ConsumedCapacity` DynamoDB returns: DynamoDB Local under-reports
//! transactions (a 5-item `TransactWriteItems` of small items reports 2.0 where DynamoDB bills 10), and
//! a failed conditional write returns an error without any `ConsumedCapacity` although DynamoDB still
//! bills it. The call counter ([`crate::dynamo::CallCounter`]) uses the reported figure where it is
//! trustworthy (single-item and batch calls that succeed) and this calculator everywhere else.
//!
//! Rules (Amazon DynamoDB Developer Guide, "Read/write capacity mode" and "Capacity management for
//! transactions", on-demand and provisioned alike):
//! - a write is 1 unit per started KB (1,024 bytes) of the item, at least 1; a transactional write is 2
//!   per started KB; a failed conditional write is billed like a write (size of the existing item,
//!   at least 1);
//! - a read is 1 unit per started 4 KB when strongly consistent, half that when eventually consistent,
//!   and 2 per started 4 KB when transactional;
//! - item size is the sum of attribute name lengths plus value sizes (strings: UTF-8 bytes; numbers:
//!   1 byte per two significant digits plus 1; binary: bytes; booleans and null: 1; sets: the sum of
//!   their elements; lists and maps: 3 bytes plus their elements plus 1 byte per element).
//!
//! What a request alone can't tell: the size of an item an `Update`, `Delete` or `ConditionCheck`
//! touches. Those are counted as one unit-sized item (every Turnstile item is well under 1 KB), and
//! a cancelled transaction is counted as if it had committed — both stated as assumptions wherever
//! the figures are published.

use serde_json::Value;

/// Units of one request.
#[derive(Debug, Clone, Copy, PartialEq, Default)]
pub struct Units {
    pub write: f64,
    pub read: f64,
}

impl Units {
    pub const ZERO: Units = Units {
        write: 0.0,
        read: 0.0,
    };

    pub fn write(write: f64) -> Units {
        Units { write, read: 0.0 }
    }

    pub fn read(read: f64) -> Units {
        Units { write: 0.0, read }
    }
}

impl std::ops::Add for Units {
    type Output = Units;
    fn add(self, o: Units) -> Units {
        Units {
            write: self.write + o.write,
            read: self.read + o.read,
        }
    }
}

/// How a read is billed.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Consistency {
    Eventual,
    Strong,
    Transactional,
}

/// Size in bytes of one attribute value in DynamoDB JSON (`{"S": "..."}`, `{"N": "..."}`, ...).
pub fn value_size(v: &Value) -> u64 {
    let Some((kind, inner)) = v.as_object().and_then(|o| o.iter().next()) else {
        return 0;
    };
    let strings = |x: &Value| -> u64 {
        x.as_array()
            .map(|a| {
                a.iter()
                    .filter_map(Value::as_str)
                    .map(|s| s.len() as u64)
                    .sum()
            })
            .unwrap_or(0)
    };
    match kind.as_str() {
        "S" => inner.as_str().map_or(0, |s| s.len() as u64),
        // Binary values travel base64-encoded; the billed size is the decoded length.
        "B" => inner.as_str().map_or(0, base64_decoded_len),
        "N" => inner.as_str().map_or(0, number_size),
        "BOOL" | "NULL" => 1,
        "SS" => strings(inner),
        "BS" => inner
            .as_array()
            .map(|a| {
                a.iter()
                    .filter_map(Value::as_str)
                    .map(base64_decoded_len)
                    .sum()
            })
            .unwrap_or(0),
        "NS" => inner
            .as_array()
            .map(|a| a.iter().filter_map(Value::as_str).map(number_size).sum())
            .unwrap_or(0),
        "L" => inner
            .as_array()
            .map_or(3, |a| 3 + a.iter().map(|e| value_size(e) + 1).sum::<u64>()),
        "M" => inner.as_object().map_or(3, |m| {
            3 + m
                .iter()
                .map(|(k, e)| k.len() as u64 + value_size(e) + 1)
                .sum::<u64>()
        }),
        _ => 0,
    }
}

/// Size of a number: 1 byte per two significant digits (leading and trailing zeros trimmed), plus 1.
fn number_size(n: &str) -> u64 {
    let digits: String = n
        .chars()
        .take_while(|c| *c != 'e' && *c != 'E')
        .filter(char::is_ascii_digit)
        .collect();
    let significant = digits.trim_start_matches('0').trim_end_matches('0').len() as u64;
    significant.max(1).div_ceil(2) + 1
}

fn base64_decoded_len(s: &str) -> u64 {
    let padding = s.bytes().rev().take_while(|b| *b == b'=').count() as u64;
    (s.len() as u64 / 4) * 3 - padding.min(2)
}

/// Size in bytes of an item in DynamoDB JSON (`{"name": {"S": "..."}, ...}`).
pub fn item_size(item: &Value) -> u64 {
    item.as_object().map_or(0, |m| {
        m.iter()
            .map(|(name, v)| name.len() as u64 + value_size(v))
            .sum()
    })
}

/// Write units of one item of `size` bytes (at least 1).
pub fn write_units(size: u64) -> f64 {
    size.div_ceil(1024).max(1) as f64
}

/// Read units of one item of `size` bytes under `consistency`.
pub fn read_units(size: u64, consistency: Consistency) -> f64 {
    let blocks = size.div_ceil(4096).max(1) as f64;
    match consistency {
        Consistency::Eventual => blocks / 2.0,
        Consistency::Strong => blocks,
        Consistency::Transactional => 2.0 * blocks,
    }
}

/// Units of a `TransactWriteItems` request body: 2 per started KB of each item (`Put` items sized from
/// the request; `Update`, `Delete` and `ConditionCheck` items counted as under 1 KB).
pub fn transact_write(request: &Value) -> Units {
    let items = request["TransactItems"].as_array();
    let write = items.map_or(0.0, |items| {
        items
            .iter()
            .map(|it| match it.get("Put") {
                Some(put) => 2.0 * write_units(item_size(&put["Item"])),
                None => 2.0,
            })
            .sum()
    });
    Units::write(write)
}

/// Units of a `TransactGetItems`: 2 per started 4 KB of each item returned (`response`), at least 2
/// per requested item.
pub fn transact_get(request: &Value, response: Option<&Value>) -> Units {
    let requested = request["TransactItems"].as_array().map_or(0, Vec::len);
    let returned: Vec<u64> = response
        .and_then(|r| r["Responses"].as_array())
        .map(|rs| rs.iter().map(|r| item_size(&r["Item"])).collect())
        .unwrap_or_default();
    let read = (0..requested)
        .map(|i| {
            read_units(
                returned.get(i).copied().unwrap_or(0),
                Consistency::Transactional,
            )
        })
        .sum();
    Units::read(read)
}

/// Units of a single-item write that DynamoDB refused on its condition: billed as a write of the
/// existing item (at least 1 unit; the existing item's size is not in the answer, see module docs).
pub fn failed_conditional_write() -> Units {
    Units::write(1.0)
}

/// The units a response's `ConsumedCapacity` reports (an object for single-item calls, an array for
/// batches), or `None` when it carries none. Where DynamoDB gives only `CapacityUnits` (no read/write
/// split), they are write units for a write `operation` and read units otherwise.
pub fn reported(operation: &str, response: &Value) -> Option<Units> {
    let one = |c: &Value| -> Units {
        let split = (
            c["WriteCapacityUnits"].as_f64(),
            c["ReadCapacityUnits"].as_f64(),
        );
        match split {
            (None, None) => {
                let total = c["CapacityUnits"].as_f64().unwrap_or(0.0);
                if is_write(operation) {
                    Units::write(total)
                } else {
                    Units::read(total)
                }
            }
            (w, r) => Units {
                write: w.unwrap_or(0.0),
                read: r.unwrap_or(0.0),
            },
        }
    };
    match &response["ConsumedCapacity"] {
        c @ Value::Object(_) => Some(one(c)),
        Value::Array(a) => Some(a.iter().map(one).fold(Units::ZERO, |x, y| x + y)),
        _ => None,
    }
}

/// Whether an operation writes.
pub fn is_write(operation: &str) -> bool {
    matches!(
        operation,
        "PutItem" | "UpdateItem" | "DeleteItem" | "BatchWriteItem" | "TransactWriteItems"
    )
}

#[cfg(test)]
mod tests {
    use super::*;
    use serde_json::json;

    #[test]
    fn item_sizes_follow_the_documented_rules() {
        // name "a" (1) + "abc" (3)
        assert_eq!(item_size(&json!({"a": {"S": "abc"}})), 4);
        // 123 has 3 significant digits: 2 + 1; 1000 trims to "1": 1 + 1; 0 counts as 1 digit.
        assert_eq!(value_size(&json!({"N": "123"})), 3);
        assert_eq!(value_size(&json!({"N": "1000"})), 2);
        assert_eq!(value_size(&json!({"N": "0"})), 2);
        assert_eq!(value_size(&json!({"N": "-12.50"})), 3);
        assert_eq!(value_size(&json!({"BOOL": true})), 1);
        assert_eq!(value_size(&json!({"NULL": true})), 1);
        assert_eq!(value_size(&json!({"SS": ["ab", "cde"]})), 5);
        // "aGVsbG8=" is "hello"
        assert_eq!(value_size(&json!({"B": "aGVsbG8="})), 5);
        // list: 3 + (1 + 1) + (2 + 1)
        assert_eq!(value_size(&json!({"L": [{"BOOL": true}, {"S": "xy"}]})), 8);
        // map: 3 + ("k" 1 + "v" 1 + 1)
        assert_eq!(value_size(&json!({"M": {"k": {"S": "v"}}})), 6);
        // UTF-8 bytes, not characters
        assert_eq!(value_size(&json!({"S": "é"})), 2);
    }

    #[test]
    fn writes_are_one_unit_per_started_kilobyte_and_reads_per_four() {
        assert_eq!(write_units(0), 1.0);
        assert_eq!(write_units(1024), 1.0);
        assert_eq!(write_units(1025), 2.0);
        assert_eq!(read_units(100, Consistency::Eventual), 0.5);
        assert_eq!(read_units(100, Consistency::Strong), 1.0);
        assert_eq!(read_units(100, Consistency::Transactional), 2.0);
        assert_eq!(read_units(4097, Consistency::Strong), 2.0);
        assert_eq!(read_units(8192, Consistency::Eventual), 1.0);
    }

    #[test]
    fn a_transaction_costs_two_units_per_item_whatever_dynamodb_local_reports() {
        // The measurement: 5 small items, DynamoDB Local said 2.0, DynamoDB bills 10.
        let key = json!({"pk": {"S": "acme"}});
        let request = json!({"TransactItems": [
            {"Update": {"TableName": "t", "Key": key, "UpdateExpression": "ADD c :one"}},
            {"Update": {"TableName": "t", "Key": key, "UpdateExpression": "ADD c :one"}},
            {"ConditionCheck": {"TableName": "t", "Key": key, "ConditionExpression": "x"}},
            {"Delete": {"TableName": "t", "Key": key}},
            {"Put": {"TableName": "t", "Item": {"pk": {"S": "acme:conn:1"}}}}
        ]});
        assert_eq!(transact_write(&request), Units::write(10.0));
        // A 1.5 KB put inside a transaction is 2 KB-units, doubled.
        let big = "x".repeat(1500);
        let request =
            json!({"TransactItems": [{"Put": {"TableName": "t", "Item": {"pk": {"S": big}}}}]});
        assert_eq!(transact_write(&request), Units::write(4.0));
    }

    #[test]
    fn transactional_reads_are_two_units_per_started_four_kilobytes() {
        let request = json!({"TransactItems": [{"Get": {}}, {"Get": {}}]});
        let response = json!({"Responses": [{"Item": {"a": {"S": "x".repeat(5000)}}}, {}]});
        assert_eq!(
            transact_get(&request, Some(&response)),
            Units::read(4.0 + 2.0)
        );
    }

    #[test]
    fn reported_capacity_is_read_from_objects_and_arrays() {
        let single = json!({"ConsumedCapacity": {"TableName": "t", "CapacityUnits": 1.0, "WriteCapacityUnits": 1.0}});
        assert_eq!(reported("UpdateItem", &single), Some(Units::write(1.0)));
        let total_only = json!({"ConsumedCapacity": {"TableName": "t", "CapacityUnits": 0.5}});
        assert_eq!(reported("GetItem", &total_only), Some(Units::read(0.5)));
        assert_eq!(reported("PutItem", &total_only), Some(Units::write(0.5)));
        let batch = json!({"ConsumedCapacity": [
            {"TableName": "a", "CapacityUnits": 0.5, "ReadCapacityUnits": 0.5},
            {"TableName": "b", "CapacityUnits": 1.0, "ReadCapacityUnits": 1.0}
        ]});
        assert_eq!(reported("BatchGetItem", &batch), Some(Units::read(1.5)));
        assert_eq!(reported("GetItem", &json!({})), None);
        assert!(is_write("UpdateItem") && !is_write("GetItem"));
    }
}
