//! The session HTTP API (HTTP API, payload v2; seed 003 steps 1-2 and 8):
//!
//! - `PUT /session?tenantId=&sessionId=` creates the session or refreshes it
//!   (`sessionTTL = now + tenant.sessionTTL`) and returns it. A stored session that had expired
//!   without DynamoDB deleting it yet is replaced: its stale connections are closed, and the ones
//!   whose close succeeded released.
//!   The ids may also come in a JSON body `{"tenantId": "...", "sessionId": "..."}`.
//! - `GET /session?...` returns the session with its connections (404 if missing or expired).
//! - `DELETE /session?...` deletes it, closes its connections and releases the capacity of those
//!   whose close succeeded (an id answering 410 is left to the reconciler: decision 0306).
//!
//! Bad input never reaches DynamoDB: missing or malformed ids → 400 naming the parameter; a body
//! that is not JSON → 400; unknown tenant or session → 404; other methods → 405; other paths → 404.
//! Budget: PUT 2 calls with a cold tenant cache (1 warm); GET 1; DELETE 1 + 1 UpdateItem (the tenant's
//! count) when the session had connections; plus one Management API DELETE per closed connection.
//!
//! **Whose tenant** (`TURNSTILE_SESSION_API_AUTH`, docs/session-api-auth.md). With `jwt` the
//! caller's tenant is the `TURNSTILE_SESSION_TENANT_CLAIM` claim (default `tenantId`) that API
//! Gateway's JWT authorizer passes in `requestContext.authorizer.jwt.claims`; with `iam` and
//! `TURNSTILE_SESSION_IAM_BINDING=role-session-name` it is the role session name of the caller's
//! assumed-role ARN (`requestContext.authorizer.iam.userArn`). A request naming another tenant (query
//! or body) is refused with 403 problem+json before any DynamoDB call; one naming none acts for the
//! caller's tenant; a caller without a usable claim or session name is refused with 403 (it is
//! authenticated — API Gateway already answered 401 to a missing or invalid token — but bound to no
//! tenant). With `none` (the default, and `iam` without a binding) the tenant is the one named: for
//! trusted callers only.

use std::time::Duration;

use aws_lambda_events::apigw::{ApiGatewayV2httpRequest, ApiGatewayV2httpResponse};
use http::Method;
use serde_json::{json, Value};
use shared::admission::{release, respond};
use shared::config::{ConfigError, Vars};
use shared::function::{Connections, Tenancy};
use shared::gateway::{self, Delivery};
use shared::ids::{SessionId, TenantId};
use shared::refusal::HttpAnswer;
use shared::session::store::{self, Upsert};
use shared::tenant::TenantCache;
use shared::Deps;

/// `TURNSTILE_SESSION_API_AUTH`: how the session API learns its caller's tenant.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Default)]
pub enum Auth {
    /// `none` (default): the tenant named in the request is trusted. For callers that are trusted
    /// with every tenant (the local stack, a private backend).
    #[default]
    None,
    /// `iam`: API Gateway checked a SigV4 signature; the tenant binding is
    /// `TURNSTILE_SESSION_IAM_BINDING`.
    Iam,
    /// `jwt`: API Gateway validated a JWT; the caller's tenant is its tenant claim.
    Jwt,
}

/// `TURNSTILE_SESSION_IAM_BINDING`: how an IAM caller is bound to a tenant. API Gateway passes no
/// principal tags to the function (`requestContext.authorizer.iam` has `accessKey`, `accountId`,
/// `callerId`, `cognitoIdentity`, `principalOrgId`, `userArn`, `userId`), so the binding is read
/// from the caller's ARN.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Default)]
pub enum IamBinding {
    /// `none` (default): any caller IAM lets through acts for the tenant it names.
    #[default]
    None,
    /// `role-session-name`: the caller must be an assumed role; its session name is its tenant (the
    /// role's trust policy pins the session name, e.g. `sts:RoleSessionName` =
    /// `${aws:PrincipalTag/tenantId}`).
    RoleSessionName,
}

pub const AUTH_VAR: &str = "TURNSTILE_SESSION_API_AUTH";
pub const TENANT_CLAIM_VAR: &str = "TURNSTILE_SESSION_TENANT_CLAIM";
pub const IAM_BINDING_VAR: &str = "TURNSTILE_SESSION_IAM_BINDING";
/// The claim read by default (Cognito user pools: `custom:tenantId`).
pub const DEFAULT_TENANT_CLAIM: &str = "tenantId";

#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Config {
    /// `TURNSTILE_TENANT_CACHE_SECS` (default 60).
    pub tenant_cache: Duration,
    /// `TURNSTILE_MANAGEMENT_ENDPOINT` (required): where connections are closed.
    pub management_endpoint: String,
    /// `TURNSTILE_SESSION_API_AUTH`: `none` (default), `iam` or `jwt`, any case.
    pub auth: Auth,
    /// `TURNSTILE_SESSION_TENANT_CLAIM` (default `tenantId`): the JWT claim naming the tenant.
    pub tenant_claim: String,
    /// `TURNSTILE_SESSION_IAM_BINDING`: `none` (default) or `role-session-name`.
    pub iam_binding: IamBinding,
}

fn invalid(var: &str, value: String, reason: &str) -> ConfigError {
    ConfigError::Invalid {
        var: var.to_string(),
        value,
        reason: reason.to_string(),
    }
}

impl Config {
    pub fn from_vars(vars: &Vars) -> Result<Config, ConfigError> {
        let auth = match vars.get(AUTH_VAR) {
            None => Auth::None,
            Some(v) => match v.to_ascii_lowercase().as_str() {
                "none" => Auth::None,
                "iam" => Auth::Iam,
                "jwt" => Auth::Jwt,
                _ => return Err(invalid(AUTH_VAR, v, "expected none, iam or jwt")),
            },
        };
        let tenant_claim = vars.string_or(TENANT_CLAIM_VAR, DEFAULT_TENANT_CLAIM);
        if tenant_claim
            .chars()
            .any(|c| c.is_whitespace() || c.is_control())
        {
            return Err(invalid(
                TENANT_CLAIM_VAR,
                tenant_claim,
                "expected a claim name without spaces (e.g. tenantId or custom:tenantId)",
            ));
        }
        let iam_binding = match vars.get(IAM_BINDING_VAR) {
            None => IamBinding::None,
            Some(v) => match v.to_ascii_lowercase().replace(['-', '_'], "").as_str() {
                "none" => IamBinding::None,
                "rolesessionname" => IamBinding::RoleSessionName,
                _ => {
                    return Err(invalid(
                        IAM_BINDING_VAR,
                        v,
                        "expected none or role-session-name",
                    ))
                }
            },
        };
        Ok(Config {
            tenant_cache: TenantCache::ttl_from_vars(vars)?,
            management_endpoint: gateway::required_endpoint(vars)?,
            auth,
            tenant_claim,
            iam_binding,
        })
    }
}

/// Built once per process, by [`init`].
#[derive(Debug)]
pub struct State {
    pub tenants: TenantCache,
    /// How callers are bound to tenants (from [`Config`]).
    pub auth: Auth,
    pub tenant_claim: String,
    pub iam_binding: IamBinding,
    /// Where the connections of a deleted or replaced session are closed.
    pub connections: Connections,
    pub tenancy: Tenancy,
}

/// What `main.rs`, the local stack and the tests run: [`Config`] from `deps.vars`, the Management
/// API client, and tenant-scoped credentials when `TENANT_ROLE_ARN` is set.
pub async fn init(deps: &Deps) -> Result<State, shared::Error> {
    let config = Config::from_vars(&deps.vars)?;
    Ok(State {
        tenants: TenantCache::new(config.tenant_cache),
        auth: config.auth,
        iam_binding: config.iam_binding,
        connections: Connections::new(deps, &config.management_endpoint).await,
        tenancy: Tenancy::from_deps(deps).await?,
        tenant_claim: config.tenant_claim,
    })
}

/// The route: `/session`, also under a stage prefix (`/prod/session`).
pub fn is_session_path(path: &str) -> bool {
    let p = path.trim_end_matches('/');
    p == "/session" || p.ends_with("/session")
}

/// The tenant the caller is bound to, `None` when it may name any (see the module docs), or the
/// 403 that refuses it.
pub fn caller_tenant(
    state: &State,
    event: &ApiGatewayV2httpRequest,
) -> Result<Option<TenantId>, HttpAnswer> {
    let authorizer = event.request_context.authorizer.as_ref();
    match (state.auth, state.iam_binding) {
        (Auth::None, _) | (Auth::Iam, IamBinding::None) => Ok(None),
        (Auth::Jwt, _) => {
            let claim = &state.tenant_claim;
            let Some(claims) = authorizer.and_then(|a| a.jwt.as_ref()).map(|j| &j.claims) else {
                return Err(respond::forbidden(format!(
                    "the request carries no JWT claims (is the route's JWT authorizer attached?); \
                     the caller's tenant comes from its {claim} claim"
                )));
            };
            let Some(value) = claims.get(claim.as_str()) else {
                return Err(respond::forbidden(format!(
                    "the token has no {claim} claim, so it is bound to no tenant"
                )));
            };
            TenantId::parse(value).map(Some).map_err(|e| {
                respond::forbidden(format!("the token's {claim} claim is not a tenant id: {e}"))
            })
        }
        (Auth::Iam, IamBinding::RoleSessionName) => {
            let arn = authorizer
                .and_then(|a| a.iam.as_ref())
                .and_then(|i| i.user_arn.as_deref())
                .unwrap_or("");
            let Some(session) = assumed_role_session(arn) else {
                return Err(respond::forbidden(format!(
                    "the caller ({arn:?}) is not an assumed role: with {IAM_BINDING_VAR}=\
                     role-session-name the tenant is the caller's role session name"
                )));
            };
            TenantId::parse(session).map(Some).map_err(|e| {
                respond::forbidden(format!(
                    "the caller's role session name is not a tenant id: {e}"
                ))
            })
        }
    }
}

/// `SessionName` of `arn:{partition}:sts::{account}:assumed-role/{RoleName}/{SessionName}`.
fn assumed_role_session(arn: &str) -> Option<&str> {
    let parts: Vec<&str> = arn.splitn(6, ':').collect();
    if parts.len() != 6 || parts[0] != "arn" || parts[2] != "sts" {
        return None;
    }
    let rest = parts[5].strip_prefix("assumed-role/")?;
    let (role, session) = rest.split_once('/')?;
    (!role.is_empty() && !session.is_empty() && !session.contains('/')).then_some(session)
}

/// The tenant and session the request acts on. `bound` is the caller's tenant (see
/// [`caller_tenant`]): it fills a missing `tenantId`, and a different one is refused with 403.
/// Public so it is fuzzed without DynamoDB (tests/integration/fuzz.rs).
pub fn ids(
    event: &ApiGatewayV2httpRequest,
    bound: Option<&TenantId>,
    claim: &str,
) -> Result<(TenantId, SessionId), HttpAnswer> {
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
    let tenant = match (t.as_deref(), bound) {
        (None, Some(own)) => own.clone(),
        (named, own) => {
            let named = TenantId::parse_opt(named).map_err(bad)?;
            if let Some(own) = own.filter(|own| **own != named) {
                return Err(respond::forbidden(format!(
                    "the caller's {claim} is {own}; it may not act for tenant {named}"
                )));
            }
            named
        }
    };
    Ok((tenant, SessionId::parse_opt(s.as_deref()).map_err(bad)?))
}

pub async fn handle(
    deps: &Deps,
    state: &State,
    event: ApiGatewayV2httpRequest,
) -> Result<ApiGatewayV2httpResponse, shared::Error> {
    let answer = match answer(deps, state, &event).await {
        Ok(a) => a,
        // A key outside the tenant (the key guard): a logged 500, never a panic.
        Err(e) => respond::guard_refusal(e)?,
    };
    Ok(respond::http_v2(&answer))
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
    let bound = match caller_tenant(state, event) {
        Ok(bound) => bound,
        Err(refused) => {
            tracing::warn!(method = %method, "session API caller refused: {}", refused.body);
            return Ok(refused);
        }
    };
    let claim = match state.auth {
        Auth::Jwt => format!("{} claim", state.tenant_claim),
        _ => "role session name".to_string(),
    };
    let (t, sid) = match ids(event, bound.as_ref(), &claim) {
        Ok(ids) => ids,
        Err(a) => return Ok(a),
    };
    let scoped = state.tenancy.deps(deps, &t).await?;
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
            let closed = close_and_release(deps, state, t, &stale).await?;
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
    close_and_release(deps, state, t, &old).await?;
    Ok(respond::json_answer(
        200,
        &json!({ "deleted": old, "closed": old.connection_ids }),
    ))
}

/// Closes `ids`, which left the session with the row this call deleted or replaced (1 Management
/// API DELETE each, a failed one tried again), then releases the capacity of the ones whose close
/// succeeded (1 UpdateItem). Closing comes first and a 410 releases nothing: the socket may still
/// be inside its own `$connect` (it answers 410 until its handshake completes) and would go live
/// counted nowhere. An id not closed keeps the count one too high (the safe side) until the
/// reconciler, whose truth no longer holds it, repairs the count (decision 0306). Returns the
/// number closed.
async fn close_and_release(
    deps: &Deps,
    state: &State,
    t: &TenantId,
    session: &shared::session::Session,
) -> Result<usize, shared::Error> {
    let ids = &session.connection_ids;
    if ids.is_empty() {
        return Ok(0);
    }
    let Connections { gateway, endpoint } = &state.connections;
    let closed: Vec<String> = gateway
        .close_each(endpoint, ids)
        .await
        .into_iter()
        .filter_map(|(c, r)| match r {
            Ok(Delivery::Delivered) => Some(c),
            Ok(Delivery::Gone) => {
                tracing::info!(tenant = %t, connection = %c, "close answered 410: not released");
                None
            }
            Err(e) => {
                tracing::warn!(tenant = %t, connection = %c, error = %e, "close failed: not released");
                None
            }
        })
        .collect();
    let released = release::parse_ids(&closed);
    release::left_session(deps, t, &released, session.connection_shards).await?;
    Ok(closed.len())
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn the_session_name_is_read_only_from_assumed_role_arns() {
        let ok = "arn:aws:sts::123456789012:assumed-role/session-api-caller/tenant-a";
        assert_eq!(assumed_role_session(ok), Some("tenant-a"));
        let china = "arn:aws-cn:sts::123456789012:assumed-role/r/t.1";
        assert_eq!(assumed_role_session(china), Some("t.1"));
        for not in [
            "",
            "arn:aws:iam::123456789012:user/ops",
            "arn:aws:iam::123456789012:role/session-api-caller",
            "arn:aws:sts::123456789012:federated-user/bob",
            "arn:aws:sts::123456789012:assumed-role/r/",
            "arn:aws:sts::123456789012:assumed-role/r",
            "arn:aws:sts::123456789012:assumed-role//t",
        ] {
            assert_eq!(assumed_role_session(not), None, "{not}");
        }
    }
}
