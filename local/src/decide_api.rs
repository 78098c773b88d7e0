//! The decide API's front door on the local HTTP API: `ANY /v1/*` as an HTTP API payload 2.0 event
//! to `decide-api`, as API Gateway (or a function URL) sends it. A bearer JWT becomes the JWT
//! authorizer's claims (decoded, not verified: the local caller's word, as for the session
//! routes); a request without a decodable one never reaches the function, answered 401
//! `{"message":"Unauthorized"}` as API Gateway's JWT authorizer answers it, so a client sees the
//! deployed status locally. A body over [`MAX_BODY`] is answered here, 413 problem+json naming
//! `body`, never axum's text/plain.

use std::collections::HashMap;
use std::net::SocketAddr;
use std::sync::Arc;

use axum::body::Body;
use axum::extract::{ConnectInfo, Request, State};
use axum::http::StatusCode;
use axum::response::{IntoResponse, Response};
use axum::routing::any;
use axum::Router;
use serde_json::{json, Value};
use shared::clock::SharedClock;

use crate::http_api::{jwt_context, query_map, v2_response};
use crate::lambda::Invoke;

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
    let now = st.clock.now();
    let mut hdrs: HashMap<String, String> = HashMap::new();
    for (k, v) in &parts.headers {
        if let Ok(v) = v.to_str() {
            hdrs.entry(k.as_str().to_string())
                .and_modify(|p| {
                    p.push(',');
                    p.push_str(v);
                })
                .or_insert_with(|| v.to_string());
        }
    }
    let path = parts.uri.path().to_string();
    let raw_query = parts.uri.query().unwrap_or("").to_string();
    let method = parts.method.as_str().to_string();
    let (body_value, b64) = match std::str::from_utf8(&body) {
        Ok(s) => (json!(s), false),
        Err(_) => (json!(aws_smithy_types::base64::encode(&body)), true),
    };
    let mut event = json!({
        "version": "2.0",
        "routeKey": "ANY /v1/{proxy+}",
        "rawPath": path,
        "rawQueryString": raw_query,
        "headers": hdrs,
        "requestContext": {
            "accountId": st.account_id,
            "apiId": "local",
            "domainName": st.domain_name,
            "domainPrefix": st.domain_name.split('.').next().unwrap_or(""),
            "http": {
                "method": method,
                "path": path,
                "protocol": "HTTP/1.1",
                "sourceIp": peer.ip().to_string(),
                "userAgent": hdrs.get("user-agent").cloned().unwrap_or_default(),
            },
            "requestId": uuid::Uuid::new_v4().to_string(),
            "routeKey": "ANY /v1/{proxy+}",
            "stage": "$default",
            "time": now.to_rfc3339(),
            "timeEpoch": now.as_millis(),
        },
        "isBase64Encoded": b64,
    });
    if !raw_query.is_empty() {
        event["queryStringParameters"] = Value::Object(query_map(&raw_query));
    }
    let Some(jwt) = hdrs.get("authorization").and_then(|h| jwt_context(h)) else {
        return unauthorized();
    };
    event["requestContext"]["authorizer"] = jwt;
    if !body.is_empty() {
        event["body"] = body_value;
    }
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
