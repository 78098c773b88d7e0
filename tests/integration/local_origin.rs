//! The local stack refuses what a web page the developer visits could send it: a request carrying
//! another site's `Origin` (a `fetch` or a form to `http://127.0.0.1:3000`, a `new WebSocket` to
//! `ws://127.0.0.1:3001`), and a `POST` that is not `application/json` (a `text/plain` or form
//! `POST` is a "simple" request a browser sends cross-site without asking first). Requests without
//! `Origin` (curl, backends, the functions' SDK) and the dashboard's own page keep working. Real
//! HTTP and WebSocket clients against the running stack.

use serde_json::json;
use shared::tenant::ConnectAuth;
use tokio_tungstenite::tungstenite::client::IntoClientRequest;
use turnstile_tests::http::{request_exact, Reply};

use crate::local_stack::{limits, refused_status, Local, Socket};

const FOREIGN: &str = "http://evil.example";

/// An EMR cluster `j-1` ending: what `/events` hands the token remover.
fn ended() -> String {
    json!({"Entries": [{"Source": "aws.emr", "DetailType": "EMR Cluster State Change",
        "Detail": "{\"state\":\"TERMINATED\",\"clusterId\":\"j-1\"}"}]})
    .to_string()
}

async fn send(method: &str, url: &str, headers: &[(&str, &str)], body: Option<&str>) -> Reply {
    request_exact(method, url, headers, body).await.unwrap()
}

/// Opens a socket on `tenant`'s session `s1` (a `connectAuth=none` tenant: the ids suffice),
/// sending `origin` as a browser does.
async fn open(
    l: &Local,
    tenant: &str,
    origin: Option<&str>,
) -> Result<Socket, tokio_tungstenite::tungstenite::Error> {
    let url = format!(
        "{}/?tenantId={tenant}&sessionId=s1",
        l.stack().endpoints.ws_url()
    );
    let mut req = url.into_client_request()?;
    if let Some(o) = origin {
        req.headers_mut().insert("Origin", o.parse().unwrap());
    }
    tokio_tungstenite::connect_async(req)
        .await
        .map(|(ws, _)| ws)
}

fn is_json_refusal(r: &Reply, status: u16) -> bool {
    r.status == status
        && r.headers
            .get("content-type")
            .is_some_and(|c| c.contains("json"))
        && r.json()["message"].is_string()
}

#[tokio::test]
async fn other_origins_and_posts_that_are_not_json_are_refused() {
    let l = Local::start_without_ttl().await;
    let limiter = shared::reservation::NonFungibleLimiter::from_deps(&l.env.deps).unwrap();
    let r = limiter.get_reservation("emr", "acct", 5).await.unwrap();
    r.create_token("j-1").await.unwrap();
    l.tenant(
        "open",
        limits(10, 5, 100, 300).with_connect_auth(ConnectAuth::None),
    )
    .await;
    l.put_session("open", "s1").await;
    let eps = l.stack().endpoints.clone();
    let http = eps.http_url();
    let events = format!("{http}/events");
    let ticket = format!("{http}/session/ticket?tenantId=open&sessionId=s1");
    let session = format!("{http}/session?tenantId=open&sessionId=s1");
    let json_type = ("Content-Type", "application/json");

    // A page on another site: a text/plain POST needs no preflight, so it would reach the handler.
    let plain = ("Content-Type", "text/plain;charset=UTF-8");
    let foreign = ("Origin", FOREIGN);
    let body = ended();
    let r = send("POST", &events, &[foreign, plain], Some(&body)).await;
    assert!(
        is_json_refusal(&r, 403),
        "POST /events from {FOREIGN}: {r:?}"
    );
    assert_eq!(
        limiter.list("emr", "acct").await.unwrap().len(),
        1,
        "the token remover did not run"
    );
    for (method, url) in [
        ("POST", ticket.as_str()),
        ("PUT", session.as_str()),
        ("GET", session.as_str()),
        ("DELETE", session.as_str()),
        ("GET", &format!("{http}/dashboard/state")),
        ("POST", &format!("{http}/v1/limits/spend")),
    ] {
        for origin in [FOREIGN, "null", "http://127.0.0.1:1"] {
            let r = send(method, url, &[("Origin", origin), json_type], Some("{}")).await;
            assert!(
                is_json_refusal(&r, 403),
                "{method} {url} from {origin}: {r:?}"
            );
        }
    }
    // POSTs must say they carry JSON, Origin or not: text/plain and curl -d's form type are 415.
    for content_type in [
        None,
        Some("text/plain"),
        Some("application/x-www-form-urlencoded"),
        Some("multipart/form-data; boundary=x"),
        Some("application/jsonp"),
    ] {
        let headers: Vec<(&str, &str)> = content_type
            .map(|c| ("Content-Type", c))
            .into_iter()
            .collect();
        for url in [&events, &ticket] {
            let r = send("POST", url, &headers, Some(&body)).await;
            assert!(is_json_refusal(&r, 415), "{content_type:?} to {url}: {r:?}");
        }
    }
    assert_eq!(limiter.list("emr", "acct").await.unwrap().len(), 1);

    // What keeps working: no Origin (curl, backends) or the stack's own, with JSON.
    let dashboard = format!("http://localhost:{}", eps.http_addr.port());
    for (origin, content_type) in [
        (None, "application/json"),
        (Some(http.as_str()), "application/json"),
        (Some(dashboard.as_str()), "Application/JSON; charset=utf-8"),
    ] {
        let mut headers = vec![("Content-Type", content_type)];
        headers.extend(origin.map(|o| ("Origin", o)));
        let r = send("POST", &ticket, &headers, None).await;
        assert_eq!(r.status, 409, "open connects without tickets: {r:?}");
        let r = send("GET", &session, &headers, None).await;
        assert_eq!(r.status, 200, "{r:?}");
    }
    let r = send("POST", &events, &[json_type], Some(&body)).await;
    assert_eq!(r.status, 200, "{r:?}");
    assert_eq!(limiter.list("emr", "acct").await.unwrap().len(), 0);
    // PUT and DELETE take no content type (their parameters are in the query).
    assert_eq!(send("PUT", &session, &[], None).await.status, 200);
    assert_eq!(send("DELETE", &session, &[], None).await.status, 200);
    l.shutdown().await;
}

/// Another site's page may not open a socket, even on a tenant whose sessions need no ticket; the
/// stack's own HTTP origin (the dashboard) and clients that send no `Origin` may.
#[tokio::test]
async fn a_page_on_another_site_cannot_open_a_websocket() {
    let l = Local::start_without_ttl().await;
    l.tenant(
        "open",
        limits(10, 5, 100, 300).with_connect_auth(ConnectAuth::None),
    )
    .await;
    l.put_session("open", "s1").await;
    let eps = l.stack().endpoints.clone();
    let http = eps.http_url();
    let ws_own = format!("http://{}", eps.ws_addr);
    let refused = open(&l, "open", Some(FOREIGN)).await.unwrap_err();
    assert_eq!(refused_status(&refused), Some(403), "{refused}");
    assert_eq!(
        refused_status(&open(&l, "open", Some("null")).await.unwrap_err()),
        Some(403)
    );
    let dashboard = format!("http://localhost:{}", eps.http_addr.port());
    let mut sockets = Vec::new();
    for origin in [
        Some(http.as_str()),
        Some(dashboard.as_str()),
        Some(ws_own.as_str()),
        None,
    ] {
        let ws = open(&l, "open", origin).await;
        assert!(ws.is_ok(), "origin {origin:?}: {:?}", ws.err());
        sockets.push(ws.unwrap());
    }
    drop(sockets);
    l.shutdown().await;
}
