//! The library's error type. Every failure that came from outside (config, ids, DynamoDB) is a value
//! here, never a panic, so handlers can turn it into a precise 4xx or a logged rejection.

use std::time::Duration;

use crate::config::ConfigError;
use crate::ids::IdError;

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
    /// A DynamoDB write the service refused without applying it — throttled past its retries,
    /// invalid (an item over 400 KB), denied, or on a missing table — or that was never sent:
    /// certainly not applied, so a step taken before it may be undone. Infrastructure failure.
    #[error("DynamoDB {operation} was not applied ({code}): {message}")]
    DynamoRejected {
        operation: &'static str,
        code: String,
        message: String,
    },
    /// A stored item does not have the shape this code writes (a corrupt or foreign row).
    #[error("item in table {table} is malformed: {reason}")]
    MalformedItem { table: String, reason: String },
    /// A key outside the tenant a request is scoped to (the key guard, `crate::isolation`): always a
    /// bug in Turnstile, refused before it reaches DynamoDB. Handlers answer it with a logged 500.
    #[error(transparent)]
    CrossTenantKey(#[from] CrossTenantKey),
    /// No definite outcome after `attempts` tries (conflicts, lost races, a counter that kept
    /// changing). Infrastructure failure: DynamoDB could not settle the write in time.
    #[error("{what} is contended: no definite outcome after {attempts} attempts")]
    Contended { what: String, attempts: u32 },
    /// An SDK request builder refused what we gave it (a missing required field): a bug, caught
    /// before any call. Infrastructure failure (the request was never sent).
    #[error("building {what}: {message}")]
    BuildRequest { what: &'static str, message: String },
    /// An API Gateway Management API call (`PostToConnection`...) failed for a reason other than a
    /// gone connection. Infrastructure failure.
    #[error("{operation} {connection}: {message}")]
    Gateway {
        operation: &'static str,
        connection: String,
        message: String,
    },
    /// STS `AssumeRole` for a tenant's scoped credentials failed (decision on tenant isolation).
    /// Infrastructure failure.
    #[error("STS AssumeRole for tenant {tenant}: {message}")]
    AssumeRole { tenant: String, message: String },
    /// Something we wait for (a table becoming ACTIVE, a join within its deadline) did not happen
    /// in time. Infrastructure failure.
    #[error("{what}: not done within {after:?}")]
    TimedOut { what: String, after: Duration },
    /// The caller passed a value the operation cannot take (an empty id...). Not an
    /// infrastructure failure: the same call fails the same way every time.
    #[error("{0}")]
    InvalidArgument(String),
    /// A limits file that does not parse or validate (names the entry and field). Not an
    /// infrastructure failure.
    #[error("limits file: {0}")]
    LimitsFile(String),
    /// A one-off failure with no variant of its own. Counted as an infrastructure failure.
    #[error("{0}")]
    Other(String),
}

pub type Result<T, E = Error> = std::result::Result<T, E>;

impl Error {
    /// Whether this failure is the infrastructure's (DynamoDB, STS, the Management API, a bug in a
    /// request), not an answer about the caller's input or data: the failures a tenant's
    /// `onFailure` policy decides on (decision 1000).
    pub fn is_infrastructure(&self) -> bool {
        matches!(
            self,
            Error::Dynamo { .. }
                | Error::DynamoRejected { .. }
                | Error::Contended { .. }
                | Error::BuildRequest { .. }
                | Error::Gateway { .. }
                | Error::AssumeRole { .. }
                | Error::TimedOut { .. }
                | Error::Other(_)
        )
    }

    /// An SDK builder error, for [`Error::BuildRequest`].
    pub fn build_request(what: &'static str, err: impl std::fmt::Display) -> Self {
        Error::BuildRequest {
            what,
            message: err.to_string(),
        }
    }

    /// [`Error::Contended`] for `what` after `attempts`.
    pub fn contended(what: impl Into<String>, attempts: u32) -> Self {
        Error::Contended {
            what: what.into(),
            attempts,
        }
    }

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

/// A key that does not belong to the tenant a client is scoped to: always a bug in the caller.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
#[error("key {key:?} is outside tenant {tenant:?}: a tenant's keys are its id or start with \"{tenant}:\"")]
pub struct CrossTenantKey {
    pub tenant: String,
    pub key: String,
}

/// Why (resource, account) has no coordinate. Each variant names the offending field.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
pub enum CoordinateError {
    #[error("{field} must be non-empty")]
    Empty { field: &'static str },
    /// The resource name holds the separator: its coordinate could equal another pair's.
    #[error(
        "resource name {resource:?} contains ':', which separates the resource name from the \
         account id in resourceCoordinate; use a resource name without ':'"
    )]
    SeparatorInResource { resource: String },
    #[error("resourceCoordinate of {resource:?} and the account id is {len} bytes; DynamoDB allows {max}")]
    TooLong {
        resource: String,
        len: usize,
        max: usize,
    },
    #[error("the account id is {len} bytes; a limit row's sort key allows {max}")]
    AccountTooLong { len: usize, max: usize },
}
