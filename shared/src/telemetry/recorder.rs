//! The recorder itself: the `metrics` facade with `metrics_cloudwatch_embedded` behind it, one per
//! process, its settings, the bounded tenant dimension and the flush. It knows no metric by name:
//! the catalogue records through it, and `super::metrics` installs it and describes the catalogue.

use std::collections::HashSet;
use std::io::Write;
use std::path::PathBuf;
use std::sync::atomic::{AtomicUsize, Ordering};
use std::sync::{Arc, Mutex, OnceLock};

use metrics_cloudwatch_embedded::{Builder, Collector};

use crate::config::{ConfigError, Vars};

/// Where EMF lines go: `stdout` (default), `off`, or `file:PATH` (appended).
pub const OUTPUT_VAR: &str = "TURNSTILE_METRICS";
/// CloudWatch namespace of every metric (default [`DEFAULT_NAMESPACE`]).
pub const NAMESPACE_VAR: &str = "TURNSTILE_METRICS_NAMESPACE";
pub const DEFAULT_NAMESPACE: &str = "Turnstile";
/// `true` adds `DecisionsByTenant` with a `Tenant` dimension (default `false`).
pub const TENANT_DIMENSION_VAR: &str = "TURNSTILE_METRICS_TENANT_DIMENSION";
/// Most distinct tenants named in that dimension per process; later ones are counted as
/// [`OTHER_TENANT`] (default [`DEFAULT_TENANT_CAP`]).
pub const TENANT_CAP_VAR: &str = "TURNSTILE_METRICS_TENANT_CAP";
pub const DEFAULT_TENANT_CAP: usize = 50;
/// The `Tenant` value of every tenant past the cap.
pub const OTHER_TENANT: &str = "other";

/// Where flushed lines are written.
#[derive(Debug, Clone)]
pub enum Output {
    Stdout,
    /// Appended to this file (the local stack, so its console stays readable).
    File(PathBuf),
    /// Kept in memory (tests parse it with [`Metrics::take`]).
    Memory(Arc<Mutex<Vec<u8>>>),
    /// No recorder is installed: every metric is a no-op.
    Off,
}

/// The metric settings, from env vars.
#[derive(Debug, Clone)]
pub struct Settings {
    pub namespace: String,
    pub output: Output,
    pub tenant_dimension: bool,
    pub tenant_cap: usize,
}

impl Settings {
    pub fn from_vars(vars: &Vars) -> Result<Settings, ConfigError> {
        let output = match vars.get(OUTPUT_VAR).as_deref().map(str::trim) {
            None | Some("") | Some("stdout") => Output::Stdout,
            Some("off") => Output::Off,
            Some(v) => match v.strip_prefix("file:") {
                Some(path) if !path.is_empty() => Output::File(PathBuf::from(path)),
                _ => {
                    return Err(ConfigError::Invalid {
                        var: OUTPUT_VAR.into(),
                        value: v.into(),
                        reason: "expected stdout, off or file:PATH".into(),
                    })
                }
            },
        };
        Ok(Settings {
            namespace: vars.string_or(NAMESPACE_VAR, DEFAULT_NAMESPACE),
            output,
            tenant_dimension: vars.bool_or(TENANT_DIMENSION_VAR, false)?,
            tenant_cap: vars
                .parse::<usize>(TENANT_CAP_VAR, "a whole number of tenants")?
                .unwrap_or(DEFAULT_TENANT_CAP),
        })
    }

    /// Defaults with another output.
    pub fn to(output: Output) -> Settings {
        Settings {
            namespace: DEFAULT_NAMESPACE.into(),
            output,
            tenant_dimension: false,
            tenant_cap: DEFAULT_TENANT_CAP,
        }
    }
}

#[derive(Debug, thiserror::Error)]
pub enum MetricsError {
    #[error(transparent)]
    Config(#[from] ConfigError),
    #[error("installing the metrics recorder: {0}")]
    Install(String),
}

/// The process's recorder and where it flushes.
pub struct Metrics {
    collector: Option<&'static Collector>,
    output: Output,
    /// Functions that have had their first invocation (one process may host several: the local stack).
    pub(super) warm: Mutex<HashSet<&'static str>>,
}

static INSTALLED: OnceLock<Metrics> = OnceLock::new();
/// Serialises [`install_recorder`]: the global recorder can be set only once.
static INSTALLING: Mutex<()> = Mutex::new(());
/// The bounded tenant dimension, when enabled.
static TENANTS: OnceLock<TenantDimension> = OnceLock::new();

/// The backend keeps at most 100 values of one histogram between flushes (an EMF document's limit)
/// and drops the rest; an invocation recording more (a TTL sweeper batch of 100 records, a
/// reconcile of many tenants) is flushed early, every this many samples of any histogram.
pub const FLUSH_EVERY_SAMPLES: usize = 90;
static SAMPLES: AtomicUsize = AtomicUsize::new(0);

/// Called after each histogram sample: flushes early before any histogram can overflow.
pub(super) fn sampled() {
    if SAMPLES.fetch_add(1, Ordering::Relaxed) + 1 >= FLUSH_EVERY_SAMPLES {
        if let Some(m) = installed() {
            if let Err(e) = m.flush() {
                tracing::warn!(error = %e, "writing metrics failed");
            }
        }
    }
}

/// Installs the process-wide recorder with `settings` (later calls return the first one), and
/// whether this call installed a collector (the metrics' descriptions are then due).
pub(super) fn install_recorder(
    settings: Settings,
) -> Result<(&'static Metrics, bool), MetricsError> {
    let _guard = INSTALLING.lock().unwrap_or_else(|p| p.into_inner());
    if let Some(m) = INSTALLED.get() {
        return Ok((m, false));
    }
    let collector = match settings.output {
        Output::Off => None,
        _ => Some(
            Builder::new()
                .cloudwatch_namespace(settings.namespace.clone())
                .init()
                .map_err(|e| MetricsError::Install(e.to_string()))?,
        ),
    };
    let fresh = collector.is_some();
    if settings.tenant_dimension {
        let _ = TENANTS.set(TenantDimension::new(settings.tenant_cap));
    }
    let m = INSTALLED.get_or_init(|| Metrics {
        collector,
        output: settings.output,
        warm: Mutex::new(HashSet::new()),
    });
    Ok((m, fresh))
}

/// The installed recorder, if any.
pub fn installed() -> Option<&'static Metrics> {
    INSTALLED.get()
}

/// The `Tenant` dimension value of `tenant`: itself while fewer than the cap have been named,
/// else [`OTHER_TENANT`]; `None` when the dimension is off.
pub fn tenant_dimension(tenant: &str) -> Option<String> {
    TENANTS.get().map(|d| d.value(tenant))
}

/// Distinct tenant values named so far, capped.
#[derive(Debug)]
pub struct TenantDimension {
    cap: usize,
    named: Mutex<HashSet<String>>,
}

impl TenantDimension {
    pub fn new(cap: usize) -> Self {
        TenantDimension {
            cap,
            named: Mutex::new(HashSet::new()),
        }
    }

    pub fn value(&self, tenant: &str) -> String {
        let Ok(mut named) = self.named.lock() else {
            return OTHER_TENANT.into();
        };
        if named.contains(tenant) || (named.len() < self.cap && named.insert(tenant.to_string())) {
            tenant.to_string()
        } else {
            OTHER_TENANT.into()
        }
    }
}

impl Metrics {
    /// Writes every metric recorded since the last flush, and resets counters.
    pub fn flush(&self) -> std::io::Result<()> {
        let Some(c) = self.collector else {
            return Ok(());
        };
        SAMPLES.store(0, Ordering::Relaxed);
        let mut lines = Vec::new();
        c.flush(&mut lines)?;
        if lines.is_empty() {
            return Ok(());
        }
        match &self.output {
            Output::Stdout => std::io::stdout().lock().write_all(&lines),
            Output::File(path) => std::fs::OpenOptions::new()
                .create(true)
                .append(true)
                .open(path)?
                .write_all(&lines),
            Output::Memory(buf) => {
                buf.lock()
                    .map_err(|_| std::io::Error::other("metrics buffer poisoned"))?
                    .extend_from_slice(&lines);
                Ok(())
            }
            Output::Off => Ok(()),
        }
    }

    /// Flushes, then takes what [`Output::Memory`] holds (empty for other outputs).
    pub fn take(&self) -> Vec<u8> {
        let _ = self.flush();
        match &self.output {
            Output::Memory(buf) => buf
                .lock()
                .map(|mut b| std::mem::take(&mut *b))
                .unwrap_or_default(),
            _ => Vec::new(),
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn the_tenant_dimension_names_at_most_cap_tenants() {
        let d = TenantDimension::new(2);
        assert_eq!(d.value("a"), "a");
        assert_eq!(d.value("b"), "b");
        assert_eq!(d.value("c"), OTHER_TENANT);
        assert_eq!(d.value("a"), "a", "a named tenant keeps its value");
    }

    #[test]
    fn settings_parse_and_refuse_unknown_outputs() {
        let s = Settings::from_vars(&Vars::from_pairs([
            (OUTPUT_VAR, "file:/tmp/m.jsonl"),
            (TENANT_DIMENSION_VAR, "true"),
            (TENANT_CAP_VAR, "7"),
        ]))
        .unwrap();
        assert!(matches!(s.output, Output::File(ref p) if p.ends_with("m.jsonl")));
        assert!(s.tenant_dimension);
        assert_eq!((s.tenant_cap, s.namespace.as_str()), (7, DEFAULT_NAMESPACE));
        let d = Settings::from_vars(&Vars::from_pairs::<&str, &str>([])).unwrap();
        assert!(matches!(d.output, Output::Stdout) && !d.tenant_dimension);
        let e = Settings::from_vars(&Vars::from_pairs([(OUTPUT_VAR, "stderr")])).unwrap_err();
        assert!(e.to_string().contains("file:PATH"), "{e}");
    }
}
