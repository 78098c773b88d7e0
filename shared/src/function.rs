//! What every function crate's wiring shares, so each crate's `init(&Deps) -> State` is a few lines
//! and its `main.rs` one call:
//!
//! - [`Tenancy`]: the part of each `State` that reaches a tenant's rows — tenant-scoped credentials
//!   when `TENANT_ROLE_ARN` is set, else the execution role (`shared::isolation`);
//! - [`websocket_caller`] and [`on_websocket`]: who a WebSocket route's event is from and the `Deps`
//!   for its tenant, the opening every WebSocket route shares;
//! - [`TenantCacheConfig`]: the settings of the functions that read only the tenant cache's lifetime;
//! - [`Connections`] (feature `gateway`): the Management API client at a required endpoint, built by
//!   `Gateway::from_vars` from the function's own variables;
//! - [`serve`] (feature `lambda`): the one `main` — tracing, metrics, `Deps::from_env`, the crate's
//!   `init`, then the Lambda runtime with the metrics flushed after each invocation.
//!
//! `main.rs`, the local stack (`turnstile dev`, `turnstile invoke`) and the tests all build a
//! function's state with the crate's `init`, so what runs locally is the deployed wiring.

use std::borrow::Cow;
use std::time::Duration;

use aws_lambda_events::apigw::{ApiGatewayProxyResponse, ApiGatewayWebsocketProxyRequest};

use crate::config::{ConfigError, Vars};
use crate::edge::{context, respond};
use crate::error::Result;
use crate::ids::{ConnectionId, IdError, SessionId, TenantId};
use crate::isolation::{self, TenantClients};
use crate::tenant::TenantCache;
use crate::Deps;

/// How a function reaches a tenant's rows. The default (no clients) uses the `Deps` given to each
/// invocation (the execution role); [`Tenancy::from_deps`] is what every deployed function builds.
#[derive(Debug, Clone, Default)]
pub struct Tenancy {
    clients: Option<TenantClients>,
}

impl Tenancy {
    /// From `TENANT_ROLE_ARN` in `deps.vars` ([`TenantClients::from_deps`]): once per process. With
    /// a role, `deps.function` picks the session policy (set by [`serve`] from the crate's name).
    pub async fn from_deps(deps: &Deps) -> Result<Self> {
        Ok(TenantClients::from_deps(deps).await?.into())
    }

    /// The `Deps` for `tenant`'s rows ([`isolation::tenant_deps`]): `deps` itself, borrowed, unless
    /// a tenant role is configured.
    pub async fn deps<'d>(&self, deps: &'d Deps, tenant: &TenantId) -> Result<Cow<'d, Deps>> {
        isolation::tenant_deps(self.clients.as_ref(), deps, tenant).await
    }

    /// [`deps`](Self::deps) as an owned value, with the instant until which its client is the one
    /// served (`None`: always; [`TenantClients::for_tenant_until`]), for state built per tenant.
    pub async fn deps_until(
        &self,
        deps: &Deps,
        tenant: &TenantId,
    ) -> Result<(Deps, Option<crate::clock::Timestamp>)> {
        match &self.clients {
            Some(c) if c.role_arn().is_some() => {
                let (scoped, until) = c.for_tenant_until(tenant).await?;
                let deps = Deps {
                    dynamo: scoped.client().clone(),
                    ..deps.clone()
                };
                Ok((deps, until))
            }
            _ => Ok((deps.clone(), None)),
        }
    }
}

impl From<TenantClients> for Tenancy {
    fn from(clients: TenantClients) -> Self {
        Tenancy {
            clients: Some(clients),
        }
    }
}

/// The settings of a function whose only variable is the tenant cache's lifetime (the authorizer
/// and `$connect`).
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct TenantCacheConfig {
    /// `TURNSTILE_TENANT_CACHE_SECS` (default 60).
    pub tenant_cache: Duration,
}

impl TenantCacheConfig {
    pub fn from_vars(vars: &Vars) -> std::result::Result<Self, ConfigError> {
        Ok(TenantCacheConfig {
            tenant_cache: TenantCache::ttl_from_vars(vars)?,
        })
    }
}

/// Who a WebSocket route's event is from, and the `Deps` for that tenant's rows.
#[derive(Debug)]
pub struct WebsocketCaller<'d> {
    pub tenant: TenantId,
    pub session: SessionId,
    pub connection: ConnectionId,
    /// Tenant-scoped when the function has a tenancy role, else the invocation's own.
    pub deps: Cow<'d, Deps>,
}

impl WebsocketCaller<'_> {
    /// Tenant, session, connection and the `Deps` for the tenant's rows, as a route uses them.
    pub fn parts(&self) -> (&TenantId, &SessionId, &ConnectionId, &Deps) {
        (&self.tenant, &self.session, &self.connection, &self.deps)
    }
}

/// How a WebSocket route's event opens: its ids ([`context::websocket_ids`]), then the `Deps` for
/// its tenant. `Ok(Err(_))`: the ids do not parse (nothing was called; the route answers
/// [`bad_ids`]); `Err(_)`: tenant credentials could not be had.
pub async fn websocket_caller<'d>(
    tenancy: &Tenancy,
    deps: &'d Deps,
    event: &ApiGatewayWebsocketProxyRequest,
) -> Result<std::result::Result<WebsocketCaller<'d>, IdError>> {
    let (tenant, session, connection) = match context::websocket_ids(event) {
        Ok(ids) => ids,
        Err(e) => return Ok(Err(e)),
    };
    let deps = tenancy.deps(deps, &tenant).await?;
    Ok(Ok(WebsocketCaller {
        tenant,
        session,
        connection,
        deps,
    }))
}

/// A WebSocket route from its event: [`websocket_caller`], then `route` with the caller, or
/// [`bad_ids`] (400) when the ids do not parse. `$connect` and `$default` open this way.
pub async fn on_websocket<'d, F, Fut>(
    tenancy: &Tenancy,
    deps: &'d Deps,
    event: &ApiGatewayWebsocketProxyRequest,
    route: F,
) -> Result<ApiGatewayProxyResponse>
where
    F: FnOnce(WebsocketCaller<'d>) -> Fut,
    Fut: std::future::Future<Output = Result<ApiGatewayProxyResponse>>,
{
    match websocket_caller(tenancy, deps, event).await? {
        Ok(caller) => route(caller).await,
        Err(e) => Ok(bad_ids(&e)),
    }
}

/// The answer to a WebSocket route's event whose ids do not parse: 400 naming the problem.
pub fn bad_ids(e: &IdError) -> ApiGatewayProxyResponse {
    respond::websocket(&respond::message(400, e.to_string()))
}

/// The Management API at the one endpoint `TURNSTILE_MANAGEMENT_ENDPOINT` names: where the session
/// API, the TTL sweeper and `turnstile tenant delete` close connections when they end sessions
/// (`admission::closing`).
#[cfg(feature = "gateway")]
#[derive(Debug)]
pub struct Connections {
    pub gateway: crate::gateway::Gateway,
    pub endpoint: String,
    /// Run between the steps of ending a session: none in production; tests stop an end there.
    pub interleave: crate::interleave::Interleave,
}

#[cfg(feature = "gateway")]
impl Connections {
    pub async fn new(deps: &Deps, endpoint: &str) -> Self {
        Connections {
            gateway: crate::gateway::Gateway::from_vars(Some(endpoint.to_string()), &deps.vars)
                .await,
            endpoint: endpoint.to_string(),
            interleave: crate::interleave::Interleave::none(),
        }
    }
}

#[cfg(feature = "gateway")]
impl crate::admission::closing::Sockets for Connections {
    fn close_each<'a>(
        &'a self,
        ids: &'a [String],
    ) -> futures::future::BoxFuture<'a, Vec<(String, crate::admission::closing::Closed)>> {
        use crate::admission::closing::Closed;
        use crate::gateway::Delivery;
        Box::pin(async move {
            let closed = self.gateway.close_each(&self.endpoint, ids).await;
            closed
                .into_iter()
                .map(|(c, r)| {
                    let answer = match r {
                        Ok(Delivery::Delivered) => Closed::Closed,
                        Ok(Delivery::Gone) => Closed::Gone,
                        Err(e) => {
                            tracing::warn!(connection = %c, error = %e, "close failed");
                            Closed::Failed
                        }
                    };
                    (c, answer)
                })
                .collect()
        })
    }

    fn interleave(&self) -> &crate::interleave::Interleave {
        &self.interleave
    }
}

/// A function's whole `main`: Lambda's default tracing subscriber, the EMF metrics recorder
/// (docs/operations.md), `Deps::from_env` for function `name` (its crate name, which picks the
/// session policy of its tenant credentials: `isolation::policy`), the crate's `init`, then every
/// invocation runs `handler` inside
/// [`Metrics::invocation`](crate::telemetry::metrics::Metrics::invocation) (cold start and result
/// counted, metrics flushed at its end).
#[cfg(feature = "lambda")]
pub async fn serve<S, E, R, Er>(
    name: &'static str,
    init: impl AsyncFnOnce(&Deps) -> Result<S>,
    handler: impl AsyncFn(&Deps, &S, E) -> std::result::Result<R, Er>,
) -> std::result::Result<(), lambda_runtime::Error>
where
    E: serde::de::DeserializeOwned,
    R: serde::Serialize,
    Er: Into<lambda_runtime::Error>,
{
    use lambda_runtime::{service_fn, LambdaEvent};
    lambda_runtime::tracing::init_default_subscriber();
    let metrics = crate::telemetry::metrics::install_from_vars(&crate::config::Vars::process())?;
    // Boxed, as the handler's future in `invocation`: nested, these deep futures exceed the
    // compiler's layout recursion limit (128) in the functions' `main`, and whether they do depends
    // on the order rustc happens to compute layouts in. A box ends the nesting: computing the layout
    // of `Pin<Box<F>>` does not need `F`'s. One box per await at start, one per invocation.
    let deps = Box::pin(Deps::from_env()).await?.for_function(name);
    let state = Box::pin(init(&deps)).await?;
    Box::pin(lambda_runtime::run(service_fn(|event: LambdaEvent<E>| {
        let (deps, state, handler) = (&deps, &state, &handler);
        Box::pin(metrics.invocation(name, async move {
            handler(deps, state, event.payload)
                .await
                .map_err(Into::<lambda_runtime::Error>::into)
        }))
    })))
    .await
}
