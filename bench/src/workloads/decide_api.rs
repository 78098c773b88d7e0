//! The decide API end to end: HTTP requests to `turnstile dev`'s `/v1/` (the local API Gateway:
//! HTTP parsing, the payload 2.0 event, the `decide-api` handler and its DynamoDB call), beside
//! the same library calls made in process (`gcra-spend`, `fungible-per-account`), so the
//! difference is what the HTTP front door and the handler cost.
//!
//! - `local-stack-decide-spend`: `POST /v1/limits/spend` of cost 1 on one bucket of a limit
//!   (`BenchSpend`, as `gcra-spend` declares it); **1** `UpdateItem` warm.
//! - `local-stack-decide-take`: `POST /v1/tokens/take` on one (resource, account) bucket per
//!   worker (no races, as `fungible-per-account`); **1** `UpdateItem` warm.
//!
//! Each worker keeps one HTTP/1.1 connection open (as a backend's client pool would), and every
//! request carries a bearer JWT naming the bench tenant, decoded by the local stack.

use std::sync::Arc;

use futures::future::BoxFuture;
use shared::table::TableKind;
use tokio::io::{AsyncBufReadExt, AsyncReadExt, AsyncWriteExt, BufReader};
use tokio::net::TcpStream;
use tokio::sync::Mutex;
use turnstile_local::stack::Stack;

use crate::error::BenchError;
use crate::workload::{BenchCtx, Decision, Params, Workload};

/// More than any run's concurrency: one connection (and one take bucket) per worker.
const WORKERS: usize = 64;

fn other(e: impl std::fmt::Display) -> BenchError {
    BenchError::Other(e.to_string())
}

/// What a decision posts.
#[derive(Clone, Copy)]
enum Route {
    Spend,
    Take,
}

pub struct DecideApi {
    _stack: Stack,
    host: String,
    route: Route,
    key: String,
    connections: Vec<Mutex<Option<BufReader<TcpStream>>>>,
}

pub async fn build_spend(ctx: &BenchCtx, p: &Params) -> Result<Arc<dyn Workload>, BenchError> {
    Ok(Arc::new(start(ctx, p, Route::Spend).await?))
}

pub async fn build_take(ctx: &BenchCtx, p: &Params) -> Result<Arc<dyn Workload>, BenchError> {
    let w = start(ctx, p, Route::Take).await?;
    // Each worker's bucket warm (its cold BatchGetItem of the limit row), as a long-lived
    // process's would be.
    futures::future::try_join_all((0..WORKERS).map(|i| w.post(i))).await?;
    Ok(Arc::new(w))
}

/// The local stack on free ports with the decide API's limits out of the run's reach (`p.limit`
/// per `p.window_secs`, for both the kv limit and the token default).
async fn start(ctx: &BenchCtx, p: &Params, route: Route) -> Result<DecideApi, BenchError> {
    super::ensure_tables(ctx, &TableKind::ALL).await?;
    let mut deps = super::deps(ctx);
    let keys = shared::ticket::KeySet::generate("bench").map_err(other)?;
    deps.vars = deps.vars.with_overrides([
        ("TURNSTILE_SESSION_API_AUTH", "none".to_string()),
        ("TURNSTILE_DECIDE_AUTH", "jwt".to_string()),
        (
            "TURNSTILE_LIMITS_YAML",
            super::gcra::limits_yaml(p.limit, p.window_secs),
        ),
        (
            "TURNSTILE_DECIDE_TOKEN_DEFAULT",
            format!("{}/{}", p.limit, p.window_secs),
        ),
        (shared::ticket::KEYS_VAR, keys.to_json()),
    ]);
    let stack = super::local_stack::start_stack(ctx, &deps).await?;
    let host = stack
        .endpoints
        .http_url()
        .trim_start_matches("http://")
        .to_string();
    Ok(DecideApi {
        _stack: stack,
        host,
        route,
        key: p.key.clone(),
        connections: (0..WORKERS).map(|_| Mutex::new(None)).collect(),
    })
}

/// An unsigned JWT with the claims `{"sub":"bench","tenantId":"bench"}` (the local stack decodes
/// bearer tokens, never verifies them).
const BEARER: &str = "eyJhbGciOiJub25lIn0.eyJzdWIiOiJiZW5jaCIsInRlbmFudElkIjoiYmVuY2gifQ.unsigned";

impl DecideApi {
    /// One request on `worker`'s connection (opened on first use, again after the server closed
    /// it); the answer's `allowed`.
    async fn post(&self, worker: usize) -> Result<bool, BenchError> {
        let i = worker % WORKERS;
        let (path, body) = match self.route {
            Route::Spend => (
                "/v1/limits/spend",
                serde_json::json!({"name": "BenchSpend", "id": self.key}),
            ),
            Route::Take => (
                "/v1/tokens/take",
                serde_json::json!({"resource": "bench-resource",
                    "account": format!("{}-w{i}", self.key)}),
            ),
        };
        let body = body.to_string();
        let request = format!(
            "POST {path} HTTP/1.1\r\nHost: {}\r\nAuthorization: Bearer {}\r\n\
             Content-Type: application/json\r\nContent-Length: {}\r\n\r\n{body}",
            self.host,
            BEARER,
            body.len()
        );
        let mut slot = self.connections[i].lock().await;
        if slot.is_none() {
            let stream = TcpStream::connect(&self.host).await.map_err(other)?;
            stream.set_nodelay(true).map_err(other)?;
            *slot = Some(BufReader::new(stream));
        }
        let conn = slot.as_mut().ok_or_else(|| other("no connection"))?;
        let answer = exchange(conn, request.as_bytes()).await;
        if answer.is_err() {
            *slot = None;
        }
        let (status, text) = answer?;
        if status != 200 {
            return Err(other(format!("{path}: {status} {text}")));
        }
        let v: serde_json::Value = serde_json::from_str(&text).map_err(other)?;
        v["allowed"]
            .as_bool()
            .ok_or_else(|| other(format!("{path}: no verdict in {text}")))
    }
}

/// Writes `request` and reads one answer (status line, headers, a `Content-Length` body).
async fn exchange(
    conn: &mut BufReader<TcpStream>,
    request: &[u8],
) -> Result<(u16, String), BenchError> {
    conn.get_mut().write_all(request).await.map_err(other)?;
    let mut line = String::new();
    conn.read_line(&mut line).await.map_err(other)?;
    let status: u16 = line
        .split_whitespace()
        .nth(1)
        .and_then(|s| s.parse().ok())
        .ok_or_else(|| other(format!("not an HTTP status line: {line:?}")))?;
    let mut length = 0usize;
    loop {
        line.clear();
        if conn.read_line(&mut line).await.map_err(other)? == 0 {
            return Err(other("connection closed inside the headers"));
        }
        let header = line.trim_end();
        if header.is_empty() {
            break;
        }
        if let Some((name, value)) = header.split_once(':') {
            if name.eq_ignore_ascii_case("content-length") {
                length = value.trim().parse().map_err(other)?;
            }
        }
    }
    let mut body = vec![0; length];
    conn.read_exact(&mut body).await.map_err(other)?;
    Ok((status, String::from_utf8_lossy(&body).into_owned()))
}

impl Workload for DecideApi {
    fn decide(&self, worker: usize, _seq: u64) -> BoxFuture<'_, Result<Decision, BenchError>> {
        Box::pin(async move {
            Ok(if self.post(worker).await? {
                Decision::admitted(None)
            } else {
                Decision::refused(None)
            })
        })
    }
}
