//! The TTL sweeper, on the session table's stream. For each record that is a TTL
//! deletion — `eventName` `REMOVE` by `userIdentity` `{type: Service, principalId:
//! dynamodb.amazonaws.com}` — it closes every connection of the old image through the Management
//! API first, and once every one is known gone (a 2xx, or a 410 a grace after the row's last
//! join: decision 2208) gives back the session's unit of the tenant's session count (and of its
//! owner's, when a signed-in user created it: decision 3602) and releases each connection's
//! capacity to the counter it was charged on, in one `TransactWriteItems` per record (a
//! conditional tombstone, the counts, the decrements, with a request token, so a lost answer, a
//! stop or a redelivery gives back exactly once; decisions 0306, 2204, 2206):
//! `shared::admission::closing::sweep`. A row a session `DELETE` ended has no `sessionTTL`, so
//! DynamoDB never deletes it and its units are never given back twice. A socket not known gone
//! yet releases nothing: the record is reported in `batchItemFailures` (by sequence number) and
//! comes again. Other records (inserts, updates, user deletes, which the session API already
//! handled) are ignored; a record whose image is unusable is logged and acknowledged, since
//! retrying cannot fix it.

use aws_lambda_events::dynamodb::Event;
use aws_lambda_events::streams::{DynamoDbBatchItemFailure, DynamoDbEventResponse};
use shared::admission::closing::{self, Sweep};
use shared::config::{ConfigError, Vars};
use shared::function::{Connections, Tenancy};
use shared::gateway;
use shared::session::stream;
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

/// Built once per process, by [`init`].
#[derive(Debug)]
pub struct State {
    /// Where the expired sessions' connections are closed.
    pub connections: Connections,
    pub tenancy: Tenancy,
}

/// What `main.rs`, the local stack and the tests run: the Management API client at
/// `TURNSTILE_MANAGEMENT_ENDPOINT`, and tenant-scoped credentials when `TENANT_ROLE_ARN` is set.
pub async fn init(deps: &Deps) -> Result<State, shared::Error> {
    let endpoint = Config::from_vars(&deps.vars)?.management_endpoint;
    let connections = Connections::new(deps, &endpoint).await;
    let tenancy = Tenancy::from_deps(deps).await?;
    Ok(State {
        connections,
        tenancy,
    })
}

pub async fn handle(deps: &Deps, state: &State, event: Event) -> DynamoDbEventResponse {
    let mut failures = Vec::new();
    for r in &event.records {
        if !stream::is_ttl_removal(r) {
            continue;
        }
        let expired = match closing::expired_of(r) {
            Ok(x) => x,
            Err(reason) => {
                tracing::error!(event_id = %r.event_id, %reason, "unusable TTL record; skipped");
                continue;
            }
        };
        // Each record is its own tenant's: its release runs with that tenant's credentials.
        let t = &expired.tenant;
        let swept = match state.tenancy.deps(deps, t).await {
            Ok(deps) => closing::sweep(&deps, &expired, &state.connections).await,
            Err(e) => Err(e),
        };
        let session = shared::ticket::fingerprint(expired.session.as_str());
        let ok = match swept {
            Ok(Sweep::Released(swept)) => {
                let connections = expired.connection_ids.len();
                tracing::info!(tenant = %t, %session, ?swept, connections, "expired session swept");
                true
            }
            Ok(Sweep::Closing(closing)) => {
                tracing::info!(tenant = %t, %session, ?closing, "sockets not known gone yet: the record comes again");
                false
            }
            Err(e) => {
                tracing::warn!(event_id = %r.event_id, error = %e, "sweeping an expired session failed");
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
