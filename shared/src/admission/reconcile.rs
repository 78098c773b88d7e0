//! The reconciler: repairs a tenant's open-connection count that leaked high —
//! a `$connect` whose second write never happened, a `$disconnect` API Gateway never delivered, a
//! TTL sweep that ended in the DLQ — and releases connection ids whose socket is gone.
//!
//! The truth of a tenant is the union of its sessions' `connectionIds` (one `Query` of the session
//! table's tenant partition), rows a session `DELETE` ended included: their sockets are not known
//! gone yet (decision 2208). A run goes in three phases, `grace` apart (decision 0306):
//!
//! 1. **before**: read the counter (`resvTotal`, `ver`); ask the Management API about every id
//!    (`GET @connections`). A 410 is only a candidate: a connection inside its own `$connect` answers
//!    410 too. A probe that errors counts as live (and is reported), never skips the tenant.
//! 2. **read** (a grace later): candidates still gone are released as a disconnect releases them.
//!    Then the counter is read (`C`, `resvTotal`, `relTotal`, `repairs`) and, right after, the truth
//!    `T` (`truthAt` = when that read ended).
//! 3. **repair** (a grace later): the counter is read again. The units of `C` not in `T` are leaks,
//!    reservations pending at phase 2 (made within a grace before it: at most the growth of
//!    `resvTotal` since phase 1), or releases pending at phase 2 (decremented within a grace after
//!    it: at most the growth of `relTotal` since phase 2; any later is a crash, a leak). So
//!    `leak ≥ C − T − in_flight`, and `ADD itemCount −leak` is safe whatever runs meanwhile; it is
//!    conditioned on `relTotal` and `repairs` unchanged since that read (re-read and retried when a
//!    release lands in between), so no release and no other reconciler is counted twice. When
//!    nothing at all moved (`ver` unchanged since phase 1) the count is set to `T` exactly (which may
//!    raise it). Under load a leak below the in-flight bound waits for a quieter run; the count is
//!    never set below the connections that hold capacity. `grace` must exceed how long a `$connect`
//!    or release can be half-way: the handler timeout plus a margin ([`MIN_GRACE`]).
//!
//! A TTL sweep that arrives after a repair decrements only for a deletion later than `truthAt` plus
//! [`release::TRUTH_MARGIN`] (`release::swept`), so a session the truth already left out is not
//! subtracted twice even when this host's clock runs behind by up to that margin.
//!
//! Costs per tenant: 1 Query (2 with probing), 3 GetItem, at most 1 UpdateItem (one more per
//! release landing between the last read and the write, at most [`REPAIR_ATTEMPTS`]), plus 2
//! Management API calls per gone candidate and 2 UpdateItem per session with gone ids. A sharded
//! tenant (decision 1502): 3 BatchGetItem and at most 1 TransactWriteItems of its N shards instead.
//! The session count (decision 2204, `sessions`): 2 GetItem, at most 1 UpdateItem. With probing,
//! 1 GetItem of where the probes start, and 1 UpdateItem when that moves (`probe`).
//!
//! Ended rows are finished here too ([`ended`], decision 2208): their sockets found open in phase 1
//! are closed (1 DeleteConnection each), and those the truth finds empty are deleted in phase 3 (1
//! DeleteItem each).
//!
//! A run fits its function (decision 2205, [`budget`]): the grace is at most [`MAX_GRACE`], each
//! tenant's probes have a time budget, tenants are taken while the run's budget lasts (the rest are
//! `Deferred`), and a run over every tenant starts after the last one the previous run took.

use std::collections::{BTreeMap, BTreeSet};
use std::future::Future;
use std::time::Duration;

use aws_sdk_dynamodb::types::ReturnValue;

use super::release;
use super::write::{self, Parts, Retries, Written};
use crate::counter::{attr as cattr, keys};
use crate::dynamo::item::{n, s, Item};
use crate::error::{Error, Result};
use crate::gateway::Gateway;
use crate::ids::{SessionId, TenantId};
use crate::Deps;

pub mod budget;
mod ended;
mod probe;
mod report;
mod sessions;
mod start;
mod truth;
pub use budget::{Budget, MAX_GRACE};
pub use report::{Outcome, Report, TenantReport};
use truth::{sessions, truth_of};

/// Default grace between the phases: longer than any `$connect` or release can be half-way.
pub const DEFAULT_GRACE: Duration = Duration::from_secs(30);
/// The handlers' timeout (`template.yaml`, `Globals.Function.Timeout`): no `$connect` or release is
/// half-way for longer, since the handler is stopped.
pub const HANDLER_TIMEOUT: Duration = Duration::from_secs(10);
/// The shortest grace accepted from configuration: the handler timeout plus 5 s for the last
/// request's flight and scheduling.
pub const MIN_GRACE: Duration = Duration::from_secs(15);
/// Repair writes tried when releases keep landing between the last read and the write.
pub const REPAIR_ATTEMPTS: u32 = 4;

/// Validates a configured grace: at least [`MIN_GRACE`], or the reasoning of the module docs fails
/// (a grace of 0 repairs a connect half-way through down to below the truth); at most
/// [`MAX_GRACE`], or two graces leave the run too little of its function's timeout to finish.
pub fn check_grace(grace: Duration) -> std::result::Result<Duration, String> {
    if grace > MAX_GRACE {
        return Err(format!(
            "the reconcile grace must be at most {} s, not {} s: a run waits two graces inside \
             the reconciler's {} s timeout and needs the rest for its work",
            MAX_GRACE.as_secs(),
            grace.as_secs_f64(),
            budget::FUNCTION_TIMEOUT.as_secs()
        ));
    }
    if grace < MIN_GRACE {
        Err(format!(
            "the reconcile grace must be at least {} s (the handlers' {} s timeout plus a margin), \
             not {} s: a shorter grace can repair a count below the connections it holds",
            MIN_GRACE.as_secs(),
            HANDLER_TIMEOUT.as_secs(),
            grace.as_secs_f64()
        ))
    } else {
        Ok(grace)
    }
}

/// What to reconcile and how.
#[derive(Debug, Clone)]
pub struct Options {
    /// One tenant, or every tenant in the tenant table.
    pub tenant: Option<TenantId>,
    /// Report only: release nothing, write nothing.
    pub dry_run: bool,
    /// Time between the phases (see the module docs). Not checked here (tests use short ones):
    /// the entry points validate configured values with [`check_grace`].
    pub grace: Duration,
    /// The run's and each tenant's time ([`Budget::for_grace`] for a scheduled run).
    pub budget: Budget,
}

/// Where the Management API is, to find gone sockets; `None` skips probing.
pub struct Probe<'a> {
    pub gateway: &'a Gateway,
    pub endpoint: String,
}

/// What one read of the tenant's counter showed.
/// For a sharded tenant, the sums over its shards (`repairs` from shard 0; decision 1502).
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq)]
pub(super) struct Snapshot {
    pub count: Option<i64>,
    pub ver: Option<i64>,
    pub reserved: Option<i64>,
    pub released: Option<i64>,
    pub repairs: Option<i64>,
    /// `layoutSpan`: the tenant was resharded and fenced (decision 2206).
    pub span: Option<i64>,
}

/// One counter item (`{tenant}`, or `{tenant}:sessions`) as a snapshot: 1 GetItem.
pub(super) async fn read_item(deps: &Deps, key: &str) -> Result<Snapshot> {
    let out = deps
        .dynamo
        .get_item()
        .table_name(&deps.tables.counters)
        .key(cattr::KEY, s(key))
        .consistent_read(true)
        .send()
        .await
        .map_err(|e| Error::dynamo("GetItem", e))?;
    Ok(super::reconcile_shards::snapshot_of(out.item()))
}

/// The counter as one snapshot: the `{tenant}` item (1 GetItem), or the sums over a sharded
/// tenant's shards (1 BatchGetItem), keeping each shard's `relTotal` for the repair's conditions.
/// A resharded tenant's counters are read one by one (`each`, decision 2206) once a read shows
/// its fence.
async fn read_snapshot(w: &mut Work) -> Result<Snapshot> {
    if let Some(each) = w.each.as_mut() {
        return each.read_phase(&w.deps).await;
    }
    let snap = if w.shards <= 1 {
        read_item(&w.deps, &keys::tenant_connections(&w.tenant)?).await?
    } else {
        let (snap, released) = super::reconcile_shards::read(&w.deps, &w.tenant, w.shards).await?;
        w.released = released;
        snap
    };
    if let Some(mut each) = super::reconcile_shards::fenced(&w.tenant, snap.span)? {
        let snap = each.read_phase(&w.deps).await?;
        w.each = Some(each);
        return Ok(snap);
    }
    Ok(snap)
}

/// Adds `#name = :value`, or `attribute_not_exists(#name)` when it was absent.
pub(super) fn unchanged(p: &mut Parts, name: &str, attr: &str, value: &str, was: Option<i64>) {
    p.name(name, attr);
    match was {
        Some(v) => {
            p.value(value, n(v));
            p.conditions.push(format!("{name} = {value}"));
        }
        None => p.conditions.push(format!("attribute_not_exists({name})")),
    }
}

pub(super) fn grew(from: Option<i64>, to: Option<i64>) -> u64 {
    u64::try_from(to.unwrap_or(0) - from.unwrap_or(0)).unwrap_or(0)
}

/// Per-tenant state carried between the phases.
struct Work {
    tenant: TenantId,
    deps: Deps,
    report: TenantReport,
    candidates: Vec<(String, String)>,
    /// Phase 1's read of the counter.
    before: Snapshot,
    /// Phase 2's read of the counter.
    read: Snapshot,
    /// Phase 2's read of the session count, just before the truth.
    sessions_read: Snapshot,
    truth_at: i64,
    done: bool,
    /// The tenant's `connectionShards` (1: the one `{tenant}` item).
    shards: u64,
    /// For a sharded tenant: each shard's `relTotal` at the last read (the repair's conditions).
    released: Vec<Option<i64>>,
    /// A resharded tenant: every counter on its own (decision 2206).
    each: Option<super::reconcile_shards::Each>,
    /// Ended session rows the truth found empty: deleted in phase 3 (decision 2208).
    ended_empty: Vec<String>,
}

impl Work {
    fn new(tenant: TenantId, deps: Deps, report: TenantReport, shards: u64) -> Work {
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
            ended_empty: vec![],
        }
    }
}

/// Where a run waits between its phases (module docs): `grace` of wall-clock time in [`run`].
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Pause {
    /// After phase 1 (the counter before, the probes), before the releases and the read.
    AfterProbe,
    /// After phase 2 (the read and the truth), before the repair.
    AfterRead,
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
    Fut: Future<Output = Result<Deps>>,
{
    run_paced(deps, options, probe, scoped, |_| {
        tokio::time::sleep(options.grace)
    })
    .await
}

/// [`run`] with the waits between the phases given by `pause` instead of `grace` of wall-clock
/// time. The grace stands for work half-way when a phase ends; a test puts a `$connect` or a
/// release exactly there (inside `pause`) instead of racing a timer.
pub async fn run_paced<F, Fut, P, PFut>(
    deps: &Deps,
    options: &Options,
    probe: Option<&Probe<'_>>,
    scoped: F,
    mut pause: P,
) -> Result<Report>
where
    F: Fn(TenantId) -> Fut,
    Fut: Future<Output = Result<Deps>>,
    P: FnMut(Pause) -> PFut,
    PFut: Future<Output = ()>,
{
    let no_grace = crate::mutation::active(deps, crate::mutation::Mutation::ReconcileWithoutGrace);
    // Each tenant with its `connectionShards` (when one tenant is asked for, its row is read below
    // with its own credentials); every tenant starts after the last run's cursor.
    let every = options.tenant.is_none();
    let tenants: Vec<(TenantId, Option<u64>)> = match &options.tenant {
        Some(t) => vec![(t.clone(), None)],
        None => {
            let (all, bad) = crate::tenant::store::list(deps).await?;
            for b in bad {
                tracing::warn!(row = %b, "skipping a malformed tenant row");
            }
            let shards = |t: &crate::tenant::Tenant| Some(t.limits.connection_shards);
            let all = all
                .iter()
                .map(|t| (t.tenant_id.clone(), shards(t)))
                .collect();
            let after = budget::read(deps).await.unwrap_or_else(|e| {
                tracing::warn!(error = %e, "no reconcile cursor: starting from the first tenant");
                None
            });
            budget::rotate(all, |(t, _)| t, after.as_deref())
        }
    };

    // Phase 1: the counter before, and a probe of every id of every session, tenant after tenant
    // while the run's budget lasts; the others wait for the next run.
    let started = deps.clock.now();
    let mut work = Vec::with_capacity(tenants.len());
    let mut deferred = Vec::new();
    for (t, shards) in tenants {
        if every && !options.budget.takes_more(deps.clock.now().since(started)) {
            let mut r = TenantReport::new(t.to_string());
            (r.outcome, r.sessions) = (Outcome::Deferred, Outcome::Deferred);
            deferred.push(r);
            continue;
        }
        let mut w = start::prepare(deps, t, shards, &scoped).await;
        if !w.done {
            start::before(&mut w, probe, options.budget.tenant, options.dry_run).await;
        }
        work.push(w);
    }
    if let (true, false, Some(last)) = (every, options.dry_run, work.last()) {
        // Written now, so a run stopped later still moves the next one on.
        if let Err(e) = budget::write(deps, &last.tenant).await {
            tracing::warn!(error = %e, "the reconcile cursor was not written");
        }
    }
    if !no_grace {
        pause(Pause::AfterProbe).await;
    }

    // Phase 2: release what is still gone, then read the count and, right after, the truth.
    for w in work.iter_mut().filter(|w| !w.done) {
        if let Err(e) = release_and_read(w, probe, options.dry_run, options.budget.tenant).await {
            skip(w, format!("releasing or reading the count: {e}"));
            continue;
        }
        match sessions::read(&w.deps, &w.tenant).await {
            Ok(snap) => {
                w.sessions_read = snap;
                w.report.sessions_counted = snap.count;
            }
            Err(e) => {
                skip(w, format!("reading the session count: {e}"));
                continue;
            }
        }
        let fenced = w.each.is_some();
        match self::sessions(&w.deps, &w.tenant, w.shards, w.each.as_mut(), fenced).await {
            Ok(rows) => {
                w.truth_at = w.deps.clock.now().as_millis();
                w.report.sessions_truth = rows.sessions();
                w.ended_empty = rows.ended_empty();
                let ss = rows.ids;
                let mut t = truth_of(&ss);
                // A dry run released nothing: count its stale ids out as a real run would.
                if options.dry_run {
                    let held: BTreeSet<&String> = ss.values().flatten().collect();
                    t -= w
                        .report
                        .stale_released
                        .iter()
                        .filter(|c| held.contains(c))
                        .count() as u64;
                }
                w.report.truth = t;
            }
            Err(e) => skip(w, format!("reading the truth: {e}")),
        }
    }
    if !no_grace {
        pause(Pause::AfterRead).await;
    }

    // Phase 3: repair what is provably leaked.
    for w in work.iter_mut().filter(|w| !w.done) {
        w.report.outcome = match repair(w, options.dry_run).await {
            Ok(o) => o,
            Err(e) => Outcome::Skipped {
                reason: format!("repairing the count: {e}"),
            },
        };
        let (t, read, truth) = (&w.tenant, w.sessions_read, w.report.sessions_truth);
        w.report.sessions =
            match sessions::repair(&w.deps, t, read, truth, w.truth_at, options.dry_run).await {
                Ok(o) => o,
                Err(e) => Outcome::Skipped {
                    reason: format!("repairing the session count: {e}"),
                },
            };
        if !options.dry_run && !w.ended_empty.is_empty() {
            match ended::delete_empty(&w.deps, &w.tenant, &w.ended_empty).await {
                Ok(n) => w.report.ended_deleted = n,
                Err(e) => {
                    tracing::warn!(tenant = %w.tenant, error = %e, "ended sessions not deleted")
                }
            }
        }
        let report = serde_json::to_string(&w.report).unwrap_or_default();
        tracing::info!(tenant = %w.tenant, %report, "reconciled");
    }
    let mut tenants: Vec<TenantReport> = work.into_iter().map(|w| w.report).collect();
    tenants.extend(deferred);
    tenants.sort_by(|a, b| a.tenant_id.cmp(&b.tenant_id));
    Ok(Report {
        dry_run: options.dry_run,
        probed: probe.is_some(),
        grace_ms: u64::try_from(options.grace.as_millis()).unwrap_or(u64::MAX),
        tenants,
    })
}

/// Phase 3 for one tenant: the exact truth when nothing moved since phase 1, otherwise the leak
/// `C − T − in_flight` subtracted, conditioned on no release or repair since the last read.
async fn repair(w: &mut Work, dry_run: bool) -> Result<Outcome> {
    if let Some(each) = &w.each {
        let (outcome, in_flight) = each
            .repair(&w.deps, &w.tenant, w.truth_at, dry_run, REPAIR_ATTEMPTS)
            .await?;
        w.report.in_flight = in_flight;
        return Ok(outcome);
    }
    let truth = w.report.truth as i64;
    let read = w.read;
    let c = read.count.unwrap_or(0);
    for _ in 0..REPAIR_ATTEMPTS {
        let now = read_snapshot(w).await?;
        if now.repairs != read.repairs {
            return Ok(Outcome::Busy);
        }
        let in_flight = grew(w.before.reserved, read.reserved)
            + crate::mutation::unless(
                &w.deps,
                crate::mutation::Mutation::ReconcileMissesLateReleases,
                grew(read.released, now.released),
            );
        w.report.in_flight = in_flight;
        let from = now.count.unwrap_or(0);
        // A sharded tenant is repaired by subtraction only (one transaction over its shards).
        let quiet = now.ver == w.before.ver && w.shards <= 1;
        let (to, parts) = if quiet {
            if from == truth {
                return Ok(Outcome::Consistent);
            }
            let mut p = Parts::default();
            unchanged(&mut p, "#v", cattr::VERSION, ":v0", w.before.ver);
            p.name("#c", cattr::ITEM_COUNT);
            p.value(":t", n(truth));
            p.set.push("#c = :t".into());
            (truth, p)
        } else {
            let leak = c - truth - i64::try_from(in_flight).unwrap_or(i64::MAX);
            if leak <= 0 {
                return Ok(if c == truth {
                    Outcome::Consistent
                } else {
                    Outcome::Busy
                });
            }
            let mut p = Parts::default();
            unchanged(&mut p, "#rl", cattr::RELEASED_TOTAL, ":rl0", now.released);
            p.name("#c", cattr::ITEM_COUNT);
            p.value(":leak", n(leak)).value(":neg", n(-leak));
            p.conditions.push("#c >= :leak".into());
            p.add.push("#c :neg".into());
            (from - leak, p)
        };
        let to_u = u64::try_from(to).unwrap_or(0);
        if dry_run {
            return Ok(Outcome::WouldRepair { from, to: to_u });
        }
        if w.shards > 1 {
            let (deps, t, rel) = (&w.deps, &w.tenant, &w.released);
            let leak = from - to;
            if super::reconcile_shards::subtract(deps, t, leak, w.truth_at, rel, read.repairs)
                .await?
            {
                return Ok(Outcome::Repaired { from, to: to_u });
            }
            // A release (or another repair) landed since the read: read again.
            continue;
        }
        let key = keys::tenant_connections(&w.tenant)?;
        if stamp_repair(&w.deps, &key, parts, read.repairs, w.truth_at).await? {
            return Ok(Outcome::Repaired { from, to: to_u });
        }
        // A release (or anything, when quiet) landed since the read: read again.
    }
    Ok(Outcome::Busy)
}

/// A repair's write on one counter item (`key`): `p` (the change and its conditions), plus
/// `repairs` unchanged since the read (two reconcilers never repair the same thing), `truthAt`
/// stamped, `ver` and `repairs` + 1. 1 UpdateItem, at most once. Whether it applied.
pub(super) async fn stamp_repair(
    deps: &Deps,
    key: &str,
    mut p: Parts,
    repairs: Option<i64>,
    truth_at: i64,
) -> Result<bool> {
    unchanged(&mut p, "#rp", cattr::REPAIRS, ":rp0", repairs);
    p.name("#v", cattr::VERSION).name("#ta", cattr::TRUTH_AT);
    p.value(":one", n(1)).value(":at", n(truth_at));
    p.set.push("#ta = :at".into());
    p.add.push("#v :one".into());
    p.add.push("#rp :one".into());
    let key = Item::from([(cattr::KEY.to_string(), s(key))]);
    let table = &deps.tables.counters;
    Ok(matches!(
        write::update(
            deps,
            table,
            &key,
            &p,
            ReturnValue::None,
            Retries::AtMostOnce
        )
        .await?,
        Written::Applied(_)
    ))
}

fn skip(w: &mut Work, reason: String) {
    tracing::warn!(tenant = %w.tenant, %reason, "reconcile skipped a tenant");
    w.report.sessions = Outcome::Skipped {
        reason: reason.clone(),
    };
    w.report.outcome = Outcome::Skipped { reason };
    w.done = true;
}

async fn release_and_read(
    w: &mut Work,
    probe: Option<&Probe<'_>>,
    dry_run: bool,
    budget: Duration,
) -> Result<()> {
    if let (Some(p), false) = (probe, w.candidates.is_empty()) {
        let until = w.deps.clock.now().plus(budget);
        let ids = std::mem::take(&mut w.candidates);
        let (still, errors, unprobed) = probe::gone(p, &w.deps, until, ids).await;
        w.report.probe_errors += errors;
        w.report.unprobed += unprobed;
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
    w.read = read_snapshot(w).await?;
    w.report.counted = w.read.count;
    Ok(())
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
            counted: Some(5),
            truth: 3,
            stale_released: vec!["x".into()],
            outcome: Outcome::Repaired { from: 5, to: 3 },
            sessions_counted: Some(2),
            sessions_truth: 2,
            ..TenantReport::new("acme".into())
        };
        let v = serde_json::to_value(&r).unwrap();
        assert_eq!(
            v,
            serde_json::json!({"tenantId": "acme", "counted": 5, "truth": 3,
                "staleReleased": ["x"], "probeErrors": 0, "unprobed": 0, "inFlight": 0,
                "outcome": "repaired", "from": 5, "to": 3,
                "sessionsCounted": 2, "sessionsTruth": 2,
                "sessions": {"outcome": "consistent"}})
        );
    }
}
