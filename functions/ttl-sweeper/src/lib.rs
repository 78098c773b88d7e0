//! The TTL sweeper (seed 003 step 9), on the session table's stream. For each record that is a TTL
//! deletion — `eventName` `REMOVE` by `userIdentity` `{type: Service, principalId:
//! dynamodb.amazonaws.com}` — it gives back the session's unit of the tenant's session count (and
//! of its owner's, when a signed-in user created it) and
//! releases the capacity of every connection in the old image, to the counter each was charged on
//! (one `TransactWriteItems` per record: a conditional tombstone, `-1` on the session count and
//! the decrement of each charged counter, with a request token, so a lost answer, a stop or a
//! redelivery gives back exactly once; decisions 0306, 2204, 2206) and closes each connection
//! through the Management API (a gone one is fine). Other
//! records (inserts, updates, user deletes, which the session API already handled) are ignored.
//! A record that fails is reported in `batchItemFailures` (by sequence number) for redelivery;
//! a record whose image is unusable is logged and acknowledged, since retrying cannot fix it.

use aws_lambda_events::dynamodb::Event;
use aws_lambda_events::streams::{DynamoDbBatchItemFailure, DynamoDbEventResponse};
use shared::admission::release;
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
        let (t, sid, ids) = match stream::expired_session(r) {
            Ok(x) => x,
            Err(reason) => {
                tracing::error!(event_id = %r.event_id, %reason, "unusable TTL record; skipped");
                continue;
            }
        };
        // Every TTL deletion gives back its session (decision 2204), connections or not.
        // Each record is its own tenant's: its release runs with that tenant's credentials.
        let released = match state.tenancy.deps(deps, &t).await {
            Ok(deps) => {
                let released = release::parse_ids(&ids);
                let (charges, owner) = (stream::charges(r), stream::owner(r));
                let image = release::ExpiredImage {
                    ids: &released,
                    charges: &charges,
                    owner: owner.as_deref(),
                };
                release::swept(
                    &deps,
                    &t,
                    &sid,
                    &stream::record_id(r),
                    stream::deleted_at(r),
                    image,
                )
                .await
            }
            Err(e) => Err(e),
        };
        let ok = match released {
            Ok(swept) => {
                tracing::info!(tenant = %t, session = %shared::ticket::fingerprint(sid.as_str()), ?swept, connections = ids.len(), "expired session swept");
                let Connections { gateway, endpoint } = &state.connections;
                gateway.close_all(endpoint, &ids).await.is_empty()
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
