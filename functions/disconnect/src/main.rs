use aws_lambda_events::apigw::ApiGatewayWebsocketProxyRequest;
use lambda_runtime::{service_fn, Error, LambdaEvent};

#[tokio::main]
async fn main() -> Result<(), Error> {
    lambda_runtime::tracing::init_default_subscriber();
    let deps = shared::Deps::from_env().await?;
    let config = disconnect::Config::from_vars(&deps.vars)?;
    lambda_runtime::run(service_fn(
        |event: LambdaEvent<ApiGatewayWebsocketProxyRequest>| {
            let (deps, config) = (&deps, &config);
            async move { Ok::<_, Error>(disconnect::handle(deps, config, event.payload).await?) }
        },
    ))
    .await
}
