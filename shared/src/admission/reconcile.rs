//! The reconciler (issue 12, defect 7): repairs a tenant's open-connection count that leaked high —
//! a `$connect` whose second write never happened, a `$disconnect` API Gateway never delivered, a
//! TTL sweep that ended in the DLQ — and releases connection ids whose socket is gone.
//!
//! The truth of a tenant is the union of its sessions' `connectionIds` (one `Query` of the session
//! table's tenant partition). The count may be set to the truth only when no connect or release was
//! half-way meanwhile, so a run goes in four phases, `grace` apart (decision 0306):
//!
//! 1. **probe**: read the truth; ask the Management API about every id (`GET @connections`). A 410
//!    is only a candidate: a connection inside its own `$connect` answers 410 too.
//! 2. **release, then read the count**: candidates still gone a grace later are released as a
//!    disconnect releases them (out of the session's set, then the count down). Then the count `C0`
//!    and its version `ver` are read.
//! 3. **truth**: a grace later, the truth `T` is read again (`truthAt` = when that read ended).
//! 4. **repair**: a grace later, `SET itemCount = T, truthAt` only if `ver` is unchanged. Any
//!    reservation, undo or decrement since phase 2 changed `ver` (reported as busy, left for the next
//!    run); a reservation pending at phase 2 has joined its session (and is in `T`) or died within
//!    the grace; a removal pending at phase 2 has been decremented (changing `ver`) or died. So the
//!    count is never set below the connections that hold capacity. `grace` must exceed how long a
//!    `$connect` or release can be half-way: `connect::JOIN_DEADLINE` plus a request (default 30 s).
//!
//! A TTL sweep that arrives after a repair decrements only for a deletion later than `truthAt`
//! (`release::swept`), so a session the truth already left out is not subtracted twice.
//!
//! Costs per tenant: 2 Query pages (usually), 1 GetItem, at most 1 UpdateItem, plus 2
//! Management API calls per gone candidate and 2 UpdateItem per session with gone ids.

use std::collections::{BTreeMap, BTreeSet};
use std::time::Duration;

use aws_sdk_dynamodb::types::{AttributeValue, ReturnValue};
use serde::Serialize;

use super::item::{self, n, s, Item};
use super::release;
use super::write::{self, Parts, Retries, Written};
use crate::counter::{attr as cattr, keys};
use crate::error::{Error, Result};
use crate::gateway::Gateway;
use crate::ids::{SessionId, TenantId};
use crate::session::attr as sattr;
use crate::Deps;

/// Management API probes in flight at once.
const PROBES_IN_FLIGHT: usize = 32;

/// Default grace between the phases: longer than any `$connect` or release can be half-way.
pub const DEFAULT_GRACE: Duration = Duration::from_secs(30);

/// What to reconcile and how.
#[derive(Debug, Clone)]
pub struct Options {
    /// One tenant, or every tenant in the tenant table.
    pub tenant: Option<TenantId>,
    /// Report only: release nothing, write nothing.
    pub dry_run: bool,
    /// Time between the phases (see the module docs).
    pub grace: Duration,
}

/// Where the Management API is, to find gone sockets; `None` skips probing.
pub struct Probe<'a> {
    pub gateway: &'a Gateway,
    pub endpoint: String,
}

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
    /// The count moved during the run (connects or releases in flight): left for the next run.
    Busy,
    /// Not checked, and why.
    Skipped { reason: String },
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
    #[serde(flatten)]
    pub outcome: Outcome,
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
    /// Tenants whose count was (or would be) changed.
    pub fn repaired(&self) -> usize {
        self.tenants
            .iter()
            .filter(|t| {
                matches!(
                    t.outcome,
                    Outcome::Repaired { .. } | Outcome::WouldRepair { .. }
                )
            })
            .count()
    }
}

/// Session id → its connection ids, for one tenant (strongly consistent Query, every page).
async fn sessions(deps: &Deps, t: &TenantId) -> Result<BTreeMap<String, Vec<String>>> {
    let mut out = BTreeMap::new();
    let mut start: Option<Item> = None;
    loop {
        let page = deps
            .dynamo
            .query()
            .table_name(&deps.tables.sessions)
            .key_condition_expression("#t = :t")
            .expression_attribute_names("#t", sattr::TENANT_ID)
            .expression_attribute_names("#s", sattr::SESSION_ID)
            .expression_attribute_names("#ids", sattr::CONNECTION_IDS)
            .expression_attribute_values(":t", s(t.as_str()))
            .projection_expression("#s, #ids")
            .consistent_read(true)
            .set_exclusive_start_key(start.take())
            .send()
            .await
            .map_err(|e| Error::dynamo("Query", e))?;
        for it in page.items() {
            if let Some(AttributeValue::S(sid)) = it.get(sattr::SESSION_ID) {
                out.insert(sid.clone(), item::string_set(it, sattr::CONNECTION_IDS));
            }
        }
        match page.last_evaluated_key() {
            Some(k) if !k.is_empty() => start = Some(k.clone()),
            _ => return Ok(out),
        }
    }
}

fn truth_of(sessions: &BTreeMap<String, Vec<String>>) -> u64 {
    sessions.values().flatten().collect::<BTreeSet<_>>().len() as u64
}

/// Ids (with their session) whose socket the Management API says is gone.
async fn gone(probe: &Probe<'_>, ids: Vec<(String, String)>) -> Result<Vec<(String, String)>> {
    use futures::stream::{self, StreamExt};
    let checks = stream::iter(ids.into_iter().map(|(sid, cid)| async move {
        let live = probe.gateway.is_live(&probe.endpoint, &cid).await;
        (sid, cid, live)
    }))
    .buffer_unordered(PROBES_IN_FLIGHT)
    .collect::<Vec<_>>()
    .await;
    let mut out = Vec::new();
    for (sid, cid, live) in checks {
        if !live? {
            out.push((sid, cid));
        }
    }
    out.sort();
    Ok(out)
}

/// Per-tenant state carried between the phases.
struct Work {
    tenant: TenantId,
    deps: Deps,
    report: TenantReport,
    candidates: Vec<(String, String)>,
    version: Option<i64>,
    truth_at: i64,
    done: bool,
}

/// Reconciles `options.tenant` (or every tenant), with tenant-scoped clients from `scoped` (the
/// functions' `isolation::tenant_deps`; pass `|_| deps.clone()` for the execution role).
pub async fn run<F, Fut>(
    deps: &Deps,
    options: &Options,
    probe: Option<&Probe<'_>>,
    scoped: F,
) -> Result<Report>
where
    F: Fn(TenantId) -> Fut,
    Fut: std::future::Future<Output = Result<Deps>>,
{
    let tenants: Vec<TenantId> = match &options.tenant {
        Some(t) => vec![t.clone()],
        None => {
            let (all, bad) = crate::tenant::store::list(deps).await?;
            for b in bad {
                tracing::warn!(row = %b, "skipping a malformed tenant row");
            }
            all.into_iter().map(|t| t.tenant_id).collect()
        }
    };
    let mut work = Vec::with_capacity(tenants.len());
    for t in tenants {
        let report = TenantReport {
            tenant_id: t.to_string(),
            counted: None,
            truth: 0,
            stale_released: vec![],
            outcome: Outcome::Consistent,
        };
        match scoped(t.clone()).await {
            Ok(d) => work.push(Work {
                tenant: t,
                deps: d,
                report,
                candidates: vec![],
                version: None,
                truth_at: 0,
                done: false,
            }),
            Err(e) => work.push(Work {
                tenant: t,
                deps: deps.clone(),
                report: TenantReport {
                    outcome: Outcome::Skipped {
                        reason: format!("no tenant credentials: {e}"),
                    },
                    ..report
                },
                candidates: vec![],
                version: None,
                truth_at: 0,
                done: true,
            }),
        }
    }

    // Phase 1: probe every id of every session.
    if let Some(p) = probe {
        for w in work.iter_mut().filter(|w| !w.done) {
            let step = async {
                let ss = sessions(&w.deps, &w.tenant).await?;
                let mut ids = Vec::new();
                for (sid, cids) in ss {
                    for c in cids {
                        ids.push((sid.clone(), c));
                    }
                }
                gone(p, ids).await
            };
            match step.await {
                Ok(c) => w.candidates = c,
                Err(e) => skip(w, format!("probing: {e}")),
            }
        }
        if work.iter().any(|w| !w.candidates.is_empty()) {
            tokio::time::sleep(options.grace).await;
        }
    }

    // Phase 2: release what is still gone, then read the count and its version.
    for w in work.iter_mut().filter(|w| !w.done) {
        if let Err(e) = release_and_read(w, probe, options.dry_run).await {
            skip(w, format!("releasing or reading the count: {e}"));
        }
    }
    tokio::time::sleep(options.grace).await;

    // Phase 3: the truth.
    let mut stale: BTreeMap<String, BTreeSet<String>> = BTreeMap::new();
    if options.dry_run {
        for w in &work {
            stale.insert(
                w.report.tenant_id.clone(),
                w.report.stale_released.iter().cloned().collect(),
            );
        }
    }
    for w in work.iter_mut().filter(|w| !w.done) {
        match sessions(&w.deps, &w.tenant).await {
            Ok(ss) => {
                w.truth_at = w.deps.clock.now().as_millis();
                let mut t = truth_of(&ss);
                // A dry run released nothing: count its stale ids out as a real run would.
                if let Some(gone) = stale.get(&w.report.tenant_id) {
                    let held: BTreeSet<&String> = ss.values().flatten().collect();
                    t -= gone.iter().filter(|c| held.contains(c)).count() as u64;
                }
                w.report.truth = t;
            }
            Err(e) => skip(w, format!("reading the truth: {e}")),
        }
    }
    tokio::time::sleep(options.grace).await;

    // Phase 4: repair, if nothing moved.
    for w in work.iter_mut().filter(|w| !w.done) {
        let from = w.report.counted.unwrap_or(0);
        let to = w.report.truth;
        w.report.outcome = if from == to as i64 {
            Outcome::Consistent
        } else if options.dry_run {
            Outcome::WouldRepair { from, to }
        } else {
            match set_count(w).await {
                Ok(true) => Outcome::Repaired { from, to },
                Ok(false) => Outcome::Busy,
                Err(e) => Outcome::Skipped {
                    reason: format!("writing the count: {e}"),
                },
            }
        };
        tracing::info!(tenant = %w.tenant, report = ?w.report, "reconciled");
    }
    Ok(Report {
        dry_run: options.dry_run,
        probed: probe.is_some(),
        grace_ms: u64::try_from(options.grace.as_millis()).unwrap_or(u64::MAX),
        tenants: work.into_iter().map(|w| w.report).collect(),
    })
}

fn skip(w: &mut Work, reason: String) {
    tracing::warn!(tenant = %w.tenant, %reason, "reconcile skipped a tenant");
    w.report.outcome = Outcome::Skipped { reason };
    w.done = true;
}

async fn release_and_read(w: &mut Work, probe: Option<&Probe<'_>>, dry_run: bool) -> Result<()> {
    if let (Some(p), false) = (probe, w.candidates.is_empty()) {
        let still = gone(p, std::mem::take(&mut w.candidates)).await?;
        let mut by_session: BTreeMap<String, Vec<String>> = BTreeMap::new();
        for (sid, cid) in still {
            by_session.entry(sid).or_default().push(cid);
        }
        for (sid, cids) in by_session {
            let Ok(session) = SessionId::parse(&sid) else {
                continue;
            };
            if !dry_run {
                let ids = release::parse_ids(&cids);
                release::from_session(&w.deps, &w.tenant, &session, &ids).await?;
            }
            w.report.stale_released.extend(cids);
        }
        w.report.stale_released.sort();
    }
    let out = w
        .deps
        .dynamo
        .get_item()
        .table_name(&w.deps.tables.counters)
        .key(cattr::KEY, s(keys::tenant_connections(&w.tenant)?))
        .consistent_read(true)
        .send()
        .await
        .map_err(|e| Error::dynamo("GetItem", e))?;
    let it = out.item();
    w.report.counted = it.and_then(|i| item::num(i, cattr::ITEM_COUNT));
    w.version = it.and_then(|i| item::num(i, cattr::VERSION));
    Ok(())
}

/// `SET itemCount = truth, truthAt ADD ver 1` if `ver` is what phase 2 read. Sent at most once.
async fn set_count(w: &Work) -> Result<bool> {
    let key = Item::from([(
        cattr::KEY.to_string(),
        s(keys::tenant_connections(&w.tenant)?),
    )]);
    let mut p = Parts::default();
    p.name("#c", cattr::ITEM_COUNT)
        .name("#v", cattr::VERSION)
        .name("#ta", cattr::TRUTH_AT);
    p.value(":t", n(w.report.truth))
        .value(":at", n(w.truth_at))
        .value(":one", n(1));
    match w.version {
        Some(v) => {
            p.value(":v0", n(v));
            p.conditions.push("#v = :v0".into());
        }
        None => p.conditions.push("attribute_not_exists(#v)".into()),
    }
    p.set.push("#c = :t".into());
    p.set.push("#ta = :at".into());
    p.add.push("#v :one".into());
    Ok(matches!(
        write::update(
            &w.deps,
            &w.deps.tables.counters,
            &key,
            &p,
            ReturnValue::None,
            Retries::AtMostOnce,
        )
        .await?,
        Written::Applied(_)
    ))
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn the_truth_counts_each_id_once_and_reports_serialise_flat() {
        let ss = BTreeMap::from([
            ("s1".to_string(), vec!["a".to_string(), "b".to_string()]),
            ("s2".to_string(), vec!["c".to_string()]),
            ("s3".to_string(), vec![]),
        ]);
        assert_eq!(truth_of(&ss), 3);
        let r = TenantReport {
            tenant_id: "acme".into(),
            counted: Some(5),
            truth: 3,
            stale_released: vec!["x".into()],
            outcome: Outcome::Repaired { from: 5, to: 3 },
        };
        let v = serde_json::to_value(&r).unwrap();
        assert_eq!(
            v,
            serde_json::json!({"tenantId": "acme", "counted": 5, "truth": 3,
                "staleReleased": ["x"], "outcome": "repaired", "from": 5, "to": 3})
        );
    }
}
