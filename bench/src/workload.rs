//! The workload trait and the registry: **the plug-in point for every Turnstile path measured by
//! `make bench`.**
//!
//! A workload is one kind of admission decision (the floor, fungible `get_token`, a GCRA spend, ...).
//! The runner ([`crate::runner`]) calls [`Workload::decide`] from `concurrency` tasks until the
//! decision budget is spent, timing each call and counting the DynamoDB calls made by the client that
//! [`BenchCtx`] hands out. A workload does **not** time, count or retry anything itself.
//!
//! ## Adding a workload (the lead, after merging the feature branches)
//!
//! 1. Write `bench/src/workloads/<name>.rs` with a struct implementing [`Workload`] and an
//!    `async fn build(ctx: &BenchCtx, params: &Params) -> Result<Arc<dyn Workload>, BenchError>`
//!    that creates its tables (via `shared::catalog::ensure` with `ctx.tables`) and its fresh bucket
//!    for this run (use `params.key` so runs never share state). `decide` calls the `shared` function
//!    once and maps "admitted" / "refused" into [`Decision`]; any other failure is an `Err`.
//! 2. In [`registry`], add `Spec::ready(id, title, |ctx, p| Box::pin(workloads::<name>::build(ctx,
//!    p)))` with what it promises (`.calls(n)`, `.races()`, `.single_call()`, `.accuracy()`,
//!    `.peer(..)`, `.refuses()`), or replace its `Availability::Pending(..)` with that.
//!
//! Nothing else changes: the runner, the accuracy test, the JSON lines, the report and the smoke
//! assertions pick it up from its [`Spec`] (expected calls per decision, whether the 1.2 x floor
//! latency target applies, whether it is compared with the peers).

use std::sync::Arc;

use aws_sdk_dynamodb::Client;
use futures::future::BoxFuture;
use shared::dynamo::CallCounter;
use shared::table::TableNames;

use crate::error::BenchError;
use crate::workloads;

/// What one decision came to.
#[derive(Debug, Clone, Copy, PartialEq)]
pub struct Decision {
    pub admitted: bool,
    /// Write capacity units DynamoDB reported for this decision, when the path asks for them
    /// (`ReturnConsumedCapacity`); `None` when not reported.
    pub write_units: Option<f64>,
}

impl Decision {
    pub fn admitted(write_units: Option<f64>) -> Self {
        Decision {
            admitted: true,
            write_units,
        }
    }
    pub fn refused(write_units: Option<f64>) -> Self {
        Decision {
            admitted: false,
            write_units,
        }
    }
}

/// One admission path under test. Built fresh for every (workload, concurrency) run.
pub trait Workload: Send + Sync {
    /// Makes one decision. `worker` is the task index (0..concurrency), `seq` the global decision
    /// number; a workload may use them to pick keys (e.g. one reservation id per decision).
    fn decide(&self, worker: usize, seq: u64) -> BoxFuture<'_, Result<Decision, BenchError>>;
}

/// What a workload gets to build itself: a DynamoDB client whose calls are counted, and table names
/// under this bench run's private prefix.
#[derive(Clone)]
pub struct BenchCtx {
    pub endpoint: String,
    pub client: Client,
    pub counter: CallCounter,
    /// Turnstile's tables under this run's prefix (`bench-<id>-tenants`, ...).
    pub tables: TableNames,
    pub prefix: String,
}

impl BenchCtx {
    /// A context on `endpoint` with tables under a fresh `{tag}-<id>-` prefix. `counted`: the client
    /// counts its calls into `counter` (the throughput runs); otherwise it is the functions' client
    /// (the meter, no counter), as the client-cost runs want it.
    pub fn new(endpoint: &str, tag: &str, counted: bool) -> BenchCtx {
        let counter = CallCounter::new();
        let prefix = format!("{tag}-{}-", crate::runner::short_id());
        BenchCtx {
            client: shared::dynamo::local_client(endpoint, counted.then_some(&counter)),
            endpoint: endpoint.to_string(),
            tables: TableNames::with_prefix(&prefix),
            counter,
            prefix,
        }
    }
}

/// The bucket a run uses and how much it may admit.
#[derive(Debug, Clone)]
pub struct Params {
    /// A key unique to this run (workload, concurrency, phase): the bucket/account/resource id.
    pub key: String,
    /// The limit the bucket is configured with. Throughput runs set it above the decision budget so
    /// every decision is a full admission; the accuracy test sets 50.
    pub limit: u64,
    /// The window of that limit in seconds (3600 in both cases, so refill during a run is < 1 token
    /// per 72 s and "allowed" is the limit itself).
    pub window_secs: u64,
    /// True for the concurrent accuracy test (a workload whose limit is not a plain
    /// limit-per-window, like the WebSocket path's one-minute windows, sets itself up for it).
    pub accuracy: bool,
}

impl Params {
    /// A fresh bucket for one run of `spec` (`run` names the run in the key: `c4`, `accuracy`, ...),
    /// with `limit` per hour.
    pub fn fresh(spec: &Spec, run: &str, limit: u64, accuracy: bool) -> Params {
        Params {
            key: format!("{}-{run}-{}", spec.id, crate::runner::short_id()),
            limit,
            window_secs: 3600,
            accuracy,
        }
    }
}

pub type Factory =
    for<'a> fn(&'a BenchCtx, &'a Params) -> BoxFuture<'a, Result<Arc<dyn Workload>, BenchError>>;

pub enum Availability {
    Ready(Factory),
    /// Not measurable yet; the text says what it waits for. Reported as "not yet available".
    Pending(&'static str),
}

pub struct Spec {
    /// Stable id used in JSON lines and the report.
    pub id: &'static str,
    pub title: &'static str,
    /// Warm DynamoDB calls per decision the design promises (`None`: no promise).
    pub expected_calls: Option<f64>,
    /// Concurrent decisions on the one shared item can cost extra calls by design (a write
    /// conditioned on the exact state seen: each lost race is one more call). `expected_calls` is
    /// then the uncontended (c = 1) promise; at c > 1 the measured number is reported, not asserted.
    pub races: bool,
    /// One DynamoDB call per decision: held to "p50 within 1.2 x the floor".
    pub single_call: bool,
    /// Runs the concurrent accuracy test (limit 50, 16 workers x 20 attempts).
    pub accuracy: bool,
    /// Which peer workload it is compared with in the report (`"acquire"`), if any.
    pub peer_workload: Option<&'static str>,
    /// Every decision is a refusal by design (the cached rejection); otherwise every decision of a
    /// throughput run must be an admission, since its limit is above the budget.
    pub refuses: bool,
    pub availability: Availability,
}

impl Spec {
    /// A workload built by `build`, with no promise and no extra check; the methods below add
    /// what an entry of [`registry`] promises.
    fn ready(id: &'static str, title: &'static str, build: Factory) -> Spec {
        Spec {
            id,
            title,
            expected_calls: None,
            races: false,
            single_call: false,
            accuracy: false,
            peer_workload: None,
            refuses: false,
            availability: Availability::Ready(build),
        }
    }

    fn calls(self, expected: f64) -> Spec {
        Spec {
            expected_calls: Some(expected),
            ..self
        }
    }

    fn races(self) -> Spec {
        Spec {
            races: true,
            ..self
        }
    }

    fn single_call(self) -> Spec {
        Spec {
            single_call: true,
            ..self
        }
    }

    fn accuracy(self) -> Spec {
        Spec {
            accuracy: true,
            ..self
        }
    }

    fn peer(self, workload: &'static str) -> Spec {
        Spec {
            peer_workload: Some(workload),
            ..self
        }
    }

    fn refuses(self) -> Spec {
        Spec {
            refuses: true,
            ..self
        }
    }
}

/// Every workload `make bench` knows, in report order.
pub fn registry() -> Vec<Spec> {
    vec![
        Spec::ready(
            "floor",
            "Floor: one bare conditional UpdateItem on one item",
            |ctx, p| Box::pin(workloads::floor::build(ctx, p)),
        )
        .calls(1.0)
        .single_call()
        .accuracy()
        .peer("acquire"),
        Spec::ready(
            "fungible-get-token",
            "Fungible get_token (token bucket, rate-limiter-py tables)",
            |ctx, p| Box::pin(workloads::fungible::build(ctx, p)),
        )
        .calls(1.0)
        .races()
        .single_call()
        .accuracy()
        .peer("acquire"),
        Spec::ready(
            "fungible-get-token-per-account",
            "Fungible get_token, one bucket per task (diagnostic: no shared bucket)",
            |ctx, p| Box::pin(workloads::fungible::build_per_account(ctx, p)),
        )
        // Not held to the floor (no `single_call`): the floor is one hot item, this is c items.
        .calls(1.0),
        Spec::ready(
            "reservation-lifecycle",
            "Non-fungible get_reservation + create_token + delete (5 single-item calls, no transaction)",
            |ctx, p| Box::pin(workloads::reservation::build(ctx, p)),
        )
        // 1 UpdateItem on a ledger shard for the reservation; create_token's bound row, the
        // ended-resource marker's read, then its shard entry; delete's shard entry (decision
        // 0101). Concurrent callers can meet a shard filled meanwhile or both create the next
        // one: one more call each time, so 5 is the c = 1 promise.
        .calls(5.0)
        .races()
        .accuracy(),
        Spec::ready(
            "reservation-at-1000-live",
            "Non-fungible get_reservation + create_token on a coordinate holding 1,000 live",
            |ctx, p| Box::pin(workloads::reservation::build_at_1000_live(ctx, p)),
        )
        // As the lifecycle's first 4 calls; the ledger shards keep every write at 1 WCU.
        .calls(4.0)
        .races(),
        Spec::ready(
            "gcra-spend",
            "GCRA spend (key-value limits)",
            |ctx, p| Box::pin(workloads::gcra::build(ctx, p)),
        )
        .calls(1.0)
        .single_call()
        .accuracy()
        .peer("acquire"),
        Spec::ready(
            "cached-rejection",
            "Refused get_token on a known-empty bucket (rejection cache)",
            |ctx, p| Box::pin(workloads::cached_rejection::build(ctx, p)),
        )
        .calls(0.0)
        .refuses(),
        Spec::ready(
            "websocket-handlers",
            "WebSocket path at handler level: authorizer + $connect + $disconnect",
            |ctx, p| Box::pin(workloads::websocket::build(ctx, p)),
        )
        // 1 BatchGetItem (authorizer, tenant cached) + 3 UpdateItem for $connect (the ticket's
        // use, the tenant counter, then the session) + 3 for $disconnect (session with its
        // release token, then the charged counter and the token's cleanup): decisions 0306,
        // 2206, 3607. Concurrent first connects of a minute both bet "new window": the loser
        // re-bets (one more call), so the 7 is the c = 1 promise.
        .calls(7.0)
        .races()
        .accuracy(),
        Spec::ready(
            "local-stack-connects",
            "Local stack end to end: WebSocket connects (authorizer + $connect, then close)",
            |ctx, p| Box::pin(workloads::local_stack::build_connects(ctx, p)),
        ),
        Spec::ready(
            "local-stack-messages",
            "Local stack end to end: messages (frame in, echo out)",
            |ctx, p| Box::pin(workloads::local_stack::build_messages(ctx, p)),
        )
        .calls(1.0)
        .races(),
        Spec::ready(
            "local-stack-decide-spend",
            "Local stack end to end: decide API POST /v1/limits/spend (HTTP, handler, GCRA spend)",
            |ctx, p| Box::pin(workloads::decide_api::build_spend(ctx, p)),
        )
        .calls(1.0),
        Spec::ready(
            "decide-handler-spend",
            "Decide API handler alone: POST /v1/limits/spend event in, answer out (no HTTP)",
            |ctx, p| Box::pin(workloads::decide_handler::build(ctx, p)),
        )
        .calls(1.0)
        .accuracy(),
        Spec::ready(
            "local-stack-decide-take",
            "Local stack end to end: decide API POST /v1/tokens/take (HTTP, handler, get_token per account)",
            |ctx, p| Box::pin(workloads::decide_api::build_take(ctx, p)),
        )
        .calls(1.0),
        // The transactional paths with DynamoDB's TransactionConflict injected by
        // turnstile-faultproxy; c = 1 never overlaps (exactly the promise), c > 1 reports retries.
        Spec::ready(
            "websocket-handlers-conflicts",
            "WebSocket handlers with TransactionConflict injected (fault proxy)",
            |ctx, p| Box::pin(workloads::conflicts::build_websocket(ctx, p)),
        )
        // authorizer 1 + $connect 3 + $disconnect 3, as `websocket-handlers` (decisions 0306,
        // 2206, 3607): no transaction on the path, so the injected conflicts find nothing to
        // cancel.
        .calls(7.0)
        .races(),
        Spec::ready(
            "reservation-conflicts",
            "Reservation lifecycle with TransactionConflict injected (fault proxy)",
            |ctx, p| Box::pin(workloads::conflicts::build_reservation(ctx, p)),
        )
        // As reservation-lifecycle: 4 writes and the ended-marker read (decision 0101).
        .calls(5.0)
        .races(),
    ]
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn ids_are_unique_and_the_floor_is_first() {
        let specs = registry();
        assert_eq!(specs.first().map(|s| s.id), Some("floor"));
        let mut ids: Vec<_> = specs.iter().map(|s| s.id).collect();
        ids.sort_unstable();
        ids.dedup();
        assert_eq!(ids.len(), specs.len());
    }
}
