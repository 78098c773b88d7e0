//! `turnstile reconcile [--tenant T] [--dry-run]`: repairs leaked open-connection and session
//! counts as the scheduled `reconciler` function does, and prints its report as JSON: per tenant
//! the count read, the truth (connection ids in its sessions), the stale ids released, and
//! `repaired` (from → to), `consistent`, `busy` (the count moved: run again), `skipped` (why) or
//! `deferred` (no time left this run; the next run over every tenant starts with it); the same for
//! the session count under `sessions`.

use std::time::Duration;

use shared::admission::reconcile::{self, Options, Probe};
use shared::gateway::Gateway;
use shared::ids::TenantId;
use shared::{Deps, Error, Result};

#[derive(Debug, clap::Args)]
pub struct Args {
    /// Only this tenant (default: every tenant in the tenant table).
    #[arg(long)]
    tenant: Option<TenantId>,
    /// Report what would be released and repaired; write nothing.
    #[arg(long)]
    dry_run: bool,
    /// Seconds between the phases; must exceed how long a $connect can be half-way (default 30,
    /// 15 to 60; also TURNSTILE_RECONCILE_GRACE_SECS).
    #[arg(long)]
    grace_secs: Option<u64>,
    /// The WebSocket API's Management API endpoint, to find gone sockets (default
    /// TURNSTILE_MANAGEMENT_ENDPOINT; without either, sockets are not probed).
    #[arg(long)]
    endpoint: Option<String>,
}

pub async fn run(args: Args) -> Result<()> {
    let deps = Deps::from_env().await?;
    let grace = match args.grace_secs {
        Some(s) => Duration::from_secs(s),
        None => match deps.vars.get("TURNSTILE_RECONCILE_GRACE_SECS") {
            Some(v) => Duration::from_secs(v.trim().parse().map_err(|_| {
                Error::Other(format!(
                    "TURNSTILE_RECONCILE_GRACE_SECS={v}: expected seconds"
                ))
            })?),
            None => reconcile::DEFAULT_GRACE,
        },
    };
    let grace = reconcile::check_grace(grace).map_err(Error::Other)?;
    let endpoint = match args.endpoint {
        Some(e) => Some(e.trim_end_matches('/').to_string()),
        None => Gateway::endpoint_from_vars(&deps.vars)?,
    };
    let gateway = Gateway::from_env(endpoint.clone()).await;
    let probe = endpoint.map(|endpoint| Probe {
        gateway: &gateway,
        endpoint,
    });
    let options = Options {
        tenant: args.tenant,
        dry_run: args.dry_run,
        grace,
        budget: reconcile::Budget::for_grace(grace),
    };
    let report = reconcile::run(&deps, &options, probe.as_ref(), |_| {
        let d = deps.clone();
        async move { Ok(d) }
    })
    .await?;
    crate::print_json(&report)
}
