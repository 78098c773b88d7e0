//! `turnstile reconcile [--tenant-id T] [--dry-run]`: repairs leaked open-connection and session
//! counts as the scheduled `reconciler` function does, and prints its report as JSON: per tenant
//! the count read, the truth (connection ids in its sessions), the stale ids released, and
//! `repaired` (from → to), `consistent`, `busy` (the count moved: run again), `skipped` (why) or
//! `deferred` (no time left this run; the next run over every tenant starts with it); the same for
//! the session count under `sessions`.

use std::time::Duration;

use shared::gateway::Gateway;
use shared::ids::TenantId;
use shared::reconcile::{self, Options, Pause, Probe};
use shared::{Error, Result};

#[derive(Debug, clap::Args)]
pub struct Args {
    /// Only this tenant (default: every tenant in the tenant table).
    #[arg(long = "tenant-id", alias = "tenant", value_name = "TENANT_ID")]
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
    #[arg(long = "management-endpoint", alias = "endpoint", value_name = "URL")]
    endpoint: Option<String>,
}

pub async fn run(args: Args) -> Result<()> {
    let deps = crate::aws::deps().await?;
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
    let whom = match &options.tenant {
        Some(t) => format!("tenant {t}"),
        None => "every tenant".to_string(),
    };
    let secs = grace.as_secs();
    let what = if options.dry_run {
        "dry run: nothing is written"
    } else {
        "repairing"
    };
    eprintln!("reconcile: {whom} ({what}); probing sockets and reading the counts");
    let pause = |p: Pause| {
        match p {
            Pause::AfterProbe => eprintln!(
                "reconcile: waiting {secs} s (the grace) for connects half-way to settle, \
                 then releasing stale ids and reading the truth"
            ),
            Pause::AfterRead => {
                eprintln!("reconcile: waiting {secs} s (the grace) again, then the repair")
            }
        }
        tokio::time::sleep(grace)
    };
    let scoped = |_| {
        let d = deps.clone();
        async move { Ok(d) }
    };
    let report = reconcile::run_paced(&deps, &options, probe.as_ref(), scoped, pause).await?;
    eprintln!(
        "reconcile: done, {} tenant(s) repaired{}",
        report.repaired(),
        if options.dry_run { " (would be)" } else { "" }
    );
    crate::print_json(&report)
}

#[cfg(test)]
mod tests {
    use super::*;
    use clap::Parser;

    #[derive(Debug, Parser)]
    struct Wrapper {
        #[command(flatten)]
        args: Args,
    }

    #[test]
    fn tenant_id_is_the_flag_and_tenant_a_hidden_alias() {
        for flag in ["--tenant-id", "--tenant"] {
            let w = Wrapper::try_parse_from(["reconcile", flag, "acme"]).unwrap();
            assert_eq!(
                w.args.tenant.map(|t| t.to_string()).as_deref(),
                Some("acme")
            );
        }
        let help = <Wrapper as clap::CommandFactory>::command()
            .render_long_help()
            .to_string();
        assert!(help.contains("--tenant-id"), "{help}");
        assert!(!help.contains("--tenant "), "{help}");
    }
}
