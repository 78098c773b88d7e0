// The functions' process setup (decision 0806, "The functions' runtime and allocator"): mimalloc,
// and one thread, since a Lambda handles one event at a time (`lambda_runtime::run` is sequential).
#[global_allocator]
static GLOBAL: mimalloc::MiMalloc = mimalloc::MiMalloc;

#[tokio::main(flavor = "current_thread")]
async fn main() -> Result<(), lambda_runtime::Error> {
    shared::function::serve("decide-api", decide_api::init, decide_api::handle).await
}
