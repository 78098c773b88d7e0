//! The reconciler's pass: read each counter, compare it with the truth, repair what drifted.

use super::report::{Outcome, Report, TenantReport};
use std::collections::{BTreeMap, BTreeSet};
use std::future::Future;
use std::time::Duration;

use crate::admission::release;
use crate::admission::write::ConditionalUpdate;
use crate::counter::{attr as counter_attr, keys};
use crate::dynamo::item::n;
use crate::error::Result;
use crate::ids::{SessionId, TenantId};
use crate::Deps;

use super::options::{Options, Pause, Probe, REPAIR_ATTEMPTS};
use super::shards::Layout;
use super::snapshot::grew;
use super::snapshot::{stamp_repair, subtract_leak, unchanged};
use super::truth::{sessions, truth_of};
use super::work::{read_snapshot, skip, Work};

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
    let tenants: Vec<(TenantId, Option<Layout>)> = match &options.tenant {
        Some(t) => vec![(t.clone(), None)],
        None => {
            let (all, bad) = crate::tenant::store::list(deps).await?;
            for b in bad {
                tracing::warn!(row = %b, "skipping a malformed tenant row");
            }
            let all = all
                .iter()
                .map(|t| (t.tenant_id.clone(), Some(Layout::of(&t.limits))))
                .collect();
            let after = super::budget::read(deps).await.unwrap_or_else(|e| {
                tracing::warn!(error = %e, "no reconcile cursor: starting from the first tenant");
                None
            });
            super::budget::rotate(all, |(t, _)| t, after.as_deref())
        }
    };

    // Phase 1: the counter before, and a probe of every id of every session, tenant after tenant
    // while the run's budget lasts; the others wait for the next run.
    let started = deps.clock.now();
    let mut work = Vec::with_capacity(tenants.len());
    let mut deferred = Vec::new();
    for (t, layout) in tenants {
        if every && !options.budget.takes_more(deps.clock.now().since(started)) {
            let mut r = TenantReport::new(t.to_string());
            (r.outcome, r.sessions) = (Outcome::Deferred, Outcome::Deferred);
            deferred.push(r);
            continue;
        }
        let mut w = super::start::prepare(deps, t, layout, &scoped).await;
        if !w.done {
            super::start::before(&mut w, probe, options.budget.tenant, options.dry_run).await;
        }
        work.push(w);
    }
    if let (true, false, Some(last)) = (every, options.dry_run, work.last()) {
        // UpdateOutcome now, so a run stopped later still moves the next one on.
        if let Err(e) = super::budget::write(deps, &last.tenant).await {
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
        match super::sessions::read(&w.deps, &w.tenant).await {
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
        match sessions(&w.deps, &w.tenant, w.shards, w.each.as_mut(), fenced).await {
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
            match super::sessions::repair(&w.deps, t, read, truth, w.truth_at, options.dry_run)
                .await
            {
                Ok(o) => o,
                Err(e) => Outcome::Skipped {
                    reason: format!("repairing the session count: {e}"),
                },
            };
        if !options.dry_run && !w.ended_empty.is_empty() {
            match super::ended::delete_empty(&w.deps, &w.tenant, &w.ended_empty).await {
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
pub(super) async fn repair(w: &mut Work, dry_run: bool) -> Result<Outcome> {
    if let Some(each) = &w.each {
        let (outcome, in_flight) = each
            .repair(
                &w.deps,
                &w.tenant,
                w.truth_at,
                dry_run,
                REPAIR_ATTEMPTS,
                w.layout,
            )
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
            let mut p = ConditionalUpdate::default();
            unchanged(&mut p, "#v", counter_attr::VERSION, ":v0", w.before.ver);
            p.name("#c", counter_attr::ITEM_COUNT);
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
            let mut p = ConditionalUpdate::default();
            subtract_leak(&mut p, now.released, leak);
            (from - leak, p)
        };
        let to_u = u64::try_from(to).unwrap_or(0);
        if dry_run {
            return Ok(Outcome::WouldRepair { from, to: to_u });
        }
        if w.shards > 1 {
            let (deps, t, rel) = (&w.deps, &w.tenant, &w.released);
            let leak = from - to;
            if super::shards::subtract(deps, t, leak, w.truth_at, rel, read.repairs).await? {
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

pub(super) async fn release_and_read(
    w: &mut Work,
    probe: Option<&Probe<'_>>,
    dry_run: bool,
    budget: Duration,
) -> Result<()> {
    if let (Some(p), false) = (probe, w.candidates.is_empty()) {
        let until = w.deps.clock.now().plus(budget);
        let ids = std::mem::take(&mut w.candidates);
        let (still, errors, unprobed) = super::probe::gone(p, &w.deps, until, ids).await;
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
