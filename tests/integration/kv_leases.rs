//! Leases on GCRA buckets (issue 15, decision 1501) against DynamoDB Local: adjust up (refused
//! without room), adjust down (refund), duplicates by lease id, commit, expiry returning the
//! estimate, concurrent leases that never over-admit, and the calls/WCU of each operation.

use std::sync::Arc;
use std::time::Duration;

use shared::capacity::Units;
use shared::clock::{Clock, Timestamp};
use shared::kv::{KvError, LimitSet, Limiter, Limits};
use shared::table::TableKind;
use turnstile_tests::TestEnv;

/// 1,000 tokens, refilling one per 360 s: the tests' few seconds refill nothing.
const LIMITS: &str = "\
names:
  Llm: { id: 1, format: string }
  Hot: { id: 2, format: string }
defaults:
  Llm: { burst: 1000, count: 1000, period: 100h }
  Hot: { burst: 100, count: 100, period: 1s, shards: 4 }
";

fn limiter(env: &TestEnv) -> Limiter {
    let limits = Arc::new(Limits::new(LimitSet::from_yaml(LIMITS).unwrap()));
    Limiter::new(env.deps.dynamo.clone(), &env.deps.tables.buckets, limits)
}

async fn remaining(lim: &Limiter, id: &str, now: Timestamp) -> u64 {
    lim.check("Llm", id, 0, now)
        .await
        .unwrap()
        .decision
        .remaining
}

const TTL: Duration = Duration::from_secs(60);

#[tokio::test]
async fn adjust_up_down_duplicates_and_commit() {
    let env = TestEnv::new(&[TableKind::Buckets]).await;
    let lim = limiter(&env);
    let now = env.clock.now();
    let a = lim
        .acquire_lease("Llm", "u", "L1", 600, TTL, now)
        .await
        .unwrap();
    assert!(a.granted && a.lease.as_ref().unwrap().amount == 600);
    assert!(
        lim.acquire_lease("Llm", "u", "L2", 300, TTL, now)
            .await
            .unwrap()
            .granted
    );
    assert_eq!(remaining(&lim, "u", now).await, 100);
    // A third estimate beyond what is left: refused, nothing held.
    let no = lim
        .acquire_lease("Llm", "u", "L3", 101, TTL, now)
        .await
        .unwrap();
    assert!(!no.granted && no.lease.is_none());
    assert!(lim.read_lease("L3").await.unwrap().is_none());

    // Up by 150 with 100 left: refused, the lease keeps 600.
    let up = lim.adjust_lease("Llm", "u", "L1", 750, now).await.unwrap();
    assert!(!up.granted);
    assert_eq!(up.lease.unwrap().amount, 600);
    assert_eq!(lim.read_lease("L1").await.unwrap().unwrap().amount, 600);
    // Up by 50: granted.
    let (up, calls) = env
        .counter
        .measure(lim.adjust_lease("Llm", "u", "L1", 650, now))
        .await;
    let up = up.unwrap();
    assert!(up.granted && !up.duplicate);
    assert_eq!(calls, 2, "GetItem + TransactWriteItems");
    assert_eq!(remaining(&lim, "u", now).await, 50);
    // The same adjust again (a retried request): nothing written.
    let (dup, calls) = env
        .counter
        .measure(lim.adjust_lease("Llm", "u", "L1", 650, now))
        .await;
    assert!(dup.unwrap().duplicate);
    assert_eq!(calls, 1, "only the lease read");
    assert_eq!(remaining(&lim, "u", now).await, 50);

    // Down: L2 used 100 of its 300; 200 return.
    let down = lim.adjust_lease("Llm", "u", "L2", 100, now).await.unwrap();
    assert_eq!((down.granted, down.returned), (true, 200));
    assert_eq!(remaining(&lim, "u", now).await, 250);
    assert!(
        lim.adjust_lease("Llm", "u", "L2", 100, now)
            .await
            .unwrap()
            .duplicate
    );
    assert_eq!(remaining(&lim, "u", now).await, 250);

    // Acquire with an id already held: the lease as it is, nothing spent.
    let again = lim
        .acquire_lease("Llm", "u", "L1", 10, TTL, now)
        .await
        .unwrap();
    assert!(again.duplicate && again.lease.unwrap().amount == 650);
    assert_eq!(remaining(&lim, "u", now).await, 250);

    // Commit keeps the amount spent; release gives L2's 100 back, once.
    let (c, calls) = env.counter.measure(lim.commit_lease("L1")).await;
    c.unwrap();
    assert_eq!(calls, 1);
    assert!(lim.read_lease("L1").await.unwrap().is_none());
    assert_eq!(remaining(&lim, "u", now).await, 250);
    assert_eq!(
        lim.release_lease("Llm", "u", "L2", now)
            .await
            .unwrap()
            .returned,
        100
    );
    let twice = lim.release_lease("Llm", "u", "L2", now).await.unwrap();
    assert!(twice.duplicate && twice.returned == 0);
    assert_eq!(remaining(&lim, "u", now).await, 350);
    assert!(matches!(
        lim.adjust_lease("Llm", "u", "L1", 1, now).await,
        Err(KvError::LeaseNotFound(_))
    ));
}

#[tokio::test]
async fn an_expired_lease_returns_its_estimate() {
    let env = TestEnv::new(&[TableKind::Buckets]).await;
    let lim = limiter(&env);
    let now = env.clock.now();
    lim.acquire_lease("Llm", "e", "E1", 200, Duration::from_secs(10), now)
        .await
        .unwrap();
    lim.acquire_lease("Llm", "e", "E2", 100, Duration::from_secs(10), now)
        .await
        .unwrap();
    assert_eq!(remaining(&lim, "e", now).await, 700);
    env.clock.advance(Duration::from_secs(11));
    let later = env.clock.now();
    // Adjusting after the deadline: refused as expired, and the estimate is back.
    assert!(matches!(
        lim.adjust_lease("Llm", "e", "E1", 250, later).await,
        Err(KvError::LeaseExpired(_))
    ));
    assert_eq!(remaining(&lim, "e", later).await, 900);
    // Nobody adjusts E2: releasing it (what a sweep does) returns its 100.
    assert_eq!(
        lim.release_lease("Llm", "e", "E2", later)
            .await
            .unwrap()
            .returned,
        100
    );
    assert_eq!(remaining(&lim, "e", later).await, 1_000);
    assert!(lim.read_lease("E1").await.unwrap().is_none());
}

#[tokio::test]
async fn calls_and_write_units_of_a_lease() {
    let env = TestEnv::new(&[TableKind::Buckets]).await;
    let lim = limiter(&env);
    let now = env.clock.now();
    let (a, units) = env
        .counter
        .measure_units(lim.acquire_lease("Llm", "c", "C1", 5, TTL, now))
        .await;
    assert!(a.unwrap().granted);
    assert_eq!(units, Units::write(4.0), "a 2-item transaction");
    assert_eq!(
        env.counter.by_operation().get("TransactWriteItems"),
        Some(&1)
    );
    assert!(matches!(
        lim.acquire_lease("Llm", "c", "", 5, TTL, now).await,
        Err(KvError::BadLeaseId(_))
    ));
}

/// 32 concurrent callers each lease 40 and then adjust to 45: whatever was granted, the bucket's
/// spent tokens equal the sum of the leases' amounts exactly, and never exceed the burst.
#[tokio::test(flavor = "multi_thread", worker_threads = 4)]
async fn concurrent_leases_never_over_admit() {
    let env = TestEnv::new(&[TableKind::Buckets]).await;
    let lim = Arc::new(limiter(&env));
    let now = env.clock.now();
    let tasks: Vec<_> = (0..32)
        .map(|i| {
            let lim = lim.clone();
            tokio::spawn(async move {
                let id = format!("P{i}");
                let a = lim
                    .acquire_lease("Llm", "p", &id, 40, TTL, now)
                    .await
                    .unwrap();
                if !a.granted {
                    return 0;
                }
                let b = lim.adjust_lease("Llm", "p", &id, 45, now).await.unwrap();
                b.lease.unwrap().amount
            })
        })
        .collect();
    let mut held = 0;
    for t in tasks {
        held += t.await.unwrap();
    }
    let left = remaining(&lim, "p", now).await;
    println!("32 leases: {held} held, {left} left");
    assert!(held <= 1_000);
    assert_eq!(held + left, 1_000, "spent = sum of the leases' amounts");
    // 32 × 40 > 1,000, so some acquire was refused with under 40 left, and nothing is ever given
    // back here: fewer than 40 remain.
    assert!(left < 40, "{left} left while an acquire of 40 was refused");
}

/// On a sharded limit (100 over 4 shards: 25 each) a lease lives on one shard: adjusting up needs
/// room on that shard, adjusting down and releasing return to it, and the whole never over-admits.
#[tokio::test]
async fn a_lease_on_a_sharded_limit_stays_on_its_shard() {
    let env = TestEnv::new(&[TableKind::Buckets]).await;
    let lim = limiter(&env);
    let now = env.clock.now();
    let a = lim
        .acquire_lease("Hot", "s", "S1", 20, TTL, now)
        .await
        .unwrap();
    let shard = a.lease.unwrap().bucket;
    assert!(shard.starts_with("2/") && shard.ends_with(":s"), "{shard}");
    // +10 on a shard of 25 holding 20: refused, though other shards have room.
    let up = lim.adjust_lease("Hot", "s", "S1", 30, now).await.unwrap();
    assert!(!up.granted);
    assert_eq!(up.lease.unwrap().amount, 20);
    let up = lim.adjust_lease("Hot", "s", "S1", 25, now).await.unwrap();
    assert!(up.granted);
    let down = lim.adjust_lease("Hot", "s", "S1", 5, now).await.unwrap();
    assert_eq!(
        (down.returned, down.lease.unwrap().bucket),
        (20, shard.clone())
    );
    assert_eq!(
        lim.release_lease("Hot", "s", "S1", now)
            .await
            .unwrap()
            .returned,
        5
    );
    assert_eq!(
        lim.check("Hot", "s", 0, now)
            .await
            .unwrap()
            .decision
            .remaining,
        100
    );
    assert!(matches!(
        lim.acquire_lease("Hot", "s", "S2", 26, TTL, now).await,
        Err(KvError::Rate(_))
    ));
    // Many leases of 10 at once: never more than 100 held, and every shard can hold only two.
    let mut held = 0;
    for i in 0..40 {
        let o = lim
            .acquire_lease("Hot", "s", &format!("M{i}"), 10, TTL, now)
            .await
            .unwrap();
        held += if o.granted { 10 } else { 0 };
    }
    assert!(held <= 80, "{held}: 4 shards × two leases of 10");
    assert_eq!(
        lim.check("Hot", "s", 0, now)
            .await
            .unwrap()
            .decision
            .remaining,
        100 - held
    );
}

/// A lease can grow past the burst as the bucket refills; releasing it gives back at most the
/// burst (a refund never fills past full) instead of failing.
#[tokio::test]
async fn a_lease_larger_than_the_burst_still_releases() {
    let env = TestEnv::new(&[TableKind::Buckets]).await;
    let lim = limiter(&env);
    let t0 = env.clock.now();
    let long = Duration::from_secs(86_400);
    assert!(
        lim.acquire_lease("Llm", "g", "G1", 1_000, long, t0)
            .await
            .unwrap()
            .granted
    );
    let t1 = t0.plus(Duration::from_secs(3_600)); // 10 tokens refilled
    let up = lim.adjust_lease("Llm", "g", "G1", 1_010, t1).await.unwrap();
    assert!(up.granted && up.lease.unwrap().amount == 1_010);
    assert_eq!(remaining(&lim, "g", t1).await, 0);
    let back = lim.adjust_lease("Llm", "g", "G1", 5, t1).await.unwrap();
    assert_eq!(back.returned, 1_000);
    assert_eq!(remaining(&lim, "g", t1).await, 1_000);
    let r = lim.release_lease("Llm", "g", "G1", t1).await.unwrap();
    assert!(lim.read_lease("G1").await.unwrap().is_none());
    assert_eq!(
        r.returned, 0,
        "the bucket is already full: nothing to give back"
    );
}
