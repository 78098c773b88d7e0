//! A local API Gateway Management API.
//!
//! Routes (any path prefix is accepted, so an endpoint with a stage such as
//! `http://127.0.0.1:PORT/dev` works like API Gateway's `https://{domain}/{stage}`):
//! - `POST {prefix}/@connections/{id}`: send the body to the connection; 200, or 410 `GoneException`.
//! - `GET {prefix}/@connections/{id}`: connection info; 200, or 410 `GoneException`.
//! - `DELETE {prefix}/@connections/{id}`: close the connection; 204, or 410 `GoneException`.
//!
//! Error answers carry `x-amzn-ErrorType` and a JSON body with `message`, as API Gateway's do, so
//! the SDK maps them to its typed errors. What happens to a connection is up to a [`Connections`]
//! implementation: the local WebSocket server's live sockets, or the [`Recorder`] used in tests.

use std::collections::HashSet;
use std::net::SocketAddr;
use std::sync::{Arc, Mutex};

use axum::body::Bytes;
use axum::extract::State;
use axum::http::{HeaderValue, Method, StatusCode, Uri};
use axum::response::{IntoResponse, Response};
use axum::Router;
use serde::Serialize;

/// Whether an operation reached a live connection.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Reach {
    Live,
    Gone,
}

/// Information `GET @connections/{id}` returns.
#[derive(Debug, Clone, PartialEq, Eq, Serialize)]
#[serde(rename_all = "camelCase")]
pub struct ConnectionInfo {
    /// RFC 3339.
    pub connected_at: String,
    pub last_active_at: String,
    pub source_ip: String,
    pub user_agent: String,
}

/// Where Management API operations land. Implemented by the local WebSocket server (live sockets)
/// and by [`Recorder`].
pub trait Connections: Send + Sync + 'static {
    fn send(&self, connection_id: &str, data: &[u8]) -> Reach;
    fn close(&self, connection_id: &str) -> Reach;
    fn info(&self, connection_id: &str) -> Option<ConnectionInfo>;
}

/// One request the local Management API received.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Received {
    /// `POST`, `GET` or `DELETE`.
    pub method: String,
    pub connection_id: String,
    pub body: Vec<u8>,
    /// What the API answered: 200/204, or 410 for a gone connection.
    pub status: u16,
}

impl Received {
    pub fn body_str(&self) -> &str {
        std::str::from_utf8(&self.body).unwrap_or("")
    }
}

/// A [`Connections`] for tests: every connection is live unless marked gone (or closed through the
/// API); every request is recorded by the server.
#[derive(Debug, Default)]
pub struct Recorder {
    gone: Mutex<HashSet<String>>,
}

impl Recorder {
    pub fn new() -> Self {
        Self::default()
    }

    /// From now on, the connection answers 410 Gone.
    pub fn mark_gone(&self, connection_id: &str) {
        if let Ok(mut g) = self.gone.lock() {
            g.insert(connection_id.to_string());
        }
    }

    /// From now on, the connection is live again (a socket that answered 410 while still inside
    /// its `$connect`, whose handshake then completed).
    pub fn mark_live(&self, connection_id: &str) {
        if let Ok(mut g) = self.gone.lock() {
            g.remove(connection_id);
        }
    }

    pub fn is_gone(&self, connection_id: &str) -> bool {
        self.gone
            .lock()
            .map(|g| g.contains(connection_id))
            .unwrap_or(false)
    }
}

impl Connections for Recorder {
    fn send(&self, connection_id: &str, _data: &[u8]) -> Reach {
        if self.is_gone(connection_id) {
            Reach::Gone
        } else {
            Reach::Live
        }
    }

    fn close(&self, connection_id: &str) -> Reach {
        let was = self.send(connection_id, &[]);
        self.mark_gone(connection_id);
        was
    }

    fn info(&self, connection_id: &str) -> Option<ConnectionInfo> {
        (!self.is_gone(connection_id)).then(|| ConnectionInfo {
            connected_at: "1970-01-01T00:00:00Z".into(),
            last_active_at: "1970-01-01T00:00:00Z".into(),
            source_ip: "127.0.0.1".into(),
            user_agent: "turnstile-local".into(),
        })
    }
}

struct Shared {
    connections: Arc<dyn Connections>,
    received: Mutex<Vec<Received>>,
}

/// The Axum router of the Management API, to serve alone ([`ManagementApi::start`]) or merged into
/// a larger local server.
pub fn router(connections: Arc<dyn Connections>) -> (Router, Log) {
    let shared = Arc::new(Shared {
        connections,
        received: Mutex::new(Vec::new()),
    });
    let log = Log(shared.clone());
    (Router::new().fallback(handle).with_state(shared), log)
}

/// Read access to what the server received.
#[derive(Clone)]
pub struct Log(Arc<Shared>);

impl Log {
    pub fn received(&self) -> Vec<Received> {
        self.0
            .received
            .lock()
            .map(|r| r.clone())
            .unwrap_or_default()
    }

    pub fn clear(&self) {
        if let Ok(mut r) = self.0.received.lock() {
            r.clear();
        }
    }
}

/// A running local Management API on its own port.
pub struct ManagementApi {
    pub addr: SocketAddr,
    log: Log,
    shutdown: Option<tokio::sync::oneshot::Sender<()>>,
}

impl ManagementApi {
    /// Binds `addr` (use port 0 for a free port) and serves until dropped.
    pub async fn start(
        addr: SocketAddr,
        connections: Arc<dyn Connections>,
    ) -> std::io::Result<Self> {
        let listener = tokio::net::TcpListener::bind(addr).await?;
        let addr = listener.local_addr()?;
        let (app, log) = router(connections);
        let (tx, rx) = tokio::sync::oneshot::channel::<()>();
        tokio::spawn(async move {
            let served = axum::serve(listener, app)
                .with_graceful_shutdown(async {
                    let _ = rx.await;
                })
                .await;
            if let Err(e) = served {
                tracing::warn!(error = %e, "local Management API stopped");
            }
        });
        Ok(ManagementApi {
            addr,
            log,
            shutdown: Some(tx),
        })
    }

    /// The endpoint to give the SDK: `http://127.0.0.1:PORT`.
    pub fn url(&self) -> String {
        format!("http://{}", self.addr)
    }

    pub fn received(&self) -> Vec<Received> {
        self.log.received()
    }

    /// Only the requests of one method.
    pub fn received_by(&self, method: &str) -> Vec<Received> {
        self.received()
            .into_iter()
            .filter(|r| r.method == method)
            .collect()
    }

    pub fn clear(&self) {
        self.log.clear()
    }
}

impl Drop for ManagementApi {
    fn drop(&mut self) {
        if let Some(tx) = self.shutdown.take() {
            let _ = tx.send(());
        }
    }
}

/// The connection id from `.../@connections/{id}`, percent-decoded.
pub fn connection_id_from_path(path: &str) -> Option<String> {
    let (_, rest) = path.rsplit_once("/@connections/")?;
    if rest.is_empty() || rest.contains('/') {
        return None;
    }
    percent_decode(rest)
}

fn percent_decode(s: &str) -> Option<String> {
    let bytes = s.as_bytes();
    let mut out = Vec::with_capacity(bytes.len());
    let mut i = 0;
    while i < bytes.len() {
        if bytes[i] == b'%' {
            let hex = s.get(i + 1..i + 3)?;
            out.push(u8::from_str_radix(hex, 16).ok()?);
            i += 3;
        } else {
            out.push(bytes[i]);
            i += 1;
        }
    }
    String::from_utf8(out).ok()
}

fn error(status: StatusCode, kind: &'static str, message: &str) -> Response {
    let body = serde_json::json!({ "message": message }).to_string();
    let mut r = (status, body).into_response();
    r.headers_mut()
        .insert("x-amzn-ErrorType", HeaderValue::from_static(kind));
    r.headers_mut()
        .insert("content-type", HeaderValue::from_static("application/json"));
    r
}

async fn handle(
    State(shared): State<Arc<Shared>>,
    method: Method,
    uri: Uri,
    body: Bytes,
) -> Response {
    let Some(id) = connection_id_from_path(uri.path()) else {
        return error(
            StatusCode::NOT_FOUND,
            "NotFoundException",
            "expected /@connections/{connectionId}",
        );
    };
    let c = &shared.connections;
    let (status, response) = match method {
        Method::POST => match c.send(&id, &body) {
            Reach::Live => (200, StatusCode::OK.into_response()),
            Reach::Gone => (410, gone(&id)),
        },
        Method::DELETE => match c.close(&id) {
            Reach::Live => (204, StatusCode::NO_CONTENT.into_response()),
            Reach::Gone => (410, gone(&id)),
        },
        Method::GET => match c.info(&id) {
            Some(info) => {
                let body = serde_json::json!({
                    "connectedAt": info.connected_at,
                    "lastActiveAt": info.last_active_at,
                    "identity": { "sourceIp": info.source_ip, "userAgent": info.user_agent },
                })
                .to_string();
                let mut r = (StatusCode::OK, body).into_response();
                r.headers_mut()
                    .insert("content-type", HeaderValue::from_static("application/json"));
                (200, r)
            }
            None => (410, gone(&id)),
        },
        _ => {
            return error(
                StatusCode::METHOD_NOT_ALLOWED,
                "MethodNotAllowedException",
                "POST, GET or DELETE",
            )
        }
    };
    if let Ok(mut r) = shared.received.lock() {
        r.push(Received {
            method: method.as_str().to_string(),
            connection_id: id,
            body: body.to_vec(),
            status,
        });
    }
    response
}

fn gone(id: &str) -> Response {
    error(
        StatusCode::GONE,
        "GoneException",
        &format!("connection {id} is gone"),
    )
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn connection_ids_are_taken_from_any_prefix_and_decoded() {
        assert_eq!(
            connection_id_from_path("/@connections/abc%3D").as_deref(),
            Some("abc=")
        );
        assert_eq!(
            connection_id_from_path("/dev/@connections/a%2Fb").as_deref(),
            Some("a/b")
        );
        assert_eq!(connection_id_from_path("/other"), None);
        assert_eq!(connection_id_from_path("/@connections/"), None);
    }
}
