//! The per-minute part of `$connect`'s writes: a fixed minute window or a GCRA spend, folded
//! into the counter item (the tenant's minute) or the session item (the session's).

use std::time::Duration;

use super::super::write::ConditionalUpdate;
use super::super::Limit;
use crate::clock::Timestamp;
use crate::counter::attr as counter_attr;
use crate::counter::window::MinuteWindow;
use crate::dynamo::item::{self, n, Item};
use crate::error::{Error, Result};
use crate::gcra::{self, Rate};
use crate::gcra_write::{SpendPlan, Target};
use crate::session::attr as session_attr;
use crate::tenant::WindowAlgorithm;

/// The per-minute part of one write.
#[derive(Debug, Clone)]
pub(in crate::admission) enum Minute {
    /// The stored window starts at `m`: increment it, if under `cap`.
    Same { m: i64, cap: u64 },
    /// The stored window is older (or absent): start `m` at 1.
    New { m: i64, cap: u64 },
    /// A GCRA spend of one connection.
    Gcra(SpendPlan),
}

/// Attribute names of a folded minute on one item.
pub(in crate::admission) struct MinuteAttrs {
    pub(super) minute: &'static str,
    pub(super) count: &'static str,
    pub(super) tat: &'static str,
}

pub(in crate::admission) const TENANT_MINUTE: MinuteAttrs = MinuteAttrs {
    minute: counter_attr::CONN_MINUTE,
    count: counter_attr::CONN_MINUTE_COUNT,
    tat: counter_attr::CONN_TAT,
};
pub(super) const SESSION_MINUTE: MinuteAttrs = MinuteAttrs {
    minute: session_attr::CONN_MINUTE,
    count: session_attr::CONN_MINUTE_COUNT,
    tat: session_attr::CONN_TAT,
};

impl MinuteAttrs {
    /// What a hint remembers of an item: its window start or its TAT.
    pub(in crate::admission) fn stored(
        &self,
        alg: WindowAlgorithm,
        old: Option<&Item>,
    ) -> Option<i64> {
        let attr = match alg {
            WindowAlgorithm::Fixed => self.minute,
            WindowAlgorithm::Gcra => self.tat,
        };
        old.and_then(|o| item::num(o, attr))
    }
}

pub(super) fn rate(limit: Limit, cap: u64) -> Result<Rate> {
    Rate::per_minute(cap).map_err(|e| Error::Other(format!("{} = {cap}: {e}", limit.name())))
}

impl Minute {
    /// The guess for a limit of `cap` a minute at `now`, from what was last seen (`stored`).
    pub(in crate::admission) fn guess(
        alg: WindowAlgorithm,
        limit: Limit,
        cap: u64,
        stored: Option<i64>,
        now: Timestamp,
    ) -> Result<Minute> {
        let m = MinuteWindow::at(now).start;
        Ok(match alg {
            WindowAlgorithm::Fixed => match stored {
                Some(sm) if sm >= m => Minute::Same { m: sm, cap },
                _ => Minute::New { m, cap },
            },
            WindowAlgorithm::Gcra => Minute::Gcra(
                SpendPlan::spend(rate(limit, cap)?, now, 1, stored.map(Timestamp::from_nanos))
                    .map_err(|e| Error::Other(format!("{}: {e}", limit.name())))?,
            ),
        })
    }

    pub(super) fn same_bet(&self, other: &Minute) -> bool {
        match (self, other) {
            (Minute::Same { m: a, .. }, Minute::Same { m: b, .. }) => a == b,
            (Minute::New { m: a, .. }, Minute::New { m: b, .. }) => a == b,
            (Minute::Gcra(a), Minute::Gcra(b)) => a.case == b.case,
            _ => false,
        }
    }

    /// Adds this guess's condition and update to `p`.
    pub(super) fn write(&self, p: &mut ConditionalUpdate, a: &MinuteAttrs) {
        match self {
            Minute::Same { m, cap } => {
                p.name("#cm", a.minute).name("#cn", a.count);
                p.value(":m", n(m))
                    .value(":mcap", n(cap))
                    .value(":one", n(1));
                p.conditions.push("#cm = :m AND #cn < :mcap".into());
                p.set.push("#cn = #cn + :one".into());
            }
            Minute::New { m, cap } => {
                p.name("#cm", a.minute).name("#cn", a.count);
                p.value(":m", n(m)).value(":one", n(1));
                // A zero cap never gets here (refused before any call); even so it admits nothing.
                if *cap == 0 {
                    p.value(":mcap", n(0));
                    p.conditions.push("#cn < :mcap".into());
                }
                p.conditions
                    .push("attribute_not_exists(#cm) OR #cm < :m".into());
                p.set.push("#cm = :m".into());
                p.set.push("#cn = :one".into());
            }
            Minute::Gcra(plan) => {
                let mut target = Target::new("", "k", "", None, Duration::ZERO);
                target.tat_attr = a.tat.to_string();
                let e = plan.expression(&target);
                p.conditions.push(e.condition);
                p.set.push(e.update.trim_start_matches("SET ").to_string());
                p.names.extend(e.names);
                p.values.extend(e.values);
            }
        }
    }

    /// Whether the old item has no room for one more connection this minute (the refusal, with
    /// the GCRA decision for a GCRA limit).
    pub(in crate::admission) fn refused(
        &self,
        a: &MinuteAttrs,
        old: Option<&Item>,
    ) -> Option<Option<gcra::Decision>> {
        match self {
            Minute::Same { m, cap } | Minute::New { m, cap } => {
                let stored = old.and_then(|o| item::num(o, a.minute));
                let count = old.and_then(|o| item::num(o, a.count)).unwrap_or(0);
                let full = stored.is_some_and(|sm| sm >= *m) && count >= *cap as i64;
                full.then_some(None)
            }
            Minute::Gcra(plan) => {
                let tat = old
                    .and_then(|o| item::num(o, a.tat))
                    .map(Timestamp::from_nanos);
                match gcra::spend(&plan.rate, tat, plan.now, 1) {
                    Ok(d) if !d.allowed => Some(Some(d)),
                    _ => None,
                }
            }
        }
    }
}

/// What a hint should remember after a successful write of `minute`.
pub(super) fn after(minute: &Minute) -> Option<i64> {
    match minute {
        Minute::Same { m, .. } | Minute::New { m, .. } => Some(*m),
        Minute::Gcra(plan) => Some(plan.admitted(None, None).new_tat.as_nanos()),
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::admission::connect::zero_limit;
    use crate::gcra_write::Case;
    use crate::tenant::Limits;

    fn old(pairs: &[(&str, i64)]) -> Item {
        pairs.iter().map(|(k, v)| (k.to_string(), n(v))).collect()
    }

    #[test]
    fn a_zero_limit_is_found_in_the_seeds_order() {
        let mut l = Limits::example(60, 5, 2, 10, 200, 60);
        assert_eq!(zero_limit(&l), None);
        l.session_per_minute = 0;
        assert_eq!(zero_limit(&l), Some(Limit::SessionPerMinute));
        l.tenant_connections = 0;
        assert_eq!(zero_limit(&l), Some(Limit::TenantConnections));
    }

    #[test]
    fn fixed_minute_bets_and_refusals_come_from_the_old_item() {
        let now = Timestamp::from_secs(1_700_000_070);
        let m = MinuteWindow::at(now).start;
        let alg = WindowAlgorithm::Fixed;
        let guess = |stored| Minute::guess(alg, Limit::TenantPerMinute, 3, stored, now).unwrap();
        assert!(matches!(guess(None), Minute::New { .. }));
        assert!(matches!(guess(Some(m - 60)), Minute::New { .. }));
        assert!(matches!(guess(Some(m)), Minute::Same { .. }));
        let a = &TENANT_MINUTE;
        let full = old(&[(a.minute, m), (a.count, 3)]);
        assert_eq!(guess(None).refused(a, Some(&full)), Some(None));
        let room = old(&[(a.minute, m), (a.count, 2)]);
        assert_eq!(guess(None).refused(a, Some(&room)), None);
        let stale = old(&[(a.minute, m - 60), (a.count, 3)]);
        assert_eq!(guess(Some(m)).refused(a, Some(&stale)), None);
        // Every placeholder the expressions use is defined, and nothing else is.
        for b in [guess(None), guess(Some(m))] {
            let mut p = ConditionalUpdate::default();
            b.write(&mut p, a);
            let text = format!("{} {}", p.condition().unwrap(), p.update());
            for k in p.names.keys().chain(p.values.keys()) {
                assert!(text.contains(k.as_str()), "{k} unused in {text}");
            }
        }
    }

    #[test]
    fn gcra_minute_bets_use_the_stored_tat() {
        let now = Timestamp::from_secs(1_700_000_070);
        let alg = WindowAlgorithm::Gcra;
        let a = &SESSION_MINUTE;
        let idle = Minute::guess(alg, Limit::SessionPerMinute, 4, None, now).unwrap();
        assert!(matches!(&idle, Minute::Gcra(p) if p.case == Case::Idle));
        let ahead = now.plus(Duration::from_secs(30)).as_nanos();
        let draining = Minute::guess(alg, Limit::SessionPerMinute, 4, Some(ahead), now).unwrap();
        assert!(matches!(&draining, Minute::Gcra(p) if p.case == Case::Draining));
        assert!(!idle.same_bet(&draining));
        // Four connections a minute: a TAT a full minute ahead has no room; retry in 15 s.
        let full = old(&[(a.tat, now.plus(Duration::from_secs(60)).as_nanos())]);
        match idle.refused(a, Some(&full)) {
            Some(Some(d)) => assert_eq!(d.retry_in, Duration::from_secs(15)),
            other => panic!("{other:?}"),
        }
        let mut p = ConditionalUpdate::default();
        draining.write(&mut p, a);
        assert!(
            p.update().starts_with("SET #tat = #tat + :inc"),
            "{}",
            p.update()
        );
    }
}
