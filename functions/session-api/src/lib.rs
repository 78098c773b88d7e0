//! The session HTTP API (HTTP API, payload v2; seed 003 steps 1-2 and 8, decision 2100):
//!
//! - `PUT /session?tenantId=&sessionId=` creates the session or refreshes it
//!   (`sessionTTL = now + tenant.sessionTTL`) and returns it with a **connect ticket** (for tenants
//!   whose `connectAuth` is `ticket`, the default). Without a `sessionId` a new one with 128 random
//!   bits is made. A stored session that had expired without DynamoDB deleting it yet is replaced
//!   (a new `sessionNonce`, so old tickets stop working) once its stale sockets, closed first, are
//!   all known gone; until then 503 with `Retry-After` (decision 2208). The ids (and an optional
//!   `subject`, the user the ticket is for) may also come in a JSON body.
//! - `POST /session/ticket?tenantId=&sessionId=` returns a fresh ticket for a live session.
//! - `GET /session?...` returns the session with its connections (404 if missing or expired).
//! - `DELETE /session?...` ends it (its tickets with it), closes its connections and releases the
//!   ones known gone; any other (`closing` in the answer) stays counted in the ended row until its
//!   `$disconnect`, the reconciler or the sweep releases it (decision 2208).
//!
//! Bad input never reaches DynamoDB: missing or malformed ids → 400 naming the parameter; a body
//! that is not JSON → 400; unknown tenant or session → 404; other methods → 405; other paths → 404.
//! Budget: PUT 2 calls with a cold tenant cache (1 warm: a refresh's UpdateItem, or a new session's
//! TransactWriteItems of the row and the tenant's session count; 2 for a named session that does
//! not exist yet; over an expired session 1 UpdateItem + 1 GetItem + 1 TransactWriteItems of the
//! replacement and the connections' release); POST ticket 1 GetItem (+1 cold tenant); GET 1;
//! DELETE 1 GetItem + 1 TransactWriteItems (the row and the session count, 4 WCU), and when the
//! session had connections 1 TransactWriteItems more (the end mark) before the closes; plus one
//! Management API DELETE per connection. Minting a ticket makes no call.
//!
//! **Sessions per tenant** (`maxSessions`, decision 2204): a `PUT` that would create a session
//! past the cap answers 429 problem+json naming `maxSessions` (`Retry-After: 10`, a pace: the cap
//! frees when a session is deleted or expires); refreshing a live session is never refused.
//!
//! **Whose tenant** (docs/session-api-auth.md). JWT claims always bind: a request carrying them
//! (`requestContext.authorizer.jwt.claims`) acts only for the tenant in its
//! `TURNSTILE_SESSION_TENANT_CLAIM` claim, whatever `TURNSTILE_SESSION_API_AUTH` says. Otherwise
//! `jwt` refuses (no claims: the route's authorizer is missing); `iam` binds the caller's role
//! session name, checked against the role `TURNSTILE_SESSION_IAM_ROLE_ARN` names, unless
//! `TURNSTILE_SESSION_IAM_BINDING=any-tenant` says by name that IAM callers are trusted with every
//! tenant; `none` (trusted callers only, named explicitly: there is no default) takes the tenant
//! the request names. A request naming another tenant is refused with 403 problem+json before any
//! DynamoDB call; one naming none acts for the caller's tenant.

use std::time::Duration;

use aws_lambda_events::apigw::{ApiGatewayV2httpRequest, ApiGatewayV2httpResponse};
use http::Method;
use serde_json::{json, Value};
use shared::admission::sessions::{self, Opened};
use shared::admission::Limit;
use shared::admission::{closing, respond};
use shared::config::{ConfigError, Vars};
use shared::function::{Connections, Tenancy};
use shared::gateway;
use shared::ids::{SessionId, TenantId};
use shared::refusal::HttpAnswer;
use shared::session::store;
use shared::session::Session;
use shared::tenant::{ConnectAuth, TenantCache};
use shared::ticket::source::{KeyConfig, KeySource};
use shared::ticket::{self, fingerprint, KeySet};
use shared::Deps;

/// `TURNSTILE_SESSION_API_AUTH`: how the session API learns its caller's tenant. Required: the
/// permissive choice exists only when named.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Auth {
    /// `none`: a request without JWT claims acts for the tenant it names. For callers trusted with
    /// every tenant (the local stack, a private backend).
    None,
    /// `iam`: API Gateway checked a SigV4 signature; the tenant binding is
    /// `TURNSTILE_SESSION_IAM_BINDING`.
    Iam,
    /// `jwt`: API Gateway validated a JWT; the caller's tenant is its tenant claim.
    Jwt,
}

/// The role whose session names are tenant ids (`TURNSTILE_SESSION_IAM_ROLE_ARN`).
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct CallerRole {
    pub account: String,
    /// The role's name (its path is not part of an assumed-role ARN).
    pub name: String,
}

/// `TURNSTILE_SESSION_IAM_BINDING`: how an IAM caller is bound to a tenant. API Gateway passes no
/// principal tags to the function (`requestContext.authorizer.iam` has `accessKey`, `accountId`,
/// `callerId`, `cognitoIdentity`, `principalOrgId`, `userArn`, `userId`), so the binding is read
/// from the caller's ARN.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum IamBinding {
    /// `role-session-name` (default): the caller must be a session of [`CallerRole`]; its session
    /// name is its tenant (the role's trust policy pins it: `sts:RoleSessionName` =
    /// `${aws:PrincipalTag/tenantId}`).
    RoleSessionName(CallerRole),
    /// `any-tenant`: any caller IAM lets through acts for the tenant it names.
    AnyTenant,
}

pub const AUTH_VAR: &str = "TURNSTILE_SESSION_API_AUTH";
pub const TENANT_CLAIM_VAR: &str = "TURNSTILE_SESSION_TENANT_CLAIM";
pub const IAM_BINDING_VAR: &str = "TURNSTILE_SESSION_IAM_BINDING";
pub const IAM_ROLE_VAR: &str = "TURNSTILE_SESSION_IAM_ROLE_ARN";
/// Seconds a connect ticket lives (default 60, at most 3600).
pub const TICKET_TTL_VAR: &str = "TURNSTILE_TICKET_TTL_SECS";
/// The claim read by default (Cognito user pools: `custom:tenantId`).
pub const DEFAULT_TENANT_CLAIM: &str = "tenantId";

#[derive(Debug, Clone, PartialEq)]
pub struct Config {
    /// `TURNSTILE_TENANT_CACHE_SECS` (default 60).
    pub tenant_cache: Duration,
    /// `TURNSTILE_MANAGEMENT_ENDPOINT` (required): where connections are closed.
    pub management_endpoint: String,
    /// `TURNSTILE_SESSION_API_AUTH` (required): `none`, `iam` or `jwt`, any case.
    pub auth: Auth,
    /// `TURNSTILE_SESSION_TENANT_CLAIM` (default `tenantId`): the JWT claim naming the tenant.
    pub tenant_claim: String,
    /// `TURNSTILE_SESSION_IAM_BINDING` (`role-session-name`, the default, with
    /// `TURNSTILE_SESSION_IAM_ROLE_ARN`; or `any-tenant`). Read only with `iam`.
    pub iam_binding: Option<IamBinding>,
    /// `TURNSTILE_TICKET_TTL_SECS` (default 60).
    pub ticket_ttl: Duration,
    /// The keys tickets are signed with.
    pub tickets: KeyConfig,
}

fn invalid(var: &str, value: String, reason: &str) -> ConfigError {
    ConfigError::Invalid {
        var: var.to_string(),
        value,
        reason: reason.to_string(),
    }
}

/// `(account, role name)` of `arn:{partition}:iam::{account}:role/{path/}{name}`.
fn role_arn(arn: &str) -> Option<CallerRole> {
    let parts: Vec<&str> = arn.splitn(6, ':').collect();
    if parts.len() != 6 || parts[0] != "arn" || parts[2] != "iam" {
        return None;
    }
    let account = parts[4];
    if account.len() != 12 || !account.chars().all(|c| c.is_ascii_digit()) {
        return None;
    }
    let name = parts[5].strip_prefix("role/")?.rsplit('/').next()?;
    (!name.is_empty()).then(|| CallerRole {
        account: account.to_string(),
        name: name.to_string(),
    })
}

impl Config {
    pub fn from_vars(vars: &Vars) -> Result<Config, ConfigError> {
        let management_endpoint = gateway::required_endpoint(vars)?;
        let auth = match vars.get(AUTH_VAR) {
            None => {
                return Err(ConfigError::Missing {
                    var: AUTH_VAR.into(),
                    hint: "jwt (a JWT authorizer on the routes), iam (SigV4, bound by \
                           TURNSTILE_SESSION_IAM_BINDING), or none (callers trusted with every \
                           tenant)"
                        .into(),
                })
            }
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
        // Read in every mode (a stack's template sets them whatever the mode), used with `iam`.
        let binding = iam_binding(vars, auth == Auth::Iam)?;
        let iam_binding = (auth == Auth::Iam).then_some(binding).flatten();
        let ticket_ttl = vars.secs_or(TICKET_TTL_VAR, ticket::DEFAULT_TTL)?;
        if ticket_ttl.is_zero() || ticket_ttl > ticket::MAX_TTL {
            return Err(invalid(
                TICKET_TTL_VAR,
                ticket_ttl.as_secs().to_string(),
                "expected 1 to 3600 seconds (a ticket is a bearer grant: keep it short)",
            ));
        }
        Ok(Config {
            tenant_cache: TenantCache::ttl_from_vars(vars)?,
            management_endpoint,
            auth,
            tenant_claim,
            iam_binding,
            ticket_ttl,
            tickets: KeyConfig::from_vars(vars)?,
        })
    }
}

/// The IAM binding the variables name; `None` for `role-session-name` without a role when the mode
/// is not `iam` (`required`: it is, and the role must be named).
fn iam_binding(vars: &Vars, required: bool) -> Result<Option<IamBinding>, ConfigError> {
    let named = vars.string_or(IAM_BINDING_VAR, "role-session-name");
    let role = vars.get(IAM_ROLE_VAR).filter(|r| !r.is_empty());
    match named.to_ascii_lowercase().replace('_', "-").as_str() {
        "any-tenant" => Ok(Some(IamBinding::AnyTenant)),
        "role-session-name" => match role {
            Some(arn) => role_arn(&arn)
                .map(|r| Some(IamBinding::RoleSessionName(r)))
                .ok_or_else(|| {
                    invalid(
                        IAM_ROLE_VAR,
                        arn,
                        "expected an IAM role ARN (arn:aws:iam::123456789012:role/name)",
                    )
                }),
            None if required => Err(ConfigError::Missing {
                var: IAM_ROLE_VAR.into(),
                hint: "the ARN of the role whose session names are tenant ids (the template's \
                       SessionCallerRole), or TURNSTILE_SESSION_IAM_BINDING=any-tenant"
                    .into(),
            }),
            None => Ok(None),
        },
        "none" => Err(invalid(
            IAM_BINDING_VAR,
            named,
            "`none` was renamed: say any-tenant to let every IAM caller act for any tenant",
        )),
        _ => Err(invalid(
            IAM_BINDING_VAR,
            named,
            "expected role-session-name or any-tenant",
        )),
    }
}

/// Built once per process, by [`init`].
#[derive(Debug)]
pub struct State {
    pub tenants: TenantCache,
    /// How callers are bound to tenants (from [`Config`]).
    pub auth: Auth,
    pub tenant_claim: String,
    pub iam_binding: Option<IamBinding>,
    /// Where the connections of a deleted or replaced session are closed.
    pub connections: Connections,
    pub tenancy: Tenancy,
    /// The keys connect tickets are signed with, and how long a ticket lives.
    pub tickets: KeySource,
    pub ticket_ttl: Duration,
}

/// What `main.rs`, the local stack and the tests run: [`Config`] from `deps.vars`, the Management
/// API client, the ticket keys (read once here), and tenant-scoped credentials when
/// `TENANT_ROLE_ARN` is set.
pub async fn init(deps: &Deps) -> Result<State, shared::Error> {
    let config = Config::from_vars(&deps.vars)?;
    Ok(State {
        tenants: TenantCache::new(config.tenant_cache),
        auth: config.auth,
        iam_binding: config.iam_binding,
        connections: Connections::new(deps, &config.management_endpoint).await,
        tenancy: Tenancy::from_deps(deps).await?,
        tenant_claim: config.tenant_claim,
        tickets: KeySource::new(config.tickets, &deps.vars, deps.clock.now()).await?,
        ticket_ttl: config.ticket_ttl,
    })
}

/// The two resources.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Route {
    /// `/session`: PUT, GET, DELETE.
    Session,
    /// `/session/ticket`: POST.
    Ticket,
}

/// The route of a path, also under a stage prefix (`/prod/session`).
pub fn route(path: &str) -> Option<Route> {
    let p = path.trim_end_matches('/');
    if p == "/session/ticket" || p.ends_with("/session/ticket") {
        Some(Route::Ticket)
    } else if p == "/session" || p.ends_with("/session") {
        Some(Route::Session)
    } else {
        None
    }
}

/// The tenant the caller is bound to, `None` when it may name any (see the module docs), or the
/// 403 that refuses it.
pub fn caller_tenant(
    state: &State,
    event: &ApiGatewayV2httpRequest,
) -> Result<Option<TenantId>, HttpAnswer> {
    let authorizer = event.request_context.authorizer.as_ref();
    let claim = &state.tenant_claim;
    // JWT claims bind in every mode: a route with a JWT authorizer never acts for another tenant.
    if let Some(claims) = authorizer.and_then(|a| a.jwt.as_ref()).map(|j| &j.claims) {
        let Some(value) = claims.get(claim.as_str()) else {
            return Err(respond::forbidden(format!(
                "the token has no {claim} claim, so it is bound to no tenant"
            )));
        };
        return TenantId::parse(value).map(Some).map_err(|e| {
            respond::forbidden(format!("the token's {claim} claim is not a tenant id: {e}"))
        });
    }
    match (state.auth, &state.iam_binding) {
        (Auth::None, _) => Ok(None),
        (Auth::Jwt, _) => Err(respond::forbidden(format!(
            "the request carries no JWT claims (is the route's JWT authorizer attached?); \
             the caller's tenant comes from its {claim} claim"
        ))),
        (Auth::Iam, binding) => {
            let Some(iam) = authorizer.and_then(|a| a.iam.as_ref()) else {
                return Err(respond::forbidden(
                    "the request carries no IAM identity (is the route's AWS_IAM authorization \
                     attached?)",
                ));
            };
            let role = match binding {
                Some(IamBinding::RoleSessionName(role)) => role,
                Some(IamBinding::AnyTenant) | None => return Ok(None),
            };
            let arn = iam.user_arn.as_deref().unwrap_or("");
            let Some((account, name, session)) = assumed_role(arn) else {
                return Err(respond::forbidden(format!(
                    "the caller ({arn:?}) is not an assumed role: with {IAM_BINDING_VAR}=\
                     role-session-name the tenant is the session name of role {}",
                    role.name
                )));
            };
            if account != role.account || name != role.name {
                return Err(respond::forbidden(format!(
                    "the caller is a session of role {name} in account {account}; only sessions \
                     of role {} in account {} are bound to a tenant by their name",
                    role.name, role.account
                )));
            }
            TenantId::parse(session).map(Some).map_err(|e| {
                respond::forbidden(format!(
                    "the caller's role session name is not a tenant id: {e}"
                ))
            })
        }
    }
}

/// `(account, RoleName, SessionName)` of
/// `arn:{partition}:sts::{account}:assumed-role/{RoleName}/{SessionName}`.
fn assumed_role(arn: &str) -> Option<(&str, &str, &str)> {
    let parts: Vec<&str> = arn.splitn(6, ':').collect();
    if parts.len() != 6 || parts[0] != "arn" || parts[2] != "sts" {
        return None;
    }
    let rest = parts[5].strip_prefix("assumed-role/")?;
    let (role, session) = rest.split_once('/')?;
    (!role.is_empty() && !session.is_empty() && !session.contains('/'))
        .then_some((parts[4], role, session))
}

/// What a request names: the tenant, the session (absent: `PUT` makes one), and the subject a
/// ticket is for.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Target {
    pub tenant: TenantId,
    pub session: Option<SessionId>,
    pub subject: Option<String>,
}

/// The [`Target`] of a request. `bound` is the caller's tenant (see [`caller_tenant`]): it fills a
/// missing `tenantId`, and a different one is refused with 403. Public so it is fuzzed without
/// DynamoDB (tests/integration/fuzz.rs).
pub fn target(
    event: &ApiGatewayV2httpRequest,
    bound: Option<&TenantId>,
    claim: &str,
) -> Result<Target, HttpAnswer> {
    let q = &event.query_string_parameters;
    let mut t = q.first("tenantId").map(str::to_string);
    let mut s = q.first("sessionId").map(str::to_string);
    let mut subject = q.first("subject").map(str::to_string);
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
        subject = subject.or(field("subject")?);
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
    if let Some(subject) = &subject {
        ticket::check_subject(subject).map_err(|e| respond::message(400, e))?;
    }
    Ok(Target {
        tenant,
        session: s
            .as_deref()
            .map(SessionId::parse)
            .transpose()
            .map_err(bad)?,
        subject,
    })
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
    let Some(route) = route(&path) else {
        return Ok(respond::message(
            404,
            format!("no route for {path}; try /session or /session/ticket"),
        ));
    };
    let method = event.request_context.http.method.clone();
    let allowed: &[Method] = match route {
        Route::Session => &[Method::PUT, Method::GET, Method::DELETE],
        Route::Ticket => &[Method::POST],
    };
    if !allowed.contains(&method) {
        let mut a = respond::message(405, format!("{method} is not allowed on {path}"));
        let names: Vec<&str> = allowed.iter().map(Method::as_str).collect();
        a.headers.push(("Allow", names.join(", ")));
        return Ok(a);
    }
    let bound = match caller_tenant(state, event) {
        Ok(bound) => bound,
        Err(refused) => {
            tracing::warn!(method = %method, "session API caller refused: {}", refused.body);
            return Ok(refused);
        }
    };
    let has_claims = event
        .request_context
        .authorizer
        .as_ref()
        .is_some_and(|a| a.jwt.is_some());
    let claim = if has_claims {
        format!("{} claim", state.tenant_claim)
    } else {
        "role session name".to_string()
    };
    let target = match target(event, bound.as_ref(), &claim) {
        Ok(target) => target,
        Err(a) => return Ok(a),
    };
    let t = target.tenant.clone();
    let scoped = state.tenancy.deps(deps, &t).await?;
    let deps: &Deps = &scoped;
    if method == Method::PUT {
        return put(deps, state, target).await;
    }
    let Some(sid) = target.session.clone() else {
        return Ok(respond::message(400, "sessionId is missing"));
    };
    if method == Method::POST {
        ticket_for(deps, state, &target, &sid).await
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

/// The session as the API returns it, with a fresh ticket when the tenant connects with tickets.
fn with_ticket(
    deps: &Deps,
    state: &State,
    keys: &KeySet,
    session: &Session,
    auth: ConnectAuth,
    subject: Option<String>,
) -> Result<Value, shared::Error> {
    let mut v = json!(session);
    v["connectAuth"] = json!(auth.as_str());
    if auth != ConnectAuth::Ticket {
        return Ok(v);
    }
    let Some(nonce) = session.nonce.clone() else {
        return Err(shared::Error::Other(format!(
            "session {} has no sessionNonce after a write that sets it",
            fingerprint(&session.session_id)
        )));
    };
    let expires_at = deps
        .clock
        .now()
        .as_secs()
        .saturating_add(state.ticket_ttl.as_secs() as i64);
    let claims = ticket::Claims {
        tenant: TenantId::parse(&session.tenant_id)?,
        session: SessionId::parse(&session.session_id)?,
        nonce,
        expires_at,
        subject,
    };
    v["ticket"] = json!(ticket::mint(keys, &claims));
    v["ticketExpiresAt"] = json!(expires_at);
    Ok(v)
}

async fn put(deps: &Deps, state: &State, target: Target) -> Result<HttpAnswer, shared::Error> {
    let t = &target.tenant;
    let Some(tenant) = state.tenants.get(deps, t).await? else {
        return Ok(respond::message(404, format!("tenant {t} does not exist")));
    };
    let keys = state.tickets.keys(deps.clock.now()).await?;
    let (sid, new) = match target.session {
        Some(sid) => (sid, false),
        None => (shared::session::new_id()?, true),
    };
    let ttl_secs = i64::try_from(tenant.limits.session_ttl).unwrap_or(i64::MAX / 4);
    let now = deps.clock.now();
    let ttl = now.as_secs().saturating_add(ttl_secs);
    let cap = tenant.limits.session_cap();
    let session = match sessions::open(deps, t, &sid, ttl, cap, new, &state.connections).await? {
        Opened::Live(s) => s,
        Opened::Replaced { session, stale } => {
            let (fp, closed) = (fingerprint(sid.as_str()), stale.connection_ids.len());
            tracing::info!(tenant = %t, session = %fp, closed, "replaced an expired session");
            session
        }
        Opened::Closing { pending } => return Ok(still_closing(t, &sid, &pending)),
        Opened::Full { cap } => {
            tracing::info!(tenant = %t, cap, "session refused: maxSessions");
            let who = format!("tenant {t}");
            return Ok(Limit::MaxSessions
                .refusal(&tenant.limits, now, &who)
                .to_http());
        }
    };
    let auth = tenant.limits.connect_auth;
    let body = with_ticket(deps, state, &keys, &session, auth, target.subject)?;
    Ok(respond::json_answer(200, &body))
}

/// `POST /session/ticket`: 1 GetItem (strongly consistent), +1 with a cold tenant cache.
async fn ticket_for(
    deps: &Deps,
    state: &State,
    target: &Target,
    sid: &SessionId,
) -> Result<HttpAnswer, shared::Error> {
    let t = &target.tenant;
    let Some(tenant) = state.tenants.get(deps, t).await? else {
        return Ok(respond::message(404, format!("tenant {t} does not exist")));
    };
    let auth = tenant.limits.connect_auth;
    if auth != ConnectAuth::Ticket {
        return Ok(respond::message(
            409,
            format!("tenant {t} connects with connectAuth={auth}, not with tickets"),
        ));
    }
    let now = deps.clock.now();
    let session = match store::get(deps, t, sid).await? {
        Some(s) if !s.is_expired(now.as_secs()) => s,
        _ => return Ok(not_found(t, sid)),
    };
    if session.nonce.is_none() {
        return Ok(respond::message(
            409,
            format!(
                "session {sid} was created before connect tickets; PUT /session refreshes it \
                 and returns a ticket"
            ),
        ));
    }
    let keys = state.tickets.keys(now).await?;
    let mut body = with_ticket(deps, state, &keys, &session, auth, target.subject.clone())?;
    if let Value::Object(m) = &mut body {
        m.retain(|k, _| {
            ["tenantId", "sessionId", "ticket", "ticketExpiresAt"].contains(&k.as_str())
        });
    }
    Ok(respond::json_answer(200, &body))
}

/// `DELETE`: `shared::admission::closing::delete` ends the session, closes its sockets and
/// releases the ones known gone; the others stay counted in the ended row (`closing`).
async fn delete(
    deps: &Deps,
    state: &State,
    t: &TenantId,
    sid: &SessionId,
) -> Result<HttpAnswer, shared::Error> {
    let Some(ended) = closing::delete(deps, t, sid, &state.connections).await? else {
        return Ok(not_found(t, sid));
    };
    Ok(respond::json_answer(
        200,
        &json!({ "deleted": ended.session, "closed": ended.closed, "closing": ended.closing }),
    ))
}

/// 503: the expired session `PUT` names still has sockets not known gone (decision 2208).
fn still_closing(t: &TenantId, sid: &SessionId, pending: &[String]) -> HttpAnswer {
    let wait = closing::MIN_GRACE.as_secs();
    let mut a = respond::problem(
        503,
        "Service Unavailable",
        format!(
            "session {sid} of tenant {t} expired and {} of its connections are still closing; \
             try again in {wait} s",
            pending.len()
        ),
    );
    a.headers.push(("Retry-After", wait.to_string()));
    a
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn the_session_name_is_read_only_from_assumed_role_arns() {
        let ok = "arn:aws:sts::123456789012:assumed-role/session-api-caller/tenant-a";
        assert_eq!(
            assumed_role(ok),
            Some(("123456789012", "session-api-caller", "tenant-a"))
        );
        let china = "arn:aws-cn:sts::123456789012:assumed-role/r/t.1";
        assert_eq!(assumed_role(china).map(|a| a.2), Some("t.1"));
        for not in [
            "",
            "arn:aws:iam::123456789012:user/ops",
            "arn:aws:iam::123456789012:role/session-api-caller",
            "arn:aws:sts::123456789012:federated-user/bob",
            "arn:aws:sts::123456789012:assumed-role/r/",
            "arn:aws:sts::123456789012:assumed-role/r",
            "arn:aws:sts::123456789012:assumed-role//t",
        ] {
            assert_eq!(assumed_role(not), None, "{not}");
        }
    }

    #[test]
    fn the_caller_role_is_read_from_a_role_arn_without_its_path() {
        let r = role_arn("arn:aws:iam::123456789012:role/svc/session-caller").unwrap();
        assert_eq!(
            (r.account.as_str(), r.name.as_str()),
            ("123456789012", "session-caller")
        );
        assert!(role_arn("arn:aws:iam::1234:role/x").is_none());
        assert!(role_arn("arn:aws:sts::123456789012:assumed-role/x/y").is_none());
    }

    #[test]
    fn routes_are_the_session_and_its_ticket() {
        assert_eq!(route("/session"), Some(Route::Session));
        assert_eq!(route("/prod/session/"), Some(Route::Session));
        assert_eq!(route("/session/ticket"), Some(Route::Ticket));
        assert_eq!(route("/sessions"), None);
    }
}
