//! One tenant's state carried between a run's phases, and reading its counter.

use super::report::{Outcome, TenantReport};

use crate::counter::keys;
use crate::error::Result;
use crate::ids::TenantId;
use crate::Deps;

use super::snapshot::{read_item, Snapshot};

/// Per-tenant state carried between the phases.
pub(super) struct Work {
    pub(super) tenant: TenantId,
    pub(super) deps: Deps,
    pub(super) report: TenantReport,
    pub(super) candidates: Vec<(String, String)>,
    /// Phase 1's read of the counter.
    pub(super) before: Snapshot,
    /// Phase 2's read of the counter.
    pub(super) read: Snapshot,
    /// Phase 2's read of the session count, just before the truth.
    pub(super) sessions_read: Snapshot,
    pub(super) truth_at: i64,
    pub(super) done: bool,
    /// The tenant's `connectionShards` (1: the one `{tenant}` item).
    pub(super) shards: u64,
    /// For a sharded tenant: each shard's `relTotal` at the last read (the repair's conditions).
    pub(super) released: Vec<Option<i64>>,
    /// A resharded tenant: every counter on its own (decision 2206).
    pub(super) each: Option<super::shards::PerCounter>,
    /// The layout admitting now, as the tenant row says (`None`: no row).
    pub(super) layout: Option<super::shards::Layout>,
    /// Ended session rows the truth found empty: deleted in phase 3 (decision 2208).
    pub(super) ended_empty: Vec<String>,
}

impl Work {
    pub(super) fn new(tenant: TenantId, deps: Deps, report: TenantReport, shards: u64) -> Work {
        Work {
            tenant,
            deps,
            report,
            candidates: vec![],
            before: Snapshot::default(),
            read: Snapshot::default(),
            sessions_read: Snapshot::default(),
            truth_at: 0,
            done: false,
            shards,
            released: vec![],
            each: None,
            layout: None,
            ended_empty: vec![],
        }
    }
}

/// The counter as one snapshot: the `{tenant}` item (1 GetItem), or the sums over a sharded
/// tenant's shards (1 BatchGetItem), keeping each shard's `relTotal` for the repair's conditions.
/// A resharded tenant's counters are read one by one (`each`, decision 2206) once a read shows
/// its fence.
pub(super) async fn read_snapshot(w: &mut Work) -> Result<Snapshot> {
    if let Some(each) = w.each.as_mut() {
        return each.read_phase(&w.deps).await;
    }
    let snap = if w.shards <= 1 {
        read_item(&w.deps, &keys::tenant_connections(&w.tenant)?).await?
    } else {
        let (snap, released) = super::shards::read(&w.deps, &w.tenant, w.shards).await?;
        w.released = released;
        snap
    };
    if let Some(mut each) = super::shards::fenced(&w.tenant, snap.span)? {
        let snap = each.read_phase(&w.deps).await?;
        w.each = Some(each);
        return Ok(snap);
    }
    Ok(snap)
}

pub(super) fn skip(w: &mut Work, reason: String) {
    tracing::warn!(tenant = %w.tenant, %reason, "reconcile skipped a tenant");
    w.report.sessions = Outcome::Skipped {
        reason: reason.clone(),
    };
    w.report.outcome = Outcome::Skipped { reason };
    w.done = true;
}
