//! The oracle: judges a run from what clients were told and from the ledger, never from the
//! regional buckets.
//!
//! - Admitted per window: every admission any region's client was told, in simulated real time,
//!   replayed through one GCRA of the global limit (`L`, or the published bound in bounded mode).
//!   A sequence conforms to GCRA with burst `B` and rate `B` per `P` exactly when no window of
//!   length `T` holds more than `B + B·T/P`, so one refusal in the replay is one window over.
//! - The allotments' sum: at most `L` at every step, and the amounts in transit make up the rest.
//! - Stranded allotment: after the schedule, with a region gone for good, everything comes back
//!   to the live regions once leases, grace and quarantine have passed.

use std::time::Duration;

use shared::clock::Timestamp;
use shared::gcra::{self, Rate};
use shared::region::ledger::RegionRow;
use shared::region::saga::in_transit;

/// Replays `admitted` (real instants, any order) through one GCRA bucket of `bound` per `period`;
/// the first instant it refuses, with how many were admitted in the window before it.
pub fn over_window(admitted: &[Timestamp], bound: u64, period: Duration) -> Option<String> {
    let rate = Rate::new(bound, bound, period).ok()?;
    let mut sorted = admitted.to_vec();
    sorted.sort();
    let mut tat = None;
    for (i, t) in sorted.iter().enumerate() {
        match gcra::spend(&rate, tat, *t, 1) {
            Ok(d) if d.allowed => tat = Some(d.new_tat),
            _ => {
                let from = t.minus(period);
                let in_window = sorted[..=i].iter().filter(|x| **x > from).count();
                return Some(format!(
                    "admission {} at {t} is over the GCRA bound {bound} per {period:?} \
                     ({in_window} admitted in the period before it)",
                    i + 1
                ));
            }
        }
    }
    None
}

/// The ledger's sums: (Σ allotments, Σ in transit).
pub fn sums(rows: &[RegionRow]) -> (u64, u64) {
    let held = rows.iter().map(|r| r.allotment).sum();
    let moving = in_transit(rows).iter().map(|(_, e)| e.amount).sum();
    (held, moving)
}

/// A violation of "allotments never sum past `L`, and what is not held is in transit".
pub fn sum_violation(rows: &[RegionRow], total: u64) -> Option<String> {
    let (held, moving) = sums(rows);
    if held > total {
        return Some(format!("allotments sum to {held} > L = {total}"));
    }
    if held + moving != total {
        return Some(format!(
            "allotments {held} + in transit {moving} != L = {total} (created or lost)"
        ));
    }
    None
}
