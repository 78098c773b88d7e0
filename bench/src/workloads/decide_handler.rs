//! The decide API's handler alone: what the Lambda runtime does with one `POST /v1/limits/spend`
//! (the payload 2.0 event's JSON read into its type, `decide_api::handle`, the answer written back
//! as JSON), with no HTTP in front. Beside `gcra-spend` (the same spend as a library call), its
//! client-cost reading is the handler's own CPU per decision; `local-stack-decide-spend` adds the
//! local API Gateway and an HTTP client to that. **1** `UpdateItem` warm.

use std::sync::Arc;

use aws_lambda_events::apigw::ApiGatewayV2httpRequest;
use futures::future::BoxFuture;
use shared::table::TableKind;
use shared::Deps;

use crate::error::BenchError;
use crate::workload::{BenchCtx, Decision, Params, Workload};

fn other(e: impl std::fmt::Display) -> BenchError {
    BenchError::Other(e.to_string())
}

pub struct DecideHandler {
    deps: Deps,
    state: decide_api::State,
    /// The event as the runtime receives it: JSON text, read anew for every decision.
    event: String,
}

/// The handler with the bench's limit (`p.limit` per `p.window_secs`) and a caller whose JWT
/// claims name the bench tenant, as API Gateway's JWT authorizer hands them on.
pub async fn build(ctx: &BenchCtx, p: &Params) -> Result<Arc<dyn Workload>, BenchError> {
    super::ensure_tables(ctx, &[TableKind::Buckets]).await?;
    let mut deps = super::deps(ctx);
    deps.vars = deps.vars.with_overrides([
        ("TURNSTILE_DECIDE_AUTH", "jwt".to_string()),
        (
            decide_api::LIMITS_YAML_VAR,
            super::gcra::limits_yaml(p.limit, p.window_secs),
        ),
    ]);
    let state = decide_api::init(&deps).await.map_err(other)?;
    let body = serde_json::json!({"name": super::gcra::NAME, "id": p.key}).to_string();
    let event = serde_json::json!({
        "version": "2.0",
        "routeKey": "ANY /v1/{proxy+}",
        "rawPath": "/v1/limits/spend",
        "rawQueryString": "",
        "headers": {"content-type": "application/json", "host": "decide.bench"},
        "requestContext": {
            "accountId": "123456789012",
            "apiId": "bench",
            "authorizer": {"jwt": {"claims": {"sub": "bench", "tenantId": "bench"}, "scopes": null}},
            "domainName": "decide.bench",
            "domainPrefix": "decide",
            "http": {"method": "POST", "path": "/v1/limits/spend", "protocol": "HTTP/1.1",
                     "sourceIp": "127.0.0.1", "userAgent": "turnstile-bench"},
            "requestId": "bench",
            "routeKey": "ANY /v1/{proxy+}",
            "stage": "$default",
            "time": "29/Nov/2026:00:00:00 +0000",
            "timeEpoch": 0
        },
        "body": body,
        "isBase64Encoded": false
    })
    .to_string();
    Ok(Arc::new(DecideHandler { deps, state, event }))
}

impl Workload for DecideHandler {
    fn decide(&self, _worker: usize, _seq: u64) -> BoxFuture<'_, Result<Decision, BenchError>> {
        Box::pin(async move {
            let event: ApiGatewayV2httpRequest =
                serde_json::from_str(&self.event).map_err(other)?;
            let answer = decide_api::handle(&self.deps, &self.state, event)
                .await
                .map_err(other)?;
            let written = serde_json::to_string(&answer).map_err(other)?;
            let text = shared::edge::respond::body_text(&answer.body);
            if answer.status_code != 200 {
                return Err(other(format!("{}: {text}", answer.status_code)));
            }
            let v: serde_json::Value = serde_json::from_str(&text).map_err(other)?;
            std::hint::black_box(written);
            match v["allowed"].as_bool() {
                Some(true) => Ok(Decision::admitted(None)),
                Some(false) => Ok(Decision::refused(None)),
                None => Err(other(format!("no verdict in {text}"))),
            }
        })
    }
}
