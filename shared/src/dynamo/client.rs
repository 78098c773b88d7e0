//! DynamoDB clients (timeouts, the [`Meter`]), the dummy-credential SDK config for local endpoints,
//! `BatchGetItem` with its unprocessed-keys retry, and the plain single-item calls every store
//! makes alike (a strongly consistent `GetItem`, an unconditional `PutItem`).

use std::collections::HashMap;
use std::time::Duration;

use aws_credential_types::provider::SharedCredentialsProvider;
use aws_credential_types::Credentials;
use aws_sdk_dynamodb::config::timeout::TimeoutConfig;
use aws_sdk_dynamodb::config::{BehaviorVersion, Region, StalledStreamProtectionConfig};
use aws_sdk_dynamodb::types::KeysAndAttributes;
use aws_sdk_dynamodb::Client;

use super::counter::CallCounter;
use super::meter::Meter;
use crate::config::Vars;
use crate::dynamo::item::Item;
use crate::error::{Error, Result};

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
/// metered ([`Meter`]), optionally counting its calls.
pub fn client(sdk: &aws_config::SdkConfig, counter: Option<&CallCounter>) -> Client {
    metered(sdk, DEFAULT_ATTEMPT_TIMEOUT, counter)
}

/// A client from `sdk` with [`timeouts`] ([`TIMEOUT_VAR`], else `attempt`), the meter and `counter`.
/// The SDK's stalled-stream protection is off: it watches the throughput of streamed bodies, while
/// DynamoDB's are a few hundred bytes whose every attempt the timeouts already bound, and it costs
/// ~7k instructions per call (2 % of an `UpdateItem`; decision 0806).
fn metered(
    sdk: &aws_config::SdkConfig,
    attempt: Duration,
    counter: Option<&CallCounter>,
) -> Client {
    let b = aws_sdk_dynamodb::config::Builder::from(sdk)
        .timeout_config(timeouts(env_timeout(attempt)))
        .stalled_stream_protection(StalledStreamProtectionConfig::disabled())
        .interceptor(Meter {
            counter: counter.cloned(),
        });
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

/// Whether a client of `endpoint` signs with [`local_sdk_config`]'s dummy credentials: the endpoint
/// is a loopback address (DynamoDB Local, the local stack) and no AWS credentials are configured,
/// so local runs need no AWS account.
pub fn wants_local_credentials(endpoint: &str, vars: &Vars) -> bool {
    is_loopback(endpoint) && vars.get("AWS_ACCESS_KEY_ID").is_none()
}

/// True for `http://127.0.0.1:8000`, `http://localhost:8000`, `http://[::1]:8000` and the like.
pub fn is_loopback(url: &str) -> bool {
    let rest = url.split("://").nth(1).unwrap_or(url);
    let host = rest.split('/').next().unwrap_or("");
    let host = if let Some(h) = host.strip_prefix('[') {
        h.split(']').next().unwrap_or("")
    } else {
        host.rsplit_once(':').map(|(h, _)| h).unwrap_or(host)
    };
    host == "localhost" || host == "::1" || host.starts_with("127.")
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

/// The item at `key` in `table`, read strongly consistent: **1** `GetItem`.
pub async fn get_consistent(client: &Client, table: &str, key: Item) -> Result<Option<Item>> {
    let out = client
        .get_item()
        .table_name(table)
        .set_key(Some(key))
        .consistent_read(true)
        .send()
        .await
        .map_err(|e| Error::dynamo("GetItem", e))?;
    Ok(out.item)
}

/// Writes `item` whole into `table`, replacing any item with its key, on no condition: **1**
/// `PutItem`.
pub async fn put(client: &Client, table: &str, item: Item) -> Result<()> {
    client
        .put_item()
        .table_name(table)
        .set_item(Some(item))
        .send()
        .await
        .map_err(|e| Error::dynamo("PutItem", e))?;
    Ok(())
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn loopback_endpoints_are_recognised() {
        assert!(is_loopback("http://127.0.0.1:8000"));
        assert!(is_loopback("http://localhost:8000/"));
        assert!(is_loopback("http://[::1]:8000"));
        assert!(!is_loopback("https://dynamodb.eu-west-1.amazonaws.com"));
        assert!(!is_loopback("http://10.0.0.1:8000"));
    }

    #[test]
    fn clients_leave_stalled_stream_protection_to_the_timeouts() {
        let sdk = aws_config::SdkConfig::builder()
            .behavior_version(BehaviorVersion::latest())
            .build();
        for c in [client(&sdk, None), local_client("http://127.0.0.1:1", None)] {
            let conf = c.config();
            let stalled = conf.stalled_stream_protection().map(|s| s.is_enabled());
            assert_eq!(stalled, Some(false));
            let t = conf.timeout_config().expect("timeouts");
            assert!(t.operation_attempt_timeout().is_some() && t.operation_timeout().is_some());
        }
    }
}
