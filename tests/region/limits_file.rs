//! A global limit declared in the key-value limits file (`global:` on an override) decides, through
//! `Limiter::with_allotments`, within the allotment its region read from the ledger.

use std::sync::Arc;
use std::time::Duration;

use shared::clock::Clock;
use shared::kv::{LimitSet, Limiter, Limits};
use shared::region::ledger::{self};
use shared::region::{declarations, Allotments};
use shared::table::TableKind;
use turnstile_tests::TestEnv;

const LIMITS: &str = "\
names:
  Global: { id: 1, format: string }
defaults:
  Global: { burst: 12, count: 12, period: 60s }
overrides:
  Global:tenant-a:
    burst: 12
    count: 12
    period: 60s
    global: { regions: [us-east-1, us-east-2, us-west-2] }
";

#[tokio::test]
async fn a_global_limit_from_the_limits_file_spends_its_region_allotment() {
    let (env, store) = crate::with_ledger().await;
    let set = LimitSet::from_yaml(LIMITS).expect("limits");
    let declared = set.global_limits();
    assert_eq!(declared.len(), 1, "{declared:?}");
    let d = &declared[0];
    let now = env.clock.now();
    declarations::declare(&store, d).await.expect("declare");
    ledger::init(
        &store,
        &d.bucket,
        &d.split(),
        now.plus(Duration::from_secs(60)),
    )
    .await
    .expect("init");
    let limits = Arc::new(Limits::new(set));

    let spend_all = |allot: Arc<Allotments>| {
        let lim = Limiter::new(
            env.deps.dynamo.clone(),
            &env.deps.tables.buckets,
            limits.clone(),
        )
        .with_allotments(allot);
        async move { admitted(&lim, now).await }
    };

    // A listed region holds a third of 12 once it has read the ledger.
    let allot = Arc::new(
        limits
            .current()
            .allotments("us-east-1", Duration::from_secs(5)),
    );
    assert_eq!(
        spend_all(allot.clone()).await,
        0,
        "no allotment read yet: refused"
    );
    let held = allot
        .refresh(&store, &d.bucket, now)
        .await
        .expect("refresh");
    assert_eq!(held.amount, 4);
    assert_eq!(
        spend_all(allot).await,
        4,
        "a region holding 4 of 12 admits 4"
    );
}

#[tokio::test]
async fn a_region_the_file_does_not_list_is_not_bound_by_the_global_limit() {
    let env = TestEnv::new(&[TableKind::Buckets]).await;
    let limits = Arc::new(Limits::new(LimitSet::from_yaml(LIMITS).expect("limits")));
    let allot = limits
        .current()
        .allotments("eu-west-1", Duration::from_secs(5));
    let bucket = limits
        .current()
        .bucket("Global", "tenant-a")
        .expect("bucket");
    assert!(allot.declared(&bucket.key()).is_none());
    let lim = Limiter::new(env.deps.dynamo.clone(), &env.deps.tables.buckets, limits)
        .with_allotments(Arc::new(allot));
    let now = env.clock.now();
    assert_eq!(
        admitted(&lim, now).await,
        12,
        "the file's rate, as a limit that is not global"
    );
}

/// Of 14 spends of 1 at `now` on `Global:tenant-a`, how many were allowed.
async fn admitted(lim: &Limiter, now: shared::clock::Timestamp) -> usize {
    let mut admitted = 0;
    for _ in 0..14 {
        let o = lim
            .spend("Global", "tenant-a", 1, now)
            .await
            .expect("spend");
        admitted += usize::from(o.decision.allowed);
    }
    admitted
}
