//! Sockets stay counted until they are known gone (decision 2208): session `DELETE`, `PUT` over an
//! expired session and the TTL sweeper close first and release only what is known gone; whatever
//! is not stays in its session row, where the reconciler's truth counts it. Before, the row left
//! first: a failed close, a crash after the commit, or a 410 from a socket still inside its
//! `$connect` left an open socket in no session, which the reconciler then counted out (the tenant
//! ran at cap + k).

use std::time::Duration;

use shared::interleave::{Interleave, Point};
use shared::reconcile::Outcome;
use shared::tenant::Limits;

use crate::ws_support::*;

const T: &str = "tenant-closing";

/// tenantConnections 3.
fn limits() -> Limits {
    Limits::example(600, 600, 5, 3, 300, 600)
}

/// A Management API nobody answers (closes fail: the sockets stay open).
const UNREACHABLE: &str = "http://127.0.0.1:9/stage";

/// One reconciler run over the tenant, probing the World's Management API (the sockets' truth).
async fn reconcile(w: &World) -> shared::reconcile::TenantReport {
    let report = reconcile_tenant(
        w.deps(),
        &T.parse().unwrap(),
        &w.api.url(),
        false,
        Duration::from_millis(20),
    )
    .await;
    report.tenants[0].clone()
}

/// `s1` holding `a`, `b` and `c`: the tenant is full.
async fn full(w: &World) {
    w.put_tenant(T, limits()).await;
    w.put_session(T, "s1").await;
    for c in ["a", "b", "c"] {
        assert_eq!(w.connect(T, "s1", c, &limits()).await.status_code, 200);
    }
    assert_eq!(w.count(T).await, Some(3));
}

/// The tenant is still full: a connect to another session is refused.
async fn assert_full(w: &World, why: &str) {
    w.put_session(T, "other").await;
    let r = w.connect(T, "other", "late", &limits()).await;
    assert_eq!(r.status_code, 429, "{why}: {:?}", r.body);
}

/// Session `DELETE` whose closes all fail: the three sockets are still open. The reconciler must
/// not count them out.
#[tokio::test]
async fn a_delete_whose_closes_failed_keeps_its_sockets_counted() {
    let w = World::new().await;
    full(&w).await;
    let broken =
        session_api::init(&w.function_deps(&[(shared::gateway::ENDPOINT_VAR, UNREACHABLE)]))
            .await
            .unwrap();
    let ev = session_event(
        "DELETE",
        "/session",
        &[("tenantId", T), ("sessionId", "s1")],
        None,
    );
    let r = session_api::handle(w.deps(), &broken, ev).await.unwrap();
    assert_eq!(r.status_code, 200, "{:?}", r.body);
    let report = reconcile(&w).await;
    assert_eq!(
        w.count(T).await,
        Some(3),
        "three sockets are open: the reconciler must not count them out ({report:?})"
    );
    assert_full(&w, "three sockets are open").await;
    // The ended row keeps them (no TTL: DynamoDB never deletes it while it counts sockets); the
    // reconciler closed the three it found open, and their $disconnects release them.
    assert_eq!(report.ended_closed, 3, "{report:?}");
    assert_eq!(w.closed(), ["a", "b", "c"]);
    assert_eq!(
        w.count(&format!("{T}:sessions")).await,
        Some(1),
        "`other`'s"
    );
    for c in ["a", "b", "c"] {
        assert_eq!(w.disconnect(T, "s1", c).await.status_code, 200);
    }
    assert_eq!(w.count(T).await, Some(0));
    // The next run deletes the ended row, empty now.
    let report = reconcile(&w).await;
    assert_eq!(report.ended_deleted, 1, "{report:?}");
    assert!(w.session(T, "s1").await.is_none());
    assert_eq!(report.outcome, Outcome::Consistent);
}

/// Session `DELETE` while `b` is still inside its `$connect` (its close answers 410), whose
/// handshake then completes: `b` is an open socket, and must stay counted.
#[tokio::test]
async fn a_socket_inside_its_connect_during_a_delete_stays_counted() {
    let w = World::new().await;
    full(&w).await;
    w.recorder.mark_gone("b");
    let (status, body) = w
        .session_call("DELETE", &[("tenantId", T), ("sessionId", "s1")], None)
        .await;
    assert_eq!(status, 200, "{body}");
    // `b`'s handshake completes: it is live.
    w.recorder.mark_live("b");
    // API Gateway's $disconnects for the two it closed.
    for c in ["a", "c"] {
        assert_eq!(w.disconnect(T, "s1", c).await.status_code, 200);
    }
    let report = reconcile(&w).await;
    assert_eq!(w.count(T).await, Some(1), "b is open: counted ({report:?})");
    assert_ne!(
        report.outcome,
        Outcome::Repaired { from: 1, to: 0 },
        "b counted out while open"
    );
    // The reconciler closed `b`, open in an ended session; its $disconnect releases it.
    assert_eq!(report.ended_closed, 1, "{report:?}");
    assert_eq!(w.disconnect(T, "s1", "b").await.status_code, 200);
    assert_eq!(w.count(T).await, Some(0));
}

/// The same 410 from a socket whose row's last join is older than the grace: no `$connect` is
/// still running, so the socket is gone, released with the rest, and the row deleted at once.
#[tokio::test]
async fn a_410_a_grace_after_the_last_join_is_gone() {
    let w = World::new().await;
    full(&w).await;
    w.env.clock.advance(shared::admission::closing::MIN_GRACE);
    w.recorder.mark_gone("b");
    let (status, body) = w
        .session_call("DELETE", &[("tenantId", T), ("sessionId", "s1")], None)
        .await;
    assert_eq!(status, 200, "{body}");
    let body: serde_json::Value = serde_json::from_str(&body).unwrap();
    assert_eq!(body["closed"], serde_json::json!(["a", "b", "c"]));
    assert_eq!(body["closing"], serde_json::json!([]));
    assert_eq!(w.count(T).await, Some(0));
    assert!(w.session(T, "s1").await.is_none());
}

/// `PUT` over an expired session whose stale sockets cannot be closed: they are open, so they stay
/// counted (in the expired row), and the reconciler must not count them out.
#[tokio::test]
async fn a_put_over_an_expired_session_whose_closes_failed_keeps_its_sockets_counted() {
    let w = World::new().await;
    full(&w).await;
    w.env
        .clock
        .advance(Duration::from_secs(limits().session_ttl + 5));
    let broken =
        session_api::init(&w.function_deps(&[(shared::gateway::ENDPOINT_VAR, UNREACHABLE)]))
            .await
            .unwrap();
    let ev = session_event(
        "PUT",
        "/session",
        &[("tenantId", T), ("sessionId", "s1")],
        None,
    );
    let r = session_api::handle(w.deps(), &broken, ev).await.unwrap();
    let report = reconcile(&w).await;
    assert_eq!(
        w.count(T).await,
        Some(3),
        "three stale sockets are open: counted (PUT answered {} {:?}; {report:?})",
        r.status_code,
        r.body
    );
    assert_eq!(r.status_code, 503, "{:?}", r.body);
    assert_eq!(r.headers["retry-after"], "15");
    // With the Management API back, the PUT closes them, and replaces the row with their release.
    let s = w.put_session(T, "s1").await;
    assert_eq!(s["connectionIds"], serde_json::json!([]));
    assert_eq!(w.closed(), ["a", "b", "c"]);
    assert_eq!(w.count(T).await, Some(0));
    assert_eq!(
        w.count(&format!("{T}:sessions")).await,
        Some(1),
        "one replaced another"
    );
}

/// The TTL sweeper whose closes fail: the sockets of the deleted row are open, so nothing may be
/// released; the record comes again.
#[tokio::test]
async fn a_sweep_whose_closes_failed_releases_nothing() {
    let w = World::new().await;
    full(&w).await;
    let broken =
        ttl_sweeper::init(&w.function_deps(&[(shared::gateway::ENDPOINT_VAR, UNREACHABLE)]))
            .await
            .unwrap();
    let row = w.session(T, "s1").await.unwrap();
    let ids: Vec<&str> = row.connection_ids.iter().map(String::as_str).collect();
    let ev = typed(serde_json::json!({ "Records": [ttl_record(T, "s1", &ids, "1")] }));
    let r = ttl_sweeper::handle(w.deps(), &broken, ev).await;
    assert_eq!(r.batch_item_failures.len(), 1, "the record comes again");
    assert_eq!(
        w.count(T).await,
        Some(3),
        "three sockets are open: nothing released"
    );
    // Delivered again with the Management API back: closed, then released once.
    let ev = typed(serde_json::json!({ "Records": [ttl_record(T, "s1", &ids, "1")] }));
    let r = ttl_sweeper::handle(w.deps(), &w.sweeper, ev).await;
    assert!(r.batch_item_failures.is_empty(), "{r:?}");
    assert_eq!(w.closed(), ["a", "b", "c"]);
    assert_eq!(w.count(T).await, Some(0));
    assert_eq!(w.count(&format!("{T}:sessions")).await, Some(0));
}

/// An interleave that stops whatever reaches `at`: its future never finishes, and the test drops
/// it (a crash, or Lambda's timeout, at that point).
fn stop_at(at: Point) -> Interleave {
    Interleave::with(move |p| {
        if p == at {
            Box::pin(futures::future::pending())
        } else {
            Box::pin(async {})
        }
    })
}

/// Runs `DELETE /session` on `s1` through `w.session_api`, stopped by its interleave.
async fn delete_stopped(w: &World) {
    let call = w.session_call("DELETE", &[("tenantId", T), ("sessionId", "s1")], None);
    let stopped = tokio::time::timeout(Duration::from_millis(500), call).await;
    assert!(stopped.is_err(), "the DELETE was stopped: {stopped:?}");
}

/// A `DELETE` stopped once the row is ended, before any close: the three sockets are open and
/// stay counted (the reconciler does not count them out), the session is gone for every path, and
/// its unit was given back with the end. The reconciler then closes them; their `$disconnect`s
/// release them; the next run deletes the empty row.
#[tokio::test]
async fn a_delete_stopped_after_ending_the_row_keeps_its_sockets_counted() {
    let mut w = World::new().await;
    full(&w).await;
    w.session_api.connections.interleave = stop_at(Point::EndAfterMark);
    delete_stopped(&w).await;
    w.session_api.connections.interleave = Interleave::none();
    assert!(w.closed().is_empty(), "nothing closed yet");
    assert_eq!(
        w.count(&format!("{T}:sessions")).await,
        Some(0),
        "given back with the end"
    );
    let (status, _) = w
        .session_call("GET", &[("tenantId", T), ("sessionId", "s1")], None)
        .await;
    assert_eq!(status, 404, "an ended session is gone for the API");
    assert_ne!(
        w.connect(T, "s1", "d", &limits()).await.status_code,
        200,
        "and joins nothing"
    );
    let report = reconcile(&w).await;
    assert_eq!(w.count(T).await, Some(3), "{report:?}");
    assert_eq!(report.sessions_truth, 0, "an ended row is no session");
    assert_eq!(report.ended_closed, 3);
    assert_full(&w, "three sockets were open at the read").await;
    for c in ["a", "b", "c"] {
        w.disconnect(T, "s1", c).await;
    }
    assert_eq!(w.count(T).await, Some(0));
    let report = reconcile(&w).await;
    assert_eq!(report.ended_deleted, 1, "{report:?}");
    assert!(w.session(T, "s1").await.is_none());
}

/// A `DELETE` stopped after its closes, before its release, whose sockets' `$disconnect`s never
/// come: they stay counted until the reconciler finds them gone (twice, a grace apart), which
/// releases them and deletes the empty row in one run; a retried `DELETE` would have too.
#[tokio::test]
async fn a_delete_stopped_after_its_closes_is_finished_by_the_reconciler() {
    let mut w = World::new().await;
    full(&w).await;
    w.session_api.connections.interleave = stop_at(Point::EndAfterClose);
    delete_stopped(&w).await;
    w.session_api.connections.interleave = Interleave::none();
    assert_eq!(w.closed(), ["a", "b", "c"]);
    assert_eq!(w.count(T).await, Some(3), "closed, not released yet");
    let report = reconcile(&w).await;
    assert_eq!(report.stale_released, ["a", "b", "c"], "{report:?}");
    assert_eq!(report.ended_deleted, 1, "{report:?}");
    assert_eq!(w.count(T).await, Some(0));
    assert!(w.session(T, "s1").await.is_none());
    // A DELETE now finds nothing.
    let (status, _) = w
        .session_call("DELETE", &[("tenantId", T), ("sessionId", "s1")], None)
        .await;
    assert_eq!(status, 404);
}

/// A `DELETE` stopped after ending the row, then retried by its client: the retry closes and
/// releases every socket and deletes the row; the session unit, given back by the first call's
/// end, is not given back twice (another session holds one, so a double give-back would show).
#[tokio::test]
async fn a_retried_delete_finishes_what_a_stopped_one_began() {
    let mut w = World::new().await;
    full(&w).await;
    w.put_session(T, "other").await;
    assert_eq!(w.count(&format!("{T}:sessions")).await, Some(2));
    w.session_api.connections.interleave = stop_at(Point::EndAfterMark);
    delete_stopped(&w).await;
    w.session_api.connections.interleave = Interleave::none();
    let (status, body) = w
        .session_call("DELETE", &[("tenantId", T), ("sessionId", "s1")], None)
        .await;
    assert_eq!(status, 200, "{body}");
    assert_eq!(w.count(T).await, Some(0));
    assert_eq!(w.count(&format!("{T}:sessions")).await, Some(1));
    assert!(w.session(T, "s1").await.is_none());
}

/// The sweeper stopped after its closes, before its release: the redelivered record closes again
/// (410s now, a grace after the row's last join: gone) and releases once.
#[tokio::test]
async fn a_sweep_stopped_after_its_closes_releases_once_on_redelivery() {
    let mut w = World::new().await;
    full(&w).await;
    let ids = ["a", "b", "c"];
    let ev = || typed(serde_json::json!({ "Records": [ttl_record(T, "s1", &ids, "7")] }));
    w.sweeper.connections.interleave = stop_at(Point::SweepAfterClose);
    let stopped = tokio::time::timeout(
        Duration::from_millis(500),
        ttl_sweeper::handle(w.deps(), &w.sweeper, ev()),
    )
    .await;
    assert!(stopped.is_err());
    w.sweeper.connections.interleave = Interleave::none();
    assert_eq!(w.count(T).await, Some(3), "closed, nothing released");
    for _ in 0..2 {
        let r = ttl_sweeper::handle(w.deps(), &w.sweeper, ev()).await;
        assert!(r.batch_item_failures.is_empty(), "{r:?}");
    }
    assert_eq!(w.count(T).await, Some(0), "released once");
    assert_eq!(w.count(&format!("{T}:sessions")).await, Some(0));
}

/// A user's session (decision 3602) holding `a`, `b` and `c`, and another of the same user: its
/// `DELETE` whose closes all fail gives the owner's unit back with the end, in the end's
/// transaction (the sockets stay counted in the ended row); another user reaches nothing of it;
/// a retried `DELETE` that then closes and releases them gives nothing back twice.
#[tokio::test]
async fn a_users_delete_gives_its_unit_back_with_the_end_once() {
    use shared::admission::closing;
    use shared::admission::sessions::{self, Caller, Caps, Opened};
    let w = World::new().await;
    w.put_tenant(T, limits()).await;
    let t: shared::ids::TenantId = T.parse().unwrap();
    let owner = Caller {
        subject: Some("user-1"),
        own_only: true,
    };
    let caps = Caps {
        tenant: 10,
        subject: 10,
    };
    let ttl = w.deps().clock.now().as_secs() + 600;
    for s in ["s1", "s2"] {
        let sid = shared::ids::SessionId::parse(s).unwrap();
        let none = closing::NoSockets::default();
        let opened = sessions::open_as(w.deps(), &t, &sid, ttl, caps, true, owner, &none)
            .await
            .unwrap();
        assert!(matches!(opened, Opened::Live(_)), "{opened:?}");
    }
    for c in ["a", "b", "c"] {
        assert_eq!(w.connect(T, "s1", c, &limits()).await.status_code, 200);
    }
    let subject = shared::counter::keys::subject_sessions(&t, "user-1").unwrap();
    assert_eq!(w.count(&subject).await, Some(2));
    let sid = shared::ids::SessionId::parse("s1").unwrap();
    // Another user reaches nothing: no end, no close, no unit.
    let other = closing::delete(
        w.deps(),
        &t,
        &sid,
        Some("user-2"),
        &w.session_api.connections,
    )
    .await
    .unwrap();
    assert!(other.is_none(), "{other:?}");
    assert!(w.closed().is_empty());
    let broken =
        session_api::init(&w.function_deps(&[(shared::gateway::ENDPOINT_VAR, UNREACHABLE)]))
            .await
            .unwrap();
    let ended = closing::delete(w.deps(), &t, &sid, Some("user-1"), &broken.connections)
        .await
        .unwrap()
        .unwrap();
    assert_eq!(ended.closing.len(), 3, "{ended:?}");
    assert_eq!(w.count(T).await, Some(3), "the sockets stay counted");
    assert_eq!(
        w.count(&subject).await,
        Some(1),
        "the owner's unit is given back with the end"
    );
    assert_eq!(w.count(&format!("{T}:sessions")).await, Some(1));
    // The retry closes and releases them; the units are not given back again.
    let ended = closing::delete(
        w.deps(),
        &t,
        &sid,
        Some("user-1"),
        &w.session_api.connections,
    )
    .await
    .unwrap()
    .unwrap();
    assert_eq!(ended.closed, ["a", "b", "c"], "{ended:?}");
    assert!(w.session(T, "s1").await.is_none());
    assert_eq!(w.count(T).await, Some(0));
    assert_eq!(w.count(&subject).await, Some(1), "given back once");
    assert_eq!(w.count(&format!("{T}:sessions")).await, Some(1));
}
