//! The reconciler's repair of a tenant's session count (`{tenant}:sessions`, decision 2204), on the
//! phases of 0306. The truth is the rows not ended (decision 2208). A create adds its unit in the
//! same transaction as its row, so no create is ever half-way; a `DELETE` gives it back in the same
//! transaction as the row's end or deletion, so neither is; a sweep gives it back after the row
//! left, any time later (or never: a leak), which the stamped `truthAt` turns into nothing. So with `C` read just before the truth `T` (the rows the truth's Query found) and
//! `in_flight` = the growth of `relTotal` from that read to the phase-3 read (a grace later),
//! `C − T − in_flight` units are leaked for sure, and `ADD itemCount −leak` is safe whatever runs
//! meanwhile (conditioned on `relTotal` and `repairs` unchanged since the phase-3 read). When
//! nothing moved in that grace (`ver` unchanged) the count is set to `T` exactly, which also raises
//! a count found low (sessions created before the cap existed were never counted).
//!
//! Cost per tenant: 2 GetItem, at most 1 UpdateItem per attempt ([`super::REPAIR_ATTEMPTS`]).

use super::options::REPAIR_ATTEMPTS;
use super::report::Outcome;
use super::snapshot::{grew, read_item, stamp_repair, subtract_leak, unchanged, Snapshot};
use crate::admission::write::ConditionalUpdate;
use crate::counter::{attr as counter_attr, keys};
use crate::dynamo::item::n;
use crate::error::Result;
use crate::ids::TenantId;
use crate::Deps;

/// The session count as one read shows it.
pub(super) async fn read(deps: &Deps, t: &TenantId) -> Result<Snapshot> {
    read_item(deps, &keys::sessions(t)?).await
}

/// Phase 3 for the session count: `read` was taken just before the truth (`truth` rows, at
/// `truth_at` ms).
pub(super) async fn repair(
    deps: &Deps,
    t: &TenantId,
    read: Snapshot,
    truth: u64,
    truth_at: i64,
    dry_run: bool,
) -> Result<Outcome> {
    let truth = i64::try_from(truth).unwrap_or(i64::MAX);
    let c = read.count.unwrap_or(0);
    let key = keys::sessions(t)?;
    for _ in 0..REPAIR_ATTEMPTS {
        let now = self::read(deps, t).await?;
        if now.repairs != read.repairs {
            return Ok(Outcome::Busy);
        }
        let from = now.count.unwrap_or(0);
        let mut p = ConditionalUpdate::default();
        let to = if now.ver == read.ver {
            if from == truth {
                return Ok(Outcome::Consistent);
            }
            unchanged(&mut p, "#v", counter_attr::VERSION, ":v0", read.ver);
            p.name("#c", counter_attr::ITEM_COUNT).value(":t", n(truth));
            p.set.push("#c = :t".into());
            truth
        } else {
            let in_flight = i64::try_from(grew(read.released, now.released)).unwrap_or(i64::MAX);
            let leak = c - truth - in_flight;
            if leak <= 0 {
                return Ok(if c == truth {
                    Outcome::Consistent
                } else {
                    Outcome::Busy
                });
            }
            subtract_leak(&mut p, now.released, leak);
            from - leak
        };
        let to_u = u64::try_from(to).unwrap_or(0);
        if dry_run {
            return Ok(Outcome::WouldRepair { from, to: to_u });
        }
        if stamp_repair(deps, &key, p, read.repairs, truth_at).await? {
            return Ok(Outcome::Repaired { from, to: to_u });
        }
        // A give-back (or, when quiet, anything) landed since the read: read again.
    }
    Ok(Outcome::Busy)
}
