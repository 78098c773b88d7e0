//! The eight functions behind [`Invoke`], built once with the same configuration their `main.rs`
//! reads, so the local stack and `turnstile invoke` run exactly the deployed handler code.

use std::future::Future;
use std::sync::Arc;

use serde::de::DeserializeOwned;
use serde::Serialize;
use serde_json::Value;
use shared::config::Vars;
use shared::gateway::Gateway;
use shared::telemetry::metrics::{self, Metrics};
use shared::Deps;

use crate::lambda::{Invoke, InvokeError, InvokeFuture, FUNCTIONS};

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
    /// The token remover needs its processors configured; without them it answers every event with
    /// the configuration error instead of keeping the rest of the stack from starting.
    remover: Result<token_remover::Remover, String>,
    /// EMF metrics, only when `TURNSTILE_METRICS` is set (`make dev` sends them to a file, so the
    /// console shows logs only); each invocation flushes, as in Lambda.
    metrics: Option<&'static Metrics>,
}

impl LocalFunctions {
    /// Builds every function from `deps` (its `vars` are the functions' environment), with the
    /// Management API at `management_endpoint` (the local WebSocket API's host and stage).
    pub fn new(mut deps: Deps, management_endpoint: &str) -> Result<Arc<Self>, shared::Error> {
        let vars: Vars = deps
            .vars
            .with_overrides([("TURNSTILE_MANAGEMENT_ENDPOINT", management_endpoint)]);
        deps.vars = vars.clone();
        let gateway = || Gateway::local(management_endpoint);
        let remover = token_remover::Config::from_vars(&vars)
            .map(|c| token_remover::Remover::new(&deps, c))
            .map_err(|e| e.to_string());
        if let Err(e) = &remover {
            tracing::warn!(error = %e, "token-remover is not configured; events sent to it will fail");
        }
        let metrics = match vars.get(metrics::OUTPUT_VAR) {
            Some(_) => Some(
                metrics::install_from_vars(&vars)
                    .map_err(|e| shared::Error::Other(e.to_string()))?,
            ),
            None => None,
        };
        Ok(Arc::new(LocalFunctions {
            authorizer: authorizer::State::new(&authorizer::Config::from_vars(&vars)?),
            connect: connect::State::new(&connect::Config::from_vars(&vars)?),
            disconnect: disconnect::State::new(&disconnect::Config::from_vars(&vars)?),
            message: message::State::new(&message::Config::from_vars(&vars)?, gateway()),
            session: session_api::State::new(&session_api::Config::from_vars(&vars)?, gateway()),
            sweeper: ttl_sweeper::State::new(&ttl_sweeper::Config::from_vars(&vars)?, gateway()),
            reconciler: reconciler::State::new(&reconciler::Config::from_vars(&vars)?, gateway()),
            remover,
            metrics,
            deps,
        }))
    }

    pub fn deps(&self) -> &Deps {
        &self.deps
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
                "token-remover" => match &self.remover {
                    Ok(r) => call(function, event, |e| token_remover::handle(r, e)).await,
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
