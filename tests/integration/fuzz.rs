//! Property ("fuzz") tests of the handlers' parsing of their events (docs/testing.md): API Gateway
//! REQUEST-authorizer, WebSocket and HTTP API events, DynamoDB stream records, EventBridge events
//! and the token remover's processor configuration. Each handler turns its event into typed values
//! with a pure function (`authorizer::request_ids`, `context::websocket_ids`, `session_api::target`,
//! `shared::session::stream::expired_session`, `token_remover::resolve`), fuzzed here without
//! DynamoDB.
//!
//! Inputs: arbitrary JSON (keys biased to the ones the event has), and the sample events of
//! `events/` with one to three fields removed, retyped, replaced or lengthened. Properties: no
//! panic; every refusal is a typed error (an `IdError`, the 400 answer, an acknowledged outcome);
//! whatever is accepted satisfies the id invariants.

use aws_lambda_events::apigw::{
    ApiGatewayCustomAuthorizerRequestTypeRequest, ApiGatewayV2httpRequest,
    ApiGatewayWebsocketProxyRequest,
};
use aws_lambda_events::dynamodb::Event as StreamEvent;
use aws_lambda_events::eventbridge::EventBridgeEvent;
use proptest::prelude::*;
use serde_json::Value;
use shared::config::{ConfigError, Vars};
use shared::edge::context;
use shared::fuzz;
use shared::ids::{ConnectionId, SessionId, TenantId};
use shared::session::stream;
use token_remover::{Outcome, Processors, Resolved};

fn sample(path: &str) -> Value {
    let full = format!("{}/../events/{path}", env!("CARGO_MANIFEST_DIR"));
    let text = std::fs::read_to_string(&full).unwrap_or_else(|e| panic!("{full}: {e}"));
    serde_json::from_str(&text).unwrap()
}

/// A sample event with fields mutated, or arbitrary JSON with the event's keys.
fn event(path: &'static str, keys: &'static [&'static str]) -> BoxedStrategy<Value> {
    prop_oneof![
        3 => fuzz::mutated(sample(path)),
        1 => fuzz::json_with_keys(keys),
    ]
    .boxed()
}

/// The invariants every accepted id keeps: it parses again to itself.
fn valid_ids(t: &TenantId, s: &SessionId) -> bool {
    TenantId::parse(t.as_str()).as_ref() == Ok(t) && SessionId::parse(s.as_str()).as_ref() == Ok(s)
}

const WS_KEYS: &[&str] = &[
    "requestContext",
    "authorizer",
    "connectionId",
    "tenantId",
    "sessionId",
    "queryStringParameters",
    "body",
    "domainName",
    "stage",
    "routeKey",
    "eventType",
];

/// The sample events' connect ticket (events/authorizer/connect-request.json).
const SAMPLE_TICKET: &str = "tst1.sample.eyJ0IjoidGVuYW50LTEiLCJzIjoic2Vzc2lvbi0xIiwibiI6InNhbXBsZS1zZXNzaW9uLW5vbmNlIiwiZSI6NDEwMjQ0NDgwMCwidSI6InVzZXItMSIsImkiOiJzYW1wbGUtdGlja2V0IiwiYyI6MX0.BuKN7grR-E6bYvwb36kZp9YbY_lIHiKnLVDz51mKajY";
const B64URL: &str = "ABCDEFGHIJKLMNOPQRSTUVWXYZabcdefghijklmnopqrstuvwxyz0123456789-_";

proptest! {
    #![proptest_config(fuzz::config(2))]

    /// `fuzz_authorizer_requests`: any REQUEST-authorizer event either fails to deserialize (the
    /// Lambda runtime's typed error) or yields valid ids or an `IdError` (the handler's Deny).
    #[test]
    fn fuzz_authorizer_requests(
        v in event("authorizer/connect-request.json", &["queryStringParameters", "tenantId", "sessionId", "methodArn", "requestContext"]),
    ) {
        if let Ok(ev) = serde_json::from_value::<ApiGatewayCustomAuthorizerRequestTypeRequest>(v) {
            match authorizer::request_ids(&ev) {
                Ok((t, s)) => {
                    prop_assert!(valid_ids(&t, &s));
                    prop_assert_eq!(ev.query_string_parameters.first("tenantId"), Some(t.as_str()));
                }
                Err(e) => prop_assert!(!e.to_string().is_empty()),
            }
        }
    }

    /// `fuzz_connect_tickets`: arbitrary text, and the sample ticket edited (lines replaced,
    /// characters inserted, one character swapped for a base64url one), never panics the
    /// verifier; nothing but the unedited ticket verifies; no refusal quotes the input.
    #[test]
    fn fuzz_connect_tickets(
        raw in prop_oneof![
            fuzz::text(),
            fuzz::mutated_text(SAMPLE_TICKET),
            (any::<prop::sample::Index>(), prop::sample::select(B64URL.chars().collect::<Vec<_>>()))
                .prop_map(|(i, c)| {
                    let mut t: Vec<char> = SAMPLE_TICKET.chars().collect();
                    let at = i.index(t.len());
                    t[at] = c;
                    t.into_iter().collect::<String>()
                }),
        ],
    ) {
        let keys = shared::ticket::KeySet::parse_json(turnstile_bench::samples::SAMPLE_KEYS).unwrap();
        match shared::ticket::verify(&keys, &raw, 1_700_000_000) {
            Ok(c) => {
                prop_assert_eq!(raw.as_str(), SAMPLE_TICKET);
                prop_assert_eq!(c.session.as_str(), "session-1");
            }
            Err(e) => {
                if raw.len() >= 16 {
                    prop_assert!(!e.to_string().contains(&raw), "{e}");
                }
            }
        }
    }

    /// `fuzz_connect_credentials`: any authorizer event's credential is read or refused with a
    /// message that quotes neither the query's nor the header's values.
    #[test]
    fn fuzz_connect_credentials(
        v in event("authorizer/connect-request.json", &["queryStringParameters", "ticket", "token", "headers", "Sec-WebSocket-Protocol", "multiValueHeaders"]),
    ) {
        if let Ok(ev) = serde_json::from_value::<ApiGatewayCustomAuthorizerRequestTypeRequest>(v) {
            match shared::ticket::presented::presented(&ev) {
                Ok(p) => {
                    if let Some(shared::ticket::Credential::Ticket(t) | shared::ticket::Credential::Jwt(t)) = p.credential {
                        prop_assert!(!t.contains(','));
                    }
                }
                Err(msg) => prop_assert!(!msg.contains(SAMPLE_TICKET), "{msg}"),
            }
        }
    }

    /// `fuzz_websocket_events`: any `$connect`/`$default`/`$disconnect` event yields valid ids and
    /// connection id or an `IdError` (the handlers' 400), and the authorizer context's limits or
    /// none (then the tenant row is read); the forwarded frame is JSON carrying the message as sent.
    #[test]
    fn fuzz_websocket_events(
        v in prop_oneof![
            event("connect/connect.json", WS_KEYS),
            event("message/message.json", WS_KEYS),
            event("disconnect/disconnect.json", WS_KEYS),
        ],
    ) {
        if let Ok(ev) = serde_json::from_value::<ApiGatewayWebsocketProxyRequest>(v) {
            match context::websocket_ids(&ev) {
                Ok((t, s, c)) => {
                    prop_assert!(valid_ids(&t, &s));
                    prop_assert_eq!(ConnectionId::parse(c.as_str()), Ok(c.clone()));
                }
                Err(e) => prop_assert!(!e.to_string().is_empty()),
            }
            let _ = context::ids(&ev.request_context.authorizer.fields);
            let _ = context::limits(&ev.request_context.authorizer.fields);
            let body = ev.body.clone().unwrap_or_default();
            let from = ev.request_context.connection_id.clone().unwrap_or_default();
            let frame: Value = serde_json::from_str(&message::forward_frame(&from, &body)).unwrap();
            prop_assert_eq!(frame["message"].as_str(), Some(body.as_str()));
        }
    }

    /// `fuzz_session_api_requests`: any HTTP API (payload 2.0) event yields valid ids or the 400
    /// answer naming the problem; any path is routed or not without a panic.
    #[test]
    fn fuzz_session_api_requests(
        v in prop_oneof![
            event("session-api/put.json", &["queryStringParameters", "tenantId", "sessionId", "body", "rawPath", "requestContext", "http", "method"]),
            event("session-api/get.json", &["queryStringParameters", "tenantId", "sessionId", "body"]),
        ],
        body in proptest::option::of(prop_oneof![
            fuzz::text(),
            fuzz::json_with_keys(&["tenantId", "sessionId", "subject"]).prop_map(|v| v.to_string()),
        ]),
    ) {
        if let Ok(mut ev) = serde_json::from_value::<ApiGatewayV2httpRequest>(v) {
            if body.is_some() {
                ev.body = body;
            }
            let _ = session_api::route(ev.raw_path.as_deref().unwrap_or(""));
            match session_api::target(&ev, None, "tenantId") {
                Ok(target) => {
                    let s = target.session.unwrap_or_else(|| SessionId::parse("generated").unwrap());
                    prop_assert!(valid_ids(&target.tenant, &s));
                    if let Some(subject) = &target.subject {
                        prop_assert!(shared::ticket::check_subject(subject).is_ok());
                    }
                }
                Err(answer) => prop_assert_eq!(answer.status, 400),
            }
        }
    }

    /// `fuzz_stream_records`: any DynamoDB stream event is read record by record: a TTL removal's
    /// old image yields a valid tenant and its connection ids, or a reason (logged, acknowledged).
    #[test]
    fn fuzz_stream_records(
        v in event("ttl-sweeper/ttl-expiry.json", &["Records", "eventName", "userIdentity", "type", "principalId", "dynamodb", "OldImage", "tenantId", "connectionIds", "S", "SS", "N"]),
    ) {
        if let Ok(ev) = serde_json::from_value::<StreamEvent>(v) {
            for r in &ev.records {
                let _ = stream::is_ttl_removal(r);
                match stream::expired_session(r) {
                    Ok((t, _sid, _ids)) => prop_assert_eq!(TenantId::parse(t.as_str()), Ok(t.clone())),
                    Err(reason) => prop_assert!(!reason.is_empty()),
                }
            }
        }
    }

    /// `fuzz_eventbridge_events`: any EventBridge event, through the example processors, resolves
    /// to a removal with a non-empty resource id or to an outcome acknowledged without a call.
    #[test]
    fn fuzz_eventbridge_events(
        v in prop_oneof![
            event("token-remover/emr-terminated.json", &["source", "detail-type", "detail", "state", "name", "clusterId"]),
            event("token-remover/emr-running.json", &["source", "detail-type", "detail", "state"]),
            event("token-remover/unrelated-source.json", &["source", "detail-type", "detail"]),
        ],
    ) {
        let processors = Processors::parse(PROCESSORS).unwrap();
        if let Ok(ev) = serde_json::from_value::<EventBridgeEvent<Value>>(v) {
            match token_remover::resolve(&processors, ev) {
                Ok(Resolved::Remove { resource_id, .. }) => prop_assert!(!resource_id.is_empty()),
                Ok(Resolved::Done(o)) => {
                    let removed = matches!(o, Outcome::Removed { .. });
                    prop_assert!(!removed, "{:?}", o);
                }
                Err(e) => prop_assert!(!e.to_string().is_empty()),
            }
        }
    }

    /// `fuzz_processor_config`: any `TOKEN_REMOVER_PROCESSORS` text (arbitrary, or the example
    /// with lines mutated, or arbitrary JSON) is accepted or refused with
    /// `ConfigError::Invalid` naming the variable; accepted predicates evaluate on any event.
    #[test]
    fn fuzz_processor_config(
        text in prop_oneof![
            fuzz::text(),
            fuzz::mutated_text(PROCESSORS),
            fuzz::mutated(serde_json::json!({"processors": [{"source": "aws.emr",
                "detail_type": "EMR Cluster State Change", "resource_id": "detail.clusterId",
                "when": {"all": [{"path": "detail.state", "in": ["TERMINATED"]},
                    {"not": {"path": "detail.name", "contains": "debug"}},
                    {"any": [{"path": "detail.x", "exists": false}, {"path": "a", "equals": 1}]}]}}]}))
                .prop_map(|v| v.to_string()),
            fuzz::json_with_keys(&["processors", "source", "detail_type", "resource_id", "when", "all", "any", "not", "path", "equals", "in", "exists"]).prop_map(|v| v.to_string()),
        ],
        events in proptest::collection::vec(fuzz::json_with_keys(&["detail", "state", "name", "clusterId", "a"]), 1..3),
    ) {
        let vars = Vars::from_pairs([(token_remover::PROCESSORS_VAR, text.as_str())]);
        match token_remover::Config::from_vars(&vars) {
            Ok(config) => {
                for p in &config.processors.0 {
                    prop_assert!(!p.source.is_empty() && !p.resource_id.is_empty());
                    if let Some(when) = &p.when {
                        for e in &events {
                            let _ = when.eval(e);
                        }
                    }
                }
            }
            Err(ConfigError::Invalid { var, reason, .. }) => {
                prop_assert_eq!(var, token_remover::PROCESSORS_VAR);
                prop_assert!(!reason.is_empty());
            }
            Err(ConfigError::Missing { .. }) => prop_assert!(text.trim().is_empty()),
        }
    }
}

const PROCESSORS: &str = include_str!("../../functions/token-remover/processors.example.yaml");

/// The seeds themselves: each sample event is accepted, so mutations start from valid input.
#[test]
fn sample_events_are_accepted_as_they_are() {
    let ev: ApiGatewayCustomAuthorizerRequestTypeRequest =
        serde_json::from_value(sample("authorizer/connect-request.json")).unwrap();
    assert!(authorizer::request_ids(&ev).is_ok());
    let ev: ApiGatewayV2httpRequest =
        serde_json::from_value(sample("session-api/put.json")).unwrap();
    assert!(session_api::target(&ev, None, "tenantId").is_ok());
    let ev: StreamEvent = serde_json::from_value(sample("ttl-sweeper/ttl-expiry.json")).unwrap();
    assert!(stream::expired_session(&ev.records[0]).is_ok());
    let ev: EventBridgeEvent<Value> =
        serde_json::from_value(sample("token-remover/emr-terminated.json")).unwrap();
    let processors = Processors::parse(PROCESSORS).unwrap();
    assert!(matches!(
        token_remover::resolve(&processors, ev).unwrap(),
        Resolved::Remove { .. }
    ));
}

/// The properties are not vacuous: most mutated sample events still deserialize, so the handlers'
/// parsing (not only serde's) is what gets exercised, and both acceptance and refusal occur.
#[test]
fn mutated_events_mostly_reach_the_handlers_parsing() {
    use proptest::strategy::ValueTree;
    use proptest::test_runner::TestRunner;
    let mut runner = TestRunner::deterministic();
    let mut draw = |path: &str| -> Vec<Value> {
        let s = fuzz::mutated(sample(path));
        (0..200)
            .map(|_| s.new_tree(&mut runner).unwrap().current())
            .collect()
    };
    let events: Vec<ApiGatewayWebsocketProxyRequest> = draw("connect/connect.json")
        .into_iter()
        .filter_map(|v| serde_json::from_value(v).ok())
        .collect();
    let accepted = events
        .iter()
        .filter(|e| context::websocket_ids(e).is_ok())
        .count();
    eprintln!("{} of 200 deserialized", events.len());
    assert!(events.len() > 50, "{} of 200 deserialized", events.len());
    eprintln!("{accepted} of {} accepted", events.len());
    assert!(
        accepted > 20 && accepted < events.len(),
        "{accepted} of {} accepted",
        events.len()
    );
    let events: Vec<ApiGatewayV2httpRequest> = draw("session-api/put.json")
        .into_iter()
        .filter_map(|v| serde_json::from_value(v).ok())
        .collect();
    let accepted = events
        .iter()
        .filter(|e| session_api::target(e, None, "tenantId").is_ok())
        .count();
    eprintln!("{} of 200 deserialized", events.len());
    assert!(events.len() > 50, "{} of 200 deserialized", events.len());
    eprintln!("{accepted} of {} accepted", events.len());
    assert!(
        accepted > 20 && accepted < events.len(),
        "{accepted} of {} accepted",
        events.len()
    );
    let events: Vec<StreamEvent> = draw("ttl-sweeper/ttl-expiry.json")
        .into_iter()
        .filter_map(|v| serde_json::from_value(v).ok())
        .collect();
    eprintln!("{} of 200 deserialized", events.len());
    assert!(events.len() > 50, "{} of 200 deserialized", events.len());
    let events: Vec<EventBridgeEvent<Value>> = draw("token-remover/emr-terminated.json")
        .into_iter()
        .filter_map(|v| serde_json::from_value(v).ok())
        .collect();
    eprintln!("{} of 200 deserialized", events.len());
    assert!(events.len() > 50, "{} of 200 deserialized", events.len());
}
