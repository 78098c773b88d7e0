//! The connect-ticket key set's reads, metered: a failed re-read that keeps the previous set, and
//! the refusals once that set is past its maximum age (the template alarms on both).

use std::time::Duration;

use shared::clock::Clock;
use shared::ids::{SessionId, TenantId};
use shared::ticket::{self, KeySet};

use crate::ws_support::{authorizer_event, World};
use crate::{count, invoke, recorder, SERIAL};

#[tokio::test]
async fn failed_key_reads_and_refusals_past_the_maximum_age_are_metered() {
    let _serial = SERIAL.lock().await;
    let w = World::new().await;
    let t = "keys-t";
    w.put_tenant(t, shared::tenant::Limits::example(60, 5, 2, 10, 86_400, 60))
        .await;
    w.put_session(t, "s1").await;
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
    let claims = ticket::Claims {
        tenant: TenantId::parse(t).unwrap(),
        session: SessionId::parse("s1").unwrap(),
        nonce: w.session_nonce(t, "s1").await.unwrap(),
        expires_at: w.env.clock.now().as_secs() + 86_000,
        subject: None,
        id: ticket::new_id().unwrap(),
        connects: ticket::DEFAULT_CONNECTS,
    };
    let tk = ticket::mint(&keys, &claims);
    let attempt = || {
        let ev = authorizer_event(&[("ticket", &tk)]);
        let (deps, auth) = (w.deps(), &auth);
        async move { authorizer::handle(deps, auth, ev).await.is_ok() }
    };
    recorder().take();
    let result = |r: &'static str| [("Result", r)];

    sm.put("keys", "not json");
    w.env.clock.advance(Duration::from_secs(301));
    let mut ok = false;
    let lines = invoke("authorizer", async { ok = attempt().await }).await;
    assert!(ok, "within its maximum age the previous set is used");
    assert_eq!(count(&lines, "TicketKeys", &result("stale")), 1);
    assert_eq!(count(&lines, "TicketKeys", &result("expired")), 0);

    w.env.clock.advance(Duration::from_secs(1201 - 301));
    let lines = invoke("authorizer", async { ok = attempt().await }).await;
    assert!(!ok, "past it, tickets are refused");
    assert_eq!(count(&lines, "TicketKeys", &result("expired")), 1);

    sm.put("keys", &keys.to_json());
    w.env.clock.advance(Duration::from_secs(31));
    let lines = invoke("authorizer", async { ok = attempt().await }).await;
    assert!(ok);
    assert_eq!(count(&lines, "TicketKeys", &result("read")), 1);
    assert_eq!(count(&lines, "TicketKeys", &result("expired")), 0);
}
