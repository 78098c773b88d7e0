//! The TTL sweeper (seed 003 step 9), on the session table's stream. For each record that is a TTL
//! deletion — `eventName` `REMOVE` by `userIdentity` `{type: Service, principalId:
//! dynamodb.amazonaws.com}` — it releases the capacity of every connection in the old image
//! (a conditional tombstone `PutItem` per record, then 1 `UpdateItem` on the tenant's count: a
//! redelivered record finds its tombstone and changes nothing; decision 0306) and closes each
//! connection through the Management API (a gone one is fine). Other
//! records (inserts, updates, user deletes, which the session API already handled) are ignored.
//! A record that fails is reported in `batchItemFailures` (by sequence number) for redelivery;
//! a record whose image is unusable is logged and acknowledged, since retrying cannot fix it.

use aws_lambda_events::dynamodb::{Event, EventRecord};
use aws_lambda_events::streams::{DynamoDbBatchItemFailure, DynamoDbEventResponse};
use serde_dynamo::AttributeValue;
use shared::admission::release;
use shared::clock::Timestamp;
use shared::config::{ConfigError, Vars};
use shared::gateway::{self, Gateway};
use shared::ids::{SessionId, TenantId};
use shared::isolation::{self, TenantClients};
use shared::session::attr as sattr;
use shared::telemetry::catalogue::{self, Worker};
use shared::Deps;

#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Config {
    /// `TURNSTILE_MANAGEMENT_ENDPOINT` (required): where connections are closed.
    pub management_endpoint: String,
}

impl Config {
    pub fn from_vars(vars: &Vars) -> Result<Config, ConfigError> {
        Ok(Config {
            management_endpoint: gateway::required_endpoint(vars)?,
        })
    }
}

#[derive(Debug)]
pub struct State {
    pub gateway: Gateway,
    pub endpoint: String,
    /// Tenant-scoped DynamoDB clients (`TENANT_ROLE_ARN`); `None` (what [`State::new`] gives) uses
    /// the `Deps` passed to [`handle`] (the execution role). `main.rs` sets it with
    /// [`State::with_tenant_clients`].
    pub tenant_clients: Option<TenantClients>,
}

impl State {
    pub fn new(config: &Config, gateway: Gateway) -> Self {
        State {
            gateway,
            endpoint: config.management_endpoint.clone(),
            tenant_clients: None,
        }
    }

    /// Reach tenant rows through `clients` (built once in `main.rs` by `TenantClients::from_deps`).
    pub fn with_tenant_clients(mut self, clients: TenantClients) -> Self {
        self.tenant_clients = Some(clients);
        self
    }
}

/// The record's identity for the sweep's tombstone: its `eventID`, else its sequence number (both
/// stay the same when the record is delivered again).
fn record_id(r: &EventRecord) -> String {
    if !r.event_id.is_empty() {
        return r.event_id.clone();
    }
    r.change.sequence_number.clone().unwrap_or_default()
}

/// True for a deletion by DynamoDB's TTL process.
pub fn is_ttl_removal(r: &EventRecord) -> bool {
    r.event_name == "REMOVE"
        && r.user_identity
            .as_ref()
            .is_some_and(|u| u.type_ == "Service" && u.principal_id == "dynamodb.amazonaws.com")
}

/// The counter shards the expired session's connections are on (`connShards`; 1 when absent or
/// unusable: decision 1502).
fn recorded_shards(r: &EventRecord) -> u64 {
    match r.change.old_image.get(sattr::CONNECTION_SHARDS) {
        Some(AttributeValue::N(v)) => v
            .parse::<u64>()
            .map_or(1, |v| v.clamp(1, shared::tenant::MAX_CONNECTION_SHARDS)),
        _ => 1,
    }
}

/// What one expired session held: tenant, session and connection ids, or why the image is
/// unusable. Public so it is fuzzed without DynamoDB (tests/integration/fuzz.rs).
pub fn expired_session(r: &EventRecord) -> Result<(TenantId, SessionId, Vec<String>), String> {
    let img = &r.change.old_image;
    let tenant = match img.get(sattr::TENANT_ID) {
        Some(AttributeValue::S(s)) => s.clone(),
        _ => {
            return Err(
                "the old image has no tenantId (is the stream view NEW_AND_OLD_IMAGES?)".into(),
            )
        }
    };
    let t = TenantId::parse(&tenant).map_err(|e| e.to_string())?;
    let sid = match img.get(sattr::SESSION_ID) {
        Some(AttributeValue::S(s)) => SessionId::parse(s).map_err(|e| e.to_string())?,
        _ => return Err("the old image has no sessionId".into()),
    };
    let ids = match img.get(sattr::CONNECTION_IDS) {
        Some(AttributeValue::Ss(v)) => v.clone(),
        _ => Vec::new(),
    };
    Ok((t, sid, ids))
}

pub async fn handle(deps: &Deps, state: &State, event: Event) -> DynamoDbEventResponse {
    let mut failures = Vec::new();
    for r in &event.records {
        if !is_ttl_removal(r) {
            continue;
        }
        let (t, sid, ids) = match expired_session(r) {
            Ok(x) => x,
            Err(reason) => {
                tracing::error!(event_id = %r.event_id, %reason, "unusable TTL record; skipped");
                continue;
            }
        };
        if ids.is_empty() {
            continue;
        }
        // Each record is its own tenant's: its release runs with that tenant's credentials.
        let released = match isolation::tenant_deps(state.tenant_clients.as_ref(), deps, &t).await {
            Ok(deps) => {
                let released = release::parse_ids(&ids);
                let deleted_at = Timestamp::from_millis(
                    r.change.approximate_creation_date_time.timestamp_millis(),
                );
                let shards = recorded_shards(r);
                release::swept(
                    &deps,
                    &t,
                    &sid,
                    &record_id(r),
                    deleted_at,
                    &released,
                    shards,
                )
                .await
            }
            Err(e) => Err(e),
        };
        let ok = match released {
            Ok(swept) => {
                tracing::info!(tenant = %t, session = %sid, ?swept, connections = ids.len(), "expired session swept");
                state
                    .gateway
                    .close_all(&state.endpoint, &ids)
                    .await
                    .is_empty()
            }
            Err(e) => {
                tracing::warn!(event_id = %r.event_id, error = %e, "releasing an expired session failed");
                false
            }
        };
        catalogue::work(Worker::TtlSweeper, if ok { "swept" } else { "failed" }, 1);
        if !ok {
            let mut f = DynamoDbBatchItemFailure::default();
            f.item_identifier = r
                .change
                .sequence_number
                .clone()
                .or_else(|| Some(r.event_id.clone()));
            failures.push(f);
        }
    }
    let mut resp = DynamoDbEventResponse::default();
    resp.batch_item_failures = failures;
    resp
}
