//! `$disconnect` (seed 003 step 7): releases the connection exactly once — removes it from the
//! session's `connectionIds`, and only if this call removed it, decrements the tenant's open
//! connections (`shared::admission::release`, decision 0306). A repeated disconnect, or one for a
//! connection already released by pruning, a session delete or the TTL sweeper, changes nothing.
//! Always answers 200 (API Gateway ignores a `$disconnect` answer; it cannot be refused).
//! Budget: 2 UpdateItem, 2 WCU (1 when there was nothing to release).

use aws_lambda_events::apigw::{ApiGatewayProxyResponse, ApiGatewayWebsocketProxyRequest};
use shared::admission::{context, release, respond};
use shared::config::{ConfigError, Vars};
use shared::isolation::{self, TenantClients};
use shared::Deps;

/// This function reads no variables beyond table names.
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub struct Config {}

impl Config {
    pub fn from_vars(_vars: &Vars) -> Result<Config, ConfigError> {
        Ok(Config {})
    }
}

/// Built once per process.
#[derive(Debug, Default)]
pub struct State {
    /// Tenant-scoped DynamoDB clients (`TENANT_ROLE_ARN`); `None` (what [`State::new`] gives) uses
    /// the `Deps` passed to [`handle`] (the execution role). `main.rs` sets it with
    /// [`State::with_tenant_clients`].
    pub tenant_clients: Option<TenantClients>,
}

impl State {
    pub fn new(_config: &Config) -> Self {
        State {
            tenant_clients: None,
        }
    }

    /// Reach tenant rows through `clients` (built once in `main.rs` by `TenantClients::from_deps`).
    pub fn with_tenant_clients(mut self, clients: TenantClients) -> Self {
        self.tenant_clients = Some(clients);
        self
    }
}

pub async fn handle(
    deps: &Deps,
    state: &State,
    event: ApiGatewayWebsocketProxyRequest,
) -> Result<ApiGatewayProxyResponse, shared::Error> {
    let (t, sid, cid) = match context::websocket_ids(&event) {
        Ok(ids) => ids,
        Err(e) => {
            // Nothing was admitted under ids that do not parse: acknowledge and log.
            tracing::warn!(error = %e, "disconnect without usable ids; nothing to release");
            return Ok(respond::websocket(&respond::message(400, e.to_string())));
        }
    };
    let scoped = isolation::tenant_deps(state.tenant_clients.as_ref(), deps, &t).await?;
    let deps: &Deps = &scoped;
    let released = match release::disconnect(deps, &t, &sid, &cid).await {
        Ok(r) => r,
        // A key outside the tenant (the key guard): a logged 500, never a panic.
        Err(e) => return Ok(respond::websocket(&respond::guard_refusal(e)?)),
    };
    tracing::info!(tenant = %t, session = %sid, connection = %cid, released, "disconnect");
    let text = if released {
        "released"
    } else {
        "already released"
    };
    Ok(respond::websocket(&respond::message(200, text)))
}
