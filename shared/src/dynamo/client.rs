//! DynamoDB clients, the dummy-credential SDK config for local endpoints, and the call counter that
//! tests and benchmarks use to assert round trips and the write and read units each path costs.

use std::collections::{BTreeMap, HashMap};
use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::{Arc, Mutex};
use std::time::Duration;

use aws_credential_types::provider::SharedCredentialsProvider;
use aws_credential_types::Credentials;
use aws_sdk_dynamodb::config::timeout::TimeoutConfig;
use aws_sdk_dynamodb::config::{BehaviorVersion, Region};
use aws_sdk_dynamodb::types::KeysAndAttributes;
use aws_sdk_dynamodb::Client;
use aws_smithy_runtime_api::box_error::BoxError;
use aws_smithy_runtime_api::client::interceptors::context::{
    AfterDeserializationInterceptorContextRef, BeforeTransmitInterceptorContextMut,
    BeforeTransmitInterceptorContextRef,
};
use aws_smithy_runtime_api::client::interceptors::Intercept;
use aws_smithy_runtime_api::client::orchestrator::Metadata;
use aws_smithy_runtime_api::client::runtime_components::RuntimeComponents;
use aws_smithy_types::body::SdkBody;
use aws_smithy_types::config_bag::{ConfigBag, Storable, StoreReplace};
use serde_json::Value;

use crate::capacity::{self, Units};
use crate::dynamo::item::Item;
use crate::error::{Error, Result};
use crate::telemetry::dynamo::DynamoMeter;

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

/// The request of the attempt in flight, kept from signing to deserialisation.
#[derive(Debug, Clone)]
struct MeteredRequest {
    operation: String,
    body: Value,
}

impl Storable for MeteredRequest {
    type Storer = StoreReplace<Self>;
}

const CAPACITY_OPERATIONS: [&str; 10] = [
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

fn operation_name(cfg: &ConfigBag) -> String {
    cfg.load::<Metadata>()
        .map(|m| m.name().to_string())
        .unwrap_or_else(|| "unknown".into())
}

/// The units one answered call costs (see [`CallCounter`]).
fn units_of(operation: &str, request: &Value, status: u16, response: &Value) -> Units {
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

    fn record(&self, operation: &str) {
        self.total.fetch_add(1, Ordering::SeqCst);
        if let Ok(mut m) = self.by_operation.lock() {
            m.entry(operation.to_string()).or_default().calls += 1;
        }
    }

    fn charge(&self, operation: &str, units: Units) {
        if let Ok(mut m) = self.by_operation.lock() {
            let u = m.entry(operation.to_string()).or_default();
            u.write_units += units.write;
            u.read_units += units.read;
        }
    }
}

impl Intercept for CallCounter {
    fn name(&self) -> &'static str {
        "TurnstileCallCounter"
    }

    /// Asks for `ReturnConsumedCapacity=TOTAL` and keeps the request for [`units_of`].
    fn modify_before_signing(
        &self,
        context: &mut BeforeTransmitInterceptorContextMut<'_>,
        _runtime_components: &RuntimeComponents,
        cfg: &mut ConfigBag,
    ) -> Result<(), BoxError> {
        let operation = operation_name(cfg);
        if !CAPACITY_OPERATIONS.contains(&operation.as_str()) {
            return Ok(());
        }
        let request = context.request_mut();
        let Some(mut body) = request
            .body()
            .bytes()
            .and_then(|b| serde_json::from_slice::<Value>(b).ok())
        else {
            return Ok(());
        };
        if let Some(o) = body.as_object_mut() {
            if !o.contains_key("ReturnConsumedCapacity") {
                o.insert("ReturnConsumedCapacity".into(), Value::from("TOTAL"));
                let bytes = serde_json::to_vec(&body)?;
                request
                    .headers_mut()
                    .insert("content-length", bytes.len().to_string());
                *request.body_mut() = SdkBody::from(bytes);
            }
        }
        cfg.interceptor_state()
            .store_put(MeteredRequest { operation, body });
        Ok(())
    }

    fn read_before_transmit(
        &self,
        _context: &BeforeTransmitInterceptorContextRef<'_>,
        _runtime_components: &RuntimeComponents,
        cfg: &mut ConfigBag,
    ) -> Result<(), BoxError> {
        self.record(&operation_name(cfg));
        Ok(())
    }

    fn read_after_deserialization(
        &self,
        context: &AfterDeserializationInterceptorContextRef<'_>,
        _runtime_components: &RuntimeComponents,
        cfg: &mut ConfigBag,
    ) -> Result<(), BoxError> {
        let Some(req) = cfg.load::<MeteredRequest>() else {
            return Ok(());
        };
        let response = context.response();
        let body = response
            .body()
            .bytes()
            .and_then(|b| serde_json::from_slice::<Value>(b).ok())
            .unwrap_or(Value::Null);
        let units = units_of(&req.operation, &req.body, response.status().as_u16(), &body);
        self.charge(&req.operation, units);
        Ok(())
    }
}

/// Env var: how long one DynamoDB request attempt may take, in milliseconds (default 2000).
pub const TIMEOUT_VAR: &str = "TURNSTILE_DYNAMODB_TIMEOUT_MS";
/// Per-attempt timeout when [`TIMEOUT_VAR`] is unset or not a positive number.
pub const DEFAULT_ATTEMPT_TIMEOUT: Duration = Duration::from_millis(2000);
/// The same for [`local_client`]: DynamoDB Local on a busy machine (a JVM, tables created by the
/// hundred in a test run) can take seconds for one call, so it gets more, still bounded.
pub const LOCAL_ATTEMPT_TIMEOUT: Duration = Duration::from_millis(10_000);
/// Attempts of the SDK's standard retry mode (its default), used to bound a whole call.
pub const SDK_ATTEMPTS: u32 = 3;

/// Timeouts for every client Turnstile builds, so no call waits unboundedly on a stalled or slow
/// DynamoDB: each attempt (and its TCP connect) gets `attempt`; the whole call, the SDK's retries
/// and their backoff included, gets [`SDK_ATTEMPTS`] x `attempt` (6 s by default, inside the
/// functions' 10 s Lambda timeout). A call that runs out answers a timeout error, which handlers
/// turn into a 5xx or a retry.
pub fn timeouts(attempt: Duration) -> TimeoutConfig {
    TimeoutConfig::builder()
        .connect_timeout(attempt)
        .operation_attempt_timeout(attempt)
        .operation_timeout(attempt * SDK_ATTEMPTS)
        .build()
}

/// The per-attempt timeout from [`TIMEOUT_VAR`], else `default`.
pub fn env_timeout(default: Duration) -> Duration {
    std::env::var(TIMEOUT_VAR)
        .ok()
        .and_then(|v| v.trim().parse::<u64>().ok())
        .filter(|ms| *ms > 0)
        .map(Duration::from_millis)
        .unwrap_or(default)
}

/// A DynamoDB client from the shared SDK config (credentials, region, `AWS_ENDPOINT_URL_DYNAMODB`),
/// metered ([`DynamoMeter`]), optionally counting its calls.
pub fn client(sdk: &aws_config::SdkConfig, counter: Option<&CallCounter>) -> Client {
    metered(sdk, DEFAULT_ATTEMPT_TIMEOUT, counter)
}

/// A client from `sdk` with [`timeouts`] ([`TIMEOUT_VAR`], else `attempt`), the meter and `counter`.
fn metered(
    sdk: &aws_config::SdkConfig,
    attempt: Duration,
    counter: Option<&CallCounter>,
) -> Client {
    let mut b = aws_sdk_dynamodb::config::Builder::from(sdk)
        .timeout_config(timeouts(env_timeout(attempt)))
        .interceptor(DynamoMeter);
    if let Some(c) = counter {
        b = b.interceptor(c.clone());
    }
    Client::from_conf(b.build())
}

/// The SDK config for a local endpoint (DynamoDB Local, the local Management API, DynamoDB Streams
/// on DynamoDB Local): static dummy credentials (local endpoints accept any non-empty key), region
/// `us-east-1`, `endpoint` for every service. Built here once; each service's config takes it with
/// `Builder::from(&sdk)`.
pub fn local_sdk_config(endpoint: &str) -> aws_config::SdkConfig {
    aws_config::SdkConfig::builder()
        .behavior_version(BehaviorVersion::latest())
        .region(Region::new("us-east-1"))
        .credentials_provider(SharedCredentialsProvider::new(Credentials::new(
            "local",
            "local",
            None,
            None,
            "turnstile-local",
        )))
        .endpoint_url(endpoint)
        .build()
}

/// A client for DynamoDB Local (or any endpoint) with static dummy credentials
/// ([`local_sdk_config`]), for tests, the local stack and benchmarks. Its timeouts: [`TIMEOUT_VAR`],
/// else [`LOCAL_ATTEMPT_TIMEOUT`] per attempt.
pub fn local_client(endpoint: &str, counter: Option<&CallCounter>) -> Client {
    metered(&local_sdk_config(endpoint), LOCAL_ATTEMPT_TIMEOUT, counter)
}

/// Rows of a `BatchGetItem` by table, and the keys still unprocessed after it. Keys DynamoDB leaves
/// unprocessed (throttling) are asked again, at most twice: **1-3** calls. Callers decide what an
/// unread key means (the authorizer's pre-check skips that check; a shard read leaves it out).
pub async fn batch_get(
    client: &Client,
    mut request: HashMap<String, KeysAndAttributes>,
) -> Result<(
    HashMap<String, Vec<Item>>,
    HashMap<String, KeysAndAttributes>,
)> {
    let mut rows: HashMap<String, Vec<Item>> = HashMap::new();
    for _ in 0..3 {
        let out = client
            .batch_get_item()
            .set_request_items(Some(request))
            .send()
            .await
            .map_err(|e| Error::dynamo("BatchGetItem", e))?;
        for (table, items) in out.responses().cloned().unwrap_or_default() {
            rows.entry(table).or_default().extend(items);
        }
        request = out.unprocessed_keys().cloned().unwrap_or_default();
        request.retain(|_, ka| !ka.keys().is_empty());
        if request.is_empty() {
            break;
        }
    }
    Ok((rows, request))
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
