#[tokio::main]
async fn main() -> Result<(), lambda_runtime::Error> {
    // The remover holds its own clients: it needs no `Deps` per invocation.
    let handle = async |_: &_, remover: &_, event| token_remover::handle(remover, event).await;
    shared::function::serve("token-remover", token_remover::init, handle).await
}
