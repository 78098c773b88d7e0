use aws_lambda_events::apigw::ApiGatewayCustomAuthorizerRequestTypeRequest;
use lambda_runtime::{service_fn, Error, LambdaEvent};

#[tokio::main]
async fn main() -> Result<(), Error> {
    lambda_runtime::tracing::init_default_subscriber();
    // EMF metrics on stdout, flushed at the end of each invocation (docs/operations.md).
    let metrics = shared::telemetry::metrics::install_from_vars(&shared::config::Vars::process())?;
    let deps = shared::Deps::from_env().await?;
    let config = authorizer::Config::from_vars(&deps.vars)?;
    // Tenant rows are reached with tenant-scoped credentials when TENANT_ROLE_ARN is set.
    let tenant_clients = shared::isolation::TenantClients::from_deps(&deps).await?;
    let state = authorizer::State::new(&config).with_tenant_clients(tenant_clients);
    lambda_runtime::run(service_fn(
        |event: LambdaEvent<ApiGatewayCustomAuthorizerRequestTypeRequest>| {
            let (deps, state) = (&deps, &state);
            metrics.invocation("authorizer", async move {
                Ok::<_, Error>(authorizer::handle(deps, state, event.payload).await?)
            })
        },
    ))
    .await
}
