//! The reconciler, run on an EventBridge schedule: recomputes each tenant's
//! open connections from its sessions' `connectionIds`, releases ids whose socket is gone
//! (`GET @connections` answered 410 twice, a grace apart), and sets the tenant's count to the truth
//! only when nothing moved meanwhile (`shared::reconcile`, decision 0306), and the same
//! for each tenant's session count (decision 2204). A run fits the function: a budget per tenant
//! and per run, continuing from where the last run stopped (decision 2205). Answers the report
//! (per tenant: counted, truth, stale ids released, repaired from → to, or busy/skipped/deferred).
//!
//! The event may narrow or soften a run: `{"tenantId": "acme", "dryRun": true}` at the top level
//! or in `detail` (an EventBridge schedule sends `detail: {}`: every tenant, for real). A malformed
//! field is logged and the run refused (an error), since guessing could repair the wrong tenant.

use std::time::Duration;

use serde_json::Value;
use shared::config::{ConfigError, Vars};
use shared::function::Tenancy;
use shared::gateway::Gateway;
use shared::ids::TenantId;
use shared::reconcile::{self, Options, Outcome, Probe, Report};
use shared::telemetry::catalogue::{self, Worker};
use shared::Deps;

/// `TURNSTILE_RECONCILE_GRACE_SECS`: seconds between the phases (default 30, 15 to 60: at least the
/// handlers' 10 s timeout plus a margin, since it must exceed how long a `$connect` or release can
/// be half-way; at most 60, so two graces and the work fit this function's 300 s; see
/// `shared::reconcile`). A value outside is a configuration error: `init` fails.
pub const GRACE_VAR: &str = "TURNSTILE_RECONCILE_GRACE_SECS";

#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Config {
    pub grace: Duration,
    /// `TURNSTILE_MANAGEMENT_ENDPOINT`: where sockets are probed; unset skips probing.
    pub management_endpoint: Option<String>,
}

impl Config {
    pub fn from_vars(vars: &Vars) -> Result<Config, ConfigError> {
        let grace = match vars.get(GRACE_VAR) {
            None => reconcile::DEFAULT_GRACE,
            Some(v) => {
                let secs = v.trim().parse().map_err(|_| ConfigError::Invalid {
                    var: GRACE_VAR.into(),
                    value: v.clone(),
                    reason: "expected whole seconds".into(),
                })?;
                reconcile::check_grace(Duration::from_secs(secs)).map_err(|reason| {
                    ConfigError::Invalid {
                        var: GRACE_VAR.into(),
                        value: v.clone(),
                        reason,
                    }
                })?
            }
        };
        Ok(Config {
            grace,
            management_endpoint: Gateway::endpoint_from_vars(vars)?,
        })
    }
}

/// Built once per process, by [`init`].
pub struct State {
    pub config: Config,
    pub gateway: Gateway,
    pub tenancy: Tenancy,
}

/// What `main.rs`, the local stack and the tests run: [`Config`] from `deps.vars`, the Management
/// API client (probes), and tenant-scoped credentials when `TENANT_ROLE_ARN` is set.
pub async fn init(deps: &Deps) -> Result<State, shared::Error> {
    let config = Config::from_vars(&deps.vars)?;
    let gateway =
        shared::gateway::Gateway::from_vars(config.management_endpoint.clone(), &deps.vars).await;
    let tenancy = Tenancy::from_deps(deps).await?;
    Ok(State {
        config,
        gateway,
        tenancy,
    })
}

/// What the event asks for: a tenant (or all) and whether to write.
pub fn options(event: &Value, grace: Duration) -> Result<Options, String> {
    let field = |name: &str| {
        event
            .get(name)
            .or_else(|| event.get("detail").and_then(|d| d.get(name)))
    };
    let tenant = match field("tenantId") {
        None | Some(Value::Null) => None,
        Some(Value::String(t)) => Some(TenantId::parse(t).map_err(|e| e.to_string())?),
        Some(other) => return Err(format!("tenantId must be a string, not {other}")),
    };
    let dry_run = match field("dryRun") {
        None | Some(Value::Null) => false,
        Some(Value::Bool(b)) => *b,
        Some(other) => return Err(format!("dryRun must be true or false, not {other}")),
    };
    Ok(Options {
        tenant,
        dry_run,
        grace,
        budget: reconcile::Budget::for_grace(grace),
    })
}

/// Tenants by outcome, stale connections released, and the connections open (`WorkItems`,
/// `OpenConnections`).
fn meter(report: &Report) {
    let mut open = 0;
    for t in &report.tenants {
        let result = match t.outcome {
            Outcome::Consistent => "consistent",
            Outcome::Repaired { .. } | Outcome::WouldRepair { .. } => "repaired",
            Outcome::Busy => "busy",
            Outcome::Skipped { .. } => "skipped",
            Outcome::Deferred => "deferred",
        };
        catalogue::work(Worker::Reconciler, result, 1);
        catalogue::work(
            Worker::Reconciler,
            "staleReleased",
            t.stale_released.len() as u64,
        );
        open += t.truth;
    }
    catalogue::open_connections(open);
}

pub async fn handle(deps: &Deps, state: &State, event: Value) -> Result<Report, shared::Error> {
    let options = options(&event, state.config.grace).map_err(|reason| {
        tracing::error!(%reason, "refusing a reconcile event");
        shared::Error::Other(format!("bad reconcile event: {reason}"))
    })?;
    let probe = state
        .config
        .management_endpoint
        .clone()
        .map(|endpoint| Probe {
            gateway: &state.gateway,
            endpoint,
        });
    let tenancy = &state.tenancy;
    let report = reconcile::run(deps, &options, probe.as_ref(), |t| async move {
        Ok(tenancy.deps(deps, &t).await?.into_owned())
    })
    .await?;
    tracing::info!(
        tenants = report.tenants.len(),
        repaired = report.repaired(),
        "reconcile finished"
    );
    meter(&report);
    Ok(report)
}
