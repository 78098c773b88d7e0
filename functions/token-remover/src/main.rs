use aws_lambda_events::event::eventbridge::EventBridgeEvent;
use lambda_runtime::{service_fn, Error, LambdaEvent};
use serde_json::Value;
use token_remover::{handle, Config, Remover};

#[tokio::main]
async fn main() -> Result<(), Error> {
    lambda_runtime::tracing::init_default_subscriber();
    // EMF metrics on stdout, flushed at the end of each invocation (docs/operations.md).
    let metrics = shared::telemetry::metrics::install_from_vars(&shared::config::Vars::process())?;
    let deps = shared::Deps::from_env().await?;
    let config = Config::from_vars(&deps.vars)?;
    let remover = Remover::new(&deps, config);
    lambda_runtime::run(service_fn(|event: LambdaEvent<EventBridgeEvent<Value>>| {
        let remover = &remover;
        metrics.invocation("token-remover", async move {
            Ok::<_, Error>(handle(remover, event.payload).await?)
        })
    }))
    .await
}
