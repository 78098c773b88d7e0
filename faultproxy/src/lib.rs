//! A fault-injecting proxy for DynamoDB's JSON protocol, for tests and benchmarks.
//!
//! DynamoDB Local never cancels a transaction for a conflict, never throttles and never stalls, so
//! the code paths that handle those answers never run against it. [`FaultProxy`] listens on
//! loopback, forwards every request to an upstream (DynamoDB Local) and, per a [`Policy`] that can
//! be switched while it runs, answers instead as DynamoDB would:
//!
//! - **conflicts**: a TransactWriteItems touching an item that another in-flight TransactWriteItems
//!   or single-item write holds is cancelled (`TransactionCanceledException`, `TransactionConflict`
//!   at the overlapping indexes); a single-item write on an item a transaction holds gets
//!   `TransactionConflictException`;
//! - **throttling**: `ThrottlingException` or `ProvisionedThroughputExceededException`, always, for
//!   a fraction of requests, or for writes to an item past W writes per second (a transaction then
//!   gets `ThrottlingError` at that item's index);
//! - **latency**: a delay before forwarding (held items stay held, widening the conflict window);
//! - **stall**: never answer;
//! - **refuse**: close connections without answering (the endpoint is down);
//! - **lose answers**: forward the request (DynamoDB applies it), then answer 500
//!   `InternalServerError` instead of its answer, for the next N covered requests: the "applied,
//!   answer lost" case that makes retrying a non-idempotent write unsafe (optionally after letting
//!   K covered requests through, to reach a path's later write);
//! - **deliver late**: hold the covered requests the policy lists (by their order) without
//!   forwarding them, and forward each only when the test calls [`FaultProxy::deliver`]: a write
//!   whose client timed out lands after the client's resends and after other writes.
//!
//! It counts what it injected ([`Stats`]). See `docs/decisions/0900-fault-proxy.md`.

pub mod answer;
mod inflight;
pub mod keys;
mod late;
mod rate;
pub mod replay;
mod served;

use std::collections::HashMap;
use std::net::SocketAddr;
use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::{Arc, Mutex};
use std::time::{Duration, Instant};

use bytes::Bytes;
use http::{HeaderValue, Request, Response, StatusCode};
use http_body_util::{BodyExt, Full};
use hyper::body::Incoming;
use hyper::service::service_fn;
use hyper_util::client::legacy::connect::HttpConnector;
use hyper_util::client::legacy::Client;
use hyper_util::rt::{TokioExecutor, TokioIo};
use serde_json::Value;
use tokio::net::TcpListener;
use tokio::sync::watch;

pub use answer::{Reason, ThrottleError};
pub use keys::{ItemKey, Writes};
pub use late::{DeliverError, Delivered};

use inflight::InFlight;
use rate::ItemRates;
use served::Served;

/// When throttling applies.
#[derive(Debug, Clone, Copy, PartialEq)]
pub enum ThrottleMode {
    /// Every request the policy covers.
    Always,
    /// Each covered request with this probability (0.0..=1.0).
    Fraction(f64),
    /// Writes (single-item and transaction items) to an item that already had this many writes in
    /// the last second.
    PerItem { writes_per_second: u32 },
}

/// Throttling: which exception, and when.
#[derive(Debug, Clone, Copy, PartialEq)]
pub struct Throttle {
    pub error: ThrottleError,
    pub mode: ThrottleMode,
}

/// What the proxy injects. The default forwards everything untouched.
#[derive(Debug, Clone, Default, PartialEq)]
pub struct Policy {
    /// Cancel overlapping transactions (and refuse single writes on items a transaction holds).
    pub conflicts: bool,
    pub throttle: Option<Throttle>,
    /// Waited before forwarding (after the conflict check, so the items stay held meanwhile).
    pub delay: Option<Duration>,
    /// Never answer.
    pub stall: bool,
    /// Close every connection without answering.
    pub refuse: bool,
    /// Operations that throttle, delay, stall, lost answers and held requests apply to
    /// (`"TransactWriteItems"`, `"GetItem"`); empty means all. Conflicts and refusals ignore it.
    pub only: Vec<String>,
    /// The next this many covered requests are forwarded, then answered with a 500
    /// `InternalServerError` (the upstream's answer is lost). Counted from [`FaultProxy::set_policy`].
    pub lose_answers: u64,
    /// Covered requests answered untouched before the first answer is lost: a path's later write
    /// (a release after its admission) is reached without a hook in the code under test.
    pub lose_after: u64,
    /// Covered requests held instead of forwarded, by their 0-based position among the covered
    /// requests since [`FaultProxy::set_policy`]: each is forwarded only by
    /// [`FaultProxy::deliver`], whether or not its client still waits (a timed-out write landing
    /// late). Its client gets the answer if it is still waiting then.
    pub hold: Vec<u64>,
}

impl Policy {
    /// Forward everything.
    pub fn passthrough() -> Self {
        Policy::default()
    }

    /// Cancel overlapping transactions as DynamoDB does.
    pub fn conflicts() -> Self {
        Policy {
            conflicts: true,
            ..Policy::default()
        }
    }

    pub fn throttle(error: ThrottleError, mode: ThrottleMode) -> Self {
        Policy {
            throttle: Some(Throttle { error, mode }),
            ..Policy::default()
        }
    }

    pub fn stall() -> Self {
        Policy {
            stall: true,
            ..Policy::default()
        }
    }

    pub fn delay(d: Duration) -> Self {
        Policy {
            delay: Some(d),
            ..Policy::default()
        }
    }

    pub fn refuse() -> Self {
        Policy {
            refuse: true,
            ..Policy::default()
        }
    }

    /// Forwards the next `n` covered requests and answers each with a 500 instead.
    pub fn lose_answers(n: u64) -> Self {
        Policy {
            lose_answers: n,
            ..Policy::default()
        }
    }

    /// Lets the next `k` covered requests through untouched before losing answers.
    pub fn after(mut self, k: u64) -> Self {
        self.lose_after = k;
        self
    }

    /// Holds the covered requests at these positions (0-based, counted from
    /// [`FaultProxy::set_policy`]) until [`FaultProxy::deliver`] forwards them.
    pub fn hold(positions: impl IntoIterator<Item = u64>) -> Self {
        Policy {
            hold: positions.into_iter().collect(),
            ..Policy::default()
        }
    }

    /// Adds a delay before forwarding.
    pub fn with_delay(mut self, d: Duration) -> Self {
        self.delay = Some(d);
        self
    }

    /// Restricts throttle, delay and stall to these operations.
    pub fn only<S: Into<String>>(mut self, ops: impl IntoIterator<Item = S>) -> Self {
        self.only = ops.into_iter().map(Into::into).collect();
        self
    }

    fn covers(&self, op: &str) -> bool {
        self.only.is_empty() || self.only.iter().any(|o| o == op)
    }
}

/// What the proxy saw and injected since it started (or since [`FaultProxy::reset_stats`]).
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq)]
pub struct Stats {
    /// Requests received (refused connections not included).
    pub requests: u64,
    /// Requests forwarded to the upstream.
    pub forwarded: u64,
    /// TransactWriteItems requests received.
    pub transactions: u64,
    /// Transactions cancelled with `TransactionConflict`.
    pub conflicts: u64,
    /// Single-item writes refused with `TransactionConflictException`.
    pub conflict_exceptions: u64,
    /// Requests answered with a throttling exception or a `ThrottlingError` cancellation.
    pub throttled: u64,
    /// Requests never answered.
    pub stalled: u64,
    /// Connections and requests closed without an answer (refuse policy).
    pub refused: u64,
    /// Requests the upstream could not answer (connection closed without an answer).
    pub upstream_errors: u64,
    /// Requests forwarded whose answer was replaced by a 500 (lose-answers policy).
    pub answers_lost: u64,
    /// Requests held back (hold policy), delivered or not.
    pub held: u64,
    /// Held requests delivered after their client had stopped waiting for the answer.
    pub delivered_late: u64,
    /// The longest the upstream took to answer one forwarded request: a harness tells its own
    /// injected faults from a slow upstream (a loaded machine) by it.
    pub slowest_upstream: Duration,
}

impl Stats {
    /// Share of transactions cancelled for a conflict (0 when there were none).
    pub fn conflict_rate(&self) -> f64 {
        if self.transactions == 0 {
            0.0
        } else {
            self.conflicts as f64 / self.transactions as f64
        }
    }
}

#[derive(Debug, Default)]
struct Counters {
    requests: AtomicU64,
    forwarded: AtomicU64,
    transactions: AtomicU64,
    conflicts: AtomicU64,
    conflict_exceptions: AtomicU64,
    throttled: AtomicU64,
    stalled: AtomicU64,
    refused: AtomicU64,
    upstream_errors: AtomicU64,
    answers_lost: AtomicU64,
    held: AtomicU64,
    delivered_late: AtomicU64,
    /// Microseconds; kept apart from [`Counters::all`] (a maximum, not a count).
    slowest_upstream_us: AtomicU64,
}

impl Counters {
    fn all(&self) -> [&AtomicU64; 12] {
        [
            &self.requests,
            &self.forwarded,
            &self.transactions,
            &self.conflicts,
            &self.conflict_exceptions,
            &self.throttled,
            &self.stalled,
            &self.refused,
            &self.upstream_errors,
            &self.answers_lost,
            &self.held,
            &self.delivered_late,
        ]
    }

    fn snapshot(&self) -> Stats {
        let [requests, forwarded, transactions, conflicts, conflict_exceptions, throttled, stalled, refused, upstream_errors, answers_lost, held, delivered_late] =
            self.all().map(|a| a.load(Ordering::SeqCst));
        Stats {
            requests,
            forwarded,
            transactions,
            conflicts,
            conflict_exceptions,
            throttled,
            stalled,
            refused,
            upstream_errors,
            answers_lost,
            held,
            delivered_late,
            slowest_upstream: Duration::from_micros(
                self.slowest_upstream_us.load(Ordering::SeqCst),
            ),
        }
    }
}

fn bump(a: &AtomicU64) {
    a.fetch_add(1, Ordering::SeqCst);
}

/// Why the proxy closed a connection without an answer.
#[derive(Debug, thiserror::Error)]
enum Dropped {
    #[error("refusing connections (policy)")]
    Refused,
    #[error("upstream did not answer: {0}")]
    Upstream(String),
    #[error("reading the request: {0}")]
    Request(String),
    #[error("held and never delivered")]
    NeverDelivered,
}

struct Shared {
    upstream: String,
    client: Client<HttpConnector, Full<Bytes>>,
    policy: Mutex<Policy>,
    counters: Counters,
    inflight: Arc<InFlight>,
    rates: ItemRates,
    schemas: Mutex<HashMap<String, Vec<String>>>,
    /// Covered requests whose answer is still to be lost.
    lose_budget: AtomicU64,
    /// Covered requests still to pass before answers are lost ([`Policy::lose_after`]).
    lose_skip: AtomicU64,
    /// Covered requests seen since the policy was set (the positions [`Policy::hold`] names).
    covered_seen: AtomicU64,
    late: late::Late,
}

/// A running proxy. Dropping it stops it (open connections are closed, stalled requests dropped).
pub struct FaultProxy(Served<Shared>);

impl std::fmt::Debug for FaultProxy {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        self.0.fmt(f)
    }
}

impl FaultProxy {
    /// Starts a proxy on a free loopback port in front of `upstream` (`http://127.0.0.1:8000`).
    pub async fn start(upstream: &str) -> std::io::Result<FaultProxy> {
        Self::bind(SocketAddr::from(([127, 0, 0, 1], 0)), upstream).await
    }

    /// Starts a proxy on `listen` in front of `upstream`.
    pub async fn bind(listen: SocketAddr, upstream: &str) -> std::io::Result<FaultProxy> {
        let shared = Shared {
            upstream: upstream.trim_end_matches('/').to_string(),
            client: Client::builder(TokioExecutor::new()).build_http(),
            policy: Mutex::new(Policy::default()),
            counters: Counters::default(),
            inflight: Arc::new(InFlight::default()),
            rates: ItemRates::default(),
            schemas: Mutex::new(HashMap::new()),
            lose_budget: AtomicU64::new(0),
            lose_skip: AtomicU64::new(0),
            covered_seen: AtomicU64::new(0),
            late: late::Late::default(),
        };
        let refuse = |s: &Shared| {
            let r = s.policy().refuse;
            if r {
                bump(&s.counters.refused);
            }
            r
        };
        let handle = |s: Arc<Shared>, req| s.handle(req);
        let served = Served::bind("FaultProxy", listen, upstream, shared, refuse, handle).await?;
        Ok(FaultProxy(served))
    }

    /// The endpoint to give a DynamoDB client (`http://127.0.0.1:PORT`).
    pub fn url(&self) -> String {
        self.0.url()
    }

    pub fn addr(&self) -> SocketAddr {
        self.0.addr()
    }

    /// Replaces the policy; requests already past their checks are not affected.
    pub fn set_policy(&self, policy: Policy) {
        self.0
            .shared
            .lose_budget
            .store(policy.lose_answers, Ordering::SeqCst);
        self.0
            .shared
            .lose_skip
            .store(policy.lose_after, Ordering::SeqCst);
        self.0.shared.covered_seen.store(0, Ordering::SeqCst);
        *self.0.shared.policy() = policy;
    }

    pub fn policy(&self) -> Policy {
        self.0.shared.policy().clone()
    }

    pub fn stats(&self) -> Stats {
        self.0.shared.counters.snapshot()
    }

    pub fn reset_stats(&self) {
        for a in self.0.shared.counters.all() {
            a.store(0, Ordering::SeqCst);
        }
        self.0
            .shared
            .counters
            .slowest_upstream_us
            .store(0, Ordering::SeqCst);
    }

    /// Waits until `n` requests have been held ([`Policy::hold`]) since the proxy started: the
    /// test's cue that a write it means to deliver late has arrived.
    pub async fn wait_held(&self, n: usize) {
        self.0.shared.late.wait(n).await;
    }

    /// Forwards held request `index` (numbered from 0 in the order held, since the proxy
    /// started) to the upstream now, and hands the answer to its client if it is still waiting.
    /// Returns once the upstream has answered, so the write has landed (or failed) by then.
    pub async fn deliver(&self, index: usize) -> Result<Delivered, DeliverError> {
        let taken = self.0.shared.late.take(index)?;
        let (parts, body) = send_upstream(
            &self.0.shared.client,
            &self.0.shared.upstream,
            taken.parts,
            taken.body,
        )
        .await
        .map_err(|detail| DeliverError::Upstream { index, detail })?;
        bump(&self.0.shared.counters.forwarded);
        let status = parts.status.as_u16();
        let answer = Response::from_parts(parts, Full::new(body.clone()));
        let client_waiting = taken.answer.is_some_and(|tx| tx.send(answer).is_ok());
        if !client_waiting {
            bump(&self.0.shared.counters.delivered_late);
        }
        Ok(Delivered {
            status,
            body,
            client_waiting,
        })
    }

    /// Items held by in-flight writes right now (0 once every request has its answer).
    pub fn items_held(&self) -> usize {
        self.0.shared.inflight.len()
    }
}

/// Serves HTTP/1 connections from `listener` with `handle` until `stop` changes; `refuse` is asked
/// for each new connection (true: it is closed unanswered). The fault proxy's and the replay stub's.
pub(crate) async fn accept<S, H, Fut, E>(
    listener: TcpListener,
    state: Arc<S>,
    mut stop: watch::Receiver<bool>,
    refuse: fn(&S) -> bool,
    handle: H,
) where
    S: Send + Sync + 'static,
    H: Fn(Arc<S>, Request<Incoming>) -> Fut + Copy + Send + Sync + 'static,
    Fut: std::future::Future<Output = Result<Response<Full<Bytes>>, E>> + Send + 'static,
    E: Into<Box<dyn std::error::Error + Send + Sync>>,
{
    loop {
        let stream = tokio::select! {
            _ = stop.changed() => return,
            accepted = listener.accept() => match accepted {
                Ok((stream, _)) => stream,
                Err(e) => {
                    tracing::warn!(error = %e, "fault proxy: accept failed");
                    continue;
                }
            },
        };
        if refuse(&state) {
            drop(stream);
            continue;
        }
        let _ = stream.set_nodelay(true);
        let conn_state = state.clone();
        let mut conn_stop = stop.clone();
        tokio::spawn(async move {
            let service = service_fn(move |req| handle(conn_state.clone(), req));
            let conn = hyper::server::conn::http1::Builder::new()
                .serve_connection(TokioIo::new(stream), service);
            tokio::select! {
                _ = conn => {}
                _ = conn_stop.changed() => {}
            }
        });
    }
}

/// Sends a request to `upstream` (its path, method and headers kept) and collects the answer.
pub(crate) async fn send_upstream(
    client: &Client<HttpConnector, Full<Bytes>>,
    upstream: &str,
    parts: http::request::Parts,
    body: Bytes,
) -> Result<(http::response::Parts, Bytes), String> {
    let path = parts.uri.path_and_query().map_or("/", |p| p.as_str());
    let uri: http::Uri = format!("{upstream}{path}")
        .parse()
        .map_err(|e: http::uri::InvalidUri| e.to_string())?;
    let mut req = Request::new(Full::new(body));
    *req.method_mut() = parts.method;
    *req.uri_mut() = uri;
    *req.headers_mut() = parts.headers;
    let resp = client.request(req).await.map_err(|e| e.to_string())?;
    let (parts, body) = resp.into_parts();
    let body = body.collect().await.map_err(|e| e.to_string())?.to_bytes();
    Ok((parts, body))
}

fn json_answer(body: &Value) -> Response<Full<Bytes>> {
    let mut r = Response::new(Full::new(Bytes::from(body.to_string())));
    *r.status_mut() = StatusCode::from_u16(answer::STATUS).unwrap_or(StatusCode::BAD_REQUEST);
    r.headers_mut().insert(
        http::header::CONTENT_TYPE,
        HeaderValue::from_static(answer::CONTENT_TYPE),
    );
    let id = format!("FAULTPROXY{:016X}", fastrand::u64(..));
    if let Ok(v) = HeaderValue::from_str(&id) {
        r.headers_mut().insert("x-amzn-requestid", v);
    }
    r
}

impl Shared {
    fn policy(&self) -> std::sync::MutexGuard<'_, Policy> {
        self.policy.lock().unwrap_or_else(|p| p.into_inner())
    }

    async fn handle(
        self: Arc<Self>,
        req: Request<Incoming>,
    ) -> Result<Response<Full<Bytes>>, Dropped> {
        bump(&self.counters.requests);
        let policy = self.policy().clone();
        if policy.refuse {
            bump(&self.counters.refused);
            return Err(Dropped::Refused);
        }
        let (parts, body) = req.into_parts();
        let body = body
            .collect()
            .await
            .map_err(|e| Dropped::Request(e.to_string()))?
            .to_bytes();
        let op = parts
            .headers
            .get("x-amz-target")
            .and_then(|v| v.to_str().ok())
            .and_then(keys::operation)
            .unwrap_or("")
            .to_string();
        if op == "TransactWriteItems" {
            bump(&self.counters.transactions);
        }
        let covered = policy.covers(&op);
        if covered && policy.stall {
            bump(&self.counters.stalled);
            std::future::pending::<()>().await;
        }

        let per_item = matches!(
            policy.throttle,
            Some(Throttle {
                mode: ThrottleMode::PerItem { .. },
                ..
            })
        );
        let writes = if policy.conflicts || (covered && per_item) {
            self.writes(&op, &body, &parts.headers).await
        } else {
            Writes::None
        };

        if let (true, Some(t)) = (covered, policy.throttle) {
            if let Some(answer) = self.throttle(t, &writes) {
                bump(&self.counters.throttled);
                return Ok(json_answer(&answer));
            }
        }

        let _hold = if policy.conflicts {
            match &writes {
                Writes::Transaction(keys) => match self.inflight.hold_transaction(keys) {
                    Ok(h) => Some(h),
                    Err(busy) => {
                        bump(&self.counters.conflicts);
                        let reasons: Vec<Reason> = (0..keys.len())
                            .map(|i| {
                                if busy.contains(&i) {
                                    Reason::TransactionConflict
                                } else {
                                    Reason::None
                                }
                            })
                            .collect();
                        return Ok(json_answer(&answer::transaction_canceled(&reasons)));
                    }
                },
                Writes::Single(key) => match self.inflight.hold_single(key) {
                    Some(h) => Some(h),
                    None => {
                        bump(&self.counters.conflict_exceptions);
                        return Ok(json_answer(&answer::transaction_conflict()));
                    }
                },
                Writes::None => None,
            }
        } else {
            None
        };

        if let (true, Some(d)) = (covered, policy.delay) {
            tokio::time::sleep(d).await;
        }
        let take = |budget: &AtomicU64| {
            budget
                .fetch_update(Ordering::SeqCst, Ordering::SeqCst, |n| n.checked_sub(1))
                .is_ok()
        };
        let position = covered.then(|| self.covered_seen.fetch_add(1, Ordering::SeqCst));
        if position.is_some_and(|p| policy.hold.contains(&p)) {
            bump(&self.counters.held);
            let answer = self.late.hold(&parts, body);
            // The answer comes when the test delivers the request; until then the client waits
            // (or gives up, and the request is still delivered later).
            return answer.await.map_err(|_| Dropped::NeverDelivered);
        }
        let lose = covered
            && self.lose_budget.load(Ordering::SeqCst) > 0
            && !take(&self.lose_skip)
            && take(&self.lose_budget);
        let began = Instant::now();
        let r = self.forward(parts, body).await;
        let took = u64::try_from(began.elapsed().as_micros()).unwrap_or(u64::MAX);
        self.counters
            .slowest_upstream_us
            .fetch_max(took, Ordering::SeqCst);
        if r.is_err() {
            bump(&self.counters.upstream_errors);
        } else {
            bump(&self.counters.forwarded);
        }
        if lose && r.is_ok() {
            bump(&self.counters.answers_lost);
            let mut lost = json_answer(&answer::internal_error());
            *lost.status_mut() = StatusCode::INTERNAL_SERVER_ERROR;
            return Ok(lost);
        }
        r
    }

    /// The throttling answer for this request, if it is throttled.
    fn throttle(&self, t: Throttle, writes: &Writes) -> Option<Value> {
        match t.mode {
            ThrottleMode::Always => Some(answer::throttled(t.error)),
            ThrottleMode::Fraction(p) => (fastrand::f64() < p).then(|| answer::throttled(t.error)),
            ThrottleMode::PerItem { writes_per_second } => {
                let now = Instant::now();
                match writes {
                    Writes::Transaction(keys) => {
                        let over = self.rates.admit(keys, writes_per_second, now).err()?;
                        let reasons: Vec<Reason> = (0..keys.len())
                            .map(|i| {
                                if over.contains(&i) {
                                    Reason::ThrottlingError
                                } else {
                                    Reason::None
                                }
                            })
                            .collect();
                        Some(answer::transaction_canceled(&reasons))
                    }
                    Writes::Single(key) => {
                        self.rates
                            .admit(std::slice::from_ref(key), writes_per_second, now)
                            .err()?;
                        Some(answer::throttled(t.error))
                    }
                    Writes::None => None,
                }
            }
        }
    }

    /// The items this request writes (learning Put tables' key schemas first).
    async fn writes(&self, op: &str, body: &Bytes, headers: &http::HeaderMap) -> Writes {
        let is_write = op == "TransactWriteItems" || keys::SINGLE_WRITES.contains(&op);
        if !is_write {
            return Writes::None;
        }
        let Ok(json) = serde_json::from_slice::<Value>(body) else {
            return Writes::None;
        };
        for table in keys::put_tables(op, &json) {
            let known = self
                .schemas
                .lock()
                .unwrap_or_else(|p| p.into_inner())
                .contains_key(&table);
            if !known {
                if let Some(schema) = self.describe_key(&table, headers).await {
                    self.schemas
                        .lock()
                        .unwrap_or_else(|p| p.into_inner())
                        .insert(table, schema);
                }
            }
        }
        let schemas = self
            .schemas
            .lock()
            .unwrap_or_else(|p| p.into_inner())
            .clone();
        keys::writes(op, &json, &schemas)
    }

    /// One DescribeTable to the upstream for a table's key attribute names (DynamoDB Local checks no
    /// signatures, so the client's own headers are reused).
    async fn describe_key(&self, table: &str, headers: &http::HeaderMap) -> Option<Vec<String>> {
        let body = serde_json::json!({ "TableName": table }).to_string();
        let mut req = Request::builder()
            .method(http::Method::POST)
            .uri(format!("{}/", self.upstream))
            .header(http::header::CONTENT_TYPE, answer::CONTENT_TYPE)
            .header(
                "x-amz-target",
                format!("{}DescribeTable", keys::TARGET_PREFIX),
            );
        if let Some(auth) = headers.get(http::header::AUTHORIZATION) {
            req = req.header(http::header::AUTHORIZATION, auth.clone());
        }
        if let Some(date) = headers.get("x-amz-date") {
            req = req.header("x-amz-date", date.clone());
        }
        let req = req.body(Full::new(Bytes::from(body))).ok()?;
        let resp = self.client.request(req).await.ok()?;
        if !resp.status().is_success() {
            return None;
        }
        let bytes = resp.into_body().collect().await.ok()?.to_bytes();
        keys::key_schema(&serde_json::from_slice(&bytes).ok()?)
    }

    async fn forward(
        &self,
        parts: http::request::Parts,
        body: Bytes,
    ) -> Result<Response<Full<Bytes>>, Dropped> {
        let (parts, body) = send_upstream(&self.client, &self.upstream, parts, body)
            .await
            .map_err(Dropped::Upstream)?;
        Ok(Response::from_parts(parts, Full::new(body)))
    }
}
