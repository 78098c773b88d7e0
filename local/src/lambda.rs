//! How the local stack calls functions: by name, JSON in and JSON out, exactly as the Lambda service
//! does. API Gateway, the stream bridge, EventBridge routing and `turnstile invoke` all go through
//! [`Invoke`], so what runs locally is the same handler code on the same event shapes.

use std::future::Future;
use std::pin::Pin;

use serde_json::Value;

/// The ten Turnstile functions, by their binary (and SAM `Binary:`) names.
pub const FUNCTIONS: [&str; 10] = [
    "authorizer",
    "connect",
    "disconnect",
    "message",
    "session-api",
    "ttl-sweeper",
    "token-remover",
    "reconciler",
    "decide-api",
    "region-rebalancer",
];

#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
pub enum InvokeError {
    #[error("no function named {0:?}; known: {known}", known = FUNCTIONS.join(", "))]
    UnknownFunction(String),
    /// The event does not have the shape the function takes (Lambda would fail the invocation).
    #[error("{function}: the event does not fit: {reason}")]
    BadEvent { function: String, reason: String },
    /// The handler returned an error (Lambda reports `Unhandled` to the caller).
    #[error("{function} failed: {message}")]
    Failed { function: String, message: String },
}

pub type InvokeFuture<'a> = Pin<Box<dyn Future<Output = Result<Value, InvokeError>> + Send + 'a>>;

/// Something that runs functions by name.
pub trait Invoke: Send + Sync + 'static {
    fn invoke<'a>(&'a self, function: &'a str, event: Value) -> InvokeFuture<'a>;
}
