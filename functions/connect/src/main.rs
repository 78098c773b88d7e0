use lambda_runtime::{service_fn, Error, LambdaEvent};
use serde_json::Value;

#[tokio::main]
async fn main() -> Result<(), Error> {
    lambda_runtime::tracing::init_default_subscriber();
    let deps = shared::Deps::from_env().await?;
    lambda_runtime::run(service_fn(|event: LambdaEvent<Value>| {
        let deps = &deps;
        async move { Ok::<_, Error>(connect::handle(deps, event.payload).await?) }
    }))
    .await
}
