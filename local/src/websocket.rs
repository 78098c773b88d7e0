//! A local API Gateway WebSocket API. On an upgrade request it does what API Gateway does: builds the
//! REQUEST authorizer event and invokes the authorizer (a Deny answers the handshake with 403), then
//! invokes `$connect` with the authorizer's context (a status of 400 or more answers the handshake with
//! that status, body and headers). Text and binary frames go to `$default`; a close (or a dropped
//! TCP connection) goes to `$disconnect`, exactly once. The `@connections` Management API is served on
//! the same host and reaches the live sockets through [`LiveConnections`].
//!
//! API Gateway's quotas hold here too: a frame over [`MAX_FRAME`] or a message over [`MAX_MESSAGE`]
//! closes the socket with 1009 "Message too big". The upgrade is served at `/` and at `/{stage}`
//! (the stage-shaped URL API Gateway hands out); any other path that is not the Management API's
//! answers a JSON 404 naming both.

use std::collections::HashMap;
use std::net::SocketAddr;
use std::sync::{Arc, Mutex};

use axum::extract::ws::{CloseFrame, Message, Utf8Bytes, WebSocket, WebSocketUpgrade};
use axum::extract::{ConnectInfo, Query, State};
use axum::http::{HeaderMap, HeaderName, HeaderValue, StatusCode};
use axum::response::{IntoResponse, Response};
use axum::routing::get;
use axum::Router;
use futures::{SinkExt, StreamExt};
use serde_json::{json, Map, Value};
use shared::clock::{SharedClock, Timestamp};
use tokio::sync::mpsc;

use crate::lambda::Invoke;
use crate::management::{self, ConnectionInfo, Connections, Reach};

/// API Gateway's WebSocket frame quota (32 KB).
pub const MAX_FRAME: usize = 32 * 1024;
/// API Gateway's WebSocket message quota (128 KB).
pub const MAX_MESSAGE: usize = 128 * 1024;
/// The close code API Gateway sends when a frame or message is over its quota.
pub const CLOSE_TOO_BIG: u16 = 1009;

/// What the events say about the API (API Gateway fills these from the deployment).
#[derive(Debug, Clone)]
pub struct ApiIdentity {
    pub api_id: String,
    pub stage: String,
    pub account_id: String,
    pub region: String,
    /// `host:port` the clients connect to; the functions build the Management API endpoint from it.
    pub domain_name: String,
}

enum Outbound {
    Data(Vec<u8>),
    Close,
}

struct Live {
    tx: mpsc::UnboundedSender<Outbound>,
    connected_at: Timestamp,
    last_active: Timestamp,
    source_ip: String,
    user_agent: String,
}

/// The sockets that are open right now, by connection id.
pub struct LiveConnections {
    clock: SharedClock,
    inner: Mutex<HashMap<String, Live>>,
}

impl LiveConnections {
    pub fn new(clock: SharedClock) -> Arc<Self> {
        Arc::new(LiveConnections {
            clock,
            inner: Mutex::new(HashMap::new()),
        })
    }

    pub fn len(&self) -> usize {
        self.inner.lock().map(|m| m.len()).unwrap_or(0)
    }

    pub fn is_empty(&self) -> bool {
        self.len() == 0
    }

    pub fn ids(&self) -> Vec<String> {
        self.inner
            .lock()
            .map(|m| m.keys().cloned().collect())
            .unwrap_or_default()
    }

    fn touch(&self, id: &str) {
        if let Ok(mut m) = self.inner.lock() {
            if let Some(l) = m.get_mut(id) {
                l.last_active = self.clock.now();
            }
        }
    }

    fn with<T>(&self, id: &str, f: impl FnOnce(&mut Live) -> T) -> Option<T> {
        self.inner.lock().ok()?.get_mut(id).map(f)
    }
}

impl Connections for LiveConnections {
    fn send(&self, connection_id: &str, data: &[u8]) -> Reach {
        let sent = self.with(connection_id, |l| {
            l.tx.send(Outbound::Data(data.to_vec())).is_ok()
        });
        if sent == Some(true) {
            Reach::Live
        } else {
            Reach::Gone
        }
    }

    fn close(&self, connection_id: &str) -> Reach {
        let sent = self.with(connection_id, |l| l.tx.send(Outbound::Close).is_ok());
        if sent == Some(true) {
            Reach::Live
        } else {
            Reach::Gone
        }
    }

    fn info(&self, connection_id: &str) -> Option<ConnectionInfo> {
        self.with(connection_id, |l| ConnectionInfo {
            connected_at: l.connected_at.to_rfc3339(),
            last_active_at: l.last_active.to_rfc3339(),
            source_ip: l.source_ip.clone(),
            user_agent: l.user_agent.clone(),
        })
    }
}

#[derive(Clone)]
struct WsState {
    api: Arc<ApiIdentity>,
    functions: Arc<dyn Invoke>,
    live: Arc<LiveConnections>,
    clock: SharedClock,
}

/// The WebSocket API's router: the upgrade endpoint at `/` and `/{stage}`, the Management API at
/// `/{stage}/@connections/{id}`, and a JSON 404 naming both on every other path.
pub fn router(
    api: ApiIdentity,
    functions: Arc<dyn Invoke>,
    live: Arc<LiveConnections>,
    clock: SharedClock,
) -> Router {
    let (management, _log) = management::router(live.clone());
    let stage = format!("/{}", api.stage);
    let not_here = format!(
        "Not Found: the WebSocket API is ws://{host}/ (or ws://{host}{stage}); the @connections \
         API is http://{host}{stage}/@connections/{{connectionId}}",
        host = api.domain_name
    );
    let state = WsState {
        api: Arc::new(api),
        functions,
        live,
        clock,
    };
    Router::new()
        .route("/", get(upgrade))
        .route(&stage, get(upgrade))
        .route(&format!("{stage}/"), get(upgrade))
        .with_state(state)
        .route_service(
            "/{stage}/@connections/{id}",
            management.clone().into_service(),
        )
        .route_service("/@connections/{id}", management.into_service())
        .fallback(move || async move { plain(StatusCode::NOT_FOUND, &not_here) })
}

/// A connection id in API Gateway's style: 12 random bytes, base64 (16 characters).
fn new_connection_id() -> String {
    let bytes = uuid::Uuid::new_v4().into_bytes();
    aws_smithy_types::base64::encode(&bytes[..12])
}

fn header_map_json(headers: &HeaderMap) -> Value {
    let mut m = Map::new();
    for (k, v) in headers {
        if let Ok(v) = v.to_str() {
            m.insert(k.as_str().to_string(), json!(v));
        }
    }
    Value::Object(m)
}

fn multi(m: &Value) -> Value {
    match m {
        Value::Object(o) => Value::Object(o.iter().map(|(k, v)| (k.clone(), json!([v]))).collect()),
        _ => json!({}),
    }
}

impl WsState {
    fn request_context(
        &self,
        route: &str,
        event_type: &str,
        conn: &str,
        connected_at: Timestamp,
        ip: &str,
        ua: &str,
    ) -> Value {
        let now = self.clock.now();
        json!({
            "routeKey": route,
            "eventType": event_type,
            "messageDirection": "IN",
            "extendedRequestId": uuid::Uuid::new_v4().to_string(),
            "requestId": uuid::Uuid::new_v4().to_string(),
            "requestTime": now.to_rfc3339(),
            "requestTimeEpoch": now.as_millis(),
            "connectedAt": connected_at.as_millis(),
            "stage": self.api.stage,
            "domainName": self.api.domain_name,
            "connectionId": conn,
            "apiId": self.api.api_id,
            "identity": {"sourceIp": ip, "userAgent": ua},
        })
    }

    fn method_arn(&self, route: &str) -> String {
        format!(
            "arn:aws:execute-api:{}:{}:{}/{}/{}",
            self.api.region, self.api.account_id, self.api.api_id, self.api.stage, route
        )
    }
}

fn plain(status: StatusCode, message: &str) -> Response {
    (status, axum::Json(json!({ "message": message }))).into_response()
}

/// `Allow` only when some statement allows and none denies, as API Gateway evaluates the policy.
pub(crate) fn policy_allows(resp: &Value) -> bool {
    let statements = resp["policyDocument"]["Statement"]
        .as_array()
        .cloned()
        .unwrap_or_default();
    let effect = |s: &Value| s["Effect"].as_str().unwrap_or("").to_ascii_lowercase();
    statements.iter().any(|s| effect(s) == "allow")
        && !statements.iter().any(|s| effect(s) == "deny")
}

/// Turns a function's proxy response into an HTTP response (status, headers, body).
fn proxy_response(resp: &Value) -> Response {
    let status = resp["statusCode"]
        .as_u64()
        .and_then(|s| StatusCode::from_u16(s as u16).ok())
        .unwrap_or(StatusCode::OK);
    let body = match &resp["body"] {
        Value::String(s) => s.clone(),
        Value::Null => String::new(),
        other => other.to_string(),
    };
    let mut out = (status, body).into_response();
    if let Some(h) = resp["headers"].as_object() {
        for (k, v) in h {
            if let (Ok(name), Some(Ok(value))) = (
                HeaderName::from_bytes(k.as_bytes()),
                v.as_str().map(HeaderValue::from_str),
            ) {
                out.headers_mut().insert(name, value);
            }
        }
    }
    out
}

async fn upgrade(
    State(st): State<WsState>,
    ConnectInfo(peer): ConnectInfo<SocketAddr>,
    Query(query): Query<HashMap<String, String>>,
    headers: HeaderMap,
    ws: WebSocketUpgrade,
) -> Response {
    let conn = new_connection_id();
    let connected_at = st.clock.now();
    let ip = peer.ip().to_string();
    let ua = headers
        .get("user-agent")
        .and_then(|v| v.to_str().ok())
        .unwrap_or("")
        .to_string();
    let query_json: Value = json!(query);
    let headers_json = header_map_json(&headers);
    let ctx = st.request_context("$connect", "CONNECT", &conn, connected_at, &ip, &ua);

    let auth_event = json!({
        "type": "REQUEST",
        "methodArn": st.method_arn("$connect"),
        "headers": headers_json,
        "multiValueHeaders": multi(&headers_json),
        "queryStringParameters": query_json,
        "multiValueQueryStringParameters": multi(&query_json),
        "stageVariables": {},
        "requestContext": ctx,
    });
    let auth = match st.functions.invoke("authorizer", auth_event).await {
        Ok(v) => v,
        Err(e) => {
            tracing::error!(connection = %conn, error = %e, "authorizer failed");
            return plain(StatusCode::INTERNAL_SERVER_ERROR, "Internal server error");
        }
    };
    if !policy_allows(&auth) {
        // API Gateway answers every Deny with 403 {"message":"Forbidden"}; the reason is the
        // authorizer's, in this line's `reason` field (and on the dashboard's "Last decisions").
        tracing::info!(
            connection = %conn,
            reason = auth["context"]["reason"].as_str().unwrap_or("denied"),
            limit = auth["context"]["limit"].as_str().unwrap_or(""),
            "authorizer denied the connection"
        );
        return plain(StatusCode::FORBIDDEN, "Forbidden");
    }
    let mut authorizer = auth["context"].as_object().cloned().unwrap_or_default();
    if let Some(p) = auth["principalId"].as_str() {
        authorizer.insert("principalId".into(), json!(p));
    }
    let mut connect_ctx = ctx.clone();
    connect_ctx["authorizer"] = Value::Object(authorizer.clone());
    let connect_event = json!({
        "headers": headers_json,
        "multiValueHeaders": multi(&headers_json),
        "queryStringParameters": query_json,
        "multiValueQueryStringParameters": multi(&query_json),
        "requestContext": connect_ctx,
        "isBase64Encoded": false,
    });
    let ws = match st.functions.invoke("connect", connect_event).await {
        Ok(resp) if resp["statusCode"].as_u64().unwrap_or(200) >= 400 => {
            tracing::info!(connection = %conn, status = %resp["statusCode"], "$connect refused the connection");
            return proxy_response(&resp);
        }
        // As API Gateway does: the subprotocol `$connect` answers is the handshake's.
        Ok(resp) => match resp["headers"]
            .as_object()
            .and_then(|h| {
                h.iter()
                    .find(|(k, _)| k.eq_ignore_ascii_case("sec-websocket-protocol"))
            })
            .and_then(|(_, v)| v.as_str())
        {
            Some(p) => ws.protocols([p.to_string()]),
            None => ws,
        }
        .max_frame_size(MAX_FRAME)
        .max_message_size(MAX_MESSAGE),
        Err(e) => {
            tracing::error!(connection = %conn, error = %e, "$connect failed");
            return plain(StatusCode::INTERNAL_SERVER_ERROR, "Internal server error");
        }
    };

    let (tx, rx) = mpsc::unbounded_channel();
    if let Ok(mut m) = st.live.inner.lock() {
        m.insert(
            conn.clone(),
            Live {
                tx,
                connected_at,
                last_active: connected_at,
                source_ip: ip.clone(),
                user_agent: ua.clone(),
            },
        );
    }
    let session = Session {
        st: st.clone(),
        conn: conn.clone(),
        connected_at,
        ip,
        ua,
        authorizer: Value::Object(authorizer),
    };
    let failed = session.clone();
    ws.on_failed_upgrade(move |e| {
        tracing::warn!(connection = %failed.conn, error = %e, "upgrade failed after $connect");
        tokio::spawn(async move { failed.disconnect(1006, "upgrade failed").await });
    })
    .on_upgrade(move |socket| session.run(socket, rx))
}

/// Whether a read failed because a frame or message was over [`MAX_FRAME`] or [`MAX_MESSAGE`].
fn over_quota(e: &axum::Error) -> bool {
    use tokio_tungstenite::tungstenite::Error;
    std::error::Error::source(e)
        .and_then(|inner| inner.downcast_ref::<Error>())
        .is_some_and(|inner| matches!(inner, Error::Capacity(_)))
}

#[derive(Clone)]
struct Session {
    st: WsState,
    conn: String,
    connected_at: Timestamp,
    ip: String,
    ua: String,
    authorizer: Value,
}

impl Session {
    async fn run(self, socket: WebSocket, mut rx: mpsc::UnboundedReceiver<Outbound>) {
        tracing::info!(connection = %self.conn, "connected");
        let (mut sink, mut stream) = socket.split();
        let (code, reason) = loop {
            tokio::select! {
                frame = stream.next() => match frame {
                    Some(Ok(Message::Text(t))) => self.message(t.as_str().to_string(), false),
                    Some(Ok(Message::Binary(b))) => {
                        self.message(aws_smithy_types::base64::encode(&b), true)
                    }
                    Some(Ok(Message::Close(frame))) => {
                        break frame.map_or((1005, String::new()), |f| (f.code, f.reason.to_string()));
                    }
                    Some(Ok(_)) => {}
                    Some(Err(e)) if over_quota(&e) => {
                        let frame = CloseFrame {
                            code: CLOSE_TOO_BIG,
                            reason: Utf8Bytes::from_static("Message too big"),
                        };
                        let _ = sink.send(Message::Close(Some(frame))).await;
                        break (CLOSE_TOO_BIG, "Message too big".to_string());
                    }
                    Some(Err(_)) | None => break (1006, "Going away".to_string()),
                },
                out = rx.recv() => match out {
                    Some(Outbound::Data(bytes)) => {
                        let msg = match String::from_utf8(bytes) {
                            Ok(s) => Message::Text(Utf8Bytes::from(s)),
                            Err(e) => Message::Binary(e.into_bytes().into()),
                        };
                        if sink.send(msg).await.is_err() {
                            break (1006, "Going away".to_string());
                        }
                    }
                    Some(Outbound::Close) | None => {
                        let frame = CloseFrame { code: 1000, reason: Utf8Bytes::from_static("Goodbye") };
                        let _ = sink.send(Message::Close(Some(frame))).await;
                        break (1000, "Closed by the Management API".to_string());
                    }
                },
            }
        };
        self.disconnect(code, &reason).await;
    }

    /// Invokes `$default` for one frame without holding up the socket's I/O (API Gateway invokes
    /// concurrently too).
    fn message(&self, body: String, base64: bool) {
        self.st.live.touch(&self.conn);
        let me = self.clone();
        tokio::spawn(async move {
            let mut ctx = me.st.request_context(
                "$default",
                "MESSAGE",
                &me.conn,
                me.connected_at,
                &me.ip,
                &me.ua,
            );
            ctx["messageId"] = json!(uuid::Uuid::new_v4().to_string());
            ctx["authorizer"] = me.authorizer.clone();
            let event = json!({"requestContext": ctx, "body": body, "isBase64Encoded": base64});
            if let Err(e) = me.st.functions.invoke("message", event).await {
                tracing::error!(connection = %me.conn, error = %e, "$default failed");
            }
        });
    }

    async fn disconnect(&self, code: u16, reason: &str) {
        if let Ok(mut m) = self.st.live.inner.lock() {
            m.remove(&self.conn);
        }
        let mut ctx = self.st.request_context(
            "$disconnect",
            "DISCONNECT",
            &self.conn,
            self.connected_at,
            &self.ip,
            &self.ua,
        );
        ctx["disconnectStatusCode"] = json!(code);
        ctx["disconnectReason"] = json!(reason);
        ctx["authorizer"] = self.authorizer.clone();
        let event = json!({"requestContext": ctx, "isBase64Encoded": false});
        match self.st.functions.invoke("disconnect", event).await {
            Ok(_) => tracing::info!(connection = %self.conn, code, "disconnected"),
            Err(e) => tracing::error!(connection = %self.conn, error = %e, "$disconnect failed"),
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn policies_allow_only_without_a_deny() {
        let allow = json!({"policyDocument": {"Statement": [{"Effect": "Allow"}]}});
        let deny = json!({"policyDocument": {"Statement": [{"Effect": "Deny"}]}});
        let both =
            json!({"policyDocument": {"Statement": [{"Effect": "Allow"}, {"Effect": "Deny"}]}});
        assert!(policy_allows(&allow));
        assert!(!policy_allows(&deny));
        assert!(!policy_allows(&both));
        assert!(!policy_allows(&json!({})));
    }

    #[test]
    fn connection_ids_look_like_api_gateways() {
        let id = new_connection_id();
        assert_eq!(id.len(), 16);
        assert!(shared::ids::ConnectionId::parse(&id).is_ok());
        assert_ne!(id, new_connection_id());
    }
}

/// Property tests (docs/testing.md): the functions' answers are turned into HTTP and frames.
#[cfg(test)]
mod fuzz_tests {
    use super::*;
    use proptest::prelude::*;
    use shared::fuzz;

    const KEYS: &[&str] = &[
        "policyDocument",
        "Statement",
        "Effect",
        "statusCode",
        "body",
        "headers",
        "context",
    ];

    proptest! {
        #![proptest_config(fuzz::config(1))]

        /// `fuzz_function_answers`: any authorizer or proxy answer (arbitrary or a valid one with
        /// fields mutated) is read without a panic; a Deny anywhere never allows.
        #[test]
        fn fuzz_function_answers(
            resp in prop_oneof![
                fuzz::json_with_keys(KEYS),
                fuzz::mutated(json!({"policyDocument": {"Statement": [{"Effect": "Allow"}]},
                    "statusCode": 429, "headers": {"Retry-After": "3"}, "body": "{}"})),
            ],
        ) {
            let allows = policy_allows(&resp);
            let deny = resp["policyDocument"]["Statement"].as_array().is_some_and(|s| {
                s.iter().any(|x| x["Effect"].as_str().is_some_and(|e| e.eq_ignore_ascii_case("deny")))
            });
            prop_assert!(!(allows && deny));
            let _ = proxy_response(&resp);
        }
    }
}
