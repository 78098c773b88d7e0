#[tokio::main]
async fn main() -> Result<(), lambda_runtime::Error> {
    // The sweeper reports failed records in its answer; the invocation itself always succeeds.
    let handle = async |deps: &_, state: &_, event| {
        Ok::<_, std::convert::Infallible>(ttl_sweeper::handle(deps, state, event).await)
    };
    shared::function::serve("ttl-sweeper", ttl_sweeper::init, handle).await
}
