//! The session HTTP API (HTTP API, payload v2; seed 003 steps 1-2 and 8):
//!
//! - `PUT /session?tenantId=&sessionId=` creates the session or refreshes it
//!   (`sessionTTL = now + tenant.sessionTTL`) and returns it. A stored session that had expired
//!   without DynamoDB deleting it yet is replaced: its stale connections are closed and released.
//!   The ids may also come in a JSON body `{"tenantId": "...", "sessionId": "..."}`.
//! - `GET /session?...` returns the session with its connections (404 if missing or expired).
//! - `DELETE /session?...` deletes it, closes its connections and releases their capacity.
//!
//! Bad input never reaches DynamoDB: missing or malformed ids → 400 naming the parameter; a body
//! that is not JSON → 400; unknown tenant or session → 404; other methods → 405; other paths → 404.
//! Budget: PUT 2 calls with a cold tenant cache (1 warm); GET 1; DELETE 1 + 1 release transaction
//! when the session had connections; plus one Management API DELETE per closed connection.

use std::time::Duration;

use aws_lambda_events::apigw::{ApiGatewayV2httpRequest, ApiGatewayV2httpResponse};
use http::Method;
use serde_json::{json, Value};
use shared::admission::{release, respond};
use shared::config::{ConfigError, Vars};
use shared::gateway::{self, Gateway};
use shared::ids::{SessionId, TenantId};
use shared::isolation::{self, TenantClients};
use shared::refusal::HttpAnswer;
use shared::session::store::{self, Upsert};
use shared::tenant::TenantCache;
use shared::Deps;

#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Config {
    /// `TURNSTILE_TENANT_CACHE_SECS` (default 60).
    pub tenant_cache: Duration,
    /// `TURNSTILE_MANAGEMENT_ENDPOINT` (required): where connections are closed.
    pub management_endpoint: String,
}

impl Config {
    pub fn from_vars(vars: &Vars) -> Result<Config, ConfigError> {
        Ok(Config {
            tenant_cache: TenantCache::ttl_from_vars(vars)?,
            management_endpoint: gateway::required_endpoint(vars)?,
        })
    }
}

#[derive(Debug)]
pub struct State {
    pub tenants: TenantCache,
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
            tenants: TenantCache::new(config.tenant_cache),
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

/// The route: `/session`, also under a stage prefix (`/prod/session`).
pub fn is_session_path(path: &str) -> bool {
    let p = path.trim_end_matches('/');
    p == "/session" || p.ends_with("/session")
}

/// The ids of a request (query strings, else a JSON body), or the 400 answer. Public so it is
/// fuzzed without DynamoDB (tests/integration/fuzz.rs).
pub fn ids(event: &ApiGatewayV2httpRequest) -> Result<(TenantId, SessionId), HttpAnswer> {
    let q = &event.query_string_parameters;
    let mut t = q.first("tenantId").map(str::to_string);
    let mut s = q.first("sessionId").map(str::to_string);
    if let Some(body) = event.body.as_deref().filter(|b| !b.trim().is_empty()) {
        let v: Value = serde_json::from_str(body).map_err(|e| {
            respond::message(400, format!("the request body is not valid JSON: {e}"))
        })?;
        let Some(obj) = v.as_object() else {
            return Err(respond::message(
                400,
                "the request body must be a JSON object",
            ));
        };
        let field = |name: &str| -> Result<Option<String>, HttpAnswer> {
            match obj.get(name) {
                None | Some(Value::Null) => Ok(None),
                Some(Value::String(s)) => Ok(Some(s.clone())),
                Some(_) => Err(respond::message(400, format!("{name} must be a string"))),
            }
        };
        t = t.or(field("tenantId")?);
        s = s.or(field("sessionId")?);
    }
    let bad = |e: shared::ids::IdError| respond::message(400, e.to_string());
    Ok((
        TenantId::parse_opt(t.as_deref()).map_err(bad)?,
        SessionId::parse_opt(s.as_deref()).map_err(bad)?,
    ))
}

pub async fn handle(
    deps: &Deps,
    state: &State,
    event: ApiGatewayV2httpRequest,
) -> Result<ApiGatewayV2httpResponse, shared::Error> {
    Ok(respond::http_v2(&answer(deps, state, &event).await?))
}

async fn answer(
    deps: &Deps,
    state: &State,
    event: &ApiGatewayV2httpRequest,
) -> Result<HttpAnswer, shared::Error> {
    let path = event
        .raw_path
        .clone()
        .or_else(|| event.request_context.http.path.clone())
        .unwrap_or_default();
    if !is_session_path(&path) {
        return Ok(respond::message(
            404,
            format!("no route for {path}; try /session"),
        ));
    }
    let method = event.request_context.http.method.clone();
    if ![Method::PUT, Method::GET, Method::DELETE].contains(&method) {
        let mut a = respond::message(405, format!("{method} is not allowed on /session"));
        a.headers.push(("Allow", "PUT, GET, DELETE".into()));
        return Ok(a);
    }
    let (t, sid) = match ids(event) {
        Ok(ids) => ids,
        Err(a) => return Ok(a),
    };
    let scoped = isolation::tenant_deps(state.tenant_clients.as_ref(), deps, &t).await?;
    let deps: &Deps = &scoped;
    if method == Method::PUT {
        put(deps, state, &t, &sid).await
    } else if method == Method::GET {
        let now = deps.clock.now().as_secs();
        match store::get(deps, &t, &sid).await? {
            Some(s) if !s.is_expired(now) => Ok(respond::json_answer(200, &json!(s))),
            _ => Ok(not_found(&t, &sid)),
        }
    } else {
        delete(deps, state, &t, &sid).await
    }
}

fn not_found(t: &TenantId, sid: &SessionId) -> HttpAnswer {
    respond::message(404, format!("session {sid} of tenant {t} does not exist"))
}

async fn put(
    deps: &Deps,
    state: &State,
    t: &TenantId,
    sid: &SessionId,
) -> Result<HttpAnswer, shared::Error> {
    let Some(tenant) = state.tenants.get(deps, t).await? else {
        return Ok(respond::message(404, format!("tenant {t} does not exist")));
    };
    let ttl_secs = i64::try_from(tenant.limits.session_ttl).unwrap_or(i64::MAX / 4);
    let ttl = deps.clock.now().as_secs().saturating_add(ttl_secs);
    match store::create_or_refresh(deps, t, sid, ttl).await? {
        Upsert::Live(s) => Ok(respond::json_answer(200, &json!(s))),
        Upsert::Replaced { session, stale } => {
            let closed = close_and_release(deps, state, t, &stale.connection_ids).await?;
            tracing::info!(tenant = %t, session = %sid, closed, "replaced an expired session");
            Ok(respond::json_answer(200, &json!(session)))
        }
    }
}

async fn delete(
    deps: &Deps,
    state: &State,
    t: &TenantId,
    sid: &SessionId,
) -> Result<HttpAnswer, shared::Error> {
    let Some(old) = store::delete(deps, t, sid).await? else {
        return Ok(not_found(t, sid));
    };
    close_and_release(deps, state, t, &old.connection_ids).await?;
    Ok(respond::json_answer(
        200,
        &json!({ "deleted": old, "closed": old.connection_ids }),
    ))
}

/// Releases the capacity of `ids` (1 transaction) and closes them (1 Management API call each).
async fn close_and_release(
    deps: &Deps,
    state: &State,
    t: &TenantId,
    ids: &[String],
) -> Result<usize, shared::Error> {
    if ids.is_empty() {
        return Ok(0);
    }
    release::release(deps, t, None, &release::parse_ids(ids)).await?;
    let failed = state.gateway.close_all(&state.endpoint, ids).await;
    Ok(ids.len() - failed.len())
}
