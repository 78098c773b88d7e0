//! The `token-remover` Lambda function: an EventBridge (CloudWatch Events) handler that removes the
//! non-fungible tokens of resources that are gone (an EMR cluster terminated) and so releases their
//! capacity. Which events count, and where the resource id is, come from configured
//! [`processors`](processors::Processors).

pub mod processors;

use std::time::Duration;

use aws_lambda_events::event::eventbridge::EventBridgeEvent;
use serde::Serialize;
use serde_json::Value;
use shared::config::{ConfigError, Vars};
use shared::limit::LimitStore;
use shared::reservation::{NonFungibleLimiter, TokenRow};
use shared::telemetry::catalogue::{self, Worker};
use shared::token::json_path;
use shared::Deps;

pub use processors::{Predicate, Processor, Processors, Test};

/// Env var holding the processors inline (JSON or YAML).
pub const PROCESSORS_VAR: &str = "TOKEN_REMOVER_PROCESSORS";
/// Env var naming a JSON or YAML file with the processors (e.g. one packaged with the function).
pub const PROCESSORS_FILE_VAR: &str = "TOKEN_REMOVER_PROCESSORS_FILE";

/// Everything the function reads beyond the table names and attribute style.
#[derive(Debug, Clone)]
pub struct Config {
    pub processors: Processors,
}

impl Config {
    /// Reads exactly one of `TOKEN_REMOVER_PROCESSORS` (inline) and `TOKEN_REMOVER_PROCESSORS_FILE`
    /// and validates the processors; errors name the variable and the bad field.
    pub fn from_vars(vars: &Vars) -> Result<Config, ConfigError> {
        let inline = vars.get(PROCESSORS_VAR);
        let file = vars.get(PROCESSORS_FILE_VAR);
        let (var, text) = match (inline, file) {
            (Some(_), Some(_)) => {
                return Err(ConfigError::Invalid {
                    var: PROCESSORS_FILE_VAR.into(),
                    value: "(set)".into(),
                    reason: format!("set either {PROCESSORS_VAR} or {PROCESSORS_FILE_VAR}, not both"),
                })
            }
            (Some(text), None) => (PROCESSORS_VAR, text),
            (None, Some(path)) => {
                let text = std::fs::read_to_string(&path).map_err(|e| ConfigError::Invalid {
                    var: PROCESSORS_FILE_VAR.into(),
                    value: path.clone(),
                    reason: format!("cannot read the file: {e}"),
                })?;
                (PROCESSORS_FILE_VAR, text)
            }
            (None, None) => {
                return Err(ConfigError::Missing {
                    var: PROCESSORS_VAR.into(),
                    hint: format!(
                        "the event processors as JSON or YAML (or a file path in {PROCESSORS_FILE_VAR})"
                    ),
                })
            }
        };
        let processors = Processors::parse(&text).map_err(|reason| ConfigError::Invalid {
            var: var.into(),
            value: text.chars().take(200).collect(),
            reason,
        })?;
        Ok(Config { processors })
    }
}

/// Built once per process from [`Deps`] and [`Config`].
#[derive(Debug, Clone)]
pub struct Remover {
    pub limiter: NonFungibleLimiter,
    pub config: Config,
    /// Page size of the queries for a resource's tokens (`None`: DynamoDB's own).
    pub page_size: Option<i32>,
}

impl Remover {
    pub fn new(deps: &Deps, config: Config) -> Remover {
        // The remover never reads limits, so its limit store needs no cache (and no variable).
        let limits = LimitStore::new(
            deps.dynamo.clone(),
            &deps.tables.limits,
            &deps.tables.limit_service_index,
            deps.style,
            deps.clock.clone(),
            Duration::ZERO,
        );
        Remover {
            limiter: NonFungibleLimiter::new(
                deps.dynamo.clone(),
                &deps.tables.non_fungible_tokens,
                &deps.tables.resource_index,
                deps.style,
                limits,
                deps.clock.clone(),
            ),
            config,
            page_size: None,
        }
    }
}

/// The remover `main.rs`, the local stack and the tests run: [`Config`] from `deps.vars` (async
/// only for the shape every function's `init` has).
pub async fn init(deps: &Deps) -> Result<Remover, shared::Error> {
    Ok(Remover::new(deps, Config::from_vars(&deps.vars)?))
}

/// What the handler did with an event.
#[derive(Debug, Clone, PartialEq, Serialize)]
#[serde(
    rename_all = "kebab-case",
    rename_all_fields = "camelCase",
    tag = "action"
)]
pub enum Outcome {
    /// No processor for this source / detail type: logged and acknowledged.
    Unmatched { source: String, detail_type: String },
    /// The processor's predicate said the resource is not gone (e.g. a RUNNING cluster).
    Skipped { processor: usize },
    /// The processor matched but the event has no resource id at its path.
    NoResourceId { processor: usize, path: String },
    /// The tokens bound to the resource were removed (none, if already removed).
    Removed {
        processor: usize,
        resource_id: String,
        tokens: Vec<TokenRow>,
    },
}

/// What an event asks for, decided without DynamoDB: remove the tokens of a resource, or an
/// outcome that needs no call. Pure, so it is fuzzed on its own (tests/integration/fuzz.rs).
#[derive(Debug, Clone, PartialEq)]
pub enum Resolved {
    Remove {
        processor: usize,
        resource_id: String,
    },
    Done(Outcome),
}

/// Picks the processor for `event`, evaluates its predicate and finds the resource id.
pub fn resolve(
    processors: &Processors,
    event: EventBridgeEvent<Value>,
) -> Result<Resolved, shared::Error> {
    let Some((index, processor)) = processors.select(&event.source, &event.detail_type) else {
        tracing::info!(source = %event.source, detail_type = %event.detail_type, "no processor for this event; acknowledged");
        return Ok(Resolved::Done(Outcome::Unmatched {
            source: event.source,
            detail_type: event.detail_type,
        }));
    };
    let doc = serde_json::to_value(&event)
        .map_err(|e| shared::Error::Other(format!("re-reading the event as JSON: {e}")))?;
    if let Some(when) = &processor.when {
        if !when.eval(&doc) {
            tracing::info!(processor = index, "predicate false; nothing to remove");
            return Ok(Resolved::Done(Outcome::Skipped { processor: index }));
        }
    }
    match json_path(&doc, &processor.resource_id) {
        Some(Value::String(s)) if !s.is_empty() => Ok(Resolved::Remove {
            processor: index,
            resource_id: s.clone(),
        }),
        Some(Value::Number(n)) => Ok(Resolved::Remove {
            processor: index,
            resource_id: n.to_string(),
        }),
        _ => {
            tracing::warn!(processor = index, path = %processor.resource_id, "event has no resource id; acknowledged");
            Ok(Resolved::Done(Outcome::NoResourceId {
                processor: index,
                path: processor.resource_id.clone(),
            }))
        }
    }
}

/// Handles one EventBridge event. Calls: none unless a processor matches; then the ended marker, one
/// Query per page of the resource's partition and of the resource index, and two writes per token
/// removed ([`NonFungibleLimiter::remove_by_resource_id`]).
pub async fn handle(
    remover: &Remover,
    event: EventBridgeEvent<Value>,
) -> Result<Outcome, shared::Error> {
    let (index, resource_id) = match resolve(&remover.config.processors, event)? {
        Resolved::Done(outcome) => {
            catalogue::work(Worker::TokenRemover, "ignored", 1);
            return Ok(outcome);
        }
        Resolved::Remove {
            processor,
            resource_id,
        } => (processor, resource_id),
    };
    let tokens = remover
        .limiter
        .remove_by_resource_id(&resource_id, remover.page_size)
        .await?;
    tracing::info!(processor = index, resource_id = %resource_id, removed = tokens.len(), "tokens removed");
    catalogue::work(Worker::TokenRemover, "removed", tokens.len() as u64);
    Ok(Outcome::Removed {
        processor: index,
        resource_id,
        tokens,
    })
}
