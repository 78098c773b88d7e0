//! `turnstile ws` against the local stack (the real handlers on DynamoDB Local): lines go out as
//! frames, frames come back on stdout, and the exit status says how the socket ended.

use std::io::{BufRead, BufReader, Write};
use std::process::{Child, Command, Stdio};
use std::sync::Arc;

use shared::config::Vars;
use shared::ids::TenantId;
use shared::table::TableKind;
use shared::tenant::{Limits, Tenant};
use turnstile_local::functions::LocalFunctions;
use turnstile_local::lambda::Invoke;
use turnstile_local::stack::{Stack, StackConfig};
use turnstile_tests::http::request;
use turnstile_tests::TestEnv;

async fn start(env: &TestEnv) -> Stack {
    let mut deps = env.deps.clone();
    deps.clock = shared::clock::system();
    let keys = shared::ticket::KeySet::generate("test").unwrap().to_json();
    deps.vars = Vars::from_pairs([
        ("TURNSTILE_SESSION_API_AUTH", "none"),
        ("TURNSTILE_DECIDE_AUTH", "jwt"),
        ("TURNSTILE_TICKET_KEYS", keys.as_str()),
    ]);
    let any = "127.0.0.1:0".parse().unwrap();
    let cfg = StackConfig::new(any, any, &env.endpoint);
    let clock = deps.clock.clone();
    Stack::start(cfg, clock, async |eps| {
        LocalFunctions::new(deps, &eps.management_url())
            .await
            .expect("functions build") as Arc<dyn Invoke>
    })
    .await
    .unwrap()
}

/// `turnstile ws ARGS` with piped stdin, stdout and stderr.
fn ws(args: &[&str]) -> Child {
    Command::new(env!("CARGO_BIN_EXE_turnstile"))
        .env_clear()
        .env("PATH", std::env::var_os("PATH").unwrap_or_default())
        .env("NO_COLOR", "1")
        .arg("ws")
        .args(args)
        .stdin(Stdio::piped())
        .stdout(Stdio::piped())
        .stderr(Stdio::piped())
        .spawn()
        .expect("the turnstile binary runs")
}

/// Runs `f` with the child off the runtime's threads (the stack serves on them meanwhile).
async fn blocking<T: Send + 'static>(f: impl FnOnce() -> T + Send + 'static) -> T {
    tokio::task::spawn_blocking(f).await.unwrap()
}

fn stderr_of(child: Child) -> (Option<i32>, String) {
    let out = child.wait_with_output().unwrap();
    (
        out.status.code(),
        String::from_utf8_lossy(&out.stderr).into_owned(),
    )
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn ws_sends_lines_prints_frames_and_exits_with_how_the_socket_closed() {
    let env = TestEnv::new(&[
        TableKind::Tenants,
        TableKind::Sessions,
        TableKind::Counters,
        TableKind::NonFungibleTokens,
        TableKind::Limits,
    ])
    .await;
    let tenant = Tenant {
        tenant_id: TenantId::parse("acme").unwrap(),
        limits: Limits::example(1000, 1000, 5, 10, 300, 100),
    };
    shared::tenant::store::put(&env.deps, &tenant)
        .await
        .unwrap();
    let stack = start(&env).await;
    let http = stack.endpoints.http_url();
    let url = format!("{}/", stack.endpoints.ws_url());
    let ticket = |connects: u32| {
        let put = format!("{http}/session?tenantId=acme&sessionId=s&connects={connects}");
        async move {
            let r = request("PUT", &put, None).await.unwrap();
            assert_eq!(r.status, 200, "{}", r.body);
            r.json()["ticket"].as_str().unwrap().to_string()
        }
    };

    // A line goes out, its echo comes back on stdout; the end of stdin closes with 1000: exit 0.
    let t = ticket(1).await;
    let mut child = ws(&[&url, "--ticket", &t]);
    let (code, err) = blocking(move || {
        let mut stdin = child.stdin.take().unwrap();
        let mut stdout = BufReader::new(child.stdout.take().unwrap());
        writeln!(stdin, "hello").unwrap();
        let mut line = String::new();
        stdout.read_line(&mut line).unwrap();
        assert_eq!(line.trim_end(), "hello");
        drop(stdin);
        stderr_of(child)
    })
    .await;
    assert_eq!(code, Some(0), "{err}");
    assert!(err.contains("connected to"), "{err}");

    // A line over API Gateway's frame quota: the server closes with 1009, printed, exit 4.
    let t = ticket(1).await;
    let mut child = ws(&[&url, "--ticket", &t]);
    let (code, err) = blocking(move || {
        let mut stdin = child.stdin.take().unwrap();
        writeln!(stdin, "{}", "x".repeat(200 * 1024)).unwrap();
        let status = stderr_of(child);
        drop(stdin);
        status
    })
    .await;
    assert_eq!(code, Some(4), "{err}");
    assert!(err.contains("closed: 1009 Message too big"), "{err}");

    // No ticket: the authorizer denies, the handshake is refused with 403: exit 3.
    let child = ws(&[&format!("{url}?tenantId=acme&sessionId=s")]);
    let (code, err) = blocking(move || stderr_of(child)).await;
    assert_eq!(code, Some(3), "{err}");
    assert!(
        err.contains(r#"refused: HTTP 403 {"message":"Forbidden"}"#),
        "{err}"
    );
    stack.shutdown().await;
}
