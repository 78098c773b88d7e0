#[tokio::main]
async fn main() -> Result<(), lambda_runtime::Error> {
    shared::function::serve("reconciler", reconciler::init, reconciler::handle).await
}
