//! `turnstile kv check|spend|refund|reset|validate`: operate one key-value GCRA bucket by hand,
//! printing the decision as JSON. Limits come from `--config` or `TURNSTILE_LIMITS_FILE`.

use std::sync::Arc;
use std::time::Duration;

use clap::Subcommand;
use shared::clock::{Clock, SystemClock, Timestamp};
use shared::kv::config::{parse_period, LIMITS_FILE_VAR};
use shared::kv::instant::parse_instant;
use shared::kv::{item_write_budget, LimitSet, Limiter, Limits};
use shared::{Error, Result};

#[derive(Debug, clap::Args)]
pub struct Args {
    /// The limits YAML file (see config/limits.example.yaml).
    #[arg(long, global = true, env = LIMITS_FILE_VAR, value_name = "FILE")]
    config: Option<String>,
    #[command(subcommand)]
    command: Cmd,
}

#[derive(Debug, clap::Args)]
struct Target {
    /// The limit name, as declared under `names:` in the limits file.
    name: String,
    /// The id, in the name's format (an IP address, a regId, `regId:domain`, ...).
    id: String,
    /// Decide at this instant instead of now: epoch milliseconds or RFC 3339.
    #[arg(long, value_parser = parse_instant)]
    now: Option<Timestamp>,
}

#[derive(Debug, Subcommand)]
enum Cmd {
    /// What a spend of COST would decide, without spending (1 GetItem).
    Check {
        #[command(flatten)]
        target: Target,
        #[arg(long, default_value_t = 0)]
        cost: u64,
    },
    /// Spend COST tokens (1 UpdateItem warm, at most 2 cold).
    Spend {
        #[command(flatten)]
        target: Target,
        #[arg(long, default_value_t = 1)]
        cost: u64,
    },
    /// Give COST tokens back, never above the burst; refused on a full bucket.
    Refund {
        #[command(flatten)]
        target: Target,
        #[arg(long, default_value_t = 1)]
        cost: u64,
    },
    /// Make the bucket full again (1 DeleteItem).
    Reset {
        #[command(flatten)]
        target: Target,
    },
    /// Validate the limits file and print its names; no AWS call.
    Validate,
    /// Leases: hold an estimated cost, adjust it to the real cost, commit or release it.
    #[command(subcommand)]
    Lease(LeaseCmd),
}

#[derive(Debug, Subcommand)]
enum LeaseCmd {
    /// Hold ESTIMATE tokens under LEASE until now + TTL (1 TransactWriteItems).
    Acquire {
        #[command(flatten)]
        target: Target,
        #[arg(long)]
        lease: String,
        #[arg(long)]
        estimate: u64,
        /// How long the lease holds before its estimate returns (`30s`, `5m`).
        #[arg(long, default_value = "5m", value_parser = parse_period)]
        ttl: Duration,
    },
    /// Set the lease's amount to the real cost: the difference is spent or given back;
    /// repeating it changes nothing (1 GetItem + 1 TransactWriteItems).
    Adjust {
        #[command(flatten)]
        target: Target,
        #[arg(long)]
        lease: String,
        #[arg(long)]
        amount: u64,
    },
    /// End the lease, keeping its amount spent (1 DeleteItem).
    Commit {
        #[command(flatten)]
        target: Target,
        #[arg(long)]
        lease: String,
    },
    /// End the lease and give its amount back, as expiry does (1 GetItem + 1 TransactWriteItems).
    Release {
        #[command(flatten)]
        target: Target,
        #[arg(long)]
        lease: String,
    },
}

/// Loads and validates the limits file named by `--config` or the env var.
pub fn load(config: Option<&str>) -> Result<LimitSet> {
    let path = config.ok_or_else(|| {
        Error::Other(format!(
            "no limits file: pass --config FILE or set {LIMITS_FILE_VAR}"
        ))
    })?;
    LimitSet::from_path(path).map_err(|e| Error::Other(format!("{path}: {e}")))
}

enum Op {
    Check(u64),
    Spend(u64),
    Refund(u64),
    Reset,
}

pub async fn run(args: Args) -> Result<crate::Exit> {
    let set = load(args.config.as_deref())?;
    let (target, op) = match args.command {
        Cmd::Validate => {
            crate::print_json(&serde_json::json!({
                "valid": true,
                "names": set.names(),
                "overrides": set.override_count(),
            }))?;
            return Ok(crate::Exit::Done);
        }
        Cmd::Check { target, cost } => (target, Op::Check(cost)),
        Cmd::Spend { target, cost } => (target, Op::Spend(cost)),
        Cmd::Refund { target, cost } => (target, Op::Refund(cost)),
        Cmd::Reset { target } => (target, Op::Reset),
        Cmd::Lease(cmd) => return lease(set, cmd).await,
    };
    let limiter = limiter(set).await?;
    let now = target.now.unwrap_or_else(|| SystemClock.now());
    let (name, id) = (target.name.as_str(), target.id.as_str());
    let kv = |e: shared::kv::KvError| Error::Other(e.to_string());
    let outcome = match op {
        Op::Check(cost) => limiter.check(name, id, cost, now).await,
        Op::Spend(cost) => limiter.spend(name, id, cost, now).await,
        Op::Refund(cost) => limiter.refund(name, id, cost, now).await,
        Op::Reset => limiter.reset(name, id, now).await,
    }
    .map_err(kv)?;
    // This process ends here: record a denial on the bucket now (one write under the version
    // lock) rather than holding it for a next spend that will never come.
    limiter.flush_throttles(now).await.map_err(kv)?;
    let mut value = serde_json::to_value(&outcome)
        .map_err(|e| Error::Other(format!("formatting output: {e}")))?;
    if let Some(obj) = value.as_object_mut() {
        obj.insert("now".into(), serde_json::Value::String(now.to_rfc3339()));
    }
    crate::print_json(&value)?;
    Ok(crate::Exit::granted(outcome.decision.allowed))
}

/// The limiter of `set` on the environment's bucket table.
async fn limiter(set: LimitSet) -> Result<Limiter> {
    let deps = crate::aws::deps().await?;
    let limits = Arc::new(Limits::new(set));
    let budget = item_write_budget(&deps.vars)?;
    Ok(
        Limiter::new(deps.dynamo.clone(), &deps.tables.buckets, limits)
            .with_item_write_budget(budget),
    )
}

/// `turnstile kv lease ...`: one lease operation, printed as JSON.
async fn lease(set: LimitSet, cmd: LeaseCmd) -> Result<crate::Exit> {
    let limiter = limiter(set).await?;
    let at = |t: &Target| t.now.unwrap_or_else(|| SystemClock.now());
    let outcome = match &cmd {
        LeaseCmd::Acquire {
            target: t,
            lease,
            estimate,
            ttl,
        } => {
            limiter
                .acquire_lease(&t.name, &t.id, lease, *estimate, *ttl, at(t))
                .await
        }
        LeaseCmd::Adjust {
            target: t,
            lease,
            amount,
        } => {
            limiter
                .adjust_lease(&t.name, &t.id, lease, *amount, at(t))
                .await
        }
        LeaseCmd::Commit { target: t, lease } => limiter.commit_lease(&t.name, &t.id, lease).await,
        LeaseCmd::Release { target: t, lease } => {
            limiter.release_lease(&t.name, &t.id, lease, at(t)).await
        }
    }
    .map_err(|e| Error::Other(e.to_string()))?;
    crate::print_json(&outcome)?;
    Ok(crate::Exit::granted(outcome.granted))
}
