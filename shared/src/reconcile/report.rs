//! What a reconciler run reports: per tenant, the count read, the truth and what was done.

use serde::Serialize;

/// What happened to one tenant's count.
#[derive(Debug, Clone, PartialEq, Eq, Serialize)]
#[serde(rename_all = "camelCase", tag = "outcome")]
pub enum Outcome {
    /// The count equals the truth: nothing to do.
    Consistent,
    /// The count was set to the truth.
    Repaired { from: i64, to: u64 },
    /// Dry run: the count would be set to the truth.
    WouldRepair { from: i64, to: u64 },
    /// The count differs from the truth by no more than what may be in flight (or another
    /// reconciler repaired it meanwhile): left for the next run.
    Busy,
    /// Not checked, and why.
    Skipped { reason: String },
    /// Not reached: the run's budget was spent on the tenants before it; the next run starts with
    /// it.
    Deferred,
}

/// One tenant's result.
#[derive(Debug, Clone, PartialEq, Eq, Serialize)]
#[serde(rename_all = "camelCase")]
pub struct TenantReport {
    pub tenant_id: String,
    /// The count read in phase 2 (after stale releases); `None` when the tenant had no counter.
    pub counted: Option<i64>,
    /// Connection ids in the tenant's sessions when the truth was read (phase 3).
    pub truth: u64,
    /// Ids whose socket was gone twice, released (or, in a dry run, to release).
    pub stale_released: Vec<String>,
    /// Probes that failed (neither live nor gone): those ids were treated as live.
    pub probe_errors: u64,
    /// Ids not probed because the tenant's probing budget ran out (taken as live this run).
    pub unprobed: u64,
    /// The bound on reservations and releases in flight at the read (phase 2).
    pub in_flight: u64,
    #[serde(flatten)]
    pub outcome: Outcome,
    /// The session count (`{tenant}:sessions`, decision 2204) read before the truth; `None` when
    /// the tenant had none.
    pub sessions_counted: Option<i64>,
    /// Session rows when the truth was read (expired ones DynamoDB has not deleted included;
    /// rows a `DELETE` ended not).
    pub sessions_truth: u64,
    /// What happened to the session count.
    pub sessions: Outcome,
    /// Sockets of ended sessions (decision 2208) found open and closed in phase 1.
    #[serde(skip_serializing_if = "is_zero")]
    pub ended_closed: u64,
    /// Ended sessions found holding no connection, deleted in phase 3.
    #[serde(skip_serializing_if = "is_zero")]
    pub ended_deleted: u64,
}

fn is_zero(n: &u64) -> bool {
    *n == 0
}

impl TenantReport {
    /// A tenant not reconciled yet.
    pub fn new(tenant_id: String) -> TenantReport {
        TenantReport {
            tenant_id,
            counted: None,
            truth: 0,
            stale_released: vec![],
            probe_errors: 0,
            unprobed: 0,
            in_flight: 0,
            outcome: Outcome::Consistent,
            sessions_counted: None,
            sessions_truth: 0,
            sessions: Outcome::Consistent,
            ended_closed: 0,
            ended_deleted: 0,
        }
    }
}

/// A whole run.
#[derive(Debug, Clone, PartialEq, Eq, Serialize)]
#[serde(rename_all = "camelCase")]
pub struct Report {
    pub dry_run: bool,
    pub probed: bool,
    pub grace_ms: u64,
    pub tenants: Vec<TenantReport>,
}

impl Report {
    /// Tenants whose count (of connections or of sessions) was (or would be) changed.
    pub fn repaired(&self) -> usize {
        let changed =
            |o: &Outcome| matches!(o, Outcome::Repaired { .. } | Outcome::WouldRepair { .. });
        self.tenants
            .iter()
            .filter(|t| changed(&t.outcome) || changed(&t.sessions))
            .count()
    }
}
