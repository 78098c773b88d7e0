//! Metrics: real handler invocations against DynamoDB Local, flushed as the functions' `main.rs`
//! flush them ([`Metrics::invocation`]), the CloudWatch EMF lines parsed and checked by name,
//! dimensions and value. Its own test binary: the recorder is process-wide, so no other test's
//! calls can add to the counts asserted here, and its tests run one at a time ([`SERIAL`]).

mod policy;
mod tickets;
#[allow(dead_code)]
#[path = "../integration/ws_support.rs"]
mod ws_support;

use std::collections::BTreeMap;
use std::sync::{Arc, Mutex, OnceLock};

use serde_json::Value;
use shared::clock::Clock;
use shared::kv::{LimitSet, Limiter, Limits as KvLimits};
use shared::table::TableKind;
use shared::telemetry::metrics::{self, Metrics, Output, Settings};
use shared::tenant::Limits;
use turnstile_tests::TestEnv;
use ws_support::World;

static SERIAL: tokio::sync::Mutex<()> = tokio::sync::Mutex::const_new(());

/// Tenants named in `DecisionsByTenant` before the rest become `other`.
const TENANT_CAP: usize = 2;

fn recorder() -> &'static Metrics {
    static M: OnceLock<&'static Metrics> = OnceLock::new();
    M.get_or_init(|| {
        let mut s = Settings::to(Output::Memory(Arc::new(Mutex::new(Vec::new()))));
        s.tenant_dimension = true;
        s.tenant_cap = TENANT_CAP;
        metrics::install(s).expect("the recorder installs once")
    })
}

/// One EMF line: its namespace, dimension values, metric values and units.
#[derive(Debug)]
struct Line {
    namespace: String,
    dims: BTreeMap<String, String>,
    values: BTreeMap<String, Value>,
    units: BTreeMap<String, String>,
}

fn parse(bytes: &[u8]) -> Vec<Line> {
    let text = std::str::from_utf8(bytes).expect("EMF is UTF-8");
    text.lines()
        .map(|l| {
            let v: Value = serde_json::from_str(l).unwrap_or_else(|e| panic!("{e}: {l}"));
            let cw = &v["_aws"]["CloudWatchMetrics"][0];
            assert!(v["_aws"]["Timestamp"].is_u64(), "{l}");
            let dim_names: Vec<String> = cw["Dimensions"][0]
                .as_array()
                .expect("one dimension set")
                .iter()
                .map(|d| d.as_str().unwrap().to_string())
                .collect();
            let mut units = BTreeMap::new();
            let mut values = BTreeMap::new();
            for m in cw["Metrics"].as_array().expect("metrics") {
                let name = m["Name"].as_str().unwrap().to_string();
                if let Some(u) = m["Unit"].as_str() {
                    units.insert(name.clone(), u.to_string());
                }
                values.insert(name.clone(), v[&name].clone());
            }
            Line {
                namespace: cw["Namespace"].as_str().unwrap().to_string(),
                dims: dim_names
                    .iter()
                    .map(|d| (d.clone(), v[d].as_str().unwrap().to_string()))
                    .collect(),
                values,
                units,
            }
        })
        .collect()
}

/// The value of `metric` on the line whose dimensions are exactly `dims`.
fn value<'a>(lines: &'a [Line], metric: &str, dims: &[(&str, &str)]) -> Option<&'a Value> {
    let want: BTreeMap<String, String> = dims
        .iter()
        .map(|(k, v)| (k.to_string(), v.to_string()))
        .collect();
    lines
        .iter()
        .find(|l| l.dims == want && l.values.contains_key(metric))
        .map(|l| &l.values[metric])
}

fn count(lines: &[Line], metric: &str, dims: &[(&str, &str)]) -> u64 {
    value(lines, metric, dims)
        .and_then(Value::as_u64)
        .unwrap_or(0)
}

/// Runs one invocation of `function` as `main.rs` does and returns the lines it flushed.
async fn invoke<T>(function: &'static str, f: impl std::future::Future<Output = T>) -> Vec<Line> {
    let m = recorder();
    m.invocation(function, async { Ok::<_, ()>(f.await) })
        .await
        .unwrap();
    let emf = m.take();
    // Shown with --nocapture: the lines as CloudWatch would receive them.
    eprintln!("{function} EMF:\n{}", String::from_utf8_lossy(&emf));
    parse(&emf)
}

#[tokio::test]
async fn connect_and_message_invocations_emit_decisions_refusals_and_their_dynamodb_calls() {
    let _serial = SERIAL.lock().await;
    let w = World::new().await;
    // connectionsPerSession 1, messagesPerMinute 1.
    let limits = Limits::example(60, 5, 1, 10, 200, 1);
    let (t, s) = ("metrics-a", "s1");
    w.put_tenant(t, limits).await;
    w.put_session(t, s).await;
    recorder().take(); // setup is not what is measured
    w.env.counter.reset();

    // 1. An admitted connect: the first invocation of `connect` in this process is a cold start.
    let lines = invoke("connect", w.connect(t, s, "c1", &limits)).await;
    assert_eq!(count(&lines, "ColdStarts", &[("Function", "connect")]), 1);
    assert_eq!(
        count(
            &lines,
            "Invocations",
            &[("Function", "connect"), ("Result", "ok")]
        ),
        1
    );
    assert_eq!(
        count(
            &lines,
            "Decisions",
            &[("Path", "connect"), ("Outcome", "admitted")]
        ),
        1
    );
    // Named, unless other tests of this process already filled the capped dimension.
    let a_as = tenant_value(&lines, "admitted", t);
    let latency = value(&lines, "DecisionLatency", &[("Path", "connect")])
        .and_then(Value::as_array)
        .expect("one latency sample");
    assert_eq!(latency.len(), 1);
    assert!(latency[0].as_f64().unwrap() > 0.0);
    // DynamoDB calls by operation: exactly what the counting client saw (connect's budget: 2).
    let seen = w.env.counter.by_operation();
    assert!(seen.values().sum::<u64>() >= 2, "{seen:?}");
    for (op, n) in &seen {
        assert_eq!(
            count(&lines, "DynamoDbCalls", &[("Operation", op)]),
            *n,
            "{op}"
        );
        let samples = value(&lines, "DynamoDbLatency", &[("Operation", op)])
            .and_then(Value::as_array)
            .expect("latency samples");
        assert_eq!(samples.len() as u64, *n, "{op}");
    }
    assert!(lines.iter().all(|l| l.namespace == "Turnstile"));
    let units = |metric: &str| {
        lines
            .iter()
            .find_map(|l| l.units.get(metric).cloned())
            .unwrap_or_default()
    };
    assert_eq!(units("Decisions"), "Count");
    assert_eq!(units("DecisionLatency"), "Milliseconds");
    assert_eq!(units("DynamoDbLatency"), "Milliseconds");
    assert!(
        value(&lines, "DynamoDbErrors", &[("ErrorType", "Throttling")]).is_none(),
        "nothing failed"
    );

    // 2. A refused connect (the session holds its one connection): no second cold start.
    let lines = invoke("connect", w.connect(t, s, "c2", &limits)).await;
    assert_eq!(count(&lines, "ColdStarts", &[("Function", "connect")]), 0);
    assert_eq!(
        count(
            &lines,
            "Decisions",
            &[("Path", "connect"), ("Outcome", "refused")]
        ),
        1
    );
    assert_eq!(
        count(
            &lines,
            "Decisions",
            &[("Path", "connect"), ("Outcome", "admitted")]
        ),
        0,
        "counters restart at every flush"
    );
    assert_eq!(
        count(
            &lines,
            "Refusals",
            &[("Limit", "connectionsPerSession"), ("Outcome", "refused")]
        ),
        1
    );

    // 3. Two messages at 1 a minute: admitted (echoed through the Management API), then refused
    //    (the refusal is posted back to the sender).
    let lines = invoke("message", w.send(t, s, "c1", &limits, "hi")).await;
    assert_eq!(
        count(
            &lines,
            "Decisions",
            &[("Path", "message"), ("Outcome", "admitted")]
        ),
        1
    );
    assert_eq!(
        count(
            &lines,
            "ManagementApiCalls",
            &[("Action", "post"), ("Result", "delivered")]
        ),
        1
    );
    let lines = invoke("message", w.send(t, s, "c1", &limits, "again")).await;
    assert_eq!(
        count(
            &lines,
            "Refusals",
            &[("Limit", "messagesPerMinute"), ("Outcome", "refused")]
        ),
        1
    );
    assert_eq!(
        tenant_value(&lines, "refused", t),
        a_as,
        "a tenant keeps its value"
    );

    // 4. The tenant dimension is capped at TENANT_CAP distinct tenants; the rest are `other`, and
    //    once one is `other`, every later new tenant is too.
    let mut seen = vec![a_as];
    for (i, extra) in ["metrics-b", "metrics-c", "metrics-d"]
        .into_iter()
        .enumerate()
    {
        w.put_tenant(extra, limits).await;
        w.put_session(extra, s).await;
        recorder().take();
        let lines = invoke("connect", w.connect(extra, s, &format!("x{i}"), &limits)).await;
        seen.push(tenant_value(&lines, "admitted", extra));
    }
    let named = seen.iter().filter(|v| *v != "other").count();
    assert!(named <= TENANT_CAP && named < seen.len(), "{seen:?}");
    assert!(
        seen.windows(2).all(|p| p[0] != "other" || p[1] == "other"),
        "{seen:?}"
    );
}

/// The `Tenant` of the one `DecisionsByTenant` line with `outcome` (count 1): `tenant` or `other`.
fn tenant_value(lines: &[Line], outcome: &str, tenant: &str) -> String {
    let found: Vec<&Line> = lines
        .iter()
        .filter(|l| {
            l.values.contains_key("DecisionsByTenant")
                && l.dims.get("Outcome").map(String::as_str) == Some(outcome)
        })
        .collect();
    assert_eq!(found.len(), 1, "{found:?}");
    assert_eq!(found[0].values["DecisionsByTenant"], 1);
    let v = found[0].dims["Tenant"].clone();
    assert!(v == tenant || v == "other", "{v}");
    v
}

const KV_LIMITS: &str = "\
names:
  Worked: { id: 2, format: string }
defaults:
  Worked: { burst: 1, count: 1, period: 60s }
";

#[tokio::test]
async fn kv_spends_are_decisions_with_the_limit_name_and_no_tenant() {
    let _serial = SERIAL.lock().await;
    let env = TestEnv::new(&[TableKind::Buckets]).await;
    let limits = Arc::new(KvLimits::new(LimitSet::from_yaml(KV_LIMITS).unwrap()));
    let lim = Limiter::new(env.deps.dynamo.clone(), &env.deps.tables.buckets, limits);
    recorder().take();
    let now = env.clock.now();
    let lines = invoke("kv", async {
        assert!(
            lim.spend("Worked", "a", 1, now)
                .await
                .unwrap()
                .decision
                .allowed
        );
        assert!(
            !lim.spend("Worked", "a", 1, now)
                .await
                .unwrap()
                .decision
                .allowed
        );
        // Bad input is not a decision.
        assert!(lim.spend("Unknown", "a", 1, now).await.is_err());
    })
    .await;
    assert_eq!(
        count(
            &lines,
            "Decisions",
            &[("Path", "kv"), ("Outcome", "admitted")]
        ),
        1
    );
    assert_eq!(
        count(
            &lines,
            "Decisions",
            &[("Path", "kv"), ("Outcome", "refused")]
        ),
        1
    );
    assert_eq!(
        count(
            &lines,
            "Refusals",
            &[("Limit", "Worked"), ("Outcome", "refused")]
        ),
        1
    );
    assert!(
        lines.iter().all(|l| !l.dims.contains_key("Tenant")),
        "kv buckets carry no tenant"
    );
}

/// A batch invocation recording more latency samples than the backend keeps between flushes (100
/// per histogram) loses none: the recorder flushes early.
#[tokio::test]
async fn more_samples_than_one_emf_document_holds_are_all_written() {
    let _serial = SERIAL.lock().await;
    recorder().take();
    let lines = invoke("ttl-sweeper", async {
        for _ in 0..250 {
            shared::telemetry::catalogue::dynamodb_call(
                "PutItem",
                std::time::Duration::from_millis(3),
            );
        }
    })
    .await;
    let samples: usize = lines
        .iter()
        .filter(|l| l.dims.get("Operation").map(String::as_str) == Some("PutItem"))
        .filter_map(|l| l.values.get("DynamoDbLatency").and_then(Value::as_array))
        .map(Vec::len)
        .sum();
    let calls: u64 = lines
        .iter()
        .filter(|l| l.dims.get("Operation").map(String::as_str) == Some("PutItem"))
        .filter_map(|l| l.values.get("DynamoDbCalls").and_then(Value::as_u64))
        .sum();
    assert_eq!((samples, calls), (250, 250));
}
