//! The TTL sweeper on the session stream: only TTL deletions count, release is exactly once
//! (redelivery is harmless), connections are closed, and failures are reported per record.

use aws_lambda_events::dynamodb::Event;
use serde_json::{json, Value};

use crate::ws_support::*;

const T: &str = "tenant-1";

/// Deletes a session row as DynamoDB's TTL does: no release (the stream record carries it).
async fn delete_session_row(w: &World, t: &str, s: &str) {
    w.deps()
        .dynamo
        .delete_item()
        .table_name(&w.deps().tables.sessions)
        .set_key(Some(shared::session::store::key(
            &t.parse().unwrap(),
            &s.parse().unwrap(),
        )))
        .send()
        .await
        .unwrap();
}

fn event(records: Vec<Value>) -> Event {
    typed(json!({ "Records": records }))
}

#[tokio::test]
async fn a_ttl_deletion_releases_and_closes_once_even_when_redelivered() {
    let w = World::new().await;
    w.put_tenant(T, MEDIUM).await;
    w.put_session(T, "s1").await;
    w.put_session(T, "s2").await;
    for c in ["a", "b"] {
        assert_eq!(w.connect(T, "s1", c, &MEDIUM).await.status_code, 200);
    }
    assert_eq!(w.connect(T, "s2", "keep", &MEDIUM).await.status_code, 200);
    assert_eq!(w.count(T).await, Some(3));
    // DynamoDB's TTL deletes s1; its stream record carries the old image.
    delete_session_row(&w, T, "s1").await;
    let ev = event(vec![ttl_record(T, "s1", &["a", "b"], "100")]);
    w.env.counter.reset();
    let r = ttl_sweeper::handle(w.deps(), &w.sweeper, ev.clone()).await;
    assert!(r.batch_item_failures.is_empty());
    assert_eq!(
        w.env.counter.by_operation(),
        [("TransactWriteItems".to_string(), 1)].into(),
        "the sweep's tombstone, the session count and the connections' count in one transaction (decision 2206)"
    );
    assert_eq!(
        w.env.counter.units().write,
        6.0,
        "3 items (tombstone, session count, `{{tenant}}`), 2 WCU each"
    );
    let sessions = format!("{T}:sessions");
    assert_eq!(w.count(T).await, Some(1));
    assert_eq!(w.count(&sessions).await, Some(1), "s1 given back, s2 held");
    assert_eq!(w.closed(), ["a", "b"]);
    // Redelivered: nothing more is released; closing gone connections is fine.
    let r = ttl_sweeper::handle(w.deps(), &w.sweeper, ev).await;
    assert!(r.batch_item_failures.is_empty());
    assert_eq!(w.count(T).await, Some(1));
    assert_eq!(
        w.count(&sessions).await,
        Some(1),
        "the session given back once"
    );
    // The $disconnects that follow the closes change nothing either.
    assert_eq!(w.disconnect(T, "s1", "a").await.status_code, 200);
    assert_eq!(w.count(T).await, Some(1));
}

/// Found by the fault-schedule simulation (seed 0 of the reservation mutations' shape): a record
/// redelivered a minute after its first delivery applied sent the same `ClientRequestToken` with a
/// tombstone whose TTL had moved with the clock, and DynamoDB refused it as
/// `IdempotentParameterMismatch`: the sweep failed, and DynamoDB Streams would retry the record
/// (holding its shard) until the token's 10 minutes passed. The tombstone's TTL now follows the
/// record's deletion time, so every delivery of one record sends the same transaction.
#[tokio::test]
async fn a_record_redelivered_after_the_clock_moved_is_answered_already_swept() {
    let w = World::new().await;
    w.put_tenant(T, MEDIUM).await;
    w.put_session(T, "s1").await;
    assert_eq!(w.connect(T, "s1", "a", &MEDIUM).await.status_code, 200);
    delete_session_row(&w, T, "s1").await;
    let ev = event(vec![ttl_record(T, "s1", &["a"], "100")]);
    let r = ttl_sweeper::handle(w.deps(), &w.sweeper, ev.clone()).await;
    assert!(r.batch_item_failures.is_empty());
    assert_eq!(w.count(T).await, Some(0));
    w.env.clock.advance(std::time::Duration::from_secs(56));
    let r = ttl_sweeper::handle(w.deps(), &w.sweeper, ev).await;
    assert!(
        r.batch_item_failures.is_empty(),
        "a redelivery after the clock moved must not fail"
    );
    assert_eq!(w.count(T).await, Some(0), "released once");
}

#[tokio::test]
async fn other_records_are_ignored() {
    let w = World::new().await;
    w.put_tenant(T, MEDIUM).await;
    w.put_session(T, "s1").await;
    assert_eq!(w.connect(T, "s1", "a", &MEDIUM).await.status_code, 200);
    let ttl = ttl_record(T, "s1", &["a"], "1");
    let mut user_delete = ttl.clone();
    user_delete.as_object_mut().unwrap().remove("userIdentity");
    let mut modify = ttl.clone();
    modify["eventName"] = json!("MODIFY");
    let mut other_principal = ttl.clone();
    other_principal["userIdentity"]["principalId"] = json!("someone.example.com");
    // DynamoDB Local's shape for a TTL deletion (no userIdentity, odd eventName) is not AWS's.
    let mut local_shape = ttl.clone();
    local_shape["eventName"] = json!("UNKNOWN_TO_SDK_VERSION");
    w.env.counter.reset();
    let r = ttl_sweeper::handle(
        w.deps(),
        &w.sweeper,
        event(vec![user_delete, modify, other_principal, local_shape]),
    )
    .await;
    assert!(r.batch_item_failures.is_empty());
    assert_eq!(w.env.counter.total(), 0);
    assert_eq!(w.count(T).await, Some(1));
    assert!(w.api.received().is_empty());
}

#[tokio::test]
async fn failures_are_reported_per_record() {
    let w = World::new().await;
    w.put_tenant(T, MEDIUM).await;
    w.put_session(T, "s1").await;
    assert_eq!(w.connect(T, "s1", "a", &MEDIUM).await.status_code, 200);
    // A sweeper whose Management API is unreachable cannot close: that record fails.
    let dead = ttl_sweeper::init(
        &w.function_deps(&[("TURNSTILE_MANAGEMENT_ENDPOINT", "http://127.0.0.1:9")]),
    )
    .await
    .unwrap();
    let ev = event(vec![
        ttl_record(T, "empty", &[], "200"),
        ttl_record(T, "s1", &["a"], "201"),
    ]);
    let r = ttl_sweeper::handle(w.deps(), &dead, ev.clone()).await;
    let failed: Vec<_> = r
        .batch_item_failures
        .iter()
        .map(|f| f.item_identifier.clone().unwrap())
        .collect();
    assert_eq!(failed, vec!["201"]);
    // Its socket may be open: nothing was released (decision 2208). The retry (with a working
    // API) closes it, then releases it once; the empty session's record was done already.
    assert_eq!(w.count(T).await, Some(1));
    let r = ttl_sweeper::handle(w.deps(), &w.sweeper, ev).await;
    assert!(r.batch_item_failures.is_empty());
    assert_eq!(w.count(T).await, Some(0));
    assert_eq!(w.api.received_by("DELETE").len(), 1);
    // The response serialises as Lambda expects.
    let v = serde_json::to_value(
        &ttl_sweeper::handle(
            w.deps(),
            &dead,
            event(vec![ttl_record(T, "s1", &["a"], "7")]),
        )
        .await,
    )
    .unwrap();
    assert_eq!(v["batchItemFailures"][0]["itemIdentifier"], "7");
}

#[tokio::test]
async fn the_sample_stream_event_runs_as_is() {
    let w = World::new().await;
    w.put_tenant("tenant-1", SMALL).await;
    w.put_sample_session().await;
    let r = connect::handle(w.deps(), &w.connect, typed(sample("connect/connect.json")))
        .await
        .unwrap();
    assert_eq!(r.status_code, 200);
    // The record's second connection, and the deletion the record reports (DynamoDB's TTL).
    let r = w
        .connect("tenant-1", "session-1", "Nx0QRcOFvHcXyZw=", &SMALL)
        .await;
    assert_eq!(r.status_code, 200);
    assert_eq!(w.count("tenant-1").await, Some(2));
    delete_session_row(&w, "tenant-1", "session-1").await;
    let r = ttl_sweeper::handle(
        w.deps(),
        &w.sweeper,
        typed(sample("ttl-sweeper/ttl-expiry.json")),
    )
    .await;
    assert!(r.batch_item_failures.is_empty());
    assert_eq!(w.count("tenant-1").await, Some(0));
    // Only the TTL record's two connections were closed (not the user delete's nor the update's).
    assert_eq!(w.closed(), ["Nx0MPcOFvHcCIhw=", "Nx0QRcOFvHcXyZw="]);
}
