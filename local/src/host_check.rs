//! The local stack answers only requests meant for it. A web page the developer visits is the
//! threat: it may use DNS rebinding (its own name resolving to 127.0.0.1) to read
//! `/dashboard/state` or call `/session` and `/events`, send "simple" requests from its own origin
//! (a `text/plain` or form `POST` needs no CORS preflight, so it reaches the handler even though the
//! page cannot read the answer), or open a WebSocket, which browsers never restrict by origin. So,
//! before any handler:
//!
//! - a `Host` that is not the stack's own address (by IP, `localhost` or a name the developer
//!   added) is refused with 403;
//! - an `Origin`, when present, must be one of the stack's own pages: `http://{host}` for an allowed
//!   `Host` of the HTTP listener (the dashboard), and on the WebSocket listener also its own; any
//!   other (another site, `null` from a sandboxed frame or a file) is refused with 403. Clients that
//!   send no `Origin` (curl, backends, the functions' SDK) are not browsers' cross-site requests;
//! - on the HTTP listener a `POST` must be `Content-Type: application/json` (415 otherwise), which a
//!   page can only send after a preflight this stack never answers. The decide API's `/v1/` paths
//!   are left to the function, which refuses other media types itself as it does when deployed,
//!   after routing (so an undeclared method is its 405, not this 415).
//!
//! Refusals are `application/problem+json` with a `message`, like the session API's.

use std::net::SocketAddr;
use std::sync::Arc;

use axum::extract::{Request, State};
use axum::http::{header, HeaderValue, Method, StatusCode};
use axum::middleware::Next;
use axum::response::{IntoResponse, Response};

/// The `Host` values a server bound to `addr` answers: its address, and the loopback names of its
/// port, plus `extra` (`TURNSTILE_DEV_ALLOWED_HOSTS`, for a stack reached by another name).
pub fn allowed_hosts(addr: SocketAddr, extra: &[String]) -> Vec<String> {
    let port = addr.port();
    let mut hosts = vec![
        addr.to_string(),
        format!("localhost:{port}"),
        format!("127.0.0.1:{port}"),
        format!("[::1]:{port}"),
    ];
    hosts.extend(extra.iter().map(|h| h.to_ascii_lowercase()));
    // Bound to 127.0.0.1, the address is also a loopback name: name each host once.
    let mut seen = std::collections::HashSet::new();
    hosts.retain(|h| seen.insert(h.clone()));
    hosts
}

/// The origins of pages served from these hosts (`http://{host}`).
pub fn origins_of(hosts: &[String]) -> Vec<String> {
    hosts.iter().map(|h| format!("http://{h}")).collect()
}

/// What one listener lets through.
#[derive(Debug, Clone)]
pub struct Guard {
    /// Allowed `Host` values, lower case.
    pub hosts: Vec<String>,
    /// Allowed `Origin` values, lower case; a request without `Origin` passes.
    pub origins: Vec<String>,
    /// Whether a `POST` must carry `Content-Type: application/json`.
    pub json_posts: bool,
}

/// Paths whose function checks the media type itself (the decide API's).
const OWN_MEDIA_CHECK: &str = "/v1/";

/// The refusal body every local guard answers with (RFC 9457, plus `message`).
fn refuse(status: StatusCode, message: String) -> Response {
    let title = status.canonical_reason().unwrap_or("Refused");
    let body = serde_json::json!({
        "type": "about:blank",
        "title": title,
        "status": status.as_u16(),
        "detail": message,
        "message": message,
    });
    (
        status,
        [(header::CONTENT_TYPE, "application/problem+json")],
        body.to_string(),
    )
        .into_response()
}

fn lower(v: &HeaderValue) -> Option<String> {
    v.to_str().ok().map(str::to_ascii_lowercase)
}

/// `application/json`, with or without parameters (`; charset=utf-8`), in any case.
fn is_json(content_type: Option<&HeaderValue>) -> bool {
    content_type
        .and_then(|v| v.to_str().ok())
        .and_then(|v| v.split(';').next())
        .is_some_and(|essence| essence.trim().eq_ignore_ascii_case("application/json"))
}

/// The middleware: passes requests that [`Guard`] allows, refuses the rest.
pub async fn check(State(guard): State<Arc<Guard>>, req: Request, next: Next) -> Response {
    let host = req.headers().get(header::HOST).and_then(lower);
    if !host.as_ref().is_some_and(|h| guard.hosts.contains(h)) {
        tracing::warn!(host = ?host, "refused a request addressed to another host");
        return refuse(
            StatusCode::FORBIDDEN,
            format!(
                "this local stack answers only requests to {}; set TURNSTILE_DEV_ALLOWED_HOSTS \
                 to add a name",
                guard.hosts.join(", ")
            ),
        );
    }
    // Every Origin header, so a second one cannot hide behind an allowed first.
    for origin in req.headers().get_all(header::ORIGIN) {
        let origin = lower(origin).unwrap_or_default();
        if !guard.origins.contains(&origin) {
            tracing::warn!(%origin, "refused a request from another origin");
            return refuse(
                StatusCode::FORBIDDEN,
                format!(
                    "this local stack answers pages of its own origin only ({}), not {origin:?}: \
                     a web page elsewhere may not drive it",
                    guard.origins.join(", ")
                ),
            );
        }
    }
    if guard.json_posts
        && req.method() == Method::POST
        && !req.uri().path().starts_with(OWN_MEDIA_CHECK)
        && !is_json(req.headers().get(header::CONTENT_TYPE))
    {
        let got = req
            .headers()
            .get(header::CONTENT_TYPE)
            .map(|v| String::from_utf8_lossy(v.as_bytes()).into_owned());
        return refuse(
            StatusCode::UNSUPPORTED_MEDIA_TYPE,
            format!(
                "POST needs Content-Type: application/json (got {}); with curl, add \
                 -H 'content-type: application/json'",
                got.map_or("none".to_string(), |c| format!("{c:?}"))
            ),
        );
    }
    next.run(req).await
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn the_bound_address_and_loopback_names_are_allowed() {
        let hosts = allowed_hosts("127.0.0.1:3000".parse().unwrap(), &["Dev.Box:3000".into()]);
        assert!(hosts.contains(&"localhost:3000".to_string()));
        assert!(hosts.contains(&"127.0.0.1:3000".to_string()));
        assert!(hosts.contains(&"dev.box:3000".to_string()));
        assert!(!hosts.iter().any(|h| h.starts_with("evil")));
        assert_eq!(hosts.iter().filter(|h| *h == "127.0.0.1:3000").count(), 1);
        let origins = origins_of(&hosts);
        assert!(origins.contains(&"http://localhost:3000".to_string()));
        assert!(origins.contains(&"http://dev.box:3000".to_string()));
    }

    #[test]
    fn only_application_json_is_json() {
        let v = |s: &'static str| HeaderValue::from_static(s);
        assert!(is_json(Some(&v("application/json"))));
        assert!(is_json(Some(&v("Application/JSON; charset=utf-8"))));
        for other in [
            "text/plain",
            "application/x-www-form-urlencoded",
            "multipart/form-data; boundary=x",
            "application/jsonp",
            "text/plain; application/json",
        ] {
            assert!(!is_json(Some(&v(other))), "{other}");
        }
        assert!(!is_json(None));
    }
}
