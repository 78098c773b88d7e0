#[tokio::main]
async fn main() -> Result<(), lambda_runtime::Error> {
    shared::function::serve("session-api", session_api::init, session_api::handle).await
}
