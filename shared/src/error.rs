//! The library's error type. Every failure that came from outside (config, ids, DynamoDB) is a value
//! here, never a panic, so handlers can turn it into a precise 4xx or a logged rejection.

use crate::config::ConfigError;
use crate::ids::IdError;
use crate::isolation::CrossTenantKey;
use crate::reservation::CoordinateError;

#[derive(Debug, thiserror::Error)]
pub enum Error {
    #[error(transparent)]
    Config(#[from] ConfigError),
    #[error(transparent)]
    InvalidId(#[from] IdError),
    /// A (resource, account) pair without an unambiguous reservation coordinate.
    #[error(transparent)]
    InvalidCoordinate(#[from] CoordinateError),
    /// A DynamoDB call failed for a reason other than a condition we asked for.
    #[error("DynamoDB {operation} failed: {message}")]
    Dynamo {
        operation: &'static str,
        message: String,
    },
    /// A stored item does not have the shape this code writes (a corrupt or foreign row).
    #[error("item in table {table} is malformed: {reason}")]
    MalformedItem { table: String, reason: String },
    /// A key outside the tenant a request is scoped to (the key guard, `crate::isolation`): always a
    /// bug in Turnstile, refused before it reaches DynamoDB. Handlers answer it with a logged 500.
    #[error(transparent)]
    CrossTenantKey(#[from] CrossTenantKey),
    #[error("{0}")]
    Other(String),
}

pub type Result<T, E = Error> = std::result::Result<T, E>;

impl Error {
    /// Wraps an SDK error with the operation's name and the full error chain (the SDK's own
    /// `Display` says only "service error").
    pub fn dynamo<E>(operation: &'static str, err: E) -> Self
    where
        E: std::error::Error + 'static,
    {
        Error::Dynamo {
            operation,
            message: error_chain(&err),
        }
    }
}

/// "outer: inner: innermost", de-duplicating repeated messages.
pub fn error_chain(err: &(dyn std::error::Error + 'static)) -> String {
    let mut parts: Vec<String> = vec![err.to_string()];
    let mut source = err.source();
    while let Some(e) = source {
        let s = e.to_string();
        if parts.last() != Some(&s) {
            parts.push(s);
        }
        source = e.source();
    }
    parts.join(": ")
}
