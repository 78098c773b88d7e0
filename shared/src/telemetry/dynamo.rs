//! The DynamoDB client's meter: an SDK interceptor on every client Turnstile builds
//! (`crate::dynamo`) that records each attempt's operation, latency and failure kind
//! (`DynamoDbCalls`, `DynamoDbLatency`, `DynamoDbErrors`). It reads what the SDK already has; it
//! adds nothing to the request (unlike the tests' `CallCounter`).

use std::time::Instant;

use aws_smithy_runtime_api::box_error::BoxError;
use aws_smithy_runtime_api::client::interceptors::context::{
    BeforeTransmitInterceptorContextRef, FinalizerInterceptorContextRef,
};
use aws_smithy_runtime_api::client::interceptors::Intercept;
use aws_smithy_runtime_api::client::orchestrator::Metadata;
use aws_smithy_runtime_api::client::runtime_components::RuntimeComponents;
use aws_smithy_types::config_bag::{ConfigBag, Storable, StoreReplace};

use super::catalogue;

#[derive(Debug, Clone, Default)]
pub struct DynamoMeter;

/// When the attempt in flight was sent.
#[derive(Debug, Clone)]
struct Sent(Instant);

impl Storable for Sent {
    type Storer = StoreReplace<Self>;
}

fn operation(cfg: &ConfigBag) -> String {
    cfg.load::<Metadata>()
        .map(|m| m.name().to_string())
        .unwrap_or_else(|| "unknown".into())
}

/// The `ErrorType` of a failed answer: a refused condition or cancelled transaction is an answer
/// the caller decides on, not a failure (`None`).
pub fn error_type(status: u16, body: &[u8]) -> Option<&'static str> {
    if (200..300).contains(&status) {
        return None;
    }
    let kind = serde_json::from_slice::<serde_json::Value>(body)
        .ok()
        .and_then(|v| v["__type"].as_str().map(str::to_string))
        .unwrap_or_default();
    let kind = kind.rsplit('#').next().unwrap_or("");
    match kind {
        "ConditionalCheckFailedException" | "TransactionCanceledException" => None,
        "ThrottlingException"
        | "ProvisionedThroughputExceededException"
        | "RequestLimitExceeded" => Some("Throttling"),
        _ if status >= 500 => Some("Server"),
        _ => Some("Client"),
    }
}

impl Intercept for DynamoMeter {
    fn name(&self) -> &'static str {
        "TurnstileDynamoMeter"
    }

    fn read_before_transmit(
        &self,
        _context: &BeforeTransmitInterceptorContextRef<'_>,
        _runtime_components: &RuntimeComponents,
        cfg: &mut ConfigBag,
    ) -> Result<(), BoxError> {
        cfg.interceptor_state().store_put(Sent(Instant::now()));
        Ok(())
    }

    fn read_after_attempt(
        &self,
        context: &FinalizerInterceptorContextRef<'_>,
        _runtime_components: &RuntimeComponents,
        cfg: &mut ConfigBag,
    ) -> Result<(), BoxError> {
        let Some(Sent(sent)) = cfg.load::<Sent>().cloned() else {
            return Ok(());
        };
        catalogue::dynamodb_call(&operation(cfg), sent.elapsed());
        match context.response() {
            Some(r) => {
                let body = r.body().bytes().unwrap_or_default();
                if let Some(kind) = error_type(r.status().as_u16(), body) {
                    catalogue::dynamodb_error(kind);
                }
            }
            None => catalogue::dynamodb_error(match context.output_or_error() {
                Some(Err(e)) if e.is_timeout_error() => "Timeout",
                _ => "Transport",
            }),
        }
        Ok(())
    }

    /// An attempt cut off by its timeout never reaches [`Self::read_after_attempt`]; the call's
    /// final error says so here.
    fn read_after_execution(
        &self,
        context: &FinalizerInterceptorContextRef<'_>,
        _runtime_components: &RuntimeComponents,
        _cfg: &mut ConfigBag,
    ) -> Result<(), BoxError> {
        if let Some(Err(e)) = context.output_or_error() {
            if e.is_timeout_error() && context.response().is_none() {
                catalogue::dynamodb_error("Timeout");
            }
        }
        Ok(())
    }
}

#[cfg(test)]
mod tests {
    use super::error_type;

    #[test]
    fn error_types_separate_throttles_from_refused_conditions() {
        let t = br#"{"__type":"com.amazonaws.dynamodb.v20120810#ThrottlingException"}"#;
        assert_eq!(error_type(400, t), Some("Throttling"));
        let p = br#"{"__type":"com.amazonaws.dynamodb.v20120810#ProvisionedThroughputExceededException"}"#;
        assert_eq!(error_type(400, p), Some("Throttling"));
        let c = br#"{"__type":"com.amazonaws.dynamodb.v20120810#ConditionalCheckFailedException"}"#;
        assert_eq!(error_type(400, c), None);
        assert_eq!(error_type(500, b"{}"), Some("Server"));
        assert_eq!(error_type(400, b"not json"), Some("Client"));
        assert_eq!(error_type(200, b"{}"), None);
    }
}
