// The functions' process setup (decision 0806, "The functions' runtime and allocator"): mimalloc,
// and one thread, since a Lambda handles one event at a time (`lambda_runtime::run` is sequential).
#[global_allocator]
static GLOBAL: mimalloc::MiMalloc = mimalloc::MiMalloc;

use region_rebalancer::{handle, init};

#[tokio::main(flavor = "current_thread")]
async fn main() -> Result<(), lambda_runtime::Error> {
    shared::function::serve("region-rebalancer", init, handle).await
}
