//! The per-tenant session cap (`maxSessions`, decision 2204) against DynamoDB
//! Local: concurrent `PUT`s never create more sessions than the cap, `DELETE` and a TTL expiry
//! (through the sweeper, redelivered) each give one back exactly once, and the reconciler repairs a
//! count that leaked high, which a late sweep then does not lower again.

use std::time::Duration;

use futures::future::join_all;
use serde_json::{json, Value};
use shared::clock::Clock;
use shared::ids::{SessionId, TenantId};
use shared::reconcile::{Outcome, Report};
use shared::tenant::Limits;

use crate::ws_support::*;

const T: &str = "tenant-cap";

fn limits(max_sessions: u64) -> Limits {
    Limits::example(100, 100, 10, 100, 300, 60).with_max_sessions(max_sessions)
}

fn sessions_key() -> String {
    format!("{T}:sessions")
}

/// `PUT /session` for a new session (no id: the API makes one); (status, body).
async fn put_new(w: &World) -> (i64, Value) {
    let (status, body) = w.session_call("PUT", &[("tenantId", T)], None).await;
    (status, serde_json::from_str(&body).unwrap_or(Value::Null))
}

async fn session_rows(w: &World) -> usize {
    let out = w
        .deps()
        .dynamo
        .query()
        .table_name(&w.deps().tables.sessions)
        .key_condition_expression("tenantId = :t")
        .expression_attribute_values(":t", shared::dynamo::item::s(T))
        .consistent_read(true)
        .send()
        .await
        .unwrap();
    out.items().len()
}

/// Deletes a session row as DynamoDB's TTL (or a lost release) does: nothing given back.
async fn drop_row(w: &World, s: &str) {
    let t = TenantId::parse(T).unwrap();
    let sid = SessionId::parse(s).unwrap();
    assert!(shared::session::store::delete(w.deps(), &t, &sid)
        .await
        .unwrap()
        .is_some());
}

async fn sweep(w: &World, s: &str, seq: &str, deleted_at_secs: i64) {
    let mut record = ttl_record(T, s, &[], seq);
    record["dynamodb"]["ApproximateCreationDateTime"] = json!(deleted_at_secs);
    let ev: aws_lambda_events::dynamodb::Event = typed(json!({ "Records": [record] }));
    let r = ttl_sweeper::handle(w.deps(), &w.sweeper, ev).await;
    assert!(r.batch_item_failures.is_empty());
}

/// 30 concurrent `PUT`s for new sessions against `maxSessions = 5`: exactly 5 created, 25 refused
/// with a 429 naming `maxSessions`, and the count is the rows. The cost of one create is measured.
#[tokio::test]
async fn concurrent_session_puts_never_exceed_the_cap() {
    let w = World::new().await;
    w.put_tenant(T, limits(5)).await;
    // One create, measured alone (the tenant cache is warmed by it; the second is the warm cost).
    assert_eq!(put_new(&w).await.0, 200);
    w.env.counter.reset();
    assert_eq!(put_new(&w).await.0, 200);
    let ops = w.env.counter.by_operation();
    let units = w.env.counter.units();
    eprintln!("SESSION_CAP one new session, warm: {ops:?}, {units:?}");
    assert_eq!(ops, [("TransactWriteItems".to_string(), 1)].into());
    assert_eq!(units.write, 4.0, "a 2-item transaction: 2 WCU per item");

    let answers = join_all((0..30).map(|_| put_new(&w))).await;
    let ok = answers.iter().filter(|(s, _)| *s == 200).count();
    let refused: Vec<&Value> = answers
        .iter()
        .filter(|(s, _)| *s == 429)
        .map(|(_, b)| b)
        .collect();
    assert_eq!(ok, 3, "5 in all, 2 made before");
    assert_eq!(refused.len(), 27);
    for b in &refused {
        assert_eq!(b["violated-policies"], json!(["maxSessions"]), "{b}");
    }
    assert_eq!(w.count(&sessions_key()).await, Some(5));
    assert_eq!(session_rows(&w).await, 5);

    // The answer: 429 problem+json, Retry-After (a pace), RateLimit-Policy with the cap.
    w.env.counter.reset();
    let ev = session_event("PUT", "/session", &[("tenantId", T)], None);
    let res = session_api::handle(w.deps(), &w.session_api, ev)
        .await
        .unwrap();
    assert_eq!(res.status_code, 429);
    let header = |n: &str| {
        res.headers
            .get(n)
            .and_then(|v| v.to_str().ok())
            .map(str::to_string)
    };
    assert_eq!(header("retry-after").as_deref(), Some("10"));
    assert!(
        header("ratelimit-policy").is_some_and(|p| p.contains("\"maxSessions\";q=5")),
        "{:?}",
        res.headers
    );
    let units = w.env.counter.units();
    eprintln!("SESSION_CAP one refused create: {units:?}");
    assert_eq!(w.env.counter.total(), 1, "the cancelled transaction only");
    // Refreshing a live session is never refused, and costs what it did.
    let live = answers.iter().find(|(s, _)| *s == 200).unwrap();
    let sid = live.1["sessionId"].as_str().unwrap();
    w.env.counter.reset();
    let (status, body) = w
        .session_call("PUT", &[("tenantId", T), ("sessionId", sid)], None)
        .await;
    assert_eq!(status, 200, "{body}");
    assert_eq!(
        w.env.counter.by_operation(),
        [("UpdateItem".to_string(), 1)].into()
    );
    // A named session that does not exist is a create: refused too.
    let (status, _) = w
        .session_call("PUT", &[("tenantId", T), ("sessionId", "named")], None)
        .await;
    assert_eq!(status, 429);
    assert_eq!(w.count(&sessions_key()).await, Some(5));
}

/// `DELETE` gives its session back once (a second `DELETE` is a 404 and gives nothing); a TTL
/// expiry gives one back through the sweeper, once however often the record is delivered.
#[tokio::test]
async fn delete_and_ttl_expiry_each_give_a_session_back_once() {
    let w = World::new().await;
    w.put_tenant(T, limits(2)).await;
    w.put_session(T, "s1").await;
    w.put_session(T, "s2").await;
    assert_eq!(put_new(&w).await.0, 429);
    assert_eq!(w.count(&sessions_key()).await, Some(2));

    w.env.counter.reset();
    let (status, _) = w
        .session_call("DELETE", &[("tenantId", T), ("sessionId", "s1")], None)
        .await;
    assert_eq!(status, 200);
    let units = w.env.counter.units();
    eprintln!(
        "SESSION_CAP DELETE of a session without connections: {:?}, {units:?}",
        w.env.counter.by_operation()
    );
    // The row read, then deleted with its unit of the count in one transaction with a request
    // token (exactly once under the SDK's retries: decision 2206).
    assert_eq!(
        w.env.counter.by_operation(),
        [
            ("GetItem".to_string(), 1),
            ("TransactWriteItems".to_string(), 1)
        ]
        .into()
    );
    assert_eq!(units.write, 4.0, "2 items, 2 WCU each (transactional)");
    assert_eq!(w.count(&sessions_key()).await, Some(1));
    let (status, _) = w
        .session_call("DELETE", &[("tenantId", T), ("sessionId", "s1")], None)
        .await;
    assert_eq!(status, 404);
    assert_eq!(w.count(&sessions_key()).await, Some(1));
    w.put_session(T, "s3").await;
    assert_eq!(put_new(&w).await.0, 429);

    // DynamoDB's TTL deletes s2; its record arrives twice.
    drop_row(&w, "s2").await;
    let now = w.env.clock.now().as_secs();
    w.env.counter.reset();
    sweep(&w, "s2", "200", now).await;
    eprintln!(
        "SESSION_CAP TTL sweep of a session without connections: {:?}, {:?}",
        w.env.counter.by_operation(),
        w.env.counter.units()
    );
    assert_eq!(
        w.env.counter.by_operation(),
        [("TransactWriteItems".to_string(), 1)].into(),
        "the tombstone and the session count in one transaction (decision 2206)"
    );
    assert_eq!(
        w.env.counter.units().write,
        4.0,
        "2 items, 2 WCU each (transactional)"
    );
    assert_eq!(w.count(&sessions_key()).await, Some(1));
    sweep(&w, "s2", "200", now).await;
    assert_eq!(
        w.count(&sessions_key()).await,
        Some(1),
        "redelivered: nothing"
    );
    assert_eq!(put_new(&w).await.0, 200);
    assert_eq!(w.count(&sessions_key()).await, Some(2));
    assert_eq!(session_rows(&w).await, 2);
}

async fn reconcile(w: &World) -> Report {
    let t = TenantId::parse(T).unwrap();
    reconcile_tenant(w.deps(), &t, &w.api.url(), false, Duration::ZERO).await
}

/// A give-back that never happened (a `DELETE` that died after its `DeleteItem`, a sweep that
/// ended in the DLQ) leaves the count high: the reconciler brings it to the rows, a late sweep of
/// that deletion then subtracts nothing, and the tenant may create up to its cap again.
#[tokio::test]
async fn the_reconciler_repairs_a_leaked_session_count() {
    let w = World::new().await;
    w.put_tenant(T, limits(3)).await;
    for s in ["s1", "s2", "s3"] {
        w.put_session(T, s).await;
    }
    drop_row(&w, "s1").await;
    drop_row(&w, "s2").await;
    assert_eq!(w.count(&sessions_key()).await, Some(3));
    assert_eq!(put_new(&w).await.0, 429, "the leak refuses");

    let report = reconcile(&w).await;
    let r = &report.tenants[0];
    eprintln!("{}", serde_json::to_string(&report).unwrap());
    assert_eq!(
        (r.sessions_counted, r.sessions_truth),
        (Some(3), 1),
        "{r:?}"
    );
    assert_eq!(r.sessions, Outcome::Repaired { from: 3, to: 1 });
    assert_eq!(w.count(&sessions_key()).await, Some(1));

    // s1's sweep turns up after the repair: its deletion is older than the truth.
    let now = w.env.clock.now().as_secs();
    sweep(&w, "s1", "300", now - 10).await;
    assert_eq!(w.count(&sessions_key()).await, Some(1));
    assert_eq!(put_new(&w).await.0, 200);
    assert_eq!(put_new(&w).await.0, 200);
    assert_eq!(put_new(&w).await.0, 429);
    assert_eq!(w.count(&sessions_key()).await, Some(3));
    let again = reconcile(&w).await;
    assert_eq!(again.tenants[0].sessions, Outcome::Consistent);
}
