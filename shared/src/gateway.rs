//! The API Gateway Management API (`POST/GET/DELETE /@connections/{id}`), through the real
//! `aws-sdk-apigatewaymanagement` client. Its endpoint is per WebSocket API and stage: taken from
//! the event's domain and stage, or from `TURNSTILE_MANAGEMENT_ENDPOINT` when set (the session API
//! and the TTL sweeper have no WebSocket event, so they need it). One SDK client is built per
//! endpoint and reused. A connection that is gone (410, or 404 on delete) is a value, not an error.

use aws_sdk_apigatewaymanagement::config::BehaviorVersion;
use aws_sdk_apigatewaymanagement::error::SdkError;
use aws_sdk_apigatewaymanagement::operation::delete_connection::DeleteConnectionError;
use aws_sdk_apigatewaymanagement::operation::post_to_connection::PostToConnectionError;
use aws_sdk_apigatewaymanagement::primitives::Blob;
use aws_sdk_apigatewaymanagement::Client;

use crate::cache::{Cache, WhenFull};
use crate::config::{ConfigError, Vars};
use crate::dynamo::{is_loopback, local_sdk_config, wants_local_credentials};
use crate::error::{Error, Result};

/// Management API calls one function invocation has in flight at most (a session's fan-out and a
/// delete's closes): a session with thousands of sockets must not open thousands of connections
/// at once from one Lambda sandbox.
pub const FANOUT: usize = 32;

/// Runs `calls` at most [`FANOUT`] at a time; the results in the order given.
pub async fn bounded<'a, T: 'a>(
    calls: impl IntoIterator<Item = impl std::future::Future<Output = T> + Send + 'a>,
) -> Vec<T> {
    use futures::StreamExt;
    // Boxed first: a stream over the caller's async blocks would make this future `Send` only for
    // one lifetime, which the Lambda runtime's handler futures cannot name (rust-lang/rust#102211).
    let calls: Vec<futures::future::BoxFuture<'a, T>> = calls
        .into_iter()
        .map(|f| Box::pin(f) as futures::future::BoxFuture<'a, T>)
        .collect();
    futures::stream::iter(calls)
        .buffered(FANOUT)
        .collect()
        .await
}

/// Env var: the Management API endpoint, e.g. `https://abc123.execute-api.eu-west-1.amazonaws.com/prod`.
pub const ENDPOINT_VAR: &str = "TURNSTILE_MANAGEMENT_ENDPOINT";

/// What happened to a post or a close.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Delivery {
    Delivered,
    /// The Management API answered 410 (or 404 on delete): the socket is gone, or still inside its
    /// own `$connect` (no capacity is released on one such answer; decision 0306).
    Gone,
}

/// Endpoints whose clients are kept (one per WebSocket API and stage: a process sees one or two).
const MAX_CLIENTS: usize = 64;

/// A Management API client factory, built once per process.
#[derive(Debug)]
pub struct Gateway {
    /// The SDK config clients are built from; `None`: [`local_sdk_config`] (dummy credentials).
    sdk: Option<Box<aws_config::SdkConfig>>,
    endpoint_override: Option<String>,
    clients: Cache<String, Client>,
}

impl Gateway {
    /// Reads `TURNSTILE_MANAGEMENT_ENDPOINT` (optional).
    pub fn endpoint_from_vars(vars: &Vars) -> Result<Option<String>, ConfigError> {
        match vars.get(ENDPOINT_VAR) {
            None => Ok(None),
            Some(url) if url.starts_with("http://") || url.starts_with("https://") => {
                Ok(Some(url.trim_end_matches('/').to_string()))
            }
            Some(url) => Err(ConfigError::Invalid {
                var: ENDPOINT_VAR.into(),
                value: url,
                reason: "expected an http:// or https:// URL".into(),
            }),
        }
    }

    /// With the SDK's default credential chain; a loopback override uses dummy credentials.
    pub async fn from_env(endpoint_override: Option<String>) -> Self {
        Self::from_vars(endpoint_override, &Vars::process()).await
    }

    /// [`Gateway::from_env`] judged by `vars` (a function's `Deps::vars`: the local stack and tests
    /// give a function its variables without the process environment).
    pub async fn from_vars(endpoint_override: Option<String>, vars: &Vars) -> Self {
        let endpoint_override = endpoint_override.map(|e| e.trim_end_matches('/').to_string());
        let local = endpoint_override
            .as_deref()
            .is_some_and(|e| wants_local_credentials(e, vars));
        let sdk = if local {
            None
        } else {
            Some(Box::new(
                aws_config::defaults(BehaviorVersion::latest()).load().await,
            ))
        };
        Gateway {
            sdk,
            endpoint_override,
            clients: Cache::new(MAX_CLIENTS, WhenFull::Clear),
        }
    }

    /// For a local Management API (tests, the local stack): dummy credentials, fixed endpoint.
    pub fn local(endpoint: &str) -> Self {
        Gateway {
            sdk: None,
            endpoint_override: Some(endpoint.trim_end_matches('/').to_string()),
            clients: Cache::new(MAX_CLIENTS, WhenFull::Clear),
        }
    }

    /// The endpoint for an event's domain and stage (`https://{domain}/{stage}`), unless overridden.
    pub fn endpoint(&self, domain: Option<&str>, stage: Option<&str>) -> Result<String> {
        if let Some(e) = &self.endpoint_override {
            return Ok(e.clone());
        }
        match (domain, stage) {
            (Some(d), Some(s)) if !d.is_empty() && !s.is_empty() => {
                let scheme = if is_loopback(&format!("http://{d}")) {
                    "http"
                } else {
                    "https"
                };
                Ok(format!("{scheme}://{d}/{s}"))
            }
            _ => Err(Error::Config(ConfigError::Missing {
                var: ENDPOINT_VAR.into(),
                hint: "no Management API endpoint: the event has no domain/stage to take it from"
                    .into(),
            })),
        }
    }

    /// The endpoint when the caller has no WebSocket event (session API, sweeper).
    pub fn fixed_endpoint(&self) -> Result<String> {
        self.endpoint(None, None)
    }

    fn client(&self, endpoint: &str) -> Client {
        if let Some(c) = self.clients.get(endpoint) {
            return c;
        }
        let sdk = match &self.sdk {
            Some(sdk) => aws_sdk_apigatewaymanagement::config::Builder::from(&**sdk),
            None => {
                aws_sdk_apigatewaymanagement::config::Builder::from(&local_sdk_config(endpoint))
            }
        };
        let client = Client::from_conf(sdk.endpoint_url(endpoint).build());
        self.clients.insert(endpoint.to_string(), client.clone());
        client
    }

    /// `POST /@connections/{id}`: 1 Management API call.
    pub async fn post(&self, endpoint: &str, connection_id: &str, data: &[u8]) -> Result<Delivery> {
        let out = match self
            .client(endpoint)
            .post_to_connection()
            .connection_id(connection_id)
            .data(Blob::new(data))
            .send()
            .await
        {
            Ok(_) => Ok(Delivery::Delivered),
            Err(SdkError::ServiceError(se))
                if matches!(se.err(), PostToConnectionError::GoneException(_)) =>
            {
                Ok(Delivery::Gone)
            }
            Err(e) => Err(gateway_error("PostToConnection", connection_id, &e)),
        };
        metered("post", out)
    }

    /// `DELETE /@connections/{id}`: closes the connection. Gone (410/404) is reported, not an error.
    pub async fn close(&self, endpoint: &str, connection_id: &str) -> Result<Delivery> {
        let out = match self
            .client(endpoint)
            .delete_connection()
            .connection_id(connection_id)
            .send()
            .await
        {
            Ok(_) => Ok(Delivery::Delivered),
            Err(SdkError::ServiceError(se))
                if matches!(se.err(), DeleteConnectionError::GoneException(_))
                    || se.raw().status().as_u16() == 404 =>
            {
                Ok(Delivery::Gone)
            }
            Err(e) => Err(gateway_error("DeleteConnection", connection_id, &e)),
        };
        metered("delete", out)
    }

    /// `GET /@connections/{id}`: whether the connection is still open (false when gone).
    pub async fn is_live(&self, endpoint: &str, connection_id: &str) -> Result<bool> {
        match self
            .client(endpoint)
            .get_connection()
            .connection_id(connection_id)
            .send()
            .await
        {
            Ok(_) => Ok(true),
            Err(SdkError::ServiceError(se))
                if matches!(
                    se.err(),
                    aws_sdk_apigatewaymanagement::operation::get_connection::GetConnectionError::GoneException(_)
                ) =>
            {
                Ok(false)
            }
            Err(e) => Err(gateway_error("GetConnection", connection_id, &e)),
        }
    }

    /// Closes every connection, [`FANOUT`] at a time, each tried twice when its close fails (not gone:
    /// failed); returns each id with its last outcome, in the order given. Callers that release
    /// capacity release only the `Ok(Delivered)` ones: a 410 may be a socket still inside its
    /// `$connect` (decision 0306), and a failed close leaves the socket open.
    pub async fn close_each(
        &self,
        endpoint: &str,
        connection_ids: &[String],
    ) -> Vec<(String, Result<Delivery>)> {
        bounded(connection_ids.iter().map(|c| async move {
            let first = self.close(endpoint, c).await;
            let r = match first {
                Err(e) => {
                    tracing::warn!(connection = %c, error = %e, "closing a connection failed; trying again");
                    self.close(endpoint, c).await
                }
                ok => ok,
            };
            (c.clone(), r)
        }))
        .await
    }

    /// Closes every connection, [`FANOUT`] at a time; returns the ids whose close failed (not gone: failed).
    pub async fn close_all(&self, endpoint: &str, connection_ids: &[String]) -> Vec<String> {
        let results = bounded(
            connection_ids
                .iter()
                .map(|c| async move { (c, self.close(endpoint, c).await) }),
        )
        .await;
        results
            .into_iter()
            .filter_map(|(c, r)| match r {
                Ok(_) => None,
                Err(e) => {
                    tracing::warn!(connection = %c, error = %e, "closing a connection failed");
                    Some(c.clone())
                }
            })
            .collect()
    }
}

/// [`Error::Gateway`] with the SDK error's full chain.
fn gateway_error(
    operation: &'static str,
    connection_id: &str,
    err: &(dyn std::error::Error + 'static),
) -> Error {
    Error::Gateway {
        operation,
        connection: connection_id.to_string(),
        message: crate::error::error_chain(err),
    }
}

/// Counts a Management API call by its result (`ManagementApiCalls`).
fn metered(action: &'static str, out: Result<Delivery>) -> Result<Delivery> {
    let result = match &out {
        Ok(Delivery::Delivered) => "delivered",
        Ok(Delivery::Gone) => "gone",
        Err(_) => "error",
    };
    crate::telemetry::catalogue::management_call(action, result);
    out
}

/// `TURNSTILE_MANAGEMENT_ENDPOINT`, required (for functions with no WebSocket event to take the
/// endpoint from: the session API and the TTL sweeper).
pub fn required_endpoint(vars: &Vars) -> Result<String, ConfigError> {
    Gateway::endpoint_from_vars(vars)?.ok_or_else(|| ConfigError::Missing {
        var: ENDPOINT_VAR.into(),
        hint: "the WebSocket API's Management API endpoint, \
               https://{api-id}.execute-api.{region}.amazonaws.com/{stage}, to close connections"
            .into(),
    })
}
