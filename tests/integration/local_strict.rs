//! The local stack refuses what API Gateway, Lambda and the event source mapping refuse: frames and
//! messages over API Gateway's WebSocket quotas, bodies over the invoke payload limit, stream records
//! the template's filter drops; and it answers the stage-shaped WebSocket URL clients copy from AWS.

use std::time::Duration;

use futures::{SinkExt, StreamExt};
use serde_json::{json, Value};
use tokio_tungstenite::tungstenite::protocol::frame::coding::CloseCode;
use tokio_tungstenite::tungstenite::Message;
use turnstile_tests::http::request;

use crate::local_stack::{eventually, limits, Local};

/// How many times `function` ran, from the stack's decision log.
fn runs(l: &Local, function: &str) -> usize {
    l.stack()
        .decisions
        .recent()
        .iter()
        .filter(|d| d.function == function)
        .count()
}

/// A 200 KB frame is over both quotas (32 KB a frame, 128 KB a message): the socket is closed with
/// 1009 "Message too big", as API Gateway closes it, and `$disconnect` runs once.
#[tokio::test]
async fn a_frame_over_api_gateways_quota_closes_the_socket_with_1009() {
    let l = Local::start_without_ttl().await;
    l.tenant("big", limits(10, 5, 100, 300)).await;
    l.put_session("big", "s").await;
    let mut ws = l.connect("big", "s").await.unwrap();
    ws.send(Message::Text("x".repeat(200 * 1024).into()))
        .await
        .unwrap();
    let close = match tokio::time::timeout(Duration::from_secs(5), ws.next())
        .await
        .expect("the socket is closed within 5 s")
    {
        Some(Ok(Message::Close(Some(frame)))) => frame,
        Some(Ok(other)) => panic!("a frame over the quota was answered: {} bytes", other.len()),
        other => panic!("no close frame: {other:?}"),
    };
    assert_eq!(close.code, CloseCode::Size);
    assert_eq!(close.reason.as_str(), "Message too big");
    assert!(eventually(5, async || runs(&l, "disconnect") >= 1).await);
    tokio::time::sleep(Duration::from_millis(500)).await;
    assert_eq!(runs(&l, "disconnect"), 1, "$disconnect runs once");
    l.shutdown().await;
}

/// A message sent in frames that each fit (30 KB) but together pass 128 KB is closed with 1009 too.
#[tokio::test]
async fn a_fragmented_message_over_128_kb_closes_the_socket_with_1009() {
    use tokio_tungstenite::tungstenite::protocol::frame::coding::{Data, OpCode};
    use tokio_tungstenite::tungstenite::protocol::frame::Frame;
    let l = Local::start_without_ttl().await;
    l.tenant("frag", limits(10, 5, 100, 300)).await;
    l.put_session("frag", "s").await;
    let mut ws = l.connect("frag", "s").await.unwrap();
    let part = "z".repeat(30 * 1024);
    for i in 0..5 {
        let op = if i == 0 { Data::Text } else { Data::Continue };
        let frame = Frame::message(part.clone().into_bytes(), OpCode::Data(op), i == 4);
        if ws.send(Message::Frame(frame)).await.is_err() {
            break; // the server may close before the last fragment
        }
    }
    let close = match tokio::time::timeout(Duration::from_secs(5), ws.next())
        .await
        .expect("the socket is closed within 5 s")
    {
        Some(Ok(Message::Close(Some(frame)))) => frame,
        Some(Ok(other)) => panic!("the message was answered: {} bytes", other.len()),
        other => panic!("no close frame: {other:?}"),
    };
    assert_eq!(close.code, CloseCode::Size);
    assert!(eventually(5, async || runs(&l, "disconnect") == 1).await);
    assert_eq!(runs(&l, "message"), 0, "no part of it reached $default");
    l.shutdown().await;
}

/// A frame within the quotas still reaches `$default` (the limits are API Gateway's, not lower).
#[tokio::test]
async fn a_frame_within_the_quotas_is_delivered() {
    let l = Local::start_without_ttl().await;
    l.tenant("fits", limits(10, 5, 100, 300)).await;
    l.put_session("fits", "s").await;
    let mut ws = l.connect("fits", "s").await.unwrap();
    let text = "y".repeat(30 * 1024);
    ws.send(Message::Text(text.clone().into())).await.unwrap();
    assert_eq!(crate::local_stack::next_text(&mut ws, 5).await, Some(text));
    l.shutdown().await;
}

/// Bodies: up to Lambda's 6 MB invoke payload the body reaches the session API, which refuses a
/// body over its own 16 KiB with 413 JSON; beyond 6 MB the local HTTP API answers 413
/// `{"message":"Request Entity Too Large"}` as API Gateway does. Never text/plain.
#[tokio::test]
async fn large_bodies_are_answered_413_in_json() {
    let l = Local::start_without_ttl().await;
    l.tenant("acme", limits(10, 5, 100, 300)).await;
    let url = l.session_url("acme", "s");
    let padded = |n: usize| json!({"tenantId": "acme", "pad": "p".repeat(n)}).to_string();
    for (size, from) in [(20 * 1024, "function"), (3 * 1024 * 1024, "function")] {
        let r = request("PUT", &url, Some(&padded(size))).await.unwrap();
        assert_eq!(r.status, 413, "{size} bytes: {}", r.body);
        let body = r.json();
        let msg = body["message"].as_str().unwrap_or_default();
        assert!(
            msg.contains("16384"),
            "{size} bytes, from the {from}: {}",
            r.body
        );
    }
    let r = request("PUT", &url, Some(&padded(7 * 1024 * 1024)))
        .await
        .unwrap();
    assert_eq!(r.status, 413, "{}", &r.body[..r.body.len().min(200)]);
    assert_eq!(r.json(), json!({"message": "Request Entity Too Large"}));
    let events = format!("{}/events", l.stack().endpoints.http_url());
    let r = request("POST", &events, Some(&padded(3 * 1024 * 1024)))
        .await
        .unwrap();
    assert_eq!(r.status, 413, "{}", &r.body[..r.body.len().min(200)]);
    assert_eq!(r.json(), json!({"message": "Request Entity Too Large"}));
    // A small session body still works.
    let r = request("PUT", &url, Some(&padded(10))).await.unwrap();
    assert_eq!(r.status, 200, "{}", r.body);
    l.shutdown().await;
}

/// The template's filter on the sweeper's event source mapping (REMOVE by the TTL service) runs
/// locally too: a session's INSERT and MODIFY never invoke `ttl-sweeper`; its TTL deletion does.
#[tokio::test]
async fn only_ttl_removes_reach_the_sweeper() {
    let l = Local::start().await;
    l.tenant("kept", limits(10, 5, 100, 300)).await;
    l.tenant("brief", limits(10, 5, 100, 2)).await;
    l.put_session("kept", "s").await;
    let ws = l.connect("kept", "s").await.unwrap();
    // Two polls of the bridge (200 ms) and more: the INSERT and MODIFY were read by now.
    tokio::time::sleep(Duration::from_secs(2)).await;
    assert_eq!(
        runs(&l, "ttl-sweeper"),
        0,
        "INSERT/MODIFY reached ttl-sweeper"
    );
    l.put_session("brief", "s").await;
    assert!(
        eventually(30, async || runs(&l, "ttl-sweeper") >= 1).await,
        "the TTL deletion reached ttl-sweeper"
    );
    drop(ws);
    l.shutdown().await;
}

/// `ws://host:port/local`, the stage-shaped URL API Gateway gives (`wss://{api}.execute-api.../{stage}`),
/// reaches the WebSocket API as `/` does.
#[tokio::test]
async fn the_stage_shaped_url_reaches_the_websocket_api() {
    use tokio_tungstenite::tungstenite::client::IntoClientRequest;
    let l = Local::start_without_ttl().await;
    l.tenant("acme", limits(10, 5, 100, 300)).await;
    l.put_session("acme", "s").await;
    for path in ["/local", "/local/"] {
        let ticket = l.ticket("acme", "s").await.unwrap();
        let url = format!("{}{path}", l.stack().endpoints.ws_url());
        let mut req = url.into_client_request().unwrap();
        req.headers_mut().insert(
            "Sec-WebSocket-Protocol",
            format!("turnstile, {ticket}").parse().unwrap(),
        );
        let (mut ws, _) = tokio_tungstenite::connect_async(req)
            .await
            .unwrap_or_else(|e| panic!("{path}: {e}"));
        ws.send(Message::Text("hi".into())).await.unwrap();
        assert_eq!(
            crate::local_stack::next_text(&mut ws, 5).await.as_deref(),
            Some("hi")
        );
    }
    // Any other path answers a JSON 404 naming the URLs that are served.
    let other = format!("http://{}/prod", l.stack().endpoints.ws_addr);
    let r = request("GET", &other, None).await.unwrap();
    assert_eq!(r.status, 404, "{}", r.body);
    let msg: Value = r.json();
    assert!(
        msg["message"]
            .as_str()
            .unwrap_or_default()
            .contains("/local"),
        "{}",
        r.body
    );
    l.shutdown().await;
}
