#[tokio::main]
async fn main() -> Result<(), lambda_runtime::Error> {
    shared::function::serve("disconnect", disconnect::init, disconnect::handle).await
}
