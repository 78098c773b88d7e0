//! The edges of what openapi/decide-api.yaml promises, each found by Schemathesis
//! (scripts/schemathesis.sh) and kept here against DynamoDB Local, so a change that breaks one
//! fails `cargo test` without the Python tool: JSON Schema's `integer` and a `null` optional
//! member, the largest valid batch under the body limit, and reservation names within the limit
//! row's sort key; and how a bound reservation's capacity comes back (docs/decide-api.md).

use serde_json::{json, Value};

use crate::decide::{post, world};

/// `integer` in JSON Schema is any number without a fraction, so `2.0` is a cost of 2; an optional
/// member given as `null` takes its default, as an absent one does. A fraction is still a 400.
#[tokio::test]
async fn whole_numbers_written_with_a_fraction_and_null_optional_members_are_accepted() {
    let (env, st) = world().await;
    let spend = |cost: Value| json!({"name": "PerUser", "id": "u1", "cost": cost});
    let a = post(&env, &st, "acme", "/v1/limits/spend", spend(json!(2.0))).await;
    assert_eq!(
        (a.status, a.body["cost"].clone()),
        (200, json!(2)),
        "{}",
        a.body
    );
    let a = post(&env, &st, "acme", "/v1/limits/check", spend(Value::Null)).await;
    assert_eq!(
        (a.status, a.body["cost"].clone()),
        (200, json!(0)),
        "{}",
        a.body
    );
    let a = post(&env, &st, "acme", "/v1/limits/spend", spend(json!(1.5))).await;
    assert_eq!(
        (a.status, a.body["field"].clone()),
        (400, json!("cost")),
        "{}",
        a.body
    );
    let lease = json!({"name": "Llm", "id": "u1", "leaseId": "l1", "estimate": 10.0,
        "ttlSeconds": null});
    let a = post(&env, &st, "acme", "/v1/leases/acquire", lease).await;
    assert_eq!(a.status, 200, "{}", a.body);
    assert_eq!(a.body["lease"]["amount"], 10, "{}", a.body);
    let batch = json!({"spends": [{"name": "Daily", "id": "u1", "cost": 1.0}]});
    let a = post(&env, &st, "acme", "/v1/limits/batch", batch).await;
    assert_eq!(a.status, 200, "{}", a.body);
}

/// The largest batch the document allows (100 spends whose ids are 1,024 bytes) is read and
/// decided, not refused as too large.
#[tokio::test]
async fn the_largest_valid_batch_fits_the_body_limit() {
    let (env, st) = world().await;
    let spends: Vec<Value> = (0..100)
        .map(|i| json!({"name": "Daily", "id": format!("{i:04}{}", "x".repeat(1020)), "cost": 1}))
        .collect();
    let a = post(
        &env,
        &st,
        "acme",
        "/v1/limits/batch",
        json!({ "spends": spends }),
    )
    .await;
    assert_eq!(a.status, 200, "{}", a.body);
    assert_eq!(a.body["allowed"], true, "{}", a.body);
}

/// A reservation's limit row is keyed (tenant, `resource:account`), a sort key DynamoDB caps at
/// 1,024 bytes: the document bounds `resource` to 255 bytes and `account` to 768, and a longer
/// one is a 400 naming the field, never a 503 from a refused key.
#[tokio::test]
async fn reservation_names_beyond_the_limit_rows_key_are_a_400_naming_the_field() {
    let (env, st) = world().await;
    let pair = |r: usize, a: usize| json!({"resource": "r".repeat(r), "account": "a".repeat(a)});
    let a = post(
        &env,
        &st,
        "acme",
        "/v1/reservations/reserve",
        pair(255, 768),
    )
    .await;
    assert_eq!(
        (a.status, a.body["allowed"].clone()),
        (200, json!(true)),
        "{}",
        a.body
    );
    for (r, n, field) in [
        (3, 769, "account"),
        (3, 1024, "account"),
        (256, 1, "resource"),
    ] {
        let a = post(&env, &st, "acme", "/v1/reservations/reserve", pair(r, n)).await;
        assert_eq!(
            (a.status, a.body["field"].clone()),
            (400, json!(field)),
            "{}",
            a.body
        );
        let mut release = pair(r, n);
        release["reservationId"] = json!("x");
        let a = post(&env, &st, "acme", "/v1/reservations/release", release).await;
        assert_eq!(
            (a.status, a.body["field"].clone()),
            (400, json!(field)),
            "{}",
            a.body
        );
    }
}

/// The token remover looks up bare resource ids and never finds a token bound through the API
/// (`{tenant}:{resourceId}`): the API's release is how its capacity comes back, bound or not.
#[tokio::test]
async fn a_reservation_bound_through_the_api_is_released_through_it() {
    let (env, st) = world().await;
    let pair = json!({"resource": "emr", "account": "a1"});
    let r = post(&env, &st, "acme", "/v1/reservations/reserve", pair.clone()).await;
    assert_eq!(r.body["remaining"], 1, "{}", r.body);
    let mut held = pair.clone();
    held["reservationId"] = r.body["reservationId"].clone();
    let mut bind = held.clone();
    bind["resourceId"] = json!("j-1");
    let b = post(&env, &st, "acme", "/v1/reservations/bind", bind).await;
    assert_eq!(b.body["bound"], true, "{}", b.body);
    let gone = shared::reservation::NonFungibleLimiter::from_deps(&env.deps)
        .unwrap()
        .remove_by_resource_id("j-1", None)
        .await
        .unwrap();
    assert!(gone.is_empty(), "the remover found {gone:?}");
    let rel = post(&env, &st, "acme", "/v1/reservations/release", held).await;
    assert_eq!(
        (rel.body["released"].clone(), rel.body["remaining"].clone()),
        (json!(true), json!(2)),
        "{}",
        rel.body
    );
}
