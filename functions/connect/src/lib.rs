//! `$connect` (seed 003 step 5): admits the connection with two ordered conditional writes — the
//! tenant's counter (open connections and its minute), then the session (its connections, its
//! minute, the TTL refresh) — giving the first back if the second refuses
//! (`shared::admission::connect`, decision 0306).
//!
//! Answers: 200 admitted (or already admitted); 429 over a limit, with a problem+json body naming
//! it and `Retry-After` (via `shared::refusal`); 404 session missing or expired; 400 bad ids;
//! 403 unknown tenant. Budget: 2 DynamoDB calls, 2 WCU (the tenant comes from the authorizer
//! context; a context without limits costs 1 cached tenant read).

use std::time::Duration;

use aws_lambda_events::apigw::{ApiGatewayProxyResponse, ApiGatewayWebsocketProxyRequest};
use shared::admission::connect::{Admission, Hints};
use shared::admission::verdict::{self, Verdict};
use shared::admission::{context, respond};
use shared::config::{ConfigError, Vars};
use shared::isolation::{self, TenantClients};
use shared::tenant::TenantCache;
use shared::Deps;

#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Config {
    /// `TURNSTILE_TENANT_CACHE_SECS`: used only when the authorizer context lacks the limits.
    pub tenant_cache: Duration,
}

impl Config {
    pub fn from_vars(vars: &Vars) -> Result<Config, ConfigError> {
        Ok(Config {
            tenant_cache: TenantCache::ttl_from_vars(vars)?,
        })
    }
}

#[derive(Debug)]
pub struct State {
    pub tenants: TenantCache,
    /// Tenant-scoped DynamoDB clients (`TENANT_ROLE_ARN`); `None` (what [`State::new`] gives) uses
    /// the `Deps` passed to [`handle`] (the execution role). `main.rs` sets it with
    /// [`State::with_tenant_clients`].
    pub tenant_clients: Option<TenantClients>,
    /// What this process last saw of each folded per-minute window (a fixed window's start or a
    /// GCRA TAT), so each write's first bet is usually right.
    pub hints: Hints,
}

impl State {
    pub fn new(config: &Config) -> Self {
        State {
            tenants: TenantCache::new(config.tenant_cache),
            tenant_clients: None,
            hints: Hints::default(),
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
        Err(e) => return Ok(respond::websocket(&respond::message(400, e.to_string()))),
    };
    let scoped = isolation::tenant_deps(state.tenant_clients.as_ref(), deps, &t).await?;
    let deps: &Deps = &scoped;
    let Some(limits) = context::websocket_limits(deps, &state.tenants, &event, &t).await? else {
        return Ok(respond::websocket(&respond::message(
            403,
            format!("tenant {t} does not exist"),
        )));
    };
    let answer = match verdict::connect(deps, &t, &sid, &cid, &limits, &state.hints).await {
        Verdict::Decided(Admission::Admitted | Admission::AlreadyAdmitted) => {
            respond::message(200, format!("connected to session {sid}"))
        }
        // A shadow tenant's would-refuse (logged and metered by `verdict`): admitted.
        Verdict::Shadow {
            admitted: Admission::Admitted | Admission::AlreadyAdmitted,
            ..
        } => respond::message(200, format!("connected to session {sid}")),
        Verdict::Decided(Admission::Refused { limit, refusal }) => {
            tracing::info!(tenant = %t, session = %sid, limit = limit.name(), "connect refused");
            refusal.to_http()
        }
        Verdict::FailedOpen(_) => respond::message(
            200,
            format!("connected to session {sid} (unaccounted: the limiter is unavailable)"),
        ),
        // A key outside the tenant (the key guard): a logged 500, never a panic.
        Verdict::FailedClosed(e @ shared::Error::CrossTenantKey(_)) => respond::guard_refusal(e)?,
        Verdict::FailedClosed(e) => respond::unavailable(&e),
        Verdict::Decided(Admission::NoSession) | Verdict::Shadow { .. } => respond::message(
            404,
            format!("session {sid} of tenant {t} does not exist or has expired"),
        ),
    };
    Ok(respond::websocket(&answer))
}
