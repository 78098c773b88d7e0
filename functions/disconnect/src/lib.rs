//! `$disconnect`: releases the connection exactly once — removes it from the
//! session's `connectionIds`, and only if this call removed it, decrements the tenant's open
//! connections (`shared::admission::release`, decision 0306). A repeated disconnect, or one for a
//! connection already released by pruning, a session delete or the TTL sweeper, changes nothing.
//! Always answers 200 (API Gateway ignores a `$disconnect` answer; it cannot be refused).
//! Budget: 2 UpdateItem, 2 WCU (1 when there was nothing to release).

use aws_lambda_events::apigw::{ApiGatewayProxyResponse, ApiGatewayWebsocketProxyRequest};
use shared::admission::release;
use shared::config::{ConfigError, Vars};
use shared::edge::respond;
use shared::function::{self, Tenancy, WebsocketCaller};
use shared::Deps;

/// This function reads no variables beyond table names.
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub struct Config {}

impl Config {
    pub fn from_vars(_vars: &Vars) -> Result<Config, ConfigError> {
        Ok(Config {})
    }
}

/// Built once per process, by [`init`].
#[derive(Debug, Default)]
pub struct State {
    pub tenancy: Tenancy,
}

/// What `main.rs`, the local stack and the tests run: tenant-scoped credentials when
/// `TENANT_ROLE_ARN` is set, else the execution role.
pub async fn init(deps: &Deps) -> Result<State, shared::Error> {
    let tenancy = Tenancy::from_deps(deps).await?;
    Ok(State { tenancy })
}

pub async fn handle(
    deps: &Deps,
    state: &State,
    event: ApiGatewayWebsocketProxyRequest,
) -> Result<ApiGatewayProxyResponse, shared::Error> {
    let WebsocketCaller {
        tenant: t,
        session: sid,
        connection: cid,
        deps,
    } = match function::websocket_caller(&state.tenancy, deps, &event).await? {
        Ok(caller) => caller,
        Err(e) => {
            // Nothing was admitted under ids that do not parse: acknowledge and log.
            tracing::warn!(error = %e, "disconnect without usable ids; nothing to release");
            return Ok(function::bad_ids(&e));
        }
    };
    let deps: &Deps = &deps;
    let released = match release::disconnect(deps, &t, &sid, &cid).await {
        Ok(r) => r,
        // A key outside the tenant (the key guard): a logged 500, never a panic.
        Err(e) => return Ok(respond::websocket(&respond::guard_refusal(e)?)),
    };
    tracing::info!(tenant = %t, session = %shared::ticket::fingerprint(sid.as_str()), connection = %cid, released, "disconnect");
    let text = if released {
        "released"
    } else {
        "already released"
    };
    Ok(respond::websocket(&respond::message(200, text)))
}
