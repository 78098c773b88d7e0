//! `turnstile invoke FUNCTION EVENT.json`: runs one function on one event against the configured
//! DynamoDB, like `sam local invoke -e`, and prints its answer as JSON.

use std::path::PathBuf;

use shared::{Error, Result};
use turnstile_local::functions::LocalFunctions;
use turnstile_local::lambda::Invoke;

#[derive(Debug, clap::Args)]
pub struct Args {
    /// authorizer, connect, disconnect, message, session-api, ttl-sweeper, token-remover,
    /// reconciler, decide-api or region-rebalancer.
    function: String,
    /// The event, as the function would receive it from AWS (see events/); `-` reads stdin.
    event: PathBuf,
    /// Where Management API calls go (a running `turnstile dev`, or a deployed API's endpoint).
    #[arg(
        long,
        env = "TURNSTILE_MANAGEMENT_ENDPOINT",
        default_value = "http://127.0.0.1:3001/local"
    )]
    management_endpoint: String,
}

pub async fn run(args: Args) -> Result<()> {
    let text = if args.event.as_os_str() == "-" {
        std::io::read_to_string(std::io::stdin())
            .map_err(|e| Error::Other(format!("stdin: {e}")))?
    } else {
        std::fs::read_to_string(&args.event)
            .map_err(|e| Error::Other(format!("{}: {e}", args.event.display())))?
    };
    let event: serde_json::Value = serde_json::from_str(&text)
        .map_err(|e| Error::Other(format!("{}: not JSON: {e}", args.event.display())))?;
    let mut deps = crate::aws::deps().await?;
    crate::dev::local_vars(&mut deps)?;
    let functions = LocalFunctions::new(deps, &args.management_endpoint).await?;
    let out = functions
        .invoke(&args.function, event)
        .await
        .map_err(|e| Error::Other(e.to_string()))?;
    crate::print_json(&out)
}
