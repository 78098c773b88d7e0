//! Loading limits: rate-limiter-py's JSON diffed against the `serviceName` index, in both
//! attribute styles; other services' rows are never touched, unless taken over
//! explicitly.

use aws_sdk_dynamodb::types::AttributeValue;
use shared::limit::load::{self, parse_file, LoadOptions};
use shared::limit::{LimitRow, LimitStore};
use shared::table::{AttributeStyle, TableKind};
use turnstile_tests::TestEnv;

const DRY: LoadOptions = LoadOptions {
    dry_run: true,
    take_over: false,
};

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
    let dry = load::load(&store, "orders", &first, DRY).await.unwrap();
    assert_eq!((dry.added.len(), dry.applied), (2, false));
    assert_eq!(
        store.list(Some("orders")).await.unwrap().len(),
        0,
        "dry run writes nothing"
    );

    let d = load::load(&store, "orders", &first, LoadOptions::default())
        .await
        .unwrap();
    assert_eq!(
        (d.added.len(), d.changed.len(), d.removed.len(), d.applied),
        (2, 0, 0, true)
    );

    let second = parse_file(&file(&[("api", "a", 20, 60), ("emr", "a", 3, 1)])).unwrap();
    let d = load::load(&store, "orders", &second, LoadOptions::default())
        .await
        .unwrap();
    assert_eq!(d.added.len(), 1);
    assert_eq!(d.changed.len(), 1);
    assert_eq!(d.changed[0].before.limit, 10);
    assert_eq!(d.changed[0].after.limit, 20);
    assert_eq!(d.removed.len(), 1);
    assert_eq!(d.removed[0].account_id, "b");
    assert_eq!(d.unchanged, 0);

    let again = load::load(&store, "orders", &second, LoadOptions::default())
        .await
        .unwrap();
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

fn row(resource: &str, account: &str, limit: i64, service: Option<&str>) -> LimitRow {
    LimitRow {
        resource_name: resource.into(),
        account_id: account.into(),
        limit,
        window_sec: Some(60),
        service_name: service.map(String::from),
    }
}

/// `limits load --service orders` used to diff only against orders' rows and
/// put whole rows, silently re-owning billing's. Now a file naming another owner's row is refused
/// whole (conflicts name resource, account and owner), the dry run shows the same conflicts, the
/// writes are conditional on the owner, and only `take_over` re-owns.
#[tokio::test]
async fn loading_refuses_rows_owned_by_another_service() {
    let env = TestEnv::new(&[TableKind::Limits]).await;
    let store = LimitStore::from_deps(&env.deps).unwrap();
    store
        .put(&row("api", "shared", 1, Some("billing")))
        .await
        .unwrap();
    store.put(&row("api", "manual", 2, None)).await.unwrap();

    let f = parse_file(&file(&[("api", "a", 10, 60), ("api", "shared", 5, 60)])).unwrap();
    for opts in [DRY, LoadOptions::default()] {
        let d = load::load(&store, "orders", &f, opts).await.unwrap();
        assert!(!d.applied, "{opts:?}: refused");
        assert_eq!(d.added, vec![row("api", "a", 10, Some("orders"))]);
        assert_eq!(d.conflicts.len(), 1, "{opts:?}");
        let c = &d.conflicts[0];
        assert_eq!(
            (
                c.resource_name.as_str(),
                c.account_id.as_str(),
                c.owner.as_deref()
            ),
            ("api", "shared", Some("billing"))
        );
        assert_eq!(c.current.limit, 1);
    }
    assert_eq!(
        store.get("api", "shared").await.unwrap(),
        Some(row("api", "shared", 1, Some("billing"))),
        "billing's row is untouched"
    );
    assert!(
        store.list(Some("orders")).await.unwrap().is_empty(),
        "a refused load writes nothing, not even its own rows"
    );

    // A row without a service is not free for the taking either.
    let f2 = parse_file(&file(&[("api", "manual", 7, 60)])).unwrap();
    let d = load::load(&store, "orders", &f2, LoadOptions::default())
        .await
        .unwrap();
    assert_eq!(
        (d.applied, d.conflicts.len(), d.conflicts[0].owner.clone()),
        (false, 1, None)
    );

    // The writes themselves are conditional: a loader that read before billing took the row
    // cannot re-own it, nor delete it as its own.
    store
        .put(&row("api", "raced", 3, Some("billing")))
        .await
        .unwrap();
    let lost = store
        .put_owned(&row("api", "raced", 9, Some("orders")), None)
        .await
        .unwrap();
    assert_eq!(lost, Some(row("api", "raced", 3, Some("billing"))));
    let kept = store.delete_owned("api", "raced", "orders").await.unwrap();
    assert_eq!(kept.map(|r| r.service_name), Some(Some("billing".into())));
    assert_eq!(store.get("api", "raced").await.unwrap().unwrap().limit, 3);
    assert_eq!(
        store.delete_owned("api", "gone", "orders").await.unwrap(),
        None,
        "deleting what is already gone is fine"
    );

    // Explicitly taking over: conditioned on the owner reported, and reported.
    let take = LoadOptions {
        dry_run: false,
        take_over: true,
    };
    let d = load::load(&store, "orders", &f, take).await.unwrap();
    assert!(d.applied && d.conflicts.is_empty());
    assert_eq!(d.added.len(), 1);
    assert_eq!(d.taken_over.len(), 1);
    assert_eq!(d.taken_over[0].owner.as_deref(), Some("billing"));
    assert_eq!(
        store.get("api", "shared").await.unwrap(),
        Some(row("api", "shared", 5, Some("orders")))
    );
    let billing = store.list(Some("billing")).await.unwrap();
    assert_eq!(billing, vec![row("api", "raced", 3, Some("billing"))]);
}
