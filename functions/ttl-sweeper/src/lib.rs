//! The `ttl-sweeper` Lambda function: translates its event, calls `shared`, and shapes the response.
//! (The WebSocket, token and deploy issues fill in the behaviour; this crate exists so the workspace,
//! the SAM template and the build are in place.)

use serde_json::Value;
use shared::Deps;

/// Handles one invocation.
pub async fn handle(_deps: &Deps, event: Value) -> Result<Value, shared::Error> {
    tracing::warn!(function = "ttl-sweeper", "no behaviour yet");
    Err(shared::Error::Other(format!(
        "ttl-sweeper: not implemented yet (event had {} top-level fields)",
        event.as_object().map_or(0, |o| o.len())
    )))
}
