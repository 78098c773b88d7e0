// The functions' process setup (decision 0806, "The functions' runtime and allocator"): mimalloc,
// and one thread, since a Lambda handles one event at a time (`lambda_runtime::run` is sequential).
#[global_allocator]
static GLOBAL: mimalloc::MiMalloc = mimalloc::MiMalloc;

#[tokio::main(flavor = "current_thread")]
async fn main() -> Result<(), lambda_runtime::Error> {
    // The sweeper reports failed records in its answer; the invocation itself always succeeds.
    let handle = async |deps: &_, state: &_, event| {
        Ok::<_, std::convert::Infallible>(ttl_sweeper::handle(deps, state, event).await)
    };
    shared::function::serve("ttl-sweeper", ttl_sweeper::init, handle).await
}
