//! Releases exactly once when DynamoDB's answers are lost (decision 2206): the
//! SDK's retry of a write that applied must not be taken for "someone else released it", and a
//! sweeper stopped before or after its one transaction must still release once when the stream
//! record comes again. Faults from `turnstile-faultproxy` (decision 0900).

use std::time::Duration;

use aws_lambda_events::dynamodb::Event;
use serde_json::json;
use shared::dynamo::local_client;
use shared::tenant::Limits;
use turnstile_faultproxy::{FaultProxy, Policy};

use crate::ws_support::*;

const T: &str = "tenant-once";

fn limits() -> Limits {
    Limits::example(1_000, 1_000, 10, 10, 300, 600)
}

/// A world whose client goes through a fault proxy (the functions' states are unchanged: each
/// call gets the client through `w.deps()`).
async fn proxied_world() -> (World, FaultProxy) {
    let mut w = World::new().await;
    let proxy = FaultProxy::start(&w.env.endpoint)
        .await
        .expect("proxy starts");
    w.env.deps.dynamo = local_client(&proxy.url(), Some(&w.env.counter));
    (w, proxy)
}

/// The TTL record of `s` holding `ids`, deleted well after any reconcile.
fn expiry(w: &World, s: &str, ids: &[String], charges: serde_json::Value) -> Event {
    let mut record = sample("ttl-sweeper/ttl-expiry.json")["Records"][0].clone();
    record["eventID"] = json!(format!("ttl-{s}"));
    let later = shared::clock::Clock::now(&w.env.clock).as_secs() + 600;
    record["dynamodb"]["ApproximateCreationDateTime"] = json!(later);
    let mut image = json!({
        "tenantId": {"S": T}, "sessionId": {"S": s}, "sessionTTL": {"N": "1"},
        "connectionIds": {"SS": ids}
    });
    for (k, v) in charges.as_object().unwrap() {
        image[k] = v.clone();
    }
    record["dynamodb"]["OldImage"] = image;
    typed(json!({ "Records": [record] }))
}

/// The tenant's session count (decision 2204).
fn sessions_key() -> String {
    format!("{T}:sessions")
}

/// Two connections in `s1`, as the stream's old image would show them after a TTL deletion.
async fn two_open(w: &World) -> (Vec<String>, serde_json::Value) {
    w.put_tenant(T, limits()).await;
    w.put_session(T, "s1").await;
    for c in ["a=", "b="] {
        assert_eq!(w.connect(T, "s1", c, &limits()).await.status_code, 200);
    }
    assert_eq!(w.count(T).await, Some(2));
    assert_eq!(w.count(&sessions_key()).await, Some(1));
    let ids = vec!["a=".to_string(), "b=".to_string()];
    let charges = json!({"chg:a=": {"N": "-1"}, "chg:b=": {"N": "-1"}});
    (ids, charges)
}

/// The sweep's write applied but its answer was lost: the SDK sent it again. On main the
/// tombstone's `PutItem` retried into "already swept" and the count kept both units; the sweep
/// (tombstone and decrement in one transaction with a request token) is answered as applied
/// and the count falls by exactly 2, and a later delivery of the record releases nothing.
#[tokio::test]
async fn a_sweep_whose_answer_is_lost_releases_exactly_once() {
    let (w, proxy) = proxied_world().await;
    let (ids, charges) = two_open(&w).await;
    let ev = expiry(&w, "s1", &ids, charges);
    proxy.set_policy(Policy::lose_answers(1).only(["PutItem", "TransactWriteItems"]));
    let r = ttl_sweeper::handle(w.deps(), &w.sweeper, ev.clone()).await;
    assert_eq!(proxy.stats().answers_lost, 1);
    proxy.set_policy(Policy::passthrough());
    assert_eq!(w.count(T).await, Some(0), "released once ({r:?})");
    assert_eq!(
        w.count(&sessions_key()).await,
        Some(0),
        "session given back"
    );
    let again = ttl_sweeper::handle(w.deps(), &w.sweeper, ev).await;
    assert!(again.batch_item_failures.is_empty());
    assert_eq!(w.count(T).await, Some(0), "and never twice");
    assert_eq!(w.count(&sessions_key()).await, Some(0));
}

/// Beside [`two_open`]'s `s1`, session `s2` holds one connection, so the tenant's connection count
/// (3) and session count (2) keep a unit after `s1` is swept: a release or give-back done twice
/// shows instead of stopping at the counters' floor of zero.
async fn two_open_and_one_held(w: &World) -> (Vec<String>, serde_json::Value) {
    let (ids, charges) = two_open(w).await;
    w.put_session(T, "s2").await;
    assert_eq!(w.connect(T, "s2", "c=", &limits()).await.status_code, 200);
    assert_eq!(w.count(T).await, Some(3));
    assert_eq!(w.count(&sessions_key()).await, Some(2));
    (ids, charges)
}

/// The sweeper stops (its future dropped: a crash or a timeout) while its one transaction is
/// held before DynamoDB, then the record is delivered twice more. Nothing of the sweep may land
/// before that transaction: a tombstone written ahead of it (a separate `PutItem`, as before
/// decision 2206) would make the redelivery "already swept" and the units would never be
/// released. The redelivery releases `s1`'s two connections and its session unit, and the third
/// delivery nothing more.
#[tokio::test]
async fn a_sweeper_stopped_before_its_transaction_lands_releases_once_on_redelivery() {
    let (w, proxy) = proxied_world().await;
    let (ids, charges) = two_open_and_one_held(&w).await;
    let ev = expiry(&w, "s1", &ids, charges);
    // Held, never forwarded: any write carrying a decrement. A lone `PutItem` passes.
    proxy.set_policy(Policy::stall().only(["UpdateItem", "TransactWriteItems"]));
    proxy.reset_stats();
    let first = tokio::time::timeout(
        Duration::from_millis(1_500),
        ttl_sweeper::handle(w.deps(), &w.sweeper, ev.clone()),
    )
    .await;
    assert!(first.is_err(), "stopped mid-sweep");
    let held = proxy.stats();
    assert!(
        held.stalled >= 1 && held.stalled == held.transactions,
        "stopped at its transaction ({held:?})"
    );
    proxy.set_policy(Policy::passthrough());
    assert_eq!(w.count(T).await, Some(3), "nothing landed before the stop");
    let again = ttl_sweeper::handle(w.deps(), &w.sweeper, ev.clone()).await;
    assert!(again.batch_item_failures.is_empty(), "{again:?}");
    assert_eq!(w.count(T).await, Some(1), "released by the redelivery");
    assert_eq!(
        w.count(&sessions_key()).await,
        Some(1),
        "session given back by the redelivery"
    );
    let third = ttl_sweeper::handle(w.deps(), &w.sweeper, ev).await;
    assert!(third.batch_item_failures.is_empty());
    assert_eq!(w.count(T).await, Some(1), "exactly once");
    assert_eq!(w.count(&sessions_key()).await, Some(1), "exactly once");
}

/// The sweep's transaction applied (the tombstone, both connections' decrement and the session
/// count's give-back), but every answer to it was lost, so the sweeper never learned it and the
/// record is delivered twice more. The redeliveries, within the request token's 10 minutes, are
/// answered as committed and apply nothing: `s1`'s session unit is given back exactly once (a
/// give-back sent on its own after the transaction would be sent again by each redelivery) and
/// its connections released once.
#[tokio::test]
async fn a_sweep_applied_but_never_acknowledged_gives_the_session_back_once_over_redeliveries() {
    let (w, proxy) = proxied_world().await;
    let (ids, charges) = two_open_and_one_held(&w).await;
    let ev = expiry(&w, "s1", &ids, charges);
    proxy.set_policy(Policy::lose_answers(u64::MAX).only(["TransactWriteItems"]));
    proxy.reset_stats();
    let first = ttl_sweeper::handle(w.deps(), &w.sweeper, ev.clone()).await;
    let lost = proxy.stats();
    proxy.set_policy(Policy::passthrough());
    assert!(
        !first.batch_item_failures.is_empty(),
        "the sweeper never learned its sweep applied ({lost:?})"
    );
    assert!(lost.answers_lost >= 1, "{lost:?}");
    assert_eq!(w.count(T).await, Some(1), "the transaction applied");
    for _ in 0..2 {
        let again = ttl_sweeper::handle(w.deps(), &w.sweeper, ev.clone()).await;
        assert!(again.batch_item_failures.is_empty(), "{again:?}");
    }
    assert_eq!(
        w.count(&sessions_key()).await,
        Some(1),
        "s1 given back exactly once, s2 held"
    );
    assert_eq!(w.count(T).await, Some(1), "connections released once");
}

/// `$disconnect`'s session write applied but its answer was lost, and the SDK sent it again. On
/// main the retry's old image no longer held the id ("already released") and nothing was
/// decremented; now the retry recognises its own earlier attempt (its request token on the
/// connection's charge record) and the count falls by exactly one.
#[tokio::test]
async fn a_disconnect_whose_session_answer_is_lost_releases_exactly_once() {
    let (w, proxy) = proxied_world().await;
    two_open(&w).await;
    proxy.set_policy(Policy::lose_answers(1).only(["UpdateItem"]));
    let r = w.disconnect(T, "s1", "a=").await;
    assert_eq!(proxy.stats().answers_lost, 1);
    proxy.set_policy(Policy::passthrough());
    assert_eq!(r.status_code, 200);
    assert_eq!(w.count(T).await, Some(1), "released once");
    let session = w.session(T, "s1").await.unwrap();
    assert_eq!(session.connection_ids, ["b="]);
    // A duplicate `$disconnect` releases nothing more; the other connection still releases.
    assert_eq!(w.disconnect(T, "s1", "a=").await.status_code, 200);
    assert_eq!(w.count(T).await, Some(1));
    assert_eq!(w.disconnect(T, "s1", "b=").await.status_code, 200);
    assert_eq!(w.count(T).await, Some(0));
}

/// [`two_open`], and `s2` holding two more, joined out of sorted order (a condition on the set
/// must compare sets, not lists).
async fn four_open(w: &World) {
    two_open(w).await;
    w.put_session(T, "s2").await;
    for c in ["d=", "c="] {
        assert_eq!(w.connect(T, "s2", c, &limits()).await.status_code, 200);
    }
    assert_eq!(w.count(T).await, Some(4));
}

/// `DELETE /session` on `s1`, through the session API: (status, body).
async fn delete_session(w: &World, s: &str) -> (i64, String) {
    w.session_call("DELETE", &[("tenantId", T), ("sessionId", s)], None)
        .await
}

/// What one clean call of `f` cost: (calls by operation, write units).
async fn cost<F: std::future::Future>(
    w: &World,
    f: F,
) -> (F::Output, std::collections::BTreeMap<String, u64>, f64) {
    w.env.counter.reset();
    let out = f.await;
    (
        out,
        w.env.counter.by_operation(),
        w.env.counter.units().write,
    )
}

/// Session `DELETE` whose deleting write applied but whose answer was lost, so the SDK sent it
/// again. Before, it was one `DeleteItem` returning `ALL_OLD`: the retry found nothing, the
/// caller was told 404, and neither the two connections nor the session's unit were released
/// (at most once; the reconciler repaired it later). Now the row leaves in a transaction with a
/// request token whose retry is answered as committed: the release is exactly once, with no
/// reconciler run. A clean `DELETE` of another session (same shape) is measured for the budget.
#[tokio::test]
async fn a_session_delete_whose_answer_is_lost_releases_exactly_once() {
    let (w, proxy) = proxied_world().await;
    four_open(&w).await;
    assert_eq!(w.count(&sessions_key()).await, Some(2));

    let ((status, body), ops, wcu) = cost(&w, delete_session(&w, "s2")).await;
    eprintln!("RELEASE_ONCE clean DELETE of a session with 2 connections: {ops:?}, {wcu} WCU");
    assert_eq!(status, 200, "{body}");
    assert_eq!(
        (w.count(T).await, w.count(&sessions_key()).await),
        (Some(2), Some(1))
    );

    proxy.set_policy(Policy::lose_answers(1).only(["DeleteItem", "TransactWriteItems"]));
    let (status, body) = delete_session(&w, "s1").await;
    assert_eq!(proxy.stats().answers_lost, 1);
    proxy.set_policy(Policy::passthrough());
    assert_eq!(
        (status, w.count(T).await, w.count(&sessions_key()).await),
        (200, Some(0), Some(0)),
        "the DELETE answered, its connections and its session released once ({body})"
    );
    assert!(w.session(T, "s1").await.is_none());
    assert_eq!(
        w.closed(),
        ["a=", "b=", "c=", "d="],
        "every connection closed"
    );
    // A second DELETE is a 404 and releases nothing more.
    assert_eq!(delete_session(&w, "s1").await.0, 404);
    assert_eq!(
        (w.count(T).await, w.count(&sessions_key()).await),
        (Some(0), Some(0))
    );
}

/// `PUT /session` over an expired row whose replacing write applied but whose answer was lost.
/// Before, it was one `PutItem` (`ALL_OLD`) conditioned on the old TTL: the retry failed that
/// condition, the PUT refreshed its own new row, and the expired row's two connections were
/// neither closed nor released (the reconciler repaired it later). Now the replacement is a
/// transaction with a request token: the retry is answered as committed and the stale
/// connections are closed and released exactly once. A clean replacement is measured.
#[tokio::test]
async fn a_put_over_an_expired_session_whose_answer_is_lost_releases_exactly_once() {
    let (w, proxy) = proxied_world().await;
    four_open(&w).await;
    w.env
        .clock
        .advance(Duration::from_secs(limits().session_ttl + 5));

    let ((status, body), ops, wcu) = cost(
        &w,
        w.session_call("PUT", &[("tenantId", T), ("sessionId", "s2")], None),
    )
    .await;
    eprintln!(
        "RELEASE_ONCE clean PUT over an expired session with 2 connections: {ops:?}, {wcu} WCU"
    );
    assert_eq!(status, 200, "{body}");
    assert_eq!(w.count(T).await, Some(2), "s2's stale connections released");

    proxy.set_policy(Policy::lose_answers(1).only(["PutItem", "TransactWriteItems"]));
    let (status, body) = w
        .session_call("PUT", &[("tenantId", T), ("sessionId", "s1")], None)
        .await;
    assert_eq!(proxy.stats().answers_lost, 1);
    proxy.set_policy(Policy::passthrough());
    assert_eq!(status, 200, "{body}");
    assert_eq!(
        w.count(T).await,
        Some(0),
        "the expired row's connections released once ({body})"
    );
    assert_eq!(
        w.count(&sessions_key()).await,
        Some(2),
        "one session replaced another"
    );
    let fresh = w.session(T, "s1").await.unwrap();
    assert!(fresh.connection_ids.is_empty());
    assert_eq!(
        w.closed(),
        ["a=", "b=", "c=", "d="],
        "every stale connection closed"
    );
    // The fresh row admits again, counted once.
    assert_eq!(w.connect(T, "s1", "e=", &limits()).await.status_code, 200);
    assert_eq!(w.count(T).await, Some(1));
}

/// `$default`'s pruning: a sender over its session's `messagesPerMinute` whose refusal, posted
/// back, answers 410 is taken out of its session and released (`release::one_from_session`, as
/// `$disconnect`). Its session write applied but lost its answer and the SDK sent it again: the
/// retry recognises its own token and the count falls by exactly one; a late `$disconnect`
/// releases nothing more.
#[tokio::test]
async fn a_pruned_sender_whose_session_answer_is_lost_releases_exactly_once() {
    let (w, proxy) = proxied_world().await;
    // One message a minute per session.
    let lim = Limits::example(1_000, 1_000, 10, 10, 300, 1);
    w.put_tenant(T, lim).await;
    w.put_session(T, "s1").await;
    for c in ["a=", "b="] {
        assert_eq!(w.connect(T, "s1", c, &lim).await.status_code, 200);
    }
    assert_eq!(w.send(T, "s1", "a=", &lim, "first").await.status_code, 200);
    w.recorder.mark_gone("a=");
    // The message's own write passes (refused: over the limit); the pruning's session write
    // applies and loses its answer.
    proxy.set_policy(Policy::lose_answers(1).after(1).only(["UpdateItem"]));
    w.env.counter.reset();
    let r = w.send(T, "s1", "a=", &lim, "second").await;
    let ops = w.env.counter.by_operation();
    assert_eq!(proxy.stats().answers_lost, 1);
    proxy.set_policy(Policy::passthrough());
    eprintln!("RELEASE_ONCE refused message, gone sender pruned, one answer lost: {ops:?}");
    assert_eq!(r.status_code, 429);
    assert_eq!(w.count(T).await, Some(1), "the sender released once");
    assert_eq!(w.session(T, "s1").await.unwrap().connection_ids, ["b="]);
    assert_eq!(w.disconnect(T, "s1", "a=").await.status_code, 200);
    assert_eq!(w.count(T).await, Some(1), "and never twice");
}

/// The reconciler's stale release (an id gone on two probes a grace apart) goes through
/// `release::one_from_session` too. Its session write applied but lost its answer: the id is
/// released exactly once by the run itself — the count it reads after its releases is already
/// the truth, so there is nothing left to repair (a release skipped on the retry would show as
/// `counted` 2 and a repair 2 → 1).
#[tokio::test]
async fn a_reconciler_stale_release_whose_session_answer_is_lost_releases_exactly_once() {
    use shared::reconcile::{Outcome, Pause};
    let (w, proxy) = proxied_world().await;
    two_open(&w).await;
    w.recorder.mark_gone("a=");
    let t = shared::ids::TenantId::parse(T).unwrap();
    let grace = Duration::from_millis(50);
    let report = reconcile_tenant_paced(w.deps(), &t, &w.api.url(), false, grace, |p| {
        if p == Pause::AfterProbe {
            // The next single-item write is the release's session write.
            proxy.set_policy(Policy::lose_answers(1).only(["UpdateItem"]));
        }
        // Nothing else is in flight: the pause need not wait out the grace.
        tokio::time::sleep(Duration::ZERO)
    })
    .await;
    assert_eq!(proxy.stats().answers_lost, 1);
    proxy.set_policy(Policy::passthrough());
    let r = &report.tenants[0];
    eprintln!("{}", serde_json::to_string(&report).unwrap());
    assert_eq!(r.stale_released, ["a="]);
    assert_eq!(
        (r.counted, r.truth, &r.outcome),
        (Some(1), 1, &Outcome::Consistent),
        "released once by the run, nothing to repair"
    );
    assert_eq!(w.count(T).await, Some(1));
    assert_eq!(w.session(T, "s1").await.unwrap().connection_ids, ["b="]);
    assert_eq!(w.disconnect(T, "s1", "a=").await.status_code, 200);
    assert_eq!(w.count(T).await, Some(1), "and never twice");
}
