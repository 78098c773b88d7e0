//! A record-then-replay stub of DynamoDB's JSON protocol, for measuring a client's own cost
//! (docs/decisions/0806-client-cost.md).
//!
//! Against DynamoDB Local a decision's latency is mostly the emulator's. To see what the client
//! alone spends, the client talks to a [`ReplayStub`] in **another process**:
//!
//! - in [`Mode::Record`] the stub forwards every request to the upstream (DynamoDB Local) and keeps
//!   its answer, filed under three keys of decreasing precision (see [`Keys`]);
//! - in [`Mode::Replay`] it answers every request at once from that record without contacting the
//!   upstream (a request no record matches is forwarded and counted as a miss).
//!
//! The answers are real ones, replayed byte for byte with their headers, so `x-amz-crc32` stays
//! right and every client stays on the success path it took while recording (a warm-up). A 2xx
//! answer replaces an earlier one under the same key; an error answer is kept only where no answer
//! was recorded yet, so a refusal seen once never hides the success path.
//!
//! The mode is switched over HTTP by the client under test (`POST /__stub/record` clears the record,
//! `POST /__stub/replay`, `GET /__stub/stats`): see [`control`].

use std::collections::{BTreeMap, HashMap};
use std::net::SocketAddr;
use std::sync::atomic::{AtomicBool, AtomicU64, Ordering};
use std::sync::{Arc, Mutex};

use bytes::Bytes;
use http::{HeaderMap, Method, Request, Response, StatusCode};
use http_body_util::{BodyExt, Full};
use hyper::body::Incoming;
use hyper_util::client::legacy::connect::HttpConnector;
use hyper_util::client::legacy::Client;
use hyper_util::rt::TokioExecutor;
use serde_json::{json, Value};

use crate::keys;
use crate::served::Served;

/// Path prefix of the stub's control requests (never a DynamoDB path: the SDKs post to `/`).
pub const CONTROL_PREFIX: &str = "/__stub/";

/// What the stub does with a DynamoDB request.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Mode {
    /// Forward to the upstream and keep the answer.
    Record,
    /// Answer from the record without contacting the upstream.
    Replay,
}

impl Mode {
    fn name(self) -> &'static str {
        match self {
            Mode::Record => "record",
            Mode::Replay => "replay",
        }
    }
}

#[derive(Debug, thiserror::Error)]
pub enum StubError {
    #[error("stub control {action}: {detail}")]
    Control { action: String, detail: String },
}

/// The three keys a request is filed under, most precise first.
///
/// - `exact`: the operation and the request body without the values that change from one decision
///   to the next (`ExpressionAttributeValues`, `ClientRequestToken`, the values of a put `Item`):
///   the same table, item key and expressions;
/// - `shape`: as `exact` with every item key's values reduced to their type (`{"S":"?"}`): the same
///   request on another item (a reservation id per decision);
/// - `operation`: the operation and the tables it names.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Keys {
    pub exact: String,
    pub shape: String,
    pub operation: String,
}

impl Keys {
    /// The keys of one request (`target`: the `X-Amz-Target` header; `body`: its JSON).
    pub fn of(target: &str, body: &[u8]) -> Keys {
        let op = keys::operation(target).unwrap_or(target);
        let json: Value = serde_json::from_slice(body).unwrap_or(Value::Null);
        let mut tables = Vec::new();
        collect_tables(&json, &mut tables);
        tables.sort();
        tables.dedup();
        Keys {
            exact: format!("{op} {}", canonical(&skeleton(&json, false))),
            shape: format!("{op} {}", canonical(&skeleton(&json, true))),
            operation: format!("{op} {}", tables.join(",")),
        }
    }
}

/// The request without its per-decision values; `mask_keys` also reduces item keys to their types.
fn skeleton(v: &Value, mask_keys: bool) -> Value {
    match v {
        Value::Object(m) => Value::Object(
            m.iter()
                .filter(|(k, _)| {
                    !matches!(
                        k.as_str(),
                        "ExpressionAttributeValues" | "ClientRequestToken"
                    )
                })
                .map(|(k, v)| {
                    let v = match k.as_str() {
                        // A put item's attribute names: its shape, not its values.
                        "Item" => Value::Array(
                            v.as_object()
                                .map(|o| o.keys().map(|n| Value::String(n.clone())).collect())
                                .unwrap_or_default(),
                        ),
                        "Key" | "ExclusiveStartKey" if mask_keys => mask(v),
                        "Keys" if mask_keys => Value::Array(
                            v.as_array()
                                .map(|a| a.iter().map(mask).collect())
                                .unwrap_or_default(),
                        ),
                        _ => skeleton(v, mask_keys),
                    };
                    (k.clone(), v)
                })
                .collect(),
        ),
        Value::Array(a) => Value::Array(a.iter().map(|x| skeleton(x, mask_keys)).collect()),
        other => other.clone(),
    }
}

/// An item key with each attribute value reduced to its type.
fn mask(key: &Value) -> Value {
    match key.as_object() {
        Some(o) => Value::Object(
            o.iter()
                .map(|(name, av)| {
                    let ty = av
                        .as_object()
                        .and_then(|t| t.keys().next().cloned())
                        .unwrap_or_default();
                    (name.clone(), json!({ ty: "?" }))
                })
                .collect(),
        ),
        None => Value::Null,
    }
}

/// Every `TableName` and every table named as a key of `RequestItems`.
fn collect_tables(v: &Value, out: &mut Vec<String>) {
    match v {
        Value::Object(m) => {
            for (k, x) in m {
                match (k.as_str(), x) {
                    ("TableName", Value::String(t)) => out.push(t.clone()),
                    ("RequestItems", Value::Object(t)) => {
                        out.extend(t.keys().cloned());
                        t.values().for_each(|x| collect_tables(x, out));
                    }
                    _ => collect_tables(x, out),
                }
            }
        }
        Value::Array(a) => a.iter().for_each(|x| collect_tables(x, out)),
        _ => {}
    }
}

/// JSON with object keys sorted (whatever map order serde_json was built with).
fn canonical(v: &Value) -> String {
    match v {
        Value::Object(m) => {
            let sorted: BTreeMap<_, _> = m.iter().collect();
            let parts: Vec<String> = sorted
                .into_iter()
                .map(|(k, v)| format!("{}:{}", Value::String(k.clone()), canonical(v)))
                .collect();
            format!("{{{}}}", parts.join(","))
        }
        Value::Array(a) => format!(
            "[{}]",
            a.iter().map(canonical).collect::<Vec<_>>().join(",")
        ),
        other => other.to_string(),
    }
}

/// One recorded answer: status, the headers a client reads, and the body, replayed as they came.
#[derive(Debug, Clone)]
struct Canned {
    status: StatusCode,
    headers: HeaderMap,
    body: Bytes,
}

impl Canned {
    fn response(&self) -> Response<Full<Bytes>> {
        let mut r = Response::new(Full::new(self.body.clone()));
        *r.status_mut() = self.status;
        *r.headers_mut() = self.headers.clone();
        r
    }
}

#[derive(Default)]
struct Book {
    exact: HashMap<String, Canned>,
    shape: HashMap<String, Canned>,
    operation: HashMap<String, Canned>,
}

impl Book {
    fn file(&mut self, k: Keys, c: Canned) {
        let ok = c.status.is_success();
        for (map, key) in [
            (&mut self.exact, k.exact),
            (&mut self.shape, k.shape),
            (&mut self.operation, k.operation),
        ] {
            if ok || !map.contains_key(&key) {
                map.insert(key, c.clone());
            }
        }
    }

    fn find(&self, k: &Keys) -> Option<&Canned> {
        self.exact
            .get(&k.exact)
            .or_else(|| self.shape.get(&k.shape))
            .or_else(|| self.operation.get(&k.operation))
    }
}

#[derive(Default)]
struct Counters {
    requests: AtomicU64,
    replayed: AtomicU64,
    misses: AtomicU64,
    forwarded: AtomicU64,
    upstream_errors: AtomicU64,
    request_bytes: AtomicU64,
    response_bytes: AtomicU64,
}

impl Counters {
    fn all(&self) -> [(&'static str, &AtomicU64); 7] {
        [
            ("requests", &self.requests),
            ("replayed", &self.replayed),
            ("misses", &self.misses),
            ("forwarded", &self.forwarded),
            ("upstream_errors", &self.upstream_errors),
            ("request_bytes", &self.request_bytes),
            ("response_bytes", &self.response_bytes),
        ]
    }
}

fn add(a: &AtomicU64, n: u64) {
    a.fetch_add(n, Ordering::Relaxed);
}

struct Shared {
    upstream: String,
    client: Client<HttpConnector, Full<Bytes>>,
    replay: AtomicBool,
    book: Mutex<Book>,
    counters: Counters,
    by_operation: Mutex<BTreeMap<String, u64>>,
}

/// A running stub; dropping it stops it.
pub struct ReplayStub(Served<Shared>);

impl std::fmt::Debug for ReplayStub {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        self.0.fmt(f)
    }
}

impl ReplayStub {
    /// Starts a stub on `listen` in front of `upstream`, recording.
    pub async fn bind(listen: SocketAddr, upstream: &str) -> std::io::Result<ReplayStub> {
        let shared = Shared {
            upstream: upstream.trim_end_matches('/').to_string(),
            client: Client::builder(TokioExecutor::new()).build_http(),
            replay: AtomicBool::new(false),
            book: Mutex::new(Book::default()),
            counters: Counters::default(),
            by_operation: Mutex::new(BTreeMap::new()),
        };
        let handle = |s: Arc<Shared>, req| s.handle(req);
        let served =
            Served::bind("ReplayStub", listen, upstream, shared, |_| false, handle).await?;
        Ok(ReplayStub(served))
    }

    /// The endpoint to give a DynamoDB client.
    pub fn url(&self) -> String {
        self.0.url()
    }

    pub fn addr(&self) -> SocketAddr {
        self.0.addr()
    }

    /// Switches the mode (as the control requests do); `Record` clears the record.
    pub fn set_mode(&self, mode: Mode) {
        self.0.shared.set_mode(mode);
    }

    /// Counters since the last mode switch (the JSON `GET /__stub/stats` answers).
    pub fn stats(&self) -> Value {
        self.0.shared.stats()
    }
}

fn text(status: StatusCode, body: String) -> Response<Full<Bytes>> {
    let mut r = Response::new(Full::new(Bytes::from(body)));
    *r.status_mut() = status;
    r
}

impl Shared {
    fn book(&self) -> std::sync::MutexGuard<'_, Book> {
        self.book.lock().unwrap_or_else(|p| p.into_inner())
    }

    fn set_mode(&self, mode: Mode) {
        if mode == Mode::Record {
            *self.book() = Book::default();
        }
        self.replay.store(mode == Mode::Replay, Ordering::SeqCst);
        for (_, a) in self.counters.all() {
            a.store(0, Ordering::SeqCst);
        }
        self.by_operation
            .lock()
            .unwrap_or_else(|p| p.into_inner())
            .clear();
    }

    fn mode(&self) -> Mode {
        if self.replay.load(Ordering::SeqCst) {
            Mode::Replay
        } else {
            Mode::Record
        }
    }

    fn stats(&self) -> Value {
        let mut m = serde_json::Map::new();
        m.insert("mode".into(), self.mode().name().into());
        for (name, a) in self.counters.all() {
            m.insert(name.into(), a.load(Ordering::SeqCst).into());
        }
        let by = self
            .by_operation
            .lock()
            .unwrap_or_else(|p| p.into_inner())
            .clone();
        m.insert("by_operation".into(), json!(by));
        Value::Object(m)
    }

    fn control(&self, method: &Method, path: &str) -> Response<Full<Bytes>> {
        let action = &path[CONTROL_PREFIX.len()..];
        match (method, action) {
            (&Method::POST, "record") => self.set_mode(Mode::Record),
            (&Method::POST, "replay") => self.set_mode(Mode::Replay),
            (&Method::GET, "stats") => {}
            _ => return text(StatusCode::NOT_FOUND, format!("no control {method} {path}")),
        }
        text(StatusCode::OK, self.stats().to_string())
    }

    async fn handle(
        self: Arc<Self>,
        req: Request<Incoming>,
    ) -> Result<Response<Full<Bytes>>, hyper::Error> {
        let (parts, body) = req.into_parts();
        let body = body.collect().await?.to_bytes();
        if parts.uri.path().starts_with(CONTROL_PREFIX) {
            return Ok(self.control(&parts.method, parts.uri.path()));
        }
        add(&self.counters.requests, 1);
        add(&self.counters.request_bytes, body.len() as u64);
        let target = parts
            .headers
            .get("x-amz-target")
            .and_then(|v| v.to_str().ok())
            .unwrap_or("")
            .to_string();
        let keys = Keys::of(&target, &body);
        *self
            .by_operation
            .lock()
            .unwrap_or_else(|p| p.into_inner())
            .entry(keys::operation(&target).unwrap_or("").to_string())
            .or_default() += 1;
        if self.mode() == Mode::Replay {
            let found = self.book().find(&keys).cloned();
            if let Some(c) = found {
                add(&self.counters.replayed, 1);
                add(&self.counters.response_bytes, c.body.len() as u64);
                return Ok(c.response());
            }
            add(&self.counters.misses, 1);
        }
        let canned = match self.forward(parts, body).await {
            Ok(c) => c,
            Err(detail) => {
                add(&self.counters.upstream_errors, 1);
                return Ok(text(StatusCode::BAD_GATEWAY, detail));
            }
        };
        add(&self.counters.forwarded, 1);
        add(&self.counters.response_bytes, canned.body.len() as u64);
        let r = canned.response();
        self.book().file(keys, canned);
        Ok(r)
    }

    async fn forward(&self, parts: http::request::Parts, body: Bytes) -> Result<Canned, String> {
        let (parts, body) = crate::send_upstream(&self.client, &self.upstream, parts, body).await?;
        let mut headers = parts.headers;
        // Framing is the stub's own (hyper sets the length of the replayed body).
        for h in [
            http::header::CONTENT_LENGTH,
            http::header::TRANSFER_ENCODING,
            http::header::CONNECTION,
            http::header::DATE,
        ] {
            headers.remove(h);
        }
        Ok(Canned {
            status: parts.status,
            headers,
            body,
        })
    }
}

/// Sends a control request (`"record"`, `"replay"` or `"stats"`) to the stub at `url` and returns
/// its counters (those of the mode being left, for a switch: read them before switching).
pub async fn control(url: &str, action: &str) -> Result<Value, StubError> {
    let fail = |detail: String| StubError::Control {
        action: action.to_string(),
        detail,
    };
    let method = if action == "stats" {
        Method::GET
    } else {
        Method::POST
    };
    let req = Request::builder()
        .method(method)
        .uri(format!(
            "{}{CONTROL_PREFIX}{action}",
            url.trim_end_matches('/')
        ))
        .body(Full::new(Bytes::new()))
        .map_err(|e| fail(e.to_string()))?;
    let client: Client<HttpConnector, Full<Bytes>> =
        Client::builder(TokioExecutor::new()).build_http();
    let resp = client.request(req).await.map_err(|e| fail(e.to_string()))?;
    let status = resp.status();
    let body = resp
        .into_body()
        .collect()
        .await
        .map_err(|e| fail(e.to_string()))?
        .to_bytes();
    if !status.is_success() {
        return Err(fail(format!(
            "{status}: {}",
            String::from_utf8_lossy(&body)
        )));
    }
    serde_json::from_slice(&body).map_err(|e| fail(e.to_string()))
}

#[cfg(test)]
mod tests {
    use super::*;

    const UPDATE: &str = "DynamoDB_20120810.UpdateItem";

    #[test]
    fn per_decision_values_do_not_change_the_exact_key() {
        let a = br#"{"TableName":"t","Key":{"pk":{"S":"a"}},"UpdateExpression":"ADD n :one","ExpressionAttributeValues":{":one":{"N":"1"},":now":{"N":"17"}}}"#;
        let b = br#"{"ExpressionAttributeValues":{":now":{"N":"18"},":one":{"N":"1"}},"UpdateExpression":"ADD n :one","Key":{"pk":{"S":"a"}},"TableName":"t"}"#;
        assert_eq!(Keys::of(UPDATE, a), Keys::of(UPDATE, b));
    }

    #[test]
    fn another_item_shares_the_shape_but_not_the_exact_key() {
        let a = br#"{"TableName":"t","Key":{"pk":{"S":"a"}},"UpdateExpression":"ADD n :one"}"#;
        let b = br#"{"TableName":"t","Key":{"pk":{"S":"b"}},"UpdateExpression":"ADD n :one"}"#;
        let c = br#"{"TableName":"t","Key":{"pk":{"S":"a"}},"UpdateExpression":"SET m = :m"}"#;
        let (ka, kb, kc) = (
            Keys::of(UPDATE, a),
            Keys::of(UPDATE, b),
            Keys::of(UPDATE, c),
        );
        assert_ne!(ka.exact, kb.exact);
        assert_eq!(ka.shape, kb.shape);
        assert_ne!(ka.shape, kc.shape);
        assert_eq!(ka.operation, "UpdateItem t");
        assert_eq!(ka.operation, kc.operation);
    }

    #[test]
    fn batch_and_transaction_tables_are_named() {
        let batch = br#"{"RequestItems":{"b":{"Keys":[{"pk":{"S":"x"}}]},"a":{"Keys":[]}}}"#;
        let k = Keys::of("DynamoDB_20120810.BatchGetItem", batch);
        assert_eq!(k.operation, "BatchGetItem a,b");
        let tx = br#"{"TransactItems":[{"Put":{"TableName":"p","Item":{"pk":{"S":"1"},"v":{"N":"2"}}}},{"Update":{"TableName":"u","Key":{"pk":{"S":"1"}}}}],"ClientRequestToken":"abc"}"#;
        let tx2 = br#"{"TransactItems":[{"Put":{"TableName":"p","Item":{"pk":{"S":"1"},"v":{"N":"3"}}}},{"Update":{"TableName":"u","Key":{"pk":{"S":"1"}}}}],"ClientRequestToken":"def"}"#;
        let (k1, k2) = (
            Keys::of("DynamoDB_20120810.TransactWriteItems", tx),
            Keys::of("DynamoDB_20120810.TransactWriteItems", tx2),
        );
        assert_eq!(k1.operation, "TransactWriteItems p,u");
        assert_eq!(
            k1.exact, k2.exact,
            "put values and the token are per decision"
        );
    }

    fn canned(status: u16, body: &'static str) -> Canned {
        Canned {
            status: StatusCode::from_u16(status).unwrap(),
            headers: HeaderMap::new(),
            body: Bytes::from_static(body.as_bytes()),
        }
    }

    #[test]
    fn a_success_is_kept_over_an_error_and_lookups_fall_back() {
        let k = |item: &str| {
            Keys::of(
                UPDATE,
                format!(r#"{{"TableName":"t","Key":{{"pk":{{"S":"{item}"}}}}}}"#).as_bytes(),
            )
        };
        let mut book = Book::default();
        book.file(k("a"), canned(200, "ok"));
        book.file(k("a"), canned(400, "refused"));
        assert_eq!(book.find(&k("a")).unwrap().body, "ok");
        // Another item: its shape matches.
        assert_eq!(book.find(&k("b")).unwrap().body, "ok");
        // An error first, then a success, under new keys: the success wins.
        book.file(k("c"), canned(400, "refused"));
        assert_eq!(book.find(&k("c")).unwrap().body, "refused");
        book.file(k("c"), canned(200, "ok2"));
        assert_eq!(book.find(&k("c")).unwrap().body, "ok2");
        let other = Keys::of(UPDATE, br#"{"TableName":"other"}"#);
        assert!(book.find(&other).is_none());
    }
}
