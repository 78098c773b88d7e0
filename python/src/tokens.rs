//! rate-limiter-py's tokens over `shared::token` and `shared::reservation`: the calls behind
//! `rate_limit`, `fungible_limiter`, `non_fungible_limiter` and `EventProcessorManager`.

use pyo3::prelude::*;
use shared::limit::Quota;
use shared::reservation::Reservation;
use shared::token::Decision;

use crate::bridge::{Json, ToPy};
use crate::failure::Failure;
use crate::twin::twin;

/// One `get_token` answer. `retry_after` and `reset` are seconds; `retry_after` is `None` when
/// granted or when the account is blocked (no wait helps).
#[pyclass(module = "turnstile._native", frozen, get_all)]
pub struct TokenDecision {
    pub granted: bool,
    pub remaining: u64,
    pub limit: u64,
    pub window_ms: u64,
    pub retry_after: Option<f64>,
    pub reset: f64,
    pub source: &'static str,
}

#[pymethods]
impl TokenDecision {
    fn __repr__(&self) -> String {
        format!(
            "TokenDecision(granted={}, remaining={}, limit={}, window_ms={}, retry_after={:?}, reset={}, source={:?})",
            self.granted, self.remaining, self.limit, self.window_ms, self.retry_after, self.reset, self.source
        )
    }
}

impl From<Decision> for TokenDecision {
    fn from(d: Decision) -> Self {
        TokenDecision {
            granted: d.granted,
            remaining: d.remaining,
            limit: d.limit,
            window_ms: d.window_ms,
            retry_after: d.retry_after().map(|r| r.as_secs_f64()),
            reset: d.reset().as_secs_f64(),
            source: match d.source {
                shared::token::Source::Dynamodb => "dynamodb",
                shared::token::Source::RejectionCache => "rejection-cache",
                shared::token::Source::Blocked => "blocked",
            },
        }
    }
}

impl ToPy for TokenDecision {
    fn to_py(self, py: Python<'_>) -> PyResult<Py<PyAny>> {
        Ok(Py::new(py, self)?.into_any())
    }
}

fn reservation_json(r: &Reservation) -> Json {
    Json(serde_json::json!({
        "resource": r.resource,
        "account": r.account,
        "coordinate": r.coordinate,
        "id": r.id,
        "expires_at": r.expires_at.map(|t| t.as_secs()),
    }))
}

twin! {
    /// Takes one token of (resource, account)'s bucket: `limit` per `window` seconds unless the
    /// limit table says otherwise. Answers a `TokenDecision` (granted or not).
    get_token, get_token_async,
    (resource, account, limit, window, token_table=None, limit_table=None),
    (resource: String, account: String, limit: i64, window: i64,
     token_table: Option<String>, limit_table: Option<String>),
    |core| {
        let limiter = core.fungible(token_table.as_deref(), limit_table.as_deref())?;
        let d = limiter.get_token(&resource, &account, Quota::new(limit, window)).await?;
        Ok::<_, Failure>(TokenDecision::from(d))
    }
}

twin! {
    /// Holds one unit of (resource, account)'s capacity; raises `CapacityExhaustedException` when
    /// all of it is held.
    get_reservation, get_reservation_async,
    (resource, account, limit, token_table=None, limit_table=None, index=None),
    (resource: String, account: String, limit: i64,
     token_table: Option<String>, limit_table: Option<String>, index: Option<String>),
    |core| {
        let limiter = core.non_fungible(token_table.as_deref(), index.as_deref(), limit_table.as_deref(), None)?;
        let r = limiter.get_reservation(&resource, &account, limit).await?;
        Ok::<_, Failure>(reservation_json(&r))
    }
}

twin! {
    /// Binds reservation `reservation_id` to `resource_id` for `expiration` seconds.
    create_token, create_token_async,
    (resource, account, reservation_id, resource_id, expiration=28800, token_table=None, limit_table=None, index=None),
    (resource: String, account: String, reservation_id: String, resource_id: String, expiration: u64,
     token_table: Option<String>, limit_table: Option<String>, index: Option<String>),
    |core| {
        let limiter = core.non_fungible(token_table.as_deref(), index.as_deref(), limit_table.as_deref(), Some(expiration))?;
        let token = limiter.reservation(&resource, &account, &reservation_id)?.create_token(&resource_id).await?;
        Json::of(&token)
    }
}

twin! {
    /// Gives reservation `reservation_id`'s unit back (a bound one too).
    delete_reservation, delete_reservation_async,
    (resource, account, reservation_id, token_table=None, limit_table=None, index=None),
    (resource: String, account: String, reservation_id: String,
     token_table: Option<String>, limit_table: Option<String>, index: Option<String>),
    |core| {
        let limiter = core.non_fungible(token_table.as_deref(), index.as_deref(), limit_table.as_deref(), None)?;
        limiter.reservation(&resource, &account, &reservation_id)?.delete().await?;
        Ok::<_, Failure>(())
    }
}

twin! {
    /// The reservations and tokens of (resource, account), live or not yet removed.
    list_reservations, list_reservations_async,
    (resource, account, token_table=None, limit_table=None, index=None),
    (resource: String, account: String,
     token_table: Option<String>, limit_table: Option<String>, index: Option<String>),
    |core| {
        let limiter = core.non_fungible(token_table.as_deref(), index.as_deref(), limit_table.as_deref(), None)?;
        let rows = limiter.list(&resource, &account).await?;
        Json::of(&rows)
    }
}

twin! {
    /// Removes the tokens bound to `resource_id` (the resource ended) and releases their capacity;
    /// answers how many were removed.
    remove_by_resource_id, remove_by_resource_id_async,
    (resource_id, table=None, index=None),
    (resource_id: String, table: Option<String>, index: Option<String>),
    |core| {
        let limiter = core.non_fungible(table.as_deref(), index.as_deref(), None, None)?;
        let rows = limiter.remove_by_resource_id(&resource_id, None).await?;
        Ok::<_, Failure>(rows.len())
    }
}

twin! {
    /// DynamoDB calls and units since the last `reset_usage()` when `TURNSTILE_PY_METER=1` (else
    /// `None`): `calls`, `write_units`, `read_units`, `by_operation`.
    usage, usage_async, (), (),
    |core| {
        let Some(c) = &core.counter else {
            return Ok::<_, Failure>(Json(serde_json::Value::Null));
        };
        let units = c.units();
        Ok(Json(serde_json::json!({
            "calls": c.total(),
            "write_units": units.write,
            "read_units": units.read,
            "by_operation": c.by_operation(),
        })))
    }
}

twin! {
    /// Sets the counts of `usage()` back to zero.
    reset_usage, reset_usage_async, (), (),
    |core| {
        if let Some(c) = &core.counter {
            c.reset();
        }
        Ok::<_, Failure>(())
    }
}
