//! The charting library the page draws with: Chart.js, pinned in `local/dashboard/package.json`
//! and `package-lock.json`, installed into `local/dashboard/node_modules` by
//! `scripts/dashboard-assets.sh` (`npm ci`; `make dev` and `make test` run it). The stack serves
//! the file from disk at [`ROUTE`] rather than embedding it at build time, so `cargo build` works on
//! a fresh clone without npm, and installing it needs no rebuild; when it is missing, the route and
//! the state say what to run (decision 1001).

use std::path::{Path, PathBuf};

use axum::http::{header, StatusCode};
use axum::response::{IntoResponse, Response};

/// Where the page loads the library from.
pub const ROUTE: &str = "/dashboard/chart.js";
/// The file inside the installed packages.
pub const LIBRARY: &str = "chart.js/dist/chart.umd.min.js";
/// Env var of `turnstile dev`: another directory of installed packages.
pub const DIR_VAR: &str = "TURNSTILE_DEV_DASHBOARD_ASSETS";

/// `local/dashboard/node_modules` of the checkout this crate was built from.
pub fn default_dir() -> PathBuf {
    Path::new(env!("CARGO_MANIFEST_DIR")).join("dashboard/node_modules")
}

/// Why the library cannot be served from `dir`, or `None` when it can.
pub fn missing(dir: &Path) -> Option<String> {
    let file = dir.join(LIBRARY);
    (!file.is_file()).then(|| {
        format!(
            "the dashboard's charting library is not installed ({} is missing): run \
             scripts/dashboard-assets.sh (make dev and make test do), or point {DIR_VAR} at \
             another node_modules",
            file.display()
        )
    })
}

/// `GET` [`ROUTE`]: the library, or 404 with what to run.
pub async fn serve(dir: &Path) -> Response {
    let file = dir.join(LIBRARY);
    let read = tokio::task::spawn_blocking(move || std::fs::read(file)).await;
    match read {
        Ok(Ok(bytes)) => (
            [
                (header::CONTENT_TYPE, "text/javascript; charset=utf-8"),
                (header::CACHE_CONTROL, "no-cache"),
            ],
            bytes,
        )
            .into_response(),
        _ => (
            StatusCode::NOT_FOUND,
            [(header::CONTENT_TYPE, "text/plain; charset=utf-8")],
            missing(dir).unwrap_or_else(|| "cannot read the charting library".into()),
        )
            .into_response(),
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[tokio::test]
    async fn served_when_installed_and_explained_when_not() {
        let dir = std::env::temp_dir().join(format!("turnstile-assets-{}", uuid::Uuid::new_v4()));
        let missing_dir = dir.join("nothing");
        let why = missing(&missing_dir).expect("missing");
        assert!(why.contains("scripts/dashboard-assets.sh"), "{why}");
        let r = serve(&missing_dir).await;
        assert_eq!(r.status(), StatusCode::NOT_FOUND);

        let file = dir.join(LIBRARY);
        std::fs::create_dir_all(file.parent().unwrap()).unwrap();
        std::fs::write(&file, "window.Chart = {};").unwrap();
        assert_eq!(missing(&dir), None);
        let r = serve(&dir).await;
        assert_eq!(r.status(), StatusCode::OK);
        assert_eq!(
            r.headers()[header::CONTENT_TYPE],
            "text/javascript; charset=utf-8"
        );
        std::fs::remove_dir_all(&dir).unwrap();
    }
}
