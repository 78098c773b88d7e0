#[tokio::main]
async fn main() -> Result<(), lambda_runtime::Error> {
    shared::function::serve("connect", connect::init, connect::handle).await
}
