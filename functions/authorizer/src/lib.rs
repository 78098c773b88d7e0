//! The WebSocket `$connect` REQUEST authorizer: the AWS WebSocket rate-limiting sample's checks
//! plus connect tickets and JWTs (decision 2100).
//!
//! 1. the credential ([`shared::ticket::presented`]): a connect ticket (the `turnstile`
//!    subprotocol, or `ticket=` for tenants with `ticketInQuery`; a name given twice, in either
//!    query map, is refused), an OIDC token (`token=` or the subprotocol; verified against the
//!    configured issuer's JWKS, cached per process: `shared::oidc`; its tenant claim is the tenant,
//!    the session comes from the query), or none;
//! 2. a ticket is verified with no AWS call (HMAC with the cached key set): malformed, expired,
//!    forged, retired-key and other-session tickets are denied here, before any DynamoDB call; its
//!    tenant and session are the ticket's (`tenantId`/`sessionId` in the query, if given, must
//!    match). Without a credential the ids come from the query;
//! 3. the tenant, from the in-memory cache (cold: 1 GetItem; warm: none), read with the execution
//!    role before any STS call (so made-up tenant ids never reach `AssumeRole`); its
//!    `connectAuth` must be the method used (`none` tenants take any), and a ticket in the query
//!    string is refused unless the tenant allows it (`ticketInQuery`, off by default: URLs are
//!    logged);
//! 4. one BatchGetItem (session + counter): the session exists, `sessionTTL > now` (DynamoDB
//!    deletes expired items late), its `sessionNonce` is the ticket's (a deleted and re-created
//!    session refuses old tickets), and the four limits are not already reached.
//!
//! Allow carries the context `tenantId`, `sessionId`, the tenant's limits, `connectAuth`,
//! `sessionNonce`, `subject` and the ticket's `ticketId`, `ticketConnects` and `ticketExpiresAt`,
//! so `$connect` needs no tenant read, joins only the ticket's session and counts the ticket's
//! uses (decision 3607). The checks here are advisory: `$connect`'s conditional writes are the
//! authority.
//! Budget: 2 DynamoDB calls with a cold tenant cache, 1 warm; 0 for a bad ticket. A denial is
//! logged with its reason; no ticket or token is ever logged, and session ids only as fingerprints.

use std::time::Instant;

use aws_lambda_events::apigw::{
    ApiGatewayCustomAuthorizerPolicy, ApiGatewayCustomAuthorizerRequestTypeRequest,
    ApiGatewayCustomAuthorizerResponse,
};
use aws_lambda_events::iam::{IamPolicyEffect, IamPolicyStatement};
use serde_json::{json, Value};
use shared::admission::precheck::{self, Precheck};
use shared::admission::verdict;
use shared::edge::context::{self, Grant};
use shared::function::{self, Tenancy};
use shared::ids::{IdError, SessionId, TenantId};
use shared::oidc::{OidcConfig, OidcVerifier};
use shared::tenant::{ConnectAuth, TenantCache};
use shared::ticket::presented::{self, Credential};
use shared::ticket::source::{KeyConfig, KeySource};
use shared::ticket::{self, fingerprint};
use shared::Deps;

/// Variables this function reads beyond table names and attribute style.
#[derive(Debug, Clone, PartialEq)]
pub struct Config {
    /// `TURNSTILE_TENANT_CACHE_SECS` (default 60).
    pub tenant_cache: std::time::Duration,
    /// `TURNSTILE_TICKET_KEYS_SECRET` (+ `_CACHE_SECS`) or `TURNSTILE_TICKET_KEYS`.
    pub tickets: KeyConfig,
    /// `TURNSTILE_CONNECT_JWT_*`: the OIDC issuer whose tokens `jwt` tenants connect with; `None`
    /// (no issuer) refuses every token.
    pub oidc: Option<OidcConfig>,
}

impl Config {
    pub fn from_vars(vars: &shared::config::Vars) -> Result<Config, shared::config::ConfigError> {
        Ok(Config {
            tenant_cache: function::TenantCacheConfig::from_vars(vars)?.tenant_cache,
            tickets: KeyConfig::from_vars(vars)?,
            oidc: OidcConfig::from_vars(vars)?,
        })
    }
}

/// Built once per process, by [`init`].
#[derive(Debug)]
pub struct State {
    pub tenants: TenantCache,
    pub tenancy: Tenancy,
    /// The keys connect tickets are verified with.
    pub tickets: KeySource,
    /// OIDC tokens' verifier (its JWKS cached per process), when an issuer is configured.
    pub oidc: Option<OidcVerifier>,
}

/// The state `main.rs`, the local stack and the tests run: [`Config`] from `deps.vars`, the ticket
/// keys (read once here), tenant rows reached with tenant-scoped credentials when
/// `TENANT_ROLE_ARN` is set.
pub async fn init(deps: &Deps) -> Result<State, shared::Error> {
    let config = Config::from_vars(&deps.vars)?;
    Ok(State {
        tenants: TenantCache::new(config.tenant_cache),
        tenancy: Tenancy::from_deps(deps).await?,
        tickets: KeySource::new(config.tickets, &deps.vars, deps.clock.now()).await?,
        oidc: config.oidc.map(OidcVerifier::new),
    })
}

/// Why a request was denied (logged, and in the Deny's context).
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum Decision {
    Allow,
    Deny(String),
}

/// The decision in the response, for tests and logs.
pub fn decision(r: &ApiGatewayCustomAuthorizerResponse) -> Decision {
    match r.policy_document.statement.first().map(|s| &s.effect) {
        Some(IamPolicyEffect::Allow) => Decision::Allow,
        _ => Decision::Deny(
            r.context
                .get("reason")
                .and_then(Value::as_str)
                .unwrap_or("")
                .to_string(),
        ),
    }
}

fn policy(
    principal: &str,
    effect: IamPolicyEffect,
    resource: &str,
    context: Value,
) -> ApiGatewayCustomAuthorizerResponse {
    let mut statement = IamPolicyStatement::default();
    statement.action = vec!["execute-api:Invoke".into()];
    statement.effect = effect;
    statement.resource = vec![resource.to_string()];
    let mut doc = ApiGatewayCustomAuthorizerPolicy::default();
    doc.version = Some("2012-10-17".into());
    doc.statement = vec![statement];
    let mut r = ApiGatewayCustomAuthorizerResponse::default();
    r.principal_id = Some(principal.to_string());
    r.policy_document = doc;
    r.context = context;
    r
}

fn deny(resource: &str, reason: String) -> ApiGatewayCustomAuthorizerResponse {
    // Reasons name tenants, key ids and session fingerprints, never a ticket or a session id.
    tracing::info!(%reason, "authorizer: deny");
    policy(
        "anonymous",
        IamPolicyEffect::Deny,
        resource,
        json!({ "reason": reason }),
    )
}

/// The tenant and session ids of a request, from the `tenantId` and `sessionId` query strings.
/// Pure, so it is fuzzed on its own (tests/integration/fuzz.rs).
pub fn request_ids(
    event: &ApiGatewayCustomAuthorizerRequestTypeRequest,
) -> Result<(TenantId, SessionId), IdError> {
    let q = &event.query_string_parameters;
    let t = TenantId::parse_opt(q.first(context::TENANT_ID))?;
    Ok((t, SessionId::parse_opt(q.first(context::SESSION_ID))?))
}

/// Who a request connects as, once its credential holds.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Who {
    pub tenant: TenantId,
    pub session: SessionId,
    pub grant: Grant,
    /// The credential came in the query string.
    pub in_query: bool,
}

/// Who a request may connect as, once its credential holds, or the reason for a Deny. No
/// DynamoDB call; a ticket costs a key-set read only when the cached set is due (one
/// `GetSecretValue` per container per cache period).
pub async fn authenticate(
    deps: &Deps,
    state: &State,
    event: &ApiGatewayCustomAuthorizerRequestTypeRequest,
) -> Result<Result<Who, String>, shared::Error> {
    let presented = match presented::presented(event) {
        Ok(p) => p,
        Err(reason) => return Ok(Err(reason)),
    };
    let in_query = presented.in_query;
    let who = |(tenant, session, grant)| Who {
        tenant,
        session,
        grant,
        in_query,
    };
    Ok(credential(deps, state, event, presented.credential)
        .await?
        .map(who))
}

/// The tenant, session and grant a credential (or its absence) gives, or the reason for a Deny.
async fn credential(
    deps: &Deps,
    state: &State,
    event: &ApiGatewayCustomAuthorizerRequestTypeRequest,
    credential: Option<Credential<'_>>,
) -> Result<Result<(TenantId, SessionId, Grant), String>, shared::Error> {
    let q = &event.query_string_parameters;
    match credential {
        None => Ok(request_ids(event)
            .map_err(|e| e.to_string())
            .map(|(t, sid)| {
                let grant = Grant {
                    method: ConnectAuth::None,
                    nonce: None,
                    subject: None,
                    ticket: None,
                };
                (t, sid, grant)
            })),
        Some(Credential::Ticket(raw)) => {
            let now = deps.clock.now();
            let keys = state.tickets.keys(now).await?;
            let claims = match ticket::verify(&keys, raw, now.as_secs()) {
                Ok(c) => c,
                Err(e) => return Ok(Err(e.to_string())),
            };
            let ticket_use = claims.ticket_use();
            let (t, sid) = (claims.tenant, claims.session);
            if q.first(context::TENANT_ID)
                .is_some_and(|named| named != t.as_str())
            {
                return Ok(Err(format!(
                    "the ticket is for tenant {t}, not the tenantId the query names"
                )));
            }
            if q.first(context::SESSION_ID)
                .is_some_and(|named| named != sid.as_str())
            {
                return Ok(Err(format!(
                    "the ticket is for session #{} of tenant {t}, not the sessionId the query names",
                    fingerprint(sid.as_str())
                )));
            }
            let grant = Grant {
                method: ConnectAuth::Ticket,
                ticket: Some(ticket_use),
                nonce: Some(claims.nonce),
                subject: claims.subject,
            };
            Ok(Ok((t, sid, grant)))
        }
        Some(Credential::Jwt(raw)) => {
            let Some(oidc) = &state.oidc else {
                return Ok(Err(
                    "an OIDC token was presented, but this authorizer has no issuer \
                     configured (TURNSTILE_CONNECT_JWT_ISSUER)"
                        .to_string(),
                ));
            };
            let token = match oidc.verify(raw, deps.clock.now()).await {
                Ok(t) => t,
                // The issuer's keys could not be had: ours to retry (500), not the caller's fault.
                Err(e) if e.is_infrastructure() => return Err(shared::Error::Other(e.to_string())),
                Err(e) => return Ok(Err(e.to_string())),
            };
            let t = token.tenant;
            if q.first(context::TENANT_ID)
                .is_some_and(|named| named != t.as_str())
            {
                return Ok(Err(format!(
                    "the token is for tenant {t}, not the tenantId the query names"
                )));
            }
            // A token binds a tenant, not a session: the session comes from the query.
            let sid = match SessionId::parse_opt(q.first(context::SESSION_ID)) {
                Ok(sid) => sid,
                Err(e) => return Ok(Err(e.to_string())),
            };
            let grant = Grant {
                method: ConnectAuth::Jwt,
                nonce: None,
                subject: token.subject,
                ticket: None,
            };
            Ok(Ok((t, sid, grant)))
        }
    }
}

/// Why a tenant refuses the method a request used, if it does.
fn method_refused(t: &TenantId, wanted: ConnectAuth, used: ConnectAuth) -> Option<String> {
    match wanted {
        _ if wanted.admits(used) => None,
        ConnectAuth::None => None,
        ConnectAuth::Ticket => Some(format!(
            "tenant {t} connects with a ticket (from PUT /session or POST /session/ticket), \
             presented in the turnstile subprotocol"
        )),
        ConnectAuth::Jwt => Some(format!(
            "tenant {t} connects with an OIDC token, presented as token= or in the turnstile \
             subprotocol"
        )),
    }
}

/// Handles one authorization request. Errors are infrastructure failures only (API Gateway
/// answers 500); every refusal is a Deny.
pub async fn handle(
    deps: &Deps,
    state: &State,
    event: ApiGatewayCustomAuthorizerRequestTypeRequest,
) -> Result<ApiGatewayCustomAuthorizerResponse, shared::Error> {
    let resource = event.method_arn.clone().unwrap_or_else(|| "*".to_string());
    let Who {
        tenant: t,
        session: sid,
        grant,
        in_query,
    } = match authenticate(deps, state, &event).await? {
        Ok(who) => who,
        Err(reason) => return Ok(deny(&resource, reason)),
    };
    let session = fingerprint(sid.as_str());
    // The tenant row first, with the execution role (its own cached read, unknown ids cached
    // briefly apart): only a real tenant gets tenant-scoped credentials, so ids made up by
    // anonymous clients never cost an STS AssumeRole nor push a real tenant's credentials out.
    let tenant = match state.tenants.get(deps, &t).await {
        Ok(Some(tenant)) => tenant,
        Ok(None) => return Ok(deny(&resource, format!("tenant {t} does not exist"))),
        Err(shared::Error::MalformedItem { reason, .. }) => {
            tracing::error!(tenant = %t, %reason, "tenant row is malformed");
            return Ok(deny(&resource, format!("tenant {t} is misconfigured")));
        }
        Err(e) => return Err(e),
    };
    let limits = tenant.limits;
    if let Some(reason) = method_refused(&t, limits.connect_auth, grant.method) {
        return Ok(deny(&resource, reason));
    }
    if in_query && grant.method == ConnectAuth::Ticket && !limits.ticket_in_query {
        return Ok(deny(
            &resource,
            format!(
                "tenant {t} takes a connect ticket only in the turnstile subprotocol \
                 (Sec-WebSocket-Protocol: turnstile, <ticket>), not as ticket= in the URL \
                 (ticketInQuery is off)"
            ),
        ));
    }
    // The session and counter reads are of this tenant's rows: tenant-scoped credentials when
    // configured.
    let scoped = state.tenancy.deps(deps, &t).await?;
    let deps: &Deps = &scoped;
    let started = Instant::now();
    let checked = precheck::check(deps, &t, &sid, &limits, grant.nonce.as_deref()).await;
    // Shadow tenants and failing-open tenants are allowed here (logged and metered by `verdict`).
    match verdict::authorizer(checked, &limits, &t, &sid, started)? {
        Precheck::Allow => {
            let mut ctx = context::build(&t, &sid, &limits);
            grant.add_to(&mut ctx);
            Ok(policy(
                &format!("{t}/#{session}"),
                IamPolicyEffect::Allow,
                &resource,
                ctx,
            ))
        }
        Precheck::NoSession => Ok(deny(
            &resource,
            format!("session #{session} of tenant {t} does not exist"),
        )),
        Precheck::Expired => Ok(deny(
            &resource,
            format!("session #{session} of tenant {t} has expired"),
        )),
        Precheck::Replaced => Ok(deny(
            &resource,
            format!(
                "the ticket's session #{session} of tenant {t} was deleted since it was issued \
                 (a session of that id now is another one)"
            ),
        )),
        Precheck::OverLimit(limit) => {
            let mut r = deny(
                &resource,
                format!(
                    "over {} ({}) for tenant {t} session #{session}",
                    limit.name(),
                    limit.cap(&limits)
                ),
            );
            // The limit by name too, for whoever reads the Deny (the local dashboard's chart
            // colours refusals by it); API Gateway passes a Deny's context nowhere.
            r.context["limit"] = json!(limit.name());
            Ok(r)
        }
    }
}
