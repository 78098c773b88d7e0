//! A loopback stand-in for the one Secrets Manager call Turnstile makes, `GetSecretValue`, so the
//! real SDK client (and the real key-source code) runs where there is no AWS: the artifacts check,
//! the cold-start harness and the key-rotation tests. It speaks the service's JSON protocol
//! (`POST /`, `X-Amz-Target: secretsmanager.GetSecretValue`) and counts the reads.

use std::collections::HashMap;
use std::net::SocketAddr;
use std::sync::atomic::{AtomicUsize, Ordering};
use std::sync::{Arc, Mutex};

use axum::extract::State;
use axum::http::{HeaderMap, StatusCode};
use axum::response::{IntoResponse, Response};
use axum::routing::post;
use axum::Router;
use serde_json::{json, Value};

#[derive(Default)]
struct Secrets {
    values: Mutex<HashMap<String, String>>,
    reads: AtomicUsize,
}

/// A running stand-in; its secrets can be changed while it runs (a rotation step).
#[derive(Clone)]
pub struct SecretsManager {
    addr: SocketAddr,
    secrets: Arc<Secrets>,
}

fn answer(status: StatusCode, body: Value) -> Response {
    (
        status,
        [("content-type", "application/x-amz-json-1.1")],
        body.to_string(),
    )
        .into_response()
}

async fn call(State(s): State<Arc<Secrets>>, headers: HeaderMap, body: String) -> Response {
    let target = headers
        .get("x-amz-target")
        .and_then(|v| v.to_str().ok())
        .unwrap_or("");
    if target != "secretsmanager.GetSecretValue" {
        return answer(
            StatusCode::BAD_REQUEST,
            json!({"__type": "InvalidRequestException", "message": format!("{target} is not served here")}),
        );
    }
    let id = serde_json::from_str::<Value>(&body)
        .ok()
        .and_then(|v| v["SecretId"].as_str().map(str::to_string))
        .unwrap_or_default();
    s.reads.fetch_add(1, Ordering::SeqCst);
    let value = s.values.lock().ok().and_then(|m| m.get(&id).cloned());
    match value {
        Some(v) => answer(
            StatusCode::OK,
            json!({"ARN": id, "Name": id, "SecretString": v, "VersionId": "local"}),
        ),
        None => answer(
            StatusCode::BAD_REQUEST,
            json!({"__type": "ResourceNotFoundException", "message": "Secrets Manager can't find the specified secret."}),
        ),
    }
}

impl SecretsManager {
    /// Serves on `addr` (port 0: any free port) until the runtime ends.
    pub async fn start(addr: SocketAddr) -> std::io::Result<SecretsManager> {
        let secrets = Arc::new(Secrets::default());
        let listener = tokio::net::TcpListener::bind(addr).await?;
        let addr = listener.local_addr()?;
        let app = Router::new()
            .route("/", post(call))
            .with_state(secrets.clone());
        tokio::spawn(async move {
            let _ = axum::serve(listener, app).await;
        });
        Ok(SecretsManager { addr, secrets })
    }

    /// The endpoint for `AWS_ENDPOINT_URL_SECRETS_MANAGER`.
    pub fn url(&self) -> String {
        format!("http://{}", self.addr)
    }

    /// Sets (or replaces) a secret's string.
    pub fn put(&self, id: &str, value: &str) {
        if let Ok(mut m) = self.secrets.values.lock() {
            m.insert(id.to_string(), value.to_string());
        }
    }

    /// `GetSecretValue` calls served so far.
    pub fn reads(&self) -> usize {
        self.secrets.reads.load(Ordering::SeqCst)
    }
}
