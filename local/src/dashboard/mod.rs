//! The local dashboard (`turnstile dev`, `http://127.0.0.1:3000/`): one static page that polls
//! `GET /dashboard/state` once a second and shows, live, the tenants and their limits, sessions with
//! their sockets, the per-minute and open-connection counters, the key-value buckets, and the last
//! decisions with their reason.
//!
//! Local only: the page reads the tables with Scans (bounded, [`snapshot::ROWS`] per table), which
//! is fine against DynamoDB Local and would be wasteful on a production table; nothing of it is
//! deployed. The decisions come from [`decisions::Recorded`], which sees every function invocation
//! of the local stack.

pub mod decisions;
pub mod snapshot;

use std::sync::Arc;

use axum::extract::State;
use axum::http::{header, StatusCode};
use axum::response::{IntoResponse, Response};
use axum::routing::get;
use axum::{Json, Router};
use serde_json::json;
use shared::Deps;

use crate::websocket::LiveConnections;
pub use decisions::{Decision, DecisionLog, Recorded};

/// The page itself: plain HTML, CSS and JavaScript, no build step.
const PAGE: &str = include_str!("page.html");

#[derive(Clone)]
struct DashState {
    deps: Option<Deps>,
    log: Arc<DecisionLog>,
    live: Arc<LiveConnections>,
}

/// `GET /` (the page) and `GET /dashboard/state` (JSON). Without `deps` the tables are not read and
/// the state says so; decisions and live sockets are still shown.
pub fn router(deps: Option<Deps>, log: Arc<DecisionLog>, live: Arc<LiveConnections>) -> Router {
    Router::new()
        .route("/", get(page))
        .route("/dashboard/state", get(state))
        .with_state(DashState { deps, log, live })
}

async fn page() -> Response {
    (
        [
            (header::CONTENT_TYPE, "text/html; charset=utf-8"),
            (header::CACHE_CONTROL, "no-store"),
        ],
        PAGE,
    )
        .into_response()
}

async fn state(State(st): State<DashState>) -> Response {
    let live = st.live.ids();
    let decisions = st.log.recent();
    let tables = match &st.deps {
        Some(deps) => match snapshot::read(deps).await {
            Ok(t) => serde_json::to_value(t).unwrap_or_default(),
            Err(e) => {
                tracing::warn!(error = %e, "dashboard: cannot read the tables");
                return (
                    StatusCode::BAD_GATEWAY,
                    Json(json!({ "error": e.to_string(), "decisions": decisions, "liveSockets": live })),
                )
                    .into_response();
            }
        },
        None => json!(null),
    };
    (
        [(header::CACHE_CONTROL, "no-store")],
        Json(json!({ "tables": tables, "decisions": decisions, "liveSockets": live })),
    )
        .into_response()
}
