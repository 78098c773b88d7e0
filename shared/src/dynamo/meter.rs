//! The one SDK interceptor on every DynamoDB client Turnstile builds. Always: each attempt's
//! operation, latency and failure kind (`DynamoDbCalls`, `DynamoDbLatency`, `DynamoDbErrors`), read
//! from what the SDK already has, and the [`user_agent`](super::user_agent) built once in place of
//! the SDK's per-request one (one interceptor, not two: each costs a check at every SDK hook). With a [`CallCounter`] (tests and benchmarks only): every
//! request counted, and `ReturnConsumedCapacity=TOTAL` added so each call's units are charged.

use std::time::Instant;

use aws_smithy_runtime_api::box_error::BoxError;
use aws_smithy_runtime_api::client::interceptors::context::{
    AfterDeserializationInterceptorContextRef, BeforeSerializationInterceptorContextRef,
    BeforeTransmitInterceptorContextMut, BeforeTransmitInterceptorContextRef,
    FinalizerInterceptorContextRef,
};
use aws_smithy_runtime_api::client::interceptors::Intercept;
use aws_smithy_runtime_api::client::orchestrator::Metadata;
use aws_smithy_runtime_api::client::runtime_components::RuntimeComponents;
use aws_smithy_types::body::SdkBody;
use aws_smithy_types::config_bag::{ConfigBag, Storable, StoreReplace};
use serde_json::Value;

use super::counter::{units_of, CallCounter, CAPACITY_OPERATIONS};
use super::retry::is_throttle;
use super::user_agent;
use crate::telemetry::catalogue;

/// The interceptor; `counter` only on clients built to be counted.
#[derive(Debug, Clone, Default)]
pub struct Meter {
    pub counter: Option<CallCounter>,
}

/// When the attempt in flight was sent.
#[derive(Debug, Clone)]
struct Sent(Instant);

impl Storable for Sent {
    type Storer = StoreReplace<Self>;
}

/// The request of the attempt in flight, kept from signing to deserialisation.
#[derive(Debug, Clone)]
struct MeteredRequest {
    operation: String,
    body: Value,
}

impl Storable for MeteredRequest {
    type Storer = StoreReplace<Self>;
}

fn operation_name(cfg: &ConfigBag) -> String {
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
        k if is_throttle(Some(k)) => Some("Throttling"),
        _ if status >= 500 => Some("Server"),
        _ => Some("Client"),
    }
}

impl Intercept for Meter {
    fn name(&self) -> &'static str {
        "TurnstileDynamoMeter"
    }

    /// The first hook of a call: the SDK's user-agent interceptor is off for it.
    fn read_before_execution(
        &self,
        _context: &BeforeSerializationInterceptorContextRef<'_>,
        cfg: &mut ConfigBag,
    ) -> Result<(), BoxError> {
        cfg.interceptor_state()
            .store_put(user_agent::disable_sdk_user_agent());
        Ok(())
    }

    /// Sets the user agent; with a counter, also asks for `ReturnConsumedCapacity=TOTAL` and keeps the request for [`units_of`].
    fn modify_before_signing(
        &self,
        context: &mut BeforeTransmitInterceptorContextMut<'_>,
        _runtime_components: &RuntimeComponents,
        cfg: &mut ConfigBag,
    ) -> Result<(), BoxError> {
        let ua = user_agent::header();
        let headers = context.request_mut().headers_mut();
        headers.try_insert("user-agent", ua)?;
        headers.try_insert("x-amz-user-agent", ua)?;
        if self.counter.is_none() {
            return Ok(());
        }
        let operation = operation_name(cfg);
        if !CAPACITY_OPERATIONS.contains(&operation.as_str()) {
            return Ok(());
        }
        let request = context.request_mut();
        let Some(mut body) = request
            .body()
            .bytes()
            .and_then(|b| serde_json::from_slice::<Value>(b).ok())
        else {
            return Ok(());
        };
        if let Some(o) = body.as_object_mut() {
            if !o.contains_key("ReturnConsumedCapacity") {
                o.insert("ReturnConsumedCapacity".into(), Value::from("TOTAL"));
                let bytes = serde_json::to_vec(&body)?;
                request
                    .headers_mut()
                    .insert("content-length", bytes.len().to_string());
                *request.body_mut() = SdkBody::from(bytes);
            }
        }
        cfg.interceptor_state()
            .store_put(MeteredRequest { operation, body });
        Ok(())
    }

    fn read_before_transmit(
        &self,
        _context: &BeforeTransmitInterceptorContextRef<'_>,
        _runtime_components: &RuntimeComponents,
        cfg: &mut ConfigBag,
    ) -> Result<(), BoxError> {
        cfg.interceptor_state().store_put(Sent(Instant::now()));
        if let Some(counter) = &self.counter {
            counter.record(&operation_name(cfg));
        }
        Ok(())
    }

    fn read_after_deserialization(
        &self,
        context: &AfterDeserializationInterceptorContextRef<'_>,
        _runtime_components: &RuntimeComponents,
        cfg: &mut ConfigBag,
    ) -> Result<(), BoxError> {
        let (Some(counter), Some(req)) = (&self.counter, cfg.load::<MeteredRequest>()) else {
            return Ok(());
        };
        let response = context.response();
        let body = response
            .body()
            .bytes()
            .and_then(|b| serde_json::from_slice::<Value>(b).ok())
            .unwrap_or(Value::Null);
        let units = units_of(&req.operation, &req.body, response.status().as_u16(), &body);
        counter.charge(&req.operation, units);
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
        catalogue::dynamodb_call(&operation_name(cfg), sent.elapsed());
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
