//! The local dashboard (`GET /` on the local HTTP API): its JSON state after real WebSocket traffic,
//! and the page itself in a real headless Chromium (driven through chromedriver by fantoccini),
//! updating without a reload while a client connects and is refused.
//!
//! The browser test needs Debian's `chromium` and `chromium-driver`; `make test` installs them
//! (scripts/chromium.sh). `TURNSTILE_TEST_CHROMEDRIVER` names the driver (default: `chromedriver`
//! on PATH); `skip` skips the browser test with a message — `make test` sets it, and says so, only
//! when Chromium cannot be installed on the machine.

use std::process::Stdio;

use fantoccini::{Client, ClientBuilder, Locator};
use serde_json::{json, Value};
use turnstile_tests::http::request;

use crate::local_stack::{eventually, limits, refused_status, Local, Socket};

/// One open socket per session: the second connect to the same session is refused (by the
/// authorizer's pre-check with 403, or by `$connect`'s conditional write with 429).
async fn one_admitted_one_refused(local: &Local, tenant: &str, session: &str) -> (Socket, String) {
    local.put_session(tenant, session).await;
    let before = local.stack().live.ids();
    let first = local.connect(tenant, session).await.expect("first connect");
    let id = local
        .stack()
        .live
        .ids()
        .into_iter()
        .find(|i| !before.contains(i))
        .expect("the admitted socket is live");
    let refused = local
        .connect(tenant, session)
        .await
        .expect_err("over the cap");
    let status = refused_status(&refused);
    assert!(matches!(status, Some(403 | 429)), "{refused:?}");
    (first, id)
}

#[tokio::test]
async fn the_state_shows_tenants_sessions_counters_and_the_last_decisions() {
    let local = Local::start_without_ttl().await;
    local.tenant("acme", limits(10, 1, 100, 300)).await;
    let (_open, id) = one_admitted_one_refused(&local, "acme", "s1").await;
    let url = format!("{}/dashboard/state", local.stack().endpoints.http_url());
    let r = request("GET", &url, None).await.unwrap();
    assert_eq!(r.status, 200, "{}", r.body);
    let state: Value = r.json();

    let tables = &state["tables"];
    assert_eq!(tables["tenants"][0]["tenantId"], "acme");
    assert_eq!(tables["tenants"][0]["connectionsPerSession"], 1);
    let session = &tables["sessions"]["rows"][0];
    assert_eq!(session["sessionId"], "s1");
    assert_eq!(session["connectionIds"], json!([id]));
    assert_eq!(tables["sessions"]["keys"], json!(["tenantId", "sessionId"]));
    let counters = tables["counters"]["rows"].as_array().unwrap();
    let tenant_counter = counters.iter().find(|c| c["key"] == "acme").unwrap();
    assert_eq!(tenant_counter["itemCount"], 1, "{tenant_counter}");
    assert_eq!(state["liveSockets"], json!([id]));

    // Newest first: the refusal (by whichever function refused), then the admission by `$connect`.
    let decisions = state["decisions"].as_array().unwrap();
    let refused: Vec<&Value> = decisions
        .iter()
        .filter(|d| d["outcome"] == "refused")
        .collect();
    assert_eq!(refused.len(), 1, "{decisions:#?}");
    let refusal = refused[0];
    assert!(
        refusal["status"] == 403 || refusal["status"] == 429,
        "{refusal}"
    );
    assert_eq!(refusal["tenantId"], "acme");
    assert_eq!(refusal["sessionId"], "s1");
    let reason = refusal["reason"].as_str().unwrap();
    assert!(reason.contains("connectionsPerSession"), "{refusal}");
    let admitted = decisions
        .iter()
        .find(|d| d["function"] == "connect" && d["outcome"] == "admitted")
        .expect("the admission by $connect");
    assert_eq!(admitted["connectionId"], id.as_str());
    assert!(refusal["seq"].as_u64() > admitted["seq"].as_u64());
    local.shutdown().await;
}

#[tokio::test]
async fn the_page_is_served_as_html_without_caching() {
    let local = Local::start_without_ttl().await;
    let url = format!("{}/", local.stack().endpoints.http_url());
    let r = request("GET", &url, None).await.unwrap();
    assert_eq!(r.status, 200);
    assert!(r
        .body
        .contains("<title>Turnstile — local dashboard</title>"));
    assert!(r.body.contains("/dashboard/state"));
    local.shutdown().await;
}

/// The chromedriver to use, or `None` (with the reason printed) when the browser test is skipped.
fn chromedriver() -> Option<String> {
    let driver =
        std::env::var("TURNSTILE_TEST_CHROMEDRIVER").unwrap_or_else(|_| "chromedriver".into());
    if driver == "skip" {
        eprintln!(
            "SKIPPED the dashboard browser test: TURNSTILE_TEST_CHROMEDRIVER=skip \
             (make test sets it when Chromium cannot be installed here)"
        );
        return None;
    }
    Some(driver)
}

/// chromedriver on a free loopback port; killed when dropped.
struct Driver {
    _child: tokio::process::Child,
    url: String,
}

impl Driver {
    async fn start(program: &str) -> Driver {
        let port = std::net::TcpListener::bind("127.0.0.1:0")
            .and_then(|l| l.local_addr())
            .expect("a free port")
            .port();
        let child = tokio::process::Command::new(program)
            .arg(format!("--port={port}"))
            .arg(format!(
                "--log-path={}",
                std::env::temp_dir()
                    .join(format!("chromedriver-{port}.log"))
                    .display()
            ))
            .stdout(Stdio::null())
            .stderr(Stdio::null())
            .kill_on_drop(true)
            .spawn()
            .unwrap_or_else(|e| {
                panic!(
                    "cannot start {program:?}: {e}. Install Debian's chromium and chromium-driver \
                     (make test does: scripts/chromium.sh), or set TURNSTILE_TEST_CHROMEDRIVER=skip"
                )
            });
        let url = format!("http://127.0.0.1:{port}");
        let addr = format!("127.0.0.1:{port}");
        let up = eventually(20, async || {
            tokio::net::TcpStream::connect(&addr).await.is_ok()
        })
        .await;
        assert!(up, "chromedriver did not answer on {url}");
        Driver { _child: child, url }
    }
}

async fn browser(driver: &Driver, profile: &std::path::Path) -> Client {
    let chromium =
        std::env::var("TURNSTILE_TEST_CHROMIUM").unwrap_or_else(|_| "/usr/bin/chromium".into());
    // The flags this machine needs: no sandbox as root, and no background traffic to the network.
    let args = [
        "--headless=new",
        "--no-sandbox",
        "--disable-gpu",
        "--disable-quic",
        "--no-first-run",
        "--disable-background-networking",
        "--disable-component-update",
        "--disable-sync",
        "--window-size=1400,1000",
    ]
    .iter()
    .map(|a| a.to_string())
    .chain([format!("--user-data-dir={}", profile.display())])
    .collect::<Vec<_>>();
    let caps = json!({ "goog:chromeOptions": { "binary": chromium, "args": args } });
    let caps = match caps {
        Value::Object(m) => m,
        _ => unreachable!("a JSON object literal"),
    };
    let mut builder = ClientBuilder::new(hyper_util::client::legacy::connect::HttpConnector::new());
    builder.capabilities(caps);
    let session = builder.connect(&driver.url);
    tokio::time::timeout(std::time::Duration::from_secs(60), session)
        .await
        .expect("headless Chromium started within 60 s")
        .expect("a WebDriver session in headless Chromium")
}

/// The text of the page's element `css`, or "" while it is not there.
async fn text(client: &Client, css: &str) -> String {
    match client.find(Locator::Css(css)).await {
        Ok(e) => e.text().await.unwrap_or_default(),
        Err(_) => String::new(),
    }
}

#[tokio::test]
async fn the_page_shows_a_connect_and_a_refusal_live_in_a_headless_browser() {
    let Some(program) = chromedriver() else {
        return;
    };
    let local = Local::start_without_ttl().await;
    local.tenant("acme", limits(10, 1, 100, 300)).await;
    let driver = Driver::start(&program).await;
    let profile = std::env::temp_dir().join(format!("turnstile-chromium-{}", uuid::Uuid::new_v4()));
    let client = browser(&driver, &profile).await;

    let page = format!("{}/", local.stack().endpoints.http_url());
    client.goto(&page).await.unwrap();
    let live = eventually(15, async || {
        text(&client, "#status").await.starts_with("live")
    })
    .await;
    assert!(
        live,
        "the page never read the state: {}",
        text(&client, "#status").await
    );
    // A mark in the page's JavaScript world: it survives only if the page is never reloaded.
    client
        .execute("window.turnstileMark = 42;", vec![])
        .await
        .unwrap();
    assert!(text(&client, "#decisions tbody")
        .await
        .contains("no decisions yet"));

    // Traffic after the page loaded: one admitted socket, one refused.
    let (_open, id) = one_admitted_one_refused(&local, "acme", "s1").await;

    let refusal = "#decisions tr[data-outcome=\"refused\"]";
    let shown = eventually(15, async || {
        let row = text(&client, refusal).await;
        let sessions = text(&client, "#sessions tbody").await;
        row.contains("connectionsPerSession") && row.contains("acme") && sessions.contains(&id)
    })
    .await;
    let decisions = text(&client, "#decisions tbody").await;
    assert!(
        shown,
        "the page did not show the connect and the refusal:\n{decisions}"
    );
    assert!(decisions.contains("admitted"), "{decisions}");
    let open = client
        .find(Locator::Css("#sessions code.live"))
        .await
        .expect("the admitted socket is marked open");
    assert_eq!(open.text().await.unwrap().trim(), id);
    assert!(text(&client, "#counters tbody").await.contains("acme"));
    let tenants = text(&client, "#tenants").await;
    assert!(
        tenants.contains("acme") && tenants.contains("connectionsPerSession"),
        "{tenants}"
    );
    let mark = client
        .execute("return window.turnstileMark;", vec![])
        .await
        .unwrap();
    assert_eq!(mark, json!(42), "the page was reloaded");

    // The screenshot the README shows is made by this test (written to target/, not committed).
    if let Ok(png) = client.screenshot().await {
        let dir = std::path::Path::new(env!("CARGO_MANIFEST_DIR")).join("../target");
        let _ = std::fs::create_dir_all(&dir);
        let _ = std::fs::write(dir.join("dashboard.png"), png);
    }
    let _ = client.close().await;
    drop(driver);
    let _ = std::fs::remove_dir_all(&profile);
    local.shutdown().await;
}
