//! The ten functions behind [`Invoke`], each built once by its crate's `init` (what its `main.rs`
//! runs), so the local stack and `turnstile invoke` run exactly the deployed wiring and handler code.

use std::future::Future;
use std::sync::Arc;

use serde::de::DeserializeOwned;
use serde::Serialize;
use serde_json::Value;
use shared::telemetry::metrics::{self, Metrics};
use shared::Deps;

use crate::lambda::{Invoke, InvokeError, InvokeFuture, FUNCTIONS};
use crate::stack::{Stack, StackConfig};

/// Every function's state, built once.
pub struct LocalFunctions {
    deps: Deps,
    authorizer: authorizer::State,
    connect: connect::State,
    disconnect: disconnect::State,
    message: message::State,
    session: session_api::State,
    sweeper: ttl_sweeper::State,
    reconciler: reconciler::State,
    decide: decide_api::State,
    /// The token remover needs its processors configured; without them it answers every event with
    /// the configuration error instead of keeping the rest of the stack from starting.
    remover: Result<token_remover::Remover, String>,
    /// The region rebalancer needs a region ledger (`TURNSTILE_LEDGER_TABLE`); without one it
    /// answers every event with that, as the token remover does.
    rebalancer: Result<region_rebalancer::State, String>,
    /// EMF metrics, only when `TURNSTILE_METRICS` is set (`make dev` sends them to a file, so the
    /// console shows logs only); each invocation flushes, as in Lambda.
    metrics: Option<&'static Metrics>,
}

impl LocalFunctions {
    /// Builds every function with its crate's `init` (as its `main.rs` does) from `deps`, whose
    /// `vars` are the functions' environment, with the Management API at `management_endpoint`
    /// (the local WebSocket API's host and stage).
    pub async fn new(
        mut deps: Deps,
        management_endpoint: &str,
    ) -> Result<Arc<Self>, shared::Error> {
        deps.vars = deps
            .vars
            .with_overrides([("TURNSTILE_MANAGEMENT_ENDPOINT", management_endpoint)]);
        let remover = token_remover::init(&deps).await.map_err(|e| e.to_string());
        if let Err(e) = &remover {
            tracing::warn!(error = %e, "token-remover is not configured; events sent to it will fail");
        }
        let rebalancer = region_rebalancer::init(&deps.clone().for_function("region-rebalancer"))
            .await
            .map_err(|e| e.to_string());
        let metrics = match deps.vars.get(metrics::OUTPUT_VAR) {
            Some(_) => Some(
                metrics::install_from_vars(&deps.vars)
                    .map_err(|e| shared::Error::Other(e.to_string()))?,
            ),
            None => None,
        };
        // Each as its `main.rs` names it (`serve`): the name picks its tenant session policy.
        let named = |name| deps.clone().for_function(name);
        Ok(Arc::new(LocalFunctions {
            authorizer: authorizer::init(&named("authorizer")).await?,
            connect: connect::init(&named("connect")).await?,
            disconnect: disconnect::init(&named("disconnect")).await?,
            message: message::init(&named("message")).await?,
            session: session_api::init(&named("session-api")).await?,
            sweeper: ttl_sweeper::init(&named("ttl-sweeper")).await?,
            reconciler: reconciler::init(&named("reconciler")).await?,
            decide: decide_api::init(&named("decide-api")).await?,
            remover,
            rebalancer,
            metrics,
            deps,
        }))
    }

    pub fn deps(&self) -> &Deps {
        &self.deps
    }

    /// The local stack on `cfg`, running the functions built on `deps` for its Management API.
    /// When they do not build, the stack started for them is shut down and the build's error
    /// returned.
    pub async fn start_stack(cfg: StackConfig, deps: Deps) -> Result<Stack, shared::Error> {
        let clock = deps.clock.clone();
        let mut build_error = None;
        let stack = Stack::start(cfg, clock, async |eps| {
            match LocalFunctions::new(deps.clone(), &eps.management_url()).await {
                Ok(f) => f as Arc<dyn Invoke>,
                Err(e) => {
                    build_error = Some(e);
                    Arc::new(Unbuilt) as Arc<dyn Invoke>
                }
            }
        })
        .await
        .map_err(|e| shared::Error::Other(e.to_string()))?;
        if let Some(e) = build_error {
            stack.shutdown().await;
            return Err(e);
        }
        Ok(stack)
    }
}

/// Deserialises the event, runs the handler, serialises its answer: what the Lambda runtime does.
async fn call<E, R, Fut>(
    function: &str,
    event: Value,
    handler: impl FnOnce(E) -> Fut,
) -> Result<Value, InvokeError>
where
    E: DeserializeOwned,
    R: Serialize,
    Fut: Future<Output = Result<R, shared::Error>>,
{
    let typed: E = serde_json::from_value(event).map_err(|e| InvokeError::BadEvent {
        function: function.to_string(),
        reason: e.to_string(),
    })?;
    let out = handler(typed).await.map_err(|e| InvokeError::Failed {
        function: function.to_string(),
        message: e.to_string(),
    })?;
    serde_json::to_value(out).map_err(|e| InvokeError::Failed {
        function: function.to_string(),
        message: format!("the answer does not serialise: {e}"),
    })
}

impl Invoke for LocalFunctions {
    fn invoke<'a>(&'a self, function: &'a str, event: Value) -> InvokeFuture<'a> {
        let run = self.run(function, event);
        let name = FUNCTIONS.iter().find(|f| **f == function);
        match (self.metrics, name) {
            (Some(m), Some(name)) => Box::pin(m.invocation(name, run)),
            _ => run,
        }
    }
}

impl LocalFunctions {
    fn run<'a>(&'a self, function: &'a str, event: Value) -> InvokeFuture<'a> {
        let d = &self.deps;
        Box::pin(async move {
            match function {
                "authorizer" => {
                    call(function, event, |e| {
                        authorizer::handle(d, &self.authorizer, e)
                    })
                    .await
                }
                "connect" => call(function, event, |e| connect::handle(d, &self.connect, e)).await,
                "disconnect" => {
                    call(function, event, |e| {
                        disconnect::handle(d, &self.disconnect, e)
                    })
                    .await
                }
                "message" => call(function, event, |e| message::handle(d, &self.message, e)).await,
                "session-api" => {
                    call(function, event, |e| {
                        session_api::handle(d, &self.session, e)
                    })
                    .await
                }
                "ttl-sweeper" => {
                    call(function, event, |e| async {
                        Ok::<_, shared::Error>(ttl_sweeper::handle(d, &self.sweeper, e).await)
                    })
                    .await
                }
                "reconciler" => {
                    call(function, event, |e: Value| {
                        reconciler::handle(d, &self.reconciler, e)
                    })
                    .await
                }
                "decide-api" => {
                    call(function, event, |e| decide_api::handle(d, &self.decide, e)).await
                }
                "token-remover" => match &self.remover {
                    Ok(r) => call(function, event, |e| token_remover::handle(r, e)).await,
                    Err(e) => Err(InvokeError::Failed {
                        function: function.into(),
                        message: format!("not configured: {e}"),
                    }),
                },
                "region-rebalancer" => match &self.rebalancer {
                    Ok(s) => {
                        call(function, event, |e: Value| {
                            region_rebalancer::handle(d, s, e)
                        })
                        .await
                    }
                    Err(e) => Err(InvokeError::Failed {
                        function: function.into(),
                        message: format!("not configured: {e}"),
                    }),
                },
                other => Err(InvokeError::UnknownFunction(other.to_string())),
            }
        })
    }
}

/// Stands in while the functions failed to build, so the stack can be stopped cleanly: every
/// invocation fails.
struct Unbuilt;

impl Invoke for Unbuilt {
    fn invoke<'a>(&'a self, function: &'a str, _event: Value) -> InvokeFuture<'a> {
        Box::pin(async move {
            Err(InvokeError::Failed {
                function: function.to_string(),
                message: "functions did not build".into(),
            })
        })
    }
}
