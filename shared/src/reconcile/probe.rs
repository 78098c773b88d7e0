//! Asking the Management API which sockets are gone, within a tenant's time budget, and carrying
//! where a cut-short probing stopped over to the next run (`probeFrom`), so every id of a tenant
//! with more ids than one budget reaches is probed within `⌈ids / probed per run⌉` runs.

use aws_sdk_dynamodb::types::ReturnValue;

use super::Probe;
use crate::admission::write::{self, ConditionalUpdate, Retries};
use crate::clock::Timestamp;
use crate::counter::{attr as counter_attr, keys};
use crate::dynamo::item::{s, Item};
use crate::error::Result;
use crate::ids::TenantId;
use crate::Deps;

/// Attribute of `{tenant}:sessions`: the id a tenant's next probing starts at, as
/// `{session}:{connection}` (ids hold no `:`), when the last one ran out of budget
/// before the end.
pub const PROBE_FROM: &str = "probeFrom";

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

/// Where a tenant's probing starts: `probeFrom` on its `{tenant}:sessions` item, the id the last
/// cut-short probing stopped at (1 GetItem). An error starts from the first id.
pub(super) async fn position(deps: &Deps, t: &TenantId) -> Option<String> {
    let key = keys::sessions(t).ok()?;
    let out = deps
        .dynamo
        .get_item()
        .table_name(&deps.tables.counters)
        .key(counter_attr::KEY, s(key))
        .projection_expression("#p")
        .expression_attribute_names("#p", PROBE_FROM)
        .consistent_read(true)
        .send()
        .await
        .map_err(|e| tracing::warn!(tenant = %t, error = %e, "no probe position: from the start"))
        .ok()?;
    out.item()
        .and_then(|i| i.get(PROBE_FROM))
        .and_then(|v| v.as_s().ok())
        .cloned()
}

/// Records where the next run's probing starts (`Some`: the first id not probed, as
/// `{session}:{connection}`), or forgets it once a run probed everything (1 UpdateItem; none when
/// nothing changes).
pub(super) async fn keep_position(
    deps: &Deps,
    t: &TenantId,
    was: Option<&str>,
    next: Option<&str>,
) -> Result<()> {
    if was == next {
        return Ok(());
    }
    let mut p = ConditionalUpdate::default();
    p.name("#p", PROBE_FROM);
    match next {
        Some(sid) => {
            p.value(":p", s(sid));
            p.set.push("#p = :p".into());
        }
        None => p.remove.push("#p".into()),
    }
    let key = Item::from([(counter_attr::KEY.to_string(), s(keys::sessions(t)?))]);
    let table = &deps.tables.counters;
    write::update(deps, table, &key, &p, ReturnValue::None, Retries::Sdk).await?;
    Ok(())
}

/// `ids` (sorted by session, then connection) starting at `from` (`{session}:{connection}`),
/// wrapping around.
pub(super) fn from_position(
    mut ids: Vec<(String, String)>,
    from: Option<&str>,
) -> Vec<(String, String)> {
    if let Some((fs, fc)) = from.and_then(|f| f.split_once(':')) {
        let start = ids.partition_point(|(sid, cid)| (sid.as_str(), cid.as_str()) < (fs, fc));
        ids.rotate_left(start);
    }
    ids
}

/// The position of an id, as [`PROBE_FROM`] holds it.
pub(super) fn position_of((sid, cid): &(String, String)) -> String {
    format!("{sid}:{cid}")
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn probing_resumes_at_the_id_it_stopped_at_and_wraps() {
        let ids: Vec<(String, String)> = [("s0", "a"), ("s0", "b"), ("s1", "a"), ("s2", "c")]
            .iter()
            .map(|(s, c)| (s.to_string(), c.to_string()))
            .collect();
        let order = |from: Option<&str>| -> Vec<String> {
            from_position(ids.clone(), from)
                .iter()
                .map(position_of)
                .collect()
        };
        assert_eq!(order(None), ["s0:a", "s0:b", "s1:a", "s2:c"]);
        assert_eq!(order(Some("s0:b")), ["s0:b", "s1:a", "s2:c", "s0:a"]);
        // The id left meanwhile: the next one after where it was.
        assert_eq!(order(Some("s1:0")), ["s1:a", "s2:c", "s0:a", "s0:b"]);
        assert_eq!(order(Some("s9:z")), ["s0:a", "s0:b", "s1:a", "s2:c"]);
        assert_eq!(order(Some("garbled")), order(None));
    }
}
