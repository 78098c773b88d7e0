//! The local dashboard (`turnstile dev`, `http://127.0.0.1:3000/`): one static page that draws,
//! live, decisions per second over the last five minutes (admitted, and refused by limit), open
//! connections against each tenant's and each session's cap, each key-value bucket's and each
//! fungible bucket's level now, refusals by reason, and the last decisions.
//!
//! The page polls two routes once a second: `GET /dashboard/decisions` (the per-second counts the
//! stack keeps in memory, [`series`]) and `GET /dashboard/state` (the tables, read with bounded
//! Scans by [`snapshot`] and turned into numbers by [`view`]). Scans are fine against DynamoDB
//! Local and would be wasteful on a production table; nothing of this is deployed. Its charting
//! library is served from disk ([`assets`]).

pub mod assets;
pub mod decisions;
pub mod series;
pub mod snapshot;
pub mod view;

use std::path::PathBuf;
use std::sync::Arc;

use axum::extract::State;
use axum::http::{header, StatusCode};
use axum::response::{IntoResponse, Response};
use axum::routing::get;
use axum::{Json, Router};
use serde_json::json;
use shared::clock::SharedClock;
use shared::Deps;

use crate::websocket::LiveConnections;
pub use decisions::{Decision, DecisionLog, Recorded};

/// The page itself: plain HTML, CSS and JavaScript, no build step.
const PAGE: &str = include_str!("page.html");

/// What the dashboard routes read.
#[derive(Clone)]
pub struct Dashboard {
    /// Where the tables are read; `None` shows only the decisions and live sockets.
    pub deps: Option<Deps>,
    pub log: Arc<DecisionLog>,
    pub live: Arc<LiveConnections>,
    pub clock: SharedClock,
    /// The installed npm packages the charting library is served from ([`assets`]).
    pub assets: PathBuf,
}

/// `GET /` (the page), `/dashboard/state` and `/dashboard/decisions` (JSON), and the charting
/// library.
pub fn router(dash: Dashboard) -> Router {
    Router::new()
        .route("/", get(page))
        .route("/dashboard/state", get(state))
        .route("/dashboard/decisions", get(per_second))
        .route(assets::ROUTE, get(library))
        .with_state(Arc::new(dash))
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

async fn library(State(d): State<Arc<Dashboard>>) -> Response {
    assets::serve(&d.assets).await
}

async fn per_second(State(d): State<Arc<Dashboard>>) -> Response {
    let points = d.log.per_second(d.clock.now().as_secs());
    ([(header::CACHE_CONTROL, "no-store")], Json(points)).into_response()
}

async fn state(State(d): State<Arc<Dashboard>>) -> Response {
    let now = d.clock.now();
    let live = d.live.ids();
    let decisions = d.log.recent();
    let library = assets::missing(&d.assets);
    let tables = match &d.deps {
        Some(deps) => match snapshot::read(deps).await {
            Ok(s) => serde_json::to_value(view::build(&s, now)).unwrap_or_default(),
            Err(e) => {
                tracing::warn!(error = %e, "dashboard: cannot read the tables");
                return (
                    StatusCode::BAD_GATEWAY,
                    Json(json!({ "error": e.to_string(), "decisions": decisions,
                        "liveSockets": live, "now": now.as_millis(), "library": library })),
                )
                    .into_response();
            }
        },
        None => json!(null),
    };
    (
        [(header::CACHE_CONTROL, "no-store")],
        Json(
            json!({ "view": tables, "decisions": decisions, "liveSockets": live,
            "now": now.as_millis(), "library": library }),
        ),
    )
        .into_response()
}
