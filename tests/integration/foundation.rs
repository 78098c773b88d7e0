//! The foundation against DynamoDB Local: table creation from the one definition, the call counter,
//! and per-test isolation.

use aws_sdk_dynamodb::types::{AttributeValue, KeyType, StreamViewType, TimeToLiveStatus};
use shared::catalog::{self, Ensured};
use shared::table::{AttributeStyle, TableKind};
use turnstile_tests::TestEnv;

#[tokio::test]
async fn every_table_is_created_as_defined_and_ensure_is_idempotent() {
    let mut env = TestEnv::new(&[]).await;
    let client = env.deps.dynamo.clone();
    let client = &client;
    for style in [AttributeStyle::Camel, AttributeStyle::Snake] {
        let names = shared::table::TableNames::with_prefix(&format!("{}{style:?}-", env.prefix));
        for def in catalog::catalog(&names, style) {
            env.track_table(&def.name);
            assert_eq!(
                catalog::ensure(client, &def).await.unwrap(),
                Ensured::Created
            );
            assert_eq!(
                catalog::ensure(client, &def).await.unwrap(),
                Ensured::Existed
            );

            let desc = client
                .describe_table()
                .table_name(&def.name)
                .send()
                .await
                .unwrap();
            let t = desc.table().unwrap();
            let keys: Vec<(String, KeyType)> = t
                .key_schema()
                .iter()
                .map(|k| (k.attribute_name().to_string(), k.key_type().clone()))
                .collect();
            let mut want = vec![(def.partition_key.name.to_string(), KeyType::Hash)];
            if let Some(sk) = &def.sort_key {
                want.push((sk.name.to_string(), KeyType::Range));
            }
            assert_eq!(keys, want, "key schema of {}", def.name);

            let gsis: Vec<String> = t
                .global_secondary_indexes()
                .iter()
                .map(|g| {
                    format!(
                        "{}={}",
                        g.index_name().unwrap_or(""),
                        g.key_schema()[0].attribute_name()
                    )
                })
                .collect();
            let want_gsis: Vec<String> = def
                .indexes
                .iter()
                .map(|i| format!("{}={}", i.name, i.partition_key.name))
                .collect();
            assert_eq!(gsis, want_gsis, "indexes of {}", def.name);

            let stream = t
                .stream_specification()
                .and_then(|s| s.stream_view_type().cloned());
            assert_eq!(
                stream,
                def.stream.map(StreamViewType::from),
                "stream of {}",
                def.name
            );

            let ttl = client
                .describe_time_to_live()
                .table_name(&def.name)
                .send()
                .await
                .unwrap();
            let ttl = ttl.time_to_live_description().unwrap();
            match def.ttl_attribute {
                Some(attr) => {
                    assert_eq!(ttl.attribute_name(), Some(attr), "TTL of {}", def.name);
                    assert_eq!(ttl.time_to_live_status(), Some(&TimeToLiveStatus::Enabled));
                }
                None => assert_ne!(ttl.time_to_live_status(), Some(&TimeToLiveStatus::Enabled)),
            }
        }
    }
}

#[tokio::test]
async fn the_call_counter_counts_each_round_trip_by_operation() {
    let env = TestEnv::new(&[TableKind::Tenants]).await;
    let c = &env.deps.dynamo;
    let name = &env.deps.tables.tenants;
    assert_eq!(
        env.counter.total(),
        0,
        "TestEnv resets the counter after setup"
    );

    let put = c
        .put_item()
        .table_name(name)
        .item("tenantId", AttributeValue::S("acme".into()));
    let (res, calls) = env.counter.measure(put.send()).await;
    res.unwrap();
    assert_eq!(calls, 1);

    for _ in 0..2 {
        c.get_item()
            .table_name(name)
            .key("tenantId", AttributeValue::S("acme".into()))
            .send()
            .await
            .unwrap();
    }
    // A failed call is still a round trip.
    let failed = c
        .get_item()
        .table_name("no-such-table-here")
        .key("tenantId", AttributeValue::S("acme".into()))
        .send()
        .await;
    assert!(failed.is_err());

    assert_eq!(env.counter.total(), 4);
    let by_op = env.counter.by_operation();
    assert_eq!(by_op.get("PutItem"), Some(&1));
    assert_eq!(by_op.get("GetItem"), Some(&3));
    env.counter.reset();
    assert_eq!(env.counter.total(), 0);
    assert!(env.counter.by_operation().is_empty());
}

#[tokio::test]
async fn the_call_counter_charges_write_and_read_units_as_dynamodb_bills_them() {
    use aws_sdk_dynamodb::types::{TransactWriteItem, Update};
    let env = TestEnv::new(&[TableKind::Tenants]).await;
    let c = &env.deps.dynamo;
    let name = &env.deps.tables.tenants;
    let key = |id: &str| AttributeValue::S(id.into());

    // A small put: 1 write unit, as DynamoDB (Local) reports it.
    let put = c.put_item().table_name(name).item("tenantId", key("acme"));
    let (res, units) = env.counter.measure_units(put.send()).await;
    res.unwrap();
    assert_eq!(units, shared::capacity::Units::write(1.0));

    // An eventually consistent read of a small item: half a read unit.
    let get = c.get_item().table_name(name).key("tenantId", key("acme"));
    let (res, units) = env.counter.measure_units(get.send()).await;
    res.unwrap();
    assert_eq!(units, shared::capacity::Units::read(0.5));

    // Refused on its condition: DynamoDB answers without a figure but bills the write.
    let refused = c
        .put_item()
        .table_name(name)
        .item("tenantId", key("acme"))
        .condition_expression("attribute_not_exists(tenantId)");
    let (res, units) = env.counter.measure_units(refused.send()).await;
    assert!(res.is_err());
    assert_eq!(units, shared::capacity::Units::write(1.0));

    // A 3-item transaction: 2 units per item (DynamoDB Local reports less; see capacity.rs).
    let bump = |id: &str| {
        TransactWriteItem::builder()
            .update(
                Update::builder()
                    .table_name(name)
                    .key("tenantId", key(id))
                    .update_expression("ADD n :one")
                    .expression_attribute_values(":one", AttributeValue::N("1".into()))
                    .build()
                    .unwrap(),
            )
            .build()
    };
    let txn = c
        .transact_write_items()
        .transact_items(bump("a"))
        .transact_items(bump("b"))
        .transact_items(bump("c"));
    let (res, units) = env.counter.measure_units(txn.send()).await;
    res.unwrap();
    assert_eq!(units, shared::capacity::Units::write(6.0));
    let usage = env.counter.usage();
    assert_eq!(usage["TransactWriteItems"].calls, 1);
    assert_eq!(usage["PutItem"].write_units, 2.0);
}

#[tokio::test]
async fn each_test_env_has_its_own_tables() {
    let a = TestEnv::new(&[TableKind::Tenants]).await;
    let b = TestEnv::new(&[TableKind::Tenants]).await;
    assert_ne!(a.deps.tables.tenants, b.deps.tables.tenants);
    a.deps
        .dynamo
        .put_item()
        .table_name(&a.deps.tables.tenants)
        .item("tenantId", AttributeValue::S("only-in-a".into()))
        .send()
        .await
        .unwrap();
    let seen = b
        .deps
        .dynamo
        .scan()
        .table_name(&b.deps.tables.tenants)
        .send()
        .await
        .unwrap();
    assert_eq!(seen.count(), 0);
}

#[tokio::test]
async fn a_dropped_test_env_deletes_its_tables() {
    let env = TestEnv::new(&[TableKind::Tenants, TableKind::Sessions]).await;
    let names = [
        env.deps.tables.tenants.clone(),
        env.deps.tables.sessions.clone(),
    ];
    let client = shared::dynamo::local_client(&env.endpoint, None);
    drop(env);
    for name in names {
        let gone = client.describe_table().table_name(&name).send().await;
        assert!(gone.is_err(), "{name} should have been deleted");
    }
}
