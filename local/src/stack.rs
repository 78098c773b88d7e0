//! The whole local stack in one process: the WebSocket API (with the `@connections` Management API on
//! the same host), the HTTP API (session routes and `POST /events`), and the stream bridge that feeds
//! the session table's TTL deletions to `ttl-sweeper`. Listeners are bound first so the functions can
//! be built knowing the real endpoints (tests use port 0).

use std::net::SocketAddr;
use std::sync::Arc;
use std::time::Duration;

use shared::clock::SharedClock;
use tokio::net::TcpListener;
use tokio::sync::watch;
use tokio::task::JoinHandle;

use crate::dashboard::{self, DecisionLog, Recorded};
use crate::host_check::{self, Guard};
use crate::http_api::{self, Rule};
use crate::lambda::Invoke;
use crate::stream_bridge::{local_streams_client, StartAt, StreamBridge};
use crate::websocket::{self, ApiIdentity, LiveConnections};

#[derive(Debug, Clone)]
pub struct StackConfig {
    pub ws_addr: SocketAddr,
    pub http_addr: SocketAddr,
    /// The stage in events and in the Management API endpoint (`http://host:port/{stage}`).
    pub stage: String,
    pub dynamodb_endpoint: String,
    /// The session table whose stream feeds `ttl-sweeper`; `None` runs no bridge.
    pub session_table: Option<String>,
    pub stream_poll: Duration,
    pub stream_start: StartAt,
    /// The sweeper's event source mapping filter (`template::stream_filters`): records none of
    /// these match never reach `ttl-sweeper`. Empty delivers every record.
    pub sweeper_filters: Vec<crate::eventbridge::Pattern>,
    pub rules: Vec<Rule>,
    pub account_id: String,
    pub region: String,
    /// Where the dashboard (`GET /` on the HTTP API) reads the tables; `None` shows only the
    /// decisions and live sockets.
    pub dashboard: Option<shared::Deps>,
    /// `Host` values answered besides the bound address and the loopback names
    /// (`TURNSTILE_DEV_ALLOWED_HOSTS`; [`crate::host_check`]); pages served from them are the
    /// stack's own origins too.
    pub allowed_hosts: Vec<String>,
    /// The installed npm packages the dashboard's charting library is served from
    /// (`TURNSTILE_DEV_DASHBOARD_ASSETS`; [`dashboard::assets`]).
    pub dashboard_assets: std::path::PathBuf,
}

impl StackConfig {
    pub fn new(ws_addr: SocketAddr, http_addr: SocketAddr, dynamodb_endpoint: &str) -> Self {
        StackConfig {
            ws_addr,
            http_addr,
            stage: "local".into(),
            dynamodb_endpoint: dynamodb_endpoint.into(),
            session_table: None,
            stream_poll: Duration::from_millis(500),
            stream_start: StartAt::Latest,
            sweeper_filters: Vec::new(),
            rules: Vec::new(),
            account_id: "000000000000".into(),
            region: "us-east-1".into(),
            dashboard: None,
            allowed_hosts: Vec::new(),
            dashboard_assets: dashboard::assets::default_dir(),
        }
    }
}

/// Where the stack listens, known before the functions are built.
#[derive(Debug, Clone)]
pub struct Endpoints {
    pub ws_addr: SocketAddr,
    pub http_addr: SocketAddr,
    pub stage: String,
}

impl Endpoints {
    /// What WebSocket clients connect to.
    pub fn ws_url(&self) -> String {
        format!("ws://{}", self.ws_addr)
    }
    /// The session API base URL.
    pub fn http_url(&self) -> String {
        format!("http://{}", self.http_addr)
    }
    /// The Management API endpoint the functions' SDK client uses (API Gateway's
    /// `https://{domain}/{stage}`).
    pub fn management_url(&self) -> String {
        format!("http://{}/{}", self.ws_addr, self.stage)
    }
}

#[derive(Debug, thiserror::Error)]
pub enum StackError {
    #[error("cannot listen on {addr}: {source}")]
    Bind {
        addr: SocketAddr,
        source: std::io::Error,
    },
    #[error(transparent)]
    Bridge(#[from] crate::stream_bridge::BridgeError),
}

/// A running stack; [`Stack::shutdown`] stops every part and waits for it.
pub struct Stack {
    pub endpoints: Endpoints,
    pub live: Arc<LiveConnections>,
    /// Every invocation's decision, newest first (the dashboard's "last decisions").
    pub decisions: Arc<DecisionLog>,
    shutdown: watch::Sender<bool>,
    tasks: Vec<JoinHandle<()>>,
}

impl Stack {
    /// Binds, builds the functions with `make_functions(&endpoints)`, and starts serving.
    pub async fn start<F>(
        cfg: StackConfig,
        clock: SharedClock,
        make_functions: F,
    ) -> Result<Stack, StackError>
    where
        F: AsyncFnOnce(&Endpoints) -> Arc<dyn Invoke>,
    {
        let bind = |addr: SocketAddr| async move {
            TcpListener::bind(addr)
                .await
                .map_err(|source| StackError::Bind { addr, source })
        };
        let ws_listener = bind(cfg.ws_addr).await?;
        let http_listener = bind(cfg.http_addr).await?;
        let local = |l: &TcpListener, asked: SocketAddr| l.local_addr().unwrap_or(asked);
        let endpoints = Endpoints {
            ws_addr: local(&ws_listener, cfg.ws_addr),
            http_addr: local(&http_listener, cfg.http_addr),
            stage: cfg.stage.clone(),
        };
        let decisions = DecisionLog::new();
        let functions: Arc<dyn Invoke> = Recorded::new(
            make_functions(&endpoints).await,
            decisions.clone(),
            clock.clone(),
        );
        let live = LiveConnections::new(clock.clone());
        let (shutdown, rx) = watch::channel(false);
        let mut tasks = Vec::new();

        let api = ApiIdentity {
            api_id: "local".into(),
            stage: cfg.stage.clone(),
            account_id: cfg.account_id.clone(),
            region: cfg.region.clone(),
            domain_name: endpoints.ws_addr.to_string(),
        };
        // Who may reach each listener (crate::host_check): its own hosts; pages of the HTTP
        // listener's origin (the dashboard) on both, and on the WebSocket listener its own too;
        // JSON POSTs only on the HTTP listener (the Management API's callers are the functions).
        let http_hosts = host_check::allowed_hosts(endpoints.http_addr, &cfg.allowed_hosts);
        let ws_hosts = host_check::allowed_hosts(endpoints.ws_addr, &cfg.allowed_hosts);
        let http_guard = Guard {
            hosts: http_hosts.clone(),
            origins: host_check::origins_of(&http_hosts),
            json_posts: true,
        };
        let ws_guard = Guard {
            origins: host_check::origins_of(&[http_hosts, ws_hosts.clone()].concat()),
            hosts: ws_hosts,
            json_posts: false,
        };
        let ws_app = websocket::router(api, functions.clone(), live.clone(), clock.clone());
        tasks.push(serve(ws_listener, ws_app, ws_guard, rx.clone()));

        let http_app = http_api::router(
            functions.clone(),
            clock.clone(),
            cfg.rules.clone(),
            &cfg.account_id,
            &cfg.region,
            &endpoints.http_addr.to_string(),
        )
        .merge(dashboard::router(dashboard::Dashboard {
            deps: cfg.dashboard.clone(),
            log: decisions.clone(),
            live: live.clone(),
            clock: clock.clone(),
            assets: cfg.dashboard_assets.clone(),
        }));
        tasks.push(serve(http_listener, http_app, http_guard, rx.clone()));

        if let Some(table) = &cfg.session_table {
            let bridge = StreamBridge::new(
                local_streams_client(&cfg.dynamodb_endpoint),
                table,
                cfg.stream_start,
            )
            .await?
            .with_filters(cfg.sweeper_filters.clone());
            let f = functions.clone();
            let poll = cfg.stream_poll;
            tasks.push(tokio::spawn(async move {
                bridge
                    .run(poll, 3, rx, move |event| {
                        let f = f.clone();
                        async move { sweep(f.as_ref(), event).await }
                    })
                    .await
            }));
        }
        Ok(Stack {
            endpoints,
            live,
            decisions,
            shutdown,
            tasks,
        })
    }

    /// Stops serving (open sockets are closed, each reaching `$disconnect`) and waits for every part.
    pub async fn shutdown(self) {
        for id in self.live.ids() {
            crate::management::Connections::close(self.live.as_ref(), &id);
        }
        // Give the sockets a moment to deliver their close frames and `$disconnect`s.
        for _ in 0..50 {
            if self.live.is_empty() {
                break;
            }
            tokio::time::sleep(Duration::from_millis(20)).await;
        }
        let _ = self.shutdown.send(true);
        for t in self.tasks {
            let _ = t.await;
        }
    }
}

/// Serves `app` on `listener`, answering only what `guard` lets through ([`crate::host_check`]).
fn serve(
    listener: TcpListener,
    app: axum::Router,
    guard: Guard,
    mut rx: watch::Receiver<bool>,
) -> JoinHandle<()> {
    let app = app.layer(axum::middleware::from_fn_with_state(
        Arc::new(guard),
        host_check::check,
    ));
    tokio::spawn(async move {
        let service = app.into_make_service_with_connect_info::<SocketAddr>();
        let stop = async move {
            let _ = rx.wait_for(|v| *v).await;
        };
        if let Err(e) = axum::serve(listener, service)
            .with_graceful_shutdown(stop)
            .await
        {
            tracing::error!(error = %e, "server stopped");
        }
    })
}

/// Invokes `ttl-sweeper` and returns the item identifiers it reported as failed.
async fn sweep(
    functions: &dyn Invoke,
    event: aws_lambda_events::event::dynamodb::Event,
) -> Vec<String> {
    let json = match serde_json::to_value(&event) {
        Ok(v) => v,
        Err(e) => {
            tracing::error!(error = %e, "cannot serialise a stream batch");
            return Vec::new();
        }
    };
    let all: Vec<String> = event
        .records
        .iter()
        .filter_map(|r| r.change.sequence_number.clone())
        .collect();
    match functions.invoke("ttl-sweeper", json).await {
        Ok(resp) => resp["batchItemFailures"]
            .as_array()
            .map(|a| {
                a.iter()
                    .filter_map(|f| f["itemIdentifier"].as_str().map(str::to_string))
                    .collect()
            })
            .unwrap_or_default(),
        // A failed invocation retries the whole batch, as an event source mapping does.
        Err(e) => {
            tracing::error!(error = %e, "ttl-sweeper failed");
            all.into_iter().take(1).collect()
        }
    }
}
