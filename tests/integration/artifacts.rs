//! The artifacts `sam build` made, started as Lambda starts them: each
//! `.aws-sam/build/<Function>/bootstrap` gets a Lambda Runtime API on loopback (the cold-start
//! harness's, `turnstile_bench::coldstart`), the environment template.yaml resolves for that
//! function (the interpreter of tests/integration/template.rs, under a stack named after this run's
//! tables) with the local endpoints swapped in, and every sample event of `events/<function>/` in
//! turn, against DynamoDB Local. Each answer must be what the handler tests assert for the same
//! sample (named beside each expectation). Fails when an artifact crashes, hangs past its template
//! `Timeout`, or answers otherwise.
//!
//! Offline differences, on purpose: `TenantIsolation=Disabled` (no STS here to assume the tenant
//! role), the Management API is a local recorder, and the reconciler's grace is its minimum (15 s).
//! Ignored in the plain `cargo test` run: `scripts/sam-check.sh` runs it after `sam build` with
//! `TURNSTILE_SAM_BUILD_DIR` set, and `TURNSTILE_ARTIFACT_RUNNER` (e.g. `qemu-aarch64 -L
//! /usr/aarch64-linux-gnu`) when the artifacts are for another architecture than this host's
//! (the arm64 default, started under qemu-user on x86_64; decision 0704). Times under emulation say
//! only that a sample finished within its `Timeout`; they are not performance numbers.

use std::collections::BTreeMap;
use std::net::SocketAddr;
use std::path::{Path, PathBuf};
use std::sync::Arc;
use std::time::{Duration, Instant};

use serde_json::Value;
use shared::config::Vars;
use shared::table::{TableKind, TableNames};
use turnstile_bench::coldstart::{self, Outcome};
use turnstile_bench::samples;
use turnstile_local::secrets::SecretsManager;
use turnstile_local::{ManagementApi, Recorder};
use turnstile_tests::TestEnv;

use crate::template::{load_template, Stack};

/// What a sample needs in the tables before it runs (tenant-1 and session-1 are always there).
#[derive(Clone, Copy, Debug)]
enum Before {
    Nothing,
    /// session-1 live again (a previous sample may have deleted it).
    Session,
    /// The sample connection admitted.
    Connection,
    /// A token bound to this EMR cluster.
    Token(&'static str),
}

type Check = fn(&Value, &ManagementApi) -> Result<(), String>;

/// Every sample event and the answer the handler tests expect for it.
const EXPECTED: &[(&str, &str, Before, Check)] = &[
    // ws_authorizer::the_sample_authorizer_event_runs_as_is
    (
        "authorizer",
        "connect-request.json",
        Before::Nothing,
        |v, _| {
            let st = &v["policyDocument"]["Statement"][0];
            want(st["Effect"] == "Allow", "an Allow policy", v)?;
            want(
                st["Action"][0] == "execute-api:Invoke",
                "execute-api:Invoke",
                v,
            )
        },
    ),
    // ws_admission::the_sample_connect_event_runs_as_is
    ("connect", "connect.json", Before::Nothing, |v, _| {
        status(v, 200)
    }),
    (
        "disconnect",
        "disconnect.json",
        Before::Connection,
        |v, _| status(v, 200),
    ),
    // ws_message::the_sample_message_event_runs_as_is
    ("message", "message.json", Before::Connection, |v, api| {
        status(v, 200)?;
        let posts = api.received_by("POST");
        want(
            posts.len() == 1 && posts[0].connection_id == samples::CONNECTION,
            "one POST to the sample connection",
            &Value::String(format!("{} POSTs", posts.len())),
        )?;
        want(
            posts[0].body_str() == r#"{"action":"say","text":"hello"}"#,
            "the message body relayed",
            &Value::String(posts[0].body_str().to_string()),
        )
    }),
    // ws_session_api (create / read / delete of a session: 200 and the session as JSON)
    ("session-api", "delete.json", Before::Session, |v, _| {
        status(v, 200)
    }),
    ("session-api", "get.json", Before::Session, |v, _| {
        session_body(v)
    }),
    ("session-api", "put.json", Before::Session, |v, _| {
        session_body(v)
    }),
    // decide::a_spend_answers_its_verdict_in_body_and_headers_with_one_call_and_one_wcu (through
    // the function URL, as DecideCallerRole's session tenant-1)
    ("decide-api", "spend.json", Before::Nothing, |v, _| {
        status(v, 200)?;
        let body: Value = v["body"]
            .as_str()
            .and_then(|b| serde_json::from_str(b).ok())
            .unwrap_or_default();
        want(body["allowed"] == true, "an allowed spend", v)
    }),
    // decide::the_state_of_a_bucket_is_read_with_one_get
    ("decide-api", "state.json", Before::Nothing, |v, _| {
        status(v, 200)
    }),
    // ws_sweeper::the_sample_stream_event_runs_as_is
    (
        "ttl-sweeper",
        "ttl-expiry.json",
        Before::Connection,
        |v, api| {
            want(
                v["batchItemFailures"] == Value::Array(vec![]),
                "no batch item failures",
                v,
            )?;
            let closed: Vec<String> = api
                .received_by("DELETE")
                .into_iter()
                .map(|r| r.connection_id)
                .collect();
            want(
                closed.iter().any(|c| c == samples::CONNECTION),
                "the expired session's connection closed",
                &Value::String(format!("{closed:?}")),
            )
        },
    ),
    // token_remover::terminated_clusters_lose_their_tokens_and_release_capacity and
    // token_remover::unrelated_and_debugging_events_are_acknowledged_without_removal
    (
        "token-remover",
        "emr-running.json",
        Before::Nothing,
        |v, _| {
            want(
                v["action"] == "skipped" && v["processor"] == 0,
                "skipped",
                v,
            )
        },
    ),
    (
        "token-remover",
        "emr-terminated-with-errors.json",
        Before::Token("j-3GRZ8AC8Q6X4E"),
        |v, _| removed(v, "j-3GRZ8AC8Q6X4E"),
    ),
    (
        "token-remover",
        "emr-terminated.json",
        Before::Token(samples::CLUSTER),
        |v, _| removed(v, samples::CLUSTER),
    ),
    (
        "token-remover",
        "unrelated-source.json",
        Before::Nothing,
        |v, _| {
            want(
                v["action"] == "unmatched" && v["source"] == "aws.ec2",
                "unmatched (aws.ec2)",
                v,
            )
        },
    ),
    // ws_reconcile (the sample events: a dry run of tenant-1, then every tenant): the admitted
    // connection is in its session, so the count is consistent.
    (
        "reconciler",
        "one-tenant-dry-run.json",
        Before::Connection,
        |v, _| {
            want(v["dryRun"] == true, "a dry run", v)?;
            consistent_tenant_1(v)
        },
    ),
    (
        "reconciler",
        "scheduled.json",
        Before::Connection,
        |v, _| {
            want(v["dryRun"] == false, "a real run", v)?;
            consistent_tenant_1(v)
        },
    ),
];

fn want(ok: bool, what: &str, got: &Value) -> Result<(), String> {
    if ok {
        Ok(())
    } else {
        Err(format!("expected {what}, got {got}"))
    }
}

fn status(v: &Value, code: u16) -> Result<(), String> {
    want(v["statusCode"] == code, &format!("statusCode {code}"), v)
}

fn session_body(v: &Value) -> Result<(), String> {
    status(v, 200)?;
    let body: Value = v["body"]
        .as_str()
        .and_then(|b| serde_json::from_str(b).ok())
        .unwrap_or(Value::Null);
    want(
        body["tenantId"] == samples::TENANT && body["sessionId"] == samples::SESSION,
        "the sample session as JSON",
        v,
    )
}

fn removed(v: &Value, cluster: &str) -> Result<(), String> {
    want(
        v["action"] == "removed"
            && v["resourceId"] == cluster
            && v["tokens"].as_array().is_some_and(|t| t.len() == 1),
        &format!("the one token of {cluster} removed"),
        v,
    )
}

fn consistent_tenant_1(v: &Value) -> Result<(), String> {
    let tenants = v["tenants"].as_array().cloned().unwrap_or_default();
    want(
        tenants.len() == 1
            && tenants[0]["tenantId"] == samples::TENANT
            && tenants[0]["outcome"] == "consistent",
        "tenant-1 consistent",
        v,
    )
}

fn root() -> PathBuf {
    Path::new(env!("CARGO_MANIFEST_DIR")).join("..")
}

/// The sample events of one function, by file name.
fn sample_events(function: &str) -> Vec<String> {
    let dir = root().join("events").join(function);
    let mut names: Vec<String> = std::fs::read_dir(&dir)
        .unwrap_or_else(|e| panic!("reading {}: {e}", dir.display()))
        .filter_map(|e| e.ok()?.file_name().into_string().ok())
        .filter(|n| n.ends_with(".json"))
        .collect();
    names.sort();
    names
}

/// The command that starts a foreign-architecture artifact here (`TURNSTILE_ARTIFACT_RUNNER`, split
/// on spaces); empty: the artifact runs directly.
fn runner() -> Vec<String> {
    std::env::var("TURNSTILE_ARTIFACT_RUNNER")
        .unwrap_or_default()
        .split_whitespace()
        .map(String::from)
        .collect()
}

/// One artifact against all its samples, on tables of its own; the failures, if any.
async fn check_function(build_dir: &Path, function_id: &str, binary: &str) -> Vec<String> {
    let fail = |event: &str, msg: String| format!("{binary} ({function_id}) on {event}: {msg}");
    let env = TestEnv::new(&TableKind::ALL).await;
    samples::seed_rows(&env.deps).await.expect("seeding");
    let api = ManagementApi::start(
        SocketAddr::from(([127, 0, 0, 1], 0)),
        Arc::new(Recorder::new()),
    )
    .await
    .expect("local Management API starts");

    // The function's environment as CloudFormation would set it, for a stack whose tables are this
    // run's (TestEnv's prefix is `t<hex>-`: stack `t<hex>`).
    let t = load_template();
    let stack = Stack::named(
        &t,
        env.prefix.trim_end_matches('-'),
        &[
            ("TenantIsolation", "Disabled"),
            // The backend roles the decide API's caller role trusts (the samples are its sessions).
            (
                "SessionCallerPrincipal",
                "arn:aws:iam::123456789012:role/backend",
            ),
        ],
    );
    let mut vars: BTreeMap<String, String> = stack.environment(function_id);
    let names = TableNames::from_vars(&Vars::from_pairs(vars.clone())).expect("table names");
    assert_eq!(
        names, env.deps.tables,
        "{function_id}: the template's tables"
    );
    // Local endpoints in place of AWS's.
    vars.insert("AWS_ENDPOINT_URL_DYNAMODB".into(), env.endpoint.clone());
    if let Some(ep) = vars.get_mut("TURNSTILE_MANAGEMENT_ENDPOINT") {
        *ep = api.url();
    }
    if let Some(g) = vars.get_mut("TURNSTILE_RECONCILE_GRACE_SECS") {
        *g = "15".into();
    }
    // The ticket key set: the secret the template names, served by a local Secrets Manager holding
    // the sample key set (the sample events' ticket is signed with it), read by the real client.
    let secrets = SecretsManager::start(SocketAddr::from(([127, 0, 0, 1], 0)))
        .await
        .expect("local Secrets Manager starts");
    if let Some(id) = vars.get("TURNSTILE_TICKET_KEYS_SECRET") {
        secrets.put(id, samples::SAMPLE_KEYS);
        vars.insert("AWS_ENDPOINT_URL_SECRETS_MANAGER".into(), secrets.url());
    }
    let env_pairs: Vec<(String, String)> = vars.into_iter().collect();
    let timeout = stack.function(function_id)["Timeout"]
        .as_u64()
        .unwrap_or_else(|| panic!("{function_id}: a numeric Timeout"));
    let limit = Duration::from_secs(timeout + 5);
    let bootstrap = build_dir.join(function_id).join("bootstrap");
    let log = std::env::temp_dir().join(format!("artifact-{}-{binary}.log", env.prefix));

    let mut failures = Vec::new();
    let events = sample_events(binary);
    if events.is_empty() {
        failures.push(fail("events/", "no sample event".into()));
    }
    for event in events {
        let Some((_, _, before, check)) = EXPECTED
            .iter()
            .find(|(f, e, _, _)| *f == binary && *e == event)
        else {
            failures.push(fail(&event, "no expected answer in EXPECTED".into()));
            continue;
        };
        let ready = match before {
            Before::Nothing => Ok(()),
            Before::Session => samples::ensure_sample_session(&env.deps).await,
            Before::Connection => samples::admit_sample_connection(&env.deps).await,
            Before::Token(cluster) => samples::bind_cluster(&env.deps, cluster).await,
        };
        ready.unwrap_or_else(|e| panic!("{binary} {event}: preparing: {e}"));
        api.clear();
        let body = std::fs::read(root().join("events").join(binary).join(&event)).unwrap();
        let started = Instant::now();
        let run = coldstart::invoke_once(
            &runner(),
            &bootstrap,
            binary,
            &body,
            &env_pairs,
            limit,
            Some(&log),
        )
        .await
        .unwrap_or_else(|e| panic!("{binary}: {e}"));
        let ms = started.elapsed().as_millis();
        let answer = run.posted.as_deref().unwrap_or("");
        let verdict = match run.outcome {
            Outcome::Response => match serde_json::from_str::<Value>(answer) {
                Ok(v) => check(&v, &api),
                Err(e) => Err(format!("answer is not JSON ({e}): {answer}")),
            },
            other => Err(format!("{other:?} after {ms} ms: {answer}")),
        };
        match verdict {
            Ok(()) => println!("artifact {binary:<14} {event:<32} ok ({ms} ms)"),
            Err(msg) => {
                let logs = std::fs::read_to_string(&log).unwrap_or_default();
                let tail: String = logs.lines().rev().take(20).collect::<Vec<_>>().join("\n");
                failures.push(fail(
                    &event,
                    format!("{msg}\n  its log (last lines, newest first):\n{tail}"),
                ));
            }
        }
    }
    let _ = std::fs::remove_file(&log);
    failures
}

#[tokio::test]
#[ignore = "needs the `sam build` artifacts: run by scripts/sam-check.sh"]
async fn every_built_artifact_answers_its_sample_events_as_the_handler_tests_expect() {
    let build_dir = PathBuf::from(std::env::var("TURNSTILE_SAM_BUILD_DIR").expect(
        "TURNSTILE_SAM_BUILD_DIR: the `sam build` output (.aws-sam/build); see scripts/sam-check.sh",
    ));
    let t = load_template();
    let functions = Stack::named(&t, "turnstile", &[]).functions();
    assert_eq!(functions.len(), 9, "{functions:?}");
    // Every expectation belongs to a function that exists and a sample that exists.
    for (f, e, _, _) in EXPECTED {
        assert!(functions.values().any(|b| b == f), "EXPECTED names {f}");
        assert!(
            root().join("events").join(f).join(e).is_file(),
            "EXPECTED names {f}/{e}"
        );
    }
    let runner = runner();
    if !runner.is_empty() {
        println!(
            "artifacts started through `{}`: the times below are emulation, not performance numbers",
            runner.join(" ")
        );
    }
    // Each function on its own tables, all at once (the reconciler's two graces set the pace).
    let runs = functions
        .iter()
        .map(|(id, bin)| check_function(&build_dir, id, bin));
    let failures: Vec<String> = futures::future::join_all(runs)
        .await
        .into_iter()
        .flatten()
        .collect();
    assert!(failures.is_empty(), "{}", failures.join("\n"));
}
