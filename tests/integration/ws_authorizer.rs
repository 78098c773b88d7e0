//! The REQUEST authorizer: the AWS WebSocket sample's seven checks, expiry against the clock, and
//! its call budget.

use std::time::Duration;

use authorizer::Decision;
use shared::tenant::Limits;

use crate::ws_support::*;

const T: &str = "tenant-1";

fn denied(d: &Decision, needle: &str) -> bool {
    matches!(d, Decision::Deny(reason) if reason.contains(needle))
}

#[tokio::test]
async fn allow_carries_the_context_and_costs_two_calls_cold_one_warm() {
    let w = World::new().await;
    w.put_tenant(T, SMALL).await;
    w.put_session(T, "s1").await;
    let ev = w.authorizer_event(T, "s1").await;
    w.env.counter.reset();
    let r = authorizer::handle(w.deps(), &w.authorizer, ev)
        .await
        .unwrap();
    assert_eq!(authorizer::decision(&r), Decision::Allow);
    // The session API's PUT warmed nothing in the authorizer's own cache: this was cold.
    assert_eq!(
        w.env.counter.total(),
        2,
        "{:?}",
        w.env.counter.by_operation()
    );
    assert_eq!(r.context["tenantId"], T);
    assert_eq!(r.context["sessionId"], "s1");
    assert_eq!(r.context["tenantConnections"], 10);
    assert_eq!(r.context["sessionTTL"], 200);
    // The principal names the session by its fingerprint: session ids are not logged in clear.
    let fp = shared::ticket::fingerprint("s1");
    assert_eq!(
        r.principal_id.as_deref(),
        Some(format!("tenant-1/#{fp}").as_str())
    );
    assert_eq!(r.context["connectAuth"], "ticket");
    let arn = r.policy_document.statement[0].resource[0].clone();
    assert!(arn.ends_with("/production/$connect"), "{arn}");

    w.env.counter.reset();
    assert_eq!(w.authorize(T, "s1").await, Decision::Allow);
    assert_eq!(w.env.counter.total(), 1, "warm: one BatchGetItem");
    assert_eq!(w.env.counter.by_operation().get("BatchGetItem"), Some(&1));
}

#[tokio::test]
async fn unknown_tenant_missing_or_expired_session_are_denied() {
    let w = World::new().await;
    w.put_tenant(T, SMALL).await;
    assert!(denied(
        &w.authorize("ghost", "s1").await,
        "tenant ghost does not exist"
    ));
    assert!(denied(&w.authorize(T, "s1").await, "does not exist"));
    w.put_session(T, "s1").await;
    assert_eq!(w.authorize(T, "s1").await, Decision::Allow);
    // Expired but not deleted (DynamoDB deletes late): refused on the clock alone.
    w.env.clock.advance(Duration::from_secs(SMALL.session_ttl));
    assert!(w.session(T, "s1").await.is_some(), "the row is still there");
    assert!(denied(&w.authorize(T, "s1").await, "expired"));
}

#[tokio::test]
async fn each_of_the_four_limits_denies() {
    let w = World::new().await;
    // connectionsPerSession 2, tenantConnections 3, sessionPerMinute 3, tenantPerMinute 4.
    let limits = Limits::example(4, 3, 2, 3, 300, 60);
    w.put_tenant(T, limits).await;
    for s in ["a", "b", "c"] {
        w.put_session(T, s).await;
    }
    assert_eq!(w.connect(T, "a", "a1", &limits).await.status_code, 200);
    assert_eq!(w.connect(T, "a", "a2", &limits).await.status_code, 200);
    assert!(denied(&w.authorize(T, "a").await, "connectionsPerSession"));
    assert_eq!(w.connect(T, "b", "b1", &limits).await.status_code, 200);
    assert!(denied(&w.authorize(T, "b").await, "tenantConnections"));
    assert_eq!(w.disconnect(T, "a", "a1").await.status_code, 200);
    assert_eq!(w.disconnect(T, "a", "a2").await.status_code, 200);
    // a: 2 this minute, closed. Session a may open 1 more this minute (3), tenant 1 more (4).
    assert_eq!(w.authorize(T, "a").await, Decision::Allow);
    assert_eq!(w.connect(T, "a", "a3", &limits).await.status_code, 200);
    assert_eq!(w.disconnect(T, "a", "a3").await.status_code, 200);
    assert!(denied(&w.authorize(T, "a").await, "tenantPerMinute"));
    // With a higher tenant rate, the session's own minute cap is what denies.
    let roomy = Limits::example(100, 3, 2, 3, 300, 60);
    w.put_tenant("tenant-2", roomy).await;
    w.put_session("tenant-2", "x").await;
    for i in 0..3 {
        let cid = format!("x{i}");
        assert_eq!(
            w.connect("tenant-2", "x", &cid, &roomy).await.status_code,
            200
        );
        assert_eq!(w.disconnect("tenant-2", "x", &cid).await.status_code, 200);
    }
    assert!(denied(
        &w.authorize("tenant-2", "x").await,
        "sessionPerMinute"
    ));
}

#[tokio::test]
async fn bad_ids_are_denied_without_any_call() {
    let w = World::new().await;
    let long = "x".repeat(4096);
    let cases: Vec<(Vec<(&str, &str)>, &str)> = vec![
        (vec![], "tenantId is missing"),
        (vec![("tenantId", T)], "sessionId is missing"),
        (vec![("sessionId", "s1")], "tenantId is missing"),
        (vec![("tenantId", "a:b"), ("sessionId", "s1")], "':'"),
        (vec![("tenantId", T), ("sessionId", "s:1")], "':'"),
        (
            vec![("tenantId", &long), ("sessionId", "s1")],
            "4096 characters",
        ),
        (
            vec![("tenantId", T), ("sessionId", &long)],
            "4096 characters",
        ),
        (
            vec![("tenantId", ""), ("sessionId", "s1")],
            "tenantId is missing",
        ),
    ];
    for (query, expect) in cases {
        w.env.counter.reset();
        let r = authorizer::handle(w.deps(), &w.authorizer, authorizer_event(&query))
            .await
            .unwrap();
        let d = authorizer::decision(&r);
        assert!(denied(&d, expect), "{query:?}: {d:?}");
        assert_eq!(w.env.counter.total(), 0, "{query:?}");
    }
}

#[tokio::test]
async fn the_sample_authorizer_event_runs_as_is() {
    let w = World::new().await;
    w.put_tenant("tenant-1", SMALL).await;
    w.put_sample_session().await;
    let r = authorizer::handle(
        w.deps(),
        &w.authorizer,
        typed(sample("authorizer/connect-request.json")),
    )
    .await
    .unwrap();
    assert_eq!(authorizer::decision(&r), Decision::Allow);
    // The response serialises to what API Gateway expects.
    let v = serde_json::to_value(&r).unwrap();
    assert_eq!(v["policyDocument"]["Statement"][0]["Effect"], "Allow");
    assert_eq!(
        v["policyDocument"]["Statement"][0]["Action"][0],
        "execute-api:Invoke"
    );
}
