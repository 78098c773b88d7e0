//! How a tenant enters a run: its credentials and layout, then phase 1 (the counter before, a
//! probe of its ids within the tenant's budget, and the close of ended sessions' sockets found
//! open: decision 2208).

use crate::reconcile::truth::sessions;
use std::future::Future;
use std::time::Duration;

use super::options::Probe;
use super::probe;
use super::report::TenantReport;
use super::shards::Layout;
use super::work::{read_snapshot, skip, Work};
use crate::error::Result;
use crate::ids::TenantId;
use crate::Deps;

/// A tenant's [`Work`], with its own credentials and its `connectionShards` (`shards`, or read
/// from its row: 1 GetItem when one tenant is named); skipped when either fails.
pub(super) async fn prepare<F, Fut>(
    deps: &Deps,
    t: TenantId,
    layout: Option<Layout>,
    scoped: &F,
) -> Work
where
    F: Fn(TenantId) -> Fut,
    Fut: Future<Output = Result<Deps>>,
{
    let report = TenantReport::new(t.to_string());
    let scoped_deps = scoped(t.clone()).await;
    let layout = match (&scoped_deps, layout) {
        (_, Some(l)) => Ok(Some(l)),
        (Ok(d), None) => crate::tenant::store::get(d, &t)
            .await
            .map(|r| r.map(|r| Layout::of(&r.limits))),
        (Err(_), None) => Ok(None),
    };
    let known = layout.as_ref().ok().copied().flatten();
    let mut w = Work::new(t, deps.clone(), report, known.map_or(1, |l| l.n));
    w.layout = known;
    match (scoped_deps, layout) {
        (Err(e), _) => skip(&mut w, format!("no tenant credentials: {e}")),
        (Ok(_), Err(e)) => skip(&mut w, format!("reading the tenant row: {e}")),
        (Ok(d), Ok(_)) => w.deps = d,
    }
    w
}

/// Phase 1 for one tenant: the counter before, and a probe of its ids for at most `budget`,
/// starting where the last cut-short probing stopped (`dry_run`: without recording where it stops).
pub(super) async fn before(
    w: &mut Work,
    probe: Option<&Probe<'_>>,
    budget: Duration,
    dry_run: bool,
) {
    match read_snapshot(w).await {
        Ok(snap) => w.before = snap,
        Err(e) => return skip(w, format!("reading the count: {e}")),
    }
    let Some(p) = probe else {
        return;
    };
    match sessions(&w.deps, &w.tenant, w.shards, None, w.each.is_some()).await {
        Ok(rows) => {
            let of_ended = rows.of_ended();
            let ids: Vec<(String, String)> = rows
                .ids
                .into_iter()
                .flat_map(|(sid, cids)| cids.into_iter().map(move |c| (sid.clone(), c)))
                .collect();
            let was = probe::position(&w.deps, &w.tenant).await;
            let ids = probe::from_position(ids, was.as_deref());
            // Probes start in this order, and none after the budget: the unprobed are a suffix.
            let next = |unprobed: u64| {
                let first = ids.len().saturating_sub(unprobed as usize);
                (unprobed > 0)
                    .then(|| ids.get(first).map(probe::position_of))
                    .flatten()
            };
            let until = w.deps.clock.now().plus(budget);
            let (candidates, errors, unprobed) = probe::gone(p, &w.deps, until, ids.clone()).await;
            if !dry_run {
                // Sockets of ended sessions not found gone: closed, so they can be released.
                let open: Vec<(String, String)> = of_ended
                    .into_iter()
                    .filter(|id| !candidates.contains(id))
                    .collect();
                if !open.is_empty() {
                    w.report.ended_closed = super::ended::close_open(p, &open).await;
                }
            }
            w.candidates = candidates;
            w.report.probe_errors += errors;
            w.report.unprobed += unprobed;
            if !dry_run {
                let next = next(unprobed);
                if let Err(e) =
                    probe::keep_position(&w.deps, &w.tenant, was.as_deref(), next.as_deref()).await
                {
                    tracing::warn!(tenant = %w.tenant, error = %e, "probe position not kept");
                }
            }
        }
        Err(e) => skip(w, format!("reading the sessions: {e}")),
    }
}
