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
        w.env.counter.by_operation(),
        [
            ("GetItem".to_string(), 1),
            ("UpdateItem".to_string(), 1),
            ("TransactWriteItems".to_string(), 1)
        ]
        .into(),
        "cold tenant cache: GetItem, the refresh (no row yet), the create with the session count"
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
        3,
        "GetItem + one TransactWriteItems (the row and the session count) + one UpdateItem on the connections' count: {:?}",
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
    // An empty session: the read and the transaction of the row and the session count.
    w.put_session(T, "empty").await;
    w.env.counter.reset();
    let (status, _) = w
        .session_call("DELETE", &[("tenantId", T), ("sessionId", "empty")], None)
        .await;
    assert_eq!(status, 200);
    assert_eq!(w.env.counter.total(), 2);
}

/// Review finding 2: sockets are closed first and only those known gone are released. An id
/// answering 410 within a grace of the last join may be a socket still inside its `$connect`;
/// releasing it (what the handler did before, releasing all three and then closing) would leave a
/// live socket counted nowhere. Since decision 2208 it also stays in its (ended) row, so the
/// reconciler's truth keeps counting it until it is found gone.
#[tokio::test]
async fn delete_releases_only_the_connections_it_closed() {
    let w = World::new().await;
    w.put_tenant(T, MEDIUM).await;
    w.put_session(T, "s1").await;
    for c in ["c1", "c2", "c3"] {
        assert_eq!(w.connect(T, "s1", c, &MEDIUM).await.status_code, 200);
    }
    w.recorder.mark_gone("c2");
    assert_eq!(w.count(T).await, Some(3));
    let (status, body) = w
        .session_call("DELETE", &[("tenantId", T), ("sessionId", "s1")], None)
        .await;
    assert_eq!(status, 200, "{body}");
    assert_eq!(
        w.count(T).await,
        Some(1),
        "c1 and c3 closed and released; c2 (410) still counted"
    );
    assert_eq!(
        w.session(T, "s1").await.unwrap().connection_ids,
        ["c2"],
        "in its ended row"
    );
    // The reconciler finds c2 gone on two probes, releases it and deletes the empty row.
    let report = crate::ws_support::reconcile_tenant(
        w.deps(),
        &T.parse().unwrap(),
        &w.api.url(),
        false,
        Duration::from_millis(20),
    )
    .await;
    assert_eq!(report.tenants[0].stale_released, ["c2"]);
    assert_eq!(report.tenants[0].ended_deleted, 1);
    assert_eq!(
        report.tenants[0].outcome,
        shared::reconcile::Outcome::Consistent
    );
    assert_eq!(w.count(T).await, Some(0));
    assert!(w.session(T, "s1").await.is_none());
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

/// Found by the fault-schedule simulation (decision 2300; seed 0 of the sweep mutation's shape):
/// concurrent `PUT /session`s over one expired session. All but one lose the replacement's
/// condition (the row is no longer the expired one); each must then refresh the fresh row, not
/// answer 500. Exactly one replacement happened: the stale connection is released once. (Each
/// PUT closes it before replacing, decision 2208: closing a closed socket is harmless.)
#[tokio::test]
async fn concurrent_puts_over_an_expired_session_all_succeed() {
    let w = World::new().await;
    w.put_tenant(T, SMALL).await;
    w.put_session(T, "s1").await;
    assert_eq!(w.connect(T, "s1", "stale", &SMALL).await.status_code, 200);
    w.env
        .clock
        .advance(Duration::from_secs(SMALL.session_ttl + 5));
    let answers = futures::future::join_all(
        (0..6).map(|_| w.session_call("PUT", &[("tenantId", T), ("sessionId", "s1")], None)),
    )
    .await;
    for (status, body) in &answers {
        assert_eq!(*status, 200, "{body}");
    }
    assert_eq!(
        w.count(T).await,
        Some(0),
        "the stale connection released once"
    );
    assert_eq!(
        w.closed().first().map(String::as_str),
        Some("stale"),
        "closed"
    );
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
        // (PUT without a sessionId creates a session with a random id: ws_tickets.rs.)
        case(
            "GET",
            "/session",
            &[("tenantId", T)],
            None,
            400,
            "sessionId is missing",
            0,
        ),
        case(
            "POST",
            "/session/ticket",
            &[("tenantId", T)],
            None,
            400,
            "sessionId is missing",
            0,
        ),
        case(
            "GET",
            "/session/ticket",
            ok,
            None,
            405,
            "GET is not allowed",
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
        // The refresh finds no row; the create is one transaction with the session count.
        calls: 3,
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

// ------------------------------------------------------------------------------------------------
// Binding callers to their tenant: with JWT (or IAM with a binding), the tenant
// comes from the caller's identity, and naming another tenant is refused before any DynamoDB call.
// ------------------------------------------------------------------------------------------------

const A: &str = "tenant-a";
const B: &str = "tenant-b";

/// A session API configured like a deployed one with these variables.
async fn session_state(w: &World, vars: &[(&str, &str)]) -> session_api::State {
    session_api::init(&w.function_deps(vars)).await.unwrap()
}

/// A session API event carrying `authorizer` as `requestContext.authorizer` (API Gateway's shape:
/// `{"jwt": {"claims": {..}, "scopes": ..}}` or `{"iam": {..}}`).
fn authorized(
    method: &str,
    query: &[(&str, &str)],
    body: Option<&str>,
    authorizer: Option<Value>,
) -> aws_lambda_events::apigw::ApiGatewayV2httpRequest {
    authorized_at(method, "/session", query, body, authorizer)
}

/// [`authorized`] on another path (`/session/ticket`).
fn authorized_at(
    method: &str,
    path: &str,
    query: &[(&str, &str)],
    body: Option<&str>,
    authorizer: Option<Value>,
) -> aws_lambda_events::apigw::ApiGatewayV2httpRequest {
    let mut v = serde_json::to_value(session_event(method, path, query, body)).unwrap();
    // `None`: no authorizer context at all (the sample's IAM identity removed).
    v["requestContext"]["authorizer"] = authorizer.unwrap_or(Value::Null);
    typed(v)
}

fn jwt(claims: Value) -> Option<Value> {
    Some(serde_json::json!({"jwt": {"claims": claims, "scopes": null}}))
}

async fn call(
    w: &World,
    state: &session_api::State,
    ev: aws_lambda_events::apigw::ApiGatewayV2httpRequest,
) -> (i64, String, Option<String>) {
    let r = session_api::handle(w.deps(), state, ev).await.unwrap();
    let ct = r
        .headers
        .get("content-type")
        .and_then(|v| v.to_str().ok())
        .map(str::to_string);
    (r.status_code, shared::edge::respond::body_text(&r.body), ct)
}

/// A refusal: 403, problem+json naming the problem, and no DynamoDB call.
async fn assert_forbidden(
    w: &World,
    state: &session_api::State,
    ev: aws_lambda_events::apigw::ApiGatewayV2httpRequest,
    detail: &str,
) {
    w.env.counter.reset();
    let (status, body, ct) = call(w, state, ev).await;
    assert_eq!(status, 403, "{body}");
    assert_eq!(ct.as_deref(), Some("application/problem+json"), "{body}");
    let v: Value = serde_json::from_str(&body).unwrap();
    assert_eq!(v["status"], 403, "{body}");
    assert_eq!(v["title"], "Forbidden", "{body}");
    assert!(
        v["detail"].as_str().unwrap().contains(detail),
        "{detail:?} in {body}"
    );
    assert_eq!(
        w.env.counter.total(),
        0,
        "refused before any DynamoDB call: {:?}",
        w.env.counter.by_operation()
    );
}

#[tokio::test]
async fn a_jwt_caller_cannot_put_get_or_delete_another_tenants_session() {
    let w = World::new().await;
    w.put_tenant(A, SMALL).await;
    w.put_tenant(B, SMALL).await;
    // Tenant B's session with a live connection (made through the trusted, unauthenticated API).
    w.put_session(B, "sb").await;
    assert_eq!(w.connect(B, "sb", "cb", &SMALL).await.status_code, 200);
    let before = w.session(B, "sb").await.unwrap();
    w.env.clock.advance(Duration::from_secs(30));

    let api = session_state(&w, &[("TURNSTILE_SESSION_API_AUTH", "jwt")]).await;
    let claims_a = || jwt(serde_json::json!({"sub": "user-1", "tenantId": A}));
    let theirs: &[(&str, &str)] = &[("tenantId", B), ("sessionId", "sb")];
    for method in ["PUT", "GET", "DELETE"] {
        let ev = authorized(method, theirs, None, claims_a());
        assert_forbidden(&w, &api, ev, "tenant-b").await;
    }
    // The tenant named in the body instead of the query: refused the same way.
    let ev = authorized(
        "PUT",
        &[],
        Some(r#"{"tenantId": "tenant-b", "sessionId": "sb"}"#),
        claims_a(),
    );
    assert_forbidden(&w, &api, ev, "tenant-b").await;
    // Nothing changed for tenant B: same TTL, same connection, same count, no socket closed.
    assert_eq!(w.session(B, "sb").await.unwrap(), before);
    assert_eq!(w.count(B).await, Some(1));
    assert!(w.api.received_by("DELETE").is_empty());

    // Its own tenant, named or not: works, with the usual budgets.
    w.env.counter.reset();
    let (status, body, _) = call(
        &w,
        &api,
        authorized(
            "PUT",
            &[("tenantId", A), ("sessionId", "sa")],
            None,
            claims_a(),
        ),
    )
    .await;
    assert_eq!(status, 200, "{body}");
    assert_eq!(
        w.env.counter.total(),
        3,
        "cold tenant cache: GetItem + UpdateItem (no row) + TransactWriteItems (the create)"
    );
    let (status, body, _) = call(
        &w,
        &api,
        authorized("PUT", &[("sessionId", "from-claim")], None, claims_a()),
    )
    .await;
    assert_eq!(status, 200, "{body}");
    let s: Value = serde_json::from_str(&body).unwrap();
    assert_eq!(s["tenantId"], A, "the claim supplies the tenant");
    assert!(w.session(A, "from-claim").await.is_some());
    let (status, body, _) = call(
        &w,
        &api,
        authorized("GET", &[("sessionId", "sa")], None, claims_a()),
    )
    .await;
    assert_eq!(status, 200, "{body}");
    let (status, body, _) = call(
        &w,
        &api,
        authorized(
            "DELETE",
            &[("tenantId", A), ("sessionId", "sa")],
            None,
            claims_a(),
        ),
    )
    .await;
    assert_eq!(status, 200, "{body}");
    assert!(w.session(A, "sa").await.is_none());
}

#[tokio::test]
async fn a_jwt_caller_without_a_usable_tenant_claim_is_refused() {
    let w = World::new().await;
    w.put_tenant(A, SMALL).await;
    let api = session_state(&w, &[("TURNSTILE_SESSION_API_AUTH", "JWT")]).await;
    let ours: &[(&str, &str)] = &[("tenantId", A), ("sessionId", "s1")];
    // No authorizer context at all (a route deployed without the JWT authorizer).
    assert_forbidden(&w, &api, authorized("PUT", ours, None, None), "tenantId").await;
    // A valid token without the claim.
    let ev = authorized("PUT", ours, None, jwt(serde_json::json!({"sub": "user-1"})));
    assert_forbidden(&w, &api, ev, "no tenantId claim").await;
    // A claim that is not a tenant id.
    let ev = authorized(
        "GET",
        ours,
        None,
        jwt(serde_json::json!({"tenantId": "a:b"})),
    );
    assert_forbidden(&w, &api, ev, "tenantId claim").await;
    // An IAM context is not a JWT.
    let iam = Some(serde_json::json!({"iam": {"userArn": "arn:aws:iam::123456789012:user/x"}}));
    assert_forbidden(&w, &api, authorized("GET", ours, None, iam), "tenantId").await;
    assert!(w.session(A, "s1").await.is_none());
}

#[tokio::test]
async fn the_tenant_claim_is_configurable_for_cognito() {
    let w = World::new().await;
    w.put_tenant(A, SMALL).await;
    w.put_tenant(B, SMALL).await;
    let api = session_state(
        &w,
        &[
            ("TURNSTILE_SESSION_API_AUTH", "jwt"),
            ("TURNSTILE_SESSION_TENANT_CLAIM", "custom:tenantId"),
        ],
    )
    .await;
    // Only the configured claim counts; a plain "tenantId" claim is ignored.
    let claims = || jwt(serde_json::json!({"sub": "user-1", "custom:tenantId": A, "tenantId": B}));
    let ev = authorized(
        "PUT",
        &[("tenantId", B), ("sessionId", "s1")],
        None,
        claims(),
    );
    assert_forbidden(&w, &api, ev, "custom:tenantId").await;
    let (status, body, _) = call(
        &w,
        &api,
        authorized("PUT", &[("sessionId", "s1")], None, claims()),
    )
    .await;
    assert_eq!(status, 200, "{body}");
    assert!(w.session(A, "s1").await.is_some());
    assert!(w.session(B, "s1").await.is_none());
}

#[tokio::test]
async fn an_iam_caller_can_be_bound_by_its_role_session_name() {
    let w = World::new().await;
    w.put_tenant(A, SMALL).await;
    w.put_tenant(B, SMALL).await;
    let role = |session: &str| {
        Some(serde_json::json!({"iam": {
            "accountId": "123456789012",
            "callerId": format!("AROAEXAMPLEID:{session}"),
            "userArn": format!("arn:aws:sts::123456789012:assumed-role/session-api-caller/{session}"),
            "userId": format!("AROAEXAMPLEID:{session}"),
        }}))
    };
    let caller_role = (
        "TURNSTILE_SESSION_IAM_ROLE_ARN",
        "arn:aws:iam::123456789012:role/session-api-caller",
    );
    let bound = session_state(
        &w,
        &[
            ("TURNSTILE_SESSION_API_AUTH", "iam"),
            ("TURNSTILE_SESSION_IAM_BINDING", "role-session-name"),
            caller_role,
        ],
    )
    .await;
    // The default binding is the role session name, of the named role only.
    let default = session_state(&w, &[("TURNSTILE_SESSION_API_AUTH", "iam"), caller_role]).await;
    let other_role = Some(serde_json::json!({"iam": {
        "userArn": format!("arn:aws:sts::123456789012:assumed-role/some-lambda-role/{B}"),
    }}));
    let ev = authorized(
        "GET",
        &[("tenantId", B), ("sessionId", "s1")],
        None,
        other_role,
    );
    assert_forbidden(&w, &default, ev, "only sessions of role session-api-caller").await;
    let other_account = Some(serde_json::json!({"iam": {
        "userArn": format!("arn:aws:sts::210987654321:assumed-role/session-api-caller/{B}"),
    }}));
    let ev = authorized(
        "GET",
        &[("tenantId", B), ("sessionId", "s1")],
        None,
        other_account,
    );
    assert_forbidden(&w, &default, ev, "account 210987654321").await;
    let ev = authorized(
        "PUT",
        &[("tenantId", B), ("sessionId", "s1")],
        None,
        role(A),
    );
    assert_forbidden(&w, &bound, ev, "tenant-b").await;
    let (status, body, _) = call(
        &w,
        &bound,
        authorized("PUT", &[("sessionId", "s1")], None, role(A)),
    )
    .await;
    assert_eq!(status, 200, "{body}");
    assert!(w.session(A, "s1").await.is_some());
    // An IAM user (not an assumed role) has no session name to bind.
    let user = Some(serde_json::json!({"iam": {"userArn": "arn:aws:iam::123456789012:user/ops"}}));
    let ev = authorized("GET", &[("tenantId", A), ("sessionId", "s1")], None, user);
    assert_forbidden(&w, &bound, ev, "assumed role").await;

    // IAM with the binding named any-tenant: IAM decides who may call at all; the tenant is the one
    // named (for trusted callers only, see docs/session-api-auth.md).
    let open = session_state(
        &w,
        &[
            ("TURNSTILE_SESSION_API_AUTH", "iam"),
            ("TURNSTILE_SESSION_IAM_BINDING", "any-tenant"),
        ],
    )
    .await;
    let (status, body, _) = call(
        &w,
        &open,
        authorized(
            "PUT",
            &[("tenantId", B), ("sessionId", "s1")],
            None,
            role(A),
        ),
    )
    .await;
    assert_eq!(status, 200, "{body}");
}

#[test]
fn session_api_auth_settings_are_validated() {
    let read = |pairs: &[(&str, &str)]| {
        let mut all = vec![
            ("TURNSTILE_MANAGEMENT_ENDPOINT", "http://127.0.0.1:1/x"),
            (
                "TURNSTILE_TICKET_KEYS",
                turnstile_bench::samples::SAMPLE_KEYS,
            ),
        ];
        all.extend_from_slice(pairs);
        session_api::Config::from_vars(&shared::config::Vars::from_pairs(all.to_vec()))
    };
    for (pairs, var) in [
        (
            &[("TURNSTILE_SESSION_API_AUTH", "cognito")][..],
            "TURNSTILE_SESSION_API_AUTH",
        ),
        (
            &[
                ("TURNSTILE_SESSION_API_AUTH", "none"),
                ("TURNSTILE_SESSION_IAM_BINDING", "principal-tag"),
            ],
            "TURNSTILE_SESSION_IAM_BINDING",
        ),
        // The permissive choice only by its name: unset is not `none`, and `none` is not a binding.
        (&[], "TURNSTILE_SESSION_API_AUTH"),
        (
            &[
                ("TURNSTILE_SESSION_API_AUTH", "iam"),
                ("TURNSTILE_SESSION_IAM_BINDING", "none"),
            ],
            "any-tenant",
        ),
        // The default IAM binding needs the role whose sessions it trusts.
        (
            &[("TURNSTILE_SESSION_API_AUTH", "iam")],
            "TURNSTILE_SESSION_IAM_ROLE_ARN",
        ),
        (
            &[
                ("TURNSTILE_SESSION_API_AUTH", "iam"),
                ("TURNSTILE_SESSION_IAM_ROLE_ARN", "session-api-caller"),
            ],
            "TURNSTILE_SESSION_IAM_ROLE_ARN",
        ),
        (
            &[
                ("TURNSTILE_SESSION_API_AUTH", "none"),
                ("TURNSTILE_TICKET_TTL_SECS", "7200"),
            ],
            "TURNSTILE_TICKET_TTL_SECS",
        ),
    ] {
        let err = read(pairs).unwrap_err().to_string();
        assert!(err.contains(var), "{pairs:?}: {err}");
    }
    assert!(read(&[
        ("TURNSTILE_SESSION_API_AUTH", "jwt"),
        ("TURNSTILE_SESSION_TENANT_CLAIM", "a b")
    ])
    .is_err());
    assert!(read(&[("TURNSTILE_SESSION_API_AUTH", "NONE")]).is_ok());
}

/// JWT claims bind the caller whatever `TURNSTILE_SESSION_API_AUTH` says (a route with a
/// JWT authorizer in front of a function configured for `none` or `iam` once let a claim of tenant A
/// act for tenant B), and an IAM caller under the template's defaults reaches only its own tenant.
#[tokio::test]
async fn no_caller_reaches_another_tenant_in_any_configuration() {
    let w = World::new().await;
    w.put_tenant(A, SMALL).await;
    w.put_tenant(B, SMALL).await;
    w.put_session(B, "s1").await;
    let role = (
        "TURNSTILE_SESSION_IAM_ROLE_ARN",
        "arn:aws:iam::123456789012:role/session-api-caller",
    );
    let configs: Vec<Vec<(&str, &str)>> = vec![
        vec![("TURNSTILE_SESSION_API_AUTH", "none")],
        vec![
            ("TURNSTILE_SESSION_API_AUTH", "iam"),
            ("TURNSTILE_SESSION_IAM_BINDING", "any-tenant"),
        ],
        vec![("TURNSTILE_SESSION_API_AUTH", "iam"), role],
        vec![("TURNSTILE_SESSION_API_AUTH", "jwt")],
    ];
    let routes = [
        ("PUT", "/session"),
        ("GET", "/session"),
        ("DELETE", "/session"),
        ("POST", "/session/ticket"),
    ];
    for vars in &configs {
        let api = session_state(&w, vars).await;
        for (method, path) in routes {
            let ev = authorized_at(
                method,
                path,
                &[("tenantId", B), ("sessionId", "s1")],
                None,
                jwt(serde_json::json!({ "tenantId": A })),
            );
            assert_forbidden(&w, &api, ev, "tenant-b").await;
            // A token without the claim is bound to nothing, also in `none`.
            let ev = authorized_at(
                method,
                path,
                &[("tenantId", B), ("sessionId", "s1")],
                None,
                jwt(serde_json::json!({ "sub": "someone" })),
            );
            assert_forbidden(&w, &api, ev, "no tenantId claim").await;
        }
    }
    // The template's defaults for IAM: the role session name of the stack's caller role.
    let defaults = session_state(&w, &[("TURNSTILE_SESSION_API_AUTH", "iam"), role]).await;
    let iam = |arn: &str| Some(serde_json::json!({ "iam": { "userArn": arn } }));
    for (caller, why) in [
        (
            iam("arn:aws:sts::123456789012:assumed-role/session-api-caller/tenant-a"),
            "tenant-b",
        ),
        // A Lambda function's role session name is the function's name: not a binding.
        (
            iam("arn:aws:sts::123456789012:assumed-role/any-function-role/tenant-b"),
            "only sessions of role session-api-caller",
        ),
        (iam("arn:aws:iam::123456789012:user/ops"), "assumed role"),
        (None, "no IAM identity"),
    ] {
        for (method, path) in routes {
            let ev = authorized_at(
                method,
                path,
                &[("tenantId", B), ("sessionId", "s1")],
                None,
                caller.clone(),
            );
            assert_forbidden(&w, &defaults, ev, why).await;
        }
    }
    let s = w.session(B, "s1").await.expect("B's session is untouched");
    assert!(s.connection_ids.is_empty());
}

/// Seen in the random-fault soak (decision 2300, seed 57465): a session `DELETE` deletes the row
/// only while it holds exactly the connections it read, so connections that kept joining between
/// its attempts refused every one, and after 4 it answered 503 ("contended"). The row is now ended
/// before anything else (closed to joins, decision 2208): a join that slipped in between the read
/// and the end is found by the release's condition and closed too, and every later join is
/// refused, so the deletion converges and releases every connection once.
#[tokio::test]
async fn a_delete_while_connections_keep_joining_releases_every_connection_once() {
    let w = World::new().await;
    let limits = shared::tenant::Limits::example(120, 60, 50, 100, 300, 600);
    w.put_tenant(T, limits).await;
    w.put_session(T, "s1").await;
    for c in ["c1", "c2"] {
        assert_eq!(w.connect(T, "s1", c, &limits).await.status_code, 200);
    }
    // Before each attempt of the deletion's transaction, a real `$connect` of one more connection.
    let joins = std::sync::Arc::new(std::sync::Mutex::new(Vec::new()));
    let (table, functions) = (w.deps().tables.sessions.clone(), w.function_deps(&[]));
    let seen = joins.clone();
    let before = Before::new(
        &w.env.endpoint,
        move |op, body| {
            let lead = &body["TransactItems"][0];
            op == "TransactWriteItems"
                && (lead["Delete"]["TableName"] == table.as_str()
                    || lead["Update"]["TableName"] == table.as_str())
        },
        move |n, client| {
            let deps = shared::Deps {
                dynamo: client,
                ..functions.clone()
            };
            let joins = seen.clone();
            Box::pin(async move {
                let state = connect::init(&deps).await.unwrap();
                let cid = format!("x{n}");
                let ev = ws_event("connect/connect.json", T, "s1", &cid, Some(&limits));
                let r = connect::handle(&deps, &state, ev).await.unwrap();
                joins.lock().unwrap().push((cid, r.status_code));
            })
        },
    );
    let ev = session_event(
        "DELETE",
        "/session",
        &[("tenantId", T), ("sessionId", "s1")],
        None,
    );
    let r = session_api::handle(&before.deps(w.deps()), &w.session_api, ev)
        .await
        .unwrap();
    let joins = joins.lock().unwrap().clone();
    assert_eq!(
        r.status_code, 200,
        "joins before each attempt: {joins:?}; {:?}",
        r.body
    );
    // The first join got in before the end (and made the first release fail); the next met an
    // ended session.
    assert!(joins.len() >= 2, "{joins:?}");
    assert_eq!(joins[0], ("x0".to_string(), 200));
    assert!(joins[1..].iter().all(|j| j.1 != 200), "{joins:?}");
    assert!(w.session(T, "s1").await.is_none());
    assert_eq!(w.closed(), vec!["c1", "c2", "x0"], "each connection closed");
    assert_eq!(w.count(T).await, Some(0), "each connection released once");
    assert_eq!(
        w.count(&format!("{T}:sessions")).await,
        Some(0),
        "the session given back"
    );
}

// ------------------------------------------------------------------------------------------------
// Owners inside a tenant (decision 3602): with JWT callers, a session belongs to the user who
// created it (its `sub`); other users of the same tenant get the 404 of a session that does not
// exist, a ticket's subject is the caller's, and a per-subject quota keeps one user from taking
// the tenant's `maxSessions`.
// ------------------------------------------------------------------------------------------------

/// The admin claim the owner tests configure (`TURNSTILE_SESSION_ADMIN_CLAIM`).
const ADMIN_CLAIM: (&str, &str) = ("TURNSTILE_SESSION_ADMIN_CLAIM", "turnstile:admin");

/// A signed-in user of tenant A.
fn user(sub: &str) -> Option<Value> {
    jwt(serde_json::json!({ "sub": sub, "tenantId": A }))
}

/// Sets one attribute of a tenant row, as `turnstile tenant put` stores the setting.
async fn set_tenant_attr(
    w: &World,
    t: &str,
    name: &str,
    value: aws_sdk_dynamodb::types::AttributeValue,
) {
    w.deps()
        .dynamo
        .update_item()
        .table_name(&w.deps().tables.tenants)
        .key("tenantId", shared::dynamo::item::s(t))
        .update_expression("SET #a = :v")
        .expression_attribute_names("#a", name)
        .expression_attribute_values(":v", value)
        .send()
        .await
        .unwrap();
}

#[tokio::test]
async fn a_jwt_user_reaches_only_the_sessions_it_created() {
    let w = World::new().await;
    w.put_tenant(A, SMALL).await;
    let api = session_state(&w, &[("TURNSTILE_SESSION_API_AUTH", "jwt"), ADMIN_CLAIM]).await;
    let now = || shared::clock::Clock::now(&w.env.clock).as_secs();
    // user-1 creates s1; its ticket is for user-1, and the session has a live connection.
    let ev = authorized("PUT", &[("sessionId", "s1")], None, user("user-1"));
    let (status, body, _) = call(&w, &api, ev).await;
    assert_eq!(status, 200, "{body}");
    let s: Value = serde_json::from_str(&body).unwrap();
    let tk = shared::ticket::verify(&test_keys(), s["ticket"].as_str().unwrap(), now()).unwrap();
    assert_eq!(
        tk.subject.as_deref(),
        Some("user-1"),
        "the ticket is the caller's"
    );
    assert_eq!(w.connect(A, "s1", "c1", &SMALL).await.status_code, 200);
    let before = w.session(A, "s1").await.unwrap();

    // user-2 of the same tenant learns the id: every route answers as for no such session.
    for (method, path) in [
        ("PUT", "/session"),
        ("GET", "/session"),
        ("POST", "/session/ticket"),
        ("DELETE", "/session"),
    ] {
        let ev = authorized_at(method, path, &[("sessionId", "s1")], None, user("user-2"));
        let (status, body, _) = call(&w, &api, ev).await;
        assert_eq!(status, 404, "{method} {path} by another user: {body}");
        assert!(body.contains("does not exist"), "{method} {path}: {body}");
    }
    assert_eq!(w.session(A, "s1").await.unwrap(), before, "unchanged");
    assert!(w.api.received_by("DELETE").is_empty(), "no socket closed");

    // A subject in the request that is not the caller's: refused, for a new session too.
    let ev = authorized("PUT", &[], Some(r#"{"subject": "user-1"}"#), user("user-2"));
    let (status, body, _) = call(&w, &api, ev).await;
    assert_eq!(status, 403, "{body}");
    assert!(body.contains("subject"), "{body}");
    let ev = authorized_at(
        "POST",
        "/session/ticket",
        &[("sessionId", "s1"), ("subject", "someone-else")],
        None,
        user("user-1"),
    );
    let (status, body, _) = call(&w, &api, ev).await;
    assert_eq!(status, 403, "{body}");

    // The owner: GET shows the owner; a fresh ticket is again its own.
    let (status, body, _) = call(
        &w,
        &api,
        authorized("GET", &[("sessionId", "s1")], None, user("user-1")),
    )
    .await;
    assert_eq!(status, 200, "{body}");
    assert_eq!(
        serde_json::from_str::<Value>(&body).unwrap()["owner"],
        "user-1"
    );
    // A tenant admin (the configured claim) reaches every session of its tenant; its tickets are
    // its own.
    let admin =
        || jwt(serde_json::json!({"sub": "ops-1", "tenantId": A, "turnstile:admin": "true"}));
    let ev = authorized_at(
        "POST",
        "/session/ticket",
        &[("sessionId", "s1")],
        None,
        admin(),
    );
    let (status, body, _) = call(&w, &api, ev).await;
    assert_eq!(status, 200, "{body}");
    let v: Value = serde_json::from_str(&body).unwrap();
    let tk = shared::ticket::verify(&test_keys(), v["ticket"].as_str().unwrap(), now()).unwrap();
    assert_eq!(tk.subject.as_deref(), Some("ops-1"));
    // The claim with another value is no admin.
    let not_admin =
        jwt(serde_json::json!({"sub": "ops-2", "tenantId": A, "turnstile:admin": "false"}));
    let ev = authorized("GET", &[("sessionId", "s1")], None, not_admin);
    assert_eq!(call(&w, &api, ev).await.0, 404);
    // A backend (trusted caller) acts on any session of its tenant, and names the subject.
    let (status, body) = w
        .session_call("GET", &[("tenantId", A), ("sessionId", "s1")], None)
        .await;
    assert_eq!(status, 200, "{body}");
    let post = session_event(
        "POST",
        "/session/ticket",
        &[("tenantId", A), ("sessionId", "s1"), ("subject", "svc-7")],
        None,
    );
    let (status, body) = w.session_raw(post).await;
    assert_eq!(status, 200, "{body}");
    // The owner deletes it: its connection closed.
    let ev = authorized("DELETE", &[("sessionId", "s1")], None, user("user-1"));
    let (status, body, _) = call(&w, &api, ev).await;
    assert_eq!(status, 200, "{body}");
    assert_eq!(w.closed(), ["c1"]);
    // A token without a `sub` identifies no user: refused.
    let ev = authorized("PUT", &[], None, jwt(serde_json::json!({ "tenantId": A })));
    assert_forbidden(&w, &api, ev, "sub").await;
}

/// `maxSessionsPerSubject` is enforced as `maxSessions` is (decision 2204): 20 concurrent `PUT`s
/// of one user against a quota of 3 create exactly 3; another user of the tenant still creates;
/// `DELETE` and a TTL expiry each give the user's unit back.
#[tokio::test]
async fn one_user_cannot_take_the_tenants_sessions() {
    let w = World::new().await;
    w.put_tenant(A, SMALL).await;
    set_tenant_attr(
        &w,
        A,
        "maxSessionsPerSubject",
        aws_sdk_dynamodb::types::AttributeValue::N("3".into()),
    )
    .await;
    let api = session_state(&w, &[("TURNSTILE_SESSION_API_AUTH", "jwt")]).await;
    let put = |sub: &'static str| {
        let (w, api) = (&w, &api);
        async move {
            let (status, body, _) = call(w, api, authorized("PUT", &[], None, user(sub))).await;
            (
                status,
                serde_json::from_str::<Value>(&body).unwrap_or(Value::Null),
            )
        }
    };
    let answers = futures::future::join_all((0..20).map(|_| put("user-1"))).await;
    let created: Vec<String> = answers
        .iter()
        .filter(|(s, _)| *s == 200)
        .map(|(_, b)| b["sessionId"].as_str().unwrap().to_string())
        .collect();
    assert_eq!(created.len(), 3, "one user's sessions: {answers:?}");
    for (status, b) in answers.iter().filter(|(s, _)| *s != 200) {
        assert_eq!(*status, 429, "{b}");
        assert_eq!(
            b["violated-policies"],
            serde_json::json!(["maxSessionsPerSubject"]),
            "{b}"
        );
    }
    // Another user of the tenant is not held by user-1's quota.
    assert_eq!(put("user-2").await.0, 200);
    assert_eq!(w.count(&format!("{A}:sessions")).await, Some(4));
    // DELETE gives user-1 one back.
    let ev = authorized(
        "DELETE",
        &[("sessionId", &created[0])],
        None,
        user("user-1"),
    );
    assert_eq!(call(&w, &api, ev).await.0, 200);
    assert_eq!(put("user-1").await.0, 200);
    assert_eq!(put("user-1").await.0, 429);
    // So does a TTL expiry, once however often its record is delivered.
    let (t, sid) = (
        shared::ids::TenantId::parse(A).unwrap(),
        shared::ids::SessionId::parse(&created[1]).unwrap(),
    );
    let row = shared::session::store::delete(w.deps(), &t, &sid)
        .await
        .unwrap();
    assert!(row.is_some());
    let mut record = ttl_record(A, &created[1], &[], "71");
    record["dynamodb"]["OldImage"]["owner"] = serde_json::json!({"S": "user-1"});
    for _ in 0..2 {
        let ev: aws_lambda_events::dynamodb::Event =
            typed(serde_json::json!({ "Records": [record.clone()] }));
        let r = ttl_sweeper::handle(w.deps(), &w.sweeper, ev).await;
        assert!(r.batch_item_failures.is_empty());
    }
    assert_eq!(put("user-1").await.0, 200);
    assert_eq!(put("user-1").await.0, 429);
}
