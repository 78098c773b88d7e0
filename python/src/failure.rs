//! Why a call failed, as the Python exceptions of `turnstile.exceptions` (docs/python.md lists them).
//! Built without the GIL (inside the runtime), raised with it.

use pyo3::exceptions::{PyRuntimeError, PyValueError};
use pyo3::prelude::*;
use shared::kv::KvError;
use shared::reservation::ReservationError;

/// A failure, named by the Python exception it becomes.
#[derive(Debug)]
pub enum Failure {
    /// `CapacityExhaustedException`; `retry_after` in seconds, `None` when no wait helps.
    Capacity {
        message: String,
        retry_after: Option<f64>,
    },
    /// `ThrottlingException`: DynamoDB throttled past the SDK's retries, or a bucket was contended.
    Throttled(String),
    /// `ReservationNotFoundException`: the reservation expired or was deleted.
    ReservationNotFound(String),
    /// `ResourceEndedException`: the resource ended before the bind; the reservation is released.
    ResourceEnded(String),
    /// `AlreadyBoundException` (a `ValueError` too): bound to another resource.
    AlreadyBound(String),
    /// `LeaseNotFoundException`, `LeaseExpiredException`.
    LeaseNotFound(String),
    LeaseExpired(String),
    /// `ValueError`: the same call fails the same way every time (a bad name, id or cost).
    Value(String),
    /// `RateLimiterException`: any other DynamoDB or configuration failure.
    Store(String),
    /// A Rust panic, caught at the boundary: `RateLimiterException` naming it as a bug.
    Panic(String),
}

impl From<shared::Error> for Failure {
    fn from(e: shared::Error) -> Self {
        use shared::Error as E;
        let message = e.to_string();
        match e {
            E::InvalidArgument(_) | E::InvalidId(_) | E::InvalidCoordinate(_) => {
                Failure::Value(message)
            }
            E::DynamoRejected { ref code, .. }
                if shared::dynamo::retry::is_throttle(Some(code.as_str())) =>
            {
                Failure::Throttled(message)
            }
            E::Contended { .. } => Failure::Throttled(message),
            _ => Failure::Store(message),
        }
    }
}

impl From<ReservationError> for Failure {
    fn from(e: ReservationError) -> Self {
        use ReservationError as R;
        let message = e.to_string();
        match e {
            R::Limited { .. } | R::Blocked { .. } => Failure::Capacity {
                message,
                retry_after: None,
            },
            R::AboveCeiling { .. } | R::InvalidCoordinate(_) => Failure::Value(message),
            R::Gone { .. } => Failure::ReservationNotFound(message),
            R::ResourceEnded { .. } => Failure::ResourceEnded(message),
            R::AlreadyBound { .. } => Failure::AlreadyBound(message),
            R::Store(e) => e.into(),
        }
    }
}

impl From<KvError> for Failure {
    fn from(e: KvError) -> Self {
        use KvError as K;
        let message = e.to_string();
        match e {
            K::LeaseNotFound(_) => Failure::LeaseNotFound(message),
            K::LeaseExpired(_) => Failure::LeaseExpired(message),
            K::Contended(_) => Failure::Throttled(message),
            K::Store(e) => e.into(),
            _ => Failure::Value(message),
        }
    }
}

impl Failure {
    /// The exception to raise. Falls back to `RuntimeError` only if `turnstile.exceptions` itself
    /// cannot be imported (a broken install).
    pub fn into_pyerr(self, py: Python<'_>) -> PyErr {
        let (class, args): (&str, (String, Option<f64>)) = match self {
            Failure::Capacity {
                message,
                retry_after,
            } => ("CapacityExhaustedException", (message, retry_after)),
            Failure::Throttled(m) => ("ThrottlingException", (m, None)),
            Failure::ReservationNotFound(m) => ("ReservationNotFoundException", (m, None)),
            Failure::ResourceEnded(m) => ("ResourceEndedException", (m, None)),
            Failure::AlreadyBound(m) => ("AlreadyBoundException", (m, None)),
            Failure::LeaseNotFound(m) => ("LeaseNotFoundException", (m, None)),
            Failure::LeaseExpired(m) => ("LeaseExpiredException", (m, None)),
            Failure::Value(m) => return PyValueError::new_err(m),
            Failure::Store(m) => ("RateLimiterException", (m, None)),
            Failure::Panic(m) => (
                "RateLimiterException",
                (format!("internal error (a bug in turnstile): {m}"), None),
            ),
        };
        let built = py
            .import("turnstile.exceptions")
            .and_then(|m| m.getattr(class))
            .and_then(|c| {
                if class == "CapacityExhaustedException" {
                    c.call1(args)
                } else {
                    c.call1((args.0.clone(),))
                }
            });
        match built {
            Ok(exc) => PyErr::from_value(exc),
            Err(e) => PyRuntimeError::new_err(format!("turnstile.exceptions: {e}")),
        }
    }
}
