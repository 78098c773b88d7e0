//! The local stack end to end: real WebSocket clients (tokio-tungstenite) and real HTTP against
//! `turnstile_local::Stack`, running the real handlers on DynamoDB Local.

use std::sync::Arc;
use std::time::{Duration, Instant};

use futures::{SinkExt, StreamExt};
use serde_json::{json, Value};
use shared::config::Vars;
use shared::ids::TenantId;
use shared::table::TableKind;
use shared::tenant::{Limits, Tenant};
use tokio_tungstenite::tungstenite::{self, Message};
use turnstile_local::eventbridge::Pattern;
use turnstile_local::functions::LocalFunctions;
use turnstile_local::http_api::Rule;
use turnstile_local::stack::{Stack, StackConfig};
use turnstile_local::stream_bridge::StartAt;
use turnstile_tests::http::{request, request_exact, request_with};
use turnstile_tests::TestEnv;

pub(crate) type Socket =
    tokio_tungstenite::WebSocketStream<tokio_tungstenite::MaybeTlsStream<tokio::net::TcpStream>>;

const PROCESSORS: &str = r#"{"processors":[{"source":"aws.emr","detail_type":"EMR Cluster State Change",
  "resource_id":"detail.clusterId","when":{"path":"detail.state","in":["TERMINATED","TERMINATED_WITH_ERRORS"]}}]}"#;

const KINDS: [TableKind; 5] = [
    TableKind::Tenants,
    TableKind::Sessions,
    TableKind::Counters,
    TableKind::NonFungibleTokens,
    TableKind::Limits,
];

pub(crate) struct Local {
    pub(crate) env: TestEnv,
    stack: Option<Stack>,
}

impl Local {
    /// The stack on free ports, with the wall clock (DynamoDB Local's TTL runs on it) and the EMR rule.
    pub(crate) async fn start() -> Local {
        Self::start_with(&[]).await
    }

    /// [`Local::start`] with more variables for the functions.
    pub(crate) async fn start_with(vars: &[(&str, &str)]) -> Local {
        Self::start_in(TestEnv::for_ttl(&KINDS).await, vars).await
    }

    /// The stack on the main DynamoDB Local, for tests that wait for no TTL deletion (each table
    /// on the TTL instance slows its sweeps for the tests that do).
    pub(crate) async fn start_without_ttl() -> Local {
        Self::start_in(TestEnv::new(&KINDS).await, &[]).await
    }

    /// [`Local::start_without_ttl`] with more tables (the dashboard's key-value and token buckets).
    pub(crate) async fn start_with_tables(more: &[TableKind]) -> Local {
        let kinds: Vec<TableKind> = KINDS.iter().chain(more).copied().collect();
        Self::start_in(TestEnv::new(&kinds).await, &[]).await
    }

    async fn start_in(env: TestEnv, vars: &[(&str, &str)]) -> Local {
        let mut deps = env.deps.clone();
        deps.clock = shared::clock::system();
        let mut pairs = vec![
            ("TOKEN_REMOVER_PROCESSORS", PROCESSORS),
            ("TURNSTILE_SESSION_API_AUTH", "none"),
            ("TURNSTILE_DECIDE_AUTH", "jwt"),
            (
                "TURNSTILE_TICKET_KEYS",
                turnstile_bench::samples::SAMPLE_KEYS,
            ),
        ];
        pairs.extend_from_slice(vars);
        deps.vars = Vars::from_pairs(pairs);
        let mut cfg = StackConfig::new(
            "127.0.0.1:0".parse().unwrap(),
            "127.0.0.1:0".parse().unwrap(),
            &env.endpoint,
        );
        cfg.session_table = Some(env.deps.tables.sessions.clone());
        cfg.stream_poll = Duration::from_millis(200);
        cfg.stream_start = StartAt::TrimHorizon;
        cfg.sweeper_filters = turnstile_local::template::stream_filters(
            include_str!("../../template.yaml"),
            "ttl-sweeper",
        )
        .unwrap();
        cfg.dashboard = Some(deps.clone());
        cfg.rules = vec![Rule {
            name: "emr-terminations".into(),
            pattern: Pattern::parse(json!({
                "source": ["aws.emr"],
                "detail-type": ["EMR Cluster State Change"],
                "detail": {"state": ["TERMINATED", "TERMINATED_WITH_ERRORS"]}
            }))
            .unwrap(),
            target: "token-remover".into(),
        }];
        let clock = deps.clock.clone();
        let stack = Stack::start(cfg, clock, async |eps| {
            LocalFunctions::new(deps, &eps.management_url())
                .await
                .expect("functions build") as Arc<dyn turnstile_local::lambda::Invoke>
        })
        .await
        .unwrap();
        Local {
            env,
            stack: Some(stack),
        }
    }

    pub(crate) fn stack(&self) -> &Stack {
        self.stack.as_ref().unwrap()
    }

    pub(crate) async fn tenant(&self, id: &str, limits: Limits) {
        let t = Tenant {
            tenant_id: TenantId::parse(id).unwrap(),
            limits,
        };
        shared::tenant::store::put(&self.env.deps, &t)
            .await
            .unwrap();
    }

    pub(crate) fn session_url(&self, t: &str, s: &str) -> String {
        format!(
            "{}/session?tenantId={t}&sessionId={s}",
            self.stack().endpoints.http_url()
        )
    }

    pub(crate) async fn put_session(&self, t: &str, s: &str) -> Value {
        let r = request("PUT", &self.session_url(t, s), None).await.unwrap();
        assert_eq!(r.status, 200, "{}", r.body);
        r.json()
    }

    /// A fresh connect ticket from `POST /session/ticket`, or `None` when the session API gives
    /// none (no such session or tenant, bad ids).
    pub(crate) async fn ticket(&self, t: &str, s: &str) -> Option<String> {
        let url = format!(
            "{}/session/ticket?tenantId={t}&sessionId={s}",
            self.stack().endpoints.http_url()
        );
        let r = request("POST", &url, None).await.unwrap();
        (r.status == 200).then(|| r.json()["ticket"].as_str().unwrap().to_string())
    }

    /// Opens a socket as a browser does: the session's ticket in the subprotocol list
    /// (`new WebSocket(url, ["turnstile", ticket])`), the ids in the query. Without a ticket to be
    /// had (no session), it connects without one.
    pub(crate) async fn connect(&self, t: &str, s: &str) -> Result<Socket, tungstenite::Error> {
        let ticket = self.ticket(t, s).await;
        self.connect_with(t, s, ticket.as_deref()).await
    }

    /// Opens a socket presenting `ticket` (if any) in the subprotocol list.
    pub(crate) async fn connect_with(
        &self,
        t: &str,
        s: &str,
        ticket: Option<&str>,
    ) -> Result<Socket, tungstenite::Error> {
        use tungstenite::client::IntoClientRequest;
        let url = format!(
            "{}/?tenantId={t}&sessionId={s}",
            self.stack().endpoints.ws_url()
        );
        let mut req = url.into_client_request()?;
        if let Some(ticket) = ticket {
            let protocols = format!("turnstile, {ticket}");
            req.headers_mut().insert(
                "Sec-WebSocket-Protocol",
                protocols.parse().expect("a ticket is a valid header value"),
            );
        }
        let (ws, response) = tokio_tungstenite::connect_async(req).await?;
        if ticket.is_some() {
            // The handshake answers the one subprotocol offered besides the ticket.
            assert_eq!(
                response
                    .headers()
                    .get("sec-websocket-protocol")
                    .and_then(|v| v.to_str().ok()),
                Some("turnstile")
            );
        }
        Ok(ws)
    }

    async fn live_connections(&self, t: &str, s: &str) -> usize {
        let r = request("GET", &self.session_url(t, s), None).await.unwrap();
        r.json()["connectionIds"].as_array().map_or(0, |a| a.len())
    }

    /// The tenant's open-connection count (`itemCount` on its counter item; 0 when absent).
    async fn open_count(&self, t: &str) -> i64 {
        let out = self
            .env
            .deps
            .dynamo
            .get_item()
            .table_name(&self.env.deps.tables.counters)
            .key("key", aws_sdk_dynamodb::types::AttributeValue::S(t.into()))
            .consistent_read(true)
            .send()
            .await
            .unwrap();
        out.item()
            .and_then(|i| i.get("itemCount"))
            .and_then(|v| v.as_n().ok())
            .map_or(0, |n| n.parse().unwrap())
    }

    pub(crate) async fn shutdown(mut self) {
        if let Some(s) = self.stack.take() {
            s.shutdown().await;
        }
    }
}

pub(crate) fn limits(tenant_connections: u64, per_session: u64, messages: u64, ttl: u64) -> Limits {
    Limits::example(1000, 1000, per_session, tenant_connections, ttl, messages)
}

pub(crate) fn refused_status(e: &tungstenite::Error) -> Option<u16> {
    match e {
        tungstenite::Error::Http(resp) => Some(resp.status().as_u16()),
        _ => None,
    }
}

/// The next text frame within `secs`, or `None` when the socket closed or nothing came.
pub(crate) async fn next_text(ws: &mut Socket, secs: u64) -> Option<String> {
    let deadline = tokio::time::sleep(Duration::from_secs(secs));
    tokio::pin!(deadline);
    loop {
        tokio::select! {
            _ = &mut deadline => return None,
            m = ws.next() => match m {
                Some(Ok(Message::Text(t))) => return Some(t.to_string()),
                Some(Ok(Message::Close(_))) | None | Some(Err(_)) => return None,
                Some(Ok(_)) => continue,
            }
        }
    }
}

/// Waits until the server closes the socket (a close frame or the end of the stream).
async fn closed_within(ws: &mut Socket, secs: u64) -> bool {
    let deadline = tokio::time::sleep(Duration::from_secs(secs));
    tokio::pin!(deadline);
    loop {
        tokio::select! {
            _ = &mut deadline => return false,
            m = ws.next() => match m {
                Some(Ok(Message::Close(_))) | None | Some(Err(_)) => return true,
                Some(Ok(_)) => continue,
            }
        }
    }
}

pub(crate) async fn eventually(secs: u64, mut f: impl AsyncFnMut() -> bool) -> bool {
    let until = Instant::now() + Duration::from_secs(secs);
    while Instant::now() < until {
        if f().await {
            return true;
        }
        tokio::time::sleep(Duration::from_millis(100)).await;
    }
    false
}

/// The local stack builds every function with its crate's `init`, as `main.rs` does, so it reads the
/// same variables: a `TENANT_ROLE_ARN` that is not a role ARN stops it as it stops a deployed
/// function's start (before, the local stack built its states without tenant clients and ignored it).
#[tokio::test]
async fn local_functions_are_built_by_each_crates_init() {
    let env = TestEnv::new(&[]).await;
    let mut deps = env.deps.clone();
    deps.vars = Vars::from_pairs([
        ("TOKEN_REMOVER_PROCESSORS", PROCESSORS),
        ("TURNSTILE_SESSION_API_AUTH", "none"),
        ("TURNSTILE_DECIDE_AUTH", "jwt"),
        (
            "TURNSTILE_TICKET_KEYS",
            turnstile_bench::samples::SAMPLE_KEYS,
        ),
        ("TENANT_ROLE_ARN", "not-a-role"),
    ]);
    let err = LocalFunctions::new(deps.clone(), "http://127.0.0.1:9/local")
        .await
        .err()
        .expect("a malformed TENANT_ROLE_ARN is refused");
    assert!(err.to_string().contains("TENANT_ROLE_ARN"), "{err}");
    // Empty, as the template sets it with TenantIsolation=Disabled: the execution role.
    deps.vars = deps.vars.with_overrides([("TENANT_ROLE_ARN", "")]);
    assert!(LocalFunctions::new(deps, "http://127.0.0.1:9/local")
        .await
        .is_ok());
}

#[tokio::test]
async fn connect_deny_echo_broadcast_and_disconnect() {
    let l = Local::start().await;
    l.tenant("acme", limits(10, 5, 100, 300)).await;

    // No session yet: the authorizer denies and the handshake gets 403, as API Gateway answers.
    let denied = l.connect("acme", "s1").await.unwrap_err();
    assert_eq!(refused_status(&denied), Some(403));
    // Malformed ids and unknown tenants are denied too.
    assert_eq!(
        refused_status(&l.connect("ac:me", "s1").await.unwrap_err()),
        Some(403)
    );
    assert_eq!(
        refused_status(&l.connect("nobody", "s1").await.unwrap_err()),
        Some(403)
    );

    let session = l.put_session("acme", "s1").await;
    assert_eq!(session["sessionId"], "s1");
    let mut a = l.connect("acme", "s1").await.unwrap();
    let mut b = l.connect("acme", "s1").await.unwrap();
    assert_eq!(l.live_connections("acme", "s1").await, 2);

    a.send(Message::Text("hello".into())).await.unwrap();
    assert_eq!(
        next_text(&mut a, 5).await.as_deref(),
        Some("hello"),
        "echo to the sender"
    );
    let forwarded: Value = serde_json::from_str(&next_text(&mut b, 5).await.unwrap()).unwrap();
    assert_eq!(
        forwarded["message"], "hello",
        "broadcast to the session's other socket"
    );

    a.close(None).await.unwrap();
    assert!(
        eventually(5, async || l.live_connections("acme", "s1").await == 1).await,
        "$disconnect ran"
    );
    l.shutdown().await;
}

#[tokio::test]
async fn caps_hold_under_fifty_concurrent_clients() {
    let l = Local::start().await;
    l.tenant("capped", limits(10, 3, 100, 300)).await;
    for s in 0..5 {
        l.put_session("capped", &format!("s{s}")).await;
    }
    let attempts = (0..50).map(|i| l.connect("capped", if i % 2 == 0 { "s0" } else { "s1" }));
    let results = futures::future::join_all(attempts).await;
    let (ok, refused): (Vec<_>, Vec<_>) = results.into_iter().partition(|r| r.is_ok());
    assert_eq!(ok.len(), 6, "3 per session on two sessions");
    assert!(refused.iter().all(|r| matches!(
        r.as_ref().err().and_then(refused_status),
        Some(429) | Some(403)
    )));

    let lr = &l;
    let more = futures::future::join_all((2..5).flat_map(|s| (0..3).map(move |_| s)).map(|s| {
        let name = format!("s{s}");
        async move { lr.connect("capped", &name).await }
    }))
    .await;
    let admitted = more.iter().filter(|r| r.is_ok()).count();
    assert_eq!(admitted, 4, "the tenant cap of 10 leaves room for 4 more");
    // A refusal at $connect is a 429 naming the limit.
    let refusal = l.connect("capped", "s4").await.unwrap_err();
    if let tungstenite::Error::Http(resp) = &refusal {
        assert!(matches!(resp.status().as_u16(), 403 | 429));
        if resp.status().as_u16() == 429 {
            let body =
                String::from_utf8_lossy(resp.body().as_deref().unwrap_or_default()).to_string();
            assert!(body.contains("violated-policies"), "{body}");
            assert!(resp.headers().contains_key("retry-after"));
        }
    }
    drop(ok);
    drop(more);
    l.shutdown().await;
}

#[tokio::test]
async fn the_message_rate_limit_answers_with_an_error_frame() {
    let l = Local::start().await;
    l.tenant("chatty", limits(10, 5, 2, 300)).await;
    l.put_session("chatty", "s").await;
    let mut ws = l.connect("chatty", "s").await.unwrap();
    for i in 0..2 {
        ws.send(Message::Text(format!("m{i}").into()))
            .await
            .unwrap();
        assert_eq!(next_text(&mut ws, 5).await, Some(format!("m{i}")));
    }
    ws.send(Message::Text("one too many".into())).await.unwrap();
    let frame: Value = serde_json::from_str(&next_text(&mut ws, 5).await.unwrap()).unwrap();
    assert_eq!(frame["status"], 429);
    assert!(frame["retryAfter"].as_u64().unwrap() >= 1);
    l.shutdown().await;
}

#[tokio::test]
async fn deleting_a_session_closes_its_sockets() {
    let l = Local::start().await;
    l.tenant("del", limits(10, 5, 100, 300)).await;
    l.put_session("del", "s").await;
    let mut a = l.connect("del", "s").await.unwrap();
    let mut b = l.connect("del", "s").await.unwrap();
    let r = request("DELETE", &l.session_url("del", "s"), None)
        .await
        .unwrap();
    assert_eq!(r.status, 200, "{}", r.body);
    assert!(closed_within(&mut a, 5).await);
    assert!(closed_within(&mut b, 5).await);
    assert_eq!(
        request("GET", &l.session_url("del", "s"), None)
            .await
            .unwrap()
            .status,
        404
    );
    l.shutdown().await;
}

#[tokio::test]
async fn an_expired_session_has_its_sockets_closed_by_the_sweeper() {
    let l = Local::start().await;
    // Sessions live 2 s; DynamoDB Local deletes the item, the stream bridge delivers the TTL
    // deletion as AWS would, and ttl-sweeper closes the socket.
    l.tenant("brief", limits(10, 5, 100, 2)).await;
    l.put_session("brief", "s").await;
    let mut ws = l.connect("brief", "s").await.unwrap();
    let started = Instant::now();
    assert!(closed_within(&mut ws, 30).await, "closed after expiry");
    assert!(
        started.elapsed() >= Duration::from_secs(1),
        "not before the session expired"
    );
    l.shutdown().await;
}

#[tokio::test]
async fn a_dropped_tcp_connection_still_reaches_disconnect() {
    let l = Local::start().await;
    l.tenant("drop", limits(1, 1, 100, 300)).await;
    l.put_session("drop", "s").await;
    let ws = l.connect("drop", "s").await.unwrap();
    // No close frame: the TCP stream just goes away.
    drop(ws);
    // The release leaves the session first, then the tenant's count (decision 0306): wait for both.
    assert!(
        eventually(5, async || l.live_connections("drop", "s").await == 0
            && l.open_count("drop").await == 0)
        .await
    );
    // The capacity came back: the session's single slot admits a new connection.
    assert!(l.connect("drop", "s").await.is_ok());
    l.shutdown().await;
}

#[tokio::test]
async fn an_event_posted_to_events_removes_the_token() {
    let l = Local::start().await;
    let limiter = shared::reservation::NonFungibleLimiter::from_deps(&l.env.deps).unwrap();
    let r = limiter.get_reservation("emr", "acct", 5).await.unwrap();
    r.create_token("j-ABC").await.unwrap();
    assert_eq!(limiter.list("emr", "acct").await.unwrap().len(), 1);

    let url = format!("{}/events", l.stack().endpoints.http_url());
    let running = json!({"Entries": [{"Source": "aws.emr", "DetailType": "EMR Cluster State Change",
        "Detail": "{\"state\":\"RUNNING\",\"clusterId\":\"j-ABC\"}"}]});
    let r = request("POST", &url, Some(&running.to_string()))
        .await
        .unwrap();
    assert_eq!(r.status, 200);
    assert_eq!(
        r.json()["Entries"][0]["DeliveredTo"],
        json!([]),
        "no rule matches RUNNING"
    );
    assert_eq!(limiter.list("emr", "acct").await.unwrap().len(), 1);

    let done = json!({"Entries": [{"Source": "aws.emr", "DetailType": "EMR Cluster State Change",
        "Detail": "{\"state\":\"TERMINATED\",\"clusterId\":\"j-ABC\"}"}]});
    let r = request("POST", &url, Some(&done.to_string()))
        .await
        .unwrap();
    assert_eq!(r.status, 200, "{}", r.body);
    assert_eq!(
        r.json()["Entries"][0]["DeliveredTo"][0]["Target"],
        "token-remover"
    );
    assert!(
        r.json()["Entries"][0]["DeliveredTo"][0]
            .get("Error")
            .is_none(),
        "{}",
        r.body
    );
    assert_eq!(limiter.list("emr", "acct").await.unwrap().len(), 0);
    l.shutdown().await;
}

#[tokio::test]
async fn bad_requests_get_api_gateway_statuses() {
    let l = Local::start().await;
    let http = l.stack().endpoints.http_url();
    let cases = [
        ("GET", format!("{http}/nope"), None, 404),
        ("PUT", format!("{http}/session"), None, 400),
        (
            "PUT",
            format!("{http}/session?tenantId=a:b&sessionId=s"),
            None,
            400,
        ),
        (
            "PUT",
            format!("{http}/session?tenantId=ghost&sessionId=s"),
            None,
            404,
        ),
        ("POST", format!("{http}/events"), Some("not json"), 400),
        ("POST", format!("{http}/events"), Some("{}"), 400),
    ];
    for (method, url, body, want) in cases {
        let r = request(method, &url, body).await.unwrap();
        assert_eq!(r.status, want, "{method} {url}: {}", r.body);
    }
    // A plain GET (no upgrade) on the WebSocket endpoint is refused, and the stack keeps serving.
    let ws_http = format!("http://{}/", l.stack().endpoints.ws_addr);
    let r = request("GET", &ws_http, None).await.unwrap();
    assert!(r.status >= 400 && r.status < 500, "{}", r.status);
    let gone = format!(
        "http://{}/local/@connections/nope",
        l.stack().endpoints.ws_addr
    );
    assert_eq!(request("POST", &gone, Some("x")).await.unwrap().status, 410);
    assert_eq!(
        request("GET", &format!("{http}/nope"), None)
            .await
            .unwrap()
            .status,
        404
    );
    l.shutdown().await;
}

/// A token as a client would send it (the local stack decodes it without verifying it).
fn bearer(claims: &Value) -> String {
    let enc = |v: &Value| {
        aws_smithy_types::base64::encode(v.to_string())
            .trim_end_matches('=')
            .replace('+', "-")
            .replace('/', "_")
    };
    format!(
        "Bearer {}.{}.unsigned",
        enc(&json!({"alg": "none"})),
        enc(claims)
    )
}

/// With `TURNSTILE_SESSION_API_AUTH=jwt`, the local HTTP API hands the bearer token's claims to the
/// session API as API Gateway does, and a caller reaches only its own tenant's sessions.
#[tokio::test]
async fn the_local_session_api_binds_a_jwt_caller_to_its_tenant_claim() {
    let l = Local::start_with(&[("TURNSTILE_SESSION_API_AUTH", "jwt")]).await;
    l.tenant("acme", limits(10, 2, 60, 200)).await;
    l.tenant("other", limits(10, 2, 60, 200)).await;
    let token = bearer(&json!({"sub": "u1", "tenantId": "acme", "exp": 4_000_000_000u64}));
    let auth = [("Authorization", token.as_str())];
    let r = request_with("PUT", &l.session_url("other", "s1"), &auth, None)
        .await
        .unwrap();
    assert_eq!(r.status, 403, "{}", r.body);
    assert_eq!(
        r.headers.get("content-type").map(String::as_str),
        Some("application/problem+json")
    );
    let url = format!("{}/session?sessionId=s1", l.stack().endpoints.http_url());
    let r = request_with("PUT", &url, &auth, None).await.unwrap();
    assert_eq!(r.status, 200, "{}", r.body);
    assert_eq!(r.json()["tenantId"], "acme");
    // No token: no claims reach the function, which refuses.
    let r = request("GET", &l.session_url("acme", "s1"), None)
        .await
        .unwrap();
    assert_eq!(r.status, 403, "{}", r.body);
    l.shutdown().await;
}

/// The local stack answers only requests addressed to it, so a web page using DNS
/// rebinding (its own name resolving to 127.0.0.1) cannot read the dashboard's state or call the
/// session API from the developer's browser. Raw requests, to set `Host` as such a page would.
#[tokio::test]
async fn requests_addressed_to_another_host_are_refused() {
    use tokio::io::{AsyncReadExt, AsyncWriteExt};
    let l = Local::start().await;
    let call = |addr: std::net::SocketAddr,
                method: &'static str,
                host: &'static str,
                path: &'static str| async move {
        let mut s = tokio::net::TcpStream::connect(addr).await.unwrap();
        let req = format!(
            "{method} {path} HTTP/1.1\r\nHost: {host}\r\nContent-Length: 0\r\nConnection: close\r\n\r\n"
        );
        s.write_all(req.as_bytes()).await.unwrap();
        let mut out = String::new();
        s.read_to_string(&mut out).await.unwrap();
        out.split_whitespace().nth(1).unwrap_or("").to_string()
    };
    let status = |addr: std::net::SocketAddr, host: &'static str, path: &'static str| {
        call(addr, "GET", host, path)
    };
    let eps = l.stack().endpoints.clone();
    let (http, ws) = (eps.http_addr, eps.ws_addr);
    let own: &'static str = Box::leak(http.to_string().into_boxed_str());
    let local_name: &'static str = Box::leak(format!("localhost:{}", http.port()).into_boxed_str());
    assert_eq!(status(http, own, "/dashboard/state").await, "200");
    assert_eq!(status(http, local_name, "/dashboard/state").await, "200");
    assert_eq!(status(http, own, "/dashboard/decisions").await, "200");
    // `/events` answers its own host (an empty body is a 4xx of the handler, not the guard's 403).
    let events_own = call(http, "POST", own, "/events").await;
    assert_ne!(events_own, "403", "POST /events from its own host");
    // Every route the HTTP listener serves (local/src/http_api.rs and the dashboard), with the
    // method it serves, and a path it does not.
    for (method, path) in [
        ("GET", "/dashboard/state"),
        ("GET", "/dashboard/decisions"),
        ("GET", "/dashboard/chart.js"),
        ("GET", "/session?tenantId=a&sessionId=s"),
        ("PUT", "/session?tenantId=a&sessionId=s"),
        ("DELETE", "/session?tenantId=a&sessionId=s"),
        ("POST", "/session/ticket?tenantId=a&sessionId=s"),
        ("POST", "/events"),
        ("GET", "/"),
        ("GET", "/no-such-route"),
    ] {
        assert_eq!(
            call(http, method, "rebound.example:3000", path).await,
            "403",
            "{method} {path}"
        );
    }
    // And the WebSocket listener's: the upgrade at `/` and the Management API.
    for (method, path) in [
        ("GET", "/"),
        ("GET", "/local/@connections/x"),
        ("POST", "/local/@connections/x"),
        ("DELETE", "/local/@connections/x"),
    ] {
        assert_eq!(
            call(ws, method, "rebound.example", path).await,
            "403",
            "ws {method} {path}"
        );
    }
    l.shutdown().await;
}

/// `make dev` serves the decide API at `/v1/`: a bearer JWT binds the caller to its tenant claim;
/// a request without one is answered 401 `{"message":"Unauthorized"}` before the function, as API
/// Gateway's JWT authorizer answers it; a body over the local HTTP API's limit is answered 413 in
/// JSON naming `body`, never text.
#[tokio::test]
async fn the_local_stack_serves_the_decide_api_under_v1() {
    let l = Local::start_with_tables(&[TableKind::Buckets]).await;
    let base = l.stack().endpoints.http_url();
    let token = bearer(&json!({"sub": "u1", "tenantId": "acme", "exp": 4_000_000_000u64}));
    let auth = [("Authorization", token.as_str())];
    let body = r#"{"name": "PerUser", "id": "u1"}"#;
    let url = format!("{base}/v1/limits/spend");
    let r = request_with("POST", &url, &auth, Some(body)).await.unwrap();
    assert_eq!(r.status, 200, "{}", r.body);
    assert_eq!(r.json()["allowed"], true);
    assert!(r.headers.contains_key("ratelimit"), "{:?}", r.headers);
    let anon = request_with("POST", &url, &auth[1..], Some(body))
        .await
        .unwrap();
    assert_eq!(anon.status, 401, "{}", anon.body);
    assert_eq!(anon.json(), json!({"message": "Unauthorized"}));
    assert_eq!(
        anon.headers.get("www-authenticate").map(String::as_str),
        Some("Bearer")
    );
    let garbled = [("Authorization", "Bearer not-a-jwt")];
    let r = request_with("POST", &url, &garbled, Some(body))
        .await
        .unwrap();
    assert_eq!(r.status, 401, "{}", r.body);
    let big = "x".repeat(turnstile_local::decide_api::MAX_BODY + 1);
    let r = request_with("POST", &url, &auth, Some(&big)).await.unwrap();
    assert_eq!(r.status, 413, "{}", r.body);
    assert_eq!(r.json()["field"], "body");
    // The media type is the function's to judge, after routing, as deployed: an undeclared method
    // is its 405 with or without a content type, a body that is not JSON its 415.
    let state = format!("{base}/v1/limits/state?name=PerUser&id=u1");
    let r = request_exact("POST", &state, &auth, None).await.unwrap();
    assert_eq!(r.status, 405, "{}", r.body);
    let plain = [auth[0], ("Content-Type", "text/plain")];
    let r = request_exact("POST", &url, &plain, Some(body))
        .await
        .unwrap();
    assert_eq!(r.status, 415, "{}", r.body);
    assert_eq!(r.json()["field"], "Content-Type");
    l.shutdown().await;
}
