//! `$connect` / `$disconnect` against DynamoDB Local: exact limits under concurrency, no quota spent
//! by refused attempts, exactly-once release, and the call budgets.

use std::time::Duration;

use futures::future::join_all;
use shared::tenant::Limits;

use crate::ws_support::*;

const T: &str = "tenant-1";

#[tokio::test]
async fn connect_admits_and_disconnect_releases_in_two_writes_each() {
    let w = World::new().await;
    w.put_tenant(T, SMALL).await;
    w.put_session(T, "s1").await;

    w.env.counter.reset();
    let r = w.connect(T, "s1", "conn-A=", &SMALL).await;
    assert_eq!(r.status_code, 200, "{:?}", r.body);
    // Two conditional UpdateItems (the tenant's counter, then the session), no transaction.
    assert_eq!(
        w.env.counter.by_operation(),
        [("UpdateItem".to_string(), 2)].into(),
        "$connect"
    );

    assert_eq!(w.count(T).await, Some(1));
    assert_eq!(w.tenant_minute_count(T).await, 1);
    assert_eq!(w.session_minute_count(T, "s1").await, 1);
    let s = w.session(T, "s1").await.unwrap();
    assert_eq!(s.connection_ids, vec!["conn-A=".to_string()]);
    // Everything lives on the two items: no other counter row.
    assert_eq!(
        w.counter_keys().await,
        vec![T.to_string(), format!("{T}:sessions")]
    );

    w.env.counter.reset();
    let r = w.disconnect(T, "s1", "conn-A=").await;
    assert_eq!(r.status_code, 200);
    // The session write, then the decrement beside the cleanup of its release token (decision
    // 2206: exactly once under the SDK's retries).
    assert_eq!(
        w.env.counter.by_operation(),
        [("UpdateItem".to_string(), 3)].into(),
        "$disconnect"
    );
    assert_eq!(w.count(T).await, Some(0));
    assert!(w.session(T, "s1").await.unwrap().connection_ids.is_empty());
    // Per-minute counts are rates: a disconnect does not give them back.
    assert_eq!(w.tenant_minute_count(T).await, 1);
    assert_eq!(w.session_minute_count(T, "s1").await, 1);
}

#[tokio::test]
async fn duplicate_and_missing_disconnects_never_go_negative() {
    let w = World::new().await;
    w.put_tenant(T, SMALL).await;
    w.put_session(T, "s1").await;
    assert_eq!(w.connect(T, "s1", "c1", &SMALL).await.status_code, 200);
    assert_eq!(w.connect(T, "s1", "c2", &SMALL).await.status_code, 200);
    assert_eq!(w.count(T).await, Some(2));

    // The same disconnect delivered three times, twice concurrently.
    let rs = join_all((0..2).map(|_| w.disconnect(T, "s1", "c1"))).await;
    assert!(rs.iter().all(|r| r.status_code == 200));
    assert_eq!(w.disconnect(T, "s1", "c1").await.status_code, 200);
    assert_eq!(w.count(T).await, Some(1));
    // A disconnect for a connection that was never admitted.
    w.env.counter.reset();
    let r = w.disconnect(T, "s1", "never-connected").await;
    assert_eq!(r.status_code, 200);
    assert!(body_json(&r)["message"]
        .as_str()
        .unwrap()
        .contains("already released"));
    assert_eq!(w.env.counter.total(), 1);
    assert_eq!(w.count(T).await, Some(1));
    // A disconnect for another tenant's connection id cannot touch this tenant.
    w.put_tenant("tenant-2", SMALL).await;
    assert_eq!(w.disconnect("tenant-2", "s1", "c2").await.status_code, 200);
    assert_eq!(w.count(T).await, Some(1));
    assert_eq!(
        w.session(T, "s1").await.unwrap().connection_ids,
        vec!["c2".to_string()]
    );
    // A repeated $connect of an admitted connection is idempotent.
    assert_eq!(w.connect(T, "s1", "c2", &SMALL).await.status_code, 200);
    assert_eq!(w.count(T).await, Some(1));
    // Disconnect after the session is gone (deleted): still released exactly once.
    assert_eq!(w.disconnect(T, "s1", "c2").await.status_code, 200);
    assert_eq!(w.count(T).await, Some(0));
    assert_eq!(w.disconnect(T, "s1", "c2").await.status_code, 200);
    assert_eq!(w.count(T).await, Some(0));
}

#[tokio::test]
async fn disconnect_after_the_session_was_deleted_by_ttl_still_releases_once() {
    let w = World::new().await;
    w.put_tenant(T, SMALL).await;
    w.put_session(T, "s1").await;
    assert_eq!(w.connect(T, "s1", "c1", &SMALL).await.status_code, 200);
    // The session row vanishes (as DynamoDB's TTL deletes it) before the sweeper ran: the
    // disconnect finds no session and releases nothing (1 call): the deletion's stream record
    // carries the connection, and the sweeper releases it, once.
    w.deps()
        .dynamo
        .delete_item()
        .table_name(&w.deps().tables.sessions)
        .set_key(Some(shared::session::store::key(
            &"tenant-1".parse().unwrap(),
            &"s1".parse().unwrap(),
        )))
        .send()
        .await
        .unwrap();
    w.env.counter.reset();
    assert_eq!(w.disconnect(T, "s1", "c1").await.status_code, 200);
    assert_eq!(w.env.counter.total(), 1);
    assert_eq!(w.count(T).await, Some(1));
    assert!(
        w.session(T, "s1").await.is_none(),
        "the session was not recreated"
    );
    let mut record = sample("ttl-sweeper/ttl-expiry.json")["Records"][0].clone();
    record["eventID"] = serde_json::json!("ttl-s1");
    record["dynamodb"]["OldImage"] = serde_json::json!({
        "tenantId": {"S": T}, "sessionId": {"S": "s1"}, "sessionTTL": {"N": "1"},
        "connectionIds": {"SS": ["c1"]}
    });
    let ev: aws_lambda_events::dynamodb::Event = typed(serde_json::json!({ "Records": [record] }));
    for _ in 0..2 {
        let r = ttl_sweeper::handle(w.deps(), &w.sweeper, ev.clone()).await;
        assert!(r.batch_item_failures.is_empty());
        assert_eq!(w.count(T).await, Some(0));
    }
    assert_eq!(w.disconnect(T, "s1", "c1").await.status_code, 200);
    assert_eq!(w.count(T).await, Some(0));
}

/// Caps of 10 (tenant) and 3 (session) with 50 simultaneous connects: exactly those numbers get in.
#[tokio::test]
async fn fifty_concurrent_connects_admit_exactly_the_caps() {
    let w = World::new().await;
    let limits = Limits::example(1_000, 1_000, 3, 10, 300, 60);
    w.put_tenant(T, limits).await;
    let sessions: Vec<String> = (0..6).map(|i| format!("s{i}")).collect();
    for s in &sessions {
        w.put_session(T, s).await;
    }
    let attempts = (0..50).map(|i| {
        let s = sessions[i % sessions.len()].clone();
        let w = &w;
        async move {
            let cid = format!("c{i:02}");
            let r = w.connect(T, &s, &cid, &limits).await;
            (s, cid, r)
        }
    });
    w.env.counter.reset();
    let results = join_all(attempts).await;
    // Each attempt makes at least its tenant write; admitted ones a session write too, refused
    // ones by a session a give-back, and refusals decided while reservations settle retry.
    let calls = w.env.counter.total();
    eprintln!(
        "50 concurrent connects: {calls} calls {:?}, {:?}",
        w.env.counter.by_operation(),
        w.env.counter.units()
    );
    assert!(calls >= 60);
    assert_eq!(w.env.counter.by_operation().len(), 1, "UpdateItem only");
    let admitted: Vec<_> = results
        .iter()
        .filter(|(_, _, r)| r.status_code == 200)
        .collect();
    let refused: Vec<_> = results
        .iter()
        .filter(|(_, _, r)| r.status_code == 429)
        .collect();
    assert_eq!(admitted.len(), 10, "tenant cap");
    assert_eq!(refused.len(), 40);
    assert_eq!(w.count(T).await, Some(10));
    let mut total = 0;
    for s in &sessions {
        let n = w.session(T, s).await.unwrap().connection_ids.len();
        assert!(n <= 3, "session {s} holds {n}");
        total += n;
    }
    assert_eq!(total, 10);
    // Every refusal names a limit and carries a problem+json body.
    for (_, _, r) in &refused {
        let body = body_json(r);
        let name = body["violated-policies"][0].as_str().unwrap();
        assert!(
            ["tenantConnections", "connectionsPerSession"].contains(&name),
            "{name}"
        );
        assert_eq!(r.headers.get("retry-after").unwrap(), "10");
    }
    // Rejected attempts spent no per-minute quota.
    assert_eq!(w.tenant_minute_count(T).await, 10);
    let per_session: i64 = {
        let mut sum = 0;
        for s in &sessions {
            sum += w.session_minute_count(T, s).await;
        }
        sum
    };
    assert_eq!(per_session, 10);
    // The sessions hold exactly the admitted connections, and no other counter row exists.
    let mut held: Vec<String> = Vec::new();
    for s in &sessions {
        held.extend(w.session(T, s).await.unwrap().connection_ids);
    }
    held.sort();
    let mut ok: Vec<String> = admitted.iter().map(|(_, c, _)| c.clone()).collect();
    ok.sort();
    assert_eq!(held, ok);
    assert_eq!(
        w.counter_keys().await,
        vec![T.to_string(), format!("{T}:sessions")]
    );
}

#[tokio::test]
async fn fifty_concurrent_connects_into_one_session_admit_exactly_three() {
    let w = World::new().await;
    // The tenant's open cap out of the way (100 > 50): with 10, charges that the session then
    // refuses and undoes could fill it for an instant and turn a refusal's reason into
    // `tenantConnections` (seen under load) — correct, but not what this test is about.
    let limits = Limits::example(1_000, 1_000, 3, 100, 300, 60);
    w.put_tenant(T, limits).await;
    w.put_session(T, "one").await;
    let results = join_all((0..50).map(|i| {
        let w = &w;
        async move { w.connect(T, "one", &format!("c{i}"), &limits).await }
    }))
    .await;
    let admitted = results.iter().filter(|r| r.status_code == 200).count();
    assert_eq!(admitted, 3);
    assert_eq!(w.count(T).await, Some(3));
    assert_eq!(w.session(T, "one").await.unwrap().connection_ids.len(), 3);
    for r in results.iter().filter(|r| r.status_code != 200) {
        assert_eq!(r.status_code, 429);
        assert_eq!(
            body_json(r)["violated-policies"][0],
            "connectionsPerSession"
        );
    }
    assert_eq!(w.tenant_minute_count(T).await, 3);
    assert_eq!(w.session_minute_count(T, "one").await, 3);
}

#[tokio::test]
async fn per_minute_caps_are_exact_under_concurrency_and_reset_next_minute() {
    let w = World::new().await;
    // Tenant: 7 new connections a minute; sessions: 4 a minute; open caps out of the way.
    let limits = Limits::example(7, 4, 100, 1_000, 300, 60);
    w.put_tenant(T, limits).await;
    for s in ["a", "b", "c"] {
        w.put_session(T, s).await;
    }
    // Freeze the clock well inside a minute so the whole burst falls in one window.
    let now = shared::clock::Clock::now(&w.env.clock);
    let start = shared::counter::window::MinuteWindow::at(now).start;
    w.env
        .clock
        .set(shared::clock::Timestamp::from_secs(start + 60 + 5));
    let results = join_all((0..50).map(|i| {
        let w = &w;
        let s = ["a", "b", "c"][i % 3];
        async move { (s, w.connect(T, s, &format!("c{i}"), &limits).await) }
    }))
    .await;
    let admitted = results.iter().filter(|(_, r)| r.status_code == 200).count();
    assert_eq!(admitted, 7, "tenant per minute");
    assert_eq!(w.tenant_minute_count(T).await, 7);
    assert_eq!(
        w.count(T).await,
        Some(7),
        "refused attempts hold no open capacity"
    );
    for s in ["a", "b", "c"] {
        let n = w.session_minute_count(T, s).await;
        assert!(n <= 4, "session {s}: {n}");
    }
    for (_, r) in results.iter().filter(|(_, r)| r.status_code != 200) {
        assert_eq!(r.status_code, 429);
        let name = body_json(r)["violated-policies"][0]
            .as_str()
            .unwrap()
            .to_string();
        assert!(
            name == "tenantPerMinute" || name == "sessionPerMinute",
            "{name}"
        );
        // 55 s remain in the minute.
        assert_eq!(r.headers.get("retry-after").unwrap(), "55");
    }

    // The next minute opens a fresh window.
    w.env.clock.advance(Duration::from_secs(60));
    assert_eq!(
        w.connect(T, "a", "next-minute", &limits).await.status_code,
        200
    );
    assert_eq!(w.tenant_minute_count(T).await, 1);
    assert_eq!(w.session_minute_count(T, "a").await, 1);
    // The windows live on the two items (no per-minute rows, nothing for TTL to sweep up).
    assert_eq!(
        w.counter_keys().await,
        vec![T.to_string(), format!("{T}:sessions")]
    );
    assert_eq!(w.count(T).await, Some(8));
}

#[tokio::test]
async fn session_per_minute_is_exact_for_one_session() {
    let w = World::new().await;
    let limits = Limits::example(1_000, 5, 100, 1_000, 300, 60);
    w.put_tenant(T, limits).await;
    w.put_session(T, "s").await;
    let start =
        shared::counter::window::MinuteWindow::at(shared::clock::Clock::now(&w.env.clock)).start;
    w.env
        .clock
        .set(shared::clock::Timestamp::from_secs(start + 60 + 1));
    let results = join_all((0..50).map(|i| {
        let w = &w;
        async move { w.connect(T, "s", &format!("c{i}"), &limits).await }
    }))
    .await;
    assert_eq!(results.iter().filter(|r| r.status_code == 200).count(), 5);
    for r in results.iter().filter(|r| r.status_code != 200) {
        assert_eq!(body_json(r)["violated-policies"][0], "sessionPerMinute");
    }
    // Disconnecting frees open capacity but not the minute's rate.
    for i in 0..50 {
        w.disconnect(T, "s", &format!("c{i}")).await;
    }
    assert_eq!(w.count(T).await, Some(0));
    let r = w.connect(T, "s", "again", &limits).await;
    assert_eq!(r.status_code, 429);
    assert_eq!(body_json(&r)["violated-policies"][0], "sessionPerMinute");
}

#[tokio::test]
async fn connect_to_a_missing_or_expired_session_is_refused_without_writing() {
    let w = World::new().await;
    w.put_tenant(T, SMALL).await;
    let r = w.connect(T, "nope", "c1", &SMALL).await;
    assert_eq!(r.status_code, 404);
    assert!(
        w.session(T, "nope").await.is_none(),
        "no session was created"
    );
    w.put_session(T, "s1").await;
    w.env
        .clock
        .advance(Duration::from_secs(SMALL.session_ttl + 1));
    let r = w.connect(T, "s1", "c2", &SMALL).await;
    assert_eq!(r.status_code, 404);
    // The tenant's reservations were given back: no capacity held, no minute spent.
    assert_eq!(w.count(T).await, Some(0));
    assert_eq!(w.tenant_minute_count(T).await, 0);
    assert_eq!(
        w.counter_keys().await,
        vec![T.to_string(), format!("{T}:sessions")]
    );
    assert!(w.session(T, "s1").await.unwrap().connection_ids.is_empty());
}

#[tokio::test]
async fn connect_without_limits_in_the_context_reads_the_tenant_once() {
    let w = World::new().await;
    w.put_tenant(T, SMALL).await;
    w.put_session(T, "s1").await;
    let ev = ws_event("connect/connect.json", T, "s1", "c1", None);
    w.env.counter.reset();
    let r = connect::handle(w.deps(), &w.connect, ev).await.unwrap();
    assert_eq!(r.status_code, 200);
    assert_eq!(w.env.counter.total(), 3, "GetItem + 2 UpdateItem");
    let ev = ws_event("connect/connect.json", T, "s1", "c2", None);
    w.env.counter.reset();
    assert_eq!(
        connect::handle(w.deps(), &w.connect, ev)
            .await
            .unwrap()
            .status_code,
        200
    );
    assert_eq!(w.env.counter.total(), 2, "warm tenant cache");
    // Unknown tenant.
    let ev = ws_event("connect/connect.json", "ghost", "s1", "c3", None);
    assert_eq!(
        connect::handle(w.deps(), &w.connect, ev)
            .await
            .unwrap()
            .status_code,
        403
    );
}

#[tokio::test]
async fn the_sample_connect_event_runs_as_is() {
    let w = World::new().await;
    w.put_tenant("tenant-1", SMALL).await;
    w.put_sample_session().await;
    let ev = typed(sample("connect/connect.json"));
    let r = connect::handle(w.deps(), &w.connect, ev).await.unwrap();
    assert_eq!(r.status_code, 200);
    let ev = typed(sample("disconnect/disconnect.json"));
    let r = disconnect::handle(w.deps(), &w.disconnect, ev)
        .await
        .unwrap();
    assert_eq!(r.status_code, 200);
    assert_eq!(w.count("tenant-1").await, Some(0));
}

#[tokio::test]
async fn a_refused_attempt_spends_no_other_limits_quota() {
    let w = World::new().await;
    let limits = Limits::example(60, 5, 1, 10, 300, 60);
    w.put_tenant(T, limits).await;
    w.put_session(T, "s1").await;
    assert_eq!(w.connect(T, "s1", "c1", &limits).await.status_code, 200);
    let before = (
        w.count(T).await,
        w.tenant_minute_count(T).await,
        w.session_minute_count(T, "s1").await,
    );
    for i in 0..5 {
        w.env.counter.reset();
        let r = w.connect(T, "s1", &format!("x{i}"), &limits).await;
        // Reserve on the tenant, refused by the session, give the reservation back.
        assert_eq!(
            w.env.counter.by_operation(),
            [("UpdateItem".to_string(), 3)].into()
        );
        assert_eq!(r.status_code, 429);
        assert_eq!(
            body_json(&r)["violated-policies"][0],
            "connectionsPerSession"
        );
        assert_eq!(
            r.headers.get("ratelimit-policy").unwrap(),
            r#""connectionsPerSession";q=1;qu="concurrent-requests""#
        );
    }
    let after = (
        w.count(T).await,
        w.tenant_minute_count(T).await,
        w.session_minute_count(T, "s1").await,
    );
    assert_eq!(before, after);
    assert_eq!(before, (Some(1), 1, 1));
    assert_eq!(
        w.session(T, "s1").await.unwrap().session_ttl,
        shared::clock::Clock::now(&w.env.clock).as_secs() + 300
    );
}

/// Malformed WebSocket events answer a precise 4xx and touch nothing.
#[tokio::test]
async fn malformed_websocket_events_are_4xx_without_any_call() {
    let w = World::new().await;
    let long = "c".repeat(4096);
    let cases: Vec<(&str, &str, &str, &str)> = vec![
        ("", "s1", "c1", "tenantId is missing"),
        (T, "", "c1", "sessionId is missing"),
        (T, "s1", "", "connectionId is missing"),
        ("a:b", "s1", "c1", "tenantId contains ':'"),
        (T, "s:1", "c1", "sessionId contains ':'"),
        (T, "s1", "c:1", "connectionId contains ':'"),
        (T, "s1", &long, "connectionId is 4096 characters long"),
    ];
    for (t, s, c, message) in cases {
        for sample_path in [
            "connect/connect.json",
            "disconnect/disconnect.json",
            "message/message.json",
        ] {
            let mut ev = ws_event(sample_path, t, s, c, Some(&SMALL));
            if c.is_empty() {
                ev.request_context.connection_id = None;
            }
            ev.query_string_parameters = Default::default();
            w.env.counter.reset();
            let r = match sample_path {
                "connect/connect.json" => connect::handle(w.deps(), &w.connect, ev).await,
                "disconnect/disconnect.json" => {
                    disconnect::handle(w.deps(), &w.disconnect, ev).await
                }
                _ => message::handle(w.deps(), &w.message, ev).await,
            }
            .unwrap();
            assert_eq!(r.status_code, 400, "{sample_path} {t:?} {s:?}");
            let body = body_json(&r);
            assert!(
                body["message"].as_str().unwrap().contains(message),
                "{sample_path}: {body}"
            );
            assert_eq!(w.env.counter.total(), 0);
        }
    }
    assert!(w.api.received().is_empty());
}

/// Once no reservation is in flight, a refusal by the tenant's counter is one UpdateItem and
/// writes nothing; right after a reservation it waits for it to settle first (decision 0306).
#[tokio::test]
async fn a_refusal_by_the_tenant_costs_one_call_and_writes_nothing() {
    let w = World::new().await;
    let limits = Limits::example(100, 100, 10, 1, 300, 60);
    w.put_tenant(T, limits).await;
    w.put_session(T, "s1").await;
    w.put_session(T, "s2").await;
    let start =
        shared::counter::window::MinuteWindow::at(shared::clock::Clock::now(&w.env.clock)).start;
    w.env
        .clock
        .set(shared::clock::Timestamp::from_secs(start + 60 + 5));
    assert_eq!(w.connect(T, "s1", "c1", &limits).await.status_code, 200);
    w.env.clock.advance(Duration::from_secs(1));
    let ver = w.counter_number(T, "ver").await;
    w.env.counter.reset();
    let r = w.connect(T, "s2", "c2", &limits).await;
    assert_eq!(r.status_code, 429);
    assert_eq!(body_json(&r)["violated-policies"][0], "tenantConnections");
    assert_eq!(
        w.env.counter.by_operation(),
        [("UpdateItem".to_string(), 1)].into()
    );
    assert_eq!(w.counter_number(T, "ver").await, ver, "nothing written");
    assert_eq!(w.count(T).await, Some(1));
    assert_eq!(w.tenant_minute_count(T).await, 1);
    assert!(w.session(T, "s2").await.unwrap().connection_ids.is_empty());
}

/// A limit of 0 blocks its dimension even when no counter has been written yet:
/// `$connect` refuses naming the limit, and nothing is written.
#[tokio::test]
async fn a_cap_of_zero_blocks_the_first_connect_too() {
    let w = World::new().await;
    let generous = Limits::example(100, 100, 10, 100, 300, 60);
    let cases = [
        ("tenantConnections", {
            let mut l = generous;
            l.tenant_connections = 0;
            l
        }),
        ("connectionsPerSession", {
            let mut l = generous;
            l.connections_per_session = 0;
            l
        }),
        ("tenantPerMinute", {
            let mut l = generous;
            l.tenant_per_minute = 0;
            l
        }),
        ("sessionPerMinute", {
            let mut l = generous;
            l.session_per_minute = 0;
            l
        }),
    ];
    for (i, (name, limits)) in cases.into_iter().enumerate() {
        for alg in [
            shared::tenant::WindowAlgorithm::Fixed,
            shared::tenant::WindowAlgorithm::Gcra,
        ] {
            let limits = limits.with_rate_algorithm(alg);
            let t = format!("zero-{i}-{alg}");
            w.put_tenant(&t, limits).await;
            w.put_session(&t, "s1").await;
            let r = w.connect(&t, "s1", "c1", &limits).await;
            assert_eq!(r.status_code, 429, "{name} = 0 ({alg}): {:?}", r.body);
            assert_eq!(body_json(&r)["violated-policies"][0], name, "{alg}");
            assert_eq!(w.count(&t).await.unwrap_or(0), 0, "{name} ({alg})");
            assert!(w.session(&t, "s1").await.unwrap().connection_ids.is_empty());
        }
    }
}

/// The write-unit budgets (the call counter's capacity meter): `$connect` ≤ 4 WCU
/// (measured 2), `$disconnect` ≤ 2 (2), a message 1; refusals: by the tenant 1, by the session 3
/// (reserve, refused, give back), by a zero limit 0.
#[tokio::test]
async fn write_units_per_path_meet_the_targets() {
    use shared::capacity::Units;
    let w = World::new().await;
    let limits = Limits::example(100, 100, 1, 2, 300, 60);
    w.put_tenant(T, limits).await;
    for s in ["s1", "s2", "s3"] {
        w.put_session(T, s).await;
    }
    let start =
        shared::counter::window::MinuteWindow::at(shared::clock::Clock::now(&w.env.clock)).start;
    w.env
        .clock
        .set(shared::clock::Timestamp::from_secs(start + 60 + 5));
    let units = |w: &World| w.env.counter.units();

    w.env.counter.reset();
    assert_eq!(w.connect(T, "s1", "c1", &limits).await.status_code, 200);
    let connect = units(&w);
    assert_eq!(connect, Units::write(2.0), "$connect");
    assert!(connect.write <= 4.0);

    w.env.counter.reset();
    assert_eq!(w.send(T, "s1", "c1", &limits, "hi").await.status_code, 200);
    assert_eq!(
        units(&w),
        Units {
            write: 1.0,
            read: 1.0
        },
        "message: 1 WCU, and the tenant row read once (a cold tenant cache)"
    );

    // Refused by the session (one connection per session): reserve, refused, give back.
    w.env.counter.reset();
    let r = w.connect(T, "s1", "c2", &limits).await;
    assert_eq!(
        body_json(&r)["violated-policies"][0],
        "connectionsPerSession"
    );
    assert_eq!(units(&w), Units::write(3.0), "refused by the session");

    // Refused by the tenant (2 open), once nothing is in flight: one refused write.
    assert_eq!(w.connect(T, "s2", "c3", &limits).await.status_code, 200);
    w.env.clock.advance(Duration::from_secs(1));
    w.env.counter.reset();
    let r = w.connect(T, "s3", "c4", &limits).await;
    assert_eq!(body_json(&r)["violated-policies"][0], "tenantConnections");
    assert_eq!(units(&w), Units::write(1.0), "refused by the tenant");

    w.env.counter.reset();
    assert_eq!(w.disconnect(T, "s1", "c1").await.status_code, 200);
    let disconnect = units(&w);
    assert_eq!(disconnect, Units::write(3.0), "$disconnect (decision 2206)");
    // A repeated disconnect releases nothing: one write.
    w.env.counter.reset();
    assert_eq!(w.disconnect(T, "s1", "c1").await.status_code, 200);
    assert_eq!(units(&w), Units::write(1.0), "repeated $disconnect");

    // A zero limit: no call at all.
    let mut zero = limits;
    zero.session_per_minute = 0;
    w.env.counter.reset();
    assert_eq!(w.connect(T, "s3", "c5", &zero).await.status_code, 429);
    assert_eq!(units(&w), Units::ZERO);
    assert_eq!(w.env.counter.total(), 0);
}

/// Review finding 4: a join that gives up (past the join deadline, no attempt applied) undoes its
/// reservation instead of leaking the open connection and the tenant's minute unit.
#[tokio::test]
async fn a_join_past_its_deadline_gives_the_reservation_back() {
    use shared::admission::connect::{self, Hints, JOIN_DEADLINE};
    let w = World::new().await;
    w.put_tenant(T, SMALL).await;
    w.put_session(T, "s1").await;
    let (t, s1) = (T.parse().unwrap(), "s1".parse().unwrap());
    let hints = Hints::default();
    let r = connect::reserve(w.deps(), &t, &s1, &SMALL, &hints)
        .await
        .unwrap()
        .unwrap();
    assert_eq!(w.count(T).await, Some(1));
    assert_eq!(w.tenant_minute_count(T).await, 1);
    // The handler stalled between the two writes for longer than the deadline.
    w.env.clock.advance(JOIN_DEADLINE + Duration::from_secs(1));
    w.env.counter.reset();
    let late = "late".parse().unwrap();
    let request = shared::admission::Request {
        deps: w.deps(),
        t: &t,
        sid: &s1,
        cid: &late,
        limits: &SMALL,
        nonce: None,
        ticket: None,
    };
    let out = connect::complete(request, &hints, &r).await;
    let err = out.unwrap_err().to_string();
    assert!(err.contains("deadline"), "{err}");
    assert_eq!(
        w.env.counter.by_operation(),
        [("UpdateItem".to_string(), 1)].into(),
        "no session write, one undo"
    );
    assert_eq!(w.count(T).await, Some(0), "the open connection given back");
    assert_eq!(
        w.counter_number(T, "connMinuteCount").await,
        Some(0),
        "the minute unit given back (in the window it was spent in)"
    );
    assert!(w.session(T, "s1").await.unwrap().connection_ids.is_empty());
}

/// Pads the session item with one string attribute of `len` bytes (to bring it near DynamoDB's
/// 400 KB item limit).
async fn pad_session(w: &World, t: &str, s: &str, len: usize) -> bool {
    w.deps()
        .dynamo
        .update_item()
        .table_name(&w.deps().tables.sessions)
        .set_key(Some(shared::session::store::key(
            &t.parse().unwrap(),
            &s.parse().unwrap(),
        )))
        .update_expression("SET padding = :p")
        .expression_attribute_values(
            ":p",
            aws_sdk_dynamodb::types::AttributeValue::S("x".repeat(len)),
        )
        .send()
        .await
        .is_ok()
}

/// A session write that DynamoDB refuses before applying it — here a session item
/// at the 400 KB item limit, answered with a ValidationException — gives the tenant's reservation
/// back: nothing joined, so nothing may stay counted (before, each client retry leaked one unit of
/// `tenantConnections` until the reconciler ran). An error that may have applied still keeps it.
#[tokio::test]
async fn a_session_write_refused_before_it_applied_gives_the_reservation_back() {
    let w = World::new().await;
    w.put_tenant(T, SMALL).await;
    w.put_session(T, "big").await;
    // As large as DynamoDB takes it, less what the join adds (a connection id and the minute).
    let mut len = 409_600;
    while !pad_session(&w, T, "big", len).await {
        len -= 64;
        assert!(len > 400_000, "no padding fits");
    }
    for attempt in 0..3 {
        let r = w.connect(T, "big", &format!("c{attempt}"), &SMALL).await;
        assert!(r.status_code >= 500, "{:?}", r.body);
        assert_eq!(
            w.count(T).await.unwrap_or(0),
            0,
            "attempt {attempt}: the reservation was given back"
        );
    }
    assert!(w.session(T, "big").await.unwrap().connection_ids.is_empty());
}

/// Shadow mode lifts the caps but keeps one ceiling, the session's
/// `MAX_CONNECTIONS_PER_SESSION` (everything about its connections lives in one item, limited to
/// 400 KB): a shadow tenant's session at the ceiling is refused with the ceiling's 429, not grown
/// until DynamoDB refuses the item (before, shadow admitted under 2^40 and the item grew without
/// bound). The session is the largest the code can make at the ceiling (decision 2207): the
/// longest ids, one connection short of the ceiling, each with its `chg:{cid}` as `$connect`
/// writes it, and as many releases in flight (`chg:` and `rel:` of ids already out of the set).
/// At the old ceiling of 10,000 that item cannot exist (seen: the pre-write is refused,
/// `ValidationException`), nor could the writes that lead to it.
#[tokio::test]
async fn a_shadow_tenant_session_stops_at_the_hard_ceiling() {
    use aws_sdk_dynamodb::types::AttributeValue;
    use shared::session::{attr, charge_attr, release_attr, TENANT_COUNTER};
    use shared::tenant::{Enforcement, MAX_CONNECTIONS_PER_SESSION};
    let (t, sid) = ("t".repeat(128), "s".repeat(128));
    let w = World::new().await;
    let shadow = Limits::example(1_000_000, 1_000_000, 2, 1_000_000, 300, 60)
        .with_enforcement(Enforcement::Shadow);
    w.put_tenant(&t, shadow).await;
    w.put_session(&t, &sid).await;
    let key = shared::session::store::key(&t.parse().unwrap(), &sid.parse().unwrap());
    let table = &w.deps().tables.sessions;
    let mut item = w
        .deps()
        .dynamo
        .get_item()
        .table_name(table)
        .set_key(Some(key))
        .consistent_read(true)
        .send()
        .await
        .unwrap()
        .item
        .unwrap();
    // API Gateway's connection ids are 16 characters; release tokens 16 hex digits.
    let cid = |i: u64| format!("{i:015}=");
    let c = MAX_CONNECTIONS_PER_SESSION;
    let live: Vec<String> = (0..c - 1).map(cid).collect();
    item.insert(attr::CONNECTION_IDS.into(), AttributeValue::Ss(live));
    for i in 0..2 * c - 1 {
        item.insert(
            charge_attr(&cid(i)),
            AttributeValue::N(TENANT_COUNTER.to_string()),
        );
    }
    for i in c - 1..2 * c - 1 {
        item.insert(
            release_attr(&cid(i)),
            AttributeValue::S(format!("{i:016x}")),
        );
    }
    w.deps()
        .dynamo
        .put_item()
        .table_name(table)
        .set_item(Some(item))
        .send()
        .await
        .unwrap_or_else(|e| {
            panic!(
                "a session at the ceiling of {c}: {:?}",
                e.into_service_error()
            )
        });
    // The last place is taken as any other, then the ceiling answers.
    let r = w.connect(&t, &sid, "oneMoreConnId01=", &shadow).await;
    assert_eq!(r.status_code, 200, "{:?}", r.body);
    let r = w.connect(&t, &sid, "twoMoreConnId02=", &shadow).await;
    assert_eq!(r.status_code, 429, "{:?}", r.body);
    assert!(
        body_json(&r)["detail"]
            .as_str()
            .unwrap_or("")
            .contains("session"),
        "{:?}",
        r.body
    );
    let held = w.session(&t, &sid).await.unwrap().connection_ids.len() as u64;
    assert_eq!(held, MAX_CONNECTIONS_PER_SESSION);
    assert_eq!(
        w.count(&t).await.unwrap_or(0),
        1,
        "the admitted one counted, the refused one given back"
    );
    // Below the ceiling a shadow tenant's would-refused connect is admitted, as before.
    w.put_session(&t, "roomy").await;
    for cid in ["a", "b", "c"] {
        assert_eq!(w.connect(&t, "roomy", cid, &shadow).await.status_code, 200);
    }
}
