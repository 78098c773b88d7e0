//! The WebSocket admission path at handler level: one decision is what API Gateway does for one
//! client connection — the `$connect` authorizer (`authorizer::handle`), then, when it allows,
//! `$connect` (`connect::handle`) with the authorizer's context, then, when admitted,
//! `$disconnect` (`disconnect::handle`) for the same connection. Each handler gets the event API
//! Gateway would send, made from the function's sample in `events/` (compiled in) with this
//! decision's tenant, session and connection id; the handlers' per-process state is built as each
//! `main.rs` builds it. There is no Lambda runtime or network hop between the three.
//!
//! Setup: one tenant per run (id = the run's key), 32 live sessions (worker `w` uses session
//! `s{w % 32}`), a fresh connection id per decision. Throughput runs give the tenant limits above
//! the budget (`tenantPerMinute` = `sessionPerMinute` = `tenantConnections` = `params.limit`,
//! `connectionsPerSession` 1,000); the accuracy run sets `tenantPerMinute` = `params.limit` (the
//! fixed one-minute window) and starts inside one minute, so "allowed" is that limit.
//!
//! Admitted = `$connect` answered 200 (the disconnect must then answer 200 "released"); refused =
//! the authorizer denied or `$connect` answered 429. DynamoDB calls per decision, warm
//! (authorizer 1 `BatchGetItem` with the tenant cached; `$connect` 3 `UpdateItem`: the ticket's
//! use, the tenant, the session; `$disconnect` 3 `UpdateItem`: the session with its release
//! token, then the charged counter and the token's cleanup; decisions 0306, 2206, 3607): **7**;
//! at c > 1 concurrent first connects of a minute can lose their bet on the window and re-bet
//! (each a counted call), and refusals right after a reservation wait for it to settle (each
//! retry a counted call).

use std::sync::Arc;
use std::time::Duration;

use aws_lambda_events::apigw::{
    ApiGatewayCustomAuthorizerRequestTypeRequest, ApiGatewayWebsocketProxyRequest,
};
use futures::future::{try_join_all, BoxFuture};
use serde_json::Value;
use shared::admission::closing::NoSockets;
use shared::admission::sessions::{self, Opened};
use shared::edge::respond;
use shared::ids::{SessionId, TenantId};
use shared::table::TableKind;
use shared::tenant::{Limits, Tenant};
use shared::ticket::{self, KeySet};
use shared::Deps;

use crate::error::BenchError;
use crate::workload::{BenchCtx, Decision, Params, Workload};

const AUTHORIZER_EVENT: &str = include_str!("../../../events/authorizer/connect-request.json");
const CONNECT_EVENT: &str = include_str!("../../../events/connect/connect.json");
const DISCONNECT_EVENT: &str = include_str!("../../../events/disconnect/disconnect.json");

/// Sessions per tenant; worker `w` connects through session `s{w % SESSIONS}`.
const SESSIONS: usize = 32;
/// Session lifetime (s): far longer than a run.
const SESSION_TTL: u64 = 3600;

pub struct WebsocketHandlers {
    deps: Deps,
    authorizer: authorizer::State,
    connect: connect::State,
    disconnect: disconnect::State,
    /// Session `s{i}`'s connect ticket claims: each decision mints its own ticket from them (a
    /// ticket admits one connect, as a browser's does).
    tickets: Vec<ticket::Claims>,
    keys: KeySet,
    tenant: String,
    authorizer_event: Value,
    connect_event: Value,
    disconnect_event: Value,
}

fn parse(name: &str, text: &str) -> Result<Value, BenchError> {
    serde_json::from_str(text).map_err(|e| BenchError::Other(format!("sample event {name}: {e}")))
}

fn typed<T: serde::de::DeserializeOwned>(what: &str, v: Value) -> Result<T, BenchError> {
    serde_json::from_value(v).map_err(|e| BenchError::Other(format!("{what} event: {e}")))
}

pub async fn build(ctx: &BenchCtx, p: &Params) -> Result<Arc<dyn Workload>, BenchError> {
    super::ensure_tables(ctx, &TableKind::WEBSOCKET).await?;
    let deps = super::deps(ctx);
    let limits = if p.accuracy {
        Limits::example(p.limit, 1_000_000, 1_000, 1_000_000, SESSION_TTL, 600)
    } else {
        Limits::example(p.limit, p.limit, 1_000, p.limit, SESSION_TTL, 600)
    };
    let tenant_id =
        TenantId::parse(&p.key).map_err(|e| BenchError::Other(format!("tenant id: {e}")))?;
    shared::tenant::store::put(
        &deps,
        &Tenant {
            tenant_id: tenant_id.clone(),
            limits,
        },
    )
    .await?;
    let ttl = deps.clock.now().as_secs() + SESSION_TTL as i64;
    // Connect tickets as clients have them: the claims of one per session (for the session's
    // nonce, valid for the whole run), each decision's ticket minted from them with its own id,
    // with a key set made for this run.
    let keys = KeySet::generate("bench").map_err(|e| BenchError::Other(e.to_string()))?;
    let tickets = try_join_all((0..SESSIONS).map(|i| {
        let (deps, tenant_id) = (&deps, &tenant_id);
        async move {
            let sid = SessionId::parse(&format!("s{i}"))
                .map_err(|e| BenchError::Other(format!("session id: {e}")))?;
            let cap = shared::tenant::MAX_SESSIONS_CEILING;
            let none = NoSockets::default();
            let session =
                match sessions::open(deps, tenant_id, &sid, ttl, cap, false, &none).await? {
                    Opened::Live(s) | Opened::Replaced { session: s, .. } => s,
                    Opened::Closing { pending } => {
                        return Err(BenchError::Other(format!(
                            "session {sid} expired holding {} open connections",
                            pending.len()
                        )))
                    }
                    Opened::Full { cap, .. } => {
                        return Err(BenchError::Other(format!(
                            "{cap} sessions: the tenant is full"
                        )))
                    }
                    Opened::NotYours => {
                        return Err(BenchError::Other("a backend reaches every session".into()))
                    }
                };
            let claims = ticket::Claims {
                tenant: tenant_id.clone(),
                session: sid,
                nonce: session.nonce.unwrap_or_default(),
                expires_at: ttl,
                subject: None,
                id: String::new(),
                connects: ticket::DEFAULT_CONNECTS,
            };
            Ok::<_, BenchError>(claims)
        }
    }))
    .await?;
    let mut deps = deps;
    deps.vars = deps
        .vars
        .with_overrides([(ticket::KEYS_VAR, keys.to_json())]);
    if p.accuracy {
        // The per-minute limits are fixed one-minute windows: start the test early in a minute, so
        // it does not straddle a boundary (where a fresh window would legitimately admit more).
        let into = deps.clock.now().as_secs().rem_euclid(60);
        if into >= 40 {
            tokio::time::sleep(Duration::from_millis((60 - into as u64) * 1000 + 100)).await;
        }
    }
    // Each handler's state as its `main.rs` builds it.
    Ok(Arc::new(WebsocketHandlers {
        authorizer: authorizer::init(&deps).await?,
        connect: connect::init(&deps).await?,
        disconnect: disconnect::init(&deps).await?,
        deps,
        tickets,
        keys,
        tenant: p.key.clone(),
        authorizer_event: parse("authorizer/connect-request.json", AUTHORIZER_EVENT)?,
        connect_event: parse("connect/connect.json", CONNECT_EVENT)?,
        disconnect_event: parse("disconnect/disconnect.json", DISCONNECT_EVENT)?,
    }))
}

impl WebsocketHandlers {
    /// The sample authorizer event for `session` (`s{i}`), its ticket in the subprotocol list as
    /// a browser sends it.
    fn authorizer_event(
        &self,
        session: &str,
        i: usize,
    ) -> Result<ApiGatewayCustomAuthorizerRequestTypeRequest, BenchError> {
        let mut v = self.authorizer_event.clone();
        let mut claims = self.tickets[i].clone();
        claims.id = ticket::new_id().map_err(|e| BenchError::Other(e.to_string()))?;
        let protocols = format!(
            "{}, {}",
            ticket::SUBPROTOCOL,
            ticket::mint(&self.keys, &claims)
        );
        v["headers"]["Sec-WebSocket-Protocol"] = Value::String(protocols.clone());
        v["multiValueHeaders"]["Sec-WebSocket-Protocol"] = serde_json::json!([protocols]);
        v["queryStringParameters"] =
            serde_json::json!({ "tenantId": self.tenant, "sessionId": session });
        v["multiValueQueryStringParameters"] =
            serde_json::json!({ "tenantId": [self.tenant], "sessionId": [session] });
        typed("authorizer", v)
    }

    /// A `$connect` / `$disconnect` event for `cid` carrying the authorizer's context, as API
    /// Gateway passes it on (plus `principalId`).
    fn route_event(
        &self,
        template: &Value,
        context: &Value,
        principal: Option<&str>,
        session: &str,
        cid: &str,
    ) -> Result<ApiGatewayWebsocketProxyRequest, BenchError> {
        let mut v = template.clone();
        let mut auth = context.clone();
        if let (Some(m), Some(p)) = (auth.as_object_mut(), principal) {
            m.insert("principalId".into(), Value::String(p.to_string()));
        }
        v["requestContext"]["authorizer"] = auth;
        v["requestContext"]["connectionId"] = Value::String(cid.to_string());
        if v.get("queryStringParameters").is_some() {
            v["queryStringParameters"] =
                serde_json::json!({ "tenantId": self.tenant, "sessionId": session });
            v["multiValueQueryStringParameters"] =
                serde_json::json!({ "tenantId": [self.tenant], "sessionId": [session] });
        }
        typed("route", v)
    }

    async fn once(&self, worker: usize, seq: u64) -> Result<Decision, BenchError> {
        let i = worker % SESSIONS;
        let session = format!("s{i}");
        let cid = format!("bench{seq}=");
        let auth = authorizer::handle(
            &self.deps,
            &self.authorizer,
            self.authorizer_event(&session, i)?,
        )
        .await?;
        if let authorizer::Decision::Deny(reason) = authorizer::decision(&auth) {
            if reason.starts_with("over ") {
                return Ok(Decision::refused(None));
            }
            return Err(BenchError::Other(format!("authorizer denied: {reason}")));
        }
        let principal = auth.principal_id.as_deref();
        let event = |template| self.route_event(template, &auth.context, principal, &session, &cid);
        let r = connect::handle(&self.deps, &self.connect, event(&self.connect_event)?).await?;
        match r.status_code {
            200 => {}
            429 => return Ok(Decision::refused(None)),
            s => {
                return Err(BenchError::Other(format!(
                    "$connect answered {s}: {}",
                    respond::body_text(&r.body)
                )))
            }
        }
        let r = disconnect::handle(&self.deps, &self.disconnect, event(&self.disconnect_event)?)
            .await?;
        let body = respond::body_text(&r.body);
        if r.status_code != 200 || body.contains("already released") {
            return Err(BenchError::Other(format!(
                "$disconnect answered {}: {body}",
                r.status_code
            )));
        }
        Ok(Decision::admitted(None))
    }
}

impl Workload for WebsocketHandlers {
    fn decide(&self, worker: usize, seq: u64) -> BoxFuture<'_, Result<Decision, BenchError>> {
        Box::pin(self.once(worker, seq))
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn the_compiled_in_samples_have_the_handlers_event_shapes() {
        let auth = parse("authorizer", AUTHORIZER_EVENT).unwrap();
        typed::<ApiGatewayCustomAuthorizerRequestTypeRequest>("authorizer", auth).unwrap();
        for (name, text) in [("connect", CONNECT_EVENT), ("disconnect", DISCONNECT_EVENT)] {
            let v = parse(name, text).unwrap();
            assert!(v["requestContext"].get("authorizer").is_some(), "{name}");
            typed::<ApiGatewayWebsocketProxyRequest>(name, v).unwrap();
        }
    }
}
