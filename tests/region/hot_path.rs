//! A global limit's regional bucket decides with today's one conditional write: the same calls and
//! write units per decision as a limit that is not global, within the region's allotment.

use std::sync::Arc;
use std::time::Duration;

use shared::clock::Clock;
use shared::kv::{LimitSet, Limiter, Limits};
use shared::region::{Allotments, Declared, Held, Mode};
use shared::table::TableKind;
use turnstile_tests::TestEnv;

const LIMITS: &str = "\
names:
  Global: { id: 1, format: string }
defaults:
  Global: { burst: 12, count: 12, period: 60s }
";

#[tokio::test]
async fn region_hot_path_call_budget() {
    let env = TestEnv::new(&[TableKind::Buckets]).await;
    let limits = Arc::new(Limits::new(LimitSet::from_yaml(LIMITS).expect("limits")));
    let now = env.clock.now();
    let set = limits.current();
    let bucket = set.bucket("Global", "tenant-a").expect("bucket");
    let global = set.rate(&bucket).expect("rate");
    let regions = vec!["us-east-1".into(), "us-east-2".into(), "us-west-2".into()];
    let allot = Arc::new(Allotments::new("us-east-1", Duration::from_secs(5)));
    allot.declare(Declared::new(&bucket.key(), global, regions, Mode::Exact).expect("declared"));
    allot.set(
        &bucket.key(),
        Held {
            amount: 4,
            epoch: 0,
            good_until: now.plus(Duration::from_secs(5)),
        },
    );
    let lim = Limiter::new(env.deps.dynamo.clone(), &env.deps.tables.buckets, limits)
        .with_allotments(allot);

    // The same limit, not declared global (another id), is the baseline of calls and units.
    let mut base = Vec::new();
    let mut regional = Vec::new();
    for _ in 0..5 {
        let ((o, units), calls) = env
            .counter
            .measure(
                env.counter
                    .measure_units(lim.spend("Global", "tenant-b", 1, now)),
            )
            .await;
        base.push((o.expect("spend").decision.allowed, calls, units.write));
        let ((o, units), calls) = env
            .counter
            .measure(
                env.counter
                    .measure_units(lim.spend("Global", "tenant-a", 1, now)),
            )
            .await;
        regional.push((o.expect("spend").decision.allowed, calls, units.write));
    }
    let admitted = regional.iter().filter(|d| d.0).count();
    assert_eq!(
        admitted, 4,
        "a region holding 4 of 12 admits 4: {regional:?}"
    );
    assert_eq!(
        regional[..4].iter().map(|d| (d.1, d.2)).collect::<Vec<_>>(),
        base[..4].iter().map(|d| (d.1, d.2)).collect::<Vec<_>>(),
        "calls and write units per admitted decision, regional vs not global"
    );
    assert_eq!(
        regional[4].1, 1,
        "a refusal within the allotment is one call, as today"
    );

    // Past its refresh (and no fresh read), the region refuses with no call at all.
    env.clock.advance(Duration::from_secs(6));
    let later = env.clock.now();
    let (o, calls) = env
        .counter
        .measure(lim.spend("Global", "tenant-a", 1, later))
        .await;
    assert!(
        !o.expect("spend").decision.allowed,
        "no allotment, no admission"
    );
    assert_eq!(calls, 0, "an expired allotment refuses without a call");
}
