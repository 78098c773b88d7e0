//! The region rebalancer, run on an EventBridge schedule in each region of a global limit
//! (decision 4200, docs/multi-region.md): for each global limit its ledger declares over this
//! region, it renews the region's lease and reports the region's demand in one write, finishes
//! the moves due here, reclaims regions whose lease ran out, and lowers this region's allotment
//! toward a region short of its fair share, with hysteresis (`shared::region::scheduled`). The
//! ledger logic is all in `shared`; this crate translates the event and the configuration.
//!
//! The event must be a scheduled one (`source` `aws.events`, `detail-type` `Scheduled Event`);
//! anything else is logged and acknowledged as rejected, with nothing read or written: a run is
//! harmless, but an event from elsewhere means a wiring mistake worth seeing in the logs.

use std::time::Duration;

use serde::Serialize;
use serde_json::Value;
use shared::config::{check_table_name, ConfigError, Vars};
use shared::region::ledger::TABLE_VAR;
use shared::region::scheduled::{self, Buckets, Schedule, Summary, DEFAULT_REFRESH};
use shared::region::DynamoLedger;
use shared::Deps;

/// `TURNSTILE_REBALANCE_EVERY_MINUTES`: the schedule's interval (the template's
/// `RegionRebalanceRateMinutes`), from which the lease is derived (three intervals).
pub const EVERY_VAR: &str = "TURNSTILE_REBALANCE_EVERY_MINUTES";
/// Set by Lambda: the region this function runs in, as the ledger names it.
pub const REGION_VAR: &str = "AWS_REGION";

/// The clock margin between regions this function assumes (decision 4200's `M`).
pub const CLOCK_MARGIN: Duration = Duration::from_secs(2);

#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Config {
    pub ledger_table: String,
    pub schedule: Schedule,
}

impl Config {
    pub fn from_vars(vars: &Vars) -> Result<Config, ConfigError> {
        let ledger_table = vars.required(TABLE_VAR, "the ledger table (RegionLedgerTable)")?;
        check_table_name(TABLE_VAR, &ledger_table)?;
        let minutes = vars
            .parse::<u32>(EVERY_VAR, "whole minutes, at least 1")?
            .unwrap_or(1);
        if minutes == 0 {
            return Err(ConfigError::Invalid {
                var: EVERY_VAR.into(),
                value: "0".into(),
                reason: "expected whole minutes, at least 1".into(),
            });
        }
        let region = vars.required(REGION_VAR, "the region this function runs in")?;
        Ok(Config {
            ledger_table,
            schedule: Schedule {
                region,
                every: Duration::from_secs(60) * minutes,
                refresh: DEFAULT_REFRESH,
                clock_margin: CLOCK_MARGIN,
            },
        })
    }
}

/// Built once per process, by [`init`].
pub struct State {
    pub config: Config,
    pub ledger: DynamoLedger,
}

/// What `main.rs`, the local stack and the tests run: [`Config`] from `deps.vars`, the ledger on
/// the invocation's DynamoDB client.
pub async fn init(deps: &Deps) -> Result<State, shared::Error> {
    let config = Config::from_vars(&deps.vars)?;
    let ledger = DynamoLedger {
        client: deps.dynamo.clone(),
        table: config.ledger_table.clone(),
    };
    Ok(State { config, ledger })
}

/// The answer: what the pass did, or why the event was not taken.
#[derive(Debug, Clone, PartialEq, Eq, Serialize)]
#[serde(rename_all = "camelCase", tag = "outcome")]
pub enum Answer {
    Ran(Summary),
    Rejected { reason: String },
}

/// Why `event` is not a scheduled event (`None`: it is one).
pub fn rejection(event: &Value) -> Option<String> {
    let field = |name: &str| event.get(name).and_then(Value::as_str);
    match (field("source"), field("detail-type")) {
        (Some("aws.events"), Some("Scheduled Event")) => None,
        (source, kind) => Some(format!(
            "not an EventBridge scheduled event (source {source:?}, detail-type {kind:?})"
        )),
    }
}

pub async fn handle(deps: &Deps, state: &State, event: Value) -> Result<Answer, shared::Error> {
    if let Some(reason) = rejection(&event) {
        tracing::error!(%reason, "rejecting a rebalance event");
        return Ok(Answer::Rejected { reason });
    }
    let buckets = Buckets {
        client: &deps.dynamo,
        table: &deps.tables.buckets,
        key: shared::kv::attr::BUCKET,
    };
    let now = deps.clock.now();
    let summary = scheduled::run(&state.ledger, &buckets, &state.config.schedule, now)
        .await
        .map_err(|e| shared::Error::Other(format!("rebalance: {e}")))?;
    for bad in &summary.malformed {
        tracing::error!(declaration = %bad, "a global limit's declaration does not parse");
    }
    for l in &summary.limits {
        match &l.error {
            Some(error) => tracing::warn!(limit = %l.limit, %error, "limit not rebalanced"),
            None => tracing::info!(
                limit = %l.limit,
                demand = l.demand,
                raised = l.raised,
                reclaimed = l.reclaimed.len(),
                lowered = ?l.lowered,
                "limit rebalanced"
            ),
        }
    }
    Ok(Answer::Ran(summary))
}
