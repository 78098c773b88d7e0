//! The local stack answers only requests addressed to it (issue 22): a web page the developer
//! visits could otherwise use DNS rebinding (its own name resolving to 127.0.0.1) to read
//! `/dashboard/state` or call `/session` and `/events` from the browser. A request whose `Host` is
//! not the stack's own address (by IP, `localhost` or a name the developer added) is refused with
//! 403 before it reaches any handler.

use std::net::SocketAddr;
use std::sync::Arc;

use axum::extract::{Request, State};
use axum::http::{header, StatusCode};
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
    hosts
}

/// The middleware: passes requests whose `Host` is allowed, refuses the rest.
pub async fn check(State(allowed): State<Arc<Vec<String>>>, req: Request, next: Next) -> Response {
    let host = req
        .headers()
        .get(header::HOST)
        .and_then(|h| h.to_str().ok())
        .map(str::to_ascii_lowercase);
    match host {
        Some(h) if allowed.contains(&h) => next.run(req).await,
        other => {
            tracing::warn!(host = ?other, "refused a request addressed to another host");
            (
                StatusCode::FORBIDDEN,
                axum::Json(serde_json::json!({
                    "message": format!(
                        "this local stack answers only requests to {}; set \
                         TURNSTILE_DEV_ALLOWED_HOSTS to add a name",
                        allowed.join(", ")
                    )
                })),
            )
                .into_response()
        }
    }
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
    }
}
