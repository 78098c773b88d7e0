#[tokio::main]
async fn main() -> Result<(), lambda_runtime::Error> {
    shared::function::serve("authorizer", authorizer::init, authorizer::handle).await
}
