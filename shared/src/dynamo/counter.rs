//! The call counter tests and benchmarks use to assert round trips and the write and read units
//! each path costs. The [`super::meter::Meter`] interceptor feeds it.

use std::collections::BTreeMap;
use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::{Arc, Mutex};

use serde_json::Value;

use crate::capacity::{self, Units};

/// Calls and capacity units of one operation.
#[derive(Debug, Clone, Copy, PartialEq, Default)]
pub struct Usage {
    pub calls: u64,
    pub write_units: f64,
    pub read_units: f64,
}

/// Counts every HTTP request an SDK client sends (retries included: each is a round trip), in total
/// and by operation name, and the write and read units each costs. Clones share the counts.
///
/// Units: the client asks DynamoDB for `ReturnConsumedCapacity=TOTAL` (only clients built with a
/// counter, i.e. tests and benchmarks; production clients send nothing extra). A successful
/// single-item or batch call is charged what DynamoDB reports; transactions, and writes refused on
/// their condition (which DynamoDB bills but answers without a figure), are charged by
/// [`crate::capacity`]'s documented rules, because DynamoDB Local under-reports transactions.
/// Throttled and otherwise failed calls are not billed by DynamoDB and count 0 units.
#[derive(Debug, Clone, Default)]
pub struct CallCounter {
    total: Arc<AtomicU64>,
    by_operation: Arc<Mutex<BTreeMap<String, Usage>>>,
}

/// Operations DynamoDB reports consumed capacity for (when asked).
pub(super) const CAPACITY_OPERATIONS: [&str; 10] = [
    "GetItem",
    "PutItem",
    "UpdateItem",
    "DeleteItem",
    "Query",
    "Scan",
    "BatchGetItem",
    "BatchWriteItem",
    "TransactWriteItems",
    "TransactGetItems",
];

/// The units one answered call costs (see [`CallCounter`]).
pub(super) fn units_of(operation: &str, request: &Value, status: u16, response: &Value) -> Units {
    let ok = (200..300).contains(&status);
    let error = response["__type"].as_str().unwrap_or("");
    match operation {
        "TransactWriteItems" if ok || error.ends_with("TransactionCanceledException") => {
            capacity::transact_write(request)
        }
        "TransactGetItems" if ok || error.ends_with("TransactionCanceledException") => {
            capacity::transact_get(request, ok.then_some(response))
        }
        "PutItem" | "UpdateItem" | "DeleteItem"
            if error.ends_with("ConditionalCheckFailedException") =>
        {
            capacity::failed_conditional_write()
        }
        _ if ok => capacity::reported(operation, response).unwrap_or(Units::ZERO),
        _ => Units::ZERO,
    }
}

impl CallCounter {
    pub fn new() -> Self {
        Self::default()
    }

    pub fn total(&self) -> u64 {
        self.total.load(Ordering::SeqCst)
    }

    /// Counts per operation, e.g. `{"UpdateItem": 1}`.
    pub fn by_operation(&self) -> BTreeMap<String, u64> {
        self.usage()
            .into_iter()
            .map(|(op, u)| (op, u.calls))
            .collect()
    }

    /// Calls and units per operation.
    pub fn usage(&self) -> BTreeMap<String, Usage> {
        self.by_operation
            .lock()
            .map(|m| m.clone())
            .unwrap_or_default()
    }

    /// Write and read units of every call so far.
    pub fn units(&self) -> Units {
        self.usage().values().fold(Units::ZERO, |acc, u| {
            acc + Units {
                write: u.write_units,
                read: u.read_units,
            }
        })
    }

    /// Runs `f` and returns its output with the units it cost. Only meaningful when nothing else
    /// uses the same client concurrently.
    pub async fn measure_units<F: std::future::Future>(&self, f: F) -> (F::Output, Units) {
        let before = self.units();
        let out = f.await;
        let after = self.units();
        (
            out,
            Units {
                write: after.write - before.write,
                read: after.read - before.read,
            },
        )
    }

    pub fn reset(&self) {
        self.total.store(0, Ordering::SeqCst);
        if let Ok(mut m) = self.by_operation.lock() {
            m.clear();
        }
    }

    /// Runs `f` and returns its output with the number of calls it made. Only meaningful when nothing
    /// else uses the same client concurrently.
    pub async fn measure<F: std::future::Future>(&self, f: F) -> (F::Output, u64) {
        let before = self.total();
        let out = f.await;
        (out, self.total() - before)
    }

    pub(super) fn record(&self, operation: &str) {
        self.total.fetch_add(1, Ordering::SeqCst);
        if let Ok(mut m) = self.by_operation.lock() {
            m.entry(operation.to_string()).or_default().calls += 1;
        }
    }

    pub(super) fn charge(&self, operation: &str, units: Units) {
        if let Ok(mut m) = self.by_operation.lock() {
            let u = m.entry(operation.to_string()).or_default();
            u.write_units += units.write;
            u.read_units += units.read;
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use serde_json::json;

    #[test]
    fn units_charge_reported_figures_and_the_calculator_where_dynamodb_local_is_wrong() {
        let update = json!({"TableName": "t", "Key": {"pk": {"S": "a"}}});
        let ok = json!({"ConsumedCapacity": {"TableName": "t", "CapacityUnits": 1.0}});
        assert_eq!(units_of("UpdateItem", &update, 200, &ok), Units::write(1.0));
        // Refused on its condition: billed though DynamoDB reports nothing.
        let ccf =
            json!({"__type": "com.amazonaws.dynamodb.v20120810#ConditionalCheckFailedException"});
        assert_eq!(
            units_of("UpdateItem", &update, 400, &ccf),
            Units::write(1.0)
        );
        // Throttled: not billed.
        let thr = json!({"__type": "com.amazonaws.dynamodb.v20120810#ThrottlingException"});
        assert_eq!(units_of("UpdateItem", &update, 400, &thr), Units::ZERO);
        // A 3-item transaction: 6 units whether DynamoDB Local reports 2.0 or it is cancelled.
        let txn =
            json!({"TransactItems": [{"Update": {}}, {"Update": {}}, {"ConditionCheck": {}}]});
        let local = json!({"ConsumedCapacity": [{"TableName": "t", "CapacityUnits": 2.0}]});
        assert_eq!(
            units_of("TransactWriteItems", &txn, 200, &local),
            Units::write(6.0)
        );
        let cancelled =
            json!({"__type": "com.amazonaws.dynamodb.v20120810#TransactionCanceledException"});
        assert_eq!(
            units_of("TransactWriteItems", &txn, 400, &cancelled),
            Units::write(6.0)
        );
        let get = json!({"ConsumedCapacity": {"TableName": "t", "CapacityUnits": 0.5}});
        assert_eq!(units_of("GetItem", &update, 200, &get), Units::read(0.5));
    }
}
