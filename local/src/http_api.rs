//! A local API Gateway HTTP API (payload format 2.0) for the session routes, plus `POST /events`, a
//! local EventBridge `PutEvents` that delivers matching events to their rule's target function.
//!
//! Bodies are limited as in AWS, and every refusal is JSON: a session route passes a body of up to
//! Lambda's 6 MB invoke payload ([`MAX_INVOKE_BODY`]) on to the function (which refuses more than
//! its own 16 KiB), `POST /events` takes up to `PutEvents`' 256 KiB ([`MAX_EVENTS_BODY`]); beyond,
//! 413 `{"message":"Request Entity Too Large"}`, as API Gateway answers.

use std::collections::HashMap;
use std::net::SocketAddr;
use std::sync::Arc;

use axum::body::{Body, Bytes};
use axum::extract::{ConnectInfo, DefaultBodyLimit, State};
use axum::http::{HeaderMap, Method, StatusCode, Uri};
use axum::response::{IntoResponse, Response};
use axum::routing::{any, post};
use axum::{Json, Router};
use serde_json::{json, Map, Value};
use shared::clock::{SharedClock, Timestamp};

use crate::eventbridge::{event_from_entry, Pattern};
use crate::lambda::Invoke;

/// The largest body a session route passes on: Lambda's synchronous invoke payload (6 MB).
pub const MAX_INVOKE_BODY: usize = 6 * 1024 * 1024;
/// The largest `PutEvents` request EventBridge takes (256 KiB).
pub const MAX_EVENTS_BODY: usize = 256 * 1024;
/// How much of a refused body is still read, so a client that is still sending sees the 413
/// rather than a reset connection.
const DRAINED: usize = 64 * 1024 * 1024;

/// A body over its route's limit.
#[derive(Debug, thiserror::Error)]
pub enum BodyError {
    #[error("the body is over {limit} bytes")]
    TooLarge { limit: usize },
    #[error("the body could not be read: {0}")]
    Read(String),
}

impl IntoResponse for BodyError {
    fn into_response(self) -> Response {
        match self {
            BodyError::TooLarge { .. } => (
                StatusCode::PAYLOAD_TOO_LARGE,
                Json(json!({"message": "Request Entity Too Large"})),
            )
                .into_response(),
            BodyError::Read(_) => (
                StatusCode::BAD_REQUEST,
                Json(json!({"message": "Bad Request"})),
            )
                .into_response(),
        }
    }
}

/// Reads a body of at most `limit` bytes; a longer one is read on (up to [`DRAINED`]) and refused.
pub(crate) async fn read_body(body: Body, limit: usize) -> Result<Bytes, BodyError> {
    use futures::StreamExt;
    let mut stream = body.into_data_stream();
    let mut kept = Vec::new();
    let mut seen = 0usize;
    while let Some(chunk) = stream.next().await {
        let chunk = chunk.map_err(|e| BodyError::Read(e.to_string()))?;
        seen = seen.saturating_add(chunk.len());
        if seen <= limit {
            kept.extend_from_slice(&chunk);
        } else if seen > DRAINED {
            break;
        }
    }
    if seen > limit {
        return Err(BodyError::TooLarge { limit });
    }
    Ok(Bytes::from(kept))
}

/// An EventBridge rule: events matching `pattern` go to the function `target`.
#[derive(Debug, Clone)]
pub struct Rule {
    pub name: String,
    pub pattern: Pattern,
    pub target: String,
}

#[derive(Clone)]
struct HttpState {
    functions: Arc<dyn Invoke>,
    clock: SharedClock,
    rules: Arc<Vec<Rule>>,
    account_id: String,
    region: String,
    domain_name: String,
}

/// The HTTP API's router.
pub fn router(
    functions: Arc<dyn Invoke>,
    clock: SharedClock,
    rules: Vec<Rule>,
    account_id: &str,
    region: &str,
    domain_name: &str,
) -> Router {
    // The decide API's `/v1/*` routes (crate::decide_api).
    let decide =
        crate::decide_api::router(functions.clone(), clock.clone(), account_id, domain_name);
    let state = HttpState {
        functions,
        clock,
        rules: Arc::new(rules),
        account_id: account_id.to_string(),
        region: region.to_string(),
        domain_name: domain_name.to_string(),
    };
    Router::new()
        .route("/session", any(session))
        .route("/session/ticket", any(session))
        .route("/events", post(put_events))
        .fallback(|| async { not_found() })
        .layer(DefaultBodyLimit::disable())
        .with_state(state)
        .merge(decide)
}

fn not_found() -> Response {
    (StatusCode::NOT_FOUND, Json(json!({"message": "Not Found"}))).into_response()
}

pub(crate) fn query_map(raw: &str) -> Map<String, Value> {
    let mut m = Map::new();
    for pair in raw.split('&').filter(|p| !p.is_empty()) {
        let (k, v) = pair.split_once('=').unwrap_or((pair, ""));
        let (k, v) = (decode(k), decode(v));
        // HTTP API joins repeated parameters with commas.
        match m.get_mut(&k) {
            Some(Value::String(prev)) => {
                prev.push(',');
                prev.push_str(&v);
            }
            _ => {
                m.insert(k, json!(v));
            }
        }
    }
    m
}

/// Percent-decoding (`+` is a space in query strings); invalid escapes are kept as written.
fn decode(s: &str) -> String {
    let bytes = s.as_bytes();
    let mut out = Vec::with_capacity(bytes.len());
    let mut i = 0;
    while i < bytes.len() {
        match bytes[i] {
            b'+' => out.push(b' '),
            b'%' if i + 2 < bytes.len() => {
                // Two hex digits exactly: `from_str_radix` alone would also take a sign ("%+0").
                let hex = std::str::from_utf8(&bytes[i + 1..i + 3])
                    .ok()
                    .filter(|h| h.bytes().all(|b| b.is_ascii_hexdigit()));
                match hex.and_then(|h| u8::from_str_radix(h, 16).ok()) {
                    Some(b) => {
                        out.push(b);
                        i += 2;
                    }
                    None => out.push(b'%'),
                }
            }
            b => out.push(b),
        }
        i += 1;
    }
    String::from_utf8_lossy(&out).into_owned()
}

async fn session(
    State(st): State<HttpState>,
    ConnectInfo(peer): ConnectInfo<SocketAddr>,
    method: Method,
    uri: Uri,
    headers: HeaderMap,
    body: Body,
) -> Response {
    let body = match read_body(body, MAX_INVOKE_BODY).await {
        Ok(b) => b,
        Err(e) => return e.into_response(),
    };
    let received = Received {
        peer,
        method: &method,
        uri: &uri,
        headers: &headers,
        body: &body,
    };
    let route_key = format!("{method} {}", uri.path());
    let (account, domain) = (&st.account_id, &st.domain_name);
    let mut event = v2_event(&received, &route_key, account, domain, st.clock.now());
    let authorization = event["headers"]["authorization"].as_str();
    if let Some(jwt) = authorization.and_then(jwt_context) {
        event["requestContext"]["authorizer"] = jwt;
    }
    match st.functions.invoke("session-api", event).await {
        Ok(resp) => v2_response(&resp),
        Err(e) => {
            tracing::error!(error = %e, "session-api failed");
            (
                StatusCode::INTERNAL_SERVER_ERROR,
                Json(json!({"message": "Internal Server Error"})),
            )
                .into_response()
        }
    }
}

/// A request as API Gateway received it, to become a payload 2.0 event ([`v2_event`]).
pub(crate) struct Received<'a> {
    pub peer: SocketAddr,
    pub method: &'a Method,
    pub uri: &'a Uri,
    pub headers: &'a HeaderMap,
    pub body: &'a [u8],
}

/// The HTTP API payload 2.0 event API Gateway sends a function for `req` on `route_key`: repeated
/// headers joined by commas, the query string also parsed, a body that is not UTF-8 in base64 (and
/// no `body` when empty). The caller adds `requestContext.authorizer`.
pub(crate) fn v2_event(
    req: &Received<'_>,
    route_key: &str,
    account_id: &str,
    domain_name: &str,
    now: Timestamp,
) -> Value {
    let mut hdrs: HashMap<String, String> = HashMap::new();
    for (k, v) in req.headers {
        if let Ok(v) = v.to_str() {
            hdrs.entry(k.as_str().to_string())
                .and_modify(|p| {
                    p.push(',');
                    p.push_str(v);
                })
                .or_insert_with(|| v.to_string());
        }
    }
    let path = req.uri.path();
    let raw_query = req.uri.query().unwrap_or("");
    let mut event = json!({
        "version": "2.0",
        "routeKey": route_key,
        "rawPath": path,
        "rawQueryString": raw_query,
        "headers": hdrs,
        "requestContext": {
            "accountId": account_id,
            "apiId": "local",
            "domainName": domain_name,
            "domainPrefix": domain_name.split('.').next().unwrap_or(""),
            "http": {
                "method": req.method.as_str(),
                "path": path,
                "protocol": "HTTP/1.1",
                "sourceIp": req.peer.ip().to_string(),
                "userAgent": hdrs.get("user-agent").cloned().unwrap_or_default(),
            },
            "requestId": uuid::Uuid::new_v4().to_string(),
            "routeKey": route_key,
            "stage": "$default",
            "time": now.to_rfc3339(),
            "timeEpoch": now.as_millis(),
        },
        "isBase64Encoded": std::str::from_utf8(req.body).is_err(),
    });
    if !raw_query.is_empty() {
        event["queryStringParameters"] = Value::Object(query_map(raw_query));
    }
    if !req.body.is_empty() {
        event["body"] = match std::str::from_utf8(req.body) {
            Ok(s) => json!(s),
            Err(_) => json!(aws_smithy_types::base64::encode(req.body)),
        };
    }
    event
}

/// `requestContext.authorizer` for an `Authorization: Bearer <JWT>` header, shaped as API Gateway's
/// JWT authorizer passes it: `{"jwt": {"claims": {..}, "scopes": [..]}}`, every claim a string
/// (non-string claims as their JSON text), scopes from the `scope` claim. **The token is decoded, not
/// verified**: the local stack has no issuer to check against, so it trusts the token as the local
/// caller's word (use it to try `TURNSTILE_SESSION_API_AUTH=jwt`; see docs/session-api-auth.md).
pub(crate) fn jwt_context(authorization: &str) -> Option<Value> {
    let token = authorization
        .strip_prefix("Bearer ")
        .or_else(|| authorization.strip_prefix("bearer "))?
        .trim();
    let payload = token.split('.').nth(1)?;
    // base64url without padding -> standard base64 with padding.
    let mut b64: String = payload
        .chars()
        .map(|c| match c {
            '-' => '+',
            '_' => '/',
            c => c,
        })
        .collect();
    while !b64.len().is_multiple_of(4) {
        b64.push('=');
    }
    let bytes = aws_smithy_types::base64::decode(&b64).ok()?;
    let Value::Object(raw) = serde_json::from_slice::<Value>(&bytes).ok()? else {
        return None;
    };
    let scopes: Option<Vec<String>> = raw
        .get("scope")
        .and_then(Value::as_str)
        .map(|s| s.split_whitespace().map(str::to_string).collect());
    let claims: Map<String, Value> = raw
        .into_iter()
        .map(|(k, v)| {
            let v = match v {
                Value::String(s) => s,
                other => other.to_string(),
            };
            (k, Value::String(v))
        })
        .collect();
    Some(json!({"jwt": {"claims": claims, "scopes": scopes}}))
}

/// Payload 2.0 responses: an object with `statusCode` is used as is; anything else is a 200 JSON body.
pub(crate) fn v2_response(resp: &Value) -> Response {
    if resp.get("statusCode").is_none() {
        return (StatusCode::OK, Json(resp.clone())).into_response();
    }
    let status = resp["statusCode"]
        .as_u64()
        .and_then(|s| StatusCode::from_u16(s as u16).ok())
        .unwrap_or(StatusCode::INTERNAL_SERVER_ERROR);
    let body = match &resp["body"] {
        Value::String(s) if resp["isBase64Encoded"].as_bool() == Some(true) => {
            aws_smithy_types::base64::decode(s).unwrap_or_default()
        }
        Value::String(s) => s.clone().into_bytes(),
        Value::Null => Vec::new(),
        other => other.to_string().into_bytes(),
    };
    let mut out = (status, body).into_response();
    if let Some(h) = resp["headers"].as_object() {
        for (k, v) in h {
            let value = match v {
                Value::String(s) => s.clone(),
                other => other.to_string(),
            };
            if let (Ok(name), Ok(value)) = (
                axum::http::HeaderName::from_bytes(k.as_bytes()),
                axum::http::HeaderValue::from_str(&value),
            ) {
                out.headers_mut().insert(name, value);
            }
        }
    }
    out
}

/// `POST /events` with a `PutEvents` body (`{"Entries": [...]}`): each entry becomes an event; every
/// rule whose pattern matches invokes its target. Answers in `PutEvents`' shape, with per-entry
/// errors for malformed entries (as EventBridge does) and the targets each event reached.
async fn put_events(State(st): State<HttpState>, body: Body) -> Response {
    let body = match read_body(body, MAX_EVENTS_BODY).await {
        Ok(b) => b,
        Err(e) => return e.into_response(),
    };
    let parsed: Value = match serde_json::from_slice(&body) {
        Ok(v) => v,
        Err(e) => {
            return (
                StatusCode::BAD_REQUEST,
                Json(json!({"__type": "ValidationException", "message": format!("body is not JSON: {e}")})),
            )
                .into_response()
        }
    };
    let Some(entries) = parsed.get("Entries").and_then(Value::as_array) else {
        return (
            StatusCode::BAD_REQUEST,
            Json(
                json!({"__type": "ValidationException", "message": "Entries (a list) is required"}),
            ),
        )
            .into_response();
    };
    let now = st.clock.now();
    let mut results = Vec::new();
    let mut failed = 0;
    for (i, entry) in entries.iter().enumerate() {
        match event_from_entry(entry, i, now, &st.account_id, &st.region) {
            Err(e) => {
                failed += 1;
                results
                    .push(json!({"ErrorCode": "InvalidArgument", "ErrorMessage": e.to_string()}));
            }
            Ok(event) => {
                let mut delivered = Vec::new();
                for rule in st.rules.iter().filter(|r| r.pattern.matches(&event)) {
                    match st.functions.invoke(&rule.target, event.clone()).await {
                        Ok(_) => delivered.push(json!({"Rule": rule.name, "Target": rule.target})),
                        Err(e) => {
                            tracing::error!(rule = %rule.name, error = %e, "target failed");
                            delivered.push(json!({"Rule": rule.name, "Target": rule.target, "Error": e.to_string()}));
                        }
                    }
                }
                results.push(json!({"EventId": event["id"], "DeliveredTo": delivered}));
            }
        }
    }
    Json(json!({"FailedEntryCount": failed, "Entries": results})).into_response()
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_bearer_token_becomes_the_jwt_authorizer_context() {
        // {"alg":"none"} . {"sub":"u1","custom:tenantId":"acme","exp":1700000000,"scope":"a b"}
        let enc = |v: &Value| {
            aws_smithy_types::base64::encode(v.to_string())
                .trim_end_matches('=')
                .replace('+', "-")
                .replace('/', "_")
        };
        let token = format!(
            "{}.{}.sig",
            enc(&json!({"alg": "none"})),
            enc(
                &json!({"sub": "u1", "custom:tenantId": "acme", "exp": 1_700_000_000, "scope": "a b"})
            )
        );
        let ctx = jwt_context(&format!("Bearer {token}")).unwrap();
        assert_eq!(ctx["jwt"]["claims"]["custom:tenantId"], "acme");
        assert_eq!(ctx["jwt"]["claims"]["exp"], "1700000000");
        assert_eq!(ctx["jwt"]["scopes"], json!(["a", "b"]));
        // It deserialises as the typed event's authorizer.
        let typed: aws_lambda_events::apigw::ApiGatewayRequestAuthorizer =
            serde_json::from_value(ctx).unwrap();
        assert_eq!(typed.jwt.unwrap().claims["sub"], "u1");
        assert!(jwt_context("Basic abc").is_none());
        assert!(jwt_context("Bearer not-a-jwt").is_none());
    }

    #[test]
    fn query_strings_decode_like_http_api() {
        let m = query_map("tenantId=acme&sessionId=a%20b&x=1&x=2&flag&plus=a+b&bad=%zz");
        assert_eq!(m["tenantId"], "acme");
        assert_eq!(m["sessionId"], "a b");
        assert_eq!(m["x"], "1,2");
        assert_eq!(m["flag"], "");
        assert_eq!(m["plus"], "a b");
        assert_eq!(m["bad"], "%zz");
    }
}

/// Regression cases found by `fuzz_query_strings`.
#[cfg(test)]
mod fuzz_regressions {
    use super::*;

    /// `%+0` decoded to a NUL byte (`u8::from_str_radix("+0", 16)` is `Ok(0)`); API Gateway keeps
    /// an escape that is not two hex digits as written (and `+` is still a space).
    #[test]
    fn a_signed_escape_is_not_decoded() {
        assert_eq!(decode("A%+0"), "A% 0");
        assert_eq!(decode("%-1x"), "%-1x");
        assert_eq!(query_map("tenantId=a%+0b")["tenantId"], "a% 0b");
        assert_eq!(decode("%41%2b"), "A+");
    }
}

/// Property tests (docs/testing.md): query strings come from any HTTP client.
#[cfg(test)]
mod fuzz_tests {
    use super::*;
    use proptest::prelude::*;

    /// The reference: `+` is a space, then RFC 3986 percent-decoding.
    fn reference(s: &str) -> String {
        percent_encoding::percent_decode_str(&s.replace('+', " "))
            .decode_utf8_lossy()
            .into_owned()
    }

    proptest! {
        #![proptest_config(shared::fuzz::config(1))]

        /// `fuzz_query_strings`: any raw query decodes like the reference percent-decoder, and the
        /// parameter map never panics (repeated keys joined with commas).
        #[test]
        fn fuzz_query_strings(
            raw in prop_oneof![shared::fuzz::text(), "([a-zA-Z]{1,3}=?([a-z+]|%[0-9a-fA-F+ -]{0,2}|%){0,4}&?){0,5}"],
        ) {
            prop_assert_eq!(decode(&raw), reference(&raw), "{:?}", raw);
            let m = query_map(&raw);
            prop_assert!(m.values().all(Value::is_string));
        }
    }
}
