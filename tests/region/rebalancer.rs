//! The `region-rebalancer` function's handler against DynamoDB Local: two regions of one global
//! limit, each with its own buckets table (where its demand is measured) and the one ledger.
//! The handler is built by the crate's `init` and invoked with the sample scheduled event, as
//! Lambda invokes it.

use std::collections::BTreeMap;
use std::time::Duration;

use region_rebalancer::{Answer, EVERY_VAR, REGION_VAR};
use serde_json::{json, Value};
use shared::catalog;
use shared::clock::{Clock, Timestamp};
use shared::config::Vars;
use shared::dynamo::item::{n, s};
use shared::gcra::Rate;
use shared::region::ledger::{self, read_all, TABLE_VAR};
use shared::region::scheduled::LimitPass;
use shared::region::{declarations, saga, Declared, DynamoLedger, Mode};
use shared::table::{TableKind, TableNames};
use shared::Deps;
use turnstile_tests::TestEnv;

const BUSY: &str = "us-east-1";
const IDLE: &str = "us-east-2";
const TOTAL: u64 = 100;
const PERIOD: Duration = Duration::from_secs(60);
const LIMIT: &str = "1:tenant-a";

struct Region {
    deps: Deps,
    state: region_rebalancer::State,
}

struct World {
    env: TestEnv,
    ledger: DynamoLedger,
    busy: Region,
    idle: Region,
    /// Spends asked of the busy region's bucket so far (its `requestCount` + `throttleCount`).
    asked: u64,
    window_start: Timestamp,
}

/// Calls by operation, as `CallCounter::by_operation` counts them.
fn want(pairs: &[(&str, u64)]) -> BTreeMap<String, u64> {
    pairs.iter().map(|(k, v)| (k.to_string(), *v)).collect()
}

fn scheduled() -> Value {
    let text = std::fs::read_to_string(concat!(
        env!("CARGO_MANIFEST_DIR"),
        "/../events/region-rebalancer/scheduled.json"
    ))
    .expect("the sample event");
    serde_json::from_str(&text).expect("JSON")
}

async fn world() -> World {
    let (mut env, store) = crate::with_ledger().await;
    let table = store.table.clone();
    let now = env.clock.now();
    let rate = Rate::new(TOTAL, TOTAL, PERIOD).expect("rate");
    let d =
        Declared::new(LIMIT, rate, vec![BUSY.into(), IDLE.into()], Mode::Exact).expect("declared");
    declarations::declare(&store, &d).await.expect("declare");
    ledger::init(
        &store,
        LIMIT,
        &d.split(),
        now.plus(Duration::from_secs(180)),
    )
    .await
    .expect("init");

    // Each region its own buckets table, as each region's stack has.
    let idle_names = TableNames::with_prefix(&format!("{}idle-", env.prefix));
    let def = catalog::definition(TableKind::Buckets, &idle_names, env.deps.style);
    catalog::ensure(&env.deps.dynamo, &def)
        .await
        .expect("idle buckets table");
    env.track_table(def.name);
    let region = |name: &str, tables: TableNames| {
        let mut deps = env.deps.clone();
        deps.tables = tables;
        deps.vars = Vars::from_pairs([
            (TABLE_VAR, table.as_str()),
            (REGION_VAR, name),
            (EVERY_VAR, "1"),
        ]);
        deps
    };
    let busy = region(BUSY, env.deps.tables.clone());
    let idle = region(IDLE, idle_names);
    let busy = Region {
        state: region_rebalancer::init(&busy).await.expect("init"),
        deps: busy,
    };
    let idle = Region {
        state: region_rebalancer::init(&idle).await.expect("init"),
        deps: idle,
    };
    env.counter.reset();
    World {
        ledger: store,
        busy,
        idle,
        asked: 0,
        window_start: now.minus(PERIOD),
        env,
    }
}

impl World {
    /// The busy region's bucket as its spends left it: `per_period` more spends asked in each
    /// period since its window started (admitted and refused alike).
    async fn ask_busy(&mut self, per_period: u64) {
        let now = self.env.clock.now();
        let elapsed = now.since(self.window_start).as_nanos();
        self.asked =
            u64::try_from(u128::from(per_period) * elapsed / PERIOD.as_nanos()).expect("a count");
        self.env
            .deps
            .dynamo
            .put_item()
            .table_name(&self.busy.deps.tables.buckets)
            .item(shared::kv::attr::BUCKET, s(LIMIT))
            .item("windowStart", n(self.window_start.as_nanos()))
            .item("requestCount", n(self.asked / 2))
            .item("throttleCount", n(self.asked - self.asked / 2))
            .item("tat", n(now.plus(PERIOD).as_nanos()))
            .send()
            .await
            .expect("bucket item");
    }

    async fn invoke(&self, region: &Region, event: Value) -> Answer {
        region_rebalancer::handle(&region.deps, &region.state, event)
            .await
            .expect("the handler answers")
    }

    async fn pass(&self, region: &Region) -> LimitPass {
        match self.invoke(region, scheduled()).await {
            Answer::Ran(summary) => {
                assert_eq!(summary.limits.len(), 1, "{summary:?}");
                let pass = summary.limits[0].clone();
                assert_eq!(pass.error, None, "{pass:?}");
                pass
            }
            other => panic!("a scheduled event ran nothing: {other:?}"),
        }
    }

    /// (busy's allotment, idle's allotment, in transit), checking the sum against `L`.
    async fn ledger(&self) -> (u64, u64, u64) {
        let (rows, _) = read_all(&self.ledger, LIMIT).await.expect("ledger");
        let held = |r: &str| {
            rows.iter()
                .find(|row| row.region == r)
                .map(|row| row.allotment)
                .expect("region row")
        };
        let moving: u64 = saga::in_transit(&rows).iter().map(|(_, e)| e.amount).sum();
        let (b, i) = (held(BUSY), held(IDLE));
        assert!(b + i <= TOTAL, "allotments {b} + {i} exceed L = {TOTAL}");
        assert_eq!(b + i + moving, TOTAL, "allotments + in transit = L");
        (b, i, moving)
    }
}

#[tokio::test]
async fn rebalancer_moves_allotment_toward_the_region_asked_more() {
    let mut w = world().await;
    w.ask_busy(900).await;
    // The busy region reports first: it is short, but only a giver lowers.
    let busy = w.pass(&w.busy).await;
    assert_eq!((busy.demand, busy.lowered.clone()), (900, None));
    assert_eq!(w.ledger().await, (50, 50, 0));

    // The idle region reads the busy one's demand and lowers its own allotment toward it,
    // keeping what it is asked for (the floor of one spend per period).
    let idle = w.pass(&w.idle).await;
    assert_eq!(idle.lowered, Some((BUSY.to_string(), 49)), "{idle:?}");
    assert_eq!(w.ledger().await, (50, 1, 49));

    // Past the quarantine (period + refresh + clock margin), the busy region raises it.
    w.env.clock.advance(Duration::from_secs(70));
    w.ask_busy(900).await;
    let busy = w.pass(&w.busy).await;
    assert_eq!(busy.raised, 1, "{busy:?}");
    assert_eq!(w.ledger().await, (99, 1, 0));
}

#[tokio::test]
async fn rebalancer_moves_nothing_again_under_the_same_demand() {
    let mut w = world().await;
    w.ask_busy(900).await;
    w.pass(&w.busy).await;
    let first = w.pass(&w.idle).await;
    assert!(first.lowered.is_some(), "{first:?}");
    let after_move = w.ledger().await;

    // The same demand a minute later, the move still in quarantine: it counts for its receiver,
    // so nothing is lowered twice.
    w.env.clock.advance(Duration::from_secs(60));
    w.ask_busy(900).await;
    w.pass(&w.busy).await;
    w.env.counter.reset();
    let again = w.pass(&w.idle).await;
    let calls = w.env.counter.by_operation();
    assert_eq!(again.lowered, None, "{again:?}");
    assert_eq!(w.ledger().await, after_move);
    // A pass that moves nothing: the declarations and the limit's partition read, the bucket
    // read, one ledger write (lease and demand report).
    assert_eq!(
        calls,
        want(&[("GetItem", 1), ("Query", 2), ("UpdateItem", 1)]),
        "calls of a pass that moves nothing"
    );

    // Raised, then the same demand again, passes in both regions: no move either way.
    w.env.clock.advance(Duration::from_secs(10));
    for _ in 0..3 {
        w.ask_busy(900).await;
        w.pass(&w.busy).await;
        let idle = w.pass(&w.idle).await;
        assert_eq!(idle.lowered, None, "{idle:?}");
        w.env.clock.advance(Duration::from_secs(60));
    }
    assert_eq!(w.ledger().await, (99, 1, 0));
}

#[tokio::test]
async fn rebalancer_counts_the_ledger_writes_of_a_move() {
    let mut w = world().await;
    w.ask_busy(900).await;
    w.pass(&w.busy).await;
    w.env.counter.reset();
    let idle = w.pass(&w.idle).await;
    assert!(idle.lowered.is_some(), "{idle:?}");
    let lowering = w.env.counter.by_operation();
    w.env.clock.advance(Duration::from_secs(70));
    w.ask_busy(900).await;
    w.env.counter.reset();
    let busy = w.pass(&w.busy).await;
    assert_eq!(busy.raised, 1);
    let raising = w.env.counter.by_operation();
    // Lowering: the pass's reads and its lease write, then lower (UpdateItem) and record
    // (GetItem of the giver's outbox + PutItem of the move).
    assert_eq!(
        lowering,
        want(&[
            ("GetItem", 2),
            ("PutItem", 1),
            ("Query", 2),
            ("UpdateItem", 2)
        ]),
        "calls of the pass that lowers"
    );
    // Raising: the pass's reads and its lease write, then record (already there: GetItem +
    // refused PutItem) and raise (GetItem of the move + UpdateItem).
    assert_eq!(
        raising,
        want(&[
            ("GetItem", 3),
            ("PutItem", 1),
            ("Query", 2),
            ("UpdateItem", 2)
        ]),
        "calls of the pass that raises"
    );
}

#[tokio::test]
async fn rebalancer_rejects_an_event_that_is_not_a_schedule_without_a_call() {
    let w = world().await;
    let mut wrong_source = scheduled();
    wrong_source["source"] = json!("aws.s3");
    for event in [
        json!({}),
        json!(null),
        json!([1, 2]),
        json!("Scheduled Event"),
        json!({"detail-type": 7, "source": "aws.events"}),
        wrong_source,
    ] {
        w.env.counter.reset();
        let answer = w.invoke(&w.idle, event.clone()).await;
        assert!(
            matches!(&answer, Answer::Rejected { reason } if reason.contains("scheduled event")),
            "{event}: {answer:?}"
        );
        assert_eq!(w.env.counter.total(), 0, "{event}: no call");
    }
    assert_eq!(w.ledger().await, (50, 50, 0));
    let answer = serde_json::to_value(w.invoke(&w.idle, json!({})).await).expect("JSON");
    assert_eq!(answer["outcome"], "rejected", "{answer}");
}

#[tokio::test]
async fn rebalancer_refuses_to_start_without_its_ledger() {
    let w = world().await;
    let mut deps = w.idle.deps.clone();
    deps.vars = Vars::from_pairs([(REGION_VAR, IDLE)]);
    let e = region_rebalancer::init(&deps)
        .await
        .err()
        .expect("no ledger");
    assert!(e.to_string().contains(TABLE_VAR), "{e}");
    deps.vars = Vars::from_pairs([(TABLE_VAR, "ledger"), (REGION_VAR, IDLE), (EVERY_VAR, "0")]);
    let e = region_rebalancer::init(&deps)
        .await
        .err()
        .expect("0 minutes");
    assert!(e.to_string().contains(EVERY_VAR), "{e}");
}

/// The busy region's demand is real only while its item says so: the values the test wrote are
/// the ones the GCRA write keeps.
#[test]
fn the_bucket_attributes_are_the_gcra_writes() {
    use shared::gcra_write::attr;
    assert_eq!(
        [
            attr::WINDOW_START,
            attr::REQUEST_COUNT,
            attr::THROTTLE_COUNT,
            attr::TAT
        ],
        ["windowStart", "requestCount", "throttleCount", "tat"]
    );
}

#[tokio::test]
async fn rebalancer_prunes_finished_moves_once_no_send_can_arrive() {
    let mut w = world().await;
    w.ask_busy(900).await;
    w.pass(&w.busy).await;
    let lowered = w.pass(&w.idle).await;
    assert!(lowered.lowered.is_some(), "{lowered:?}");
    w.env.clock.advance(Duration::from_secs(70));
    w.ask_busy(900).await;
    assert_eq!(w.pass(&w.busy).await.raised, 1);
    w.pass(&w.idle).await;
    let boxes = |w: &World| {
        let ledger = w.ledger.clone();
        async move {
            let (rows, moves) = read_all(&ledger, LIMIT).await.expect("ledger");
            let sizes: Vec<(String, usize, usize)> = rows
                .iter()
                .map(|r| (r.region.clone(), r.outbox.len(), r.inbox.len()))
                .collect();
            (sizes, moves.len())
        }
    };
    let held = vec![(BUSY.to_string(), 0, 1), (IDLE.to_string(), 1, 0)];
    assert_eq!(
        boxes(&w).await,
        (held.clone(), 1),
        "the finished move, held"
    );

    // Passes every two minutes: nothing goes until 16 minutes (a signed request's 15 and a
    // minute) plus the clock margin have passed since the raise; then the giver prunes its outbox
    // and the record, and only after that the receiver its inbox.
    let mut pruned = Vec::new();
    for _ in 0..10 {
        w.env.clock.advance(Duration::from_secs(120));
        w.ask_busy(900).await;
        let busy = w.pass(&w.busy).await;
        let idle = w.pass(&w.idle).await;
        assert_eq!((busy.lowered, idle.lowered), (None, None));
        pruned.push((busy.pruned, idle.pruned));
        assert_eq!(w.ledger().await, (99, 1, 0));
    }
    assert_eq!(
        pruned,
        [[(0, 0); 8].as_slice(), &[(0, 1), (1, 0)]].concat(),
        "pruned (receiver, giver) per round, two minutes apart from 70 s after the raise"
    );
    let empty = vec![(BUSY.to_string(), 0, 0), (IDLE.to_string(), 0, 0)];
    assert_eq!(boxes(&w).await, (empty, 0), "the boxes and records pruned");
}
