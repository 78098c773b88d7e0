//! The local DynamoDB Streams bridge against DynamoDB Local's real stream and real TTL deletions.

use std::time::{Duration, Instant};

use aws_sdk_dynamodb::types::AttributeValue;
use shared::clock::Clock;
use shared::table::TableKind;
use turnstile_local::stream_bridge::{local_streams_client, StartAt, StreamBridge};
use turnstile_tests::TestEnv;

fn s(v: &str) -> AttributeValue {
    AttributeValue::S(v.into())
}

#[tokio::test]
async fn ttl_deletions_arrive_shaped_as_aws_delivers_them() {
    let env = TestEnv::for_ttl(&[TableKind::Sessions]).await;
    let table = &env.deps.tables.sessions;
    let db = &env.deps.dynamo;
    let mut bridge = StreamBridge::new(
        local_streams_client(&env.endpoint),
        table,
        StartAt::TrimHorizon,
    )
    .await
    .unwrap();

    let past = (env.clock.now().as_secs() - 10).to_string();
    db.put_item()
        .table_name(table)
        .item("tenantId", s("acme"))
        .item("sessionId", s("expired"))
        .item("sessionTTL", AttributeValue::N(past))
        .item(
            "connectionIds",
            AttributeValue::Ss(vec!["c1".into(), "c2".into()]),
        )
        .send()
        .await
        .unwrap();
    db.put_item()
        .table_name(table)
        .item("tenantId", s("acme"))
        .item("sessionId", s("deleted-by-user"))
        .send()
        .await
        .unwrap();
    db.delete_item()
        .table_name(table)
        .key("tenantId", s("acme"))
        .key("sessionId", s("deleted-by-user"))
        .send()
        .await
        .unwrap();

    // DynamoDB Local's TTL sweeper runs on the wall clock (about once a second); no injected clock
    // can move it, so this test polls the stream for a bounded time instead.
    let deadline = Instant::now() + Duration::from_secs(20);
    let mut records = Vec::new();
    while Instant::now() < deadline {
        records.extend(bridge.poll().await.unwrap());
        let ttl_seen = records
            .iter()
            .any(|r| r["dynamodb"]["OldImage"]["sessionId"]["S"] == "expired");
        if ttl_seen {
            break;
        }
        tokio::time::sleep(Duration::from_millis(250)).await;
    }
    let event = turnstile_local::stream_bridge::to_event(records).unwrap();
    let session_of = |r: &aws_lambda_events::event::dynamodb::EventRecord| -> String {
        let keys: std::collections::HashMap<String, serde_json::Value> =
            serde_dynamo::from_item(r.change.keys.clone()).unwrap();
        keys["sessionId"].as_str().unwrap_or_default().to_string()
    };
    let mut seen: Vec<(String, String)> = event
        .records
        .iter()
        .map(|r| (session_of(r), r.event_name.clone()))
        .collect();
    seen.sort();
    let want = [
        ("deleted-by-user", "INSERT"),
        ("deleted-by-user", "REMOVE"),
        ("expired", "INSERT"),
        ("expired", "REMOVE"),
    ]
    .map(|(a, b)| (a.to_string(), b.to_string()));
    assert_eq!(seen, want);

    let find = |session: &str| {
        event
            .records
            .iter()
            .find(|r| r.event_name == "REMOVE" && session_of(r) == session)
            .unwrap()
    };
    assert!(
        find("deleted-by-user").user_identity.is_none(),
        "a user's DeleteItem carries no identity"
    );
    let ttl = find("expired");
    let who = ttl
        .user_identity
        .as_ref()
        .expect("TTL deletions carry the service identity");
    assert_eq!(who.type_, "Service");
    assert_eq!(who.principal_id, "dynamodb.amazonaws.com");
    let old: std::collections::HashMap<String, serde_json::Value> =
        serde_dynamo::from_item(ttl.change.old_image.clone()).unwrap();
    assert_eq!(old["connectionIds"], serde_json::json!(["c1", "c2"]));
    assert!(ttl.change.sequence_number.is_some());
    assert!(ttl
        .event_source_arn
        .as_deref()
        .unwrap_or("")
        .contains(table.as_str()));
}
