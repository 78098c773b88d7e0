//! `$default`: one UpdateItem per message, echo + forward through the real Management API client,
//! messagesPerMinute with an error frame, gone recipients reported but not released, and closing on a dead session.

use std::time::Duration;

use serde_json::Value;
use shared::tenant::Limits;

use crate::ws_support::*;

const T: &str = "tenant-1";

#[tokio::test]
async fn a_message_is_echoed_and_forwarded_in_one_call_and_refreshes_the_ttl() {
    let w = World::new().await;
    w.put_tenant(T, SMALL).await;
    w.put_session(T, "s1").await;
    w.put_session(T, "s2").await;
    assert_eq!(w.connect(T, "s1", "alice", &SMALL).await.status_code, 200);
    assert_eq!(w.connect(T, "s1", "bob", &SMALL).await.status_code, 200);
    assert_eq!(w.connect(T, "s2", "carol", &SMALL).await.status_code, 200);
    w.env.clock.advance(Duration::from_secs(100));
    let now = shared::clock::Clock::now(&w.env.clock).as_secs();
    w.api.clear();
    w.env.counter.reset();
    let r = w.send(T, "s1", "alice", &SMALL, "hello").await;
    assert_eq!(r.status_code, 200, "{:?}", r.body);
    // First message of the minute in this process: the guess (new minute) is right; the tenant
    // row is read once (a cold cache).
    assert_eq!(
        w.env.counter.total(),
        2,
        "{:?}",
        w.env.counter.by_operation()
    );
    let posts = w.api.received_by("POST");
    assert_eq!(posts.len(), 2, "one post per recipient: {posts:?}");
    let to = |c: &str| {
        posts
            .iter()
            .find(|p| p.connection_id == c)
            .unwrap()
            .body_str()
            .to_string()
    };
    assert_eq!(to("alice"), "hello");
    let fwd: Value = serde_json::from_str(&to("bob")).unwrap();
    assert_eq!(fwd["from"], "alice");
    assert_eq!(fwd["message"], "hello");
    assert!(
        posts.iter().all(|p| p.connection_id != "carol"),
        "other sessions get nothing"
    );
    assert_eq!(w.session(T, "s1").await.unwrap().session_ttl, now + 200);

    // Same minute, warm hint and tenant cache: one call.
    w.env.counter.reset();
    assert_eq!(w.send(T, "s1", "bob", &SMALL, "hi").await.status_code, 200);
    assert_eq!(w.env.counter.total(), 1);
}

#[tokio::test]
async fn messages_per_minute_is_exact_and_the_refusal_is_a_frame_with_retry_time() {
    let w = World::new().await;
    let limits = Limits::example(60, 5, 5, 10, 200, 3);
    w.put_tenant(T, limits).await;
    w.put_session(T, "s1").await;
    assert_eq!(w.connect(T, "s1", "a", &limits).await.status_code, 200);
    assert_eq!(w.connect(T, "s1", "b", &limits).await.status_code, 200);
    let start =
        shared::counter::window::MinuteWindow::at(shared::clock::Clock::now(&w.env.clock)).start;
    w.env
        .clock
        .set(shared::clock::Timestamp::from_secs(start + 60 + 20));
    w.api.clear();
    let results = futures::future::join_all((0..10).map(|i| {
        let w = &w;
        let from = if i % 2 == 0 { "a" } else { "b" };
        async move { w.send(T, "s1", from, &limits, &format!("m{i}")).await }
    }))
    .await;
    assert_eq!(results.iter().filter(|r| r.status_code == 200).count(), 3);
    let refused: Vec<_> = results.iter().filter(|r| r.status_code == 429).collect();
    assert_eq!(refused.len(), 7);
    let frame = body_json(refused[0]);
    assert_eq!(frame["violated-policies"][0], "messagesPerMinute");
    assert_eq!(frame["retryAfter"], 40);
    // Each refused sender got the error frame over the Management API.
    let frames = w
        .api
        .received_by("POST")
        .into_iter()
        .filter(|p| p.body_str().contains("messagesPerMinute"))
        .count();
    assert_eq!(frames, 7);
    // The next minute admits again (the stored minute is older: one write).
    w.env.clock.advance(Duration::from_secs(60));
    assert_eq!(
        w.send(T, "s1", "a", &limits, "later").await.status_code,
        200
    );
}

#[tokio::test]
async fn a_wrong_minute_guess_costs_one_more_call() {
    let w = World::new().await;
    w.put_tenant(T, SMALL).await;
    w.put_session(T, "s1").await;
    assert_eq!(w.connect(T, "s1", "a", &SMALL).await.status_code, 200);
    assert_eq!(w.send(T, "s1", "a", &SMALL, "1").await.status_code, 200);
    // Another process (fresh hint, cold tenant cache: 1 GetItem) sends in the same minute: it
    // guesses "new minute", is told the stored minute is current, and increments instead.
    let other = message::init(&w.function_deps(&[])).await.unwrap();
    w.env.counter.reset();
    let ev = {
        let mut e = ws_event("message/message.json", T, "s1", "a", Some(&SMALL));
        e.body = Some("2".into());
        e
    };
    assert_eq!(
        message::handle(w.deps(), &other, ev)
            .await
            .unwrap()
            .status_code,
        200
    );
    assert_eq!(w.env.counter.total(), 3);
    let out = w
        .deps()
        .dynamo
        .get_item()
        .table_name(&w.deps().tables.sessions)
        .set_key(Some(shared::session::store::key(
            &T.parse().unwrap(),
            &"s1".parse().unwrap(),
        )))
        .send()
        .await
        .unwrap();
    assert_eq!(out.item().unwrap()["msgCount"].as_n().unwrap(), "2");
}

/// A recipient answering 410 may still be inside its own `$connect` (API Gateway answers 410 until
/// the handshake completes): one 410 releases nothing (decision 0306, review finding 1). Before the
/// fix the message pruned `b` and the count fell to 2 while `b`'s `$connect` could still answer 200:
/// a live socket counted nowhere, and the tenant's next connect admitted over its cap.
#[tokio::test]
async fn a_recipient_answering_410_is_not_released_by_a_message() {
    let w = World::new().await;
    // tenantConnections 3: a, c and the half-open b fill it.
    let limits = Limits::example(60, 60, 5, 3, 200, 60);
    w.put_tenant(T, limits).await;
    w.put_session(T, "s1").await;
    for c in ["a", "b", "c"] {
        assert_eq!(w.connect(T, "s1", c, &limits).await.status_code, 200);
    }
    // b joined its session but its handshake has not completed: the Management API answers 410.
    w.recorder.mark_gone("b");
    w.env.counter.reset();
    let r = w.send(T, "s1", "a", &limits, "x").await;
    assert_eq!(r.status_code, 200);
    assert_eq!(body_json(&r)["gone"], serde_json::json!(["b"]));
    assert_eq!(
        w.env.counter.by_operation(),
        [("GetItem".to_string(), 1), ("UpdateItem".to_string(), 1)].into(),
        "the tenant (a cold cache) and the message only: nothing released on one 410"
    );
    assert_eq!(w.count(T).await, Some(3));
    assert_eq!(
        w.session(T, "s1").await.unwrap().connection_ids,
        vec!["a", "b", "c"]
    );
    // The tenant is still full: the next connect is refused (before the fix it was admitted).
    w.put_session(T, "s2").await;
    assert_eq!(w.connect(T, "s2", "d", &limits).await.status_code, 429);
    // b's own $disconnect (or the reconciler, after two probes) releases it, exactly once.
    assert_eq!(w.disconnect(T, "s1", "b").await.status_code, 200);
    assert_eq!(w.count(T).await, Some(2));
    w.disconnect(T, "s1", "b").await;
    assert_eq!(w.count(T).await, Some(2));
}

#[tokio::test]
async fn a_message_on_a_dead_session_closes_the_connection_and_never_recreates_it() {
    let w = World::new().await;
    w.put_tenant(T, SMALL).await;
    w.put_session(T, "s1").await;
    assert_eq!(w.connect(T, "s1", "a", &SMALL).await.status_code, 200);
    // Expired but not yet deleted.
    w.env
        .clock
        .advance(Duration::from_secs(SMALL.session_ttl + 1));
    let r = w.send(T, "s1", "a", &SMALL, "late").await;
    assert_eq!(r.status_code, 410);
    assert_eq!(w.api.received_by("DELETE").len(), 1);
    assert_eq!(w.api.received_by("DELETE")[0].connection_id, "a");
    // Deleted outright: still closes, and no row appears.
    let r = w.send(T, "gone-session", "z", &SMALL, "x").await;
    assert_eq!(r.status_code, 410);
    assert!(w.session(T, "gone-session").await.is_none());
    // A connection that is no longer a member (already released) is closed too.
    w.env.clock.advance(Duration::from_secs(0));
    w.put_session(T, "s2").await;
    let r = w.send(T, "s2", "stranger", &SMALL, "x").await;
    assert_eq!(r.status_code, 410);
}

#[tokio::test]
async fn the_sample_message_event_runs_as_is() {
    let w = World::new().await;
    w.put_tenant("tenant-1", SMALL).await;
    w.put_sample_session().await;
    let r = connect::handle(w.deps(), &w.connect, typed(sample("connect/connect.json")))
        .await
        .unwrap();
    assert_eq!(r.status_code, 200);
    let r = message::handle(w.deps(), &w.message, typed(sample("message/message.json")))
        .await
        .unwrap();
    assert_eq!(r.status_code, 200);
    let posts = w.api.received_by("POST");
    assert_eq!(posts.len(), 1);
    assert_eq!(posts[0].connection_id, "Nx0MPcOFvHcCIhw=");
    assert_eq!(posts[0].body_str(), r#"{"action":"say","text":"hello"}"#);
}

/// The local Management API speaks API Gateway's wire format to the real SDK client: POST, GET and
/// DELETE, ids needing percent-encoding, a stage prefix, and GoneException for gone connections.
#[tokio::test]
async fn the_local_management_api_answers_the_real_sdk_client() {
    let w = World::new().await;
    let gw = shared::gateway::Gateway::local(&format!("{}/production", w.api.url()));
    let ep = gw.fixed_endpoint().unwrap();
    let id = "Ab+/c=";
    assert!(gw.is_live(&ep, id).await.unwrap());
    assert_eq!(
        gw.post(&ep, id, b"payload").await.unwrap(),
        shared::gateway::Delivery::Delivered
    );
    assert_eq!(
        gw.close(&ep, id).await.unwrap(),
        shared::gateway::Delivery::Delivered
    );
    assert!(!gw.is_live(&ep, id).await.unwrap());
    assert_eq!(
        gw.post(&ep, id, b"late").await.unwrap(),
        shared::gateway::Delivery::Gone
    );
    assert_eq!(
        gw.close(&ep, id).await.unwrap(),
        shared::gateway::Delivery::Gone
    );
    let got: Vec<(String, String, u16)> = w
        .api
        .received()
        .into_iter()
        .map(|r| (r.method, r.connection_id, r.status))
        .collect();
    let want: Vec<(String, String, u16)> = [
        ("GET", 200),
        ("POST", 200),
        ("DELETE", 204),
        ("GET", 410),
        ("POST", 410),
        ("DELETE", 410),
    ]
    .into_iter()
    .map(|(m, s)| (m.to_string(), id.to_string(), s))
    .collect();
    assert_eq!(got, want);
    assert_eq!(w.api.received()[1].body_str(), "payload");
}

/// Every inbound message refreshes the session TTL, refused ones included (as in the AWS
/// WebSocket sample). The refusal still costs one UpdateItem (decision 0303) and counts nothing
/// that could admit a later message of the same minute.
#[tokio::test]
async fn a_refused_message_still_refreshes_the_session_ttl_in_one_call() {
    let w = World::new().await;
    let limits = Limits::example(60, 5, 5, 10, 200, 1);
    w.put_tenant(T, limits).await;
    w.put_session(T, "s1").await;
    assert_eq!(w.connect(T, "s1", "a", &limits).await.status_code, 200);
    let start =
        shared::counter::window::MinuteWindow::at(shared::clock::Clock::now(&w.env.clock)).start;
    w.env
        .clock
        .set(shared::clock::Timestamp::from_secs(start + 60 + 5));
    assert_eq!(w.send(T, "s1", "a", &limits, "1").await.status_code, 200);
    // Later in the same minute: over messagesPerMinute = 1.
    w.env.clock.advance(Duration::from_secs(30));
    let now = shared::clock::Clock::now(&w.env.clock).as_secs();
    w.env.counter.reset();
    let r = w.send(T, "s1", "a", &limits, "2").await;
    assert_eq!(r.status_code, 429, "{:?}", r.body);
    assert_eq!(
        w.env.counter.total(),
        1,
        "the refusal is decided by the same one UpdateItem: {:?}",
        w.env.counter.by_operation()
    );
    assert_eq!(
        w.session(T, "s1").await.unwrap().session_ttl,
        now + 200,
        "the refused message refreshed the TTL"
    );
    // Refusals never make room: still refused later in the minute, admitted in the next.
    w.env.clock.advance(Duration::from_secs(10));
    assert_eq!(w.send(T, "s1", "a", &limits, "3").await.status_code, 429);
    w.env.clock.advance(Duration::from_secs(20));
    assert_eq!(w.send(T, "s1", "a", &limits, "4").await.status_code, 200);
}

/// A tenant allowing no messages at all: each message is refused, the TTL refreshed all the same
/// (1 call; it used to be refused with none, leaving the session to expire under an active client).
#[tokio::test]
async fn a_tenant_with_no_message_allowance_still_keeps_its_sessions_alive() {
    let w = World::new().await;
    let none = Limits::example(60, 5, 5, 10, 200, 0);
    w.put_tenant("quiet", none).await;
    w.put_session("quiet", "q1").await;
    assert_eq!(w.connect("quiet", "q1", "q", &none).await.status_code, 200);
    w.env.clock.advance(Duration::from_secs(50));
    let now = shared::clock::Clock::now(&w.env.clock).as_secs();
    w.env.counter.reset();
    assert_eq!(
        w.send("quiet", "q1", "q", &none, "x").await.status_code,
        429
    );
    assert_eq!(
        w.env.counter.total(),
        2,
        "the tenant (a cold cache) and the message"
    );
    assert_eq!(
        w.session("quiet", "q1").await.unwrap().session_ttl,
        now + 200
    );
    // A refused message on an expired session closes it, as an admitted one would.
    w.env.clock.advance(Duration::from_secs(201));
    assert_eq!(
        w.send("quiet", "q1", "q", &none, "x").await.status_code,
        410
    );
}

/// Counts the calls in flight at a Management API that takes 20 ms per call.
#[derive(Default)]
struct InFlight {
    now: std::sync::atomic::AtomicUsize,
    max: std::sync::atomic::AtomicUsize,
    calls: std::sync::atomic::AtomicUsize,
}

impl InFlight {
    /// Serves an instrumented Management API on a free port: its endpoint (with a stage) and
    /// its counts.
    async fn serve() -> (String, std::sync::Arc<InFlight>) {
        use std::sync::atomic::Ordering;
        let counts = std::sync::Arc::new(InFlight::default());
        let app = axum::Router::new().fallback({
            let counts = counts.clone();
            move || {
                let counts = counts.clone();
                async move {
                    let n = counts.now.fetch_add(1, Ordering::SeqCst) + 1;
                    counts.max.fetch_max(n, Ordering::SeqCst);
                    counts.calls.fetch_add(1, Ordering::SeqCst);
                    tokio::time::sleep(Duration::from_millis(20)).await;
                    counts.now.fetch_sub(1, Ordering::SeqCst);
                    ""
                }
            }
        });
        let listener = tokio::net::TcpListener::bind("127.0.0.1:0").await.unwrap();
        let url = format!("http://{}/stage", listener.local_addr().unwrap());
        tokio::spawn(async move { axum::serve(listener, app).await });
        (url, counts)
    }

    /// Asserts `calls` calls were made, never more than `FANOUT` at once, and some at once.
    fn assert_bounded(&self, calls: usize) {
        use std::sync::atomic::Ordering;
        let max = self.max.load(Ordering::SeqCst);
        assert!(
            max <= shared::gateway::FANOUT && max > 1,
            "at most {} in flight, and concurrent: {max}",
            shared::gateway::FANOUT
        );
        assert_eq!(self.calls.load(Ordering::SeqCst), calls);
    }
}

/// A delete's closes keep at most `shared::gateway::FANOUT` Management API calls
/// in flight; before, every connection at once.
#[tokio::test]
async fn fan_out_keeps_a_bounded_number_of_calls_in_flight() {
    let (url, counts) = InFlight::serve().await;
    let gateway = shared::gateway::Gateway::local(&url);
    let ids: Vec<String> = (0..200).map(|i| format!("conn{i:04}AAAAAAAA=")).collect();
    let closed = gateway.close_each(&url, &ids).await;
    assert_eq!(closed.len(), 200);
    assert!(closed.iter().all(|(_, r)| r.is_ok()), "{closed:?}");
    counts.assert_bounded(200);
}

/// `$default` posts a message to every member of a 200-connection session
/// through the message function itself, at most `shared::gateway::FANOUT` posts in flight
/// (seen failing with the handler's `bounded` replaced by `join_all`: 200 in flight).
#[tokio::test]
async fn a_message_to_a_large_session_posts_a_bounded_number_at_once() {
    let members = 200;
    let limits = Limits::example(1_000, 1_000, members, 1_000, 300, 600);
    let w = World::new().await;
    w.put_tenant(T, limits).await;
    w.put_session(T, "big").await;
    let ids: Vec<String> = (0..members)
        .map(|i| format!("conn{i:04}AAAAAAAA="))
        .collect();
    for c in &ids {
        assert_eq!(
            w.connect(T, "big", c, &limits).await.status_code,
            200,
            "{c}"
        );
    }
    let (url, counts) = InFlight::serve().await;
    let state = message::init(&w.function_deps(&[(shared::gateway::ENDPOINT_VAR, url.as_str())]))
        .await
        .unwrap();
    let mut ev = ws_event("message/message.json", T, "big", &ids[0], Some(&limits));
    ev.body = Some("hello".into());
    let r = message::handle(w.deps(), &state, ev).await.unwrap();
    assert_eq!(r.status_code, 200, "{:?}", r.body);
    let body = body_json(&r);
    assert_eq!(body["delivered"], members, "{body}");
    counts.assert_bounded(members as usize);
}

/// A `$default` event from `cid` of `t`/`s` whose authorizer context says the socket was
/// admitted under `auth` (as the authorizer's Allow records it) with `limits`.
fn message_admitted_as(
    t: &str,
    s: &str,
    cid: &str,
    limits: &Limits,
    auth: shared::tenant::ConnectAuth,
    body: &str,
) -> aws_lambda_events::apigw::ApiGatewayWebsocketProxyRequest {
    let mut ev = ws_event("message/message.json", t, s, cid, Some(limits));
    ev.request_context.authorizer.fields.insert(
        shared::edge::context::CONNECT_AUTH.into(),
        Value::String(auth.as_str().into()),
    );
    ev.body = Some(body.to_string());
    ev
}

/// A socket of a tenant deleted after its `$connect` is told and closed on its
/// next message once the tenant cache's time has passed (the staleness bound), instead of going
/// on with the limits the authorizer captured until API Gateway's 2-hour cap.
#[tokio::test]
async fn a_deleted_tenants_socket_is_told_and_closed_on_its_next_message() {
    let w = World::new().await;
    w.put_tenant(T, SMALL).await;
    w.put_session(T, "s1").await;
    assert_eq!(w.connect(T, "s1", "a", &SMALL).await.status_code, 200);
    assert_eq!(w.send(T, "s1", "a", &SMALL, "1").await.status_code, 200);
    assert!(shared::tenant::store::delete(w.deps(), &T.parse().unwrap())
        .await
        .unwrap());
    // Within the cache's time the row read before is still served (the documented bound).
    w.env.clock.advance(Duration::from_secs(30));
    assert_eq!(w.send(T, "s1", "a", &SMALL, "2").await.status_code, 200);
    w.env.clock.advance(Duration::from_secs(31));
    w.api.clear();
    let r = w.send(T, "s1", "a", &SMALL, "3").await;
    assert_eq!(r.status_code, 410, "{:?}", r.body);
    let frames = w.api.received_by("POST");
    assert_eq!(frames.len(), 1, "one frame, to the sender: {frames:?}");
    assert_eq!(frames[0].connection_id, "a");
    assert!(
        frames[0].body_str().contains("no longer exists"),
        "{}",
        frames[0].body_str()
    );
    assert_eq!(w.closed(), ["a"], "and the socket closed");
}

/// Lowered message limits apply to the next message once the tenant cache's
/// time has passed, not only to sockets admitted after the change.
#[tokio::test]
async fn lowered_message_limits_apply_to_the_next_message() {
    let w = World::new().await;
    let before = Limits::example(60, 5, 5, 10, 200, 60);
    w.put_tenant(T, before).await;
    w.put_session(T, "s1").await;
    assert_eq!(w.connect(T, "s1", "a", &before).await.status_code, 200);
    let quick = message::init(&w.function_deps(&[("TURNSTILE_TENANT_CACHE_SECS", "5")]))
        .await
        .unwrap();
    let start =
        shared::counter::window::MinuteWindow::at(shared::clock::Clock::now(&w.env.clock)).start;
    w.env
        .clock
        .set(shared::clock::Timestamp::from_secs(start + 60 + 1));
    for i in 0..3 {
        let ev = message_admitted_as(T, "s1", "a", &before, Default::default(), &i.to_string());
        let r = message::handle(w.deps(), &quick, ev).await.unwrap();
        assert_eq!(r.status_code, 200, "{:?}", r.body);
    }
    w.put_tenant(T, Limits::example(60, 5, 5, 10, 200, 2)).await;
    w.env.clock.advance(Duration::from_secs(6));
    // The context still says 60 a minute (what the authorizer captured at connect).
    let ev = message_admitted_as(T, "s1", "a", &before, Default::default(), "late");
    let r = message::handle(w.deps(), &quick, ev).await.unwrap();
    assert_eq!(r.status_code, 429, "{:?}", r.body);
    assert_eq!(body_json(&r)["violated-policies"][0], "messagesPerMinute");
}

/// A tenant whose `connectAuth` became stricter closes, on their next message,
/// the sockets admitted under the old mode (the authorizer context records the mode each socket
/// was admitted under); sockets admitted under the mode now required go on.
#[tokio::test]
async fn a_stricter_connect_auth_closes_sockets_admitted_under_the_old_one() {
    use shared::tenant::ConnectAuth;
    let w = World::new().await;
    let open = SMALL.with_connect_auth(ConnectAuth::None);
    w.put_tenant(T, open).await;
    w.put_session(T, "s1").await;
    assert_eq!(w.connect(T, "s1", "anon", &open).await.status_code, 200);
    assert_eq!(w.connect(T, "s1", "held", &open).await.status_code, 200);
    let send = |cid: &'static str, auth: ConnectAuth| {
        let ev = message_admitted_as(T, "s1", cid, &open, auth, "x");
        message::handle(w.deps(), &w.message, ev)
    };
    assert_eq!(
        send("anon", ConnectAuth::None).await.unwrap().status_code,
        200
    );
    w.put_tenant(T, SMALL.with_connect_auth(ConnectAuth::Ticket))
        .await;
    w.env.clock.advance(Duration::from_secs(61));
    w.api.clear();
    let r = send("anon", ConnectAuth::None).await.unwrap();
    assert_eq!(r.status_code, 403, "{:?}", r.body);
    let frames = w.api.received_by("POST");
    assert_eq!(frames.len(), 1, "{frames:?}");
    assert!(
        frames[0].body_str().contains("ticket"),
        "{}",
        frames[0].body_str()
    );
    assert_eq!(w.closed(), ["anon"]);
    // A socket that presented a ticket meets the new mode: it goes on.
    let r = send("held", ConnectAuth::Ticket).await.unwrap();
    assert_eq!(r.status_code, 200, "{:?}", r.body);
}

/// `$default`'s DynamoDB budget with the tenant read on every message: a cache
/// hit adds no call (1 UpdateItem), a miss adds 1 GetItem of the tenant row (2 calls).
#[tokio::test]
async fn a_message_reads_its_tenant_from_the_cache_and_pays_one_call_on_a_miss() {
    let w = World::new().await;
    w.put_tenant(T, SMALL).await;
    w.put_session(T, "s1").await;
    assert_eq!(w.connect(T, "s1", "a", &SMALL).await.status_code, 200);
    let ops = |pairs: &[(&str, u64)]| -> std::collections::BTreeMap<String, u64> {
        pairs.iter().map(|(k, v)| (k.to_string(), *v)).collect()
    };
    w.env.counter.reset();
    assert_eq!(w.send(T, "s1", "a", &SMALL, "1").await.status_code, 200);
    assert_eq!(
        w.env.counter.by_operation(),
        ops(&[("GetItem", 1), ("UpdateItem", 1)]),
        "a cold cache: the tenant row, then the message"
    );
    w.env.counter.reset();
    w.env.clock.advance(Duration::from_secs(59));
    assert_eq!(w.send(T, "s1", "a", &SMALL, "2").await.status_code, 200);
    assert_eq!(
        w.env.counter.by_operation(),
        ops(&[("UpdateItem", 1)]),
        "a hit adds no call"
    );
    w.env.counter.reset();
    w.env.clock.advance(Duration::from_secs(1));
    assert_eq!(w.send(T, "s1", "a", &SMALL, "3").await.status_code, 200);
    assert_eq!(
        w.env.counter.by_operation(),
        ops(&[("GetItem", 1), ("UpdateItem", 1)]),
        "the entry expired at the cache's time: read again"
    );
}
