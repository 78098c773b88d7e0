//! The decide API (functions/decide-api) against DynamoDB Local: each route's verdict in body and
//! headers, the refusal conventions, the call budgets (1 call and 1 WCU per warm spend), tenant
//! binding and key separation (a tenant's credentials never reach another's buckets, whatever
//! names it crafts), and bad input answered 4xx naming the field.

use serde_json::{json, Value};
use shared::clock::Clock;
use shared::config::Vars;
use shared::table::TableKind;
use turnstile_tests::TestEnv;

pub(crate) const LIMITS: &str = "\
names:
  PerUser: { id: 1, format: string }
  Daily: { id: 2, format: string }
  Llm: { id: 3, format: string }
defaults:
  PerUser: { burst: 3, count: 3, period: 1h }
  Daily: { burst: 100, count: 100, period: 24h }
  Llm: { burst: 1000, count: 1000, period: 100h }
";

pub(crate) const TABLES: &[TableKind] = &[
    TableKind::Buckets,
    TableKind::FungibleTokens,
    TableKind::Limits,
    TableKind::NonFungibleTokens,
];

pub(crate) async fn world() -> (TestEnv, decide_api::State) {
    let mut env = TestEnv::new(TABLES).await;
    env.deps.vars = Vars::from_pairs([
        ("TURNSTILE_DECIDE_AUTH", "jwt"),
        ("TURNSTILE_LIMITS_YAML", LIMITS),
        ("TURNSTILE_DECIDE_TOKEN_DEFAULT", "2/60"),
        ("TURNSTILE_DECIDE_RESERVATION_DEFAULT", "2"),
    ]);
    let state = decide_api::init(&env.deps).await.unwrap();
    (env, state)
}

/// An HTTP API v2 event from tenant `tenant` (its JWT claims as API Gateway passes them).
pub(crate) fn event(tenant: Option<&str>, method: &str, path: &str, body: Option<&str>) -> Value {
    let (path, query) = path.split_once('?').unwrap_or((path, ""));
    let mut e = json!({
        "version": "2.0",
        "routeKey": format!("{method} {path}"),
        "rawPath": path,
        "rawQueryString": query,
        "headers": {"content-type": "application/json"},
        "requestContext": {"http": {"method": method, "path": path}},
        "isBase64Encoded": false,
    });
    if !query.is_empty() {
        let q: serde_json::Map<String, Value> = query
            .split('&')
            .filter_map(|p| p.split_once('='))
            .map(|(k, v)| (k.to_string(), json!(v)))
            .collect();
        e["queryStringParameters"] = Value::Object(q);
    }
    if let Some(t) = tenant {
        e["requestContext"]["authorizer"] =
            json!({"jwt": {"claims": {"tenantId": t}, "scopes": null}});
    }
    if let Some(b) = body {
        e["body"] = json!(b);
    }
    e
}

pub(crate) struct Answer {
    pub status: i64,
    pub headers: http::HeaderMap,
    pub body: Value,
}

impl Answer {
    pub fn header(&self, name: &str) -> Option<&str> {
        self.headers.get(name).and_then(|v| v.to_str().ok())
    }
}

pub(crate) async fn call(env: &TestEnv, state: &decide_api::State, event: Value) -> Answer {
    let typed = serde_json::from_value(event).unwrap();
    let r = decide_api::handle(&env.deps, state, typed).await.unwrap();
    let text = shared::edge::respond::body_text(&r.body);
    let body = serde_json::from_str(&text).unwrap_or_else(|e| panic!("not JSON ({e}): {text}"));
    Answer {
        status: r.status_code,
        headers: r.headers,
        body,
    }
}

pub(crate) async fn post(
    env: &TestEnv,
    st: &decide_api::State,
    tenant: &str,
    path: &str,
    body: Value,
) -> Answer {
    call(
        env,
        st,
        event(Some(tenant), "POST", path, Some(&body.to_string())),
    )
    .await
}

#[tokio::test]
async fn a_spend_answers_its_verdict_in_body_and_headers_with_one_call_and_one_wcu() {
    let (env, st) = world().await;
    let spend = json!({"name": "PerUser", "id": "u1"});
    let a = post(&env, &st, "acme", "/v1/limits/spend", spend.clone()).await;
    assert_eq!(a.status, 200, "{}", a.body);
    assert_eq!(a.body["allowed"], true);
    assert_eq!(a.body["remaining"], 2);
    assert_eq!(a.body["limit"], 3);
    assert_eq!(
        a.header("ratelimit-policy"),
        Some(r#""PerUser";q=3;w=3600"#)
    );
    assert_eq!(a.header("ratelimit"), Some(r#""PerUser";r=2;t=1200"#));
    env.counter.reset();
    let a = post(&env, &st, "acme", "/v1/limits/spend", spend.clone()).await;
    assert_eq!(a.body["remaining"], 1);
    assert_eq!(
        env.counter.by_operation(),
        [("UpdateItem".to_string(), 1)].into()
    );
    assert_eq!(env.counter.units().write, 1.0, "1 WCU per warm spend");
    post(&env, &st, "acme", "/v1/limits/spend", spend.clone()).await;
    // Refused: a 200 verdict by default, with Retry-After ...
    let no = post(&env, &st, "acme", "/v1/limits/spend", spend.clone()).await;
    assert_eq!((no.status, &no.body["allowed"]), (200, &json!(false)));
    assert_eq!(no.header("retry-after"), Some("1200"));
    assert_eq!(no.body["retryAfter"], 1_200.0);
    // ... or a 429 problem+json when the request asks for it.
    let e = event(
        Some("acme"),
        "POST",
        "/v1/limits/spend?refusal=status",
        Some(&spend.to_string()),
    );
    let no = call(&env, &st, e).await;
    assert_eq!(no.status, 429);
    assert_eq!(no.header("content-type"), Some("application/problem+json"));
    assert_eq!(no.body["violated-policies"][0], "PerUser");
    assert_eq!(no.body["remaining"], 0);
    // A check spends nothing.
    let c = post(
        &env,
        &st,
        "acme",
        "/v1/limits/check",
        json!({"name": "PerUser", "id": "u2", "cost": 3}),
    )
    .await;
    assert_eq!(
        (c.body["allowed"].clone(), c.body["remaining"].clone()),
        (json!(true), json!(0))
    );
    let c = post(
        &env,
        &st,
        "acme",
        "/v1/limits/check",
        json!({"name": "PerUser", "id": "u2"}),
    )
    .await;
    assert_eq!(c.body["remaining"], 3);
}

#[tokio::test]
async fn a_refund_applies_once_per_idempotency_key() {
    let (env, st) = world().await;
    let spend = json!({"name": "PerUser", "id": "u", "cost": 3});
    post(&env, &st, "acme", "/v1/limits/spend", spend).await;
    let refund = json!({"name": "PerUser", "id": "u", "cost": 1, "idempotencyKey": "order-7"});
    env.counter.reset();
    let r = post(&env, &st, "acme", "/v1/limits/refund", refund.clone()).await;
    assert_eq!(
        (r.body["allowed"].clone(), r.body["duplicate"].clone()),
        (json!(true), json!(false))
    );
    assert_eq!(r.body["remaining"], 1);
    assert_eq!(
        env.counter.by_operation(),
        [("TransactWriteItems".to_string(), 1)].into()
    );
    let again = post(&env, &st, "acme", "/v1/limits/refund", refund).await;
    assert_eq!(again.body["duplicate"], true, "{}", again.body);
    assert_eq!(again.body["remaining"], 1, "given back once");
    let missing = post(
        &env,
        &st,
        "acme",
        "/v1/limits/refund",
        json!({"name": "PerUser", "id": "u"}),
    )
    .await;
    assert_eq!(
        (missing.status, missing.body["field"].clone()),
        (400, json!("idempotencyKey"))
    );
}

#[tokio::test]
async fn a_batch_is_all_or_nothing_and_leases_hold_then_settle() {
    let (env, st) = world().await;
    let batch = |cost: u64| {
        json!({"spends": [
            {"name": "Daily", "id": "u", "cost": 1},
            {"name": "PerUser", "id": "u", "cost": cost},
        ]})
    };
    let ok = post(&env, &st, "acme", "/v1/limits/batch", batch(2)).await;
    assert_eq!(ok.body["allowed"], true, "{}", ok.body);
    assert_eq!(ok.body["each"].as_array().unwrap().len(), 2);
    let no = post(&env, &st, "acme", "/v1/limits/batch", batch(2)).await;
    assert_eq!(
        (no.body["allowed"].clone(), no.body["policy"].clone()),
        (json!(false), json!("PerUser"))
    );
    let daily = post(
        &env,
        &st,
        "acme",
        "/v1/limits/check",
        json!({"name": "Daily", "id": "u"}),
    )
    .await;
    assert_eq!(
        daily.body["remaining"], 99,
        "the refused batch spent nothing"
    );
    assert!(ok.header("ratelimit-policy").unwrap().contains("\"Daily\""));

    let lease = |op: &str, extra: Value| {
        let mut b = json!({"name": "Llm", "id": "u", "leaseId": "L1"});
        b.as_object_mut()
            .unwrap()
            .extend(extra.as_object().unwrap().clone());
        (format!("/v1/leases/{op}"), b)
    };
    let (p, b) = lease("acquire", json!({"estimate": 600}));
    let a = post(&env, &st, "acme", &p, b).await;
    assert_eq!(
        (a.body["allowed"].clone(), a.body["remaining"].clone()),
        (json!(true), json!(400)),
        "{}",
        a.body
    );
    let (p, b) = lease("adjust", json!({"amount": 100}));
    let a = post(&env, &st, "acme", &p, b).await;
    assert_eq!(a.body["remaining"], 900, "{}", a.body);
    let (p, b) = lease("commit", json!({}));
    let a = post(&env, &st, "acme", &p, b).await;
    assert_eq!(
        (a.status, a.body["lease"].clone()),
        (200, Value::Null),
        "{}",
        a.body
    );
    let (p, b) = lease("release", json!({}));
    let a = post(&env, &st, "acme", &p, b).await;
    assert_eq!(a.body["duplicate"], true, "{}", a.body);
    // An estimate over the limit's burst can never be held: 409, as the limits file decides it.
    let (p, b) = lease("acquire", json!({"estimate": 2000}));
    let a = post(&env, &st, "acme", &p, b).await;
    assert_eq!(
        (a.status, a.body["field"].clone()),
        (409, json!("cost")),
        "{}",
        a.body
    );
}

#[tokio::test]
async fn tokens_and_reservations_answer_verdicts() {
    let (env, st) = world().await;
    let take = json!({"resource": "emr", "account": "a1"});
    let t = post(&env, &st, "acme", "/v1/tokens/take", take.clone()).await;
    assert_eq!(
        (t.body["allowed"].clone(), t.body["remaining"].clone()),
        (json!(true), json!(1)),
        "{}",
        t.body
    );
    env.counter.reset();
    post(&env, &st, "acme", "/v1/tokens/take", take.clone()).await;
    assert_eq!(
        env.counter.by_operation(),
        [("UpdateItem".to_string(), 1)].into(),
        "warm take"
    );
    let no = post(&env, &st, "acme", "/v1/tokens/take", take).await;
    assert_eq!(no.body["allowed"], false);
    assert!(no.header("retry-after").is_some());

    let pair = json!({"resource": "cluster", "account": "a1"});
    let r1 = post(&env, &st, "acme", "/v1/reservations/reserve", pair.clone()).await;
    assert_eq!(
        (r1.body["allowed"].clone(), r1.body["remaining"].clone()),
        (json!(true), json!(1)),
        "{}",
        r1.body
    );
    let r2 = post(&env, &st, "acme", "/v1/reservations/reserve", pair.clone()).await;
    assert_eq!(r2.body["remaining"], 0);
    let full = post(&env, &st, "acme", "/v1/reservations/reserve", pair.clone()).await;
    assert_eq!(full.body["allowed"], false, "{}", full.body);
    let id = r1.body["reservationId"].as_str().unwrap();
    let mut bind = pair.clone();
    bind["reservationId"] = json!(id);
    bind["resourceId"] = json!("j-123");
    let b = post(&env, &st, "acme", "/v1/reservations/bind", bind.clone()).await;
    assert_eq!(b.body["bound"], true, "{}", b.body);
    let mut rel = pair.clone();
    rel["reservationId"] = r2.body["reservationId"].clone();
    let r = post(&env, &st, "acme", "/v1/reservations/release", rel).await;
    assert_eq!(
        (r.body["released"].clone(), r.body["remaining"].clone()),
        (json!(true), json!(1)),
        "{}",
        r.body
    );
    let colon = post(
        &env,
        &st,
        "acme",
        "/v1/reservations/reserve",
        json!({"resource": "a:b", "account": "x"}),
    )
    .await;
    assert_eq!(
        (colon.status, colon.body["field"].clone()),
        (400, json!("resource"))
    );
}

#[tokio::test]
async fn the_state_of_a_bucket_is_read_with_one_get() {
    let (env, st) = world().await;
    post(
        &env,
        &st,
        "acme",
        "/v1/limits/spend",
        json!({"name": "PerUser", "id": "u", "cost": 2}),
    )
    .await;
    env.counter.reset();
    let e = event(
        Some("acme"),
        "GET",
        "/v1/limits/state?name=PerUser&id=u",
        None,
    );
    let s = call(&env, &st, e).await;
    assert_eq!(s.status, 200, "{}", s.body);
    assert_eq!(env.counter.total(), 1);
    assert_eq!(s.body["remaining"], 1);
    assert_eq!(s.body["state"]["tokensAvailable"], 1);
    assert_eq!(
        s.body["state"]["bucket"],
        Value::Null,
        "the stored key is not shown"
    );
}

/// Tenant `b`'s buckets hold what `b` spent, whatever `a` names: every key `a` writes starts with
/// `a:` (so the tenant role's LeadingKeys confine it), and names crafted with separators land in
/// `a`'s key space too.
#[tokio::test]
async fn one_tenant_never_reaches_anothers_buckets() {
    let (env, st) = world().await;
    let spend = |id: &str| json!({"name": "PerUser", "id": id, "cost": 3});
    post(
        &env,
        &st,
        "b",
        "/v1/limits/spend",
        json!({"name": "PerUser", "id": "x", "cost": 1}),
    )
    .await;
    for crafted in ["x", "b:1:x", "1:x", ":b:1:x", "../b/1:x"] {
        let a = post(&env, &st, "a", "/v1/limits/spend", spend(crafted)).await;
        assert_eq!(
            a.body["allowed"], true,
            "{crafted}: a's own bucket: {}",
            a.body
        );
    }
    post(
        &env,
        &st,
        "a",
        "/v1/tokens/take",
        json!({"resource": "b:emr", "account": "1"}),
    )
    .await;
    post(
        &env,
        &st,
        "a",
        "/v1/reservations/reserve",
        json!({"resource": "b", "account": "emr:1"}),
    )
    .await;
    post(
        &env,
        &st,
        "a",
        "/v1/leases/acquire",
        json!({"name": "Llm", "id": "b:3:x", "leaseId": "b", "estimate": 1}),
    )
    .await;
    post(
        &env,
        &st,
        "a",
        "/v1/limits/refund",
        json!({"name": "PerUser", "id": "b:1:x", "idempotencyKey": "b:1:x"}),
    )
    .await;
    let b = post(
        &env,
        &st,
        "b",
        "/v1/limits/check",
        json!({"name": "PerUser", "id": "x"}),
    )
    .await;
    assert_eq!(
        b.body["remaining"], 2,
        "b's bucket holds only b's spend: {}",
        b.body
    );
    // The tenant never comes from the body.
    let named = post(
        &env,
        &st,
        "a",
        "/v1/limits/spend",
        json!({"name": "PerUser", "id": "x", "tenantId": "b"}),
    )
    .await;
    assert_eq!(
        (named.status, named.body["field"].clone()),
        (400, json!("tenantId"))
    );
    // Every key written is in its writer's key space.
    for (table, attr) in [
        (&env.deps.tables.buckets, "bucket"),
        (&env.deps.tables.fungible_tokens, "resourceName"),
        (&env.deps.tables.non_fungible_tokens, "resourceCoordinate"),
    ] {
        let items = env
            .deps
            .dynamo
            .scan()
            .table_name(table)
            .send()
            .await
            .unwrap();
        for item in items.items() {
            let key = item[attr].as_s().unwrap();
            let a = shared::ids::TenantId::parse("a").unwrap();
            let b = shared::ids::TenantId::parse("b").unwrap();
            assert!(
                shared::isolation::key_in_tenant(&a, key)
                    ^ shared::isolation::key_in_tenant(&b, key),
                "{table}: {key:?} is in exactly one tenant's key space"
            );
        }
    }
}

#[tokio::test]
async fn callers_are_bound_and_bad_input_is_a_4xx_naming_the_field() {
    let (env, st) = world().await;
    let body = json!({"name": "PerUser", "id": "u"}).to_string();
    let anon = call(
        &env,
        &st,
        event(None, "POST", "/v1/limits/spend", Some(&body)),
    )
    .await;
    assert_eq!(anon.status, 403, "{}", anon.body);
    let cases: &[(&str, &str, i64, &str)] = &[
        ("/v1/limits/spend", r#"{"id": "u"}"#, 400, "name"),
        (
            "/v1/limits/spend",
            r#"{"name": "Nope", "id": "u"}"#,
            404,
            "name",
        ),
        (
            "/v1/limits/spend",
            r#"{"name": "PerUser", "id": ""}"#,
            400,
            "id",
        ),
        (
            "/v1/limits/spend",
            r#"{"name": "PerUser", "id": "u", "cost": 0}"#,
            400,
            "cost",
        ),
        (
            "/v1/limits/spend",
            r#"{"name": "PerUser", "id": "u", "cost": -1}"#,
            400,
            "cost",
        ),
        // Schema-valid, but above the limit's burst of 3: the limits file's conflict, never a wait.
        (
            "/v1/limits/spend",
            r#"{"name": "PerUser", "id": "u", "cost": 4}"#,
            409,
            "cost",
        ),
        ("/v1/limits/spend", r#"[1]"#, 400, "body"),
        ("/v1/limits/spend", r#"{"#, 400, "body"),
        ("/v1/limits/batch", r#"{"spends": []}"#, 400, "spends"),
        (
            "/v1/limits/batch",
            r#"{"spends": [{"name": 1}]}"#,
            400,
            "spends[0].name",
        ),
        (
            "/v1/leases/acquire",
            r#"{"name": "Llm", "id": "u", "leaseId": "L"}"#,
            400,
            "estimate",
        ),
        ("/v1/tokens/take", r#"{"resource": "r"}"#, 400, "account"),
        ("/v1/nope", r#"{}"#, 404, "path"),
    ];
    for (path, body, status, field) in cases {
        let a = call(&env, &st, event(Some("acme"), "POST", path, Some(body))).await;
        assert_eq!(
            (a.status, a.body["field"].as_str()),
            (*status, Some(*field)),
            "{path} {body}: {}",
            a.body
        );
        assert!(a.body["detail"].is_string());
    }
    let big = format!(
        r#"{{"name": "PerUser", "id": "{}"}}"#,
        "x".repeat(decide_api::input::MAX_BODY_BYTES)
    );
    let a = call(
        &env,
        &st,
        event(Some("acme"), "POST", "/v1/limits/spend", Some(&big)),
    )
    .await;
    assert_eq!((a.status, a.body["field"].as_str()), (413, Some("body")));
    let get = call(
        &env,
        &st,
        event(Some("acme"), "GET", "/v1/limits/spend", None),
    )
    .await;
    assert_eq!((get.status, get.header("allow")), (405, Some("POST")));
    let bad_mode = call(
        &env,
        &st,
        event(
            Some("acme"),
            "POST",
            "/v1/limits/spend?refusal=x",
            Some(r#"{"name":"PerUser","id":"u"}"#),
        ),
    )
    .await;
    assert_eq!(bad_mode.body["field"], "refusal");
}

#[tokio::test]
async fn the_decide_api_refuses_to_start_unbound_or_with_a_bad_limits_file() {
    let env = TestEnv::new(&[]).await;
    for (pairs, var) in [
        (
            vec![("TURNSTILE_DECIDE_AUTH", "none")],
            "TURNSTILE_DECIDE_AUTH",
        ),
        (
            vec![
                ("TURNSTILE_DECIDE_AUTH", "iam"),
                ("TURNSTILE_DECIDE_IAM_BINDING", "any-tenant"),
            ],
            "TURNSTILE_DECIDE_IAM_BINDING",
        ),
        (
            vec![
                ("TURNSTILE_DECIDE_AUTH", "jwt"),
                ("TURNSTILE_LIMITS_YAML", "names: ["),
            ],
            "TURNSTILE_LIMITS_YAML",
        ),
        (
            vec![
                ("TURNSTILE_DECIDE_AUTH", "jwt"),
                ("TURNSTILE_DECIDE_TOKEN_DEFAULT", "10"),
            ],
            "TURNSTILE_DECIDE_TOKEN_DEFAULT",
        ),
    ] {
        let e = decide_api::Config::from_vars(&Vars::from_pairs(pairs))
            .unwrap_err()
            .to_string();
        assert!(e.contains(var), "{e}");
    }
    drop(env);
}

#[tokio::test]
async fn iam_callers_are_bound_by_their_role_session_name() {
    let mut env = TestEnv::new(TABLES).await;
    env.deps.vars = Vars::from_pairs([
        ("TURNSTILE_DECIDE_AUTH", "iam"),
        (
            "TURNSTILE_DECIDE_IAM_ROLE_ARN",
            "arn:aws:iam::123456789012:role/decide-caller",
        ),
        ("TURNSTILE_LIMITS_YAML", LIMITS),
    ]);
    let st = decide_api::init(&env.deps).await.unwrap();
    let with_arn = |arn: &str| {
        let mut e = event(
            None,
            "POST",
            "/v1/limits/spend",
            Some(r#"{"name":"PerUser","id":"u"}"#),
        );
        e["requestContext"]["authorizer"] = json!({"iam": {"userArn": arn}});
        e
    };
    let own = call(
        &env,
        &st,
        with_arn("arn:aws:sts::123456789012:assumed-role/decide-caller/acme"),
    )
    .await;
    assert_eq!(own.status, 200, "{}", own.body);
    let other = call(
        &env,
        &st,
        with_arn("arn:aws:sts::123456789012:assumed-role/admin/acme"),
    )
    .await;
    assert_eq!(other.status, 403);
    // Without backend roles the template runs the function `jwt` with no role: a signed request,
    // even as the role's session, binds no tenant.
    let (jwt_env, jwt_st) = world().await;
    let signed = call(
        &jwt_env,
        &jwt_st,
        with_arn("arn:aws:sts::123456789012:assumed-role/decide-caller/acme"),
    )
    .await;
    assert_eq!(signed.status, 403, "{}", signed.body);
    let _ = env.clock.now();
}
