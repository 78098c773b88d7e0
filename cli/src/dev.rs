//! `turnstile dev`: the whole suite on this machine — the real handlers behind a local WebSocket API,
//! HTTP API, `@connections` API, stream bridge and EventBridge endpoint, against DynamoDB Local.
//! `make dev` starts DynamoDB Local and runs this; Ctrl-C stops it.

use std::collections::HashMap;
use std::net::SocketAddr;
use std::path::PathBuf;
use std::time::Duration;

use serde::Deserialize;
use shared::catalog;
use shared::ids::TenantId;
use shared::table::TableKind;
use shared::tenant::{Limits, Tenant};
use shared::ticket;
use shared::{Deps, Error, Result};
use turnstile_local::functions::LocalFunctions;
use turnstile_local::stack::StackConfig;
use turnstile_local::stream_bridge::StartAt;

#[derive(Debug, clap::Args)]
pub struct Args {
    /// Address of the WebSocket API (and its @connections Management API).
    #[arg(long, env = "TURNSTILE_DEV_WS_ADDR", default_value = "127.0.0.1:3001")]
    ws_addr: SocketAddr,
    /// Address of the HTTP API (session routes and POST /events).
    #[arg(
        long,
        env = "TURNSTILE_DEV_HTTP_ADDR",
        default_value = "127.0.0.1:3000"
    )]
    http_addr: SocketAddr,
    /// Stage name in events and in the Management API endpoint.
    #[arg(long, env = "TURNSTILE_DEV_STAGE", default_value = "local")]
    stage: String,
    /// Tenants to load at start (a JSON list of tenant rows, as config/demo-tenants.json); empty to load none.
    #[arg(
        long,
        env = "TURNSTILE_DEV_TENANTS",
        default_value = "config/demo-tenants.json"
    )]
    tenants: String,
    /// The SAM template whose EventBridge rules route POST /events.
    #[arg(long, env = "TURNSTILE_DEV_TEMPLATE", default_value = "template.yaml")]
    template: PathBuf,
    /// How often the stream bridge polls the session table's stream, in milliseconds.
    #[arg(long, env = "TURNSTILE_DEV_STREAM_POLL_MS", default_value_t = 500)]
    stream_poll_ms: u64,
    /// `Host` values answered besides the stack's own addresses and `localhost` (comma list,
    /// e.g. `devbox:3000`): every other request is refused (DNS rebinding).
    #[arg(long, env = "TURNSTILE_DEV_ALLOWED_HOSTS", value_delimiter = ',')]
    allowed_hosts: Vec<String>,
    /// The npm packages the dashboard's charting library is served from (default: the checkout's
    /// local/dashboard/node_modules, filled by scripts/dashboard-assets.sh).
    #[arg(long, env = "TURNSTILE_DEV_DASHBOARD_ASSETS")]
    dashboard_assets: Option<PathBuf>,
}

#[derive(Deserialize)]
#[serde(rename_all = "camelCase")]
struct TenantRow {
    tenant_id: String,
    #[serde(flatten)]
    limits: Limits,
}

/// Reads the demo tenants, refusing the whole file on the first bad row.
fn load_tenants(path: &str) -> Result<Vec<Tenant>> {
    let text = std::fs::read_to_string(path).map_err(|e| Error::Other(format!("{path}: {e}")))?;
    let rows: Vec<TenantRow> =
        serde_json::from_str(&text).map_err(|e| Error::Other(format!("{path}: {e}")))?;
    rows.into_iter()
        .map(|r| {
            Ok(Tenant {
                tenant_id: TenantId::parse(&r.tenant_id)?,
                limits: r.limits,
            })
        })
        .collect()
}

/// The functions' environment for local runs, where the caller set nothing else: the token remover
/// gets the example processors; the decide API binds callers by their JWT; the session API trusts its callers (`none`: the local HTTP API
/// authenticates nobody unless `TURNSTILE_SESSION_API_AUTH=jwt`); connect tickets are signed with
/// a key set made for this run only (never printed) and live 5 minutes, long enough to follow the
/// README across terminals.
pub(crate) fn local_vars(deps: &mut Deps) -> Result<()> {
    let has = |v: &str| deps.vars.get(v).is_some();
    let mut set: Vec<(&str, String)> = Vec::new();
    if !has("TOKEN_REMOVER_PROCESSORS") && !has("TOKEN_REMOVER_PROCESSORS_FILE") {
        set.push((
            "TOKEN_REMOVER_PROCESSORS_FILE",
            "functions/token-remover/processors.example.yaml".into(),
        ));
    }
    if !has(session_api::AUTH_VAR) {
        set.push((session_api::AUTH_VAR, "none".into()));
    }
    // The decide API binds every caller: locally by the bearer JWT's tenant claim (decoded, not
    // verified, by the local HTTP API).
    if !has(shared::caller::CallerVars::DECIDE.auth) {
        set.push((shared::caller::CallerVars::DECIDE.auth, "jwt".into()));
    }
    if !has(ticket::KEYS_VAR) && !has(ticket::source::SECRET_VAR) {
        let keys = ticket::KeySet::generate("local").map_err(|e| Error::Other(e.to_string()))?;
        set.push((ticket::KEYS_VAR, keys.to_json()));
    }
    if !has(session_api::TICKET_TTL_VAR) {
        set.push((session_api::TICKET_TTL_VAR, "300".into()));
    }
    deps.vars = deps.vars.with_overrides(set);
    Ok(())
}

pub async fn run(args: Args) -> Result<()> {
    let mut deps = crate::aws::deps().await?;
    local_vars(&mut deps)?;
    let endpoint = deps.vars.get(shared::deps::ENDPOINT_VAR).ok_or_else(|| {
        Error::Other(format!(
            "{} must point at DynamoDB Local (make dev sets it)",
            shared::deps::ENDPOINT_VAR
        ))
    })?;

    let defs: Vec<_> = TableKind::ALL
        .iter()
        .map(|k| catalog::definition(*k, &deps.tables, deps.style))
        .collect();
    catalog::ensure_all(&deps.dynamo, &defs).await?;
    let mut loaded = Vec::new();
    if !args.tenants.is_empty() {
        for t in load_tenants(&args.tenants)? {
            shared::tenant::store::put(&deps, &t).await?;
            loaded.push(t.tenant_id.to_string());
        }
    }

    let template = std::fs::read_to_string(&args.template)
        .map_err(|e| Error::Other(format!("{}: {e}", args.template.display())))?;
    let rules = turnstile_local::template::rules(&template, &HashMap::new())
        .map_err(|e| Error::Other(format!("{}: {e}", args.template.display())))?;

    let sweeper_filters = turnstile_local::template::stream_filters(&template, "ttl-sweeper")
        .map_err(|e| Error::Other(format!("{}: {e}", args.template.display())))?;

    let mut cfg = StackConfig::new(args.ws_addr, args.http_addr, &endpoint);
    cfg.sweeper_filters = sweeper_filters;
    cfg.stage = args.stage.clone();
    cfg.session_table = Some(deps.tables.sessions.clone());
    cfg.stream_poll = Duration::from_millis(args.stream_poll_ms.max(50));
    cfg.stream_start = StartAt::Latest;
    cfg.rules = rules.clone();
    cfg.dashboard = Some(deps.clone());
    cfg.allowed_hosts = args.allowed_hosts.clone();
    if let Some(dir) = &args.dashboard_assets {
        cfg.dashboard_assets = dir.clone();
    }
    if let Some(why) = turnstile_local::dashboard::assets::missing(&cfg.dashboard_assets) {
        tracing::warn!("{why}; the dashboard shows tables without charts");
    }
    let stack = LocalFunctions::start_stack(cfg, deps.clone()).await?;

    let eps = stack.endpoints.clone();
    let ws = eps.ws_url();
    let http = eps.http_url();
    let rule_list: Vec<String> = rules
        .iter()
        .map(|r| format!("{} -> {}", r.name, r.target))
        .collect();
    println!(
        r#"
Turnstile local stack is up (DynamoDB at {endpoint}).

  Dashboard       {http}/   (live: decisions per second, connections against caps, bucket levels)
  WebSocket API   {ws}/  or  {ws}/{stage}   (a connect ticket in the subprotocol list "turnstile, <ticket>"; ?ticket=.. where a tenant has ticketInQuery)
                  a refusal is 403 {{"message":"Forbidden"}}, as API Gateway answers; the reason is in the
                  log line "authorizer denied the connection" (field reason=) and in the dashboard's Last decisions
  @connections    {mgmt}/@connections/{{id}}
  Session API     {http}/session?tenantId=..   (PUT, GET, DELETE; callers trusted: {auth})
                  {http}/session/ticket?tenantId=..&sessionId=..   (POST: a fresh ticket)
  EventBridge     POST {http}/events   (rules: {rules})
  (POSTs must be Content-Type: application/json; pages of other origins are refused)
  Tenants loaded  {tenants}

Try it (`turnstile ws`: this CLI's WebSocket client; lines typed are sent, Ctrl-D closes):
  S=$(curl -s -X PUT "{http}/session?tenantId=acme&connects=2")  # a new session, its id, a ticket for 2 sockets
  SID=$(echo "$S" | python3 -c 'import json,sys; print(json.load(sys.stdin)["sessionId"])')
  TICKET=$(echo "$S" | python3 -c 'import json,sys; print(json.load(sys.stdin)["ticket"])')
  {exe} ws --ticket "$TICKET" {ws}/   # terminal 1: type a line, see it echoed
  {exe} ws --ticket "$TICKET" {ws}/   # terminal 2: sees terminal 1's lines as {{"from","message"}}
  {exe} ws --ticket "$TICKET" {ws}/   # a third socket: refused (403), the ticket admits 2 connects
  T2=$(curl -s -X POST -H 'content-type: application/json' "{http}/session/ticket?tenantId=acme&sessionId=$SID" | python3 -c 'import json,sys; print(json.load(sys.stdin)["ticket"])')
  {exe} ws --ticket "$T2" {ws}/       # a fresh ticket: refused too, acme allows 2 per session
  {exe} ws "{ws}/?tenantId=acme&sessionId=$SID"      # no ticket: refused (403)
  curl -s "{http}/session?tenantId=acme&sessionId=$SID"  # the session and its live connections
  curl -s -X DELETE "{http}/session?tenantId=acme&sessionId=$SID"   # closes both sockets
  # Tickets live {ticket_ttl} s here; POST /session/ticket gives a fresh one. Tenant "brief" has
  # sessionTTL 20: connect to a brief session, stay idle, and its socket is closed by the TTL sweeper.

Ctrl-C stops everything.
"#,
        mgmt = eps.management_url(),
        stage = eps.stage,
        exe = std::env::current_exe()
            .map(|p| p.display().to_string())
            .unwrap_or_else(|_| "turnstile".into()),
        auth = deps.vars.get(session_api::AUTH_VAR).unwrap_or_default(),
        ticket_ttl = deps
            .vars
            .get(session_api::TICKET_TTL_VAR)
            .unwrap_or_default(),
        rules = if rule_list.is_empty() {
            "none".to_string()
        } else {
            rule_list.join(", ")
        },
        tenants = if loaded.is_empty() {
            "none".to_string()
        } else {
            loaded.join(", ")
        },
    );

    tokio::signal::ctrl_c()
        .await
        .map_err(|e| Error::Other(format!("waiting for Ctrl-C: {e}")))?;
    eprintln!("stopping: closing sockets (each reaches $disconnect)...");
    stack.shutdown().await;
    Ok(())
}
