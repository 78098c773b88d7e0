//! Every metric Turnstile emits: its name, unit and dimensions, and the one function that records
//! it. The template's alarms and dashboard and docs/operations.md use these names; keep them in step.
//! Dimension sets are fixed per metric (a CloudWatch alarm names exact dimensions) and bounded:
//! tenants appear only in `DecisionsByTenant`, opt-in and capped ([`super::metrics`]).

use std::time::Duration;

use metrics::{
    counter, describe_counter, describe_gauge, describe_histogram, gauge, histogram, Unit,
};

/// Metric names.
pub mod name {
    /// Count {Path, Outcome}: every admission decision.
    pub const DECISIONS: &str = "Decisions";
    /// Count {Limit, Outcome}: refusals and shadow refusals, by the limit that said no.
    pub const REFUSALS: &str = "Refusals";
    /// Count {Tenant, Outcome}: decisions by tenant (opt-in, capped).
    pub const DECISIONS_BY_TENANT: &str = "DecisionsByTenant";
    /// Milliseconds {Path}: time to decide, DynamoDB calls included.
    pub const DECISION_LATENCY: &str = "DecisionLatency";
    /// Count {Operation}: DynamoDB request attempts (retries included).
    pub const DYNAMODB_CALLS: &str = "DynamoDbCalls";
    /// Milliseconds {Operation}: one attempt, request to answer.
    pub const DYNAMODB_LATENCY: &str = "DynamoDbLatency";
    /// Count {ErrorType}: failed attempts (a refused condition is an answer, not an error).
    pub const DYNAMODB_ERRORS: &str = "DynamoDbErrors";
    /// Count {Action, Result}: API Gateway Management API calls.
    pub const MANAGEMENT_API_CALLS: &str = "ManagementApiCalls";
    /// Count {Worker, Result}: records, tenants and tokens the background functions handled.
    pub const WORK_ITEMS: &str = "WorkItems";
    /// Count, no dimension: connections open in the tenants the reconciler last checked.
    pub const OPEN_CONNECTIONS: &str = "OpenConnections";
    /// Count {Function}.
    pub const COLD_STARTS: &str = "ColdStarts";
    /// Count {Function, Result}.
    pub const INVOCATIONS: &str = "Invocations";
    /// Count {Result}: the connect-ticket key set's reads and refusals ([`super::KeyRead`]).
    pub const TICKET_KEYS: &str = "TicketKeys";
}

/// Dimension names.
pub mod dim {
    pub const PATH: &str = "Path";
    pub const OUTCOME: &str = "Outcome";
    pub const LIMIT: &str = "Limit";
    pub const TENANT: &str = "Tenant";
    pub const OPERATION: &str = "Operation";
    pub const ERROR_TYPE: &str = "ErrorType";
    pub const ACTION: &str = "Action";
    pub const RESULT: &str = "Result";
    pub const WORKER: &str = "Worker";
    pub const FUNCTION: &str = "Function";
}

/// Which admission path decided.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Path {
    Connect,
    Message,
    Authorizer,
    Kv,
}

impl Path {
    pub fn as_str(self) -> &'static str {
        match self {
            Path::Connect => "connect",
            Path::Message => "message",
            Path::Authorizer => "authorizer",
            Path::Kv => "kv",
        }
    }
}

/// What a decision came to.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Outcome {
    Admitted,
    Refused,
    /// A shadow tenant or limit would have refused; the request went through.
    ShadowRefused,
    /// DynamoDB failed or ran out of time and the request was refused (fail closed).
    Error,
    /// DynamoDB failed or ran out of time and the request went through (fail open).
    FailOpen,
}

impl Outcome {
    pub fn as_str(self) -> &'static str {
        match self {
            Outcome::Admitted => "admitted",
            Outcome::Refused => "refused",
            Outcome::ShadowRefused => "shadow_refused",
            Outcome::Error => "error",
            Outcome::FailOpen => "fail_open",
        }
    }
}

/// Background workers.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Worker {
    TtlSweeper,
    TokenRemover,
    Reconciler,
}

impl Worker {
    pub fn as_str(self) -> &'static str {
        match self {
            Worker::TtlSweeper => "ttlSweeper",
            Worker::TokenRemover => "tokenRemover",
            Worker::Reconciler => "reconciler",
        }
    }
}

/// What became of a function's connect-ticket key set (`crate::ticket::source`).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum KeyRead {
    /// The secret was read.
    Read,
    /// A re-read failed; the previous set is used (within its maximum age).
    Stale,
    /// The set is past its maximum age and the secret cannot be read: a ticket refused.
    Expired,
}

impl KeyRead {
    pub fn as_str(self) -> &'static str {
        match self {
            KeyRead::Read => "read",
            KeyRead::Stale => "stale",
            KeyRead::Expired => "expired",
        }
    }
}

/// A metric's kind, unit and dimension names.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Spec {
    pub name: &'static str,
    pub kind: Kind,
    pub unit: Unit,
    pub dimensions: &'static [&'static str],
}

#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Kind {
    Counter,
    Gauge,
    Histogram,
}

const fn spec(name: &'static str, kind: Kind, unit: Unit, dims: &'static [&'static str]) -> Spec {
    Spec {
        name,
        kind,
        unit,
        dimensions: dims,
    }
}

/// Every metric, with its exact dimension set (the template's alarms are checked against it).
pub const METRICS: &[Spec] = &[
    spec(
        name::DECISIONS,
        Kind::Counter,
        Unit::Count,
        &[dim::PATH, dim::OUTCOME],
    ),
    spec(
        name::REFUSALS,
        Kind::Counter,
        Unit::Count,
        &[dim::LIMIT, dim::OUTCOME],
    ),
    spec(
        name::DECISIONS_BY_TENANT,
        Kind::Counter,
        Unit::Count,
        &[dim::TENANT, dim::OUTCOME],
    ),
    spec(
        name::DECISION_LATENCY,
        Kind::Histogram,
        Unit::Milliseconds,
        &[dim::PATH],
    ),
    spec(
        name::DYNAMODB_CALLS,
        Kind::Counter,
        Unit::Count,
        &[dim::OPERATION],
    ),
    spec(
        name::DYNAMODB_LATENCY,
        Kind::Histogram,
        Unit::Milliseconds,
        &[dim::OPERATION],
    ),
    spec(
        name::DYNAMODB_ERRORS,
        Kind::Counter,
        Unit::Count,
        &[dim::ERROR_TYPE],
    ),
    spec(
        name::MANAGEMENT_API_CALLS,
        Kind::Counter,
        Unit::Count,
        &[dim::ACTION, dim::RESULT],
    ),
    spec(
        name::WORK_ITEMS,
        Kind::Counter,
        Unit::Count,
        &[dim::WORKER, dim::RESULT],
    ),
    spec(name::OPEN_CONNECTIONS, Kind::Gauge, Unit::Count, &[]),
    spec(
        name::COLD_STARTS,
        Kind::Counter,
        Unit::Count,
        &[dim::FUNCTION],
    ),
    spec(
        name::INVOCATIONS,
        Kind::Counter,
        Unit::Count,
        &[dim::FUNCTION, dim::RESULT],
    ),
    spec(
        name::TICKET_KEYS,
        Kind::Counter,
        Unit::Count,
        &[dim::RESULT],
    ),
];

/// The spec of `name`, if it is one of ours.
pub fn spec_of(name: &str) -> Option<&'static Spec> {
    METRICS.iter().find(|s| s.name == name)
}

/// Units, so CloudWatch shows them (called once by [`super::metrics::install`]).
pub(super) fn describe() {
    for s in METRICS {
        match s.kind {
            Kind::Counter => describe_counter!(s.name, s.unit, ""),
            Kind::Gauge => describe_gauge!(s.name, s.unit, ""),
            Kind::Histogram => describe_histogram!(s.name, s.unit, ""),
        }
    }
}

/// One admission decision: `limit` names the limit that refused (or would have), `None` when
/// admitted or failed; `tenant` is `None` where there is none (kv buckets); `elapsed` is the time
/// it took.
pub fn decision(
    path: Path,
    outcome: Outcome,
    limit: Option<&str>,
    tenant: Option<&str>,
    elapsed: Duration,
) {
    counter!(name::DECISIONS, dim::PATH => path.as_str(), dim::OUTCOME => outcome.as_str())
        .increment(1);
    if let Some(limit) = limit {
        counter!(name::REFUSALS, dim::LIMIT => limit.to_string(), dim::OUTCOME => outcome.as_str())
            .increment(1);
    }
    if let Some(t) = tenant.and_then(super::recorder::tenant_dimension) {
        counter!(name::DECISIONS_BY_TENANT, dim::TENANT => t, dim::OUTCOME => outcome.as_str())
            .increment(1);
    }
    histogram!(name::DECISION_LATENCY, dim::PATH => path.as_str()).record(millis(elapsed));
    super::recorder::sampled();
}

/// One DynamoDB attempt of `operation`, and how long it took.
pub fn dynamodb_call(operation: &str, elapsed: Duration) {
    counter!(name::DYNAMODB_CALLS, dim::OPERATION => operation.to_string()).increment(1);
    histogram!(name::DYNAMODB_LATENCY, dim::OPERATION => operation.to_string())
        .record(millis(elapsed));
    super::recorder::sampled();
}

/// A failed DynamoDB attempt: `Throttling`, `Timeout`, `Client`, `Server` or `Transport`.
pub fn dynamodb_error(error_type: &'static str) {
    counter!(name::DYNAMODB_ERRORS, dim::ERROR_TYPE => error_type).increment(1);
}

/// A Management API call: `action` post, delete or get; `result` delivered, gone or error.
pub fn management_call(action: &'static str, result: &'static str) {
    counter!(name::MANAGEMENT_API_CALLS, dim::ACTION => action, dim::RESULT => result).increment(1);
}

/// `n` items of background work with `result` (e.g. swept, failed, repaired, removed).
pub fn work(worker: Worker, result: &'static str, n: u64) {
    if n > 0 {
        counter!(name::WORK_ITEMS, dim::WORKER => worker.as_str(), dim::RESULT => result)
            .increment(n);
    }
}

/// Connections open across the tenants the reconciler just checked.
pub fn open_connections(n: u64) {
    gauge!(name::OPEN_CONNECTIONS).set(n as f64);
}

/// One read of the connect-ticket key set, or one ticket refused because the set is too old.
pub fn ticket_keys(result: KeyRead) {
    counter!(name::TICKET_KEYS, dim::RESULT => result.as_str()).increment(1);
}

pub(super) fn cold_start(function: &'static str) {
    counter!(name::COLD_STARTS, dim::FUNCTION => function).increment(1);
}

pub(super) fn invocation(function: &'static str, ok: bool) {
    let result = if ok { "ok" } else { "error" };
    counter!(name::INVOCATIONS, dim::FUNCTION => function, dim::RESULT => result).increment(1);
}

fn millis(d: Duration) -> f64 {
    d.as_secs_f64() * 1000.0
}
