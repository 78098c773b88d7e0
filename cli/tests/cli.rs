//! The `turnstile` binary as a user runs it: exit status, stdout and stderr, against DynamoDB Local
//! (tables under a fresh prefix, dropped after each test).

use std::process::{Command, Output};

use shared::table::TableKind;
use turnstile_tests::TestEnv;

/// A refusal: a limit said no (docs/cli.md, "Exit status").
const REFUSED: i32 = 3;

/// `turnstile ARGS` against `env`'s tables, with nothing of this process's AWS environment.
fn turnstile(env: Option<&TestEnv>, args: &[&str]) -> Output {
    let mut cmd = Command::new(env!("CARGO_BIN_EXE_turnstile"));
    cmd.env_clear()
        .env("PATH", std::env::var_os("PATH").unwrap_or_default())
        .env("HOME", std::env::temp_dir().join("turnstile-cli-test-home"))
        .env("NO_COLOR", "1")
        .args(args);
    if let Some(env) = env {
        cmd.env("AWS_ENDPOINT_URL_DYNAMODB", &env.endpoint)
            .env("TURNSTILE_TABLE_PREFIX", &env.prefix);
    }
    cmd.output().expect("the turnstile binary runs")
}

fn text(bytes: &[u8]) -> String {
    String::from_utf8_lossy(bytes).into_owned()
}

fn json(out: &Output) -> serde_json::Value {
    serde_json::from_slice(&out.stdout).unwrap_or_else(|e| {
        let (stdout, stderr) = (text(&out.stdout), text(&out.stderr));
        panic!("stdout is not JSON ({e}): {stdout}\nstderr: {stderr}")
    })
}

#[tokio::test]
async fn a_refused_reservation_exits_3_and_still_prints_the_decision() {
    let env = TestEnv::new(&[TableKind::NonFungibleTokens, TableKind::Limits]).await;
    let get = ["reservation", "get", "emr", "acct-1", "--limit", "1"];
    let first = turnstile(Some(&env), &get);
    assert_eq!(first.status.code(), Some(0), "{}", text(&first.stderr));
    assert_eq!(json(&first)["granted"], true);
    let second = turnstile(Some(&env), &get);
    assert_eq!(json(&second)["granted"], false);
    assert_eq!(
        second.status.code(),
        Some(REFUSED),
        "{}",
        text(&second.stderr)
    );
}

#[tokio::test]
async fn a_refused_token_exits_3() {
    let env = TestEnv::new(&[TableKind::FungibleTokens, TableKind::Limits]).await;
    let take = [
        "token", "take", "api", "acct-1", "--limit", "1", "--window", "3600",
    ];
    assert_eq!(turnstile(Some(&env), &take).status.code(), Some(0));
    let refused = turnstile(Some(&env), &take);
    assert_eq!(json(&refused)["granted"], false);
    assert_eq!(refused.status.code(), Some(REFUSED));
}

#[tokio::test]
async fn without_endpoint_or_credentials_one_line_says_what_to_set() {
    let out = turnstile(None, &["tenant", "list"]);
    let err = text(&out.stderr);
    assert_eq!(out.status.code(), Some(1), "{err}");
    assert_eq!(
        err.lines().count(),
        1,
        "one line, not the SDK's warnings:\n{err}"
    );
    assert!(
        err.contains("--endpoint-url") && err.contains("AWS_PROFILE"),
        "{err}"
    );
}

#[tokio::test]
async fn the_endpoint_url_option_reaches_dynamodb_local() {
    let env = TestEnv::new(&[TableKind::Tenants]).await;
    let prefix = format!("--endpoint-url={}", env.endpoint);
    let mut cmd = Command::new(env!("CARGO_BIN_EXE_turnstile"));
    let out = cmd
        .env_clear()
        .env("PATH", std::env::var_os("PATH").unwrap_or_default())
        .env("TURNSTILE_TABLE_PREFIX", &env.prefix)
        .args([prefix.as_str(), "--region", "eu-west-1", "tenant", "list"])
        .output()
        .expect("the turnstile binary runs");
    assert_eq!(out.status.code(), Some(0), "{}", text(&out.stderr));
    assert_eq!(json(&out), serde_json::json!([]));
}

#[tokio::test]
async fn tenant_put_refuses_limits_that_admit_nothing() {
    let env = TestEnv::new(&[TableKind::Tenants, TableKind::Counters]).await;
    let mut put = vec!["tenant", "put", "--tenant-id", "zero"];
    for flag in [
        "--connections-per-session",
        "--tenant-connections",
        "--session-per-minute",
        "--tenant-per-minute",
    ] {
        put.extend([flag, "0"]);
    }
    let out = turnstile(Some(&env), &put);
    let err = text(&out.stderr);
    assert_eq!(out.status.code(), Some(1), "{err}");
    assert!(err.contains("admit no connection"), "{err}");
    let get = turnstile(Some(&env), &["tenant", "get", "--tenant-id", "zero"]);
    assert_eq!(get.status.code(), Some(1), "the tenant was written anyway");
}

#[tokio::test]
async fn reconcile_dry_run_says_what_it_waits_for_and_prints_a_json_report() {
    let env = TestEnv::new(&[TableKind::Tenants, TableKind::Sessions, TableKind::Counters]).await;
    let put = [
        "tenant",
        "put",
        "--tenant-id",
        "acme",
        "--connections-per-session",
        "2",
        "--tenant-connections",
        "10",
        "--session-per-minute",
        "5",
        "--tenant-per-minute",
        "60",
    ];
    assert_eq!(turnstile(Some(&env), &put).status.code(), Some(0));
    let args = [
        "reconcile",
        "--dry-run",
        "--tenant-id",
        "acme",
        "--grace-secs",
        "15",
    ];
    let out = turnstile(Some(&env), &args);
    let err = text(&out.stderr);
    assert_eq!(out.status.code(), Some(0), "{err}");
    assert!(
        err.contains("waiting 15 s"),
        "no progress on stderr:\n{err}"
    );
    assert!(
        !err.contains("TenantReport {"),
        "a Rust Debug struct:\n{err}"
    );
    let report = json(&out);
    assert_eq!(report["tenants"][0]["tenantId"], "acme", "{report}");
}

/// Every key of `v`, at any depth, that is not camelCase (has `_` or `-`, or starts upper-case).
fn not_camel_case(v: &serde_json::Value, path: &str, out: &mut Vec<String>) {
    match v {
        serde_json::Value::Object(m) => {
            for (k, v) in m {
                let camel = !k.contains(['_', '-']) && !k.starts_with(char::is_uppercase);
                if !camel && k != "@type" {
                    out.push(format!("{path}.{k}"));
                }
                not_camel_case(v, &format!("{path}.{k}"), out);
            }
        }
        serde_json::Value::Array(a) => a
            .iter()
            .enumerate()
            .for_each(|(i, v)| not_camel_case(v, &format!("{path}[{i}]"), out)),
        _ => {}
    }
}

#[tokio::test]
async fn json_output_is_camel_case_and_the_retry_hint_is_retry_after() {
    let env = TestEnv::new(&[
        TableKind::FungibleTokens,
        TableKind::Limits,
        TableKind::NonFungibleTokens,
        TableKind::Buckets,
    ])
    .await;
    let dir = std::env::temp_dir().join(format!("turnstile-cli-{}", env.prefix));
    std::fs::create_dir_all(&dir).unwrap();
    let limits_yaml = dir.join("limits.yaml");
    std::fs::write(
        &limits_yaml,
        "names:\n  Api: { id: 1, format: string }\ndefaults:\n  Api: { burst: 1, count: 1, period: 1h }\n",
    )
    .unwrap();
    let limits_json = dir.join("limits.json");
    std::fs::write(
        &limits_json,
        r#"{"limits":[{"accountId":"acct-1","resourceName":"api","limit":5,"windowSec":60}]}"#,
    )
    .unwrap();
    let yaml = limits_yaml.to_str().unwrap();
    let file = limits_json.to_str().unwrap();
    let take = [
        "token", "take", "api", "acct-1", "--limit", "1", "--window", "3600",
    ];
    let spend = ["kv", "spend", "Api", "k1", "--config", yaml];
    let get = ["reservation", "get", "emr", "acct-1", "--limit", "2"];
    let runs: Vec<Vec<&str>> = vec![
        take.to_vec(),
        take.to_vec(),
        spend.to_vec(),
        spend.to_vec(),
        get.to_vec(),
        vec!["reservation", "list", "emr", "acct-1"],
        vec!["limits", "load", file, "--service", "orders", "--dry-run"],
        vec!["limits", "list"],
        vec!["tables", "show"],
    ];
    let mut outputs = Vec::new();
    let mut bad = Vec::new();
    for args in &runs {
        let out = turnstile(Some(&env), args);
        let v = json(&out);
        not_camel_case(&v, &args[..2].join(" "), &mut bad);
        outputs.push(v);
    }
    assert!(bad.is_empty(), "keys not in camelCase: {bad:?}");
    let id = outputs[4]["reservationId"]
        .as_str()
        .unwrap_or_default()
        .to_string();
    let delete = turnstile(Some(&env), &["reservation", "delete", "emr", "acct-1", &id]);
    not_camel_case(&json(&delete), "reservation delete", &mut bad);
    assert!(bad.is_empty(), "keys not in camelCase: {bad:?}");
    // The refused token and the refused spend name their retry hint as the 429 and frames do.
    for refused in [&outputs[1], &outputs[3]] {
        let secs = refused["retryAfter"].as_f64();
        assert!(secs.is_some_and(|s| s > 0.0), "no retryAfter: {refused}");
    }
    let _ = std::fs::remove_dir_all(&dir);
}

/// Logs written to a file or a pipe (not a terminal) carry no ANSI colour codes, even without
/// `NO_COLOR`: `make dev > dev.log` stays readable.
#[tokio::test]
async fn logs_to_a_pipe_have_no_colour_codes() {
    let env = TestEnv::new(&[TableKind::Tenants, TableKind::Sessions, TableKind::Counters]).await;
    let event = concat!(
        env!("CARGO_MANIFEST_DIR"),
        "/../events/authorizer/connect-request.json"
    );
    let out = Command::new(env!("CARGO_BIN_EXE_turnstile"))
        .env_clear()
        .env("PATH", std::env::var_os("PATH").unwrap_or_default())
        .env("AWS_ENDPOINT_URL_DYNAMODB", &env.endpoint)
        .env("TURNSTILE_TABLE_PREFIX", &env.prefix)
        .args(["invoke", "authorizer", event])
        .output()
        .expect("the turnstile binary runs");
    let err = text(&out.stderr);
    assert!(err.contains("authorizer: deny"), "{err}");
    assert!(!err.contains('\u{1b}'), "colour codes in a pipe: {err:?}");
}

/// `--output table` prints the same result in columns: a list as one row per item under a header,
/// one item as `field value` lines; JSON stays the default.
#[tokio::test]
async fn output_table_prints_rows_and_json_stays_the_default() {
    let env = TestEnv::new(&[TableKind::Tenants, TableKind::Counters]).await;
    for id in ["acme", "globex"] {
        let put = turnstile(
            Some(&env),
            &[
                "tenant",
                "put",
                "--tenant-id",
                id,
                "--connections-per-session",
                "2",
                "--tenant-connections",
                "10",
                "--session-per-minute",
                "60",
                "--tenant-per-minute",
                "600",
            ],
        );
        assert_eq!(put.status.code(), Some(0), "{}", text(&put.stderr));
    }
    let list = turnstile(Some(&env), &["tenant", "list", "--output", "table"]);
    assert_eq!(list.status.code(), Some(0), "{}", text(&list.stderr));
    let out = text(&list.stdout);
    let lines: Vec<&str> = out.lines().collect();
    assert!(lines[0].starts_with("tenantId "), "{out}");
    assert!(lines[1].starts_with("--------"), "{out}");
    assert!(
        lines[2].starts_with("acme ") && lines[3].starts_with("globex "),
        "{out}"
    );
    assert_eq!(lines.len(), 4, "{out}");
    let get = turnstile(
        Some(&env),
        &["tenant", "get", "--tenant-id", "acme", "--output", "table"],
    );
    let out = text(&get.stdout);
    assert!(
        out.lines()
            .any(|l| l.starts_with("tenantId") && l.ends_with("acme")),
        "{out}"
    );
    assert!(!out.contains('{'), "{out}");
    let default = turnstile(Some(&env), &["tenant", "get", "--tenant-id", "acme"]);
    assert_eq!(json(&default)["tenantId"], "acme");
}

/// `turnstile region`: the ledger by hand. A move lowers the giver at once and raises the receiver
/// only after its quarantine; every step can be run again; the total is always accounted for.
#[tokio::test]
async fn region_moves_by_hand_and_never_counts_past_the_total() {
    let env = TestEnv::new(&[]).await;
    let table = format!("{}region-ledger", env.prefix);
    let run = |args: &[&str]| {
        let mut all = vec!["region", "--table", table.as_str()];
        all.extend_from_slice(args);
        turnstile(Some(&env), &all)
    };
    let created = run(&["create-table"]);
    assert_eq!(created.status.code(), Some(0), "{}", text(&created.stderr));
    let regions = "us-east-1,us-east-2,us-west-2";
    let init = run(&[
        "init",
        "--limit",
        "1:acme",
        "--total",
        "30",
        "--period",
        "60s",
        "--regions",
        regions,
    ]);
    assert_eq!(json(&init)["accounted"], 30, "{}", text(&init.stderr));
    let moved = run(&[
        "move",
        "--limit",
        "1:acme",
        "--from",
        "us-east-2",
        "--to",
        "us-east-1",
        "--amount",
        "4",
        "--period",
        "60s",
    ]);
    let ledger = json(&moved);
    assert_eq!(ledger["accounted"], 30);
    assert_eq!(ledger["regions"][1]["allotment"], 6, "{ledger}");
    assert_eq!(ledger["inTransit"][0]["amount"], 4, "{ledger}");

    let early = run(&["resume", "--limit", "1:acme", "--region", "us-east-1"]);
    assert_eq!(
        json(&early)["raised"],
        serde_json::json!([]),
        "{}",
        text(&early.stderr)
    );
    let later = (std::time::SystemTime::now() + std::time::Duration::from_secs(120))
        .duration_since(std::time::UNIX_EPOCH)
        .expect("after 1970")
        .as_millis()
        .to_string();
    let resume = [
        "resume",
        "--limit",
        "1:acme",
        "--region",
        "us-east-1",
        "--now",
        &later,
    ];
    let raised = run(&resume);
    let out = json(&raised);
    assert_eq!(out["raised"].as_array().map(Vec::len), Some(1), "{out}");
    assert_eq!(out["ledger"]["regions"][0]["allotment"], 14, "{out}");
    assert_eq!(out["ledger"]["accounted"], 30);
    let again = json(&run(&resume));
    assert_eq!(
        again["raised"],
        serde_json::json!([]),
        "a second resume raises nothing"
    );
    assert_eq!(again["ledger"]["regions"][0]["allotment"], 14);

    let too_much = run(&[
        "move",
        "--limit",
        "1:acme",
        "--from",
        "us-east-2",
        "--to",
        "us-east-1",
        "--amount",
        "100",
        "--period",
        "60s",
    ]);
    assert_eq!(too_much.status.code(), Some(1));
    assert!(
        text(&too_much.stderr).contains("holds 6 of 1:acme, cannot give 100"),
        "{}",
        text(&too_much.stderr)
    );
}
