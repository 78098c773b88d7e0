//! Key-value GCRA limits against DynamoDB Local: Boulder's documented example and worked cases,
//! overrides, refunds, resets, batch spends, concurrency, and the call budget of each path.

use std::sync::Arc;
use std::time::Duration;

use aws_sdk_dynamodb::operation::transact_write_items::TransactWriteItemsError;
use aws_sdk_dynamodb::types::{AttributeValue, Put, TransactWriteItem};
use shared::clock::{Clock, Timestamp};
use shared::dynamo::item::num;
use shared::gcra::Rate;
use shared::gcra_write::{self as write, Next, SpendPlan, Target};
use shared::kv::{KvError, LimitSet, Limiter, Limits};
use shared::table::TableKind;
use turnstile_tests::TestEnv;

const LIMITS: &str = "\
names:
  NewFoosPerIPAddress: { id: 1, format: ipAddress }
  Worked: { id: 2, format: string }
  NewOrdersPerAccount: { id: 3, format: regId }
defaults:
  NewFoosPerIPAddress: { burst: 20, count: 20, period: 1s }
  Worked: { burst: 10, count: 1, period: 1s }
  NewOrdersPerAccount: { burst: 3, count: 3, period: 180m }
overrides:
  NewFoosPerIPAddress:172.23.45.22: { burst: 40, count: 40, period: 1s }
";

fn ms(n: u64) -> Duration {
    Duration::from_millis(n)
}

fn limiter(env: &TestEnv) -> Limiter {
    let limits = Arc::new(Limits::new(LimitSet::from_yaml(LIMITS).unwrap()));
    Limiter::new(env.deps.dynamo.clone(), &env.deps.tables.buckets, limits)
}

async fn stored_tat(env: &TestEnv, key: &str) -> Option<i64> {
    let out = env
        .deps
        .dynamo
        .get_item()
        .table_name(&env.deps.tables.buckets)
        .key("bucket", AttributeValue::S(key.into()))
        .consistent_read(true)
        .send()
        .await
        .unwrap();
    out.item().and_then(|i| num(i, "tat"))
}

#[tokio::test]
async fn seed_004_example_with_an_override_and_independent_buckets() {
    let env = TestEnv::new(&[TableKind::Buckets]).await;
    let lim = limiter(&env);
    let now = env.clock.now();

    let (first, calls) = env
        .counter
        .measure(lim.spend("NewFoosPerIPAddress", "10.9.9.9", 1, now))
        .await;
    let first = first.unwrap();
    assert_eq!(
        calls, 1,
        "a cold spend on an empty bucket is one conditional write"
    );
    assert!(first.decision.allowed);
    assert_eq!(
        (first.decision.remaining, first.decision.reset_in),
        (19, ms(50))
    );
    assert_eq!(first.bucket, "1:10.9.9.9");

    for i in 0..19 {
        let (o, calls) = env
            .counter
            .measure(lim.spend("NewFoosPerIPAddress", "10.9.9.9", 1, now))
            .await;
        let o = o.unwrap();
        assert!(o.decision.allowed, "spend {i}");
        assert_eq!(calls, 1, "a warm spend is one call");
        assert_eq!(o.decision.remaining, 18 - i);
    }
    let (denied, calls) = env
        .counter
        .measure(lim.spend("NewFoosPerIPAddress", "10.9.9.9", 1, now))
        .await;
    let denied = denied.unwrap();
    assert_eq!(
        calls, 1,
        "a denial is decided from the failed write's old item"
    );
    assert!(!denied.decision.allowed);
    assert_eq!(denied.decision.retry_in, ms(50));
    assert_eq!(denied.decision.remaining, 0);

    assert!(matches!(
        lim.spend("NewFoosPerIPAddress", "10.9.9.9", 21, now).await,
        Err(KvError::Rate(_))
    ));
    assert!(matches!(
        lim.spend("NewFoosPerIPAddress", "10.9.9.9", 0, now).await,
        Err(KvError::ZeroCost)
    ));
    assert!(matches!(
        lim.spend("Nope", "x", 1, now).await,
        Err(KvError::Key(_))
    ));
    assert!(matches!(
        lim.spend("NewFoosPerIPAddress", "not-an-ip", 1, now).await,
        Err(KvError::Key(_))
    ));

    // 5 ms later nothing has been earned back; 50 ms later one token has.
    assert!(
        !lim.spend("NewFoosPerIPAddress", "10.9.9.9", 1, now.plus(ms(5)))
            .await
            .unwrap()
            .decision
            .allowed
    );
    assert!(
        lim.spend("NewFoosPerIPAddress", "10.9.9.9", 1, now.plus(ms(50)))
            .await
            .unwrap()
            .decision
            .allowed
    );

    // Another IP's bucket is independent.
    let other = lim
        .spend("NewFoosPerIPAddress", "10.0.0.2", 1, now)
        .await
        .unwrap();
    assert_eq!(other.decision.remaining, 19);

    // The override (40 per second): after 40 spends the wait is 25 ms.
    for _ in 0..40 {
        assert!(
            lim.spend("NewFoosPerIPAddress", "172.23.45.22", 1, now)
                .await
                .unwrap()
                .decision
                .allowed
        );
    }
    let o = lim
        .spend("NewFoosPerIPAddress", "172.23.45.22", 1, now)
        .await
        .unwrap();
    assert!(!o.decision.allowed);
    assert_eq!(o.decision.retry_in, ms(25));
    assert_eq!(o.rate.count, 40);
}

#[tokio::test]
async fn boulder_worked_cases_and_check_never_writes() {
    let env = TestEnv::new(&[TableKind::Buckets]).await;
    let lim = limiter(&env);
    let now = env.clock.now();
    let d = lim.spend("Worked", "a", 1, now).await.unwrap().decision;
    assert!(d.allowed);
    assert_eq!((d.remaining, d.reset_in, d.retry_in), (9, ms(1000), ms(0)));
    let d = lim.spend("Worked", "a", 9, now).await.unwrap().decision;
    assert!(d.allowed);
    assert_eq!(
        (d.remaining, d.retry_in, d.reset_in),
        (0, ms(9000), ms(10_000))
    );
    let d = lim.spend("Worked", "a", 1, now).await.unwrap().decision;
    assert!(!d.allowed);
    assert_eq!(
        (d.remaining, d.retry_in, d.reset_in),
        (0, ms(1000), ms(10_000))
    );

    let tat_before = stored_tat(&env, "2:a").await;
    env.counter.reset();
    let (c, calls) = env
        .counter
        .measure(lim.check("Worked", "a", 0, now.plus(ms(1000))))
        .await;
    let c = c.unwrap();
    assert_eq!(calls, 1);
    assert_eq!(env.counter.by_operation().get("GetItem"), Some(&1));
    assert!(c.decision.allowed);
    assert_eq!(c.decision.remaining, 1);
    let c = lim
        .check("Worked", "a", 1, now.plus(ms(1000)))
        .await
        .unwrap();
    assert_eq!(
        (c.decision.allowed, c.decision.remaining),
        (true, 0),
        "as if spent"
    );
    let c = lim
        .check("Worked", "a", 2, now.plus(ms(1000)))
        .await
        .unwrap();
    assert!(
        !c.decision.allowed,
        "a check of 2 with 1 token left is a denial"
    );
    assert_eq!(c.decision.retry_in, ms(1000));
    assert_eq!(
        stored_tat(&env, "2:a").await,
        tat_before,
        "checks never write"
    );
    // A check of an unseen bucket reads it as full.
    let c = lim.check("Worked", "never", 0, now).await.unwrap();
    assert_eq!((c.decision.allowed, c.decision.remaining), (true, 10));
}

#[tokio::test]
async fn refunds_are_capped_at_the_burst_and_refused_on_a_full_bucket() {
    let env = TestEnv::new(&[TableKind::Buckets]).await;
    let lim = limiter(&env);
    let now = env.clock.now();
    let (r, calls) = env.counter.measure(lim.refund("Worked", "r", 1, now)).await;
    let r = r.unwrap();
    assert!(!r.decision.allowed, "nothing to refund on a full bucket");
    assert_eq!(r.decision.remaining, 10);
    assert!(calls <= 2, "{calls}");
    assert_eq!(
        stored_tat(&env, "2:r").await,
        None,
        "a refused refund writes nothing"
    );

    assert_eq!(
        lim.spend("Worked", "r", 3, now)
            .await
            .unwrap()
            .decision
            .remaining,
        7
    );
    let (r, calls) = env.counter.measure(lim.refund("Worked", "r", 2, now)).await;
    let r = r.unwrap();
    assert_eq!(calls, 1, "a warm refund is one call");
    assert!(r.decision.allowed);
    assert_eq!(r.decision.remaining, 9);
    let r = lim.refund("Worked", "r", 5, now).await.unwrap();
    assert!(r.decision.allowed);
    assert_eq!(r.decision.remaining, 10, "never above the burst");
    assert_eq!(stored_tat(&env, "2:r").await, Some(now.as_nanos()));
    let r = lim.refund("Worked", "r", 1, now).await.unwrap();
    assert!(!r.decision.allowed, "full again: refused");

    // Cold refund on a draining bucket (another process's view): at most two calls.
    lim.spend("Worked", "r", 4, now).await.unwrap();
    let fresh = limiter(&env);
    let (r, calls) = env
        .counter
        .measure(fresh.refund("Worked", "r", 1, now))
        .await;
    assert_eq!(r.unwrap().decision.remaining, 7);
    assert!(calls <= 2, "{calls}");
}

/// A refund's write requires the bucket's `refundId` to be smaller than its own
/// (so a resend never applies twice). One that arrives after a larger id (another process's clock
/// ahead) is sent once more with an id above it, and applied once.
#[tokio::test]
async fn a_refund_behind_a_later_refund_id_is_applied_once() {
    let env = TestEnv::new(&[TableKind::Buckets]).await;
    let lim = limiter(&env);
    let now = env.clock.now();
    assert!(
        lim.spend("Worked", "ids", 6, now)
            .await
            .unwrap()
            .decision
            .allowed
    );
    let ahead = "99999999999999999999999999999999999";
    env.deps
        .dynamo
        .update_item()
        .table_name(&env.deps.tables.buckets)
        .key("bucket", AttributeValue::S("2:ids".into()))
        .update_expression("SET refundId = :r")
        .expression_attribute_values(":r", AttributeValue::N(ahead.into()))
        .send()
        .await
        .unwrap();
    let (r, calls) = env
        .counter
        .measure(lim.refund("Worked", "ids", 2, now))
        .await;
    let r = r.unwrap();
    assert!(r.decision.allowed);
    assert_eq!(
        (r.decision.remaining, calls),
        (6, 2),
        "sent again with a larger id"
    );
    assert_eq!(
        lim.check("Worked", "ids", 0, now)
            .await
            .unwrap()
            .decision
            .remaining,
        6
    );
}

#[tokio::test]
async fn reset_fills_the_bucket_in_one_call() {
    let env = TestEnv::new(&[TableKind::Buckets]).await;
    let lim = limiter(&env);
    let now = env.clock.now();
    for _ in 0..3 {
        lim.spend("NewOrdersPerAccount", "12345678", 1, now)
            .await
            .unwrap();
    }
    assert!(
        !lim.spend("NewOrdersPerAccount", "12345678", 1, now)
            .await
            .unwrap()
            .decision
            .allowed
    );
    let (r, calls) = env
        .counter
        .measure(lim.reset("NewOrdersPerAccount", "12345678", now))
        .await;
    assert_eq!(calls, 1);
    assert_eq!(r.unwrap().decision.remaining, 3);
    assert_eq!(stored_tat(&env, "3:12345678").await, None);
    let o = lim
        .spend("NewOrdersPerAccount", "12345678", 1, now)
        .await
        .unwrap();
    assert_eq!((o.decision.allowed, o.decision.remaining), (true, 2));
}

#[tokio::test]
async fn cold_spends_take_at_most_two_calls_and_items_expire_when_full() {
    let env = TestEnv::new(&[TableKind::Buckets]).await;
    let warm = limiter(&env);
    let now = env.clock.now();
    warm.spend("Worked", "c", 5, now).await.unwrap();
    // A fresh process guesses "idle" and is wrong: the old item steers one retry, no read.
    let cold = limiter(&env);
    env.counter.reset();
    let o = cold.spend("Worked", "c", 1, now).await.unwrap();
    assert_eq!(env.counter.total(), 2);
    assert_eq!(env.counter.by_operation().get("UpdateItem"), Some(&2));
    assert_eq!(o.decision.remaining, 4);
    // The first process's hint ("draining") is stale once another process has reset the bucket:
    // the draining condition fails on the missing item and one retry as idle follows.
    cold.reset("Worked", "c", now).await.unwrap();
    let later = now.plus(Duration::from_secs(20));
    let (o, calls) = env.counter.measure(warm.spend("Worked", "c", 1, now)).await;
    assert_eq!(calls, 2);
    assert_eq!(o.unwrap().decision.remaining, 9);
    warm.spend("Worked", "c", 1, later).await.unwrap();

    let item = env
        .deps
        .dynamo
        .get_item()
        .table_name(&env.deps.tables.buckets)
        .key("bucket", AttributeValue::S("2:c".into()))
        .send()
        .await
        .unwrap()
        .item
        .unwrap();
    let expires = num(&item, "expiresAt").unwrap();
    let full_at_secs = (later.as_nanos() + 10 * 1_000_000_000).div_euclid(1_000_000_000);
    assert!(
        expires > full_at_secs,
        "the item outlives the moment the bucket is full"
    );
    let margin = i64::try_from(shared::kv::limiter::DEFAULT_TTL_MARGIN.as_secs()).unwrap();
    assert!(expires <= full_at_secs + 1 + margin);
}

#[tokio::test(flavor = "multi_thread", worker_threads = 4)]
async fn thirty_two_concurrent_spenders_get_exactly_the_burst() {
    let env = TestEnv::new(&[TableKind::Buckets]).await;
    let now = env.clock.now(); // frozen: the clock never moves in this test
    let burst = 10;
    let mut tasks = Vec::new();
    for _ in 0..32 {
        // Each spender is its own process (own cold limiter), as concurrent Lambdas would be.
        let lim = limiter(&env);
        tasks.push(tokio::spawn(async move {
            lim.spend("Worked", "hot", 1, now)
                .await
                .map(|o| o.decision.allowed)
        }));
    }
    let mut allowed = 0;
    for t in tasks {
        if t.await.unwrap().unwrap() {
            allowed += 1;
        }
    }
    assert_eq!(
        allowed, burst,
        "exactly the burst is admitted, no lost updates"
    );
    let calls = env.counter.total();
    println!(
        "32 cold concurrent spenders, burst 10: {calls} calls {:?}",
        env.counter.by_operation()
    );
    assert!(
        calls <= 64,
        "each cold spender makes at most two calls; made {calls}"
    );
    assert_eq!(
        env.counter.by_operation().keys().collect::<Vec<_>>(),
        vec!["UpdateItem"]
    );
    let spent = stored_tat(&env, "2:hot").await.unwrap() - now.as_nanos();
    assert_eq!(
        spent,
        10 * 1_000_000_000,
        "the TAT moved by exactly ten emission intervals"
    );

    // One shared limiter (warm hints) on another bucket: the same exactness.
    let shared = Arc::new(limiter(&env));
    let mut tasks = Vec::new();
    for _ in 0..32 {
        let lim = shared.clone();
        tasks.push(tokio::spawn(async move {
            lim.spend("Worked", "hot2", 1, now)
                .await
                .unwrap()
                .decision
                .allowed
        }));
    }
    let mut allowed = 0;
    for t in tasks {
        allowed += usize::from(t.await.unwrap());
    }
    assert_eq!(allowed, burst);
}

#[tokio::test]
async fn a_batch_spend_is_all_or_nothing_and_the_strictest_decision_wins() {
    let env = TestEnv::new(&[TableKind::Buckets]).await;
    let lim = limiter(&env);
    let now = env.clock.now();
    let batch = [("Worked", "acct", 2), ("NewOrdersPerAccount", "7", 1)];
    let (b, calls) = env.counter.measure(lim.spend_batch(&batch, now)).await;
    let b = b.unwrap();
    assert_eq!(calls, 1);
    assert_eq!(
        env.counter.by_operation().get("TransactWriteItems"),
        Some(&1)
    );
    assert!(b.decision.allowed);
    assert_eq!(b.decision.remaining, 2, "the tightest bucket's remaining");
    assert_eq!(b.deciding, "NewOrdersPerAccount:7");
    assert_eq!(b.each.len(), 2);
    assert!(b.exact);

    // Warm: both draining now; one more batch, one call.
    let (b, calls) = env.counter.measure(lim.spend_batch(&batch, now)).await;
    assert_eq!(calls, 1);
    assert_eq!(b.unwrap().decision.remaining, 1);

    lim.spend("NewOrdersPerAccount", "7", 1, now).await.unwrap(); // empties the orders bucket
    let worked_before = stored_tat(&env, "2:acct").await;
    let (b, calls) = env.counter.measure(lim.spend_batch(&batch, now)).await;
    let b = b.unwrap();
    assert_eq!(
        calls, 1,
        "the denial is decided from the cancellation reasons' old items"
    );
    assert!(!b.decision.allowed, "a denial always wins");
    assert_eq!(b.deciding, "NewOrdersPerAccount:7");
    assert_eq!(b.decision.retry_in, Duration::from_secs(3600), "180m / 3");
    assert_eq!(
        stored_tat(&env, "2:acct").await,
        worked_before,
        "nothing was spent"
    );

    // Cold batch (fresh process, both buckets draining): at most two transactions.
    let cold = limiter(&env);
    let (b, calls) = env
        .counter
        .measure(cold.spend_batch(&[("Worked", "acct", 1), ("Worked", "new", 1)], now))
        .await;
    assert!(b.unwrap().decision.allowed);
    assert!(calls <= 2, "{calls}");

    assert!(matches!(
        lim.spend_batch(&[("Worked", "x", 1), ("Worked", "x", 1)], now)
            .await,
        Err(KvError::DuplicateInBatch(_))
    ));
    assert!(matches!(
        lim.spend_batch(&[], now).await,
        Err(KvError::EmptyBatch)
    ));
    let ids: Vec<String> = (0..101).map(|i| format!("k{i}")).collect();
    let many: Vec<(&str, &str, u64)> = ids.iter().map(|id| ("Worked", id.as_str(), 1)).collect();
    assert!(matches!(
        lim.spend_batch(&many, now).await,
        Err(KvError::BatchTooLarge(101))
    ));
}

/// The reusable piece for other tables' transactions (the `$connect` case): a GCRA bucket on the
/// counters table, keyed by `key` with TTL `itemTTL`, spent in the same transaction as another write.
#[tokio::test]
async fn the_gcra_update_works_inside_another_tables_transaction() {
    let env = TestEnv::new(&[TableKind::Counters]).await;
    let table = &env.deps.tables.counters;
    let rate = Rate::new(2, 2, Duration::from_secs(60)).unwrap();
    let now = env.clock.now();
    let target = Target::new(
        table,
        "key",
        "acme:gcra:tenantPerMinute",
        Some("itemTTL"),
        Duration::from_secs(1),
    );
    let mut hint: Option<Timestamp> = None;
    let mut admitted = 0;
    for conn in 0..3 {
        let mut plan = SpendPlan::spend(rate, now, 1, hint).unwrap();
        let decided = loop {
            let other = Put::builder()
                .table_name(table)
                .item("key", AttributeValue::S(format!("acme:conn:{conn}")))
                .build()
                .unwrap();
            let res = env
                .deps
                .dynamo
                .transact_write_items()
                .transact_items(TransactWriteItem::builder().put(other).build())
                .transact_items(
                    TransactWriteItem::builder()
                        .update(plan.transact_update(&target).unwrap())
                        .build(),
                )
                .send()
                .await;
            match res {
                Ok(_) => break plan.admitted(None, hint),
                Err(e) => {
                    let reasons = e
                        .as_service_error()
                        .and_then(|s| match s {
                            TransactWriteItemsError::TransactionCanceledException(c) => {
                                Some(c.cancellation_reasons().to_vec())
                            }
                            _ => None,
                        })
                        .expect("a cancelled transaction");
                    let old = reasons[1].item();
                    hint = write::stored_tat(old, "tat");
                    match plan.on_condition_failed(old, "tat") {
                        Next::Refused(d) => break d,
                        Next::Retry(p) => plan = p,
                    }
                }
            }
        };
        hint = Some(decided.new_tat);
        admitted += usize::from(decided.allowed);
        if conn == 2 {
            assert!(!decided.allowed);
            assert_eq!(decided.retry_in, Duration::from_secs(30));
        }
    }
    assert_eq!(admitted, 2);
    let scan = env
        .deps
        .dynamo
        .scan()
        .table_name(table)
        .send()
        .await
        .unwrap();
    assert_eq!(
        scan.count(),
        3,
        "two connection rows and the bucket; the refused one wrote nothing"
    );
}

#[tokio::test(flavor = "multi_thread", worker_threads = 4)]
async fn concurrent_batch_spends_stay_exact() {
    let env = TestEnv::new(&[TableKind::Buckets]).await;
    let now = env.clock.now();
    let mut tasks = Vec::new();
    for _ in 0..8 {
        let lim = limiter(&env);
        tasks.push(tokio::spawn(async move {
            lim.spend_batch(
                &[("NewOrdersPerAccount", "9", 1), ("Worked", "batch", 1)],
                now,
            )
            .await
            .map(|b| b.decision.allowed)
        }));
    }
    let mut allowed = 0;
    let mut contended = 0;
    for t in tasks {
        match t.await.unwrap() {
            Ok(true) => allowed += 1,
            Ok(false) => {}
            Err(KvError::Contended(_)) => contended += 1,
            Err(e) => panic!("{e}"),
        }
    }
    println!(
        "8 concurrent batches: {allowed} admitted, {contended} contended, {} calls",
        env.counter.total()
    );
    assert!(allowed <= 3, "never more than the tighter burst");
    let orders = stored_tat(&env, "3:9").await.unwrap() - now.as_nanos();
    let worked = stored_tat(&env, "2:batch").await.unwrap() - now.as_nanos();
    assert_eq!(
        orders,
        allowed * 3_600 * 1_000_000_000,
        "all or nothing: each admitted batch spent both"
    );
    assert_eq!(worked, allowed * 1_000_000_000);
    if contended == 0 {
        assert_eq!(allowed, 3);
    }
}

/// An idle bucket's item carries a TTL so DynamoDB deletes it once the bucket is full again. Real
/// DynamoDB deletes late, so an expired item that is still there must read as full too.
#[tokio::test]
async fn expired_buckets_read_as_full_whether_or_not_deleted_yet() {
    let env = TestEnv::new(&[TableKind::Buckets]).await;
    // A spend one hour ago: its bucket was full again 4 s later, and its TTL has passed.
    let now = env.clock.now();
    let then = now.minus(Duration::from_secs(3_600));
    let lim = limiter(&env).with_ttl_margin(Duration::ZERO);
    lim.spend("Worked", "idle", 4, then).await.unwrap();
    let item = env
        .deps
        .dynamo
        .get_item()
        .table_name(&env.deps.tables.buckets)
        .key("bucket", AttributeValue::S("2:idle".into()))
        .consistent_read(true)
        .send()
        .await
        .unwrap()
        .item;
    if let Some(item) = item {
        assert!(num(&item, "expiresAt").unwrap() < now.as_secs());
    }
    let c = lim.check("Worked", "idle", 0, now).await.unwrap();
    assert_eq!(c.decision.remaining, 10);
    let fresh = limiter(&env);
    let (o, calls) = env
        .counter
        .measure(fresh.spend("Worked", "idle", 1, now))
        .await;
    assert_eq!(o.unwrap().decision.remaining, 9);
    assert_eq!(calls, 1, "a cold spend on an idle bucket is one call");
}

/// Boulder's documented example step by step, with the manual clock: 20 per second, burst 20.
#[tokio::test]
async fn seed_004_narrative_with_the_manual_clock() {
    let env = TestEnv::new(&[TableKind::Buckets]).await;
    let lim = limiter(&env);
    let ip = "172.23.45.99";
    let first = lim
        .spend("NewFoosPerIPAddress", ip, 1, env.clock.now())
        .await
        .unwrap();
    assert_eq!(
        (first.decision.remaining, first.decision.reset_in),
        (19, ms(50))
    );
    env.clock.advance(ms(5));
    assert!(
        lim.spend("NewFoosPerIPAddress", ip, 1, env.clock.now())
            .await
            .unwrap()
            .decision
            .allowed
    );
    // "A total of 18 requests over the next 44 ms": all allowed (20 in all, the burst).
    for _ in 0..18 {
        env.clock.advance(ms(2));
        let o = lim
            .spend("NewFoosPerIPAddress", ip, 1, env.clock.now())
            .await
            .unwrap();
        assert!(o.decision.allowed);
    }
    env.clock.advance(ms(8)); // 49 ms after the first request
    let denied = lim
        .spend("NewFoosPerIPAddress", ip, 1, env.clock.now())
        .await
        .unwrap();
    assert!(
        !denied.decision.allowed,
        "the 21st request within 50 ms is refused"
    );
    assert_eq!(
        denied.decision.retry_in,
        ms(1),
        "one token is earned 50 ms after the first"
    );
    env.clock.advance(ms(1));
    assert!(
        lim.spend("NewFoosPerIPAddress", ip, 1, env.clock.now())
            .await
            .unwrap()
            .decision
            .allowed
    );
    // "... and will allow 1 request every 50 ms, indefinitely."
    for _ in 0..5 {
        assert!(
            !lim.spend("NewFoosPerIPAddress", ip, 1, env.clock.now())
                .await
                .unwrap()
                .decision
                .allowed
        );
        env.clock.advance(ms(50));
        assert!(
            lim.spend("NewFoosPerIPAddress", ip, 1, env.clock.now())
                .await
                .unwrap()
                .decision
                .allowed
        );
    }
}

/// A long scripted run of spends, checks, refunds, resets and waits against DynamoDB, compared
/// decision by decision with the pure arithmetic (`shared::gcra`) on a model TAT.
#[tokio::test]
async fn a_long_random_script_matches_the_pure_arithmetic() {
    let env = TestEnv::new(&[TableKind::Buckets]).await;
    let lim = limiter(&env);
    let fresh_each_time = limiter(&env); // a second process sharing the bucket (cold hints)
    let rate = Rate::new(10, 1, Duration::from_secs(1)).unwrap();
    let mut model: Option<Timestamp> = None;
    let mut seed: u64 = 0x5eed_0004;
    let mut next = |n: u64| {
        seed = seed
            .wrapping_mul(6_364_136_223_846_793_005)
            .wrapping_add(1_442_695_040_888_963_407);
        (seed >> 33) % n
    };
    for step in 0..150 {
        let now = env.clock.now();
        let cost = 1 + next(4);
        let who = if next(3) == 0 { &fresh_each_time } else { &lim };
        match next(10) {
            0..=5 => {
                let got = who
                    .spend("Worked", "script", cost, now)
                    .await
                    .unwrap()
                    .decision;
                let want = shared::gcra::spend(&rate, model, now, cost).unwrap();
                assert_eq!(got, want, "step {step}: spend {cost}");
                if want.allowed {
                    model = Some(want.new_tat);
                }
            }
            6 => {
                let got = who
                    .check("Worked", "script", cost, now)
                    .await
                    .unwrap()
                    .decision;
                let want = shared::gcra::spend(&rate, model, now, cost).unwrap();
                assert_eq!(
                    (got.allowed, got.remaining, got.retry_in, got.reset_in),
                    (want.allowed, want.remaining, want.retry_in, want.reset_in),
                    "step {step}: check {cost}"
                );
            }
            7 | 8 => {
                let got = who
                    .refund("Worked", "script", cost, now)
                    .await
                    .unwrap()
                    .decision;
                let want = shared::gcra::refund(&rate, model, now, cost).unwrap();
                assert_eq!(
                    (got.allowed, got.remaining, got.retry_in, got.reset_in),
                    (want.allowed, want.remaining, want.retry_in, want.reset_in),
                    "step {step}: refund {cost}"
                );
                if want.allowed {
                    model = Some(want.new_tat);
                }
            }
            _ => {
                if next(4) == 0 {
                    who.reset("Worked", "script", now).await.unwrap();
                    model = None;
                }
            }
        }
        env.clock.advance(Duration::from_millis(next(1_500)));
    }
}

/// A rate lowered while a bucket is drained: the item's TTL must not fall before the moment the
/// bucket is full again. A refund under the new, smaller burst set the TTL from that burst
/// (`now + burstOffset + margin`) while the stored TAT came from the old one; DynamoDB then
/// deleted the still-drained item and it read as full: spends admitted hours early. On the TTL
/// instance (its sweep deletes an expired item within seconds), at a `now` three hours back.
#[tokio::test]
async fn a_refund_under_a_lowered_rate_never_expires_a_drained_bucket_early() {
    let env = TestEnv::for_ttl(&[TableKind::Buckets]).await;
    let rate = |burst: u64| {
        let yaml = format!(
            "names:\n  Slow: {{ id: 1, format: string }}\n\
             defaults:\n  Slow: {{ burst: {burst}, count: 1, period: 1h }}\n"
        );
        let limits = Arc::new(Limits::new(LimitSet::from_yaml(&yaml).unwrap()));
        Limiter::new(env.deps.dynamo.clone(), &env.deps.tables.buckets, limits)
    };
    let (old, new) = (rate(10), rate(2));
    let wall = shared::clock::SystemClock.now();
    let then = wall.minus(Duration::from_secs(3 * 3_600));
    // Drained under the old rate until then + 10 h; a refund of 1 under the new rate: + 9 h.
    assert!(
        old.spend("Slow", "low", 10, then)
            .await
            .unwrap()
            .decision
            .allowed
    );
    assert!(
        new.refund("Slow", "low", 1, then)
            .await
            .unwrap()
            .decision
            .allowed
    );
    let item = || async {
        env.deps
            .dynamo
            .get_item()
            .table_name(&env.deps.tables.buckets)
            .key("bucket", AttributeValue::S("1:low".into()))
            .consistent_read(true)
            .send()
            .await
            .unwrap()
            .item
    };
    let stored = item().await.expect("the bucket's item");
    let (tat, expires) = (
        num(&stored, "tat").unwrap(),
        num(&stored, "expiresAt").unwrap(),
    );
    let mut admitted_early = 0;
    if expires <= wall.as_secs() {
        // Expired already: the sweep deletes it within seconds, and the drained bucket reads full.
        for _ in 0..120 {
            if item().await.is_none() {
                break;
            }
            tokio::time::sleep(ms(500)).await;
        }
        while new
            .spend("Slow", "low", 1, wall)
            .await
            .unwrap()
            .decision
            .allowed
        {
            admitted_early += 1;
        }
    }
    assert!(
        admitted_early == 0 && expires >= tat.div_euclid(1_000_000_000) + 60,
        "drained until {} s (7 h from now), the item expires at {expires} s ({} s from now); \
         deleted, it admitted {admitted_early} spends now",
        tat.div_euclid(1_000_000_000),
        expires - wall.as_secs()
    );
}
