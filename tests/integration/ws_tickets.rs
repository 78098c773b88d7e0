//! Connect tickets (decision 2100): who may join a session. Every bad ticket is refused by
//! the authorizer with no DynamoDB write (most with no call at all); a good one admits within the
//! budgets (`$connect` one write more, for the ticket's use: decision 3607); a ticket admits only
//! the connects it was minted for, and `?ticket=` only where the tenant opts in; rotation keeps
//! both live keys and drops the retired one; sessions get random ids; no ticket or session id
//! reaches a log in clear.

use std::sync::{Arc, Mutex};
use std::time::Duration;

use authorizer::Decision;
use shared::clock::Clock;
use shared::ids::{SessionId, TenantId};
use shared::tenant::ConnectAuth;
use shared::ticket::{self, KeySet};
use turnstile_bench::samples;

use crate::ws_support::*;

const T: &str = "tenant-1";

fn denied(d: &Decision, needle: &str) -> bool {
    matches!(d, Decision::Deny(reason) if reason.contains(needle))
}

/// Runs the authorizer on `query` and returns its decision and the calls it made, by operation.
async fn authorize_query(
    w: &World,
    query: &[(&str, &str)],
) -> (Decision, std::collections::BTreeMap<String, u64>, f64) {
    w.env.counter.reset();
    let r = authorizer::handle(w.deps(), &w.authorizer, authorizer_event(query))
        .await
        .unwrap();
    (
        authorizer::decision(&r),
        w.env.counter.by_operation(),
        w.env.counter.units().write,
    )
}

fn claims(w: &World, t: &str, s: &str, nonce: &str, ttl: i64) -> ticket::Claims {
    ticket::Claims {
        tenant: TenantId::parse(t).unwrap(),
        session: SessionId::parse(s).unwrap(),
        nonce: nonce.into(),
        expires_at: w.env.clock.now().as_secs() + ttl,
        subject: None,
        id: ticket::new_id().unwrap(),
        connects: ticket::DEFAULT_CONNECTS,
    }
}

async fn nonce_of(w: &World, t: &str, s: &str) -> String {
    w.session_nonce(t, s).await.expect("the session exists")
}

#[tokio::test]
async fn every_bad_ticket_is_refused_with_no_write_and_most_with_no_call() {
    let w = World::new().await;
    // The query form (this tenant takes it): the subprotocol form is read the same way.
    w.put_tenant(T, SMALL.with_ticket_in_query(true)).await;
    w.put_tenant("tenant-2", SMALL).await;
    w.put_session(T, "s1").await;
    w.put_session(T, "s2").await;
    w.put_session("tenant-2", "s1").await;
    let keys = test_keys();
    let nonce = nonce_of(&w, T, "s1").await;
    let good = ticket::mint(&keys, &claims(&w, T, "s1", &nonce, 60));
    let other_key = KeySet::generate("sample").unwrap();
    let forged = ticket::mint(&other_key, &claims(&w, T, "s1", &nonce, 60));
    let expired = ticket::mint(&keys, &claims(&w, T, "s1", &nonce, -30));
    let other_session = w.ticket(T, "s2").await;
    let other_tenant = w.ticket("tenant-2", "s1").await;
    let retired_key = KeySet::generate("k9").unwrap();
    let retired = ticket::mint(&retired_key, &claims(&w, T, "s1", &nonce, 60));
    let mut tampered = good.clone();
    tampered.replace_range(20..21, if &good[20..21] == "A" { "B" } else { "A" });
    let ids = [("tenantId", T), ("sessionId", "s1")];
    let cases: Vec<(Vec<(&str, &str)>, &str)> = vec![
        (ids.to_vec(), "connects with a ticket"),
        (
            vec![ids[0], ids[1], ("ticket", "not-a-ticket")],
            "malformed",
        ),
        (vec![ids[0], ids[1], ("ticket", "")], "malformed"),
        (vec![ids[0], ids[1], ("ticket", &tampered)], "signature"),
        (
            vec![ids[0], ids[1], ("ticket", &expired)],
            "expired 30 s ago",
        ),
        (vec![ids[0], ids[1], ("ticket", &forged)], "signature"),
        (vec![ids[0], ids[1], ("ticket", &retired)], "\"k9\""),
        (
            vec![ids[0], ids[1], ("ticket", &other_session)],
            "not the sessionId the query names",
        ),
        (
            vec![ids[0], ids[1], ("ticket", &other_tenant)],
            "not the tenantId the query names",
        ),
        (
            vec![ids[0], ids[1], ("ticket", &good), ("token", "a.b.c")],
            "2 credentials",
        ),
    ];
    // Warm the tenant cache, so only a case's own calls are counted.
    assert_eq!(w.authorize(T, "s1").await, Decision::Allow);
    for (query, why) in &cases {
        let (d, calls, wcu) = authorize_query(&w, query).await;
        assert!(denied(&d, why), "{why}: {d:?}");
        // Decided on the ticket (or its absence) and the cached tenant: no call, no unit.
        assert!(calls.is_empty() && wcu == 0.0, "{why}: {calls:?} {wcu} WCU");
    }
    // Replayed after the session was deleted: the ticket verifies, the session read refuses it;
    // and after a re-create under the same id, the new session's nonce refuses it.
    let (status, _) = w
        .session_call("DELETE", &[("tenantId", T), ("sessionId", "s1")], None)
        .await;
    assert_eq!(status, 200);
    let replay = [ids[0], ids[1], ("ticket", good.as_str())];
    let (d, calls, wcu) = authorize_query(&w, &replay).await;
    assert!(denied(&d, "does not exist"), "{d:?}");
    assert_eq!(calls, [("BatchGetItem".to_string(), 1)].into());
    assert_eq!(wcu, 0.0);
    w.put_session(T, "s1").await;
    let (d, calls, wcu) = authorize_query(&w, &replay).await;
    assert!(denied(&d, "was deleted since it was issued"), "{d:?}");
    assert_eq!(calls, [("BatchGetItem".to_string(), 1)].into());
    assert_eq!(wcu, 0.0);
    // And $connect, given the old ticket's nonce (an authorizer that read the old row), refuses to
    // join the new incarnation: nothing is left reserved.
    let mut ev = ws_event("connect/connect.json", T, "s1", "c-old", Some(&SMALL));
    ev.request_context
        .authorizer
        .fields
        .insert("sessionNonce".into(), serde_json::json!(nonce));
    let r = connect::handle(w.deps(), &w.connect, ev).await.unwrap();
    assert_eq!(r.status_code, 404, "{:?}", r.body);
    assert_eq!(
        w.count(T).await.unwrap_or(0),
        0,
        "the reservation was undone"
    );
    assert!(w.session(T, "s1").await.unwrap().connection_ids.is_empty());
}

#[tokio::test]
async fn a_valid_ticket_admits_within_the_budgets_and_carries_its_subject() {
    let w = World::new().await;
    w.put_tenant(T, SMALL).await;
    // PUT without a sessionId: a random id of 128 bits, and a ticket for it.
    let (status, body) = w
        .session_call("PUT", &[("tenantId", T)], Some(r#"{"subject":"user-42"}"#))
        .await;
    assert_eq!(status, 200, "{body}");
    let s: serde_json::Value = serde_json::from_str(&body).unwrap();
    let sid = s["sessionId"].as_str().unwrap().to_string();
    assert_eq!(sid.len(), 22, "16 random bytes, base64url: {sid}");
    assert_eq!(s["connectAuth"], "ticket");
    let tk = s["ticket"].as_str().unwrap().to_string();
    let exp = s["ticketExpiresAt"].as_i64().unwrap();
    assert_eq!(exp, w.env.clock.now().as_secs() + 60);
    // A second PUT without an id is another session.
    let (_, again) = w.session_call("PUT", &[("tenantId", T)], None).await;
    assert!(!again.contains(&sid));

    // Authorizer: 1 GetItem (cold tenant) + 1 BatchGetItem, then 1 BatchGetItem warm; the ticket
    // comes in the subprotocol list, as a browser sends it.
    let mut ev = authorizer_event(&[]);
    ev.headers.insert(
        "sec-websocket-protocol",
        format!("turnstile, {tk}").parse().unwrap(),
    );
    w.env.counter.reset();
    let r = authorizer::handle(w.deps(), &w.authorizer, ev.clone())
        .await
        .unwrap();
    assert_eq!(authorizer::decision(&r), Decision::Allow);
    assert_eq!(
        w.env.counter.total(),
        2,
        "{:?}",
        w.env.counter.by_operation()
    );
    assert_eq!(r.context["subject"], "user-42");
    assert_eq!(r.context["sessionId"], sid.as_str());
    w.env.counter.reset();
    let r = authorizer::handle(w.deps(), &w.authorizer, ev)
        .await
        .unwrap();
    assert_eq!(authorizer::decision(&r), Decision::Allow);
    assert_eq!(
        w.env.counter.by_operation(),
        [("BatchGetItem".to_string(), 1)].into()
    );

    // $connect with the authorizer's context: 3 UpdateItems, 3 WCU (the ticket's use, the tenant,
    // the session), and the subprotocol answered.
    let mut ev = ws_event("connect/connect.json", T, &sid, "c1", Some(&SMALL));
    ev.request_context.authorizer.fields = r
        .context
        .as_object()
        .unwrap()
        .iter()
        .map(|(k, v)| (k.clone(), v.clone()))
        .collect();
    w.env.counter.reset();
    let c = connect::handle(w.deps(), &w.connect, ev).await.unwrap();
    assert_eq!(c.status_code, 200, "{:?}", c.body);
    assert_eq!(
        w.env.counter.by_operation(),
        [("UpdateItem".to_string(), 3)].into()
    );
    assert_eq!(w.env.counter.units().write, 3.0);
    assert_eq!(
        c.headers
            .get("sec-websocket-protocol")
            .and_then(|v| v.to_str().ok()),
        Some("turnstile")
    );

    // POST /session/ticket: a fresh ticket for a live session (1 GetItem warm); 404 once deleted.
    let post = session_event(
        "POST",
        "/session/ticket",
        &[("tenantId", T), ("sessionId", &sid)],
        None,
    );
    w.env.counter.reset();
    let (status, body) = w.session_raw(post.clone()).await;
    assert_eq!(status, 200, "{body}");
    assert_eq!(
        w.env.counter.by_operation(),
        [("GetItem".to_string(), 1)].into()
    );
    let fresh: serde_json::Value = serde_json::from_str(&body).unwrap();
    assert!(ticket::verify(
        &test_keys(),
        fresh["ticket"].as_str().unwrap(),
        w.env.clock.now().as_secs()
    )
    .is_ok());
    let (status, _) = w
        .session_call("DELETE", &[("tenantId", T), ("sessionId", &sid)], None)
        .await;
    assert_eq!(status, 200);
    let (status, body) = w.session_raw(post).await;
    assert_eq!(status, 404, "{body}");
}

#[tokio::test]
async fn tenants_choose_their_connect_authentication() {
    let w = World::new().await;
    let open = SMALL.with_connect_auth(ConnectAuth::None);
    let jwt = SMALL.with_connect_auth(ConnectAuth::Jwt);
    w.put_tenant("open", open).await;
    w.put_tenant("oidc", jwt).await;
    w.put_session("open", "s1").await;
    w.put_session("oidc", "s1").await;
    // `none`: the AWS sample's anonymous connect, and a ticket is taken too.
    let (d, _, _) = authorize_query(&w, &[("tenantId", "open"), ("sessionId", "s1")]).await;
    assert_eq!(d, Decision::Allow);
    assert_eq!(w.authorize("open", "s1").await, Decision::Allow);
    // `jwt`: a ticket is not what this tenant takes; no token configured here is refused too.
    assert!(denied(&w.authorize("oidc", "s1").await, "OIDC token"));
    // The session API tells a ticket-less tenant's callers so, and mints no ticket for them.
    let (status, body) = w
        .session_call("PUT", &[("tenantId", "oidc"), ("sessionId", "s2")], None)
        .await;
    assert_eq!(status, 200);
    assert!(
        body.contains(r#""connectAuth":"jwt""#) && !body.contains("ticket\""),
        "{body}"
    );
    let post = session_event(
        "POST",
        "/session/ticket",
        &[("tenantId", "oidc"), ("sessionId", "s2")],
        None,
    );
    let (status, body) = w.session_raw(post).await;
    assert_eq!(status, 409, "{body}");
}

/// Rotation through the key set's three steps, read from a Secrets Manager secret as deployed:
/// each function re-reads it after its cache period, tickets of both live keys pass, the retired
/// key's are refused, and the warm path reads the secret once per period, not per request.
#[tokio::test]
async fn key_rotation_admits_both_live_keys_and_refuses_the_retired_one() {
    let w = World::new().await;
    // Sessions that outlive the rotation's cache periods.
    w.put_tenant(T, shared::tenant::Limits::example(60, 5, 2, 10, 86_400, 60))
        .await;
    w.put_session(T, "s1").await;
    let sm = turnstile_local::secrets::SecretsManager::start(std::net::SocketAddr::from((
        [127, 0, 0, 1],
        0,
    )))
    .await
    .unwrap();
    let old = KeySet::generate("k1").unwrap();
    sm.put("keys", &old.to_json());
    let sm_url = sm.url();
    let deps = shared::Deps {
        vars: shared::config::Vars::from_pairs([
            ("TURNSTILE_TENANT_CACHE_SECS", "60"),
            ("TURNSTILE_TICKET_KEYS_SECRET", "keys"),
            ("TURNSTILE_TICKET_KEYS_CACHE_SECS", "300"),
            ("AWS_ENDPOINT_URL_SECRETS_MANAGER", sm_url.as_str()),
        ]),
        ..w.deps().clone()
    };
    let auth = authorizer::init(&deps).await.unwrap();
    assert_eq!(sm.reads(), 1, "read once at start-up");
    let nonce = nonce_of(&w, T, "s1").await;
    let decide = |keys: &KeySet| {
        let tk = ticket::mint(keys, &claims(&w, T, "s1", &nonce, 3600));
        let mut ev = authorizer_event(&[]);
        let protocols = format!("turnstile, {tk}");
        ev.headers
            .insert("sec-websocket-protocol", protocols.parse().unwrap());
        let (deps, auth) = (w.deps(), &auth);
        async move { authorizer::decision(&authorizer::handle(deps, auth, ev).await.unwrap()) }
    };
    for _ in 0..20 {
        assert_eq!(decide(&old).await, Decision::Allow);
    }
    assert_eq!(sm.reads(), 1, "the warm path reads no secret");
    // Step 1: a new key staged (verifies; the old one still signs).
    let staged = old.with_new_key().unwrap();
    sm.put("keys", &staged.to_json());
    let new_only = KeySet::new(vec![staged.get("k2").unwrap().clone()]).unwrap();
    // Not yet re-read: the new key is unknown for up to one cache period.
    assert!(denied(&decide(&new_only).await, "\"k2\""));
    w.env.clock.advance(Duration::from_secs(301));
    assert_eq!(decide(&new_only).await, Decision::Allow);
    assert_eq!(sm.reads(), 2);
    // Step 2: promoted (the new key signs; old tickets still pass).
    let promoted = staged.promoted();
    sm.put("keys", &promoted.to_json());
    w.env.clock.advance(Duration::from_secs(301));
    assert_eq!(decide(&promoted).await, Decision::Allow);
    assert_eq!(decide(&old).await, Decision::Allow);
    // Step 3: the old key retired: its tickets are refused, the new key's pass.
    sm.put("keys", &promoted.retired().to_json());
    w.env.clock.advance(Duration::from_secs(301));
    assert!(denied(
        &decide(&old).await,
        "\"k1\", which is not a live key"
    ));
    assert_eq!(decide(&promoted).await, Decision::Allow);
    // A failed re-read keeps the last set (logged) rather than refusing every ticket.
    sm.put("keys", "not json");
    w.env.clock.advance(Duration::from_secs(301));
    assert_eq!(decide(&promoted).await, Decision::Allow);
    // A missing secret fails the start-up, naming it.
    let missing = shared::Deps {
        vars: shared::config::Vars::from_pairs([
            ("TURNSTILE_TICKET_KEYS_SECRET", "no-such-secret"),
            ("AWS_ENDPOINT_URL_SECRETS_MANAGER", sm_url.as_str()),
        ]),
        ..deps.clone()
    };
    let err = authorizer::init(&missing).await.unwrap_err().to_string();
    assert!(err.contains("no-such-secret"), "{err}");
}

/// A key set whose re-reads keep failing is used for at most `TURNSTILE_TICKET_KEYS_MAX_STALE_SECS`
/// past its cache period: a retired or compromised key must not stay valid in a warm container
/// forever. Past that age every ticket is refused (fail closed: the authorizer errs, API Gateway
/// answers 500) until a read succeeds, and the secret is retried every 30 s, not per request.
#[tokio::test]
async fn a_stale_key_set_is_refused_after_its_maximum_age() {
    let w = World::new().await;
    // The ticket rides in the query here (the tenant opts in): the transport is not what is tested.
    w.put_tenant(
        T,
        shared::tenant::Limits::example(60, 5, 2, 10, 86_400, 60).with_ticket_in_query(true),
    )
    .await;
    w.put_session(T, "s1").await;
    let sm = turnstile_local::secrets::SecretsManager::start(std::net::SocketAddr::from((
        [127, 0, 0, 1],
        0,
    )))
    .await
    .unwrap();
    let keys = KeySet::generate("k1").unwrap();
    sm.put("keys", &keys.to_json());
    let sm_url = sm.url();
    let deps = shared::Deps {
        vars: shared::config::Vars::from_pairs([
            ("TURNSTILE_TENANT_CACHE_SECS", "60"),
            ("TURNSTILE_TICKET_KEYS_SECRET", "keys"),
            ("TURNSTILE_TICKET_KEYS_CACHE_SECS", "300"),
            ("TURNSTILE_TICKET_KEYS_MAX_STALE_SECS", "900"),
            ("AWS_ENDPOINT_URL_SECRETS_MANAGER", sm_url.as_str()),
        ]),
        ..w.deps().clone()
    };
    let auth = authorizer::init(&deps).await.unwrap();
    let nonce = nonce_of(&w, T, "s1").await;
    let tk = ticket::mint(&keys, &claims(&w, T, "s1", &nonce, 86_000));
    let attempt = || {
        let ev = authorizer_event(&[("ticket", &tk)]);
        let (deps, auth) = (w.deps(), &auth);
        async move {
            authorizer::handle(deps, auth, ev)
                .await
                .map(|r| authorizer::decision(&r))
        }
    };
    assert_eq!(attempt().await.unwrap(), Decision::Allow);
    // From now on every read of the secret fails.
    sm.put("keys", "not json");
    w.env.clock.advance(Duration::from_secs(301));
    assert_eq!(
        attempt().await.unwrap(),
        Decision::Allow,
        "stale, within its age"
    );
    assert_eq!(sm.reads(), 2);
    // Read at 0 s, due at 300 s: usable until 300 + 900 = 1200 s.
    w.env.clock.advance(Duration::from_secs(1199 - 301));
    assert_eq!(
        attempt().await.unwrap(),
        Decision::Allow,
        "1199 s after the read"
    );
    w.env.clock.advance(Duration::from_secs(2));
    let refused = attempt().await;
    assert!(
        refused.is_err(),
        "1201 s after the last good read, tickets must be refused: {refused:?}"
    );
    let err = refused.unwrap_err().to_string();
    assert!(err.contains("keys") && err.contains("900"), "{err}");
    // Refused without a read per request: the secret is tried again 30 s later.
    let reads = sm.reads();
    assert!(attempt().await.is_err());
    assert_eq!(sm.reads(), reads, "no read within the retry interval");
    // The secret readable again: the next read restores service.
    sm.put("keys", &keys.to_json());
    w.env.clock.advance(Duration::from_secs(31));
    assert_eq!(attempt().await.unwrap(), Decision::Allow);
    assert_eq!(sm.reads(), reads + 1);
}

/// `TURNSTILE_TICKET_KEYS_MAX_STALE_SECS`: 15 minutes unless set, 0 (no stale use) to a day.
#[test]
fn the_maximum_stale_age_defaults_to_fifteen_minutes_and_is_bounded() {
    use shared::ticket::source::{KeyConfig, MAX_STALE_VAR};
    let with = |extra: &[(&str, &str)]| {
        let mut pairs = vec![("TURNSTILE_TICKET_KEYS_SECRET", "keys")];
        pairs.extend_from_slice(extra);
        KeyConfig::from_vars(&shared::config::Vars::from_pairs(pairs))
    };
    let stale = |c: KeyConfig| match c {
        KeyConfig::Secret { max_stale, .. } => max_stale,
        other => panic!("{other:?}"),
    };
    assert_eq!(stale(with(&[]).unwrap()), Duration::from_secs(900));
    assert_eq!(
        stale(with(&[(MAX_STALE_VAR, "0")]).unwrap()),
        Duration::ZERO
    );
    assert_eq!(
        stale(with(&[(MAX_STALE_VAR, "86400")]).unwrap()),
        Duration::from_secs(86_400)
    );
    for bad in ["86401", "-1", "forever"] {
        let e = with(&[(MAX_STALE_VAR, bad)]).unwrap_err().to_string();
        assert!(e.contains(MAX_STALE_VAR), "{bad}: {e}");
    }
}

/// A `tracing` writer into a buffer, for the log assertions below.
#[derive(Clone, Default)]
struct Captured(Arc<Mutex<Vec<u8>>>);

impl std::io::Write for Captured {
    fn write(&mut self, buf: &[u8]) -> std::io::Result<usize> {
        if let Ok(mut v) = self.0.lock() {
            v.extend_from_slice(buf);
        }
        Ok(buf.len())
    }
    fn flush(&mut self) -> std::io::Result<()> {
        Ok(())
    }
}

impl<'a> tracing_subscriber::fmt::MakeWriter<'a> for Captured {
    type Writer = Captured;
    fn make_writer(&'a self) -> Captured {
        self.clone()
    }
}

#[tokio::test]
async fn neither_a_ticket_nor_a_session_id_is_logged_in_clear() {
    let w = World::new().await;
    w.put_tenant(
        T,
        SMALL.with_enforcement(shared::tenant::Enforcement::Shadow),
    )
    .await;
    let sid = "secret-session-name-1";
    w.put_session(T, sid).await;
    let good = w.ticket(T, sid).await;
    let forged = ticket::mint(
        &KeySet::generate("sample").unwrap(),
        &claims(&w, T, sid, "n", 60),
    );
    // Each log call site registers itself with `tracing` the first time it runs; one first run
    // on another test's thread while this test installs its subscriber can leave a site's
    // interest cached as "never" (seen: the denials missing from the capture). Running the
    // authorizer's paths once before installing the subscriber registers their sites here, and
    // installing it then rebuilds every registered site's interest.
    for tk in [good.as_str(), forged.as_str(), "tst1.x.y.z"] {
        authorize_query(&w, &[("tenantId", T), ("sessionId", sid), ("ticket", tk)]).await;
    }
    let logs = Captured::default();
    let subscriber = tracing_subscriber::fmt()
        .with_writer(logs.clone())
        .with_max_level(tracing::Level::DEBUG)
        .finish();
    let _guard = tracing::subscriber::set_default(subscriber);
    for tk in [good.as_str(), forged.as_str(), "tst1.x.y.z"] {
        authorize_query(&w, &[("tenantId", T), ("sessionId", sid), ("ticket", tk)]).await;
    }
    authorize_query(&w, &[("tenantId", T), ("sessionId", sid)]).await;
    for i in 0..3 {
        w.connect(T, sid, &format!("c{i}"), &SMALL).await;
    }
    w.disconnect(T, sid, "c0").await;
    w.session_call("DELETE", &[("tenantId", T), ("sessionId", sid)], None)
        .await;
    let text = String::from_utf8(logs.0.lock().unwrap().clone()).unwrap();
    assert!(
        text.contains("authorizer: deny"),
        "the denials were logged: {text}"
    );
    assert!(text.contains(&ticket::fingerprint(sid)), "{text}");
    for secret in [good.as_str(), forged.as_str(), sid] {
        assert!(!text.contains(secret), "{secret:?} in the logs:\n{text}");
    }
    // The signature part alone neither.
    assert!(!text.contains(good.rsplit('.').next().unwrap()));
}

/// The sample events' ticket verifies with the sample key set and names the sample session.
#[test]
fn the_sample_ticket_is_the_sample_sessions() {
    let ev: aws_lambda_events::apigw::ApiGatewayCustomAuthorizerRequestTypeRequest =
        typed(sample("authorizer/connect-request.json"));
    let p = ticket::presented::presented(&ev).unwrap();
    let Some(ticket::Credential::Ticket(tk)) = p.credential else {
        panic!("the sample carries a ticket: {p:?}");
    };
    let c = ticket::verify(&test_keys(), tk, 1_700_000_000).unwrap();
    assert_eq!(
        (c.tenant.as_str(), c.session.as_str(), c.nonce.as_str()),
        (samples::TENANT, samples::SESSION, samples::NONCE)
    );
}

/// Sets one attribute of a tenant row, as `turnstile tenant put` stores the setting.
async fn set_tenant_attr(
    w: &World,
    t: &str,
    name: &str,
    value: aws_sdk_dynamodb::types::AttributeValue,
) {
    w.deps()
        .dynamo
        .update_item()
        .table_name(&w.deps().tables.tenants)
        .key("tenantId", shared::dynamo::item::s(t))
        .update_expression("SET #a = :v")
        .expression_attribute_names("#a", name)
        .expression_attribute_values(":v", value)
        .send()
        .await
        .unwrap();
}

/// The authorizer on `tk` presented in the subprotocol list (as a browser sends it): the context
/// of its Allow, `None` for a Deny.
async fn allow(w: &World, tk: &str) -> Option<serde_json::Map<String, serde_json::Value>> {
    let mut ev = authorizer_event(&[]);
    ev.headers.insert(
        "sec-websocket-protocol",
        format!("turnstile, {tk}").parse().unwrap(),
    );
    let r = authorizer::handle(w.deps(), &w.authorizer, ev)
        .await
        .unwrap();
    (authorizer::decision(&r) == Decision::Allow).then(|| r.context.as_object().unwrap().clone())
}

/// `$connect` for `cid` with an authorizer's context: its status, calls and write units.
async fn connect_as(
    w: &World,
    context: &serde_json::Map<String, serde_json::Value>,
    sid: &str,
    cid: &str,
) -> (i64, u64, f64) {
    let mut ev = ws_event("connect/connect.json", T, sid, cid, None);
    ev.request_context.authorizer.fields = context
        .iter()
        .map(|(k, v)| (k.clone(), v.clone()))
        .collect();
    w.env.counter.reset();
    let c = connect::handle(w.deps(), &w.connect, ev).await.unwrap();
    (
        c.status_code,
        w.env.counter.total(),
        w.env.counter.units().write,
    )
}

/// The authorizer on `tk`, then, when it allows, `$connect` for `cid` with its context (a Deny:
/// 403, as API Gateway answers it).
async fn connect_with(w: &World, tk: &str, sid: &str, cid: &str) -> (i64, u64, f64) {
    match allow(w, tk).await {
        Some(context) => connect_as(w, &context, sid, cid).await,
        None => (403, 0, 0.0),
    }
}

/// Whoever holds a ticket (a leaked URL) could take every `connectionsPerSession`
/// slot for its minute of life. A ticket now admits as many `$connect`s as it was minted for: 1
/// for a browser's (a JWT caller's), up to `connectionsPerSession` when a backend asks.
#[tokio::test]
async fn a_ticket_admits_only_the_connects_it_was_minted_for() {
    let w = World::new().await;
    let roomy = shared::tenant::Limits::example(60, 30, 5, 10, 200, 60);
    w.put_tenant(T, roomy).await;
    let api = session_api::init(&w.function_deps(&[("TURNSTILE_SESSION_API_AUTH", "jwt")]))
        .await
        .unwrap();
    let claims =
        serde_json::json!({"jwt": {"claims": {"sub": "user-1", "tenantId": T}, "scopes": null}});
    let mut put = serde_json::to_value(session_event("PUT", "/session", &[], None)).unwrap();
    put["requestContext"]["authorizer"] = claims;
    let r = session_api::handle(w.deps(), &api, typed(put))
        .await
        .unwrap();
    let body = shared::edge::respond::body_text(&r.body);
    assert_eq!(r.status_code, 200, "{body}");
    let s: serde_json::Value = serde_json::from_str(&body).unwrap();
    let (sid, tk) = (
        s["sessionId"].as_str().unwrap(),
        s["ticket"].as_str().unwrap(),
    );
    // A browser's ticket: one connect. The admitted one costs 3 UpdateItem, 3 WCU (the ticket's
    // use, the tenant, the session).
    let (status, calls, wcu) = connect_with(&w, tk, sid, "c1").await;
    assert_eq!(status, 200);
    eprintln!("TICKET_USE connect admitted: {calls} calls, {wcu} WCU");
    assert_eq!((calls, wcu), (3, 3.0));
    let (status, calls, _) = connect_with(&w, tk, sid, "c2").await;
    assert_eq!(status, 403, "a second connect on a one-connect ticket");
    assert_eq!(calls, 1, "refused by the ticket's use alone");
    // API Gateway's repeated `$connect` of the same connection is still the one admitted.
    assert_eq!(connect_with(&w, tk, sid, "c1").await.0, 200);
    assert_eq!(w.session(T, sid).await.unwrap().connection_ids, ["c1"]);

    // A backend asks for 3: the fourth connect is refused though the session has room for 5.
    let post = |connects: &str| {
        session_event(
            "POST",
            "/session/ticket",
            &[("tenantId", T), ("sessionId", sid), ("connects", connects)],
            None,
        )
    };
    let (status, body) = w.session_raw(post("3")).await;
    assert_eq!(status, 200, "{body}");
    let v: serde_json::Value = serde_json::from_str(&body).unwrap();
    let three = v["ticket"].as_str().unwrap().to_string();
    for cid in ["c3", "c4", "c5"] {
        assert_eq!(connect_with(&w, &three, sid, cid).await.0, 200, "{cid}");
    }
    assert_eq!(connect_with(&w, &three, sid, "c6").await.0, 403);
    assert_eq!(w.session(T, sid).await.unwrap().connection_ids.len(), 4);
    // More than connectionsPerSession, or none: refused when minted.
    for bad in ["6", "0", "x"] {
        let (status, body) = w.session_raw(post(bad)).await;
        assert_eq!(status, 400, "connects={bad}: {body}");
    }
    // A browser (JWT caller) cannot ask for more than one.
    let mut ask = serde_json::to_value(session_event(
        "POST",
        "/session/ticket",
        &[("sessionId", sid), ("connects", "2")],
        None,
    ))
    .unwrap();
    ask["requestContext"]["authorizer"] =
        serde_json::json!({"jwt": {"claims": {"sub": "user-1", "tenantId": T}, "scopes": null}});
    let r = session_api::handle(w.deps(), &api, typed(ask))
        .await
        .unwrap();
    assert_eq!(r.status_code, 403, "{:?}", r.body);
    // A refused connect gives its use back: a ticket whose connect met a full session (the
    // authorizer allowed it while there was room) still admits once a slot frees.
    let mint_one = || async {
        let (status, body) = w.session_raw(post("1")).await;
        assert_eq!(status, 200, "{body}");
        let v: serde_json::Value = serde_json::from_str(&body).unwrap();
        v["ticket"].as_str().unwrap().to_string()
    };
    let spare = allow(&w, &mint_one().await)
        .await
        .expect("allowed: a slot is free");
    assert_eq!(
        connect_with(&w, &mint_one().await, sid, "c7").await.0,
        200,
        "the fifth slot"
    );
    let (status, calls, _) = connect_as(&w, &spare, sid, "c8").await;
    assert_eq!(status, 429, "the session is full");
    assert_eq!(
        calls, 5,
        "the ticket's use, tenant, session, undo, the use given back"
    );
    assert_eq!(w.disconnect(T, sid, "c7").await.status_code, 200);
    assert_eq!(connect_as(&w, &spare, sid, "c9").await.0, 200);
    assert_eq!(
        connect_as(&w, &spare, sid, "c10").await.0,
        403,
        "and then it is spent"
    );
}

/// `?ticket=` (kept in URL logs) is taken only from tenants that opt in
/// (`ticketInQuery`); the subprotocol list works for every tenant.
#[tokio::test]
async fn a_ticket_in_the_query_string_is_taken_only_where_the_tenant_opts_in() {
    let w = World::new().await;
    w.put_tenant(T, SMALL).await;
    w.put_tenant("tenant-2", SMALL).await;
    set_tenant_attr(
        &w,
        "tenant-2",
        "ticketInQuery",
        aws_sdk_dynamodb::types::AttributeValue::Bool(true),
    )
    .await;
    w.put_session(T, "s1").await;
    w.put_session("tenant-2", "s1").await;
    let tk = w.ticket(T, "s1").await;
    let (d, calls, _) = authorize_query(&w, &[("ticket", &tk)]).await;
    assert!(denied(&d, "ticketInQuery"), "{d:?}");
    assert!(
        !calls.contains_key("BatchGetItem"),
        "refused before the session read: {calls:?}"
    );
    let mut ev = authorizer_event(&[]);
    ev.headers.insert(
        "sec-websocket-protocol",
        format!("turnstile, {tk}").parse().unwrap(),
    );
    let r = authorizer::handle(w.deps(), &w.authorizer, ev)
        .await
        .unwrap();
    assert_eq!(authorizer::decision(&r), Decision::Allow);
    let tk2 = w.ticket("tenant-2", "s1").await;
    let (d, _, _) = authorize_query(&w, &[("ticket", &tk2)]).await;
    assert_eq!(d, Decision::Allow);
}

/// API Gateway gives `queryStringParameters` one value per name (the last);
/// `?ticket=a&ticket=b` shows only in `multiValueQueryStringParameters`, and is refused there.
#[tokio::test]
async fn a_ticket_named_twice_in_the_multi_value_query_is_refused() {
    let w = World::new().await;
    w.put_tenant(T, SMALL).await;
    set_tenant_attr(
        &w,
        T,
        "ticketInQuery",
        aws_sdk_dynamodb::types::AttributeValue::Bool(true),
    )
    .await;
    w.put_session(T, "s1").await;
    let good = w.ticket(T, "s1").await;
    let mut v = serde_json::to_value(authorizer_event(&[("ticket", &good)])).unwrap();
    v["multiValueQueryStringParameters"] =
        serde_json::json!({ "ticket": ["tst1.other.x.y", good] });
    let ev: aws_lambda_events::apigw::ApiGatewayCustomAuthorizerRequestTypeRequest = typed(v);
    assert_eq!(
        ev.query_string_parameters.all("ticket").map(|v| v.len()),
        Some(1)
    );
    w.env.counter.reset();
    let r = authorizer::handle(w.deps(), &w.authorizer, ev)
        .await
        .unwrap();
    let d = authorizer::decision(&r);
    assert!(denied(&d, "more than once"), "{d:?}");
    assert_eq!(w.env.counter.total(), 0, "refused before any call");
}
