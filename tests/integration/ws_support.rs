//! Helpers for the WebSocket admission tests: one [`World`] per test with its own tables, a local
//! Management API on a free port (the real `aws-sdk-apigatewaymanagement` client talks to it),
//! each function's state built as its `main.rs` builds it, and events made from `events/*.json`.

use std::collections::HashMap;
use std::net::SocketAddr;
use std::sync::Arc;

use aws_lambda_events::apigw::{
    ApiGatewayCustomAuthorizerRequestTypeRequest, ApiGatewayProxyResponse, ApiGatewayV2httpRequest,
    ApiGatewayWebsocketProxyRequest,
};
use aws_sdk_dynamodb::types::AttributeValue;
use serde_json::Value;
use shared::config::Vars;
use shared::edge::{context, respond};
use shared::gateway::Gateway;
use shared::ids::{SessionId, TenantId};
use shared::table::TableKind;
use shared::tenant::{Limits, Tenant};
use shared::ticket::{self, KeySet};
use turnstile_bench::samples;
use turnstile_local::{ManagementApi, Recorder};
use turnstile_tests::TestEnv;

/// The first example tenant of the AWS sample: (tenantPerMinute 60, sessionPerMinute 5,
/// connectionsPerSession 2, tenantConnections 10, sessionTTL 200, messagesPerMinute 60).
pub const SMALL: Limits = Limits::example(60, 5, 2, 10, 200, 60);
pub const MEDIUM: Limits = Limits::example(120, 10, 5, 100, 300, 600);

pub fn events_dir() -> std::path::PathBuf {
    std::path::Path::new(env!("CARGO_MANIFEST_DIR")).join("../events")
}

/// A sample event as JSON.
pub fn sample(path: &str) -> Value {
    let p = events_dir().join(path);
    let text =
        std::fs::read_to_string(&p).unwrap_or_else(|e| panic!("reading {}: {e}", p.display()));
    serde_json::from_str(&text).unwrap_or_else(|e| panic!("parsing {}: {e}", p.display()))
}

/// A TTL-deletion stream record (AWS's shape) of session `s` of tenant `t` holding `ids`; `seq`
/// makes its sequence number and event id.
pub fn ttl_record(t: &str, s: &str, ids: &[&str], seq: &str) -> Value {
    let mut v = sample("ttl-sweeper/ttl-expiry.json")["Records"][0].clone();
    v["eventID"] = serde_json::json!(format!("ev-{seq}"));
    v["dynamodb"]["SequenceNumber"] = serde_json::json!(seq);
    v["dynamodb"]["Keys"] = serde_json::json!({"tenantId": {"S": t}, "sessionId": {"S": s}});
    let mut img =
        serde_json::json!({"tenantId": {"S": t}, "sessionId": {"S": s}, "sessionTTL": {"N": "1"}});
    if !ids.is_empty() {
        img["connectionIds"] = serde_json::json!({"SS": ids});
    }
    v["dynamodb"]["OldImage"] = img;
    v
}

pub fn typed<T: serde::de::DeserializeOwned>(v: Value) -> T {
    serde_json::from_value(v).expect("sample event has the typed shape")
}

/// The key set the World's functions sign and verify connect tickets with: the sample events'
/// (published, test-only), so the sample authorizer event's ticket is one of them.
pub fn test_keys() -> KeySet {
    KeySet::parse_json(samples::SAMPLE_KEYS).expect("the sample key set parses")
}

/// `deps` with the variables the template sets on the WebSocket functions, for their `init`; the
/// session API trusts its callers (`none`), as the local stack does; tickets are signed with
/// [`test_keys`].
fn function_deps(deps: &shared::Deps, management_endpoint: &str) -> shared::Deps {
    shared::Deps {
        vars: Vars::from_pairs([
            ("TURNSTILE_TENANT_CACHE_SECS", "60"),
            ("TURNSTILE_MANAGEMENT_ENDPOINT", management_endpoint),
            ("TURNSTILE_SESSION_API_AUTH", "none"),
            ("TURNSTILE_TICKET_KEYS", samples::SAMPLE_KEYS),
        ]),
        ..deps.clone()
    }
}

pub struct World {
    pub env: TestEnv,
    pub api: ManagementApi,
    pub recorder: Arc<Recorder>,
    pub authorizer: authorizer::State,
    pub connect: connect::State,
    pub disconnect: disconnect::State,
    pub message: message::State,
    pub session_api: session_api::State,
    pub sweeper: ttl_sweeper::State,
}

impl World {
    pub async fn new() -> World {
        let env = TestEnv::new(&TableKind::WEBSOCKET).await;
        let recorder = Arc::new(Recorder::new());
        let api = ManagementApi::start(SocketAddr::from(([127, 0, 0, 1], 0)), recorder.clone())
            .await
            .expect("local Management API starts");
        // Each function's state from its crate's `init`, as main.rs builds it, with the variables
        // the template sets (without TENANT_ROLE_ARN: the execution role, no extra calls).
        let deps = function_deps(&env.deps, &api.url());
        let authorizer = authorizer::init(&deps).await.unwrap();
        let connect = connect::init(&deps).await.unwrap();
        let disconnect = disconnect::init(&deps).await.unwrap();
        let message = message::init(&deps).await.unwrap();
        let session_api = session_api::init(&deps).await.unwrap();
        let sweeper = ttl_sweeper::init(&deps).await.unwrap();
        World {
            env,
            api,
            recorder,
            authorizer,
            connect,
            disconnect,
            message,
            session_api,
            sweeper,
        }
    }

    pub fn deps(&self) -> &shared::Deps {
        &self.env.deps
    }

    /// The connections the Management API was asked to close, sorted.
    pub fn closed(&self) -> Vec<String> {
        let mut closed: Vec<String> = self
            .api
            .received_by("DELETE")
            .into_iter()
            .map(|r| r.connection_id)
            .collect();
        closed.sort();
        closed
    }

    /// The `Deps` a function's `init` reads: these tables, with the functions' variables plus
    /// `extra` (a later pair wins).
    pub fn function_deps(&self, extra: &[(&str, &str)]) -> shared::Deps {
        let mut deps = function_deps(&self.env.deps, &self.api.url());
        deps.vars = deps.vars.with_overrides(extra.iter().copied());
        deps
    }

    pub async fn put_tenant(&self, id: &str, limits: Limits) {
        let t = Tenant {
            tenant_id: TenantId::parse(id).unwrap(),
            limits,
        };
        shared::tenant::store::put(self.deps(), &t).await.unwrap();
    }

    /// `PUT /session` through the session API; panics unless 200.
    pub async fn put_session(&self, t: &str, s: &str) -> Value {
        let r = self
            .session_call("PUT", &[("tenantId", t), ("sessionId", s)], None)
            .await;
        assert_eq!(r.0, 200, "PUT /session: {}", r.1);
        serde_json::from_str(&r.1).unwrap()
    }

    /// Calls the session API; returns (status, body).
    pub async fn session_call(
        &self,
        method: &str,
        query: &[(&str, &str)],
        body: Option<&str>,
    ) -> (i64, String) {
        let ev = session_event(method, "/session", query, body);
        self.session_raw(ev).await
    }

    pub async fn session_raw(&self, ev: ApiGatewayV2httpRequest) -> (i64, String) {
        let r = session_api::handle(self.deps(), &self.session_api, ev)
            .await
            .unwrap();
        (r.status_code, respond::body_text(&r.body))
    }

    /// The sample events' tenant-1/session-1, holding the nonce the sample ticket names.
    pub async fn put_sample_session(&self) {
        samples::ensure_sample_session(self.deps()).await.unwrap();
    }

    /// A connect ticket for `t`/`s` as the session API would mint it now (60 s), for the session's
    /// current nonce (a made-up one when the session does not exist; see [`World::session_nonce`]).
    pub async fn ticket(&self, t: &str, s: &str) -> String {
        let nonce = self
            .session_nonce(t, s)
            .await
            .unwrap_or_else(|| "no-such-session".into());
        let claims = ticket::Claims {
            tenant: TenantId::parse(t).unwrap(),
            session: SessionId::parse(s).unwrap(),
            nonce,
            expires_at: shared::clock::Clock::now(&self.env.clock).as_secs() + 60,
            subject: None,
            id: ticket::new_id().unwrap(),
            connects: ticket::DEFAULT_CONNECTS,
        };
        ticket::mint(&test_keys(), &claims)
    }

    /// An authorizer event for `t`/`s` carrying a fresh ticket in the subprotocol list, as a
    /// browser sends it (the query form is each tenant's opt-in).
    pub async fn authorizer_event(
        &self,
        t: &str,
        s: &str,
    ) -> ApiGatewayCustomAuthorizerRequestTypeRequest {
        let ticket = self.ticket(t, s).await;
        let mut ev = authorizer_event(&[("tenantId", t), ("sessionId", s)]);
        let protocols = format!("{}, {ticket}", ticket::SUBPROTOCOL);
        ev.headers.insert(
            "sec-websocket-protocol",
            protocols.parse().expect("a ticket is a valid header value"),
        );
        ev
    }

    /// The authorizer's decision for `t`/`s`, presenting a fresh ticket.
    pub async fn authorize(&self, t: &str, s: &str) -> authorizer::Decision {
        let ev = self.authorizer_event(t, s).await;
        let r = authorizer::handle(self.deps(), &self.authorizer, ev)
            .await
            .unwrap();
        authorizer::decision(&r)
    }

    pub async fn connect(
        &self,
        t: &str,
        s: &str,
        cid: &str,
        limits: &Limits,
    ) -> ApiGatewayProxyResponse {
        connect::handle(
            self.deps(),
            &self.connect,
            ws_event("connect/connect.json", t, s, cid, Some(limits)),
        )
        .await
        .unwrap()
    }

    pub async fn disconnect(&self, t: &str, s: &str, cid: &str) -> ApiGatewayProxyResponse {
        disconnect::handle(
            self.deps(),
            &self.disconnect,
            ws_event("disconnect/disconnect.json", t, s, cid, Some(&SMALL)),
        )
        .await
        .unwrap()
    }

    pub async fn send(
        &self,
        t: &str,
        s: &str,
        cid: &str,
        limits: &Limits,
        body: &str,
    ) -> ApiGatewayProxyResponse {
        let mut ev = ws_event("message/message.json", t, s, cid, Some(limits));
        ev.body = Some(body.to_string());
        message::handle(self.deps(), &self.message, ev)
            .await
            .unwrap()
    }

    /// A counter row's itemCount (None when the row does not exist).
    pub async fn count(&self, key: &str) -> Option<i64> {
        self.counter_number(key, "itemCount").await
    }

    /// A numeric attribute of a counter row (None when the row or the attribute does not exist).
    pub async fn counter_number(&self, key: &str, attr: &str) -> Option<i64> {
        let out = self
            .deps()
            .dynamo
            .get_item()
            .table_name(&self.deps().tables.counters)
            .key("key", AttributeValue::S(key.into()))
            .consistent_read(true)
            .send()
            .await
            .unwrap();
        out.item()
            .and_then(|i| i.get(attr))
            .and_then(|v| v.as_n().ok())
            .map(|n| n.parse().unwrap())
    }

    /// The session item as stored, read (strongly consistent) with `client`.
    async fn session_row(
        &self,
        client: &aws_sdk_dynamodb::Client,
        t: &str,
        s: &str,
    ) -> Option<HashMap<String, AttributeValue>> {
        let out = client
            .get_item()
            .table_name(&self.deps().tables.sessions)
            .set_key(Some(shared::session::store::key(
                &TenantId::parse(t).unwrap(),
                &SessionId::parse(s).unwrap(),
            )))
            .consistent_read(true)
            .send()
            .await
            .unwrap();
        out.item().cloned()
    }

    /// A numeric attribute of a session item (None when the item or the attribute does not exist).
    pub async fn session_number(&self, t: &str, s: &str, attr: &str) -> Option<i64> {
        self.session_row(&self.deps().dynamo, t, s)
            .await
            .and_then(|i| i.get(attr).and_then(|v| v.as_n().ok()).cloned())
            .map(|n| n.parse().unwrap())
    }

    /// The session's `sessionNonce`, read with a client of its own, so the calls a test counts are
    /// the handlers' only.
    pub async fn session_nonce(&self, t: &str, s: &str) -> Option<String> {
        let uncounted = shared::dynamo::local_client(&self.env.endpoint, None);
        self.session_row(&uncounted, t, s).await.and_then(|i| {
            i.get(shared::session::attr::SESSION_NONCE)
                .and_then(|v| v.as_s().ok())
                .cloned()
        })
    }

    /// Connections the tenant opened in the current fixed minute (`connMinuteCount` on its
    /// counter item, decision 0306); 0 when the stored window is another minute or absent.
    pub async fn tenant_minute_count(&self, t: &str) -> i64 {
        if self.counter_number(t, "connMinute").await != Some(self.minute()) {
            return 0;
        }
        self.counter_number(t, "connMinuteCount").await.unwrap_or(0)
    }

    /// Connections the session opened in the current fixed minute (`connMinuteCount` on the
    /// session item); 0 when the stored window is another minute or absent.
    pub async fn session_minute_count(&self, t: &str, s: &str) -> i64 {
        if self.session_number(t, s, "connMinute").await != Some(self.minute()) {
            return 0;
        }
        self.session_number(t, s, "connMinuteCount")
            .await
            .unwrap_or(0)
    }

    pub async fn session(&self, t: &str, s: &str) -> Option<shared::session::Session> {
        shared::session::store::get(
            self.deps(),
            &TenantId::parse(t).unwrap(),
            &SessionId::parse(s).unwrap(),
        )
        .await
        .unwrap()
    }

    /// Every key in the counter table.
    pub async fn counter_keys(&self) -> Vec<String> {
        let out = self
            .deps()
            .dynamo
            .scan()
            .table_name(&self.deps().tables.counters)
            .consistent_read(true)
            .send()
            .await
            .unwrap();
        let mut keys: Vec<String> = out
            .items()
            .iter()
            .filter_map(|i| i.get("key").and_then(|v| v.as_s().ok()).cloned())
            .collect();
        keys.sort();
        keys
    }

    pub fn minute(&self) -> i64 {
        shared::counter::window::MinuteWindow::at(shared::clock::Clock::now(&self.env.clock)).start
    }
}

/// The sample authorizer event with this query and no other credential (the sample's own ticket,
/// in its subprotocol header, is removed).
pub fn authorizer_event(query: &[(&str, &str)]) -> ApiGatewayCustomAuthorizerRequestTypeRequest {
    let mut v = sample("authorizer/connect-request.json");
    for headers in ["headers", "multiValueHeaders"] {
        if let Some(h) = v[headers].as_object_mut() {
            h.remove("Sec-WebSocket-Protocol");
        }
    }
    let q: serde_json::Map<String, Value> = query
        .iter()
        .map(|(k, v)| (k.to_string(), Value::String(v.to_string())))
        .collect();
    let mq: serde_json::Map<String, Value> = query
        .iter()
        .map(|(k, v)| (k.to_string(), serde_json::json!([v])))
        .collect();
    v["queryStringParameters"] = Value::Object(q);
    v["multiValueQueryStringParameters"] = Value::Object(mq);
    typed(v)
}

/// A WebSocket route event from a sample, for this tenant/session/connection; `limits` None leaves
/// the limits out of the authorizer context (the handler then reads the tenant). The context says
/// the socket was admitted under the limits' `connectAuth` (the default, a ticket, without
/// limits), as the authorizer's Allow records it.
pub fn ws_event(
    sample_path: &str,
    t: &str,
    s: &str,
    cid: &str,
    limits: Option<&Limits>,
) -> ApiGatewayWebsocketProxyRequest {
    let mut v = sample(sample_path);
    let mut auth = match limits {
        Some(l) => {
            let mut m = HashMap::new();
            for (k, val) in l.fields() {
                m.insert(k.to_string(), Value::String(val.to_string()));
            }
            use shared::tenant::attr as a;
            for (k, val) in [
                (a::RATE_ALGORITHM, l.rate_algorithm.as_str()),
                (a::ENFORCEMENT, l.enforcement.as_str()),
                (a::ON_FAILURE, l.on_failure.as_str()),
            ] {
                m.insert(k.to_string(), Value::String(val.to_string()));
            }
            m
        }
        None => HashMap::new(),
    };
    auth.insert(context::TENANT_ID.into(), Value::String(t.into()));
    auth.insert(context::SESSION_ID.into(), Value::String(s.into()));
    let admitted = limits.map(|l| l.connect_auth).unwrap_or_default();
    auth.insert(
        context::CONNECT_AUTH.into(),
        Value::String(admitted.as_str().into()),
    );
    auth.insert("principalId".into(), Value::String(format!("{t}/{s}")));
    v["requestContext"]["authorizer"] = serde_json::to_value(auth).unwrap();
    v["requestContext"]["connectionId"] = Value::String(cid.into());
    if v.get("queryStringParameters").is_some() {
        v["queryStringParameters"] = serde_json::json!({"tenantId": t, "sessionId": s});
        v["multiValueQueryStringParameters"] =
            serde_json::json!({"tenantId": [t], "sessionId": [s]});
    }
    typed(v)
}

pub fn session_event(
    method: &str,
    path: &str,
    query: &[(&str, &str)],
    body: Option<&str>,
) -> ApiGatewayV2httpRequest {
    let mut v = sample("session-api/put.json");
    let q: serde_json::Map<String, Value> = query
        .iter()
        .map(|(k, v)| (k.to_string(), Value::String(v.to_string())))
        .collect();
    v["queryStringParameters"] = Value::Object(q);
    v["rawQueryString"] = Value::String(
        query
            .iter()
            .map(|(k, v)| format!("{k}={v}"))
            .collect::<Vec<_>>()
            .join("&"),
    );
    v["rawPath"] = Value::String(path.into());
    v["requestContext"]["http"]["path"] = Value::String(path.into());
    v["requestContext"]["http"]["method"] = Value::String(method.into());
    v["routeKey"] = Value::String(format!("{method} {path}"));
    if let Some(b) = body {
        v["body"] = Value::String(b.into());
    }
    typed(v)
}

pub fn body_json(r: &ApiGatewayProxyResponse) -> Value {
    serde_json::from_str(&respond::body_text(&r.body)).unwrap_or(Value::Null)
}

/// One reconciler run over `tenant` with these deps (e.g. another clock), probing sockets at this
/// Management API endpoint; the tenant's rows are reached with the same deps.
pub async fn reconcile_tenant(
    deps: &shared::Deps,
    tenant: &TenantId,
    endpoint: &str,
    dry_run: bool,
    grace: std::time::Duration,
) -> shared::reconcile::Report {
    reconcile_tenant_paced(deps, tenant, endpoint, dry_run, grace, |_| {
        tokio::time::sleep(grace)
    })
    .await
}

/// [`reconcile_tenant`] whose waits between the phases are `pause` (the run's report still says
/// `grace`): a test places a connect or a release exactly inside a grace.
pub async fn reconcile_tenant_paced<P, F>(
    deps: &shared::Deps,
    tenant: &TenantId,
    endpoint: &str,
    dry_run: bool,
    grace: std::time::Duration,
    pause: P,
) -> shared::reconcile::Report
where
    P: FnMut(shared::reconcile::Pause) -> F,
    F: std::future::Future<Output = ()>,
{
    use shared::reconcile::{self, Options, Probe};
    let gateway = Gateway::local(endpoint);
    let probe = Probe {
        gateway: &gateway,
        endpoint: endpoint.to_string(),
    };
    let options = Options {
        tenant: Some(tenant.clone()),
        dry_run,
        grace,
        budget: reconcile::Budget::for_grace(reconcile::MAX_GRACE),
    };
    let scoped = deps.clone();
    let scoped = |_| {
        let d = scoped.clone();
        async move { Ok(d) }
    };
    reconcile::run_paced(deps, &options, Some(&probe), scoped, pause)
        .await
        .unwrap()
}

/// Which requests a [`Before`] runs before: (operation, JSON body) → whether.
type Matches = dyn Fn(&str, &Value) -> bool + Send + Sync;
/// What a [`Before`] runs: (matches so far, a plain client) → the work.
type Action = dyn Fn(usize, aws_sdk_dynamodb::Client) -> futures::future::BoxFuture<'static, ()>
    + Send
    + Sync;

/// Runs `action` before each request `matches` selects (by operation and JSON body), with the
/// number of matches before it and a plain client of its own, on a thread of its own (interceptor
/// hooks cannot await) and finished before the request goes out: a test fixes what each attempt of
/// a retry loop meets instead of hoping concurrent tasks produce that order.
pub struct Before {
    endpoint: String,
    matches: Box<Matches>,
    action: Box<Action>,
    seen: std::sync::atomic::AtomicUsize,
}

impl std::fmt::Debug for Before {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("Before").field("seen", &self.seen).finish()
    }
}

impl Before {
    pub fn new(
        endpoint: &str,
        matches: impl Fn(&str, &Value) -> bool + Send + Sync + 'static,
        action: impl Fn(usize, aws_sdk_dynamodb::Client) -> futures::future::BoxFuture<'static, ()>
            + Send
            + Sync
            + 'static,
    ) -> Arc<Before> {
        Arc::new(Before {
            endpoint: endpoint.to_string(),
            matches: Box::new(matches),
            action: Box::new(action),
            seen: Default::default(),
        })
    }

    /// Requests matched so far.
    pub fn seen(&self) -> usize {
        self.seen.load(std::sync::atomic::Ordering::SeqCst)
    }

    /// `deps` whose DynamoDB client runs this before each matching request.
    pub fn deps(self: &Arc<Self>, deps: &shared::Deps) -> shared::Deps {
        let config = deps
            .dynamo
            .config()
            .to_builder()
            .interceptor(BeforeHook(self.clone()))
            .build();
        shared::Deps {
            dynamo: aws_sdk_dynamodb::Client::from_conf(config),
            ..deps.clone()
        }
    }
}

#[derive(Debug)]
struct BeforeHook(Arc<Before>);

impl aws_smithy_runtime_api::client::interceptors::Intercept for BeforeHook {
    fn name(&self) -> &'static str {
        "Before"
    }

    fn read_before_transmit(
        &self,
        context: &aws_smithy_runtime_api::client::interceptors::context::BeforeTransmitInterceptorContextRef<'_>,
        _rc: &aws_smithy_runtime_api::client::runtime_components::RuntimeComponents,
        _cfg: &mut aws_smithy_types::config_bag::ConfigBag,
    ) -> Result<(), aws_smithy_runtime_api::box_error::BoxError> {
        let req = context.request();
        let op = req
            .headers()
            .get("x-amz-target")
            .and_then(|t| t.rsplit('.').next())
            .unwrap_or_default()
            .to_string();
        let body: Value = req
            .body()
            .bytes()
            .and_then(|b| serde_json::from_slice(b).ok())
            .unwrap_or_default();
        let before = &self.0;
        if !(before.matches)(&op, &body) {
            return Ok(());
        }
        let n = before
            .seen
            .fetch_add(1, std::sync::atomic::Ordering::SeqCst);
        let work = (before.action)(n, shared::dynamo::local_client(&before.endpoint, None));
        std::thread::spawn(move || {
            tokio::runtime::Builder::new_current_thread()
                .enable_all()
                .build()
                .map(|rt| rt.block_on(work))
        })
        .join()
        .map_err(|_| "a Before action panicked")?
        .map_err(|e| format!("a Before action's runtime: {e}"))?;
        Ok(())
    }
}
