//! Resharding a tenant's connection counters (decision 2206): each connection is
//! released to the counter it was charged on, whatever its session or its tenant row says now;
//! an authorizer still holding the old tenant row (its 60 s cache) cannot charge a retired layout;
//! and the reconciler brings every counter of a resharded tenant to its truth.

use aws_lambda_events::apigw::ApiGatewayWebsocketProxyRequest;
use shared::reconcile::Outcome;
use shared::tenant::Limits;

use crate::ws_support::*;

const T: &str = "tenant-rs";
/// Cap 4 open connections; sessions and minutes never bind.
const CAP: u64 = 4;

fn limits(shards: u64) -> Limits {
    Limits::example(1_000, 1_000, 100, CAP, 300, 600).with_connection_shards(shards)
}

/// What `turnstile tenant put --connection-shards {to} --reshard-drained` does.
async fn reshard(w: &World, from: u64, to: u64) {
    shared::admission::shards::fence(w.deps(), &T.parse().unwrap(), from, to)
        .await
        .unwrap();
    w.put_tenant(T, limits(to)).await;
}

/// A `$connect` event carrying the authorizer's context for `s` (as API Gateway passes it on),
/// or `None` when the authorizer denied.
async fn authorized(w: &World, s: &str, cid: &str) -> Option<ApiGatewayWebsocketProxyRequest> {
    let ev = w.authorizer_event(T, s).await;
    let r = authorizer::handle(w.deps(), &w.authorizer, ev)
        .await
        .unwrap();
    if !matches!(authorizer::decision(&r), authorizer::Decision::Allow) {
        return None;
    }
    let mut ev = ws_event("connect/connect.json", T, s, cid, None);
    let fields = &mut ev.request_context.authorizer.fields;
    for (k, v) in r.context.as_object().unwrap() {
        fields.insert(k.clone(), v.clone());
    }
    Some(ev)
}

/// Authorizer, then `$connect`, as API Gateway runs them: the status (403 when denied).
async fn open(w: &World, s: &str, cid: &str) -> i64 {
    match authorized(w, s, cid).await {
        Some(ev) => {
            connect::handle(w.deps(), &w.connect, ev)
                .await
                .unwrap()
                .status_code
        }
        None => 403,
    }
}

/// `$connect` with `l` in the authorizer context as a fresh authorizer writes it.
async fn fresh(w: &World, s: &str, cid: &str, l: &Limits) -> i64 {
    let mut ev = ws_event("connect/connect.json", T, s, cid, Some(l));
    ev.request_context.authorizer.fields.insert(
        shared::tenant::attr::CONNECTION_SHARDS.into(),
        serde_json::Value::String(l.connection_shards.to_string()),
    );
    connect::handle(w.deps(), &w.connect, ev)
        .await
        .unwrap()
        .status_code
}

/// `{tenant}` and shards 0..8, as (key, itemCount) with absent rows as 0.
async fn counters(w: &World) -> Vec<(String, i64)> {
    let mut out = vec![(T.to_string(), w.count(T).await.unwrap_or(0))];
    for i in 0..8 {
        let k = format!("{T}:shard:{i}");
        let c = w.count(&k).await.unwrap_or(0);
        out.push((k, c));
    }
    out
}

fn total(c: &[(String, i64)]) -> i64 {
    c.iter().map(|(_, n)| n).sum()
}

async fn held(w: &World) -> usize {
    w.session(T, "s1")
        .await
        .map_or(0, |s| s.connection_ids.len())
}

async fn reconcile(w: &World) -> shared::reconcile::Report {
    reconcile_tenant(
        w.deps(),
        &T.parse().unwrap(),
        &w.api.url(),
        false,
        std::time::Duration::from_millis(20),
    )
    .await
}

/// 4 → 1 with `--reshard-drained`: the session keeps `connShards = 4` from before, and on main
/// every connection charged on `{tenant}` was released to a shard, so `{tenant}` filled up and
/// refused for good after one round. Now each round admits exactly the cap, `{tenant}` goes back
/// to 0 every time, an authorizer still holding the 4-shard row cannot charge the retired shards
/// (no over-admission), and a reconcile finds every counter at its truth.
#[tokio::test]
async fn four_shards_to_one_releases_where_each_connection_was_charged() {
    let w = World::new().await;
    w.put_tenant(T, limits(4)).await;
    w.put_session(T, "s1").await;
    // Warm the authorizer's cache with the 4-shard row, use it, drain.
    for i in 0..CAP {
        assert_eq!(open(&w, "s1", &format!("old{i}=")).await, 200);
    }
    for i in 0..CAP {
        w.disconnect(T, "s1", &format!("old{i}=")).await;
    }
    assert_eq!(total(&counters(&w).await), 0, "drained");
    reshard(&w, 4, 1).await;
    for round in 0..3 {
        // The authorizer's cached row still says 4 shards for 60 s: these connects must not be
        // counted on the retired shards beside the new `{tenant}` counter.
        let mut admitted = Vec::new();
        for i in 0..CAP + 2 {
            let cid = format!("r{round}c{i}=");
            let status = if i % 2 == 0 {
                open(&w, "s1", &cid).await
            } else {
                fresh(&w, "s1", &cid, &limits(1)).await
            };
            if status == 200 {
                admitted.push(cid);
            }
        }
        assert_eq!(admitted.len() as u64, CAP, "round {round}: exactly the cap");
        assert_eq!(held(&w).await as u64, CAP);
        for cid in &admitted {
            assert_eq!(w.disconnect(T, "s1", cid).await.status_code, 200);
        }
        let c = counters(&w).await;
        assert!(c.iter().all(|(_, n)| *n == 0), "round {round}: {c:?}");
        if round == 1 {
            // The cached row expires: the authorizer reads the 1-shard row.
            w.env.clock.advance(std::time::Duration::from_secs(61));
            w.put_session(T, "s1").await;
        }
    }
    let report = reconcile(&w).await;
    assert_eq!(report.tenants[0].outcome, Outcome::Consistent, "{report:?}");
    assert!(counters(&w).await.iter().all(|(_, n)| *n == 0));
}

/// 1 → 4 while an authorizer holds the old 1-shard row (cached 60 s): on main its connects
/// were charged on `{tenant}` and released to the shards the session named (shards below the
/// truth), and `{tenant}` and the shards admitted a cap each. Now the retired `{tenant}` counter
/// turns them to the shards: exactly the cap is open at every moment, each release lands where
/// it was charged, and the counters equal the truth with connections open and after.
#[tokio::test]
async fn one_to_four_with_a_stale_authorizer_never_admits_past_the_cap() {
    let w = World::new().await;
    w.put_tenant(T, limits(1)).await;
    w.put_session(T, "s1").await;
    assert_eq!(open(&w, "s1", "warm=").await, 200);
    w.disconnect(T, "s1", "warm=").await;
    assert_eq!(w.count(T).await, Some(0));
    reshard(&w, 1, 4).await;
    // Stale (authorizer, cached 1-shard row) and fresh (4-shard limits) connects, interleaved.
    let mut admitted = Vec::new();
    for i in 0..2 * CAP {
        let cid = format!("c{i}=");
        let status = if i % 2 == 0 {
            open(&w, "s1", &cid).await
        } else {
            fresh(&w, "s1", &cid, &limits(4)).await
        };
        if status == 200 {
            admitted.push(cid);
        }
    }
    assert_eq!(
        admitted.len() as u64,
        CAP,
        "never past the cap: {admitted:?}"
    );
    let c = counters(&w).await;
    assert_eq!(total(&c), CAP as i64, "{c:?}");
    assert!(c.iter().all(|(_, n)| (0..=1).contains(n)), "{c:?}");
    let report = reconcile(&w).await;
    assert_eq!(report.tenants[0].outcome, Outcome::Consistent, "{report:?}");
    assert_eq!(report.tenants[0].truth, CAP);
    // Half are released, the cache expires, the cap is refilled by fresh connects only.
    for cid in admitted.drain(..2) {
        assert_eq!(w.disconnect(T, "s1", &cid).await.status_code, 200);
    }
    w.env.clock.advance(std::time::Duration::from_secs(61));
    w.put_session(T, "s1").await;
    for i in 0..4 {
        let cid = format!("late{i}=");
        if open(&w, "s1", &cid).await == 200 {
            admitted.push(cid);
        }
    }
    assert_eq!(admitted.len() as u64, CAP);
    for cid in &admitted {
        assert_eq!(w.disconnect(T, "s1", cid).await.status_code, 200);
    }
    let c = counters(&w).await;
    assert!(
        c.iter().all(|(_, n)| *n == 0),
        "every counter back to 0: {c:?}"
    );
    let report = reconcile(&w).await;
    assert_eq!(report.tenants[0].outcome, Outcome::Consistent, "{report:?}");
}

/// A fenced tenant whose counters are wrong both ways (`{tenant}` 3 too high from units never
/// given back, shard 2 two below its truth from releases that went to it but were charged
/// elsewhere, as main's hash rule did): one reconcile sets every counter to its truth — up and
/// down, never below the connections each holds — and a second finds it consistent.
#[tokio::test]
async fn the_reconciler_repairs_a_resharded_tenant_both_ways() {
    let w = World::new().await;
    w.put_tenant(T, limits(1)).await;
    w.put_session(T, "s1").await;
    reshard(&w, 1, 4).await;
    for i in 0..3 {
        assert_eq!(fresh(&w, "s1", &format!("k{i}="), &limits(4)).await, 200);
    }
    let before = counters(&w).await;
    add(&w, T.to_string(), 3).await;
    add(&w, format!("{T}:shard:2"), -2).await;
    let report = reconcile(&w).await;
    let total_before = total(&before);
    assert_eq!(
        report.tenants[0].outcome,
        Outcome::Repaired {
            from: total_before + 1,
            to: total_before as u64
        },
        "{report:?}"
    );
    assert_eq!(
        counters(&w).await,
        before,
        "every counter back to its truth"
    );
    let again = reconcile(&w).await;
    assert_eq!(again.tenants[0].outcome, Outcome::Consistent, "{again:?}");
    for i in 0..3 {
        assert_eq!(
            w.disconnect(T, "s1", &format!("k{i}=")).await.status_code,
            200
        );
    }
    assert!(counters(&w).await.iter().all(|(_, n)| *n == 0));
}

/// A shard can hold more connections than its share while its count says less: after the
/// sum-only repair of a sharded tenant (decision 1502) lowered it for a leak charged elsewhere,
/// it keeps admitting until its count reaches the share, and the other shard keeps the leaked
/// unit. The per-counter repair of a resharded tenant then set each counter to the connections
/// charged on it: the first above its share, the other below — and the one below admitted
/// although the tenant was full. (Found by the simulation, seed 5521 under load.)
#[tokio::test]
async fn a_resharded_repair_never_leaves_room_past_the_cap() {
    let w = World::new().await;
    w.put_tenant(T, limits(1)).await;
    w.put_session(T, "s1").await;
    reshard(&w, 1, 4).await;
    for i in 0..3 {
        assert_eq!(fresh(&w, "s1", &format!("k{i}="), &limits(4)).await, 200);
    }
    // The skew the sum-only repair leaves: one unit moved from a shard holding a connection
    // to the empty one (the sum, 3, still the truth).
    let c = counters(&w).await;
    let full = c.iter().skip(1).position(|(_, n)| *n == 1).unwrap();
    let empty = c.iter().skip(1).take(4).position(|(_, n)| *n == 0).unwrap();
    add(&w, format!("{T}:shard:{full}"), -1).await;
    add(&w, format!("{T}:shard:{empty}"), 1).await;
    assert_eq!(
        fresh(&w, "s1", "k3=", &limits(4)).await,
        200,
        "the cap's 4th"
    );
    assert_eq!(held(&w).await, 4);
    assert_eq!(
        fresh(&w, "s1", "k4=", &limits(4)).await,
        429,
        "full before the repair"
    );
    let report = reconcile(&w).await;
    assert_eq!(total(&counters(&w).await), 4, "{report:?}");
    assert_eq!(
        fresh(&w, "s1", "k5=", &limits(4)).await,
        429,
        "a 5th connection admitted after the repair (cap {CAP}): counters {:?}",
        counters(&w).await
    );
    let again = reconcile(&w).await;
    assert_eq!(again.tenants[0].outcome, Outcome::Consistent, "{again:?}");
}

/// `ADD itemCount :v` on counter `key`, as a lost or misdirected update leaves it.
async fn add(w: &World, key: String, v: i64) {
    let deps = w.deps();
    deps.dynamo
        .update_item()
        .table_name(&deps.tables.counters)
        .key("key", aws_sdk_dynamodb::types::AttributeValue::S(key))
        .update_expression("ADD itemCount :v")
        .expression_attribute_values(
            ":v",
            aws_sdk_dynamodb::types::AttributeValue::N(v.to_string()),
        )
        .send()
        .await
        .unwrap();
}
