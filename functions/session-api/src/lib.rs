//! The session HTTP API (HTTP API, payload v2; decision 2100):
//!
//! - `PUT /session?tenantId=&sessionId=` creates the session or refreshes it
//!   (`sessionTTL = now + tenant.sessionTTL`) and returns it with a **connect ticket** (for tenants
//!   whose `connectAuth` is `ticket`, the default). Without a `sessionId` a new one with 128 random
//!   bits is made. A stored session that had expired without DynamoDB deleting it yet is replaced
//!   (a new `sessionNonce`, so old tickets stop working) once its stale sockets, closed first, are
//!   all known gone; until then 503 with `Retry-After` (decision 2208). The ids (and a backend's
//!   optional `subject`, the user the ticket is for, and `connects`, how many connects the ticket
//!   admits) may also come in a JSON body.
//! - `POST /session/ticket?tenantId=&sessionId=` returns a fresh ticket for a live session.
//! - `GET /session?...` returns the session with its connections (404 if missing or expired).
//! - `DELETE /session?...` ends it (its tickets with it), closes its connections and releases the
//!   ones known gone; any other (`closing` in the answer) stays counted in the ended row until its
//!   `$disconnect`, the reconciler or the sweep releases it (decision 2208).
//!
//! Bad input never reaches DynamoDB: missing or malformed ids → 400 naming the parameter; a body
//! that is not JSON → 400, one over 16 KiB (`request::MAX_BODY`) → 413; unknown tenant or session
//! → 404; other methods → 405; other paths → 404.
//! Budget: PUT 2 calls with a cold tenant cache (1 warm: a refresh's UpdateItem, or a new session's
//! TransactWriteItems of the row and the tenant's session count; 2 for a named session that does
//! not exist yet; over an expired session 1 UpdateItem + 1 GetItem + 1 TransactWriteItems of the
//! replacement and the connections' release); POST ticket 1 GetItem (+1 cold tenant); GET 1;
//! DELETE 1 GetItem + 1 TransactWriteItems (the row and the session count(s), 4 WCU, 6 with an
//! owner), and when the session had connections 1 TransactWriteItems more (the end mark) before
//! the closes; plus one Management API DELETE per connection. Minting a ticket makes no call.
//!
//! **Sessions per tenant** (`maxSessions`, decision 2204): a `PUT` that would create a session
//! past the cap answers 429 problem+json naming `maxSessions` (`Retry-After: 10`, a pace: the cap
//! frees when a session is deleted or expires); refreshing a live session is never refused. A
//! signed-in user's creates are also held to `maxSessionsPerSubject` (decision 3602).
//!
//! **Whose session** (decision 3602, [`caller`]). A backend (no JWT claims) acts on every session
//! of its tenant and chooses a ticket's `subject` and `connects` (1 by default, at most
//! `connectionsPerSession`). A signed-in user (JWT claims) owns the sessions it creates (its
//! `sub`, the row's `owner`): another user's session answers 404 as a missing one would, on every
//! route; its tickets are for its `sub` and admit 1 connect (naming another subject or more
//! connects is 403). A user holding `TURNSTILE_SESSION_ADMIN_CLAIM` reaches every session of its
//! tenant.
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

mod caller;
mod request;

use std::time::Duration;

use aws_lambda_events::apigw::{ApiGatewayV2httpRequest, ApiGatewayV2httpResponse};
use http::Method;
use serde_json::{json, Value};
use shared::admission::closing;
use shared::admission::sessions::{self, Opened};
use shared::admission::Limit;
use shared::config::{ConfigError, Vars};
use shared::edge::respond;
use shared::function::{Connections, Tenancy};
use shared::gateway;
use shared::ids::{SessionId, TenantId};
use shared::refusal::HttpAnswer;
use shared::session::store;
use shared::session::Session;
use shared::tenant::{ConnectAuth, Tenant, TenantCache};
use shared::ticket::source::{KeyConfig, KeySource};
use shared::ticket::{self, fingerprint, KeySet};
use shared::Deps;

use caller::invalid;
pub use caller::{
    authenticate, caller, caller_tenant, AdminClaim, Auth, Binding, Caller, CallerRole, IamBinding,
    ADMIN_CLAIM_VAR, AUTH_VAR, IAM_BINDING_VAR, IAM_ROLE_VAR, TENANT_CLAIM_VAR,
};
pub use request::{target, Target, CONNECTS};

/// Seconds a connect ticket lives (default 60, at most 3600).
pub const TICKET_TTL_VAR: &str = "TURNSTILE_TICKET_TTL_SECS";
/// The claim read by default (Cognito user pools: `custom:tenantId`).
pub const DEFAULT_TENANT_CLAIM: &str = shared::caller::DEFAULT_TENANT_CLAIM;

#[derive(Debug, Clone, PartialEq)]
pub struct Config {
    /// `TURNSTILE_TENANT_CACHE_SECS` (default 60).
    pub tenant_cache: Duration,
    /// `TURNSTILE_MANAGEMENT_ENDPOINT` (required): where connections are closed.
    pub management_endpoint: String,
    /// How callers are bound to tenants: `TURNSTILE_SESSION_API_AUTH` (required: `none`, `iam` or
    /// `jwt`), `TURNSTILE_SESSION_TENANT_CLAIM` (default `tenantId`),
    /// `TURNSTILE_SESSION_IAM_BINDING` (`role-session-name`, the default, with
    /// `TURNSTILE_SESSION_IAM_ROLE_ARN`; or `any-tenant`; read only with `iam`).
    pub binding: Binding,
    /// `TURNSTILE_TICKET_TTL_SECS` (default 60).
    pub ticket_ttl: Duration,
    /// The keys tickets are signed with.
    pub tickets: KeyConfig,
    /// `TURNSTILE_SESSION_ADMIN_CLAIM` (unset: no admins): the JWT claim of a tenant admin.
    pub admin_claim: Option<AdminClaim>,
}

impl Config {
    pub fn from_vars(vars: &Vars) -> Result<Config, ConfigError> {
        let management_endpoint = gateway::required_endpoint(vars)?;
        let binding = Binding::from_vars(vars, shared::caller::CallerVars::SESSION)?;
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
            binding,
            ticket_ttl,
            tickets: KeyConfig::from_vars(vars)?,
            admin_claim: AdminClaim::from_vars(vars)?,
        })
    }
}

/// Built once per process, by [`init`].
#[derive(Debug)]
pub struct State {
    pub tenants: TenantCache,
    /// How callers are bound to tenants (from [`Config`]).
    pub binding: Binding,
    /// The JWT claim that makes a signed-in user a tenant admin.
    pub admin_claim: Option<AdminClaim>,
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
        binding: config.binding,
        connections: Connections::new(deps, &config.management_endpoint).await,
        tenancy: Tenancy::from_deps(deps).await?,
        admin_claim: config.admin_claim,
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

pub async fn handle(
    deps: &Deps,
    state: &State,
    event: ApiGatewayV2httpRequest,
) -> Result<ApiGatewayV2httpResponse, shared::Error> {
    respond::http_v2_guarded(answer(deps, state, event).await)
}

async fn answer(
    deps: &Deps,
    state: &State,
    event: ApiGatewayV2httpRequest,
) -> Result<HttpAnswer, shared::Error> {
    let path = respond::http_v2_path(&event);
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
    let (target, who) = match authenticate(state, &event, &method) {
        Ok(authenticated) => authenticated,
        Err(refused) => return Ok(refused),
    };
    let ask = match Ask::of(&who, &target) {
        Ok(ask) => ask,
        Err(refused) if method == Method::PUT || method == Method::POST => return Ok(refused),
        // GET and DELETE mint nothing: what a ticket would be is not theirs to refuse.
        Err(_) => Ask::default(),
    };
    let t = target.tenant.clone();
    let scoped = state.tenancy.deps(deps, &t).await?;
    let deps: &Deps = &scoped;
    if method == Method::PUT {
        return match asked_tenant(deps, state, &t, &ask).await? {
            Ok(tenant) => put(deps, state, target, tenant, &who, &ask).await,
            Err(refused) => Ok(refused),
        };
    }
    let Some(sid) = target.session.clone() else {
        return Ok(respond::message(400, "sessionId is missing"));
    };
    if method == Method::POST {
        match asked_tenant(deps, state, &t, &ask).await? {
            Ok(tenant) => ticket_for(deps, state, &tenant, &sid, &who, &ask).await,
            Err(refused) => Ok(refused),
        }
    } else if method == Method::GET {
        let now = deps.clock.now().as_secs();
        match store::get(deps, &t, &sid).await? {
            Some(s) if !s.is_expired(now) && s.reached_by(who.own()) => {
                Ok(respond::json_answer(200, &json!(s)))
            }
            _ => Ok(not_found(&t, &sid)),
        }
    } else {
        delete(deps, state, &t, &sid, who.own()).await
    }
}

/// What a ticket minted for a request says: whose it is (the subject) and how many connects it
/// admits.
#[derive(Debug, Clone, PartialEq, Eq)]
struct Ask {
    subject: Option<String>,
    connects: u64,
}

impl Default for Ask {
    fn default() -> Ask {
        Ask {
            subject: None,
            connects: ticket::DEFAULT_CONNECTS,
        }
    }
}

impl Ask {
    /// A backend's choice, or for a signed-in user its own `sub` and one connect: a user naming
    /// another subject or more connects is refused (403), never silently given less.
    fn of(who: &Caller, target: &Target) -> Result<Ask, HttpAnswer> {
        let Caller::User { sub, .. } = who else {
            return Ok(Ask {
                subject: target.subject.clone(),
                connects: target.connects.unwrap_or(ticket::DEFAULT_CONNECTS),
            });
        };
        if target.subject.as_ref().is_some_and(|s| s != sub) {
            return Err(respond::forbidden(format!(
                "a signed-in user's tickets are for its own sub ({sub}); the request names \
                 another subject"
            )));
        }
        if target
            .connects
            .is_some_and(|c| c != ticket::DEFAULT_CONNECTS)
        {
            return Err(respond::forbidden(format!(
                "a signed-in user's ticket admits {} connect; only a backend may ask for more \
                 ({CONNECTS})",
                ticket::DEFAULT_CONNECTS
            )));
        }
        Ok(Ask {
            subject: Some(sub.clone()),
            connects: ticket::DEFAULT_CONNECTS,
        })
    }

    /// 400 when the tenant's sessions cannot hold the connects asked for.
    fn over(&self, limits: &shared::tenant::Limits) -> Option<HttpAnswer> {
        let most = limits.connections_per_session.max(1);
        (self.connects > most).then(|| {
            respond::message(
                400,
                format!(
                    "{CONNECTS} = {} is more than the tenant's connectionsPerSession ({most})",
                    self.connects
                ),
            )
        })
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
    ask: &Ask,
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
        subject: ask.subject.clone(),
        id: ticket::new_id().map_err(|e| shared::Error::Other(e.to_string()))?,
        connects: ask.connects,
    };
    v["ticket"] = json!(ticket::mint(keys, &claims));
    v["ticketExpiresAt"] = json!(expires_at);
    Ok(v)
}

async fn put(
    deps: &Deps,
    state: &State,
    target: Target,
    tenant: Tenant,
    who: &Caller,
    ask: &Ask,
) -> Result<HttpAnswer, shared::Error> {
    let t = &target.tenant;
    let keys = state.tickets.keys(deps.clock.now()).await?;
    let (sid, new) = match target.session {
        Some(sid) => (sid, false),
        None => (shared::session::new_id()?, true),
    };
    let ttl_secs = i64::try_from(tenant.limits.session_ttl).unwrap_or(i64::MAX / 4);
    let now = deps.clock.now();
    let ttl = now.as_secs().saturating_add(ttl_secs);
    let caps = sessions::Caps {
        tenant: tenant.limits.session_cap(),
        subject: tenant.limits.subject_session_cap(),
    };
    let (caller, sockets) = (who.sessions(), &state.connections);
    let session = match sessions::open_as(deps, t, &sid, ttl, caps, new, caller, sockets).await? {
        Opened::Live(s) => s,
        Opened::Replaced { session, stale } => {
            let (fp, closed) = (fingerprint(sid.as_str()), stale.connection_ids.len());
            tracing::info!(tenant = %t, session = %fp, closed, "replaced an expired session");
            session
        }
        Opened::Closing { pending } => return Ok(still_closing(t, &sid, &pending)),
        Opened::Full { limit, cap } => {
            tracing::info!(tenant = %t, cap, limit = limit.name(), "session refused");
            let whose = match (limit, who) {
                (Limit::MaxSessionsPerSubject, Caller::User { sub, .. }) => {
                    format!("user {sub} of tenant {t}")
                }
                _ => format!("tenant {t}"),
            };
            return Ok(limit.refusal(&tenant.limits, now, &whose).to_http());
        }
        Opened::NotYours => return Ok(not_found(t, &sid)),
    };
    let auth = tenant.limits.connect_auth;
    let body = with_ticket(deps, state, &keys, &session, auth, ask)?;
    Ok(respond::json_answer(200, &body))
}

/// The tenant a session or ticket is asked of, or the answer refusing the ask: 404 when the tenant
/// does not exist, the refusal of [`Ask::over`] when the ask exceeds its limits.
async fn asked_tenant(
    deps: &Deps,
    state: &State,
    t: &TenantId,
    ask: &Ask,
) -> Result<Result<Tenant, HttpAnswer>, shared::Error> {
    let Some(tenant) = state.tenants.get(deps, t).await? else {
        return Ok(Err(respond::message(
            404,
            format!("tenant {t} does not exist"),
        )));
    };
    match ask.over(&tenant.limits) {
        Some(refused) => Ok(Err(refused)),
        None => Ok(Ok(tenant)),
    }
}

/// `POST /session/ticket`: 1 GetItem (strongly consistent), +1 with a cold tenant cache.
async fn ticket_for(
    deps: &Deps,
    state: &State,
    tenant: &Tenant,
    sid: &SessionId,
    who: &Caller,
    ask: &Ask,
) -> Result<HttpAnswer, shared::Error> {
    let t = &tenant.tenant_id;
    let auth = tenant.limits.connect_auth;
    if auth != ConnectAuth::Ticket {
        return Ok(respond::message(
            409,
            format!("tenant {t} connects with connectAuth={auth}, not with tickets"),
        ));
    }
    let now = deps.clock.now();
    let session = match store::get(deps, t, sid).await? {
        Some(s) if !s.is_expired(now.as_secs()) && s.reached_by(who.own()) => s,
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
    let mut body = with_ticket(deps, state, &keys, &session, auth, ask)?;
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
    own: Option<&str>,
) -> Result<HttpAnswer, shared::Error> {
    // Another user's row is answered as a missing one, and nothing of it is closed.
    let Some(ended) = closing::delete(deps, t, sid, own, &state.connections).await? else {
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
    fn routes_are_the_session_and_its_ticket() {
        assert_eq!(route("/session"), Some(Route::Session));
        assert_eq!(route("/prod/session/"), Some(Route::Session));
        assert_eq!(route("/session/ticket"), Some(Route::Ticket));
        assert_eq!(route("/sessions"), None);
    }
}
