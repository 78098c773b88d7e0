//! `turnstile-bench`: the Rust half of `make bench` (scripts/bench.sh drives it).
//!
//! - `ours`: every workload in [`workload::registry`] at each concurrency, plus the concurrent
//!   accuracy test, against a DynamoDB Local endpoint; one JSON line per result on stdout.
//! - `cold-start`: each function binary started against a loopback Lambda Runtime API; one JSON
//!   line per function.
//!
//! The Python peer drivers (bench/peers/drive.py) emit the same JSON lines; bench/report.py turns
//! them all into BENCHMARKS.md and bench/results.json. To add a workload see [`workload`].

#[global_allocator]
static GLOBAL: mimalloc::MiMalloc = mimalloc::MiMalloc;

use std::path::PathBuf;
use std::process::ExitCode;

use clap::{Parser, Subcommand};
use serde::Serialize;
use shared::dynamo::local_client;
use shared::table::TableNames;

use turnstile_bench::error::BenchError;
use turnstile_bench::workload::{self, Availability, BenchCtx, Spec};
use turnstile_bench::{clientcost, coldstart, runner, samples};

#[derive(Parser)]
#[command(
    name = "turnstile-bench",
    about = "Turnstile benchmarks (see BENCHMARKS.md)"
)]
struct Cli {
    #[command(subcommand)]
    command: Command,
}

#[derive(Subcommand)]
enum Command {
    /// Run Turnstile's workloads and the accuracy test; JSON lines on stdout.
    Ours {
        /// DynamoDB endpoint (a DynamoDB Local started for the bench).
        #[arg(long)]
        endpoint: String,
        /// Timed decisions per workload and concurrency.
        #[arg(long, default_value_t = 2000)]
        decisions: u64,
        /// Untimed decisions before each timed run (connection set-up, JIT of DynamoDB Local).
        #[arg(long, default_value_t = 100)]
        warmup: u64,
        #[arg(long, value_delimiter = ',', default_value = "1,8,32")]
        concurrency: Vec<usize>,
        #[arg(long, default_value_t = 50)]
        accuracy_limit: u64,
        #[arg(long, default_value_t = 16)]
        accuracy_workers: usize,
        #[arg(long, default_value_t = 20)]
        accuracy_attempts: u64,
        /// Only these workload ids (default: all).
        #[arg(long, value_delimiter = ',')]
        only: Vec<String>,
        /// Round number written into every throughput and accuracy line (scripts/bench.sh runs
        /// each workload once per round, interleaved with the peers).
        #[arg(long, default_value_t = 1)]
        round: u32,
    },
    /// The ids of the workloads that can run, one per line (pending ones are left out).
    List,
    /// Prime a fresh DynamoDB Local: the same requests before every measured unit (src/prime.rs).
    Prime {
        #[arg(long)]
        endpoint: String,
        #[arg(long, default_value_t = 2000)]
        requests: u64,
    },
    /// Simulation: the fault proxy throttles each item past `per_item` writes/s in front of DynamoDB
    /// Local; one sharded GCRA limit of `rate`/s offered `offered` decisions/s, once per shard count.
    /// One JSON line (`kind: "sim"`) per shard count on stdout.
    Sim {
        #[arg(long)]
        endpoint: String,
        #[arg(long, default_value_t = 20)]
        per_item: u32,
        #[arg(long, default_value_t = 240)]
        rate: u64,
        #[arg(long, default_value_t = 300)]
        offered: u64,
        #[arg(long, default_value_t = 10.0)]
        seconds: f64,
        #[arg(long, value_delimiter = ',', default_value = "1,32")]
        shards: Vec<u32>,
        #[arg(long, default_value_t = 32)]
        workers: usize,
        #[arg(long, default_value_t = 15)]
        seed: u64,
    },
    /// Client cost: each workload at c = 1 against a record-then-replay stub (`stub`), CPU time of
    /// this process and p50 per decision; one JSON line (`kind: "client_cost"`) per workload.
    ClientCost {
        /// The stub's endpoint (`turnstile-bench stub`, in front of DynamoDB Local).
        #[arg(long)]
        stub: String,
        #[arg(long, default_value_t = 2000)]
        decisions: u64,
        /// Decisions recorded through the stub before the timed ones (at least 1).
        #[arg(long, default_value_t = 100)]
        warmup: u64,
        /// Only these workload ids (default: all).
        #[arg(long, value_delimiter = ',')]
        only: Vec<String>,
        #[arg(long, default_value_t = 1)]
        round: u32,
    },
    /// The record-then-replay stub of DynamoDB for `client-cost`, in front of `upstream`; runs until
    /// killed. Its URL is printed on stdout and written to `addr_file` if given.
    Stub {
        #[arg(long, default_value = "127.0.0.1:0")]
        listen: std::net::SocketAddr,
        #[arg(long)]
        upstream: String,
        #[arg(long)]
        addr_file: Option<PathBuf>,
    },
    /// Cold start and size of each function binary; JSON lines on stdout.
    ColdStart {
        /// Folder holding the built function binaries.
        #[arg(long)]
        bin_dir: PathBuf,
        /// Folder of sample events (`events/<fn>.json` or `events/<fn>/*.json`).
        #[arg(long, default_value = "events")]
        events_dir: PathBuf,
        /// DynamoDB endpoint given to the functions (`AWS_ENDPOINT_URL_DYNAMODB`).
        #[arg(long)]
        endpoint: String,
        /// Timed starts per function (after one untimed start).
        #[arg(long, default_value_t = 5)]
        runs: usize,
        /// Only these functions (default: all of `coldstart::FUNCTIONS`).
        #[arg(long, value_delimiter = ',')]
        only: Vec<String>,
    },
}

#[derive(Serialize)]
struct SpecLine<'a> {
    kind: &'static str,
    workload: &'a str,
    title: &'a str,
    available: bool,
    pending_reason: Option<&'a str>,
    expected_calls: Option<f64>,
    races: bool,
    single_call: bool,
    accuracy: bool,
    peer_workload: Option<&'a str>,
    refuses: bool,
}

fn emit<T: Serialize>(line: &T) -> Result<(), BenchError> {
    let s = serde_json::to_string(line).map_err(|e| BenchError::Other(e.to_string()))?;
    println!("{s}");
    Ok(())
}

/// Emits a result line with its round number added.
fn emit_round<T: Serialize>(line: &T, round: u32) -> Result<(), BenchError> {
    let mut v = serde_json::to_value(line).map_err(|e| BenchError::Other(e.to_string()))?;
    if let Some(m) = v.as_object_mut() {
        m.insert("round".into(), round.into());
    }
    emit(&v)
}

/// Whether `--only` names `id` (an empty `--only` names every one).
fn named(only: &[String], id: &str) -> bool {
    only.is_empty() || only.iter().any(|o| o == id)
}

/// The registry's workloads `--only` names.
fn selected(only: &[String]) -> impl Iterator<Item = Spec> + '_ {
    workload::registry()
        .into_iter()
        .filter(move |s| named(only, s.id))
}

async fn ours(
    endpoint: String,
    decisions: u64,
    warmup: u64,
    concurrency: Vec<usize>,
    accuracy: (u64, usize, u64),
    only: Vec<String>,
    round: u32,
) -> Result<(), BenchError> {
    let ctx = BenchCtx::new(&endpoint, "bench", true);
    for spec in selected(&only) {
        let pending = match &spec.availability {
            Availability::Pending(why) => Some(*why),
            Availability::Ready(_) => None,
        };
        emit(&SpecLine {
            kind: "spec",
            workload: spec.id,
            title: spec.title,
            available: pending.is_none(),
            pending_reason: pending,
            expected_calls: spec.expected_calls,
            races: spec.races,
            single_call: spec.single_call,
            accuracy: spec.accuracy,
            peer_workload: spec.peer_workload,
            refuses: spec.refuses,
        })?;
        let Availability::Ready(build) = spec.availability else {
            eprintln!("bench: {} — not yet available", spec.id);
            continue;
        };
        for &c in &concurrency {
            eprintln!(
                "bench: {} at concurrency {c} ({decisions} decisions)",
                spec.id
            );
            let line = runner::throughput(&ctx, &spec, build, c, decisions, warmup).await?;
            emit_round(&line, round)?;
        }
        if spec.accuracy {
            let (limit, workers, attempts) = accuracy;
            eprintln!(
                "bench: {} accuracy (limit {limit}, {workers} x {attempts})",
                spec.id
            );
            let line = runner::accuracy(&ctx, &spec, build, limit, workers, attempts).await?;
            emit_round(&line, round)?;
        }
    }
    Ok(())
}

async fn client_cost(
    stub: String,
    decisions: u64,
    warmup: u64,
    only: Vec<String>,
    round: u32,
) -> Result<(), BenchError> {
    // The client as the functions build it (the meter, no call counter): the stub counts the calls.
    let ctx = BenchCtx::new(&stub, "cc", false);
    for spec in selected(&only) {
        let Availability::Ready(build) = spec.availability else {
            continue;
        };
        eprintln!("bench: client cost of {} ({decisions} decisions)", spec.id);
        let line = clientcost::run(&ctx, &stub, &spec, build, decisions, warmup).await?;
        emit_round(&line, round)?;
    }
    Ok(())
}

async fn stub(
    listen: std::net::SocketAddr,
    upstream: String,
    addr_file: Option<PathBuf>,
) -> Result<(), BenchError> {
    let stub = turnstile_faultproxy::replay::ReplayStub::bind(listen, &upstream)
        .await
        .map_err(|e| BenchError::io(format!("binding the stub on {listen}"), e))?;
    if let Some(f) = addr_file {
        std::fs::write(&f, stub.url())
            .map_err(|e| BenchError::io(format!("writing {}", f.display()), e))?;
    }
    println!("{}", stub.url());
    std::future::pending::<()>().await;
    Ok(())
}

async fn cold_start(
    bin_dir: PathBuf,
    events_dir: PathBuf,
    endpoint: String,
    runs: usize,
    only: Vec<String>,
) -> Result<(), BenchError> {
    let prefix = format!("coldstart-{}-", runner::short_id());
    let deps = samples::seed(
        &local_client(&endpoint, None),
        TableNames::with_prefix(&prefix),
    )
    .await?;
    // The functions that close connections need a Management API endpoint: a local one that
    // records what it receives (every connection live).
    let api = turnstile_local::ManagementApi::start(
        std::net::SocketAddr::from(([127, 0, 0, 1], 0)),
        std::sync::Arc::new(turnstile_local::Recorder::new()),
    )
    .await
    .map_err(|e| BenchError::io("starting the local Management API", e))?;
    let processors = events_dir
        .parent()
        .unwrap_or(std::path::Path::new("."))
        .join("functions/token-remover/processors.example.yaml");
    // The ticket key set as deployed: a Secrets Manager secret, here a local one holding the sample
    // key set, so the authorizer's and the session API's starts include their one read of it.
    let secrets = turnstile_local::secrets::SecretsManager::start(std::net::SocketAddr::from((
        [127, 0, 0, 1],
        0,
    )))
    .await
    .map_err(|e| BenchError::io("starting the local Secrets Manager", e))?;
    secrets.put("turnstile/connect-ticket-keys", samples::SAMPLE_KEYS);
    let env = vec![
        (
            "AWS_ENDPOINT_URL_SECRETS_MANAGER".to_string(),
            secrets.url(),
        ),
        (
            "TURNSTILE_TICKET_KEYS_SECRET".to_string(),
            "turnstile/connect-ticket-keys".to_string(),
        ),
        ("TURNSTILE_SESSION_API_AUTH".to_string(), "none".to_string()),
        ("AWS_ENDPOINT_URL_DYNAMODB".to_string(), endpoint),
        ("TURNSTILE_TABLE_PREFIX".to_string(), prefix),
        ("TURNSTILE_MANAGEMENT_ENDPOINT".to_string(), api.url()),
        (
            "TOKEN_REMOVER_PROCESSORS_FILE".to_string(),
            processors.display().to_string(),
        ),
        // The decide API as deployed with backend roles named: IAM callers are sessions of its
        // caller role (the sample's), the role session name is the tenant.
        ("TURNSTILE_DECIDE_AUTH".to_string(), "iam".to_string()),
        (
            "TURNSTILE_DECIDE_IAM_BINDING".to_string(),
            "role-session-name".to_string(),
        ),
        (
            "TURNSTILE_DECIDE_IAM_ROLE_ARN".to_string(),
            samples::DECIDE_CALLER_ROLE_ARN.to_string(),
        ),
        (
            "TURNSTILE_DECIDE_TOKEN_DEFAULT".to_string(),
            "10/60".to_string(),
        ),
        (
            "TURNSTILE_DECIDE_RESERVATION_DEFAULT".to_string(),
            "10".to_string(),
        ),
    ];
    for f in coldstart::FUNCTIONS.into_iter().filter(|f| named(&only, f)) {
        eprintln!("bench: cold start of {f} ({runs} runs)");
        // `$disconnect` and `$default` act on the sample's connection: admit it before each start
        // (idempotent), so every run releases / messages a live connection.
        let admit = || -> futures::future::BoxFuture<'_, Result<(), BenchError>> {
            Box::pin(samples::admit_sample_connection(&deps))
        };
        // The token remover's sample terminates cluster j-1YONHTCP3YZKC: bind a token to it first.
        let bind = || -> futures::future::BoxFuture<'_, Result<(), BenchError>> {
            Box::pin(samples::bind_sample_cluster(&deps))
        };
        let prepare: Option<coldstart::Prepare<'_>> = match f {
            "disconnect" | "message" => Some(&admit),
            "token-remover" => Some(&bind),
            _ => None,
        };
        let line = coldstart::measure(&bin_dir, &events_dir, f, runs.max(1), &env, prepare).await?;
        emit(&line)?;
    }
    Ok(())
}

fn main() -> ExitCode {
    let cli = Cli::parse();
    // `client-cost` measures the functions' client, so it runs on the functions' runtime: one
    // thread (a Lambda handles one event at a time). The throughput runs (up to c = 32, the local
    // stack in process) and the stub keep the multi-thread runtime.
    let rt = match cli.command {
        Command::ClientCost { .. } => tokio::runtime::Builder::new_current_thread()
            .enable_all()
            .build(),
        _ => tokio::runtime::Builder::new_multi_thread()
            .enable_all()
            .build(),
    };
    match rt {
        Ok(rt) => rt.block_on(run(cli)),
        Err(e) => {
            eprintln!("turnstile-bench: starting the tokio runtime: {e}");
            ExitCode::FAILURE
        }
    }
}

async fn run(cli: Cli) -> ExitCode {
    let res = match cli.command {
        Command::Ours {
            endpoint,
            decisions,
            warmup,
            concurrency,
            accuracy_limit,
            accuracy_workers,
            accuracy_attempts,
            only,
            round,
        } => {
            ours(
                endpoint,
                decisions,
                warmup,
                concurrency,
                (accuracy_limit, accuracy_workers, accuracy_attempts),
                only,
                round,
            )
            .await
        }
        Command::List => {
            for spec in workload::registry() {
                if matches!(spec.availability, Availability::Ready(_)) {
                    println!("{}", spec.id);
                }
            }
            Ok(())
        }
        Command::Prime { endpoint, requests } => {
            turnstile_bench::prime::prime(&local_client(&endpoint, None), requests).await
        }
        Command::Sim {
            endpoint,
            per_item,
            rate,
            offered,
            seconds,
            shards,
            workers,
            seed,
        } => {
            let mut res = Ok(());
            for n in shards {
                let cfg = turnstile_bench::sim::SimConfig {
                    per_item,
                    rate,
                    shards: n,
                    offered,
                    seconds,
                    workers,
                    seed,
                };
                res = match turnstile_bench::sim::run(&endpoint, cfg).await {
                    Ok(line) => emit(&line),
                    Err(e) => Err(e),
                };
                if res.is_err() {
                    break;
                }
            }
            res
        }
        Command::ClientCost {
            stub,
            decisions,
            warmup,
            only,
            round,
        } => client_cost(stub, decisions, warmup, only, round).await,
        Command::Stub {
            listen,
            upstream,
            addr_file,
        } => stub(listen, upstream, addr_file).await,
        Command::ColdStart {
            bin_dir,
            events_dir,
            endpoint,
            runs,
            only,
        } => cold_start(bin_dir, events_dir, endpoint, runs, only).await,
    };
    match res {
        Ok(()) => ExitCode::SUCCESS,
        Err(e) => {
            eprintln!("turnstile-bench: {e}");
            ExitCode::FAILURE
        }
    }
}
