//! Leases on GCRA buckets (decision 1501) against DynamoDB Local: adjust up (refused
//! without room), adjust down (refund), duplicates by lease id, commit, expiry returning the
//! estimate, concurrent leases that never over-admit, and the calls/WCU of each operation.

use std::sync::Arc;
use std::time::Duration;

use shared::capacity::Units;
use shared::clock::{Clock, Timestamp};
use shared::kv::{KvError, LimitSet, Limiter, Limits};
use shared::table::TableKind;
use turnstile_tests::TestEnv;

/// `Llm`: 1,000 tokens, refilling one per 360 s: the tests' few seconds refill nothing. `Fast`:
/// 10 tokens refilling 10 a second, where a lease's refund races the refill.
const LIMITS: &str = "\
names:
  Llm: { id: 1, format: string }
  Hot: { id: 2, format: string }
  Fast: { id: 3, format: string }
defaults:
  Llm: { burst: 1000, count: 1000, period: 100h }
  Hot: { burst: 100, count: 100, period: 1s, shards: 4 }
  Fast: { burst: 10, count: 10, period: 1s }
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
    assert!(lim.read_lease("Llm", "u", "L3").await.unwrap().is_none());

    // Up by 150 with 100 left: refused, the lease keeps 600.
    let up = lim.adjust_lease("Llm", "u", "L1", 750, now).await.unwrap();
    assert!(!up.granted);
    assert_eq!(up.lease.unwrap().amount, 600);
    assert_eq!(
        lim.read_lease("Llm", "u", "L1")
            .await
            .unwrap()
            .unwrap()
            .amount,
        600
    );
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

    // Acquire with an id already held for another amount: an error, nothing spent or granted.
    assert!(matches!(
        lim.acquire_lease("Llm", "u", "L1", 10, TTL, now).await,
        Err(KvError::LeaseMismatch {
            held: 650,
            asked: 10,
            ..
        })
    ));
    assert_eq!(remaining(&lim, "u", now).await, 250);

    // Commit keeps the amount spent; release gives L2's 100 back, once.
    let (c, calls) = env
        .counter
        .measure(lim.commit_lease("Llm", "u", "L1"))
        .await;
    c.unwrap();
    assert_eq!(calls, 1);
    assert!(lim.read_lease("Llm", "u", "L1").await.unwrap().is_none());
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
    // Adjusting after the deadline: refused as expired, and the estimate is back, less the 11 s
    // (0.03 of a token) the refill has returned of it since.
    assert!(matches!(
        lim.adjust_lease("Llm", "e", "E1", 250, later).await,
        Err(KvError::LeaseExpired(_))
    ));
    assert_eq!(remaining(&lim, "e", later).await, 900);
    // Nobody adjusts E2: releasing it (what a sweep does) returns its 100, less the same 11 s:
    // each lease knows only when its tokens were spent, not that E1's queued before them, so the
    // refill is counted against both (decision 1501). 99.97 tokens: the bucket reads 999.97.
    assert_eq!(
        lim.release_lease("Llm", "e", "E2", later)
            .await
            .unwrap()
            .returned,
        99
    );
    assert_eq!(remaining(&lim, "e", later).await, 999);
    env.clock.advance(Duration::from_secs(11));
    assert_eq!(remaining(&lim, "e", env.clock.now()).await, 1_000);
    assert!(lim.read_lease("Llm", "e", "E1").await.unwrap().is_none());
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
    assert!(lim.read_lease("Llm", "g", "G1").await.unwrap().is_none());
    assert_eq!(
        r.returned, 0,
        "the bucket is already full: nothing to give back"
    );
}

/// Tokens left on `Fast`/`id` at `now`.
async fn fast_left(lim: &Limiter, id: &str, now: Timestamp) -> u64 {
    lim.check("Fast", id, 0, now)
        .await
        .unwrap()
        .decision
        .remaining
}

/// Spends 1 at a time on `Fast`/`id` at `now` until refused: how many were admitted.
async fn spend_until_refused(lim: &Limiter, id: &str, now: Timestamp) -> u64 {
    let mut n = 0;
    while lim
        .spend("Fast", id, 1, now)
        .await
        .unwrap()
        .decision
        .allowed
    {
        n += 1;
        assert!(n <= 100, "a burst of 10 admitted {n}");
    }
    n
}

/// The CLI repro: burst 10 at 10/s, lease 10 at t0; at t0 + 2 s the bucket has
/// long refilled, another caller spends 10, the lease is released, and 10 more were admitted (20 at
/// one instant). The lease's tokens were already given back by the refill: a release may not give
/// them again.
#[tokio::test]
async fn a_release_after_the_refill_gives_nothing_back() {
    let env = TestEnv::new(&[TableKind::Buckets]).await;
    let lim = limiter(&env);
    let t0 = env.clock.now();
    let a = lim
        .acquire_lease("Fast", "r", "R1", 10, TTL, t0)
        .await
        .unwrap();
    assert!(a.granted);
    env.clock.advance(Duration::from_secs(2));
    let t = env.clock.now();
    let before = spend_until_refused(&lim, "r", t).await;
    let (r, units) = env
        .counter
        .measure_units(lim.release_lease("Fast", "r", "R1", t))
        .await;
    let r = r.unwrap();
    assert_eq!(
        units.write, 2.0,
        "nothing to give back: a transaction of the lease item alone"
    );
    let after = spend_until_refused(&lim, "r", t).await;
    assert_eq!(
        (before, after),
        (10, 0),
        "admitted at one instant: {before} + {after} (release returned {})",
        r.returned
    );
    assert_eq!(r.returned, 0);
}

/// The adjust-after-deadline path on a fast bucket: a lease of 10 whose deadline
/// (1 s) passed while the refill returned its tokens; another caller spends 10; an adjust down then
/// settles the expired lease as a release, which may give nothing back: no 11th admission.
#[tokio::test]
async fn an_adjust_after_the_deadline_gives_nothing_back_once_refilled() {
    let env = TestEnv::new(&[TableKind::Buckets]).await;
    let lim = limiter(&env);
    let t0 = env.clock.now();
    let a = lim
        .acquire_lease("Fast", "d", "D1", 10, Duration::from_secs(1), t0)
        .await
        .unwrap();
    assert!(a.granted);
    env.clock.advance(Duration::from_secs(2));
    let t = env.clock.now();
    let before = spend_until_refused(&lim, "d", t).await;
    let err = lim.adjust_lease("Fast", "d", "D1", 2, t).await.unwrap_err();
    assert!(matches!(err, KvError::LeaseExpired(_)), "{err}");
    let after = spend_until_refused(&lim, "d", t).await;
    assert_eq!(
        (before, after),
        (10, 0),
        "admitted at one instant: {before} + {after} after the expired lease was settled"
    );
    assert!(lim.read_lease("Fast", "d", "D1").await.unwrap().is_none());
}

/// Partly refilled: each refund gives back exactly what an ideal bucket would
/// still owe (the test's instants are whole emission intervals, 100 ms).
#[tokio::test]
async fn a_refund_gives_back_only_what_the_refill_has_not() {
    let env = TestEnv::new(&[TableKind::Buckets]).await;
    let lim = limiter(&env);
    let ms = Duration::from_millis;
    let t = env.clock.now();
    // Released 0.4 s after taking 10: 4 had refilled, 6 come back, the bucket is full.
    lim.acquire_lease("Fast", "a", "A", 10, TTL, t)
        .await
        .unwrap();
    let r = lim
        .release_lease("Fast", "a", "A", t.plus(ms(400)))
        .await
        .unwrap();
    assert_eq!(r.returned, 6);
    assert_eq!(fast_left(&lim, "a", t.plus(ms(400))).await, 10);
    // Lease 6; 0.3 s later another caller spends 7 (the bucket is empty) and the lease is adjusted
    // down to 2. An ideal bucket that had spent only 2 at t is full again at t + 0.3 s and has 3
    // left after the 7: of the 4 given back, only the 3 the refill has not returned yet go back.
    lim.acquire_lease("Fast", "b", "B", 6, TTL, t)
        .await
        .unwrap();
    let t3 = t.plus(ms(300));
    assert!(
        lim.spend("Fast", "b", 7, t3)
            .await
            .unwrap()
            .decision
            .allowed
    );
    let down = lim.adjust_lease("Fast", "b", "B", 2, t3).await.unwrap();
    assert_eq!((down.granted, down.returned), (true, 3));
    assert_eq!(
        fast_left(&lim, "b", t3).await,
        3,
        "an ideal bucket has 3 left"
    );
    // Up from 5 to 8 at t + 0.8 s (3 more, the first 5 refilled), released 0.1 s later: 2 of the
    // 3 are still owed, and the bucket is full again as if the lease had never been.
    lim.acquire_lease("Fast", "c", "C", 5, TTL, t)
        .await
        .unwrap();
    let up = lim
        .adjust_lease("Fast", "c", "C", 8, t.plus(ms(800)))
        .await
        .unwrap();
    assert!(up.granted);
    let r = lim
        .release_lease("Fast", "c", "C", t.plus(ms(900)))
        .await
        .unwrap();
    assert_eq!(r.returned, 2);
    assert_eq!(fast_left(&lim, "c", t.plus(ms(900))).await, 10);
}

/// A seeded script of spends, waits and leases (acquired, adjusted up and down,
/// released, committed) on `Fast`, several processes sharing the bucket. Afterwards the net
/// consumption (every admitted spend, and what each lease still holds, each part at the moment it
/// was spent, the last spent given back first) is fed to an ideal bucket: it must admit all of it,
/// or the limiter let through more than the limit.
#[tokio::test]
async fn leases_and_spends_never_outrun_an_ideal_bucket() {
    let env = TestEnv::new(&[TableKind::Buckets]).await;
    let procs = [limiter(&env), limiter(&env), limiter(&env)];
    let rate = shared::gcra::Rate::new(10, 10, Duration::from_secs(1)).unwrap();
    let mut seed: u64 = 0x1ea5_e022;
    let mut next = |n: u64| {
        seed = seed
            .wrapping_mul(6_364_136_223_846_793_005)
            .wrapping_add(1_442_695_040_888_963_407);
        (seed >> 33) % n
    };
    // One of the last three leases: the ones whose tokens the refill has not all returned yet.
    let recent =
        |next: &mut dyn FnMut(u64) -> u64, n: usize| n - 1 - next(n.min(3) as u64) as usize;
    // Admitted spends, and each open lease's parts (when spent, how many), last part on top.
    let mut spent: Vec<(Timestamp, u64)> = Vec::new();
    let mut leases: Vec<(String, Vec<(Timestamp, u64)>)> = Vec::new();
    let (mut admitted, mut refused, mut returned, mut dropped) = (0, 0, 0, 0);
    for step in 0..300 {
        let now = env.clock.now();
        let lim = &procs[next(3) as usize];
        match next(10) {
            0..=3 => {
                let cost = 1 + next(4);
                if lim
                    .spend("Fast", "i", cost, now)
                    .await
                    .unwrap()
                    .decision
                    .allowed
                {
                    spent.push((now, cost));
                    admitted += cost;
                } else {
                    refused += 1;
                }
            }
            4 | 5 => {
                let id = format!("S{step}");
                let est = 1 + next(8);
                let ttl = Duration::from_secs(3_600);
                if lim
                    .acquire_lease("Fast", "i", &id, est, ttl, now)
                    .await
                    .unwrap()
                    .granted
                {
                    leases.push((id, vec![(now, est)]));
                }
            }
            6..=8 if !leases.is_empty() => {
                let k = recent(&mut next, leases.len());
                let held: u64 = leases[k].1.iter().map(|p| p.1).sum();
                let amount = if next(3) == 0 {
                    held + 1 + next(4)
                } else {
                    next(held + 1)
                };
                let o = lim
                    .adjust_lease("Fast", "i", &leases[k].0, amount, now)
                    .await
                    .unwrap();
                returned += o.returned;
                let parts = &mut leases[k].1;
                if !o.granted {
                    // No room for more: the lease keeps what it held.
                } else if amount > held {
                    parts.push((now, amount - held));
                } else {
                    let mut back = held - amount;
                    dropped += back;
                    while back > 0 {
                        let Some(top) = parts.last_mut() else { break };
                        let take = top.1.min(back);
                        top.1 -= take;
                        back -= take;
                        if top.1 == 0 {
                            parts.pop();
                        }
                    }
                }
            }
            9 if !leases.is_empty() => {
                let k = recent(&mut next, leases.len());
                let (id, parts) = leases.swap_remove(k);
                if next(2) == 0 {
                    dropped += parts.iter().map(|p| p.1).sum::<u64>();
                    let o = lim.release_lease("Fast", "i", &id, now).await.unwrap();
                    returned += o.returned;
                } else {
                    lim.commit_lease("Fast", "i", &id).await.unwrap();
                    spent.extend(parts);
                }
            }
            _ => {}
        }
        env.clock.advance(Duration::from_millis(20 * next(6)));
    }
    for (_, parts) in leases {
        spent.extend(parts);
    }
    spent.sort_by_key(|s| s.0);
    println!(
        "ideal bucket: {admitted} spent, {refused} refused; leases gave up {dropped}, of which \
         {returned} whole tokens came back (the rest counted as refilled)"
    );
    let mut tat = None;
    for (i, (at, cost)) in spent.iter().enumerate() {
        let d = shared::gcra::spend(&rate, tat, *at, *cost).unwrap();
        assert!(
            d.allowed,
            "consumption {i} ({cost} at {at:?}) is more than an ideal bucket admits: {:?}",
            &spent[i.saturating_sub(5)..=i]
        );
        tat = Some(d.new_tat);
    }
}

/// A lease id is scoped to its bucket. Reused on another bucket it is a new lease
/// there (spent there, refused when that bucket is empty), never a grant of the other bucket's
/// lease; on its own bucket a repeat is the same grant (nothing spent twice), a different estimate
/// is an error, and an expired lease is settled, not granted again.
#[tokio::test]
async fn a_lease_id_belongs_to_its_bucket() {
    let env = TestEnv::new(&[TableKind::Buckets]).await;
    let lim = limiter(&env);
    let now = env.clock.now();
    assert!(
        lim.acquire_lease("Fast", "k3", "p", 4, TTL, now)
            .await
            .unwrap()
            .granted
    );
    for _ in 0..10 {
        assert!(
            lim.spend("Fast", "k2", 1, now)
                .await
                .unwrap()
                .decision
                .allowed
        );
    }
    let other = lim
        .acquire_lease("Fast", "k2", "p", 4, TTL, now)
        .await
        .unwrap();
    assert!(
        !other.granted && !other.duplicate,
        "lease p on the empty bucket k2 was granted: {other:?}"
    );
    // On a bucket with room it is a lease of its own, spent there.
    let k5 = lim
        .acquire_lease("Fast", "k5", "p", 4, TTL, now)
        .await
        .unwrap();
    assert!(k5.granted && !k5.duplicate, "{k5:?}");
    assert_eq!(fast_left(&lim, "k5", now).await, 6);
    // The repeat on k3: the same grant, nothing spent twice.
    let again = lim
        .acquire_lease("Fast", "k3", "p", 4, TTL, now)
        .await
        .unwrap();
    assert!(again.granted && again.duplicate, "{again:?}");
    assert_eq!(
        lim.check("Fast", "k3", 0, now)
            .await
            .unwrap()
            .decision
            .remaining,
        6
    );
    // Another estimate under the same id: an error, not a grant.
    let wrong = lim.acquire_lease("Fast", "k3", "p", 9, TTL, now).await;
    assert!(
        matches!(
            wrong,
            Err(KvError::LeaseMismatch {
                held: 4,
                asked: 9,
                ..
            })
        ),
        "a different estimate was answered {wrong:?}"
    );
    // Past its deadline the lease is settled, not granted again for nothing.
    let short = Duration::from_secs(10);
    assert!(
        lim.acquire_lease("Fast", "k4", "q", 10, short, now)
            .await
            .unwrap()
            .granted
    );
    let late = now.plus(Duration::from_millis(10_500));
    for _ in 0..10 {
        assert!(
            lim.spend("Fast", "k4", 1, late)
                .await
                .unwrap()
                .decision
                .allowed
        );
    }
    let expired = lim.acquire_lease("Fast", "k4", "q", 10, short, late).await;
    assert!(
        matches!(expired, Err(KvError::LeaseExpired(_))),
        "an expired lease was granted again: {expired:?}"
    );
    // Settled (its 10 had long refilled: nothing came back); the id is free for a new lease.
    assert!(lim.read_lease("Fast", "k4", "q").await.unwrap().is_none());
    assert!(
        !lim.spend("Fast", "k4", 1, late)
            .await
            .unwrap()
            .decision
            .allowed
    );
    let anew = lim
        .acquire_lease(
            "Fast",
            "k4",
            "q",
            5,
            short,
            late.plus(Duration::from_secs(1)),
        )
        .await
        .unwrap();
    assert!(anew.granted && !anew.duplicate, "{anew:?}");
}

/// A lease item without `heldUntil` (none is written so any more; a hand-made or restored item)
/// gives nothing back, as nothing is known outstanding, and still adjusts and releases.
#[tokio::test]
async fn a_lease_without_held_until_gives_nothing_back_and_still_settles() {
    use aws_sdk_dynamodb::types::AttributeValue::{N, S};
    let env = TestEnv::new(&[TableKind::Buckets]).await;
    let lim = limiter(&env);
    let now = env.clock.now();
    assert!(
        lim.spend("Fast", "o", 5, now)
            .await
            .unwrap()
            .decision
            .allowed
    );
    env.deps
        .dynamo
        .put_item()
        .table_name(&env.deps.tables.buckets)
        .item("bucket", S("~lease:3:3:o:old".into()))
        .item("leaseOf", S("3:o".into()))
        .item("amount", N("5".into()))
        .item("deadline", N(now.plus(TTL).as_nanos().to_string()))
        .send()
        .await
        .unwrap();
    let down = lim.adjust_lease("Fast", "o", "old", 2, now).await.unwrap();
    assert_eq!((down.granted, down.returned), (true, 0));
    let up = lim.adjust_lease("Fast", "o", "old", 3, now).await.unwrap();
    assert!(up.granted);
    assert_eq!(fast_left(&lim, "o", now).await, 4);
    let r = lim.release_lease("Fast", "o", "old", now).await.unwrap();
    assert_eq!(r.returned, 1, "the 1 spent by the adjust up comes back");
    assert!(lim.read_lease("Fast", "o", "old").await.unwrap().is_none());
}

/// A lease's refund measures `heldUntil − now` with the releaser's clock, while `heldUntil` was set
/// with the acquirer's. Two limiters (two Lambda instances) on injected clocks 200 ms apart: a
/// release by the one whose clock is behind gives back the skew more than the refill has left
/// outstanding (2 tokens of `Fast`, 100 ms each), never more (docs/leases.md, "Clocks"); the one
/// whose clock is ahead gives back that much less.
#[tokio::test]
async fn a_release_on_a_clock_behind_gives_back_at_most_the_skew_more() {
    use shared::clock::ManualClock;
    let env = TestEnv::new(&[TableKind::Buckets]).await;
    let ms = Duration::from_millis;
    let skew = ms(200);
    let t0 = env.clock.now();
    let truth = ManualClock::new(t0);
    let (a, b) = (limiter(&env), limiter(&env));
    for (id, b_clock_at_t0, owed_more) in [
        ("behind", t0.minus(skew), 2),
        ("true", t0, 0),
        ("ahead", t0.plus(skew), -2),
    ] {
        let b_clock = ManualClock::new(b_clock_at_t0);
        truth.set(t0);
        // A (true clock) leases 10 at t0; 0.4 s later another caller spends 4 of the 4 refilled.
        assert!(
            a.acquire_lease("Fast", id, "L", 10, TTL, truth.now())
                .await
                .unwrap()
                .granted
        );
        truth.advance(ms(400));
        b_clock.advance(ms(400));
        assert!(
            a.spend("Fast", id, 4, truth.now())
                .await
                .unwrap()
                .decision
                .allowed
        );
        // Without the lease the bucket would hold 6 now; the refill has returned 4 of the 10, so 6
        // are outstanding. B releases on its own clock.
        let r = b
            .release_lease("Fast", id, "L", b_clock.now())
            .await
            .unwrap();
        let left = fast_left(&a, id, truth.now()).await;
        println!(
            "lease released on a clock {id}: returned {}, {left} left",
            r.returned
        );
        assert_eq!(
            (
                i64::try_from(r.returned).unwrap(),
                i64::try_from(left).unwrap()
            ),
            (6 + owed_more, 6 + owed_more),
            "clock {id} by {skew:?}: the ideal bucket has 6; the skew moves it by 2 at most"
        );
    }
}
