//! Fungible tokens against DynamoDB Local: rate-limiter-py's refill arithmetic, exact counts under
//! concurrency, the call budget (1 warm / 2 cold / 0 on a cached rejection), limit rows, both
//! attribute styles, and the scoped and Lambda-wrapper forms.

use std::sync::atomic::{AtomicBool, AtomicU32, Ordering};
use std::sync::Arc;
use std::time::Duration;

use aws_sdk_dynamodb::types::AttributeValue;
use futures::future::join_all;
use serde_json::json;
use shared::clock::{Clock, Timestamp};
use shared::limit::{LimitRow, Quota};
use shared::table::{AttributeStyle, TableKind};
use shared::token::{account_at, FungibleLimiter, Source, TokenError};
use turnstile_tests::TestEnv;

const TABLES: [TableKind; 2] = [TableKind::FungibleTokens, TableKind::Limits];
const Q: Quota = Quota::new(10, 100);

async fn env() -> TestEnv {
    let env = TestEnv::new(&TABLES).await;
    // Whole milliseconds, so stored lastRefill values are plain integers in assertions.
    env.clock
        .set(Timestamp::from_millis(env.clock.now().as_millis()));
    env
}

fn limiter(env: &TestEnv) -> FungibleLimiter {
    FungibleLimiter::from_deps(&env.deps).expect("limiter")
}

fn n(v: i64) -> AttributeValue {
    AttributeValue::N(v.to_string())
}

async fn put_bucket(
    env: &TestEnv,
    names: (&str, &str),
    resource: &str,
    account: &str,
    tokens: AttributeValue,
    last_refill: AttributeValue,
) {
    env.deps
        .dynamo
        .put_item()
        .table_name(&env.deps.tables.fungible_tokens)
        .item(names.0, AttributeValue::S(resource.into()))
        .item(names.1, AttributeValue::S(account.into()))
        .item("tokens", tokens)
        .item(
            if names.0 == "resourceName" {
                "lastRefill"
            } else {
                "last_refill"
            },
            last_refill,
        )
        .send()
        .await
        .expect("put bucket");
}

async fn get_bucket(
    env: &TestEnv,
    names: (&str, &str),
    resource: &str,
    account: &str,
) -> std::collections::HashMap<String, AttributeValue> {
    env.deps
        .dynamo
        .get_item()
        .table_name(&env.deps.tables.fungible_tokens)
        .key(names.0, AttributeValue::S(resource.into()))
        .key(names.1, AttributeValue::S(account.into()))
        .consistent_read(true)
        .send()
        .await
        .expect("get bucket")
        .item()
        .cloned()
        .unwrap_or_default()
}

const CAMEL: (&str, &str) = ("resourceName", "accountId");
const SNAKE: (&str, &str) = ("resource_name", "account_id");

#[tokio::test]
async fn the_seeds_refill_examples_hold_against_the_table() {
    let env = env().await;
    let now = env.clock.now().as_millis();
    // limit 10, window 100 s: 5 tokens + 30 s → 8 available; taking one leaves 7.
    put_bucket(&env, CAMEL, "api", "five", n(5), n(now - 30_000)).await;
    let d = limiter(&env).get_token("api", "five", Q).await.unwrap();
    assert!(d.granted);
    assert_eq!(d.remaining, 7);
    let row = get_bucket(&env, CAMEL, "api", "five").await;
    assert_eq!(row["tokens"], n(7));
    assert_eq!(row["lastRefill"], n(now), "3 tokens bought exactly 30 s");
    assert_eq!(row["lastToken"], n(now));

    // 0 tokens + 11,500 s → capped at the limit (10); taking one leaves 9.
    put_bucket(&env, CAMEL, "api", "idle", n(0), n(now - 11_500_000)).await;
    let d = limiter(&env).get_token("api", "idle", Q).await.unwrap();
    assert_eq!((d.granted, d.remaining), (true, 9));
    assert_eq!(
        get_bucket(&env, CAMEL, "api", "idle").await["lastRefill"],
        n(now)
    );

    // Rows as Python writes them (floats, fractional ms) are read and matched exactly.
    put_bucket(
        &env,
        CAMEL,
        "api",
        "python",
        AttributeValue::N("2.0".into()),
        AttributeValue::N(format!("{}.5", now - 15_000)),
    )
    .await;
    let d = limiter(&env).get_token("api", "python", Q).await.unwrap();
    assert_eq!(
        (d.granted, d.remaining),
        (true, 2),
        "2 + floor(14.9995 s / 10 s) - 1"
    );
}

#[tokio::test]
async fn thirty_two_concurrent_callers_get_exactly_the_limit() {
    let env = env().await;
    let shared_limiter = limiter(&env);
    // One limiter shared by 32 tasks (one warm process)...
    let granted = join_all((0..32).map(|_| {
        let l = shared_limiter.clone();
        tokio::spawn(async move { l.get_token("api", "acct", Q).await })
    }))
    .await
    .into_iter()
    .map(|r| r.expect("task").expect("decision"))
    .filter(|d| d.granted)
    .count();
    assert_eq!(granted, 10);
    let ops = env.counter.by_operation();
    assert_eq!(
        ops.get("GetItem"),
        None,
        "lost races are decided from ALL_OLD, not reads: {ops:?}"
    );
    eprintln!("32 callers on one limiter: {ops:?}");

    // ...and 32 separate limiters (32 cold processes) on another bucket.
    let granted = join_all((0..32).map(|_| {
        let l = limiter(&env);
        tokio::spawn(async move { l.get_token("api", "other", Quota::new(7, 60)).await })
    }))
    .await
    .into_iter()
    .map(|r| r.expect("task").expect("decision"))
    .filter(|d| d.granted)
    .count();
    assert_eq!(granted, 7);
    let row = get_bucket(&env, CAMEL, "api", "other").await;
    assert_eq!(row["tokens"], n(0));
}

#[tokio::test]
async fn concurrent_takers_of_a_hot_bucket_do_not_invalidate_each_other() {
    let env = env().await;
    let l = limiter(&env);
    let q = Quota::new(100, 60);
    assert!(l.get_token("api", "hot", q).await.unwrap().granted);
    env.counter.reset();
    // Clock frozen: no token accrues, so every take is a relative decrement that cannot lose a race.
    let granted = join_all((0..32).map(|_| {
        let l = l.clone();
        tokio::spawn(async move { l.get_token("api", "hot", q).await })
    }))
    .await
    .into_iter()
    .map(|r| r.expect("task").expect("decision"))
    .filter(|d| d.granted)
    .count();
    assert_eq!(granted, 32);
    let ops = env.counter.by_operation();
    assert_eq!(
        ops.get("UpdateItem"),
        Some(&32),
        "one write per grant: {ops:?}"
    );
    assert_eq!(env.counter.total(), 32, "{ops:?}");
    let row = get_bucket(&env, CAMEL, "api", "hot").await;
    assert_eq!(row["tokens"], n(99 - 32));
}

async fn drain(l: &FungibleLimiter, account: &str, q: Quota) -> u32 {
    let mut got = 0;
    loop {
        let d = l.get_token("api", account, q).await.unwrap();
        if !d.granted {
            return got;
        }
        got += 1;
        assert!(got <= 1000, "runaway");
    }
}

#[tokio::test]
async fn refill_adds_exactly_what_the_elapsed_time_allows() {
    let env = env().await;
    let l = limiter(&env);
    assert_eq!(drain(&l, "a", Q).await, 10);
    env.clock.advance(Duration::from_secs(25));
    assert_eq!(
        drain(&l, "a", Q).await,
        2,
        "25 s buy 2 tokens, 5 s of credit remain"
    );
    env.clock.advance(Duration::from_secs(5));
    assert_eq!(
        drain(&l, "a", Q).await,
        1,
        "the kept 5 s + 5 s buy one more"
    );
    env.clock.advance(Duration::from_millis(9_999));
    assert_eq!(drain(&l, "a", Q).await, 0);
    env.clock.advance(Duration::from_millis(1));
    assert_eq!(drain(&l, "a", Q).await, 1);
    env.clock.advance(Duration::from_secs(11_500));
    assert_eq!(drain(&l, "a", Q).await, 10, "capped at the limit");

    // 3 per second: 333.33 ms per token, never rounded into an extra token.
    let q3 = Quota::new(3, 1);
    assert_eq!(drain(&l, "b", q3).await, 3);
    let mut total = 0;
    for _ in 0..100 {
        env.clock.advance(Duration::from_millis(100));
        total += drain(&l, "b", q3).await;
    }
    // The 30th token is due 20 ns after 10 s: each 333,333,333.3 ns token interval is rounded up
    // to whole nanoseconds (never down, which could invent tokens).
    assert_eq!(total, 29);
    env.clock.advance(Duration::from_micros(1));
    assert_eq!(drain(&l, "b", q3).await, 1, "10 s at 3/s: 30 tokens");
}

#[tokio::test]
async fn call_budget_is_two_cold_one_warm_zero_on_a_cached_rejection() {
    let env = env().await;
    let l = limiter(&env);
    let q = Quota::new(2, 10);

    env.counter.reset();
    let d = l.get_token("api", "acct", q).await.unwrap();
    assert!(d.granted);
    assert_eq!(
        env.counter.total(),
        2,
        "cold: {:?}",
        env.counter.by_operation()
    );
    assert_eq!(env.counter.by_operation().get("BatchGetItem"), Some(&1));

    env.counter.reset();
    let d = l.get_token("api", "acct", q).await.unwrap();
    assert_eq!((d.granted, d.remaining), (true, 0));
    assert_eq!(
        env.counter.total(),
        1,
        "warm: {:?}",
        env.counter.by_operation()
    );
    assert_eq!(env.counter.by_operation().get("UpdateItem"), Some(&1));

    // Empty: refused locally, with 0 calls, until the next token is due (5 s).
    env.counter.reset();
    for _ in 0..5 {
        let d = l.get_token("api", "acct", q).await.unwrap();
        assert!(!d.granted);
        assert_eq!(d.source, Source::RejectionCache);
        env.clock.advance(Duration::from_millis(999));
    }
    assert_eq!(env.counter.total(), 0);
    env.clock.advance(Duration::from_millis(5));
    let d = l.get_token("api", "acct", q).await.unwrap();
    assert!(d.granted, "the token is due: {d:?}");
    assert_eq!(env.counter.total(), 1);

    // The limit row cache expires after 60 s: one more read, still within the cold budget.
    env.clock.advance(Duration::from_secs(61));
    env.counter.reset();
    assert!(l.get_token("api", "acct", q).await.unwrap().granted);
    assert_eq!(env.counter.total(), 2, "{:?}", env.counter.by_operation());
}

#[tokio::test]
async fn a_stale_cache_never_admits_beyond_the_table() {
    let env = env().await;
    let a = limiter(&env);
    let b = limiter(&env);
    let q = Quota::new(3, 300);
    assert!(a.get_token("api", "acct", q).await.unwrap().granted);
    // b drains what a believes is still there.
    assert_eq!(drain(&b, "acct", q).await, 2);
    env.counter.reset();
    let d = a.get_token("api", "acct", q).await.unwrap();
    assert!(!d.granted, "{d:?}");
    assert_eq!(
        d.source,
        Source::Dynamodb,
        "the failed condition returned the real state"
    );
    assert_eq!(env.counter.total(), 1, "no read after the failed write");
    assert_eq!(d.retry_after_ms, Some(100_000));
    assert_eq!(d.reset_ms, 300_000);

    // A bucket reset by an operator (row deleted) is still refused locally until its token time:
    // the rejection cache errs on the side of refusing.
    env.deps
        .dynamo
        .delete_item()
        .table_name(&env.deps.tables.fungible_tokens)
        .key("resourceName", AttributeValue::S("api".into()))
        .key("accountId", AttributeValue::S("acct".into()))
        .send()
        .await
        .unwrap();
    assert!(!a.get_token("api", "acct", q).await.unwrap().granted);
    env.clock.advance(Duration::from_secs(100));
    env.counter.reset();
    let d = a.get_token("api", "acct", q).await.unwrap();
    assert_eq!((d.granted, d.remaining), (true, 2), "the reset row is full");
    assert_eq!(
        env.counter.by_operation(),
        [("GetItem".to_string(), 1), ("UpdateItem".to_string(), 2)].into(),
        "the limit row's cache expired (1 read), 1 failed write, 1 write"
    );
}

#[tokio::test]
async fn the_limit_row_overrides_the_default_and_zero_blocks() {
    let env = env().await;
    let l = limiter(&env);
    let row = |account: &str, limit| LimitRow {
        resource_name: "api".into(),
        account_id: account.into(),
        limit,
        window_sec: Some(10),
        service_name: Some("svc".into()),
    };
    l.limits().put(&row("small", 2)).await.unwrap();
    l.limits().put(&row("blocked", 0)).await.unwrap();
    assert_eq!(drain(&l, "small", Q).await, 2);
    let d = l.get_token("api", "small", Q).await.unwrap();
    assert_eq!((d.limit, d.window_ms), (2, 10_000));

    env.counter.reset();
    let d = l.get_token("api", "blocked", Q).await.unwrap();
    assert!(!d.granted);
    assert_eq!(d.source, Source::Blocked);
    assert_eq!(d.retry_after_ms, None);
    assert_eq!(
        env.counter.by_operation().get("UpdateItem"),
        None,
        "no write for a blocked account"
    );
    let d = l.get_token("api", "blocked", Q).await.unwrap();
    assert_eq!(d.source, Source::Blocked);
    assert_eq!(env.counter.total(), 1, "the blocked answer is cached too");

    // Changing the row takes effect once the cached row expires (60 s by default), negative
    // answers (no row) included.
    assert!(l.get_token("api", "norow", Q).await.unwrap().granted);
    let other = limiter(&env);
    other.limits().put(&row("norow", 0)).await.unwrap();
    assert!(
        l.get_token("api", "norow", Q).await.unwrap().granted,
        "cached: no row"
    );
    env.clock.advance(Duration::from_secs(60));
    assert_eq!(
        l.get_token("api", "norow", Q).await.unwrap().source,
        Source::Blocked
    );
}

#[tokio::test]
async fn snake_case_tables_work_unchanged() {
    let env = TestEnv::with_style(&TABLES, AttributeStyle::Snake).await;
    env.clock
        .set(Timestamp::from_millis(env.clock.now().as_millis()));
    let now = env.clock.now().as_millis();
    env.deps
        .dynamo
        .put_item()
        .table_name(&env.deps.tables.limits)
        .item("resource_name", AttributeValue::S("api".into()))
        .item("account_id", AttributeValue::S("acct".into()))
        .item("limit", n(3))
        .item("window_sec", n(30))
        .item("service_name", AttributeValue::S("svc".into()))
        .send()
        .await
        .unwrap();
    put_bucket(&env, SNAKE, "api", "acct", n(1), n(now - 10_000)).await;
    let l = limiter(&env);
    assert_eq!(drain(&l, "acct", Q).await, 2, "1 + 10 s at 3 per 30 s");
    let row = get_bucket(&env, SNAKE, "api", "acct").await;
    assert_eq!(row["tokens"], n(0));
    assert_eq!(row["last_refill"], n(now));
    assert!(row.contains_key("last_token"));
    assert!(!row.contains_key("lastRefill"));
}

#[tokio::test]
async fn scoped_work_runs_only_with_a_token() {
    let env = env().await;
    let l = limiter(&env);
    let q = Quota::new(1, 60);
    let ran = Arc::new(AtomicBool::new(false));
    let r = ran.clone();
    let out = l
        .with_token("api", "acct", q, async move {
            r.store(true, Ordering::SeqCst);
            42
        })
        .await
        .unwrap();
    assert_eq!(out, 42);
    assert!(ran.swap(false, Ordering::SeqCst));
    let r = ran.clone();
    let denied = l
        .with_token("api", "acct", q, async move {
            r.store(true, Ordering::SeqCst);
        })
        .await;
    match denied {
        Err(TokenError::Limited(d)) => assert_eq!(d.retry_after_ms, Some(60_000)),
        other => panic!("expected Limited, got {other:?}"),
    }
    assert!(!ran.load(Ordering::SeqCst), "denied work never runs");
}

#[tokio::test]
async fn the_lambda_wrapper_takes_the_account_from_the_event() {
    let env = env().await;
    let calls = Arc::new(AtomicU32::new(0));
    let c = calls.clone();
    let handler = limiter(&env).guard(
        "api",
        Quota::new(2, 60),
        account_at("requestContext.accountId"),
        move |event: serde_json::Value| {
            let c = c.clone();
            async move {
                c.fetch_add(1, Ordering::SeqCst);
                Ok::<_, Box<dyn std::error::Error + Send + Sync>>(event["body"].clone())
            }
        },
    );
    let ev = |acct: &str| json!({"requestContext": {"accountId": acct}, "body": "hi"});
    assert_eq!(handler.call(ev("a")).await.unwrap(), json!("hi"));
    assert_eq!(handler.call(ev("a")).await.unwrap(), json!("hi"));
    let err = handler.call(ev("a")).await.unwrap_err();
    assert!(err.to_string().contains("rate limited"), "{err}");
    assert!(
        handler.call(ev("b")).await.is_ok(),
        "another account has its own bucket"
    );
    let err = handler.call(json!({"body": 1})).await.unwrap_err();
    assert!(err.to_string().contains("no account id"), "{err}");
    assert_eq!(calls.load(Ordering::SeqCst), 3);
}
