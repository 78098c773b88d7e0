// The functions' process setup (decision 0806, "The functions' runtime and allocator"): mimalloc,
// and one thread, since a Lambda handles one event at a time (`lambda_runtime::run` is sequential).
#[global_allocator]
static GLOBAL: mimalloc::MiMalloc = mimalloc::MiMalloc;

#[tokio::main(flavor = "current_thread")]
async fn main() -> Result<(), lambda_runtime::Error> {
    // The remover holds its own clients: it needs no `Deps` per invocation.
    let handle = async |_: &_, remover: &_, event| token_remover::handle(remover, event).await;
    shared::function::serve("token-remover", token_remover::init, handle).await
}
