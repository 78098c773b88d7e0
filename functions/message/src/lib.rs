//! `$default`: holds the sender against its tenant as the tenant cache has it
//! now (`shared::admission::message::standing`), counts the message against the session's current
//! `messagesPerMinute`, refreshes the session TTL and reads the recipients in one conditional
//! UpdateItem (`shared::admission::message`), then echoes the message to the sender and forwards
//! it to the session's other connections through the Management API (one post per recipient).
//!
//! - The tenant no longer exists (410), or its `connectAuth` no longer admits the way this socket
//!   was admitted (the authorizer context's `connectAuth`; 403): the sender gets a frame saying so
//!   and is closed. Lowered limits count the message. A change is seen within the tenant cache's
//!   time (`TURNSTILE_TENANT_CACHE_SECS`, default 60 s); the context's limits are used only for
//!   the failure policy when the tenant row cannot be read.
//! - Over the limit: the sender gets an error frame (problem+json from `shared::refusal`, with
//!   `retryAfter` seconds) and the answer is 429. The refused message still refreshed the session
//!   TTL (every inbound message does), in the same single UpdateItem.
//! - The session is gone or expired, or the sender is no longer in it: the sender's connection is
//!   closed (the session is never recreated) and the answer is 410.
//! - A recipient that answers 410 is reported as `gone` but NOT released: a connection still inside
//!   its own `$connect` answers 410 too, and releasing it would leave a live socket counted nowhere
//!   (decision 0306). Its capacity is released by its `$disconnect`, or by the reconciler once it
//!   is gone on two probes a grace apart; until then the stale id holds a session slot.
//! - A sender that is gone when its refusal is posted back is released (out of the session, then
//!   the count down: 2 UpdateItem): it sent a message, so its `$connect` had completed.
//!
//! Frames: the sender receives its message back as sent; every other connection receives
//! `{"from": "<sender connection id>", "message": "<the message>"}` — the inbound message and the
//! echo in one frame. Budget: 1 DynamoDB call with the tenant cached (2 when the tenant row is
//! read: a cold or expired cache entry), 1 post per recipient.

use std::time::Duration;

use aws_lambda_events::apigw::{ApiGatewayProxyResponse, ApiGatewayWebsocketProxyRequest};
use shared::admission::message::{self, MessageAdmission, MinuteHint, Standing};
use shared::admission::release;
use shared::admission::verdict::{self, Verdict};
use shared::config::{ConfigError, Vars};
use shared::edge::{context, respond};
use shared::function::{self, Tenancy, WebsocketCaller};
use shared::gateway::{Delivery, Gateway};
use shared::tenant::TenantCache;
use shared::Deps;

#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Config {
    /// `TURNSTILE_TENANT_CACHE_SECS`: how long the tenant row read for a message is served from
    /// memory, so how long a deleted or changed tenant may still be seen as it was.
    pub tenant_cache: Duration,
    /// `TURNSTILE_MANAGEMENT_ENDPOINT`: overrides the endpoint built from the event's domain/stage.
    pub management_endpoint: Option<String>,
}

impl Config {
    pub fn from_vars(vars: &Vars) -> Result<Config, ConfigError> {
        Ok(Config {
            tenant_cache: TenantCache::ttl_from_vars(vars)?,
            management_endpoint: Gateway::endpoint_from_vars(vars)?,
        })
    }
}

/// Built once per process, by [`init`].
#[derive(Debug)]
pub struct State {
    pub tenants: TenantCache,
    pub gateway: Gateway,
    pub hint: MinuteHint,
    pub tenancy: Tenancy,
}

/// What `main.rs`, the local stack and the tests run: [`Config`] from `deps.vars`, the Management
/// API client, and tenant-scoped credentials when `TENANT_ROLE_ARN` is set.
pub async fn init(deps: &Deps) -> Result<State, shared::Error> {
    let config = Config::from_vars(&deps.vars)?;
    Ok(State {
        tenants: TenantCache::new(config.tenant_cache),
        gateway: shared::gateway::Gateway::from_vars(config.management_endpoint, &deps.vars).await,
        hint: MinuteHint::default(),
        tenancy: Tenancy::from_deps(deps).await?,
    })
}

/// The frame other connections of the session receive.
pub fn forward_frame(from: &str, message: &str) -> String {
    serde_json::json!({ "from": from, "message": message }).to_string()
}

pub async fn handle(
    deps: &Deps,
    state: &State,
    event: ApiGatewayWebsocketProxyRequest,
) -> Result<ApiGatewayProxyResponse, shared::Error> {
    match answer(deps, state, event).await {
        Ok(r) => Ok(r),
        // A key outside the tenant (the key guard): a logged 500, never a panic.
        Err(e) => Ok(respond::websocket(&respond::guard_refusal(e)?)),
    }
}

async fn answer(
    deps: &Deps,
    state: &State,
    event: ApiGatewayWebsocketProxyRequest,
) -> Result<ApiGatewayProxyResponse, shared::Error> {
    function::on_websocket(&state.tenancy, deps, &event, |c| deliver(state, &event, c)).await
}

async fn deliver(
    state: &State,
    event: &ApiGatewayWebsocketProxyRequest,
    caller: WebsocketCaller<'_>,
) -> Result<ApiGatewayProxyResponse, shared::Error> {
    let (t, sid, cid, deps) = caller.parts();
    let rc = &event.request_context;
    let endpoint = state
        .gateway
        .endpoint(rc.domain_name.as_deref(), rc.stage.as_deref())?;
    let fields = &rc.authorizer.fields;
    let admitted = context::connect_auth(fields);
    let verdict = match message::standing(deps, &state.tenants, t, admitted).await {
        Ok(Standing::Current(limits)) => {
            verdict::message(deps, t, sid, cid, &limits, &state.hint).await
        }
        Ok(Standing::TenantGone) => {
            let why = format!("tenant {t} no longer exists; connection closed");
            return end(state, &endpoint, cid, respond::message(410, why)).await;
        }
        Ok(Standing::Revoked { admitted, required }) => {
            let why = format!(
                "tenant {t} now connects with connectAuth={required}; this connection was \
                 admitted with {admitted} and is closed: connect again with a {required} credential"
            );
            return end(state, &endpoint, cid, respond::message(403, why)).await;
        }
        Err(e) => verdict::message_unread(e, context::limits(fields).as_ref(), t),
    };
    let body = event.body.clone().unwrap_or_default();
    let admission = match verdict {
        Verdict::Decided(a) => a,
        // A shadow tenant's would-refuse (logged and metered by `verdict`): delivered.
        Verdict::Shadow { admitted, .. } => admitted,
        // Let through, but the recipients are in the session item DynamoDB did not return.
        Verdict::FailedOpen(_) => {
            return Ok(respond::websocket(&respond::json_answer(
                200,
                &serde_json::json!({ "delivered": 0, "gone": [], "unaccounted": true }),
            )))
        }
        Verdict::FailedClosed(e @ shared::Error::CrossTenantKey(_)) => return Err(e),
        Verdict::FailedClosed(e) => return Ok(respond::websocket(&respond::unavailable(&e))),
    };
    match admission {
        MessageAdmission::Refused { refusal, .. } => {
            let answer = refusal.to_http();
            if state
                .gateway
                .post(&endpoint, cid.as_str(), answer.body.as_bytes())
                .await?
                == Delivery::Gone
            {
                release::from_session(deps, t, sid, std::slice::from_ref(cid)).await?;
            }
            Ok(respond::websocket(&answer))
        }
        MessageAdmission::NoSession => {
            state.gateway.close(&endpoint, cid.as_str()).await?;
            Ok(respond::websocket(&respond::message(
                410,
                format!("session {sid} of tenant {t} no longer exists; connection closed"),
            )))
        }
        MessageAdmission::Admitted { connection_ids } => {
            let frame = forward_frame(cid.as_str(), &body);
            let sends = connection_ids.iter().map(|c| {
                let data = if c == cid.as_str() {
                    body.as_bytes()
                } else {
                    frame.as_bytes()
                };
                let (gateway, endpoint) = (&state.gateway, &endpoint);
                async move { (c, gateway.post(endpoint, c, data).await) }
            });
            let results = shared::gateway::bounded(sends).await;
            let mut gone = Vec::new();
            let mut failed = 0;
            for (c, r) in results {
                match r {
                    Ok(Delivery::Delivered) => {}
                    Ok(Delivery::Gone) => gone.push(c.clone()),
                    Err(e) => {
                        failed += 1;
                        tracing::warn!(connection = %c, error = %e, "forwarding a message failed");
                    }
                }
            }
            if !gone.is_empty() {
                // Not released here: one 410 does not prove the socket is gone for good.
                tracing::info!(tenant = %t, session = %shared::ticket::fingerprint(sid.as_str()), ?gone, "recipients answered 410");
            }
            Ok(respond::websocket(&respond::json_answer(
                200,
                &serde_json::json!({
                    "delivered": connection_ids.len() - gone.len() - failed,
                    "gone": gone,
                }),
            )))
        }
    }
}

/// Tells the sender why (`answer`'s body, as a frame) and closes its socket: 1 post, 1 close. A
/// sender already gone is fine either way; its `$disconnect` releases it.
async fn end(
    state: &State,
    endpoint: &str,
    cid: &shared::ids::ConnectionId,
    answer: shared::refusal::HttpAnswer,
) -> Result<ApiGatewayProxyResponse, shared::Error> {
    state
        .gateway
        .post(endpoint, cid.as_str(), answer.body.as_bytes())
        .await?;
    state.gateway.close(endpoint, cid.as_str()).await?;
    Ok(respond::websocket(&answer))
}
