//! Client cost: what one decision costs the client alone, apart from DynamoDB Local.
//!
//! Each workload runs at c = 1 against a [`turnstile_faultproxy::replay`] stub in another process:
//! its warm-up goes through to DynamoDB Local while the stub records the answers, then the stub is
//! switched to replay and the timed decisions get those answers back at once. Two figures per
//! decision: CPU time of this process (user + sys from `getrusage(RUSAGE_SELF)` around the timed
//! decisions; the stub's CPU is its own process's) and the p50 latency. Calls and bytes per decision
//! are the stub's counts, so a client that left its success path (more calls, a miss) shows.
//! Decision record: docs/decisions/0806-client-cost.md.

use std::collections::BTreeMap;
use std::time::Duration;

use serde::Serialize;
use serde_json::Value;
use turnstile_faultproxy::replay;

use crate::error::BenchError;
use crate::runner::{drive, summarize};
use crate::workload::{BenchCtx, Factory, Params, Spec};

/// User and system CPU time this process has used so far.
#[derive(Debug, Clone, Copy, Default, PartialEq)]
pub struct Cpu {
    pub user: Duration,
    pub sys: Duration,
}

impl Cpu {
    /// `getrusage(RUSAGE_SELF)`: every thread of this process (the tokio workers included).
    pub fn now() -> Result<Cpu, BenchError> {
        // SAFETY: `getrusage` only writes the struct it is given, which is zeroed and ours.
        let mut ru: libc::rusage = unsafe { std::mem::zeroed() };
        // SAFETY: as above; RUSAGE_SELF is a valid `who`.
        let rc = unsafe { libc::getrusage(libc::RUSAGE_SELF, &mut ru) };
        if rc != 0 {
            return Err(BenchError::io("getrusage", std::io::Error::last_os_error()));
        }
        let tv = |t: libc::timeval| {
            Duration::from_secs(t.tv_sec.max(0) as u64)
                + Duration::from_micros(t.tv_usec.max(0) as u64)
        };
        Ok(Cpu {
            user: tv(ru.ru_utime),
            sys: tv(ru.ru_stime),
        })
    }

    fn since(self, earlier: Cpu) -> Cpu {
        Cpu {
            user: self.user.saturating_sub(earlier.user),
            sys: self.sys.saturating_sub(earlier.sys),
        }
    }
}

/// One JSON line of a client-cost run (the Python peer drivers emit the same shape).
#[derive(Debug, Clone, Serialize)]
pub struct ClientCostLine {
    pub kind: &'static str,
    pub implementation: String,
    pub workload: String,
    pub concurrency: usize,
    pub decisions: u64,
    pub admitted: u64,
    pub refused: u64,
    pub errors: u64,
    pub first_error: Option<String>,
    /// User + sys CPU microseconds of the client process per timed decision.
    pub cpu_us_per_decision: f64,
    pub user_us_per_decision: f64,
    pub sys_us_per_decision: f64,
    pub p50_ms: f64,
    pub p90_ms: f64,
    pub mean_ms: f64,
    pub wall_s: f64,
    /// Requests the stub received per timed decision.
    pub calls_per_decision: f64,
    pub calls_by_operation: BTreeMap<String, u64>,
    /// Timed requests no recorded answer matched (forwarded to DynamoDB Local instead): 0 when the
    /// whole timed run was client-only.
    pub stub_misses: u64,
    pub request_bytes_per_decision: f64,
    pub response_bytes_per_decision: f64,
    pub warmup_decisions: u64,
    pub cpu_source: &'static str,
}

/// How [`ClientCostLine::cpu_us_per_decision`] is measured.
pub const CPU_SOURCE: &str = "getrusage(RUSAGE_SELF) user + sys of the client process around the \
     timed decisions, / decisions; answers replayed by a stub in another process";

fn stat(v: &Value, name: &str) -> u64 {
    v[name].as_u64().unwrap_or(0)
}

/// A client-cost run of one workload at c = 1: `warmup` decisions recorded through the stub at
/// `stub` (whose upstream is DynamoDB Local), then `decisions` timed ones answered by its replay.
/// `ctx.client` must point at the stub.
pub async fn run(
    ctx: &BenchCtx,
    stub: &str,
    spec: &Spec,
    build: Factory,
    decisions: u64,
    warmup: u64,
) -> Result<ClientCostLine, BenchError> {
    let ctl = |e: replay::StubError| BenchError::Other(e.to_string());
    replay::control(stub, "record").await.map_err(ctl)?;
    let params = Params::fresh(spec, "cc", (decisions + warmup) * 10, false);
    let workload = build(ctx, &params).await?;
    let (warm, _) = drive(workload.clone(), 1, warmup.max(1), 0).await;
    if let Some(e) = warm.first_error {
        return Err(BenchError::Other(format!(
            "{} warm-up (recording): {e}",
            spec.id
        )));
    }
    replay::control(stub, "replay").await.map_err(ctl)?;
    let before = Cpu::now()?;
    let (t, wall) = drive(workload, 1, decisions, warmup.max(1)).await;
    let cpu = Cpu::now()?.since(before);
    let stats = replay::control(stub, "stats").await.map_err(ctl)?;
    let n = t.samples.len() as u64;
    let per = |x: f64| if n == 0 { 0.0 } else { x / n as f64 };
    let us = |d: Duration| d.as_secs_f64() * 1e6;
    let latency = summarize(t.samples);
    let by_operation = stats["by_operation"]
        .as_object()
        .map(|m| {
            m.iter()
                .map(|(k, v)| (k.clone(), v.as_u64().unwrap_or(0)))
                .collect()
        })
        .unwrap_or_default();
    Ok(ClientCostLine {
        kind: "client_cost",
        implementation: "turnstile".into(),
        workload: spec.id.into(),
        concurrency: 1,
        decisions: n,
        admitted: t.admitted,
        refused: t.refused,
        errors: t.errors,
        first_error: t.first_error,
        cpu_us_per_decision: per(us(cpu.user + cpu.sys)),
        user_us_per_decision: per(us(cpu.user)),
        sys_us_per_decision: per(us(cpu.sys)),
        p50_ms: latency.p50_ms,
        p90_ms: latency.p90_ms,
        mean_ms: latency.mean_ms,
        wall_s: wall.as_secs_f64(),
        calls_per_decision: per(stat(&stats, "requests") as f64),
        calls_by_operation: by_operation,
        stub_misses: stat(&stats, "misses"),
        request_bytes_per_decision: per(stat(&stats, "request_bytes") as f64),
        response_bytes_per_decision: per(stat(&stats, "response_bytes") as f64),
        warmup_decisions: warmup.max(1),
        cpu_source: CPU_SOURCE,
    })
}

#[cfg(test)]
mod tests {
    use super::*;
    use aws_sdk_dynamodb::types::{AttributeValue, ReturnValue};
    use turnstile_faultproxy::{FaultProxy, Policy};

    use crate::runner::short_id;
    use crate::workload::{registry, Availability};

    /// DynamoDB Local: `TURNSTILE_TEST_DYNAMODB`, else port `DYNAMODB_LOCAL_PORT` (8000).
    fn endpoint() -> String {
        std::env::var("TURNSTILE_TEST_DYNAMODB").unwrap_or_else(|_| {
            let port = std::env::var("DYNAMODB_LOCAL_PORT").unwrap_or_else(|_| "8000".into());
            format!("http://127.0.0.1:{port}")
        })
    }

    fn ctx_at(url: &str) -> BenchCtx {
        BenchCtx::new(url, "cctest", false)
    }

    fn factory(id: &str) -> (Spec, Factory) {
        let spec = registry().into_iter().find(|s| s.id == id).unwrap();
        let Availability::Ready(build) = spec.availability else {
            panic!("{id} is not available")
        };
        (spec, build)
    }

    /// Recorded through the stub, then replayed with the emulator out of reach (a fault proxy in
    /// between refusing every connection): the floor's decisions still succeed, every request is
    /// answered from the record, and an answer is the recorded one, not what DynamoDB would say now.
    #[tokio::test]
    async fn replayed_decisions_succeed_without_the_emulator() {
        let gate = FaultProxy::start(&endpoint()).await.unwrap();
        let stub = replay::ReplayStub::bind(([127, 0, 0, 1], 0).into(), &gate.url())
            .await
            .unwrap();
        let ctx = ctx_at(&stub.url());
        let (spec, build) = factory("floor");
        let params = Params {
            key: format!("cc-{}", short_id()),
            limit: 1000,
            window_secs: 3600,
            accuracy: false,
        };
        let w = build(&ctx, &params).await.unwrap();
        let (warm, _) = drive(w.clone(), 1, 5, 0).await;
        assert_eq!(
            (warm.admitted, warm.errors),
            (5, 0),
            "{:?}",
            warm.first_error
        );
        // One more request shape whose answer carries the item: the counter after one more ADD.
        let table = format!("{}floor", ctx.prefix);
        let bump = || {
            ctx.client
                .update_item()
                .table_name(&table)
                .key("pk", AttributeValue::S(params.key.clone()))
                .update_expression("ADD n :one")
                .expression_attribute_values(":one", AttributeValue::N("1".into()))
                .return_values(ReturnValue::UpdatedNew)
                .send()
        };
        let recorded = bump().await.unwrap();
        assert_eq!(
            recorded.attributes().and_then(|a| a.get("n")),
            Some(&AttributeValue::N("6".into()))
        );

        gate.set_policy(Policy::refuse());
        let forwarded = gate.stats().forwarded;
        replay::control(&stub.url(), "replay").await.unwrap();
        let (t, _) = drive(w, 1, 50, 5).await;
        assert_eq!(
            (t.admitted, t.errors),
            (50, 0),
            "{}: {:?}",
            spec.id,
            t.first_error
        );
        let replayed = bump().await.unwrap();
        assert_eq!(
            replayed.attributes(),
            recorded.attributes(),
            "the recorded answer"
        );
        let stats = replay::control(&stub.url(), "stats").await.unwrap();
        assert_eq!(stat(&stats, "requests"), 51);
        assert_eq!(stat(&stats, "replayed"), 51);
        assert_eq!(stat(&stats, "misses"), 0);
        assert_eq!(
            gate.stats().forwarded,
            forwarded,
            "nothing reached the emulator"
        );
    }

    /// The whole client-cost run of a limiter path: on its success path (1 call per decision, all
    /// admitted), nothing missed, CPU time measured.
    #[tokio::test]
    async fn a_client_cost_run_of_gcra_spend_stays_on_its_success_path() {
        let stub = replay::ReplayStub::bind(([127, 0, 0, 1], 0).into(), &endpoint())
            .await
            .unwrap();
        let ctx = ctx_at(&stub.url());
        let (spec, build) = factory("gcra-spend");
        let line = run(&ctx, &stub.url(), &spec, build, 200, 10).await.unwrap();
        assert_eq!(
            (line.decisions, line.admitted, line.errors),
            (200, 200, 0),
            "{:?}",
            line.first_error
        );
        assert_eq!(line.stub_misses, 0);
        assert_eq!(line.calls_per_decision, 1.0);
        assert_eq!(line.calls_by_operation.get("UpdateItem"), Some(&200));
        assert!(line.cpu_us_per_decision > 0.0);
        assert!(line.request_bytes_per_decision > 0.0);
    }

    /// The counter moves with this process's work (a busy machine only makes it take longer).
    #[test]
    fn cpu_time_grows_with_work() {
        let a = Cpu::now().unwrap();
        let mut x = 0u64;
        let t = std::time::Instant::now();
        let mut d = Cpu::default();
        while t.elapsed() < Duration::from_secs(20) {
            for _ in 0..100_000 {
                x = std::hint::black_box(x.wrapping_mul(31).wrapping_add(7));
            }
            d = Cpu::now().unwrap().since(a);
            if d.user >= Duration::from_millis(20) {
                break;
            }
        }
        // A spin is user time. (Not compared with sys: the counter is the whole process's, and
        // tests running beside this one in other threads add their own system time — seen in CI:
        // user 9.96 ms, sys 11.21 ms.)
        assert!(
            d.user >= Duration::from_millis(20),
            "{d:?} after 20 s of spinning"
        );
    }
}
