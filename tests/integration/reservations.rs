//! Non-fungible tokens against DynamoDB Local: exact capacity under concurrency, expiry without
//! waiting for TTL, binding rules, the scoped form, call counts and both attribute styles.

use std::time::Duration;

use aws_sdk_dynamodb::types::AttributeValue;
use futures::future::join_all;
use shared::limit::LimitRow;
use shared::reservation::{CoordinateError, NonFungibleLimiter, ReservationError, LEDGER_ID};
use shared::table::{AttributeStyle, TableKind};
use turnstile_tests::TestEnv;

const TABLES: [TableKind; 2] = [TableKind::NonFungibleTokens, TableKind::Limits];

fn limiter(env: &TestEnv) -> NonFungibleLimiter {
    NonFungibleLimiter::from_deps(&env.deps).expect("limiter")
}

async fn live(l: &NonFungibleLimiter, account: &str) -> usize {
    l.list("emr", account)
        .await
        .unwrap()
        .iter()
        .filter(|r| r.live)
        .count()
}

async fn concurrent(ls: Vec<NonFungibleLimiter>, account: &'static str, limit: i64) -> usize {
    join_all(
        ls.into_iter()
            .map(|l| tokio::spawn(async move { l.get_reservation("emr", account, limit).await })),
    )
    .await
    .into_iter()
    .map(|r| r.expect("task"))
    .filter(|r| match r {
        Ok(_) => true,
        Err(ReservationError::Limited { .. }) => false,
        Err(e) => panic!("unexpected error: {e}"),
    })
    .count()
}

#[tokio::test]
async fn forty_concurrent_callers_get_exactly_the_capacity() {
    let env = TestEnv::new(&TABLES).await;
    let one = limiter(&env);
    assert_eq!(concurrent(vec![one.clone(); 40], "shared", 5).await, 5);
    eprintln!(
        "40 callers on one limiter: {:?}",
        env.counter.by_operation()
    );
    assert_eq!(live(&one, "shared").await, 5);

    let many: Vec<_> = (0..40).map(|_| limiter(&env)).collect();
    assert_eq!(concurrent(many, "cold", 3).await, 3);
    assert_eq!(live(&one, "cold").await, 3);

    // Once they expire, a second wave again gets exactly the capacity, pruning the old entries.
    env.clock.advance(Duration::from_secs(300));
    let many: Vec<_> = (0..40).map(|_| limiter(&env)).collect();
    assert_eq!(concurrent(many, "cold", 3).await, 3);
    assert_eq!(live(&one, "cold").await, 3);
}

/// Decision 0101's budget, no transactions: reserve 1 UpdateItem (warm), create_token 3, delete 2.
#[tokio::test]
async fn call_budget_is_three_on_first_use_two_cold_one_warm() {
    let env = TestEnv::new(&TABLES).await;
    let first = limiter(&env);
    env.counter.reset();
    let r = first.get_reservation("emr", "acct", 3).await.unwrap();
    assert_eq!(
        env.counter.by_operation(),
        [
            ("BatchGetItem".to_string(), 1),
            ("Query".to_string(), 1),
            ("UpdateItem".to_string(), 1)
        ]
        .into(),
        "a coordinate's first use also counts rows written without a ledger"
    );
    r.delete().await.unwrap();
    let l = limiter(&env);
    env.counter.reset();
    let r = l.get_reservation("emr", "acct", 2).await.unwrap();
    assert_eq!(
        env.counter.by_operation(),
        [
            ("BatchGetItem".to_string(), 1),
            ("UpdateItem".to_string(), 1)
        ]
        .into(),
        "cold"
    );
    env.counter.reset();
    let r2 = l.get_reservation("emr", "acct", 2).await.unwrap();
    assert_eq!(
        env.counter.by_operation(),
        [("UpdateItem".to_string(), 1)].into(),
        "warm: one UpdateItem on the ledger, no row"
    );
    env.counter.reset();
    r.create_token("j-CLUSTER1").await.unwrap();
    assert_eq!(
        env.counter.by_operation(),
        [("GetItem".to_string(), 1), ("UpdateItem".to_string(), 2)].into(),
        "create_token: the bound row, the ended-resource marker's read, then the ledger entry"
    );
    env.counter.reset();
    r2.delete().await.unwrap();
    assert_eq!(
        env.counter.by_operation(),
        [("UpdateItem".to_string(), 1)].into(),
        "delete: the ledger entry only"
    );
    // A refusal predicted by the cached ledger is confirmed with one read.
    let _r3 = l.get_reservation("emr", "acct", 2).await.unwrap();
    env.counter.reset();
    let err = l.get_reservation("emr", "acct", 2).await.unwrap_err();
    assert!(
        matches!(
            err,
            ReservationError::Limited {
                limit: 2,
                live: 2,
                ..
            }
        ),
        "{err}"
    );
    assert_eq!(
        env.counter.by_operation(),
        [("GetItem".to_string(), 1)].into()
    );
}

#[tokio::test]
async fn expired_reservations_and_tokens_stop_counting_at_their_expiry() {
    let env = TestEnv::new(&TABLES).await;
    let l = limiter(&env);
    let a = l.get_reservation("emr", "acct", 2).await.unwrap();
    let _b = l.get_reservation("emr", "acct", 2).await.unwrap();
    assert!(l.get_reservation("emr", "acct", 2).await.is_err());
    a.create_token("j-A").await.unwrap();
    env.clock.advance(Duration::from_secs(299));
    assert!(
        l.get_reservation("emr", "acct", 2).await.is_err(),
        "b is still live"
    );
    env.clock.advance(Duration::from_secs(1));
    // b's 5 minutes are over (TTL has not removed its row: the rows are still there).
    assert_eq!(l.list("emr", "acct").await.unwrap().len(), 2);
    let c = l.get_reservation("emr", "acct", 2).await.unwrap();
    assert!(
        l.get_reservation("emr", "acct", 2).await.is_err(),
        "a's token lives 8 h"
    );
    env.clock.advance(Duration::from_secs(8 * 3600));
    assert!(l.get_reservation("emr", "acct", 2).await.is_ok());
    assert!(l.get_reservation("emr", "acct", 2).await.is_ok());
    assert!(l.get_reservation("emr", "acct", 2).await.is_err());
    drop(c);
}

#[tokio::test]
async fn create_token_on_an_expired_or_deleted_reservation_is_an_error() {
    let env = TestEnv::new(&TABLES).await;
    let l = limiter(&env);

    let expired = l.get_reservation("emr", "acct", 5).await.unwrap();
    env.clock.advance(Duration::from_secs(300));
    let err = expired.create_token("j-LATE").await.unwrap_err();
    assert!(matches!(err, ReservationError::Gone { .. }), "{err}");
    let rows = l.list("emr", "acct").await.unwrap();
    assert_eq!(rows.len(), 1);
    assert!(!rows[0].live);
    assert_eq!(
        l.find_by_resource_id("j-LATE", None).await.unwrap(),
        [],
        "the bound row was deleted again"
    );

    let deleted = l.get_reservation("emr", "acct", 5).await.unwrap();
    deleted.delete().await.unwrap();
    deleted.delete().await.unwrap(); // idempotent
    let err = deleted.create_token("j-GONE").await.unwrap_err();
    assert!(matches!(err, ReservationError::Gone { .. }), "{err}");
    assert!(
        l.list("emr", "acct")
            .await
            .unwrap()
            .iter()
            .all(|r| r.reservation_id != deleted.id),
        "no partial row was recreated"
    );
    assert_eq!(l.find_by_resource_id("j-GONE", None).await.unwrap(), []);

    let r = l.get_reservation("emr", "acct", 5).await.unwrap();
    let t = r.create_token("j-ONE").await.unwrap();
    assert_eq!(t.resource_id, "j-ONE");
    env.clock.advance(Duration::from_secs(60));
    let again = r
        .create_token("j-ONE")
        .await
        .expect("binding to the same resource again is harmless");
    assert_eq!(again, t, "the same bind: its expiry is kept");
    let err = r.create_token("j-TWO").await.unwrap_err();
    assert!(
        matches!(err, ReservationError::AlreadyBound { bound_until, .. } if bound_until == t.expiration_time),
        "{err}"
    );
    assert_eq!(l.find_by_resource_id("j-TWO", None).await.unwrap(), []);
    let bound = l.find_by_resource_id("j-ONE", None).await.unwrap();
    assert_eq!(bound.len(), 1);
    assert_eq!(
        (
            bound[0].reservation_id.as_str(),
            bound[0].coordinate.as_str(),
            bound[0].live
        ),
        (r.id.as_str(), "emr:acct", true)
    );
}

#[derive(Debug)]
enum WorkError {
    Limiter(ReservationError),
    Failed,
}

impl From<ReservationError> for WorkError {
    fn from(e: ReservationError) -> Self {
        WorkError::Limiter(e)
    }
}

#[tokio::test]
async fn the_scoped_form_deletes_the_reservation_when_the_work_fails_or_panics() {
    let env = TestEnv::new(&TABLES).await;
    let l = limiter(&env);

    let out: Result<(), WorkError> = l
        .with_reservation("emr", "acct", 1, |_r| async { Err(WorkError::Failed) })
        .await;
    assert!(matches!(out, Err(WorkError::Failed)));
    assert_eq!(live(&l, "acct").await, 0, "released after the failure");

    let l2 = l.clone();
    let joined = tokio::spawn(async move {
        l2.with_reservation("emr", "acct", 1, |_r| async {
            if true {
                panic!("work panicked");
            }
            Ok::<(), WorkError>(())
        })
        .await
    })
    .await;
    assert!(joined.unwrap_err().is_panic(), "the panic is resumed");
    assert_eq!(live(&l, "acct").await, 0, "released after the panic");

    let token = l
        .with_reservation("emr", "acct", 1, |r| async move {
            let cluster = "j-NEW"; // create_emr_cluster()
            Ok::<_, WorkError>(r.create_token(cluster).await?)
        })
        .await
        .unwrap();
    assert_eq!(token.resource_id, "j-NEW");
    let out: Result<(), WorkError> = l
        .with_reservation("emr", "acct", 1, |_r| async { Ok(()) })
        .await;
    assert!(matches!(
        out,
        Err(WorkError::Limiter(ReservationError::Limited { .. }))
    ));
}

#[tokio::test]
async fn limit_rows_apply_and_zero_blocks() {
    let env = TestEnv::new(&TABLES).await;
    let l = limiter(&env);
    let row = |account: &str, limit| LimitRow {
        resource_name: "emr".into(),
        account_id: account.into(),
        limit,
        window_sec: None,
        service_name: Some("svc".into()),
    };
    l.limits().put(&row("one", 1)).await.unwrap();
    l.limits().put(&row("none", 0)).await.unwrap();
    assert!(l.get_reservation("emr", "one", 10).await.is_ok());
    assert!(matches!(
        l.get_reservation("emr", "one", 10).await,
        Err(ReservationError::Limited { limit: 1, .. })
    ));
    assert!(matches!(
        l.get_reservation("emr", "none", 10).await,
        Err(ReservationError::Blocked { .. })
    ));
}

#[tokio::test]
async fn remove_by_resource_id_releases_capacity_and_is_idempotent() {
    let env = TestEnv::new(&TABLES).await;
    let l = limiter(&env);
    for i in 0..3 {
        let r = l.get_reservation("emr", "acct", 3).await.unwrap();
        r.create_token(if i < 2 { "j-SAME" } else { "j-OTHER" })
            .await
            .unwrap();
    }
    assert!(l.get_reservation("emr", "acct", 3).await.is_err());
    // Page size 1: the index query is paginated.
    let removed = l.remove_by_resource_id("j-SAME", Some(1)).await.unwrap();
    assert_eq!(removed.len(), 2);
    assert_eq!(live(&l, "acct").await, 1);
    assert!(l
        .remove_by_resource_id("j-SAME", None)
        .await
        .unwrap()
        .is_empty());
    assert!(l.get_reservation("emr", "acct", 3).await.is_ok());
    assert!(l.get_reservation("emr", "acct", 3).await.is_ok());
    assert!(l.get_reservation("emr", "acct", 3).await.is_err());
}

#[tokio::test]
async fn snake_case_tables_work_unchanged() {
    let env = TestEnv::with_style(&TABLES, AttributeStyle::Snake).await;
    let l = limiter(&env);
    let r = l.get_reservation("emr", "acct", 1).await.unwrap();
    r.create_token("j-SNAKE").await.unwrap();
    let items = env
        .deps
        .dynamo
        .scan()
        .table_name(&env.deps.tables.non_fungible_tokens)
        .send()
        .await
        .unwrap();
    let items = items.items();
    assert_eq!(items.len(), 2, "the bound row and the ledger");
    let row = items
        .iter()
        .find(|i| i.get("reservation_id") != Some(&AttributeValue::S(LEDGER_ID.into())))
        .unwrap();
    assert_eq!(
        row.get("resource_coordinate"),
        Some(&AttributeValue::S(":ended:j-SNAKE".into())),
        "in the resource's partition"
    );
    assert_eq!(
        (row.get("resource_name"), row.get("account_id")),
        (
            Some(&AttributeValue::S("emr".into())),
            Some(&AttributeValue::S("acct".into()))
        )
    );
    assert!(row.contains_key("expiration_time"));
    assert!(
        !row.contains_key("resource_id"),
        "no resource-index entry to pay for"
    );
    assert!(matches!(
        l.get_reservation("emr", "acct", 1).await,
        Err(ReservationError::Limited { .. })
    ));
    assert_eq!(
        l.remove_by_resource_id("j-SNAKE", None)
            .await
            .unwrap()
            .len(),
        1
    );
    assert!(l.get_reservation("emr", "acct", 1).await.is_ok());
}

#[tokio::test]
async fn rows_written_without_a_ledger_hold_capacity_until_they_expire() {
    let env = TestEnv::new(&TABLES).await;
    let now = shared::clock::Clock::now(&env.clock).as_secs();
    // Two live tokens and one expired reservation, as rate-limiter-py writes them.
    for (id, exp, cluster) in [
        ("py-1", now + 3600, Some("j-PY1")),
        ("py-2", now + 60, None),
        ("py-old", now - 1, None),
    ] {
        let mut put = env
            .deps
            .dynamo
            .put_item()
            .table_name(&env.deps.tables.non_fungible_tokens)
            .item("resourceCoordinate", AttributeValue::S("emr:acct".into()))
            .item("reservationId", AttributeValue::S(id.into()))
            .item("resourceName", AttributeValue::S("emr".into()))
            .item("accountId", AttributeValue::S("acct".into()))
            .item("expirationTime", AttributeValue::N(exp.to_string()));
        if let Some(c) = cluster {
            put = put.item("resourceId", AttributeValue::S(c.into()));
        }
        put.send().await.unwrap();
    }
    let l = limiter(&env);
    assert!(matches!(
        l.get_reservation("emr", "acct", 2).await,
        Err(ReservationError::Limited { live: 2, .. })
    ));
    let r = l
        .get_reservation("emr", "acct", 3)
        .await
        .expect("one unit is free");
    assert!(matches!(
        l.get_reservation("emr", "acct", 3).await,
        Err(ReservationError::Limited { live: 3, .. })
    ));
    // The legacy reservation can still be bound, and the remover releases the legacy token.
    l.reservation("emr", "acct", "py-2")
        .unwrap()
        .create_token("j-PY2")
        .await
        .unwrap();
    assert_eq!(
        l.remove_by_resource_id("j-PY1", None).await.unwrap().len(),
        1
    );
    assert!(l.get_reservation("emr", "acct", 3).await.is_ok());
    drop(r);
}

/// The remover ends a resource while a coordinate's first reservation seeds its ledger from the
/// rows rate-limiter-py wrote (between its read of them and its ledger write): the token it
/// removes had no entry to release yet, and must not be seeded after its row is gone, where it
/// would hold a unit for the token's 8 hours with no event left to release it.
#[tokio::test]
async fn a_legacy_token_removed_while_its_ledger_is_seeded_holds_nothing() {
    use futures::FutureExt;
    use shared::interleave::{Interleave, Point};

    let env = TestEnv::new(&TABLES).await;
    let now = shared::clock::Clock::now(&env.clock).as_secs();
    env.deps
        .dynamo
        .put_item()
        .table_name(&env.deps.tables.non_fungible_tokens)
        .item(
            "resourceCoordinate",
            AttributeValue::S("emr:seeding".into()),
        )
        .item("reservationId", AttributeValue::S("py-1".into()))
        .item("resourceName", AttributeValue::S("emr".into()))
        .item("accountId", AttributeValue::S("seeding".into()))
        .item(
            "expirationTime",
            AttributeValue::N((now + 3600).to_string()),
        )
        .item("resourceId", AttributeValue::S("j-PY1".into()))
        .send()
        .await
        .unwrap();
    let remover = limiter(&env);
    let l = limiter(&env).with_interleave(Interleave::with(move |p| {
        let remover = remover.clone();
        async move {
            if p == Point::ReserveAfterLegacyRead {
                let removed = remover.remove_by_resource_id("j-PY1", None).await.unwrap();
                assert_eq!(removed.len(), 1, "the remover finds the legacy token");
            }
        }
        .boxed()
    }));
    l.get_reservation("emr", "seeding", 2).await.unwrap();
    let second = limiter(&env).get_reservation("emr", "seeding", 2).await;
    assert!(
        second.is_ok(),
        "the removed token holds nothing, so a second unit is free: {second:?}"
    );
}

/// `"{resource}:{account}"` made (`emr`, `acct:1`) and (`emr:acct`, `1`) one
/// ledger. A resource name with ':' is now refused (naming the field), so they cannot share capacity;
/// an account with ':' keeps rate-limiter-py's coordinate.
#[tokio::test]
async fn a_separator_in_the_resource_name_cannot_alias_another_coordinate() {
    let env = TestEnv::new(&TABLES).await;
    let l = limiter(&env);
    let held = l.get_reservation("emr", "acct:1", 1).await.unwrap();
    assert_eq!(held.coordinate, "emr:acct:1");

    let err = l.get_reservation("emr:acct", "1", 1).await.unwrap_err();
    assert!(
        matches!(
            err,
            ReservationError::InvalidCoordinate(CoordinateError::SeparatorInResource { ref resource })
                if resource == "emr:acct"
        ),
        "{err}"
    );
    assert!(err.to_string().contains("resource name"), "{err}");
    assert!(l.list("emr:acct", "1").await.is_err());
    assert!(l.reservation("emr:acct", "1", &held.id).is_err());
    assert!(
        l.reservation("emr", "acct:1", LEDGER_ID).is_err(),
        "the ledger is not a reservation"
    );

    // (emr, acct:1)'s one unit is still held, and its row is the one rate-limiter-py would write.
    assert!(matches!(
        l.get_reservation("emr", "acct:1", 1).await,
        Err(ReservationError::Limited { live: 1, .. })
    ));
    let rows = l.list("emr", "acct:1").await.unwrap();
    assert_eq!(rows.len(), 1);
    assert_eq!(
        (
            rows[0].resource_name.as_deref(),
            rows[0].account_id.as_deref()
        ),
        (Some("emr"), Some("acct:1"))
    );
    held.delete().await.unwrap();
    assert!(l.get_reservation("emr", "acct:1", 1).await.is_ok());
}

/// Reserve/bind/delete churn from 50 tasks on separate limiters, capacity 5: the reservations held at
/// once (counted from grant until the delete starts, a subset of the ledger's entries) never exceed
/// the capacity, and everything released leaves the ledger empty.
#[tokio::test]
async fn churn_of_fifty_tasks_never_holds_more_than_the_capacity() {
    let env = TestEnv::new(&TABLES).await;
    let peak = churn(&env, 50, 4, 5).await;
    assert!(peak <= 5, "held {peak} at once with capacity 5");
    eprintln!("churn: peak {peak}, calls {:?}", env.counter.by_operation());
    let l = limiter(&env);
    assert!(l.list("emr", "churn").await.unwrap().is_empty());
    assert_eq!(concurrent(vec![l; 20], "churn", 5).await, 5);
}

/// `tasks` limiters each making `rounds` attempts on account "churn" of capacity `capacity`:
/// reserve, bind every other one, delete. Returns the peak held at once (counted from grant until
/// the delete starts, a subset of the ledger's entries); asserts the capacity was used and that
/// every release came back.
async fn churn(env: &TestEnv, tasks: usize, rounds: usize, capacity: i64) -> usize {
    use std::sync::atomic::{AtomicUsize, Ordering::SeqCst};
    use std::sync::Arc;
    let held = Arc::new(AtomicUsize::new(0));
    let peak = Arc::new(AtomicUsize::new(0));
    let granted = Arc::new(AtomicUsize::new(0));
    let tasks = (0..tasks).map(|i| {
        let l = limiter(env);
        let (held, peak, granted) = (held.clone(), peak.clone(), granted.clone());
        tokio::spawn(async move {
            for round in 0..rounds {
                match l.get_reservation("emr", "churn", capacity).await {
                    Ok(r) => {
                        peak.fetch_max(held.fetch_add(1, SeqCst) + 1, SeqCst);
                        granted.fetch_add(1, SeqCst);
                        if (i + round) % 2 == 0 {
                            r.create_token(&format!("j-{i}-{round}")).await.unwrap();
                        }
                        held.fetch_sub(1, SeqCst);
                        r.delete().await.unwrap();
                    }
                    Err(ReservationError::Limited { .. }) => {}
                    Err(e) => panic!("{e}"),
                }
            }
        })
    });
    for t in join_all(tasks).await {
        t.unwrap();
    }
    assert!(
        granted.load(SeqCst) >= capacity as usize,
        "the capacity was used"
    );
    assert_eq!(
        live(&limiter(env), "churn").await,
        0,
        "every release came back"
    );
    peak.load(SeqCst)
}

/// A delete forced at each point of a bind, through the bind's `shared::interleave` points rather
/// than left to the scheduler: before it, after its row, after its marker read, and after it
/// returned. The delete always wins in the end (no capacity left); a bind that lost answers `Gone`
/// and deletes the row it wrote; a bind that finished first keeps its bound row after the delete
/// (a release writes only the ledger; the row holds nothing and TTL removes it: decision 0101).
#[tokio::test]
async fn a_delete_at_each_point_of_a_bind_leaves_no_capacity_and_no_row_of_a_lost_bind() {
    use futures::FutureExt;
    use shared::interleave::{Interleave, Point};
    use std::sync::{Arc, Mutex};
    let env = TestEnv::new(&TABLES).await;
    let plain = limiter(&env);
    let rows_of = |resource: &'static str| {
        let plain = plain.clone();
        async move { plain.find_by_resource_id(resource, None).await.unwrap() }
    };
    // (where the delete runs, the resource, whether the bind answers Ok)
    let cases: [(Option<Point>, &str, bool); 4] = [
        (None, "j-BEFORE", false),
        (Some(Point::BindAfterRow), "j-AFTER-ROW", false),
        (Some(Point::BindAfterMarkerRead), "j-AFTER-READ", false),
        (None, "j-AFTER", true),
    ];
    for (point, resource, binds) in cases {
        let r = plain.get_reservation("emr", resource, 1).await.unwrap();
        let delete = Arc::new(Mutex::new(Some(r.clone())));
        let hook = delete.clone();
        let l = limiter(&env).with_interleave(Interleave::with(move |p| {
            let d = (Some(p) == point)
                .then(|| hook.lock().unwrap().take())
                .flatten();
            async move {
                if let Some(d) = d {
                    d.delete().await.unwrap();
                }
            }
            .boxed()
        }));
        if point.is_none() && !binds {
            r.delete().await.unwrap();
        }
        let handle = l.reservation("emr", resource, &r.id).unwrap();
        let answer = handle.create_token(resource).await;
        if binds {
            answer.unwrap_or_else(|e| panic!("{resource}: {e}"));
            r.delete().await.unwrap();
        } else {
            let err = answer.unwrap_err();
            assert!(
                matches!(err, ReservationError::Gone { .. }),
                "{resource}: {err}"
            );
        }
        assert!(
            delete.lock().unwrap().is_none() || point.is_none(),
            "{resource}: the delete ran at its point"
        );
        assert!(
            plain.list("emr", resource).await.unwrap().is_empty(),
            "{resource}: no capacity left"
        );
        assert_eq!(
            rows_of(resource).await.len(),
            usize::from(binds),
            "{resource}: only the row of a bind that answered Ok is left"
        );
        assert!(plain.get_reservation("emr", resource, 1).await.is_ok());
    }
}

/// Reservation ids of `resource`'s bound rows.
async fn bound_rows(l: &NonFungibleLimiter, resource: &str) -> Vec<(String, Option<i64>)> {
    l.find_by_resource_id(resource, None)
        .await
        .unwrap()
        .into_iter()
        .map(|t| (t.reservation_id, t.expiration_time))
        .collect()
}

/// Whether the coordinate's one unit is held (capacity 1: a new reservation is `Limited`).
async fn full(l: &NonFungibleLimiter, account: &str) -> bool {
    match l.get_reservation("emr", account, 1).await {
        Err(ReservationError::Limited { .. }) => true,
        Ok(r) => {
            r.delete().await.unwrap();
            false
        }
        Err(e) => panic!("{e}"),
    }
}

/// Capacity 1: R bound to j-Y, then j-X ends (the remover records it), then R is bound to j-X. The
/// answer is `AlreadyBound` and R's unit stays held by its binding to j-Y. The bind used to take
/// the ended resource for a reason to release the entry whatever it held: `ResourceEnded`, and a
/// second reservation granted — two units in use at capacity 1.
#[tokio::test]
async fn a_bind_to_an_ended_resource_never_releases_a_binding_to_another() {
    let env = TestEnv::new(&TABLES).await;
    let l = limiter(&env);
    let r = l.get_reservation("emr", "ended", 1).await.unwrap();
    let token = r.create_token("j-Y").await.unwrap();
    l.remove_by_resource_id("j-X", None).await.unwrap();
    let err = r.create_token("j-X").await.unwrap_err();
    assert!(
        matches!(
            err,
            ReservationError::AlreadyBound { bound_until, .. } if bound_until == token.expiration_time
        ),
        "{err}"
    );
    assert!(
        full(&l, "ended").await,
        "the unit is still held by the binding to j-Y"
    );
    assert_eq!(
        bound_rows(&l, "j-X").await,
        [],
        "the refused bind's row is deleted"
    );
    assert_eq!(
        bound_rows(&l, "j-Y").await,
        [(r.id.clone(), Some(token.expiration_time))]
    );
    l.remove_by_resource_id("j-Y", None).await.unwrap();
    assert!(!full(&l, "ended").await, "j-Y's end releases it");
}

/// A limiter whose calls go through a fault proxy (returned with it), for the env's tables.
async fn proxied(env: &TestEnv) -> (turnstile_faultproxy::FaultProxy, NonFungibleLimiter) {
    let proxy = turnstile_faultproxy::FaultProxy::start(&env.endpoint)
        .await
        .expect("proxy starts");
    let mut deps = env.deps.clone();
    deps.dynamo = shared::dynamo::local_client(&proxy.url(), Some(&env.counter));
    let l = NonFungibleLimiter::from_deps(&deps).expect("limiter");
    (proxy, l)
}

fn throttled(op: &str) -> turnstile_faultproxy::Policy {
    use turnstile_faultproxy::{Policy, ThrottleError, ThrottleMode};
    Policy::throttle(ThrottleError::Throttling, ThrottleMode::Always).only([op])
}

/// R bound to j-Y, then the same bind again (idempotent) while the ended-marker read is throttled
/// past the SDK's retries: the bind cannot tell whether j-Y ended and answers the store error, but
/// the entry is bound (not a reservation it could give back) and the row was not written by this
/// call: both stay, and j-Y's end releases the unit. It used to release the entry and delete the
/// row: the unit was free while the cluster ran.
#[tokio::test]
async fn a_repeated_bind_whose_marker_read_fails_keeps_the_binding_and_its_row() {
    let env = TestEnv::new(&TABLES).await;
    let direct = limiter(&env);
    let (proxy, l) = proxied(&env).await;
    let r = l.get_reservation("emr", "unknown", 1).await.unwrap();
    let token = r.create_token("j-Y").await.unwrap();
    proxy.set_policy(throttled("GetItem"));
    let err = r.create_token("j-Y").await.unwrap_err();
    proxy.set_policy(turnstile_faultproxy::Policy::passthrough());
    assert!(matches!(err, ReservationError::Store(_)), "{err}");
    assert!(proxy.stats().throttled >= 1);
    assert!(
        full(&direct, "unknown").await,
        "the binding still holds the unit"
    );
    assert_eq!(
        bound_rows(&direct, "j-Y").await,
        [(r.id.clone(), Some(token.expiration_time))],
        "the first bind's row is left"
    );
    direct.remove_by_resource_id("j-Y", None).await.unwrap();
    assert!(!full(&direct, "unknown").await, "j-Y's end releases it");
}

/// R bound to j-Y, then the same bind again while its ledger write is throttled past the SDK's
/// retries (the proxy switched at the point after the marker read): the row is the first bind's,
/// so it stays, and j-Y's end still finds it and releases the unit. It used to be deleted: the
/// entry stayed bound for the token's 8 hours with no row for the remover to find.
#[tokio::test]
async fn a_repeated_bind_whose_ledger_write_fails_keeps_the_first_binds_row() {
    use futures::FutureExt;
    use shared::interleave::{Interleave, Point};
    use std::sync::Arc;
    let env = TestEnv::new(&TABLES).await;
    let direct = limiter(&env);
    let (proxy, l) = proxied(&env).await;
    let proxy = Arc::new(proxy);
    let r = l.get_reservation("emr", "ledger", 1).await.unwrap();
    let token = r.create_token("j-Y").await.unwrap();
    let hook = proxy.clone();
    let failing = l.clone().with_interleave(Interleave::with(move |p| {
        if p == Point::BindAfterMarkerRead {
            hook.set_policy(throttled("UpdateItem"));
        }
        async {}.boxed()
    }));
    let err = failing
        .reservation("emr", "ledger", &r.id)
        .unwrap()
        .create_token("j-Y")
        .await
        .unwrap_err();
    proxy.set_policy(turnstile_faultproxy::Policy::passthrough());
    assert!(matches!(err, ReservationError::Store(_)), "{err}");
    assert_eq!(
        bound_rows(&direct, "j-Y").await,
        [(r.id.clone(), Some(token.expiration_time))],
        "the first bind's row is left"
    );
    assert!(
        full(&direct, "ledger").await,
        "the binding still holds the unit"
    );
    direct.remove_by_resource_id("j-Y", None).await.unwrap();
    assert!(
        !full(&direct, "ledger").await,
        "j-Y's end finds the row and releases the unit"
    );
}

/// Two limiters on clocks 20 ms apart, as two Lambda instances are: A reads 0.990 s into a
/// second, B, later in real time but behind, 0.970 s into the same second. A's bind of R to j-X
/// stops after its row (a crash); B binds R to j-Y: both bindings would expire in the same second.
/// j-X's end must not release the unit j-Y's binding holds: the row's release matches its own
/// binding only. It used to match the expiry second, and took j-Y's binding.
#[tokio::test]
async fn a_stale_row_never_releases_a_binding_made_in_its_second_on_a_skewed_clock() {
    use futures::FutureExt;
    use shared::interleave::{Interleave, Point};
    let env = TestEnv::new(&TABLES).await;
    let (a, b) = skewed(&env);
    let stopping = a.with_interleave(Interleave::with(|p| {
        if p == Point::BindAfterRow {
            futures::future::pending::<()>().boxed()
        } else {
            async {}.boxed()
        }
    }));
    let r = stopping.get_reservation("emr", "skew", 1).await.unwrap();
    let stopped = tokio::time::timeout(Duration::from_millis(300), r.create_token("j-X")).await;
    assert!(stopped.is_err(), "A's bind stopped after its row");
    let token = b
        .reservation("emr", "skew", &r.id)
        .unwrap()
        .create_token("j-Y")
        .await
        .expect("still unbound: B binds it to j-Y");
    let plain = limiter(&env);
    assert_eq!(
        bound_rows(&plain, "j-X").await,
        [(r.id.clone(), Some(token.expiration_time))],
        "the stale row and the binding expire in the same second"
    );
    plain.remove_by_resource_id("j-X", None).await.unwrap();
    assert!(
        full(&plain, "skew").await,
        "j-Y's binding still holds the unit after j-X's end"
    );
    plain.remove_by_resource_id("j-Y", None).await.unwrap();
    assert!(!full(&plain, "skew").await, "j-Y's end releases it");
}

/// The same clocks, A's bind of R to j-X paused after its row while B binds R to j-Y, then
/// resumed: A's ledger write must find the entry bound to another resource (`AlreadyBound`), not
/// pass for its own binding because both expire in the same second, and j-X's end must leave the
/// unit to j-Y. It used to answer Ok: R bound to both, and either end released it.
#[tokio::test]
async fn a_bind_paused_across_a_skewed_binding_answers_already_bound() {
    use futures::FutureExt;
    use shared::interleave::{Interleave, Point};
    use std::sync::{Arc, Mutex};
    let env = TestEnv::new(&TABLES).await;
    let (a, b) = skewed(&env);
    let r = a.get_reservation("emr", "paused", 1).await.unwrap();
    let other = Arc::new(Mutex::new(Some(
        b.reservation("emr", "paused", &r.id).unwrap(),
    )));
    let answer = Arc::new(Mutex::new(None));
    let seen = answer.clone();
    let pausing = a.with_interleave(Interleave::with(move |p| {
        let bind = (p == Point::BindAfterRow)
            .then(|| other.lock().unwrap().take())
            .flatten();
        let seen = seen.clone();
        async move {
            if let Some(h) = bind {
                *seen.lock().unwrap() = Some(h.create_token("j-Y").await);
            }
        }
        .boxed()
    }));
    let first = pausing
        .reservation("emr", "paused", &r.id)
        .unwrap()
        .create_token("j-X")
        .await;
    let token = answer
        .lock()
        .unwrap()
        .take()
        .expect("B's bind ran")
        .expect("B binds R to j-Y");
    assert!(
        matches!(
            first,
            Err(ReservationError::AlreadyBound { bound_until, .. }) if bound_until == token.expiration_time
        ),
        "{first:?}"
    );
    let plain = limiter(&env);
    plain.remove_by_resource_id("j-X", None).await.unwrap();
    assert!(
        full(&plain, "paused").await,
        "j-Y's binding still holds the unit after j-X's end"
    );
}

/// Two limiters on the env's tables, on clocks A and B: A 0.990 s into a second, B 0.970 s into
/// the same second (20 ms behind A).
fn skewed(env: &TestEnv) -> (NonFungibleLimiter, NonFungibleLimiter) {
    use shared::clock::{ManualClock, Timestamp};
    use std::sync::Arc;
    let second = env.deps.clock.now().as_secs() + 1;
    let on = |millis: i64| {
        let mut deps = env.deps.clone();
        let clock = ManualClock::new(Timestamp::from_millis(second * 1000 + millis));
        deps.clock = Arc::new(clock);
        NonFungibleLimiter::from_deps(&deps).expect("limiter")
    };
    (on(990), on(970))
}

/// Reserves `n` units of `account` (capacity `limit`) from 8 tasks sharing `l`; every one admitted.
async fn fill(l: &NonFungibleLimiter, account: &'static str, limit: i64, n: usize) {
    let tasks = (0..8).map(|t| {
        let l = l.clone();
        tokio::spawn(async move {
            for _ in (t..n).step_by(8) {
                l.get_reservation("emr", account, limit)
                    .await
                    .expect("room left");
            }
        })
    });
    for t in join_all(tasks).await {
        t.expect("task");
    }
}

/// A capacity of 40 is three ledger shards (16, 16, 8). Concurrent callers, on one
/// limiter or many, cold or warm, get exactly 40; after expiry, 40 again; a raised limit admits
/// exactly the difference.
#[tokio::test]
async fn sharded_coordinates_admit_exactly_the_capacity() {
    let env = TestEnv::new(&TABLES).await;
    let one = limiter(&env);
    assert_eq!(concurrent(vec![one.clone(); 100], "one", 40).await, 40);
    assert_eq!(live(&one, "one").await, 40);

    let many: Vec<_> = (0..100).map(|_| limiter(&env)).collect();
    assert_eq!(concurrent(many, "many", 40).await, 40);
    assert_eq!(live(&one, "many").await, 40);

    env.clock.advance(Duration::from_secs(300));
    let many: Vec<_> = (0..100).map(|_| limiter(&env)).collect();
    assert_eq!(concurrent(many, "many", 40).await, 40, "after expiry");
    let many: Vec<_> = (0..60).map(|_| limiter(&env)).collect();
    assert_eq!(concurrent(many, "many", 50).await, 10, "raised to 50");
    assert_eq!(live(&one, "many").await, 50);
    let shards = env
        .deps
        .dynamo
        .scan()
        .table_name(&env.deps.tables.non_fungible_tokens)
        .send()
        .await
        .unwrap()
        .items()
        .iter()
        .filter(|i| {
            i.get("resourceCoordinate") == Some(&AttributeValue::S("emr:many".into()))
                && matches!(i.get("reservationId"), Some(AttributeValue::S(s)) if s.starts_with('~'))
        })
        .count();
    assert_eq!(shards, 4, "50 units: shards of 16, 16, 16 and 2");
}

/// Decision 0101's proof on a sharded coordinate: 120 tasks reserving, binding and deleting on a
/// capacity of 40 never hold more than 40 at once, and everything comes back.
#[tokio::test]
async fn churn_on_a_sharded_coordinate_never_holds_more_than_the_capacity() {
    let env = TestEnv::new(&TABLES).await;
    let peak = churn(&env, 120, 3, 40).await;
    assert!(peak <= 40, "held {peak} at once with capacity 40");
    assert!(peak > 16, "more than one shard was used: {peak}");
    assert_eq!(concurrent(vec![limiter(&env); 60], "churn", 40).await, 40);
}

/// With 1,000 live reservations on one coordinate, every ledger write is still 1 write
/// unit (one shard of at most 16 entries, under 1 KB), as DynamoDB Local reports them
/// (`ReturnConsumedCapacity=TOTAL`, which would include index writes): a reservation + bind costs 3
/// (reserve, the bound row, the shard entry) and a release 1 (the shard entry), at any count. The
/// bound row has no `resourceId`, so the resource index is not written.
#[tokio::test]
async fn a_thousand_live_reservations_cost_the_same_write_units() {
    let env = TestEnv::new(&TABLES).await;
    let l = limiter(&env);
    fill(&l, "big", 2_000, 1_000).await;
    let fill_usage = env.counter.usage();
    let updates = &fill_usage["UpdateItem"];
    assert!(
        updates.write_units <= updates.calls as f64,
        "every ledger write while filling was 1 WCU: {updates:?}"
    );
    env.counter.reset();
    let r = l.get_reservation("emr", "big", 2_000).await.unwrap();
    assert_eq!(
        env.counter.units().write,
        1.0,
        "the reservation: one shard write"
    );
    r.create_token("j-BIG").await.unwrap();
    let reserve_bind = env.counter.units().write;
    env.counter.reset();
    r.delete().await.unwrap();
    let usage = env.counter.usage();
    let release = env.counter.units().write;
    eprintln!("1,000 live: reserve + bind {reserve_bind} WCU, release {release} WCU ({usage:?})");
    assert_eq!(
        usage.keys().collect::<Vec<_>>(),
        ["UpdateItem"],
        "the release is the shard write alone"
    );
    assert_eq!(
        reserve_bind, 3.0,
        "reserve + bind: 1 + the bound row + the shard entry"
    );
    assert_eq!(release, 1.0, "release: the shard entry");
    assert_eq!(live(&l, "big").await, 1_000);
}

/// Capacities up to the ceiling (100,000) are served with one
/// write unit per write; above it, a clear refusal instead of a ledger that hits DynamoDB's item
/// limit.
#[tokio::test]
async fn capacities_up_to_the_ceiling_are_served_and_above_it_refused() {
    use shared::reservation::shard::MAX_CAPACITY;
    let env = TestEnv::new(&TABLES).await;
    let l = limiter(&env);
    let top = MAX_CAPACITY as i64;
    fill(&l, "top", top, 64).await;
    let usage = env.counter.usage();
    assert!(usage["UpdateItem"].write_units <= usage["UpdateItem"].calls as f64);
    let err = l.get_reservation("emr", "over", top + 1).await.unwrap_err();
    assert!(
        matches!(
            err,
            ReservationError::AboveCeiling {
                limit: 100_001,
                ceiling: 100_000,
                ..
            }
        ),
        "{err}"
    );
    // A limit row above the ceiling (written by hand: the loader refuses it) is refused too.
    let store = l.limits();
    store
        .put(&LimitRow {
            resource_name: "emr".into(),
            account_id: "row".into(),
            limit: top + 1,
            window_sec: Some(60),
            service_name: None,
        })
        .await
        .unwrap();
    assert!(matches!(
        l.get_reservation("emr", "row", 1).await,
        Err(ReservationError::AboveCeiling { .. })
    ));
}

/// Ten thousand live reservations on one coordinate, then a clean refusal. Before
/// the ledger was sharded (6a329ff) one item held every entry, and at about 9,000 of them (~43 bytes
/// each) it passed DynamoDB's 400 KB item limit: the fill failed with a ValidationException where
/// the caller needed room or `Limited`. Sharded, every write stays one unit and the 10,001st is
/// `Limited`.
#[tokio::test]
async fn ten_thousand_live_reservations_then_a_clean_refusal() {
    const N: usize = 10_000;
    let env = TestEnv::new(&TABLES).await;
    let l = limiter(&env);
    fill(&l, "huge", N as i64, N).await;
    let usage = env.counter.usage();
    let updates = &usage["UpdateItem"];
    assert!(
        updates.write_units <= updates.calls as f64,
        "every ledger write was 1 WCU with up to {N} live: {updates:?}"
    );
    let err = l
        .get_reservation("emr", "huge", N as i64)
        .await
        .unwrap_err();
    assert!(
        matches!(err, ReservationError::Limited { .. }),
        "at capacity: {err}"
    );
    assert_eq!(live(&l, "huge").await, N);
}

/// Migration onto a sharded coordinate: 20 live rows written by rate-limiter-py on a capacity of
/// 30 (two shards) are all counted, whichever shard new reservations land in: exactly 10 more.
#[tokio::test]
async fn more_legacy_rows_than_one_shard_holds_are_all_counted() {
    let env = TestEnv::new(&TABLES).await;
    let now = shared::clock::Clock::now(&env.clock).as_secs();
    for i in 0..20 {
        env.deps
            .dynamo
            .put_item()
            .table_name(&env.deps.tables.non_fungible_tokens)
            .item("resourceCoordinate", AttributeValue::S("emr:py".into()))
            .item("reservationId", AttributeValue::S(format!("py-{i:02}")))
            .item("resourceName", AttributeValue::S("emr".into()))
            .item("accountId", AttributeValue::S("py".into()))
            .item("expirationTime", AttributeValue::N((now + 600).to_string()))
            .send()
            .await
            .unwrap();
    }
    let many: Vec<_> = (0..30).map(|_| limiter(&env)).collect();
    assert_eq!(concurrent(many, "py", 30).await, 10);
    let l = limiter(&env);
    assert_eq!(live(&l, "py").await, 30);
    // A legacy row is released from the shard it was seeded into.
    l.reservation("emr", "py", "py-19")
        .unwrap()
        .delete()
        .await
        .unwrap();
    assert!(l.get_reservation("emr", "py", 30).await.is_ok());
    assert!(matches!(
        l.get_reservation("emr", "py", 30).await,
        Err(ReservationError::Limited { live: 30, .. })
    ));
}
