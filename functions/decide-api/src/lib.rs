//! The decide API (HTTP API payload v2, docs/decide-api.md, `openapi/decide-api.yaml`): the
//! library's limits over HTTP for backends in any language, each caller bound to its tenant.
//!
//! | route | library call | DynamoDB calls (warm) |
//! |---|---|---|
//! | `POST /v1/limits/spend` | `kv::Limiter::spend` | 1 UpdateItem |
//! | `POST /v1/limits/check` | `kv::Limiter::check` | 1 GetItem |
//! | `POST /v1/limits/refund` | `kv::Limiter::refund_keyed` (once per idempotency key) | 1 TransactWriteItems |
//! | `POST /v1/limits/batch` | `kv::Limiter::spend_batch` (all or nothing) | 1 TransactWriteItems |
//! | `GET /v1/limits/state` | the bucket's `RateLimitState` | 1 GetItem |
//! | `POST /v1/leases/{acquire,adjust,commit,release}` | `kv::Limiter::*_lease` | 1-2 |
//! | `POST /v1/tokens/take` | `token::FungibleLimiter::get_token` | 1 UpdateItem |
//! | `POST /v1/reservations/{reserve,bind,release}` | `reservation::NonFungibleLimiter` | 1 / 3 / 1 |
//!
//! **Whose tenant**: [`shared::caller`] with the `TURNSTILE_DECIDE_*` variables; `none` and
//! `any-tenant` are refused at start (every caller is bound: a JWT claim or an IAM role session
//! name). The tenant never comes from the body. **Tenant key space**: every key starts with
//! `{tenant}:` (kv buckets, shards, leases and refund markers through `Limiter::for_tenant`; a
//! token bucket's `resourceName` is `{tenant}:{resource}`; a reservation's coordinate is
//! `{tenant}:{resource}:{account}`, a bound token's resource `{tenant}:{resourceId}`), so the
//! tenant role's `dynamodb:LeadingKeys` confines the function's tenant credentials.
//! **Limits**: key-value limits from the limits file (`TURNSTILE_LIMITS_YAML` inline, or
//! `TURNSTILE_LIMITS_FILE`, else `config/decide-limits.yaml` built in), shared by every tenant; tokens and reservations from the limits
//! table's rows for the tenant's keys, else `TURNSTILE_DECIDE_TOKEN_DEFAULT` /
//! `TURNSTILE_DECIDE_RESERVATION_DEFAULT`.

use std::sync::Arc;

use aws_lambda_events::apigw::{ApiGatewayV2httpRequest, ApiGatewayV2httpResponse};
use http::Method;
use shared::cache::{Cache, WhenFull};
use shared::caller::{Binding, Caller, CallerVars};
use shared::config::{ConfigError, Vars};
use shared::edge::respond;
use shared::function::Tenancy;
use shared::ids::TenantId;
use shared::kv::{LimitSet, Limiter, Limits};
use shared::limit::Quota;
use shared::refusal::HttpAnswer;
use shared::reservation::NonFungibleLimiter;
use shared::token::FungibleLimiter;
use shared::Deps;

pub mod answer;
pub mod input;
mod kv;
mod tokens;

use answer::OnRefusal;
use input::bad;

/// The limits file inline (what the template sets from its `DecideLimits` parameter).
pub const LIMITS_YAML_VAR: &str = "TURNSTILE_LIMITS_YAML";
/// `limit/windowSeconds` of a token bucket without a limit row (default `10/60`; `0/60` blocks).
pub const TOKEN_DEFAULT_VAR: &str = "TURNSTILE_DECIDE_TOKEN_DEFAULT";
/// Reservations held at once per (resource, account) without a limit row (default 10).
pub const RESERVATION_DEFAULT_VAR: &str = "TURNSTILE_DECIDE_RESERVATION_DEFAULT";
/// The limits file built into the function, used when neither variable names one.
pub const BUILT_IN_LIMITS: &str = include_str!("../../../config/decide-limits.yaml");
/// Tenants whose limiters (with their hints) are kept per process: enough for warm decisions of
/// many tenants, bounded so a process never grows with the number of tenants it has seen.
const MAX_TENANTS: usize = 1024;

#[derive(Debug, Clone)]
pub struct Config {
    pub binding: Binding,
    /// The key-value limits, validated whole.
    pub limits: LimitSet,
    pub token_default: Quota,
    pub reservation_default: i64,
}

fn invalid(var: &str, value: String, reason: &str) -> ConfigError {
    ConfigError::Invalid {
        var: var.into(),
        value,
        reason: reason.into(),
    }
}

impl Config {
    pub fn from_vars(vars: &Vars) -> Result<Config, ConfigError> {
        let binding = Binding::from_vars(vars, CallerVars::DECIDE)?.require_bound()?;
        let inline = vars.get(LIMITS_YAML_VAR).filter(|s| !s.trim().is_empty());
        let file = vars.get(shared::kv::config::LIMITS_FILE_VAR);
        let limits = match (inline, file) {
            (Some(_), Some(path)) => {
                return Err(invalid(
                    shared::kv::config::LIMITS_FILE_VAR,
                    path,
                    "set either TURNSTILE_LIMITS_YAML or TURNSTILE_LIMITS_FILE, not both",
                ))
            }
            (Some(src), None) => LimitSet::from_yaml(&src)
                .map_err(|e| invalid(LIMITS_YAML_VAR, String::new(), &e.to_string()))?,
            (None, Some(path)) => LimitSet::from_path(&path).map_err(|e| {
                invalid(
                    shared::kv::config::LIMITS_FILE_VAR,
                    path.clone(),
                    &e.to_string(),
                )
            })?,
            (None, None) => LimitSet::from_yaml(BUILT_IN_LIMITS)
                .map_err(|e| invalid(LIMITS_YAML_VAR, String::new(), &e.to_string()))?,
        };
        let raw = vars.string_or(TOKEN_DEFAULT_VAR, "10/60");
        let token_default = raw
            .split_once('/')
            .and_then(|(l, w)| Some(Quota::new(l.trim().parse().ok()?, w.trim().parse().ok()?)))
            .filter(|q| q.limit >= 0 && q.window_secs > 0)
            .ok_or_else(|| {
                invalid(
                    TOKEN_DEFAULT_VAR,
                    raw.clone(),
                    "expected limit/windowSeconds (10/60; 0/60 blocks accounts without a row)",
                )
            })?;
        let reservation_default = vars
            .parse::<i64>(RESERVATION_DEFAULT_VAR, "a whole number (0 blocks)")?
            .unwrap_or(10);
        Ok(Config {
            binding,
            limits,
            token_default,
            reservation_default,
        })
    }
}

/// One tenant's limiters, each on the tenant's credentials and keyed in its key space.
#[derive(Debug)]
pub struct TenantLimiters {
    pub tenant: TenantId,
    pub kv: Limiter,
    pub tokens: FungibleLimiter,
    pub reservations: NonFungibleLimiter,
}

/// Built once per process, by [`init`].
#[derive(Debug)]
pub struct State {
    pub binding: Binding,
    pub limits: Arc<Limits>,
    pub token_default: Quota,
    pub reservation_default: i64,
    pub tenancy: Tenancy,
    /// Per tenant, kept while its credentials are the ones served (their hints make the next
    /// decision warm: 1 call).
    tenants: Cache<TenantId, Arc<TenantLimiters>>,
}

/// What `main.rs`, the local stack and the tests run.
pub async fn init(deps: &Deps) -> Result<State, shared::Error> {
    let config = Config::from_vars(&deps.vars)?;
    Ok(State {
        binding: config.binding,
        limits: Arc::new(Limits::new(config.limits)),
        token_default: config.token_default,
        reservation_default: config.reservation_default,
        tenancy: Tenancy::from_deps(deps).await?,
        tenants: Cache::new(MAX_TENANTS, WhenFull::Clear),
    })
}

impl State {
    /// The limiters of `tenant`: kept ones while fresh, else built on its credentials (one STS
    /// call per tenant per ~55 minutes under isolation, none otherwise).
    pub async fn limiters(
        &self,
        deps: &Deps,
        tenant: &TenantId,
    ) -> Result<Arc<TenantLimiters>, shared::Error> {
        let now = deps.clock.now();
        if let Some(l) = self.tenants.fresh(tenant, now) {
            return Ok(l);
        }
        let (scoped, until) = self.tenancy.deps_until(deps, tenant).await?;
        let l = Arc::new(TenantLimiters {
            tenant: tenant.clone(),
            kv: Limiter::new(
                scoped.dynamo.clone(),
                &scoped.tables.buckets,
                self.limits.clone(),
            )
            .for_tenant(tenant),
            tokens: FungibleLimiter::from_deps(&scoped)?,
            reservations: NonFungibleLimiter::from_deps(&scoped)?,
        });
        match until {
            Some(until) => self
                .tenants
                .insert_until(tenant.clone(), l.clone(), now, until),
            None => self.tenants.insert(tenant.clone(), l.clone()),
        };
        Ok(l)
    }
}

/// The operations under `/v1/`, one per library call.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Route {
    Spend,
    Check,
    Refund,
    Batch,
    State,
    LeaseAcquire,
    LeaseAdjust,
    LeaseCommit,
    LeaseRelease,
    Take,
    Reserve,
    Bind,
    ReservationRelease,
}

const ROUTES: &[(&str, Route)] = &[
    ("limits/spend", Route::Spend),
    ("limits/check", Route::Check),
    ("limits/refund", Route::Refund),
    ("limits/batch", Route::Batch),
    ("limits/state", Route::State),
    ("leases/acquire", Route::LeaseAcquire),
    ("leases/adjust", Route::LeaseAdjust),
    ("leases/commit", Route::LeaseCommit),
    ("leases/release", Route::LeaseRelease),
    ("tokens/take", Route::Take),
    ("reservations/reserve", Route::Reserve),
    ("reservations/bind", Route::Bind),
    ("reservations/release", Route::ReservationRelease),
];

/// The route of a path under `/v1/`, also behind a stage prefix (`/prod/v1/limits/spend`).
pub fn route(path: &str) -> Option<Route> {
    let p = path.trim_end_matches('/');
    let rest = &p[p.find("/v1/")? + 4..];
    ROUTES.iter().find(|(r, _)| *r == rest).map(|(_, r)| *r)
}

/// One HTTP API (payload 2.0) or function URL event. Bad input is a 4xx the caller can act on, a
/// store failure a 503 it may retry, a key outside the tenant a logged 500 (a bug, never a panic);
/// only what no answer fits (a malformed stored item) is an `Err`, logged by the runtime.
pub async fn handle(
    deps: &Deps,
    state: &State,
    event: ApiGatewayV2httpRequest,
) -> Result<ApiGatewayV2httpResponse, shared::Error> {
    let answer = match answer(deps, state, &event).await {
        Err(e) if e.is_infrastructure() => Ok(respond::unavailable(&e)),
        answered => answered,
    };
    respond::http_v2_guarded(answer)
}

async fn answer(
    deps: &Deps,
    state: &State,
    event: &ApiGatewayV2httpRequest,
) -> Result<HttpAnswer, shared::Error> {
    let path = respond::http_v2_path(event);
    let Some(route) = route(&path) else {
        return Ok(bad(
            404,
            "path",
            format!("no route for {path}; see /v1/ in docs/decide-api.md"),
        ));
    };
    let method = event.request_context.http.method.clone();
    let allowed = if route == Route::State {
        Method::GET
    } else {
        Method::POST
    };
    if method != allowed {
        let mut a = bad(405, "method", format!("{method} is not allowed on {path}"));
        a.headers.push(("Allow", allowed.to_string()));
        return Ok(a);
    }
    let tenant = match state.binding.caller(&event.request_context) {
        Ok(Caller::Tenant(t)) => t,
        Ok(Caller::AnyTenant) => {
            return Ok(shared::caller::forbidden(
                "the caller is bound to no tenant",
            ))
        }
        Err(refused) => {
            tracing::warn!(path = %path, "decide API caller refused: {}", refused.body);
            return Ok(refused);
        }
    };
    let on_refusal = match OnRefusal::parse(event.query_string_parameters.first("refusal")) {
        Ok(o) => o,
        Err(a) => return Ok(a),
    };
    let limiters = state.limiters(deps, &tenant).await?;
    let now = deps.clock.now();
    let req = Request {
        event,
        limiters: &limiters,
        state,
        on_refusal,
        now,
    };
    match route {
        Route::Spend | Route::Check | Route::Refund | Route::Batch | Route::State => {
            kv::limits(route, &req).await
        }
        Route::LeaseAcquire | Route::LeaseAdjust | Route::LeaseCommit | Route::LeaseRelease => {
            kv::leases(route, &req).await
        }
        Route::Take | Route::Reserve | Route::Bind | Route::ReservationRelease => {
            tokens::tokens(route, &req).await
        }
    }
}

/// What a route's handler reads.
pub(crate) struct Request<'a> {
    pub event: &'a ApiGatewayV2httpRequest,
    pub limiters: &'a TenantLimiters,
    pub state: &'a State,
    pub on_refusal: OnRefusal,
    pub now: shared::clock::Timestamp,
}
