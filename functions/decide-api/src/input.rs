//! Reading a request: the JSON body (at most [`MAX_BODY_BYTES`], an object, no unknown member) and
//! its fields, each refusal a 4xx problem+json naming the field (`field`), never a 5xx.

use aws_lambda_events::apigw::ApiGatewayV2httpRequest;
use serde_json::{Map, Value};
use shared::refusal::{problem, HttpAnswer};

/// The largest body read; a larger one is answered 413 (API Gateway itself allows 10 MB). The
/// largest valid request, a batch of 100 spends with 1,024-byte ids, is about 105 KB.
pub const MAX_BODY_BYTES: usize = 256 * 1024;
/// The largest integer a JSON number with a fraction part of zero (`2.0`) carries exactly.
const MAX_EXACT_FLOAT: f64 = 9_007_199_254_740_992.0;
/// The longest string field (a bucket id may be 1,024 bytes; a resource id up to 2,048 would
/// not fit a key with its tenant, so strings stay under that).
pub const MAX_FIELD_BYTES: usize = 1024;

/// A 4xx problem+json naming the offending `field` (a member of the body, a query parameter,
/// `body` or a header).
pub fn bad(status: u16, field: &str, detail: impl Into<String>) -> HttpAnswer {
    let title = match status {
        404 => "Not Found",
        409 => "Conflict",
        410 => "Gone",
        413 => "Content Too Large",
        415 => "Unsupported Media Type",
        _ => "Bad Request",
    };
    let mut a = problem(status, title, detail);
    if let Ok(Value::Object(mut m)) = serde_json::from_str::<Value>(&a.body) {
        m.insert("field".into(), Value::String(field.to_string()));
        a.body = Value::Object(m).to_string();
    }
    a
}

/// The members of a request's JSON body.
#[derive(Debug, Default)]
pub struct Body(Map<String, Value>);

impl Body {
    /// The body of `event`: JSON (a `Content-Type` other than JSON is 415), an object, at most
    /// [`MAX_BODY_BYTES`]; every member one of `allowed`. An empty body is an empty object.
    pub fn of(event: &ApiGatewayV2httpRequest, allowed: &[&str]) -> Result<Body, HttpAnswer> {
        if let Some(ct) = event.headers.get(http::header::CONTENT_TYPE) {
            let ct = ct.to_str().unwrap_or("").to_ascii_lowercase();
            // API Gateway joins repeated headers with commas.
            let media = ct.split([';', ',']).next().unwrap_or("").trim();
            if !(media.is_empty() || media == "application/json" || media.ends_with("+json")) {
                return Err(bad(
                    415,
                    "Content-Type",
                    format!("the body must be application/json, not {media:?}"),
                ));
            }
        }
        let raw = event.body.as_deref().unwrap_or("");
        let text = if event.is_base64_encoded {
            let bytes = base64_decode(raw)
                .ok_or_else(|| bad(400, "body", "the body is not valid base64"))?;
            check_size(bytes.len())?;
            String::from_utf8(bytes).map_err(|_| bad(400, "body", "the body is not UTF-8"))?
        } else {
            check_size(raw.len())?;
            raw.to_string()
        };
        if text.trim().is_empty() {
            return Ok(Body::default());
        }
        let v: Value = serde_json::from_str(&text)
            .map_err(|e| bad(400, "body", format!("the body is not valid JSON: {e}")))?;
        let Value::Object(m) = v else {
            return Err(bad(400, "body", "the body must be a JSON object"));
        };
        if let Some(k) = m.keys().find(|k| !allowed.contains(&k.as_str())) {
            return Err(bad(
                400,
                k,
                format!("unknown member {k:?}; expected {}", allowed.join(", ")),
            ));
        }
        Ok(Body(m))
    }

    /// A body from members (tests, query parameters).
    pub fn from_map(m: Map<String, Value>) -> Body {
        Body(m)
    }

    /// A required string of 1 to [`MAX_FIELD_BYTES`] bytes without control characters.
    pub fn string(&self, field: &str) -> Result<String, HttpAnswer> {
        match self.0.get(field) {
            None | Some(Value::Null) => Err(bad(400, field, format!("{field} is required"))),
            Some(Value::String(s)) => checked_string(field, s),
            Some(_) => Err(bad(400, field, format!("{field} must be a string"))),
        }
    }

    /// An integer in `min..=max`, `default` when absent or `null`.
    pub fn uint(&self, field: &str, default: u64, min: u64, max: u64) -> Result<u64, HttpAnswer> {
        let v = match self.0.get(field) {
            None | Some(Value::Null) => return Ok(default),
            Some(Value::Number(n)) => whole(n),
            Some(_) => None,
        };
        match v {
            Some(v) if (min..=max).contains(&v) => Ok(v),
            _ => Err(bad(
                400,
                field,
                format!("{field} must be an integer from {min} to {max}"),
            )),
        }
    }

    /// A required integer in `min..=max`.
    pub fn required_uint(&self, field: &str, min: u64, max: u64) -> Result<u64, HttpAnswer> {
        if matches!(self.0.get(field), None | Some(Value::Null)) {
            return Err(bad(400, field, format!("{field} is required")));
        }
        self.uint(field, min, min, max)
    }

    /// A required array.
    pub fn array(&self, field: &str) -> Result<&Vec<Value>, HttpAnswer> {
        match self.0.get(field) {
            Some(Value::Array(a)) => Ok(a),
            None | Some(Value::Null) => Err(bad(400, field, format!("{field} is required"))),
            Some(_) => Err(bad(400, field, format!("{field} must be an array"))),
        }
    }
}

/// A number without a fraction as an integer: JSON Schema's `integer` includes `2.0`, which some
/// JSON encoders write for whole floats.
pub fn whole(n: &serde_json::Number) -> Option<u64> {
    n.as_u64().or_else(|| {
        let f = n.as_f64()?;
        ((0.0..=MAX_EXACT_FLOAT).contains(&f) && f.fract() == 0.0).then_some(f as u64)
    })
}

/// `s` if 1 to [`MAX_FIELD_BYTES`] bytes without control characters.
pub fn checked_string(field: &str, s: &str) -> Result<String, HttpAnswer> {
    if s.is_empty() || s.len() > MAX_FIELD_BYTES {
        return Err(bad(
            400,
            field,
            format!("{field} must be 1 to {MAX_FIELD_BYTES} bytes"),
        ));
    }
    if s.chars().any(char::is_control) {
        return Err(bad(
            400,
            field,
            format!("{field} contains a control character"),
        ));
    }
    Ok(s.to_string())
}

fn check_size(len: usize) -> Result<(), HttpAnswer> {
    if len > MAX_BODY_BYTES {
        return Err(bad(
            413,
            "body",
            format!("the body is {len} bytes; the decide API reads at most {MAX_BODY_BYTES}"),
        ));
    }
    Ok(())
}

fn base64_decode(s: &str) -> Option<Vec<u8>> {
    use base64::Engine;
    base64::engine::general_purpose::STANDARD.decode(s).ok()
}

/// The query parameters of a GET as a body (each a string; repeated ones joined by API Gateway).
pub fn query(event: &ApiGatewayV2httpRequest, allowed: &[&str]) -> Result<Body, HttpAnswer> {
    let mut m = Map::new();
    for (k, v) in event.query_string_parameters.iter() {
        if k == "refusal" {
            continue;
        }
        if !allowed.contains(&k) {
            return Err(bad(
                400,
                k,
                format!(
                    "unknown query parameter {k:?}; expected {}",
                    allowed.join(", ")
                ),
            ));
        }
        m.insert(k.to_string(), Value::String(v.to_string()));
    }
    Ok(Body(m))
}
