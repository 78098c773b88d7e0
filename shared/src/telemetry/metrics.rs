//! The metrics recorder: the `metrics` facade with `metrics_cloudwatch_embedded` behind it, one
//! per process, flushed once at the end of every invocation ([`Metrics::invocation`]) as CloudWatch
//! Embedded Metric Format lines on stdout, where Lambda's log agent turns them into metrics at no
//! API cost. Where the lines go, the namespace and the tenant dimension are set by env vars
//! (docs/operations.md). Without [`install`] every `metrics` macro is a no-op (tests, CLI, bench).

use std::future::Future;

use super::catalogue;
use super::recorder::install_recorder;
pub use super::recorder::{
    installed, tenant_dimension, Metrics, MetricsError, Output, Settings, TenantDimension,
    DEFAULT_NAMESPACE, DEFAULT_TENANT_CAP, FLUSH_EVERY_SAMPLES, NAMESPACE_VAR, OTHER_TENANT,
    OUTPUT_VAR, TENANT_CAP_VAR, TENANT_DIMENSION_VAR,
};
use crate::config::Vars;

/// Installs the process-wide recorder from env vars (see [`Settings::from_vars`]). Once per
/// process: a second call returns the first recorder.
pub fn install_from_vars(vars: &Vars) -> Result<&'static Metrics, MetricsError> {
    install(Settings::from_vars(vars)?)
}

/// Installs the process-wide recorder with `settings`; later calls return the first one. The
/// first to install a collector describes the catalogue's metrics (their units).
pub fn install(settings: Settings) -> Result<&'static Metrics, MetricsError> {
    let (m, fresh) = install_recorder(settings)?;
    if fresh {
        catalogue::describe();
    }
    Ok(m)
}

impl Metrics {
    /// Runs one invocation of `function`: counts a cold start on its first, counts the invocation
    /// by result, then flushes everything recorded (one EMF line per dimension set).
    pub async fn invocation<T, E, F>(&self, function: &'static str, fut: F) -> Result<T, E>
    where
        F: Future<Output = Result<T, E>>,
    {
        let cold = self
            .warm
            .lock()
            .map(|mut w| w.insert(function))
            .unwrap_or(false);
        if cold {
            catalogue::cold_start(function);
        }
        // Boxed: the handler's future is deep, and nesting it here would exceed the compiler's
        // layout recursion limit in the functions' `main`.
        let out = Box::pin(fut).await;
        catalogue::invocation(function, out.is_ok());
        if let Err(e) = self.flush() {
            tracing::warn!(error = %e, "writing metrics failed");
        }
        out
    }
}
