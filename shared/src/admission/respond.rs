//! Shaping answers for API Gateway: WebSocket route responses (`ApiGatewayProxyResponse`) and HTTP
//! API v2 responses, from a status and JSON, or from a [`HttpAnswer`] (the 429s of `shared::refusal`).

use aws_lambda_events::apigw::{ApiGatewayProxyResponse, ApiGatewayV2httpResponse};
use aws_lambda_events::encodings::Body;
use http::header::{HeaderName, HeaderValue};
use http::HeaderMap;
use serde_json::Value;

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

/// The text of a response body (for tests and logs).
pub fn body_text(b: &Option<Body>) -> String {
    match b {
        Some(Body::Text(s)) => s.clone(),
        Some(Body::Binary(v)) => String::from_utf8_lossy(v).into_owned(),
        _ => String::new(),
    }
}
