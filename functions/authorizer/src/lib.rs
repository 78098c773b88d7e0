//! The WebSocket `$connect` REQUEST authorizer (seed 003, steps 1-7). Identity sources: query strings
//! `tenantId` and `sessionId`.
//!
//! 1. validate both ids (a malformed id is denied: the client sees 403);
//! 2. the tenant, from the in-memory cache (cold: 1 GetItem; warm: none);
//! 3. one BatchGetItem (session + three counter rows): the session exists and `sessionTTL > now`
//!    (DynamoDB deletes expired items late), and the four limits are not already reached.
//!
//! Allow carries the context `tenantId`, `sessionId` and the tenant's limits, so `$connect` needs
//! no tenant read. The checks here are advisory: `$connect`'s conditional writes are the authority.
//! Budget: 2 DynamoDB calls with a cold tenant cache, 1 warm.

use std::time::Instant;

use aws_lambda_events::apigw::{
    ApiGatewayCustomAuthorizerPolicy, ApiGatewayCustomAuthorizerRequestTypeRequest,
    ApiGatewayCustomAuthorizerResponse,
};
use aws_lambda_events::iam::{IamPolicyEffect, IamPolicyStatement};
use serde_json::{json, Value};
use shared::admission::context;
use shared::admission::precheck::{self, Precheck};
use shared::admission::verdict;
use shared::function::{self, Tenancy};
use shared::ids::{IdError, SessionId, TenantId};
use shared::tenant::TenantCache;
use shared::Deps;

/// Variables this function reads beyond table names and attribute style:
/// `TURNSTILE_TENANT_CACHE_SECS` (default 60).
pub type Config = function::TenantCacheConfig;

/// Built once per process, by [`init`].
#[derive(Debug)]
pub struct State {
    pub tenants: TenantCache,
    pub tenancy: Tenancy,
}

/// The state `main.rs`, the local stack and the tests run: [`Config`] from `deps.vars`, tenant rows
/// reached with tenant-scoped credentials when `TENANT_ROLE_ARN` is set.
pub async fn init(deps: &Deps) -> Result<State, shared::Error> {
    let config = Config::from_vars(&deps.vars)?;
    Ok(State {
        tenants: TenantCache::new(config.tenant_cache),
        tenancy: Tenancy::from_deps(deps).await?,
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

/// Handles one authorization request. Errors are DynamoDB failures only (API Gateway answers 500);
/// every refusal is a Deny.
pub async fn handle(
    deps: &Deps,
    state: &State,
    event: ApiGatewayCustomAuthorizerRequestTypeRequest,
) -> Result<ApiGatewayCustomAuthorizerResponse, shared::Error> {
    let resource = event.method_arn.clone().unwrap_or_else(|| "*".to_string());
    let (t, sid) = match request_ids(&event) {
        Ok(ids) => ids,
        Err(e) => return Ok(deny(&resource, e.to_string())),
    };
    // Every read below is of this tenant's rows: tenant-scoped credentials when configured.
    let scoped = state.tenancy.deps(deps, &t).await?;
    let deps: &Deps = &scoped;
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
    let started = Instant::now();
    let checked = precheck::check(deps, &t, &sid, &limits).await;
    // Shadow tenants and failing-open tenants are allowed here (logged and metered by `verdict`).
    match verdict::authorizer(checked, &limits, &t, &sid, started)? {
        Precheck::Allow => Ok(policy(
            &format!("{t}/{sid}"),
            IamPolicyEffect::Allow,
            &resource,
            context::build(&t, &sid, &limits),
        )),
        Precheck::NoSession => Ok(deny(&resource, format!("session {sid} does not exist"))),
        Precheck::Expired => Ok(deny(&resource, format!("session {sid} has expired"))),
        Precheck::OverLimit(limit) => Ok(deny(
            &resource,
            format!(
                "over {} ({}) for tenant {t} session {sid}",
                limit.name(),
                limit.cap(&limits)
            ),
        )),
    }
}
