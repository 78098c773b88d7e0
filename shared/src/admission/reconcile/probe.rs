//! Asking the Management API which sockets are gone, within a tenant's time budget.

use super::Probe;
use crate::clock::Timestamp;
use crate::Deps;

/// Management API probes in flight at once.
const PROBES_IN_FLIGHT: usize = 32;

/// Ids (with their session) whose socket the Management API says is gone, how many probes failed
/// (those ids are taken as live: a failed probe proves nothing), and how many were not probed
/// because the tenant's budget ran out at `until` (on `deps.clock`): those are taken as live too,
/// and a later run probes them.
pub(super) async fn gone(
    probe: &Probe<'_>,
    deps: &Deps,
    until: Timestamp,
    ids: Vec<(String, String)>,
) -> (Vec<(String, String)>, u64, u64) {
    use futures::stream::{self, StreamExt};
    let checks = stream::iter(ids.into_iter().map(|(sid, cid)| async move {
        // Checked when the probe starts, so no probe begins after the budget.
        if deps.clock.now() >= until {
            return (sid, cid, None);
        }
        let live = probe.gateway.is_live(&probe.endpoint, &cid).await;
        (sid, cid, Some(live))
    }))
    .buffer_unordered(PROBES_IN_FLIGHT)
    .collect::<Vec<_>>()
    .await;
    let mut out = Vec::new();
    let (mut errors, mut unprobed) = (0, 0);
    for (sid, cid, live) in checks {
        match live {
            None => unprobed += 1,
            Some(Ok(true)) => {}
            Some(Ok(false)) => out.push((sid, cid)),
            Some(Err(e)) => {
                errors += 1;
                tracing::warn!(connection = %cid, error = %e, "probe failed; taken as live");
            }
        }
    }
    out.sort();
    (out, errors, unprobed)
}
