//! `$connect`: admits the connection with two ordered conditional writes — the
//! tenant's counter (open connections and its minute), then the session (its connections, its
//! minute, the TTL refresh) — giving the first back if the second refuses
//! (`shared::admission::connect`, decision 0306).
//!
//! Answers: 200 admitted (or already admitted); 429 over a limit, with a problem+json body naming
//! it and `Retry-After` (via `shared::refusal`); 404 session missing or expired; 400 bad ids;
//! 403 unknown tenant, or a connect ticket that already admitted every connect it was minted for.
//! Budget: 2 DynamoDB calls, 2 WCU; 3 and 3 with a connect ticket, whose use is counted first
//! (decision 3607). The tenant comes from the authorizer context; a context without limits costs
//! 1 cached tenant read.

use aws_lambda_events::apigw::{ApiGatewayProxyResponse, ApiGatewayWebsocketProxyRequest};
use shared::admission::connect::{Admission, Hints};
use shared::admission::verdict::{self, Verdict};
use shared::admission::Request;
use shared::edge::{context, respond};
use shared::function::{self, Tenancy, WebsocketCaller};
use shared::tenant::TenantCache;
use shared::ticket::{self, fingerprint, presented};
use shared::Deps;

/// `TURNSTILE_TENANT_CACHE_SECS`: used only when the authorizer context lacks the limits.
pub type Config = function::TenantCacheConfig;

/// Built once per process, by [`init`].
#[derive(Debug)]
pub struct State {
    pub tenants: TenantCache,
    pub tenancy: Tenancy,
    /// What this process last saw of each folded per-minute window (a fixed window's start or a
    /// GCRA TAT), so each write's first bet is usually right.
    pub hints: Hints,
}

/// What `main.rs`, the local stack and the tests run: [`Config`] from `deps.vars`; tenant-scoped
/// credentials when `TENANT_ROLE_ARN` is set.
pub async fn init(deps: &Deps) -> Result<State, shared::Error> {
    Ok(State {
        tenants: TenantCache::new(Config::from_vars(&deps.vars)?.tenant_cache),
        tenancy: Tenancy::from_deps(deps).await?,
        hints: Hints::default(),
    })
}

pub async fn handle(
    deps: &Deps,
    state: &State,
    event: ApiGatewayWebsocketProxyRequest,
) -> Result<ApiGatewayProxyResponse, shared::Error> {
    function::on_websocket(&state.tenancy, deps, &event, |c| connect(state, &event, c)).await
}

async fn connect(
    state: &State,
    event: &ApiGatewayWebsocketProxyRequest,
    caller: WebsocketCaller<'_>,
) -> Result<ApiGatewayProxyResponse, shared::Error> {
    let (t, sid, cid, deps) = caller.parts();
    let Some(limits) = context::websocket_limits(deps, &state.tenants, event, t).await? else {
        return Ok(respond::websocket(&respond::message(
            403,
            format!("tenant {t} does not exist"),
        )));
    };
    let fields = &event.request_context.authorizer.fields;
    let nonce = context::nonce(fields);
    let ticket_use = context::ticket_use(fields);
    let request = Request {
        deps,
        t,
        sid,
        cid,
        limits: &limits,
        nonce: nonce.as_deref(),
        ticket: ticket_use.as_ref(),
    };
    let session = fingerprint(sid.as_str());
    let mut answer = match verdict::connect(request, &state.hints).await {
        Verdict::Decided(Admission::Admitted | Admission::AlreadyAdmitted) => {
            respond::message(200, format!("connected to session #{session}"))
        }
        // A shadow tenant's would-refuse (logged and metered by `verdict`): admitted.
        Verdict::Shadow {
            admitted: Admission::Admitted | Admission::AlreadyAdmitted,
            ..
        } => respond::message(200, format!("connected to session #{session}")),
        Verdict::Decided(Admission::Refused { limit, refusal }) => {
            tracing::info!(tenant = %t, session = %session, limit = limit.name(), "connect refused");
            refusal.to_http()
        }
        Verdict::FailedOpen(_) => respond::message(
            200,
            format!("connected to session #{session} (unaccounted: the limiter is unavailable)"),
        ),
        // A key outside the tenant (the key guard): a logged 500, never a panic.
        Verdict::FailedClosed(e @ shared::Error::CrossTenantKey(_)) => respond::guard_refusal(e)?,
        Verdict::FailedClosed(e) => respond::unavailable(&e),
        // A shadow tenant's session at the hard ceiling (MAX_CONNECTIONS_PER_SESSION): refused
        // even in shadow mode, with the ceiling's answer.
        Verdict::Shadow {
            admitted: Admission::Refused { refusal, .. },
            ..
        } => refusal.to_http(),
        Verdict::Decided(Admission::TicketSpent { connects })
        | Verdict::Shadow {
            admitted: Admission::TicketSpent { connects },
            ..
        } => respond::message(
            403,
            format!(
                "the connect ticket admitted the {connects} connection(s) it was issued for; \
                 get another from POST /session/ticket"
            ),
        ),
        Verdict::Decided(Admission::NoSession) | Verdict::Shadow { .. } => respond::message(
            404,
            format!("session #{session} of tenant {t} does not exist, has expired, or is not the one the ticket was issued for"),
        ),
    };
    // A client that offered the `turnstile` subprotocol must get it back, or the browser drops
    // the socket; the credential it also offered is never echoed.
    if answer.status < 300 && presented::offers_subprotocol(&event.headers) {
        answer
            .headers
            .push(("Sec-WebSocket-Protocol", ticket::SUBPROTOCOL.to_string()));
    }
    Ok(respond::websocket(&answer))
}
