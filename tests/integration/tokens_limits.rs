//! Loading limits: rate-limiter-py's JSON diffed against the `serviceName` index, in both
//! attribute styles; other services' rows are never touched.

use aws_sdk_dynamodb::types::AttributeValue;
use shared::limit::load::{self, parse_file};
use shared::limit::{LimitRow, LimitStore};
use shared::table::{AttributeStyle, TableKind};
use turnstile_tests::TestEnv;

fn file(entries: &[(&str, &str, i64, i64)]) -> String {
    let limits: Vec<_> = entries
        .iter()
        .map(|(r, a, l, w)| serde_json::json!({"resourceName": r, "accountId": a, "limit": l, "windowSec": w}))
        .collect();
    serde_json::json!({ "limits": limits }).to_string()
}

async fn check_style(style: AttributeStyle, service_attr: &str) {
    let env = TestEnv::with_style(&[TableKind::Limits], style).await;
    let store = LimitStore::from_deps(&env.deps).unwrap();
    // Another service's row on the same table.
    store
        .put(&LimitRow {
            resource_name: "api".into(),
            account_id: "other".into(),
            limit: 1,
            window_sec: Some(1),
            service_name: Some("billing".into()),
        })
        .await
        .unwrap();

    let first = parse_file(&file(&[("api", "a", 10, 60), ("api", "b", 5, 60)])).unwrap();
    let dry = load::load(&store, "orders", &first, true).await.unwrap();
    assert_eq!((dry.added.len(), dry.applied), (2, false));
    assert_eq!(
        store.list(Some("orders")).await.unwrap().len(),
        0,
        "dry run writes nothing"
    );

    let d = load::load(&store, "orders", &first, false).await.unwrap();
    assert_eq!(
        (d.added.len(), d.changed.len(), d.removed.len(), d.applied),
        (2, 0, 0, true)
    );

    let second = parse_file(&file(&[("api", "a", 20, 60), ("emr", "a", 3, 1)])).unwrap();
    let d = load::load(&store, "orders", &second, false).await.unwrap();
    assert_eq!(d.added.len(), 1);
    assert_eq!(d.changed.len(), 1);
    assert_eq!(d.changed[0].before.limit, 10);
    assert_eq!(d.changed[0].after.limit, 20);
    assert_eq!(d.removed.len(), 1);
    assert_eq!(d.removed[0].account_id, "b");
    assert_eq!(d.unchanged, 0);

    let again = load::load(&store, "orders", &second, false).await.unwrap();
    assert!(again.is_empty());
    assert_eq!(again.unchanged, 2);

    let rows = store.list(Some("orders")).await.unwrap();
    assert_eq!(rows.len(), 2);
    assert_eq!(
        store.list(None).await.unwrap().len(),
        3,
        "billing's row is untouched"
    );

    let raw = env
        .deps
        .dynamo
        .scan()
        .table_name(&env.deps.tables.limits)
        .send()
        .await
        .unwrap();
    assert!(raw
        .items()
        .iter()
        .all(|i| matches!(i.get(service_attr), Some(AttributeValue::S(_)))));
}

#[tokio::test]
async fn loading_limits_diffs_against_the_service_index_camel() {
    check_style(AttributeStyle::Camel, "serviceName").await;
}

#[tokio::test]
async fn loading_limits_diffs_against_the_service_index_snake() {
    check_style(AttributeStyle::Snake, "service_name").await;
}
