//! Shaping answers for API Gateway: WebSocket route responses (`ApiGatewayProxyResponse`) and HTTP
//! API v2 responses, from a status and JSON, or from a [`HttpAnswer`] (the 429s of `shared::refusal`).

use aws_lambda_events::apigw::{
    ApiGatewayProxyResponse, ApiGatewayV2httpRequest, ApiGatewayV2httpResponse,
};
use aws_lambda_events::encodings::Body;
use http::header::{HeaderName, HeaderValue};
use http::HeaderMap;
use serde_json::Value;

use crate::error::Error;
use crate::refusal::HttpAnswer;

fn headers(pairs: &[(&str, String)]) -> HeaderMap {
    let mut h = HeaderMap::new();
    for (k, v) in pairs {
        if let (Ok(k), Ok(v)) = (
            HeaderName::from_bytes(k.as_bytes()),
            HeaderValue::from_str(v),
        ) {
            h.append(k, v);
        }
    }
    h
}

/// A JSON answer `{"message": ...}` or any JSON value.
pub fn json_answer(status: u16, body: &Value) -> HttpAnswer {
    HttpAnswer {
        status,
        headers: vec![("Content-Type", "application/json".to_string())],
        body: body.to_string(),
    }
}

pub fn message(status: u16, text: impl Into<String>) -> HttpAnswer {
    json_answer(status, &serde_json::json!({ "message": text.into() }))
}

/// An RFC 9457 `application/problem+json` answer ([`crate::refusal::problem`]).
pub fn problem(status: u16, title: &str, detail: impl Into<String>) -> HttpAnswer {
    crate::refusal::problem(status, title, detail)
}

pub fn forbidden(detail: impl Into<String>) -> HttpAnswer {
    problem(403, "Forbidden", detail)
}

/// The answer to a failure of the key guard (`Error::CrossTenantKey`, always a Turnstile bug): the
/// reason is logged at error level, the caller gets a 500 problem without the key. Any other error
/// is handed back for the caller to propagate (the Lambda runtime logs it; API Gateway answers 5xx).
pub fn guard_refusal(e: Error) -> Result<HttpAnswer, Error> {
    match e {
        Error::CrossTenantKey(k) => {
            tracing::error!(tenant = %k.tenant, key = %k.key, "key guard refused a key: {k}");
            Ok(problem(
                500,
                "Internal Server Error",
                format!(
                    "refused to reach a row outside tenant {}; this is a bug and has been logged",
                    k.tenant
                ),
            ))
        }
        other => Err(other),
    }
}

/// The answer of a path that fails closed (DynamoDB failed or ran out of time): 503 problem+json
/// with `Retry-After: 1`; the cause is logged, not sent.
pub fn unavailable(e: &Error) -> HttpAnswer {
    tracing::error!(error = %e, "failing closed: the limiter's store is unavailable");
    let mut a = problem(
        503,
        "Service Unavailable",
        "the rate limiter cannot decide right now; retry shortly",
    );
    a.headers.push(("Retry-After", "1".to_string()));
    a
}

pub fn websocket(a: &HttpAnswer) -> ApiGatewayProxyResponse {
    let mut r = ApiGatewayProxyResponse::default();
    r.status_code = i64::from(a.status);
    r.headers = headers(&a.headers);
    r.body = Some(Body::Text(a.body.clone()));
    r
}

pub fn http_v2(a: &HttpAnswer) -> ApiGatewayV2httpResponse {
    let mut r = ApiGatewayV2httpResponse::default();
    r.status_code = i64::from(a.status);
    r.headers = headers(&a.headers);
    r.body = Some(Body::Text(a.body.clone()));
    r
}

/// The HTTP API v2 response to a handler's answer: a refusal of the key guard becomes a logged 500
/// ([`guard_refusal`]); any other error is handed back.
pub fn http_v2_guarded(
    answer: Result<HttpAnswer, Error>,
) -> Result<ApiGatewayV2httpResponse, Error> {
    Ok(http_v2(&answer.or_else(guard_refusal)?))
}

/// The path an HTTP API v2 event asks for: `rawPath`, else the request context's.
pub fn http_v2_path(event: &ApiGatewayV2httpRequest) -> String {
    event
        .raw_path
        .clone()
        .or_else(|| event.request_context.http.path.clone())
        .unwrap_or_default()
}

/// The text of a response body (for tests and logs).
pub fn body_text(b: &Option<Body>) -> String {
    match b {
        Some(Body::Text(s)) => s.clone(),
        Some(Body::Binary(v)) => String::from_utf8_lossy(v).into_owned(),
        _ => String::new(),
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::isolation::CrossTenantKey;

    #[test]
    fn a_key_guard_refusal_is_a_500_problem_and_other_errors_pass_through() {
        let e = Error::CrossTenantKey(CrossTenantKey {
            tenant: "ab".into(),
            key: "abc:conn:x".into(),
        });
        let a = guard_refusal(e).unwrap();
        assert_eq!(a.status, 500);
        assert_eq!(a.header("Content-Type"), Some("application/problem+json"));
        let v: Value = serde_json::from_str(&a.body).unwrap();
        assert_eq!(v["status"], 500);
        assert!(!a.body.contains("abc:conn:x"), "the key stays in the log");
        assert!(matches!(
            guard_refusal(Error::contended("x", 8)),
            Err(Error::Contended { .. })
        ));
        let f = forbidden("no");
        assert_eq!(f.status, 403);
        let v: Value = serde_json::from_str(&f.body).unwrap();
        assert_eq!(
            (v["title"].as_str(), v["message"].as_str()),
            (Some("Forbidden"), Some("no"))
        );
    }
}
