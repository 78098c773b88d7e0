//! DynamoDB clients, and the call counter that tests and benchmarks use to assert round trips.

use std::collections::BTreeMap;
use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::{Arc, Mutex};
use std::time::Duration;

use aws_credential_types::Credentials;
use aws_sdk_dynamodb::config::timeout::TimeoutConfig;
use aws_sdk_dynamodb::config::{BehaviorVersion, Region};
use aws_sdk_dynamodb::Client;
use aws_smithy_runtime_api::box_error::BoxError;
use aws_smithy_runtime_api::client::interceptors::context::BeforeTransmitInterceptorContextRef;
use aws_smithy_runtime_api::client::interceptors::Intercept;
use aws_smithy_runtime_api::client::orchestrator::Metadata;
use aws_smithy_runtime_api::client::runtime_components::RuntimeComponents;
use aws_smithy_types::config_bag::ConfigBag;

/// Counts every HTTP request an SDK client sends (retries included: each is a round trip), in total
/// and by operation name. Clones share the counts.
#[derive(Debug, Clone, Default)]
pub struct CallCounter {
    total: Arc<AtomicU64>,
    by_operation: Arc<Mutex<BTreeMap<String, u64>>>,
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
        self.by_operation
            .lock()
            .map(|m| m.clone())
            .unwrap_or_default()
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
            *m.entry(operation.to_string()).or_default() += 1;
        }
    }
}

impl Intercept for CallCounter {
    fn name(&self) -> &'static str {
        "TurnstileCallCounter"
    }

    fn read_before_transmit(
        &self,
        _context: &BeforeTransmitInterceptorContextRef<'_>,
        _runtime_components: &RuntimeComponents,
        cfg: &mut ConfigBag,
    ) -> Result<(), BoxError> {
        let op = cfg
            .load::<Metadata>()
            .map(|m| m.name().to_string())
            .unwrap_or_else(|| "unknown".into());
        self.record(&op);
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
/// optionally counting its calls.
pub fn client(sdk: &aws_config::SdkConfig, counter: Option<&CallCounter>) -> Client {
    let mut b = aws_sdk_dynamodb::config::Builder::from(sdk)
        .timeout_config(timeouts(env_timeout(DEFAULT_ATTEMPT_TIMEOUT)));
    if let Some(c) = counter {
        b = b.interceptor(c.clone());
    }
    Client::from_conf(b.build())
}

/// A client for DynamoDB Local (or any endpoint) with static dummy credentials, for tests, the local
/// stack and benchmarks. DynamoDB Local accepts any non-empty key. Its timeouts: [`TIMEOUT_VAR`],
/// else [`LOCAL_ATTEMPT_TIMEOUT`] per attempt.
pub fn local_client(endpoint: &str, counter: Option<&CallCounter>) -> Client {
    let mut b = aws_sdk_dynamodb::config::Builder::new()
        .behavior_version(BehaviorVersion::latest())
        .region(Region::new("us-east-1"))
        .credentials_provider(Credentials::new(
            "local",
            "local",
            None,
            None,
            "turnstile-local",
        ))
        .endpoint_url(endpoint)
        .timeout_config(timeouts(env_timeout(LOCAL_ATTEMPT_TIMEOUT)));
    if let Some(c) = counter {
        b = b.interceptor(c.clone());
    }
    Client::from_conf(b.build())
}
