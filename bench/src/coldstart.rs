//! Cold start of each function binary: the time from spawning the process until it has handled its
//! first invocation, i.e. until it posts a response **or** an error to the Lambda Runtime API. What
//! is measured is process load, runtime + SDK client set-up, and one real invocation on the
//! function's representative sample event ([`REPRESENTATIVE_EVENTS`]) against tables the harness
//! seeds (see `main.rs`); the outcome (response or error) is reported with the time.
//!
//! The Runtime API is a minimal HTTP/1.1 server on loopback implementing the four routes a runtime
//! client uses: `GET /2018-06-01/runtime/invocation/next` (answers the first call with the event and
//! the `Lambda-Runtime-*` headers, then holds later calls open), `POST .../invocation/{id}/response`,
//! `POST .../invocation/{id}/error` and `POST /2018-06-01/runtime/init/error`.

use std::path::{Path, PathBuf};
use std::process::Stdio;
use std::time::{Duration, Instant, SystemTime, UNIX_EPOCH};

use serde::Serialize;
use tokio::io::{AsyncBufReadExt, AsyncReadExt, AsyncWriteExt, BufReader};
use tokio::net::{TcpListener, TcpStream};
use tokio::sync::mpsc;

use crate::error::BenchError;

/// The Lambda binaries whose first invocation is timed, in the order the report lists them: every
/// function of the local stack but the reconciler, whose first invocation waits out its grace (15 s
/// at the least) by design, which would time the wait, not the start.
pub const FUNCTIONS: [&str; 8] = without(turnstile_local::lambda::FUNCTIONS, "reconciler");

/// `all` without `skip`, in order (a compile error when the sizes do not fit).
const fn without<const N: usize, const M: usize>(
    all: [&'static str; N],
    skip: &str,
) -> [&'static str; M] {
    let mut out = [""; M];
    let (mut i, mut j) = (0, 0);
    while i < N {
        if !same_str(all[i], skip) {
            out[j] = all[i];
            j += 1;
        }
        i += 1;
    }
    assert!(j == M, "the list without `skip` has another length");
    out
}

const fn same_str(a: &str, b: &str) -> bool {
    let (a, b) = (a.as_bytes(), b.as_bytes());
    if a.len() != b.len() {
        return false;
    }
    let mut i = 0;
    while i < a.len() {
        if a[i] != b[i] {
            return false;
        }
        i += 1;
    }
    true
}

#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize)]
#[serde(rename_all = "snake_case")]
pub enum Outcome {
    /// The handler answered `POST .../response`.
    Response,
    /// The handler answered `POST .../error`.
    Error,
    /// The runtime reported `POST /runtime/init/error` before any invocation.
    InitError,
    /// The process ended before posting anything.
    Exited,
    /// Nothing was posted within the time limit.
    Timeout,
}

#[derive(Debug)]
enum Event {
    NextRequested(Instant),
    /// A result was posted: when, which kind, and the start of its body.
    Posted(Instant, Outcome, String),
}

/// How much of a posted body a line keeps.
const EXCERPT_CHARS: usize = 2000;

/// One JSON line per function.
#[derive(Debug, Clone, Serialize)]
pub struct ColdStartLine {
    pub kind: &'static str,
    pub function: String,
    pub binary: String,
    pub size_bytes: u64,
    pub runs: usize,
    /// Process start → first `GET /next` (the runtime is initialised), median over runs.
    pub init_ms_median: Option<f64>,
    /// Process start → first invocation handled (response or error posted), median and min.
    pub first_invocation_ms_median: Option<f64>,
    pub first_invocation_ms_min: Option<f64>,
    pub first_invocation_ms_max: Option<f64>,
    pub outcomes: Vec<Outcome>,
    /// The start of what the last timed run posted (the handler's answer or its error).
    pub posted: Option<String>,
    pub event: String,
}

/// The representative sample of each function, in `events/<name>/`: the request the function exists
/// for (a `$connect` authorization, a session created, a TTL expiry, an EMR cluster terminated).
pub const REPRESENTATIVE_EVENTS: [(&str, &str); 8] = [
    ("authorizer", "connect-request.json"),
    ("connect", "connect.json"),
    ("disconnect", "disconnect.json"),
    ("message", "message.json"),
    ("session-api", "put.json"),
    ("ttl-sweeper", "ttl-expiry.json"),
    ("token-remover", "emr-terminated.json"),
    ("decide-api", "spend.json"),
];

/// Where a function's sample event lives: its [`REPRESENTATIVE_EVENTS`] entry, else
/// `events/<name>.json`, else the first `*.json` (by name) in `events/<name>/`, else a minimal `{}`.
pub fn sample_event(events_dir: &Path, function: &str) -> (String, Vec<u8>) {
    let dir = events_dir.join(function);
    if let Some((_, file)) = REPRESENTATIVE_EVENTS.iter().find(|(f, _)| *f == function) {
        let p = dir.join(file);
        if let Ok(body) = std::fs::read(&p) {
            return (p.display().to_string(), body);
        }
    }
    let single = events_dir.join(format!("{function}.json"));
    if let Ok(body) = std::fs::read(&single) {
        return (single.display().to_string(), body);
    }
    if let Ok(entries) = std::fs::read_dir(&dir) {
        let mut files: Vec<PathBuf> = entries
            .filter_map(|e| e.ok().map(|e| e.path()))
            .filter(|p| p.extension().is_some_and(|x| x == "json"))
            .collect();
        files.sort();
        for f in files {
            if let Ok(body) = std::fs::read(&f) {
                return (f.display().to_string(), body);
            }
        }
    }
    ("{} (no sample event found)".into(), b"{}".to_vec())
}

struct Request {
    method: String,
    path: String,
    body: Vec<u8>,
}

/// Reads one HTTP/1.1 request (headers, then a `Content-Length` or chunked body).
/// `Ok(None)` when the peer closed the connection.
async fn read_request(r: &mut BufReader<TcpStream>) -> std::io::Result<Option<Request>> {
    let mut line = String::new();
    if r.read_line(&mut line).await? == 0 {
        return Ok(None);
    }
    let mut parts = line.split_whitespace();
    let method = parts.next().unwrap_or("").to_string();
    let path = parts.next().unwrap_or("").to_string();
    let mut content_length = 0usize;
    let mut chunked = false;
    loop {
        line.clear();
        if r.read_line(&mut line).await? == 0 {
            return Ok(None);
        }
        let h = line.trim_end();
        if h.is_empty() {
            break;
        }
        if let Some((name, value)) = h.split_once(':') {
            let (name, value) = (name.trim().to_ascii_lowercase(), value.trim());
            if name == "content-length" {
                content_length = value.parse().unwrap_or(0);
            } else if name == "transfer-encoding" && value.to_ascii_lowercase().contains("chunked")
            {
                chunked = true;
            }
        }
    }
    let mut body = Vec::new();
    if chunked {
        loop {
            line.clear();
            if r.read_line(&mut line).await? == 0 {
                return Ok(None);
            }
            let size_hex = line.trim().split(';').next().unwrap_or("0");
            let size = usize::from_str_radix(size_hex, 16).unwrap_or(0);
            if size == 0 {
                // Trailers until the empty line.
                loop {
                    line.clear();
                    if r.read_line(&mut line).await? == 0 || line.trim_end().is_empty() {
                        break;
                    }
                }
                break;
            }
            let mut buf = vec![0u8; size + 2];
            r.read_exact(&mut buf).await?;
            body.extend_from_slice(&buf[..size]);
        }
    } else if content_length > 0 {
        body = vec![0u8; content_length];
        r.read_exact(&mut body).await?;
    }
    Ok(Some(Request { method, path, body }))
}

async fn respond(
    w: &mut BufReader<TcpStream>,
    status: &str,
    headers: &[(&str, String)],
    body: &[u8],
) -> std::io::Result<()> {
    let mut head = format!("HTTP/1.1 {status}\r\nContent-Length: {}\r\n", body.len());
    for (k, v) in headers {
        head.push_str(&format!("{k}: {v}\r\n"));
    }
    head.push_str("\r\n");
    let s = w.get_mut();
    s.write_all(head.as_bytes()).await?;
    s.write_all(body).await?;
    s.flush().await
}

async fn serve_connection(
    stream: TcpStream,
    event: std::sync::Arc<Vec<u8>>,
    function: std::sync::Arc<String>,
    served: std::sync::Arc<std::sync::atomic::AtomicBool>,
    tx: mpsc::UnboundedSender<Event>,
) -> std::io::Result<()> {
    let mut r = BufReader::new(stream);
    while let Some(req) = read_request(&mut r).await? {
        let now = Instant::now();
        let p = req.path.as_str();
        if req.method == "GET" && p.ends_with("/runtime/invocation/next") {
            let _ = tx.send(Event::NextRequested(now));
            if served.swap(true, std::sync::atomic::Ordering::SeqCst) {
                // One invocation per cold start: hold later polls until the process is killed.
                std::future::pending::<()>().await;
            }
            let deadline = SystemTime::now()
                .duration_since(UNIX_EPOCH)
                .map(|d| d.as_millis() + 30_000)
                .unwrap_or(0);
            let headers = [
                ("Content-Type", "application/json".to_string()),
                (
                    "Lambda-Runtime-Aws-Request-Id",
                    "8476a536-e9f4-11e8-9739-2dfe598c3fcd".to_string(),
                ),
                ("Lambda-Runtime-Deadline-Ms", deadline.to_string()),
                (
                    "Lambda-Runtime-Invoked-Function-Arn",
                    format!("arn:aws:lambda:us-east-1:123456789012:function:{function}"),
                ),
                (
                    "Lambda-Runtime-Trace-Id",
                    "Root=1-5bef4de7-ad49b0e87f6ef6c87fc2e700;Parent=9a9197af755a6419;Sampled=0"
                        .to_string(),
                ),
            ];
            respond(&mut r, "200 OK", &headers, &event).await?;
        } else if req.method == "POST" {
            let outcome = if p.ends_with("/response") {
                Some(Outcome::Response)
            } else if p.ends_with("/init/error") {
                Some(Outcome::InitError)
            } else if p.ends_with("/error") {
                Some(Outcome::Error)
            } else {
                None
            };
            let status = if outcome.is_some() {
                "202 Accepted"
            } else {
                "404 Not Found"
            };
            respond(
                &mut r,
                status,
                &[("Content-Type", "application/json".into())],
                br#"{"status":"OK"}"#,
            )
            .await?;
            if let Some(o) = outcome {
                let text: String = String::from_utf8_lossy(&req.body)
                    .chars()
                    .take(EXCERPT_CHARS)
                    .collect();
                let _ = tx.send(Event::Posted(now, o, text));
            }
        } else {
            respond(&mut r, "404 Not Found", &[], b"").await?;
        }
    }
    Ok(())
}

pub struct Run {
    pub init: Option<Duration>,
    pub handled: Option<Duration>,
    pub outcome: Outcome,
    pub posted: Option<String>,
}

/// One cold start of `binary` against a fresh Runtime API on loopback.
pub async fn cold_start_once(
    binary: &Path,
    function: &str,
    event: &[u8],
    extra_env: &[(String, String)],
    limit: Duration,
) -> Result<Run, BenchError> {
    invoke_once(&[], binary, function, event, extra_env, limit, None).await
}

/// [`cold_start_once`], the process's stderr (its logs) appended to `log` when given: the check of
/// the `sam build` artifacts shows them when an answer is wrong. A non-empty `runner` starts the
/// binary through that command (`qemu-aarch64 -L <sysroot>`: the arm64 artifacts on an x86_64 host).
pub async fn invoke_once(
    runner: &[String],
    binary: &Path,
    function: &str,
    event: &[u8],
    extra_env: &[(String, String)],
    limit: Duration,
    log: Option<&Path>,
) -> Result<Run, BenchError> {
    let listener = TcpListener::bind("127.0.0.1:0")
        .await
        .map_err(|e| BenchError::io("binding the Runtime API listener", e))?;
    let addr = listener
        .local_addr()
        .map_err(|e| BenchError::io("reading the listener address", e))?;
    let (tx, mut rx) = mpsc::unbounded_channel();
    let event = std::sync::Arc::new(event.to_vec());
    let fname = std::sync::Arc::new(function.to_string());
    let served = std::sync::Arc::new(std::sync::atomic::AtomicBool::new(false));
    let server = tokio::spawn(async move {
        while let Ok((stream, _)) = listener.accept().await {
            let _ = stream.set_nodelay(true);
            tokio::spawn(serve_connection(
                stream,
                event.clone(),
                fname.clone(),
                served.clone(),
                tx.clone(),
            ));
        }
    });

    let mut cmd = match runner.split_first() {
        Some((program, args)) => {
            let mut c = tokio::process::Command::new(program);
            c.args(args).arg(binary);
            c
        }
        None => tokio::process::Command::new(binary),
    };
    cmd.env_clear()
        .env("PATH", std::env::var("PATH").unwrap_or_default())
        .env("AWS_LAMBDA_RUNTIME_API", addr.to_string())
        .env("AWS_LAMBDA_FUNCTION_NAME", function)
        .env("AWS_LAMBDA_FUNCTION_VERSION", "$LATEST")
        .env("AWS_LAMBDA_FUNCTION_MEMORY_SIZE", "128")
        .env(
            "AWS_LAMBDA_LOG_GROUP_NAME",
            format!("/aws/lambda/{function}"),
        )
        .env("AWS_LAMBDA_LOG_STREAM_NAME", "bench")
        .env("AWS_REGION", "us-east-1")
        .env("AWS_DEFAULT_REGION", "us-east-1")
        .env("RUST_LOG", "warn")
        .envs(extra_env.iter().map(|(k, v)| (k.as_str(), v.as_str())))
        .stdin(Stdio::null())
        .stdout(Stdio::null())
        .stderr(match log {
            Some(path) => std::fs::OpenOptions::new()
                .create(true)
                .append(true)
                .open(path)
                .map_err(|e| BenchError::io(format!("opening {}", path.display()), e))?
                .into(),
            None => Stdio::null(),
        })
        .kill_on_drop(true);
    let t0 = Instant::now();
    let mut child = cmd.spawn().map_err(|e| {
        let through = runner.iter().map(|a| format!("{a} ")).collect::<String>();
        BenchError::io(format!("starting {through}{}", binary.display()), e)
    })?;

    let mut init = None;
    let mut result = None;
    let deadline = tokio::time::sleep(limit);
    tokio::pin!(deadline);
    while result.is_none() {
        tokio::select! {
            // Prefer a posted result over a simultaneous exit or deadline.
            biased;
            ev = rx.recv() => match ev {
                Some(Event::NextRequested(t)) => { init.get_or_insert(t.duration_since(t0)); }
                Some(Event::Posted(t, o, text)) => { result = Some((Some(t.duration_since(t0)), o, Some(text))); }
                None => { result = Some((None, Outcome::Exited, None)); }
            },
            _ = child.wait() => { result = Some((None, Outcome::Exited, None)); }
            _ = &mut deadline => { result = Some((None, Outcome::Timeout, None)); }
        }
    }
    let _ = child.kill().await;
    server.abort();
    let (handled, outcome, posted) = result.unwrap_or((None, Outcome::Timeout, None));
    Ok(Run {
        init,
        handled,
        outcome,
        posted,
    })
}

fn median(mut v: Vec<f64>) -> Option<f64> {
    if v.is_empty() {
        return None;
    }
    v.sort_by(|a, b| a.total_cmp(b));
    let n = v.len();
    Some(if n % 2 == 1 {
        v[n / 2]
    } else {
        (v[n / 2 - 1] + v[n / 2]) / 2.0
    })
}

/// Puts the tables in the state a function's sample event expects, before each start (e.g. the
/// sample's connection admitted before a `$disconnect`). Not timed.
pub type Prepare<'a> =
    &'a (dyn Fn() -> futures::future::BoxFuture<'a, Result<(), BenchError>> + Sync);

/// `runs` timed cold starts of one function after one untimed start (page-cache warm-up); reports
/// the binary's size on disk and the median / min / max of the timed starts.
pub async fn measure(
    bin_dir: &Path,
    events_dir: &Path,
    function: &str,
    runs: usize,
    extra_env: &[(String, String)],
    prepare: Option<Prepare<'_>>,
) -> Result<ColdStartLine, BenchError> {
    let binary = bin_dir.join(function);
    let size_bytes = std::fs::metadata(&binary)
        .map_err(|e| BenchError::io(format!("reading {}", binary.display()), e))?
        .len();
    let (event_name, event) = sample_event(events_dir, function);
    // One untimed start first, so every timed start reads the binary from the page cache, like a
    // Lambda sandbox that has the deployment package on local disk.
    let start = || async {
        if let Some(p) = prepare {
            p().await?;
        }
        cold_start_once(
            &binary,
            function,
            &event,
            extra_env,
            Duration::from_secs(20),
        )
        .await
    };
    start().await?;
    let mut init = Vec::new();
    let mut handled = Vec::new();
    let mut outcomes = Vec::new();
    let mut posted = None;
    for _ in 0..runs {
        let r = start().await?;
        if let Some(d) = r.init {
            init.push(d.as_secs_f64() * 1000.0);
        }
        if let Some(d) = r.handled {
            handled.push(d.as_secs_f64() * 1000.0);
        }
        outcomes.push(r.outcome);
        posted = r.posted;
    }
    Ok(ColdStartLine {
        kind: "cold_start",
        function: function.into(),
        binary: binary.display().to_string(),
        size_bytes,
        runs,
        init_ms_median: median(init),
        first_invocation_ms_min: handled.iter().copied().reduce(f64::min),
        first_invocation_ms_max: handled.iter().copied().reduce(f64::max),
        first_invocation_ms_median: median(handled),
        outcomes,
        posted,
        event: event_name,
    })
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn median_of_odd_and_even() {
        assert_eq!(median(vec![3.0, 1.0, 2.0]), Some(2.0));
        assert_eq!(median(vec![4.0, 1.0, 2.0, 3.0]), Some(2.5));
        assert_eq!(median(vec![]), None);
    }

    async fn parse(raw: &'static [u8]) -> Vec<(String, String)> {
        let listener = TcpListener::bind("127.0.0.1:0").await.expect("bind");
        let addr = listener.local_addr().expect("addr");
        let writer = tokio::spawn(async move {
            let mut c = TcpStream::connect(addr).await.expect("connect");
            c.write_all(raw).await.expect("write");
        });
        let (s, _) = listener.accept().await.expect("accept");
        let mut r = BufReader::new(s);
        let mut got = Vec::new();
        while let Ok(Some(req)) = read_request(&mut r).await {
            got.push((req.method, req.path));
        }
        writer.await.expect("writer");
        got
    }

    #[tokio::test]
    async fn reads_keep_alive_requests_with_both_body_framings() {
        let raw = b"GET /2018-06-01/runtime/invocation/next HTTP/1.1\r\nHost: x\r\n\r\n\
POST /2018-06-01/runtime/invocation/abc/response HTTP/1.1\r\nContent-Length: 5\r\n\r\nhello\
POST /2018-06-01/runtime/invocation/abc/error HTTP/1.1\r\nTransfer-Encoding: chunked\r\n\r\n\
3\r\nabc\r\n2;x=y\r\nde\r\n0\r\n\r\n\
GET /2018-06-01/runtime/invocation/next HTTP/1.1\r\n\r\n";
        let got = parse(raw).await;
        let paths: Vec<&str> = got.iter().map(|(_, p)| p.as_str()).collect();
        assert_eq!(
            paths,
            [
                "/2018-06-01/runtime/invocation/next",
                "/2018-06-01/runtime/invocation/abc/response",
                "/2018-06-01/runtime/invocation/abc/error",
                "/2018-06-01/runtime/invocation/next",
            ]
        );
        assert_eq!(got[1].0, "POST");
    }

    #[test]
    fn every_function_has_its_representative_sample() {
        let events = Path::new(env!("CARGO_MANIFEST_DIR")).join("../events");
        for f in FUNCTIONS {
            let (name, body) = sample_event(&events, f);
            let want = REPRESENTATIVE_EVENTS
                .iter()
                .find(|(n, _)| *n == f)
                .map(|(_, file)| *file)
                .expect("listed");
            assert!(name.ends_with(want), "{f}: {name}");
            serde_json::from_slice::<serde_json::Value>(&body).expect("JSON");
        }
    }

    #[test]
    fn missing_event_falls_back_to_empty_object() {
        let (name, body) = sample_event(Path::new("/nonexistent"), "authorizer");
        assert!(name.contains("no sample event"));
        assert_eq!(body, b"{}");
    }
}
