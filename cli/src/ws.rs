//! `turnstile ws`: a small WebSocket client for trying the WebSocket API without installing one.
//! Each line of stdin is sent as a text frame; each frame received is printed on stdout, one per
//! line; the close code and reason go to stderr. The end of stdin (Ctrl-D) closes with 1000.
//!
//! Exit status (docs/cli.md, "Exit status"): 0 closed normally (stdin ended, or the server closed
//! with 1000 or 1001), 1 an error (no connection, or it dropped without a close frame), 3 the
//! handshake was refused (the HTTP status and body on stderr: 403 for an authorizer Deny, 429 for
//! a limit at `$connect`), 4 the server closed with another code (1008, 1009 "Message too big", ...).

use std::io::BufRead;
use std::time::Duration;

use futures::{SinkExt, StreamExt};
use shared::{Error, Result};
use tokio::sync::mpsc;
use tokio_tungstenite::tungstenite::client::IntoClientRequest;
use tokio_tungstenite::tungstenite::http::{HeaderName, HeaderValue};
use tokio_tungstenite::tungstenite::protocol::frame::coding::CloseCode;
use tokio_tungstenite::tungstenite::protocol::CloseFrame;
use tokio_tungstenite::tungstenite::{self, Message};

use crate::Exit;

#[derive(Debug, clap::Args)]
pub struct Args {
    /// The WebSocket URL, e.g. ws://127.0.0.1:3001/ (make dev). Plain ws:// only: this client has
    /// no TLS; for a deployed wss:// API use a browser or another client.
    url: String,
    /// A connect ticket, sent in the subprotocol list as "turnstile, <ticket>" (as a browser sends
    /// it with `new WebSocket(url, ["turnstile", ticket])`).
    #[arg(long)]
    ticket: Option<String>,
    /// An extra request header, "Name: value" (repeatable), e.g. "Authorization: Bearer <JWT>".
    #[arg(long = "header", short = 'H', value_name = "NAME:VALUE")]
    headers: Vec<String>,
}

/// How long to wait for the server's answer to our close before giving up on it.
const CLOSE_WAIT: Duration = Duration::from_secs(2);

fn other(message: String) -> Error {
    Error::Other(message)
}

/// The handshake request: the URL, the ticket's subprotocol list, the extra headers.
fn handshake(args: &Args) -> Result<tungstenite::handshake::client::Request> {
    let mut req = args
        .url
        .as_str()
        .into_client_request()
        .map_err(|e| other(format!("{}: {e}", args.url)))?;
    if let Some(ticket) = &args.ticket {
        let value = HeaderValue::from_str(&format!("turnstile, {ticket}"))
            .map_err(|_| other("the ticket is not a valid header value".into()))?;
        req.headers_mut().insert("Sec-WebSocket-Protocol", value);
    }
    for h in &args.headers {
        let (name, value) = h
            .split_once(':')
            .ok_or_else(|| other(format!("--header {h:?}: expected NAME:VALUE")))?;
        let name = HeaderName::from_bytes(name.trim().as_bytes())
            .map_err(|e| other(format!("--header {h:?}: {e}")))?;
        let value = HeaderValue::from_str(value.trim())
            .map_err(|e| other(format!("--header {h:?}: {e}")))?;
        req.headers_mut().append(name, value);
    }
    Ok(req)
}

/// Stdin's lines, read on their own thread (a closed channel is the end of stdin).
fn stdin_lines() -> mpsc::UnboundedReceiver<String> {
    let (tx, rx) = mpsc::unbounded_channel();
    std::thread::spawn(move || {
        for line in std::io::stdin().lock().lines() {
            let Ok(line) = line else { break };
            if tx.send(line).is_err() {
                break;
            }
        }
    });
    rx
}

/// The exit for a close the server sent.
fn closed(frame: Option<&CloseFrame>) -> Exit {
    let (code, reason) = frame.map_or((1005, ""), |f| (u16::from(f.code), f.reason.as_str()));
    eprintln!("closed: {code} {reason}");
    match frame.map(|f| f.code) {
        None | Some(CloseCode::Normal | CloseCode::Away) => Exit::Done,
        Some(_) => Exit::Closed,
    }
}

pub async fn run(args: Args) -> Result<Exit> {
    let req = handshake(&args)?;
    let (ws, response) = match tokio_tungstenite::connect_async(req).await {
        Ok(ok) => ok,
        Err(tungstenite::Error::Http(resp)) => {
            let body = resp
                .body()
                .as_deref()
                .map(String::from_utf8_lossy)
                .unwrap_or_default();
            eprintln!("refused: HTTP {} {body}", resp.status().as_u16());
            return Ok(Exit::Refused);
        }
        Err(e) => return Err(other(format!("connecting to {}: {e}", args.url))),
    };
    let protocol = response
        .headers()
        .get("sec-websocket-protocol")
        .and_then(|v| v.to_str().ok())
        .map(|p| format!(" (subprotocol {p})"))
        .unwrap_or_default();
    eprintln!(
        "connected to {}{protocol}: each line is sent as a frame; Ctrl-D closes",
        args.url
    );
    let (mut sink, mut stream) = ws.split();
    let mut lines = stdin_lines();
    let mut closing: Option<tokio::time::Instant> = None;
    loop {
        let wait = async {
            match closing {
                Some(at) => tokio::time::sleep_until(at + CLOSE_WAIT).await,
                None => std::future::pending().await,
            }
        };
        tokio::select! {
            line = lines.recv(), if closing.is_none() => match line {
                Some(l) => {
                    if let Err(e) = sink.send(Message::Text(l.into())).await {
                        return Err(other(format!("sending: {e}")));
                    }
                }
                None => {
                    let bye = CloseFrame { code: CloseCode::Normal, reason: "".into() };
                    let _ = sink.send(Message::Close(Some(bye))).await;
                    closing = Some(tokio::time::Instant::now());
                }
            },
            frame = stream.next() => match frame {
                Some(Ok(Message::Text(t))) => println!("{t}"),
                Some(Ok(Message::Binary(b))) => eprintln!("(a binary frame of {} bytes)", b.len()),
                Some(Ok(Message::Close(frame))) => return Ok(closed(frame.as_ref())),
                Some(Ok(_)) => {}
                // After our close, the server may just drop the connection.
                Some(Err(_)) | None if closing.is_some() => return Ok(Exit::Done),
                Some(Err(e)) => return Err(other(format!("the connection dropped: {e}"))),
                None => return Err(other("the connection dropped without a close frame".into())),
            },
            _ = wait => return Ok(Exit::Done),
        }
    }
}
