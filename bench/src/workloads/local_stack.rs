//! The local stack end to end: real WebSocket clients against `turnstile dev`'s stack, running the
//! real handlers on the benchmark's DynamoDB Local.
//!
//! - `local-stack-connects`: one decision = a WebSocket handshake (authorizer + `$connect`) that
//!   succeeds, then a close (`$disconnect` runs after the decision is timed, its call still counted).
//! - `local-stack-messages`: one decision = a text frame on the worker's open socket and its echo
//!   back (`$default`: 1 DynamoDB call and 1 Management API post).
//!
//! Limits are set far above what a run can reach, so these measure throughput, not refusals.

use std::sync::Arc;

use futures::future::BoxFuture;
use futures::{SinkExt, StreamExt};
use shared::ids::{SessionId, TenantId};
use shared::table::TableKind;
use shared::tenant::{Limits, Tenant};
use tokio::sync::Mutex;
use tokio_tungstenite::tungstenite::Message;
use turnstile_local::functions::LocalFunctions;
use turnstile_local::stack::{Stack, StackConfig};

use crate::error::BenchError;
use crate::workload::{BenchCtx, Decision, Params, Workload};

type Socket =
    tokio_tungstenite::WebSocketStream<tokio_tungstenite::MaybeTlsStream<tokio::net::TcpStream>>;

const TENANT: &str = "bench";
/// More than any run's concurrency; each worker uses its own session.
const SESSIONS: usize = 64;

fn other(e: impl std::fmt::Display) -> BenchError {
    BenchError::Other(e.to_string())
}

/// Tables, a tenant with limits out of reach, one session per worker, and the stack on free ports.
async fn start(ctx: &BenchCtx) -> Result<(Stack, Target), BenchError> {
    let mut deps = super::deps(ctx);
    // The session API as `make dev` runs it (trusted callers), tickets signed with a key set made
    // for this run and valid for the whole run.
    let keys = shared::ticket::KeySet::generate("bench").map_err(other)?;
    deps.vars = deps.vars.with_overrides([
        ("TURNSTILE_SESSION_API_AUTH", "none".to_string()),
        ("TURNSTILE_DECIDE_AUTH", "jwt".to_string()),
        (shared::ticket::KEYS_VAR, keys.to_json()),
        ("TURNSTILE_TICKET_TTL_SECS", "3600".to_string()),
    ]);
    super::ensure_tables(ctx, &TableKind::WEBSOCKET).await?;
    let big = 1_000_000_000;
    let tenant = Tenant {
        tenant_id: TenantId::parse(TENANT).map_err(other)?,
        limits: Limits::example(
            big,
            big,
            shared::tenant::MAX_CONNECTIONS_PER_SESSION,
            big,
            3600,
            big,
        ),
    };
    shared::tenant::store::put(&deps, &tenant)
        .await
        .map_err(other)?;
    let stack = start_stack(ctx, &deps).await?;
    let http = stack.endpoints.http_url();
    let mut tickets = Vec::with_capacity(SESSIONS);
    for s in 0..SESSIONS {
        let sid = SessionId::parse(&format!("w{s}")).map_err(other)?;
        let url = format!("{http}/session?tenantId={TENANT}&sessionId={sid}");
        let session = put(&url).await?;
        let ticket = session["ticket"]
            .as_str()
            .ok_or_else(|| other("PUT /session returned no ticket"))?;
        // A ticket admits one connect: each handshake mints its own from these claims.
        let now = deps.clock.now().as_secs();
        tickets.push(shared::ticket::verify(&keys, ticket, now).map_err(other)?);
    }
    let ws = stack.endpoints.ws_url();
    Ok((stack, Target { ws, keys, tickets }))
}

/// Where the workers connect: the WebSocket URL and each session's ticket claims (each handshake
/// presents a ticket of its own, as each browser does).
struct Target {
    ws: String,
    keys: shared::ticket::KeySet,
    tickets: Vec<shared::ticket::Claims>,
}

impl Target {
    /// Worker `worker`'s handshake: its session in the query, a fresh ticket for the session in
    /// the subprotocol list, as a browser sends them.
    fn request(
        &self,
        worker: usize,
    ) -> Result<tokio_tungstenite::tungstenite::handshake::client::Request, BenchError> {
        use tokio_tungstenite::tungstenite::client::IntoClientRequest;
        let i = worker % SESSIONS;
        let url = format!("{}/?tenantId={TENANT}&sessionId=w{i}", self.ws);
        let mut req = url.into_client_request().map_err(other)?;
        let mut claims = self.tickets[i].clone();
        claims.id = shared::ticket::new_id().map_err(other)?;
        let protocols = format!("turnstile, {}", shared::ticket::mint(&self.keys, &claims));
        req.headers_mut()
            .insert("Sec-WebSocket-Protocol", protocols.parse().map_err(other)?);
        Ok(req)
    }
}

/// `PUT url` with a bare HTTP/1.1 request; the session API answers 200 with the session (and its
/// ticket), returned as JSON.
async fn put(url: &str) -> Result<serde_json::Value, BenchError> {
    use tokio::io::{AsyncReadExt, AsyncWriteExt};
    let rest = url.trim_start_matches("http://");
    let (host, path) = rest.split_once('/').ok_or_else(|| other("bad url"))?;
    let mut s = tokio::net::TcpStream::connect(host).await.map_err(other)?;
    let req = format!(
        "PUT /{path} HTTP/1.1\r\nHost: {host}\r\nContent-Length: 0\r\nConnection: close\r\n\r\n"
    );
    s.write_all(req.as_bytes()).await.map_err(other)?;
    let mut out = String::new();
    s.read_to_string(&mut out).await.map_err(other)?;
    if out.starts_with("HTTP/1.1 200") {
        let body = out.split_once("\r\n\r\n").map_or("", |(_, b)| b);
        serde_json::from_str(body).map_err(|e| other(format!("PUT session body: {e}")))
    } else {
        Err(BenchError::Other(format!(
            "PUT session: {}",
            out.lines().next().unwrap_or("")
        )))
    }
}

pub struct Connects {
    _stack: Stack,
    target: Target,
}

/// One stack (and one set of sockets) per bench process: the runner builds a workload per
/// concurrency level, and a torn-down stack's closing sockets would run `$disconnect` while the next
/// level is being timed, charging its calls there.
static CONNECTS: tokio::sync::OnceCell<Arc<Connects>> = tokio::sync::OnceCell::const_new();
static MESSAGES: tokio::sync::OnceCell<Arc<Messages>> = tokio::sync::OnceCell::const_new();

pub async fn build_connects(ctx: &BenchCtx, _p: &Params) -> Result<Arc<dyn Workload>, BenchError> {
    let w = CONNECTS
        .get_or_try_init(|| async {
            let (stack, target) = start(ctx).await?;
            Ok::<_, BenchError>(Arc::new(Connects {
                _stack: stack,
                target,
            }))
        })
        .await?;
    Ok(w.clone())
}

impl Workload for Connects {
    fn decide(&self, worker: usize, _seq: u64) -> BoxFuture<'_, Result<Decision, BenchError>> {
        Box::pin(async move {
            match tokio_tungstenite::connect_async(self.target.request(worker)?).await {
                Ok((mut socket, _)) => {
                    let _ = socket.close(None).await;
                    Ok(Decision::admitted(None))
                }
                Err(tokio_tungstenite::tungstenite::Error::Http(_)) => Ok(Decision::refused(None)),
                Err(e) => Err(other(e)),
            }
        })
    }
}

pub struct Messages {
    _stack: Stack,
    target: Target,
    sockets: Vec<Mutex<Option<Socket>>>,
}

pub async fn build_messages(ctx: &BenchCtx, p: &Params) -> Result<Arc<dyn Workload>, BenchError> {
    let w = MESSAGES.get_or_try_init(|| open_messages(ctx, p)).await?;
    Ok(w.clone())
}

async fn open_messages(ctx: &BenchCtx, _p: &Params) -> Result<Arc<Messages>, BenchError> {
    let (stack, target) = start(ctx).await?;
    let sockets = (0..SESSIONS).map(|_| Mutex::new(None)).collect();
    Ok(Arc::new(Messages {
        _stack: stack,
        target,
        sockets,
    }))
}

impl Workload for Messages {
    fn decide(&self, worker: usize, seq: u64) -> BoxFuture<'_, Result<Decision, BenchError>> {
        Box::pin(async move {
            let slot = &self.sockets[worker % SESSIONS];
            let mut guard = slot.lock().await;
            if guard.is_none() {
                let (socket, _) = tokio_tungstenite::connect_async(self.target.request(worker)?)
                    .await
                    .map_err(other)?;
                *guard = Some(socket);
            }
            let socket = guard.as_mut().ok_or_else(|| other("no socket"))?;
            let text = format!("m{seq}");
            socket
                .send(Message::Text(text.clone().into()))
                .await
                .map_err(other)?;
            loop {
                match socket.next().await {
                    Some(Ok(Message::Text(t))) if t.as_str() == text => {
                        return Ok(Decision::admitted(None))
                    }
                    // A refusal frame (problem+json) would be a refused decision.
                    Some(Ok(Message::Text(t))) if t.as_str().contains("\"status\":429") => {
                        return Ok(Decision::refused(None))
                    }
                    Some(Ok(_)) => continue,
                    Some(Err(e)) => return Err(other(e)),
                    None => return Err(other("socket closed")),
                }
            }
        })
    }
}

/// The local stack on free ports, running the functions built on `deps`; an error when they did
/// not build.
pub(super) async fn start_stack(ctx: &BenchCtx, deps: &shared::Deps) -> Result<Stack, BenchError> {
    let any = "127.0.0.1:0".parse().map_err(other)?;
    let cfg = StackConfig::new(any, any, &ctx.endpoint);
    LocalFunctions::start_stack(cfg, deps.clone())
        .await
        .map_err(other)
}
