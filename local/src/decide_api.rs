//! The decide API's front door on the local HTTP API: `ANY /v1/*` as an HTTP API payload 2.0 event
//! to `decide-api`, as API Gateway (or a function URL) sends it. A bearer JWT becomes the JWT
//! authorizer's claims (decoded, not verified: the local caller's word, as for the session
//! routes); a request without a decodable one never reaches the function, answered 401
//! `{"message":"Unauthorized"}` as API Gateway's JWT authorizer answers it, so a client sees the
//! deployed status locally. A body over [`MAX_BODY`] is answered here, 413 problem+json naming
//! `body`, never axum's text/plain.

use std::net::SocketAddr;
use std::sync::Arc;

use axum::body::Body;
use axum::extract::{ConnectInfo, Request, State};
use axum::http::StatusCode;
use axum::response::{IntoResponse, Response};
use axum::routing::any;
use axum::Router;
use serde_json::json;
use shared::clock::SharedClock;

use crate::http_api::{jwt_context, v2_event, v2_response, Received};
use crate::lambda::Invoke;

/// The route every `/v1/*` request reaches the function under.
const ROUTE_KEY: &str = "ANY /v1/{proxy+}";

/// The largest body passed on (the function itself reads at most 256 KiB and answers 413 beyond).
pub const MAX_BODY: usize = 1024 * 1024;

#[derive(Clone)]
struct DecideState {
    functions: Arc<dyn Invoke>,
    clock: SharedClock,
    account_id: String,
    domain_name: String,
}

/// The `/v1/*` routes, with their own state (merged into the HTTP API's router).
pub fn router(
    functions: Arc<dyn Invoke>,
    clock: SharedClock,
    account_id: &str,
    domain_name: &str,
) -> Router {
    Router::new()
        .route("/v1/{*rest}", any(decide))
        .layer(axum::extract::DefaultBodyLimit::disable())
        .with_state(DecideState {
            functions,
            clock,
            account_id: account_id.to_string(),
            domain_name: domain_name.to_string(),
        })
}

fn problem(status: StatusCode, field: &str, detail: &str) -> Response {
    let body = json!({"type": "about:blank", "title": status.canonical_reason().unwrap_or(""),
        "status": status.as_u16(), "detail": detail, "message": detail, "field": field});
    (
        status,
        [("content-type", "application/problem+json")],
        body.to_string(),
    )
        .into_response()
}

/// API Gateway's JWT authorizer's answer to a missing or unreadable token.
fn unauthorized() -> Response {
    (
        StatusCode::UNAUTHORIZED,
        [
            ("content-type", "application/json"),
            ("www-authenticate", "Bearer"),
        ],
        json!({"message": "Unauthorized"}).to_string(),
    )
        .into_response()
}

async fn decide(
    State(st): State<DecideState>,
    ConnectInfo(peer): ConnectInfo<SocketAddr>,
    req: Request<Body>,
) -> Response {
    let (parts, body) = req.into_parts();
    let Ok(body) = axum::body::to_bytes(body, MAX_BODY).await else {
        return problem(
            StatusCode::PAYLOAD_TOO_LARGE,
            "body",
            &format!("the body is over {MAX_BODY} bytes"),
        );
    };
    let received = Received {
        peer,
        method: &parts.method,
        uri: &parts.uri,
        headers: &parts.headers,
        body: &body,
    };
    let (account, domain) = (&st.account_id, &st.domain_name);
    let mut event = v2_event(&received, ROUTE_KEY, account, domain, st.clock.now());
    let authorization = event["headers"]["authorization"].as_str();
    let Some(jwt) = authorization.and_then(jwt_context) else {
        return unauthorized();
    };
    event["requestContext"]["authorizer"] = jwt;
    match st.functions.invoke("decide-api", event).await {
        Ok(resp) => v2_response(&resp),
        Err(e) => {
            tracing::error!(error = %e, "decide-api failed");
            problem(
                StatusCode::INTERNAL_SERVER_ERROR,
                "body",
                "decide-api failed",
            )
        }
    }
}
