//! The rate-limit state (`RateLimitState`) against DynamoDB Local: kept on the bucket's item by the
//! admission write itself (no extra call), read back by a fresh client (a restart), and the
//! best-effort throttle fields flushed under the `version` lock.

use std::sync::Arc;
use std::time::Duration;

use shared::clock::Clock;
use shared::kv::{LimitSet, Limiter, Limits};
use shared::state::{GcraReader, Registry, StateError};
use shared::table::TableKind;
use turnstile_tests::{endpoint, TestEnv};

const LIMITS: &str = "\
names:
  Worked: { id: 2, format: string }
  Ip: { id: 5, format: ipAddress }
defaults:
  Worked: { burst: 10, count: 1, period: 1s }
  Ip: { burst: 3, count: 3, period: 1m }
";

fn set() -> Arc<LimitSet> {
    Arc::new(LimitSet::from_yaml(LIMITS).unwrap())
}

fn limiter(env: &TestEnv) -> Limiter {
    Limiter::new(
        env.deps.dynamo.clone(),
        &env.deps.tables.buckets,
        Arc::new(Limits::new(LimitSet::from_yaml(LIMITS).unwrap())),
    )
}

/// A reader on a brand-new client, as after a restart.
fn reader(env: &TestEnv, limits: Option<Arc<LimitSet>>) -> GcraReader {
    GcraReader {
        client: shared::dynamo::local_client(&endpoint(), None),
        table: env.deps.tables.buckets.clone(),
        limits,
    }
}

#[tokio::test]
async fn state_is_written_by_the_admission_itself_and_survives_a_restart() {
    let env = TestEnv::new(&[TableKind::Buckets]).await;
    let lim = limiter(&env);
    let t0 = env.clock.now();
    for _ in 0..3 {
        lim.spend("Worked", "s", 1, t0).await.unwrap();
    }
    let t1 = t0.plus(Duration::from_secs(1));
    for _ in 0..2 {
        let (o, calls) = env.counter.measure(lim.spend("Worked", "s", 1, t1)).await;
        assert!(o.unwrap().decision.allowed);
        assert_eq!(calls, 1, "state rides on the admission write");
    }
    let s = reader(&env, None).state("2:s", t1).await.unwrap();
    assert_eq!(s.entity_type, "Worked");
    assert_eq!(s.entity_id, "s");
    assert_eq!(s.bucket, "2:s");
    assert_eq!(s.request_count, Some(5));
    assert_eq!(s.version, Some(5));
    assert_eq!(s.window_start, t0.to_rfc3339());
    assert_eq!(s.last_request_at, Some(t1.to_rfc3339()));
    assert_eq!(s.updated_at, t1.to_rfc3339());
    assert_eq!(s.tokens_available, Some(6));
    assert_eq!(s.token_capacity, Some(10));
    assert_eq!(s.refill_rate, Some(1.0));
    assert_eq!(s.reset_at, t0.plus(Duration::from_secs(5)).to_rfc3339());
    assert_eq!(s.window_end, s.reset_at);
    assert_eq!(s.is_throttled, Some(false));
    assert_eq!(
        s.peak_request_rate,
        Some(5.0),
        "5 requests over a 1 s window"
    );
    assert_eq!(s.throttle_count, Some(0));

    // Name:id resolves through the limits file to the same bucket.
    let named = reader(&env, Some(set()))
        .state("Worked:s", t1)
        .await
        .unwrap();
    assert_eq!(named, s);

    // Once full again, a new window starts with the next spend.
    let t2 = t0.plus(Duration::from_secs(30));
    lim.spend("Worked", "s", 1, t2).await.unwrap();
    let s = reader(&env, None).state("2:s", t2).await.unwrap();
    assert_eq!((s.request_count, s.version), (Some(1), Some(6)));
    assert_eq!(s.window_start, t2.to_rfc3339());
}

#[tokio::test]
async fn denials_are_recorded_under_the_version_lock_without_touching_the_admission_path() {
    let env = TestEnv::new(&[TableKind::Buckets]).await;
    let lim = limiter(&env);
    let t0 = env.clock.now();
    for _ in 0..3 {
        lim.spend("Ip", "192.0.2.1", 1, t0).await.unwrap();
    }
    let deny_at = t0.plus(Duration::from_millis(10));
    for _ in 0..2 {
        let (o, calls) = env
            .counter
            .measure(lim.spend("Ip", "192.0.2.1", 1, deny_at))
            .await;
        assert!(!o.unwrap().decision.allowed);
        assert_eq!(calls, 1, "a denial writes nothing");
    }
    assert_eq!(lim.held_throttles(), 2);
    let s = reader(&env, None)
        .state("5:192.0.2.1", deny_at)
        .await
        .unwrap();
    assert_eq!(s.is_throttled, Some(true), "derived exactly from the TAT");
    assert_eq!(s.throttle_count, Some(0), "not yet written");

    let (flushed, calls) = env.counter.measure(lim.flush_throttles(deny_at)).await;
    assert_eq!((flushed.unwrap(), calls), (1, 1));
    assert_eq!(lim.held_throttles(), 0);
    let s = reader(&env, None)
        .state("5:192.0.2.1", deny_at)
        .await
        .unwrap();
    assert_eq!(s.throttle_count, Some(2));
    assert_eq!(s.throttled_at, Some(deny_at.to_rfc3339()));
    assert_eq!(s.version, Some(4));
    assert_eq!(
        s.request_count,
        Some(3),
        "denials are not requests admitted"
    );
    let (n, calls) = env.counter.measure(lim.flush_throttles(deny_at)).await;
    assert_eq!((n.unwrap(), calls), (0, 0), "nothing held, nothing written");

    // Another process writes the bucket between a denial and its flush: the version moved, the
    // flush is skipped, and the denial rides on this process's next draining spend instead.
    lim.spend("Ip", "192.0.2.1", 1, deny_at).await.unwrap(); // denied again, held at version 4
    let other = limiter(&env);
    other.refund("Ip", "192.0.2.1", 2, deny_at).await.unwrap(); // version 5
    assert_eq!(lim.flush_throttles(deny_at).await.unwrap(), 0);
    assert_eq!(lim.held_throttles(), 1);
    let o = lim.spend("Ip", "192.0.2.1", 1, deny_at).await.unwrap();
    assert!(o.decision.allowed);
    assert_eq!(lim.held_throttles(), 0);
    let s = reader(&env, None)
        .state("5:192.0.2.1", deny_at)
        .await
        .unwrap();
    assert_eq!((s.throttle_count, s.version), (Some(3), Some(6)));
}

#[tokio::test]
async fn buckets_without_items_and_other_tables() {
    let env = TestEnv::new(&[TableKind::Buckets]).await;
    let now = env.clock.now();
    let registry = Registry::default().with(GcraReader {
        client: env.deps.dynamo.clone(),
        table: env.deps.tables.buckets.clone(),
        limits: Some(set()),
    });
    let (s, calls) = env
        .counter
        .measure(registry.read("Ip:2001:0db8::1", now))
        .await;
    assert_eq!(calls, 1, "one GetItem");
    let s = s.unwrap();
    assert_eq!(s.bucket, "5:2001:db8::1");
    assert_eq!((s.tokens_available, s.is_throttled), (Some(3), Some(false)));
    assert_eq!(
        registry.read("buckets:5:2001:db8::1", now).await.unwrap(),
        s
    );
    assert!(matches!(
        Registry::default()
            .with(reader(&env, None))
            .read("5:10.0.0.1", now)
            .await,
        Err(StateError::NoRate(_))
    ));
    assert!(matches!(
        Registry::default()
            .with(reader(&env, None))
            .read("Ip:10.0.0.1", now)
            .await,
        Err(StateError::Unsupported(_))
    ));
    assert!(matches!(
        registry.read("counters:acme:minute", now).await,
        Err(StateError::Unsupported(_))
    ));
    assert!(matches!(
        registry.read("Nope:1", now).await,
        Err(StateError::Key(_))
    ));
}

/// Decision 0603, "The rate stamp": a hot bucket's draining spends leave out the rate and name
/// the item is known to carry, yet the state view follows a changed rate at the next spend, and an
/// item deleted behind the limiter's back is recreated with its stamp.
#[tokio::test]
async fn the_rate_stamp_is_written_once_and_follows_a_changed_rate() {
    let env = TestEnv::new(&[TableKind::Buckets]).await;
    let lim = limiter(&env);
    let t0 = env.clock.now();
    for _ in 0..3 {
        assert!(
            lim.spend("Worked", "hot", 1, t0)
                .await
                .unwrap()
                .decision
                .allowed
        );
    }
    let s = reader(&env, None).state("2:hot", t0).await.unwrap();
    assert_eq!((s.token_capacity, s.refill_rate), (Some(10), Some(1.0)));
    assert_eq!(s.entity_type, "Worked");
    assert_eq!(s.updated_at, t0.to_rfc3339(), "a spend's lastRequestAt");

    // The limits file changes: the next (draining) spend stamps the new rate.
    lim.limits()
        .reload_yaml(&LIMITS.replace("burst: 10, count: 1", "burst: 20, count: 2"))
        .unwrap();
    let t1 = t0.plus(Duration::from_millis(100));
    let (o, calls) = env.counter.measure(lim.spend("Worked", "hot", 1, t1)).await;
    assert!(o.unwrap().decision.allowed);
    assert_eq!(calls, 1);
    let s = reader(&env, None).state("2:hot", t1).await.unwrap();
    assert_eq!((s.token_capacity, s.refill_rate), (Some(20), Some(2.0)));
    assert_eq!(s.request_count, Some(4));

    // Another process on the old file: its cold bet fails, the old item shows it a stamp that
    // is not its own, and its retry writes its rate (the last writer's rate is the one shown).
    let old = limiter(&env);
    let (o, calls) = env.counter.measure(old.spend("Worked", "hot", 1, t1)).await;
    assert!(o.unwrap().decision.allowed);
    assert_eq!(calls, 2, "a cold bet on idle, then the draining write");
    let s = reader(&env, None).state("2:hot", t1).await.unwrap();
    assert_eq!(s.token_capacity, Some(10));

    // The item goes (as after its TTL) while `lim` still holds a hint: the write that recreates it
    // carries the stamp again.
    env.deps
        .dynamo
        .delete_item()
        .table_name(&env.deps.tables.buckets)
        .key(
            shared::kv::attr::BUCKET,
            aws_sdk_dynamodb::types::AttributeValue::S("2:hot".into()),
        )
        .send()
        .await
        .unwrap();
    assert!(
        lim.spend("Worked", "hot", 1, t1)
            .await
            .unwrap()
            .decision
            .allowed
    );
    let s = reader(&env, None).state("2:hot", t1).await.unwrap();
    assert_eq!((s.token_capacity, s.request_count), (Some(20), Some(1)));
    assert_eq!(s.entity_type, "Worked");
}

/// Two processes on different limits files (a deploy): the stored stamp is the last stamping
/// writer's rate, which may not be the caller's. The view says which rate it shows (`rateSource`:
/// the item's stamp, or the caller's limits file when the item has none), and when the caller's
/// file has another rate for the bucket it shows that one beside it (`limitsFileRate`).
#[tokio::test]
async fn the_view_says_which_rate_it_read() {
    let env = TestEnv::new(&[TableKind::Buckets]).await;
    let t0 = env.clock.now();
    let newer = LIMITS.replace("burst: 10, count: 1", "burst: 20, count: 2");
    let new = Limiter::new(
        env.deps.dynamo.clone(),
        &env.deps.tables.buckets,
        Arc::new(Limits::new(LimitSet::from_yaml(&newer).unwrap())),
    );
    assert!(
        new.spend("Worked", "dep", 1, t0)
            .await
            .unwrap()
            .decision
            .allowed
    );
    // Read with the old file: the stamp (20, 2/s) is shown, and said to be the stored one.
    let s = reader(&env, Some(set()))
        .state("Worked:dep", t0)
        .await
        .unwrap();
    let json = serde_json::to_value(&s).unwrap();
    assert_eq!(
        (&json["tokenCapacity"], &json["rateSource"]),
        (&serde_json::json!(20), &serde_json::json!("stored")),
        "{json}"
    );
    assert_eq!(
        json["limitsFileRate"],
        serde_json::json!({"tokenCapacity": 10, "refillRate": 1.0}),
        "{json}"
    );
    // Read with the file that wrote it: nothing to show beside it.
    let same = Arc::new(LimitSet::from_yaml(&newer).unwrap());
    let json = serde_json::to_value(
        reader(&env, Some(same))
            .state("Worked:dep", t0)
            .await
            .unwrap(),
    )
    .unwrap();
    assert_eq!(json["rateSource"], "stored", "{json}");
    assert!(json.get("limitsFileRate").is_none(), "{json}");
    // No item: the rate can only be the limits file's, and the view says so.
    let json = serde_json::to_value(
        reader(&env, Some(set()))
            .state("Worked:none", t0)
            .await
            .unwrap(),
    )
    .unwrap();
    assert_eq!(
        (&json["tokenCapacity"], &json["rateSource"]),
        (&serde_json::json!(10), &serde_json::json!("limitsFile")),
        "{json}"
    );
}
