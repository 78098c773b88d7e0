#[tokio::main]
async fn main() -> Result<(), lambda_runtime::Error> {
    shared::function::serve("message", message::init, message::handle).await
}
