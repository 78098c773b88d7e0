//! The session HTTP API: create/refresh, get, delete (closing and releasing connections), replace
//! of an expired session, every bad input as a precise 4xx, and the call budgets.

use std::time::Duration;

use serde_json::Value;

use crate::ws_support::*;

const T: &str = "tenant-1";

#[tokio::test]
async fn put_creates_then_refreshes_and_get_returns_the_connections() {
    let w = World::new().await;
    w.put_tenant(T, SMALL).await;
    let now = shared::clock::Clock::now(&w.env.clock).as_secs();
    w.env.counter.reset();
    let s = w.put_session(T, "s1").await;
    assert_eq!(
        w.env.counter.total(),
        2,
        "cold tenant cache: GetItem + UpdateItem"
    );
    assert_eq!(s["tenantId"], T);
    assert_eq!(s["sessionId"], "s1");
    assert_eq!(s["sessionTTL"], now + 200);
    assert_eq!(s["connectionIds"], Value::Array(vec![]));

    w.env.clock.advance(Duration::from_secs(50));
    w.env.counter.reset();
    let s = w.put_session(T, "s1").await;
    assert_eq!(w.env.counter.total(), 1, "warm: UpdateItem only");
    assert_eq!(s["sessionTTL"], now + 250);

    assert_eq!(w.connect(T, "s1", "c1", &SMALL).await.status_code, 200);
    w.env.counter.reset();
    let (status, body) = w
        .session_call("GET", &[("tenantId", T), ("sessionId", "s1")], None)
        .await;
    assert_eq!(status, 200, "{body}");
    assert_eq!(w.env.counter.total(), 1);
    let s: Value = serde_json::from_str(&body).unwrap();
    assert_eq!(s["connectionIds"], serde_json::json!(["c1"]));
    // Refreshing keeps the connections.
    let s = w.put_session(T, "s1").await;
    assert_eq!(s["connectionIds"], serde_json::json!(["c1"]));
}

#[tokio::test]
async fn delete_closes_and_releases_every_connection() {
    let w = World::new().await;
    w.put_tenant(T, MEDIUM).await;
    w.put_session(T, "s1").await;
    w.put_session(T, "s2").await;
    for c in ["c1", "c2", "c3"] {
        assert_eq!(w.connect(T, "s1", c, &MEDIUM).await.status_code, 200);
    }
    assert_eq!(w.connect(T, "s2", "other", &MEDIUM).await.status_code, 200);
    assert_eq!(w.count(T).await, Some(4));
    w.env.counter.reset();
    let (status, body) = w
        .session_call("DELETE", &[("tenantId", T), ("sessionId", "s1")], None)
        .await;
    assert_eq!(status, 200, "{body}");
    assert_eq!(
        w.env.counter.total(),
        2,
        "DeleteItem + one UpdateItem on the tenant's count: {:?}",
        w.env.counter.by_operation()
    );
    let closed: Vec<String> = w
        .api
        .received_by("DELETE")
        .into_iter()
        .map(|r| r.connection_id)
        .collect();
    let mut closed_sorted = closed.clone();
    closed_sorted.sort();
    assert_eq!(closed_sorted, vec!["c1", "c2", "c3"]);
    assert_eq!(
        w.count(T).await,
        Some(1),
        "only s2's connection still holds capacity"
    );
    assert!(w.session(T, "s1").await.is_none());
    // The $disconnects API Gateway then sends change nothing.
    for c in ["c1", "c2", "c3"] {
        assert_eq!(w.disconnect(T, "s1", c).await.status_code, 200);
    }
    assert_eq!(w.count(T).await, Some(1));
    // Deleting again: 404.
    let (status, _) = w
        .session_call("DELETE", &[("tenantId", T), ("sessionId", "s1")], None)
        .await;
    assert_eq!(status, 404);
    // An empty session deletes in one call.
    w.put_session(T, "empty").await;
    w.env.counter.reset();
    let (status, _) = w
        .session_call("DELETE", &[("tenantId", T), ("sessionId", "empty")], None)
        .await;
    assert_eq!(status, 200);
    assert_eq!(w.env.counter.total(), 1);
}

#[tokio::test]
async fn put_over_an_expired_session_replaces_it_and_releases_its_stale_connections() {
    let w = World::new().await;
    w.put_tenant(T, SMALL).await;
    w.put_session(T, "s1").await;
    assert_eq!(w.connect(T, "s1", "stale", &SMALL).await.status_code, 200);
    w.env
        .clock
        .advance(Duration::from_secs(SMALL.session_ttl + 5));
    // GET sees it as gone although the row is still there.
    let (status, _) = w
        .session_call("GET", &[("tenantId", T), ("sessionId", "s1")], None)
        .await;
    assert_eq!(status, 404);
    let s = w.put_session(T, "s1").await;
    assert_eq!(s["connectionIds"], Value::Array(vec![]));
    assert_eq!(w.count(T).await, Some(0), "stale capacity released");
    let closed: Vec<String> = w
        .api
        .received_by("DELETE")
        .into_iter()
        .map(|r| r.connection_id)
        .collect();
    assert_eq!(closed, vec!["stale"]);
    assert_eq!(w.connect(T, "s1", "fresh", &SMALL).await.status_code, 200);
    assert_eq!(w.count(T).await, Some(1));
}

/// Every bad input is a precise 4xx naming the problem, and never reaches DynamoDB.
#[tokio::test]
async fn bad_input_is_a_precise_4xx() {
    let w = World::new().await;
    w.put_tenant(T, SMALL).await;
    let long = "s".repeat(4096);
    let ok: &[(&str, &str)] = &[("tenantId", T), ("sessionId", "s1")];
    struct Case<'a> {
        method: &'a str,
        path: &'a str,
        query: Vec<(&'a str, &'a str)>,
        body: Option<&'a str>,
        status: i64,
        message: &'a str,
        calls: u64,
    }
    let case =
        |method, path, query: &[(&'static str, &'static str)], body, status, message, calls| Case {
            method,
            path,
            query: query.to_vec(),
            body,
            status,
            message,
            calls,
        };
    let mut cases = vec![
        case("PUT", "/session", &[], None, 400, "tenantId is missing", 0),
        case(
            "PUT",
            "/session",
            &[("tenantId", T)],
            None,
            400,
            "sessionId is missing",
            0,
        ),
        case(
            "GET",
            "/session",
            &[("sessionId", "s1")],
            None,
            400,
            "tenantId is missing",
            0,
        ),
        case(
            "DELETE",
            "/session",
            &[("tenantId", T)],
            None,
            400,
            "sessionId is missing",
            0,
        ),
        case(
            "PUT",
            "/session",
            &[("tenantId", "a:b"), ("sessionId", "s1")],
            None,
            400,
            "tenantId contains ':'",
            0,
        ),
        case(
            "PUT",
            "/session",
            &[("tenantId", T), ("sessionId", "x:minute:1")],
            None,
            400,
            "sessionId contains ':'",
            0,
        ),
        case(
            "PUT",
            "/session",
            &[("tenantId", T), ("sessionId", "a b")],
            None,
            400,
            "sessionId contains ' '",
            0,
        ),
        case(
            "PUT",
            "/session",
            &[("tenantId", "ghost"), ("sessionId", "s1")],
            None,
            404,
            "tenant ghost does not exist",
            1,
        ),
        case(
            "GET",
            "/session",
            &[("tenantId", "ghost"), ("sessionId", "s1")],
            None,
            404,
            "does not exist",
            1,
        ),
        case(
            "GET",
            "/session",
            ok,
            None,
            404,
            "session s1 of tenant tenant-1 does not exist",
            1,
        ),
        case("DELETE", "/session", ok, None, 404, "does not exist", 1),
        case(
            "PUT",
            "/session",
            &[],
            Some("{not json"),
            400,
            "not valid JSON",
            0,
        ),
        case(
            "PUT",
            "/session",
            &[],
            Some("[1,2]"),
            400,
            "must be a JSON object",
            0,
        ),
        case(
            "PUT",
            "/session",
            &[],
            Some(r#"{"tenantId": 5}"#),
            400,
            "tenantId must be a string",
            0,
        ),
        case("POST", "/session", ok, None, 405, "POST is not allowed", 0),
        case("PATCH", "/session", ok, None, 405, "not allowed", 0),
        case(
            "GET",
            "/sessions",
            ok,
            None,
            404,
            "no route for /sessions",
            0,
        ),
        case("GET", "/", ok, None, 404, "no route", 0),
    ];
    let mut long_cases = vec![
        ("tenantId", long.clone(), "tenantId is 4096 characters long"),
        (
            "sessionId",
            long.clone(),
            "sessionId is 4096 characters long",
        ),
    ];
    // The query wins over a body that names other ids.
    cases.push(Case {
        method: "PUT",
        path: "/session",
        query: vec![("tenantId", T), ("sessionId", "s1")],
        body: Some(r#"{"sessionId": "ignored-query-wins"}"#),
        status: 200,
        message: "\"s1\"",
        calls: 2,
    });
    for c in &cases {
        w.env.counter.reset();
        let ev = session_event(c.method, c.path, &c.query, c.body);
        let (status, body) = w.session_raw(ev).await;
        assert_eq!(
            status, c.status,
            "{} {} {:?} {:?}: {body}",
            c.method, c.path, c.query, c.body
        );
        assert!(
            body.contains(c.message),
            "{} {:?}: {body}",
            c.method,
            c.query
        );
        assert_eq!(
            w.env.counter.total(),
            c.calls,
            "{} {:?} {:?}",
            c.method,
            c.query,
            c.body
        );
        if c.status >= 400 {
            let v: Value = serde_json::from_str(&body).expect("error bodies are JSON");
            assert!(v["message"].is_string());
        }
    }
    for (param, value, message) in long_cases.drain(..) {
        let mut q = vec![("tenantId", T), ("sessionId", "s1")];
        q.retain(|(k, _)| *k != param);
        q.push((param, value.as_str()));
        let (status, body) = w
            .session_raw(session_event("PUT", "/session", &q, None))
            .await;
        assert_eq!(status, 400);
        assert!(body.contains(message), "{body}");
    }
    // Ids in a JSON body work when the query has none.
    let (status, body) = w
        .session_raw(session_event(
            "PUT",
            "/prod/session",
            &[],
            Some(r#"{"tenantId":"tenant-1","sessionId":"from-body"}"#),
        ))
        .await;
    assert_eq!(status, 200, "{body}");
    assert!(w.session(T, "from-body").await.is_some());
}

#[tokio::test]
async fn the_sample_session_events_run_as_is() {
    let w = World::new().await;
    w.put_tenant("tenant-1", SMALL).await;
    for (file, status) in [
        ("put.json", 200),
        ("get.json", 200),
        ("delete.json", 200),
        ("get.json", 404),
    ] {
        let (got, body) = w
            .session_raw(typed(sample(&format!("session-api/{file}"))))
            .await;
        assert_eq!(got, status, "{file}: {body}");
    }
}
