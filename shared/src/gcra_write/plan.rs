//! The GCRA conditional write: the plan of one spend or refund and the item it writes.

use std::collections::HashMap;
use std::time::Duration;

use aws_sdk_dynamodb::types::AttributeValue;

use crate::clock::Timestamp;
use crate::dynamo::item::{num, Item};
use crate::gcra::{self, Decision, Rate, RateError};

/// Item attributes the GCRA write uses. Times are epoch nanoseconds (N) unless said otherwise.
pub mod attr {
    /// Theoretical arrival time: when the bucket is full again.
    pub const TAT: &str = "tat";
    /// Incremented by one on every successful write (`RateLimitState`'s `version`).
    pub const VERSION: &str = "version";
    pub const LAST_REQUEST_AT: &str = "lastRequestAt";
    pub const UPDATED_AT: &str = "updatedAt";
    /// When the bucket last started draining from full (the start of the current "window").
    pub const WINDOW_START: &str = "windowStart";
    /// Admitted spends since `windowStart`.
    pub const REQUEST_COUNT: &str = "requestCount";
    /// Denials since `windowStart` (best effort: flushed with the next write).
    pub const THROTTLE_COUNT: &str = "throttleCount";
    /// First denial since `windowStart` (best effort, as `throttleCount`).
    pub const THROTTLED_AT: &str = "throttledAt";
    /// The limit's name and parameters at the last write, so the state view needs no config.
    pub const LIMIT_NAME: &str = "limitName";
    pub const BURST: &str = "burst";
    pub const COUNT: &str = "count";
    pub const PERIOD_NS: &str = "periodNs";
    /// The largest [`RefundId`](super::RefundId) applied: a refund's write requires a smaller one
    /// and sets its own, so it applies at most once however often it is sent.
    pub const REFUND_ID: &str = "refundId";
}

/// Where a bucket lives: table, key, and the names of its TAT and TTL attributes.
#[derive(Debug, Clone)]
pub struct Target {
    pub table: String,
    pub key: HashMap<String, AttributeValue>,
    pub tat_attr: String,
    /// Epoch-seconds TTL attribute; `None` to write no TTL.
    pub ttl_attr: Option<String>,
    /// How long past the moment the bucket is full again its item is kept.
    pub ttl_margin: Duration,
}

impl Target {
    /// A bucket on any table with a single string partition key, e.g. the counters table:
    /// `Target::new(&tables.counters, "key", "acme:tenantPerMinute", Some("itemTTL"), margin)`.
    pub fn new(
        table: &str,
        key_attr: &str,
        key: &str,
        ttl_attr: Option<&str>,
        ttl_margin: Duration,
    ) -> Self {
        Target {
            table: table.to_string(),
            key: HashMap::from([(key_attr.to_string(), AttributeValue::S(key.to_string()))]),
            tat_attr: attr::TAT.to_string(),
            ttl_attr: ttl_attr.map(str::to_string),
            ttl_margin,
        }
    }
}

/// Which condition a write bets on.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Case {
    /// Spend: the bucket is full (no TAT, or TAT ≤ now).
    Idle,
    /// Spend: the bucket is partly drained but still admits the cost.
    Draining,
    /// Refund: TAT − cost·EI is still ≥ now, so `tat = tat − inc`.
    RefundPartial,
    /// Refund: the refund fills the bucket, so `tat = now`.
    RefundToFull,
}

/// The `RateLimitState` fields written with the TAT. `None` for tables that keep only the TAT.
#[derive(Debug, Clone, Default)]
pub struct StateWrite {
    pub limit_name: Option<String>,
    /// Denials seen by this process since its last write to the bucket, and the first one's time.
    /// Added by a draining spend; dropped by an idle one (their window is over).
    pub pending_throttles: u64,
    pub first_throttle: Option<Timestamp>,
    /// This process has seen the item carry this write's rate and limit name ([`RateStamp`]), so a
    /// write that cannot create the item leaves them out: a hot bucket's draining spends then
    /// write 5 attributes and get 5 back, not 9 (decision 0603, "The rate stamp").
    pub stamp_known: bool,
}

/// The rate and limit name a bucket's item carries (`burst`, `count`, `periodNs`, `limitName`), so
/// the state view needs no limits file.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct RateStamp {
    pub rate: Rate,
    pub limit_name: Option<String>,
}

impl RateStamp {
    /// The stamp an item carries (`None`: none, or not a valid rate).
    pub fn of_item(item: Option<&Item>) -> Option<RateStamp> {
        let item = item?;
        let uint = |a: &str| num(item, a).and_then(|v| u64::try_from(v).ok());
        let rate = Rate::new(
            uint(attr::BURST)?,
            uint(attr::COUNT)?,
            Duration::from_nanos(uint(attr::PERIOD_NS)?),
        )
        .ok()?;
        let limit_name = match item.get(attr::LIMIT_NAME) {
            Some(AttributeValue::S(name)) => Some(name.clone()),
            _ => None,
        };
        Some(RateStamp { rate, limit_name })
    }

    pub fn matches(&self, rate: &Rate, limit_name: Option<&str>) -> bool {
        self.rate == *rate && self.limit_name.as_deref() == limit_name
    }
}

/// A spend or refund of `cost` at `now`, betting on one [`Case`].
#[derive(Debug, Clone)]
pub struct SpendPlan {
    pub rate: Rate,
    pub now: Timestamp,
    pub cost: u64,
    /// How far the write moves the TAT, in nanoseconds: `cost × EI`, or a refund's span
    /// ([`SpendPlan::refund_span`]).
    pub inc: i64,
    pub case: Case,
    pub state: Option<StateWrite>,
    /// A refund sent as itself again after a lost answer must not apply twice: its id, recorded
    /// by the write ([`attr::REFUND_ID`]). `None` where something else makes the write apply once
    /// (a lease's refund: the lease item's condition in the same transaction).
    pub refund_id: Option<RefundId>,
}

/// A refund's id. The bucket keeps the largest applied (`refundId`) and a refund's write requires
/// a smaller one, so a write resent after a lost answer fails its condition instead of refunding
/// again, and the old item it gets back tells: its own id there, it was applied. Ids only grow, so
/// no later write can make a resend apply (an id kept only as "the last one" could be overwritten
/// by another refund in between). A refund takes a new id only when no send of its old one can
/// still land (decision 0605).
#[derive(Debug, Clone, Copy, PartialEq, Eq, PartialOrd, Ord, Hash)]
pub struct RefundId(pub i128);

/// Random digits below the wall-clock part of a [`RefundId`].
pub(super) const REFUND_ID_SPREAD: i128 = 1_000_000_000;

impl RefundId {
    /// Wall-clock nanoseconds × 10⁹ plus 9 random digits: unique in practice, and a later refund
    /// mostly carries a larger id (one that does not is sent once more, [`RefundId::after`]). Real
    /// time on purpose: the id orders refunds, it decides nothing about the bucket.
    pub fn fresh() -> Self {
        let wall = std::time::SystemTime::now()
            .duration_since(std::time::UNIX_EPOCH)
            .map_or(0, |d| d.as_nanos());
        let wall = i128::try_from(wall).unwrap_or(0);
        let spread = i128::from(fastrand::u64(0..REFUND_ID_SPREAD as u64));
        RefundId(wall.saturating_mul(REFUND_ID_SPREAD).saturating_add(spread))
    }

    /// A fresh id above `stored`, for a refund that lost the order to a later one.
    pub fn after(stored: RefundId) -> Self {
        let fresh = RefundId::fresh();
        let next = stored
            .0
            .saturating_add(1 + fresh.0.rem_euclid(REFUND_ID_SPREAD));
        RefundId(fresh.0.max(next))
    }

    /// The id an item carries (`None`: no refund yet, or not a number).
    pub fn stored(item: Option<&Item>) -> Option<Self> {
        match item?.get(attr::REFUND_ID)? {
            AttributeValue::N(v) => v.trim().parse().ok().map(RefundId),
            _ => None,
        }
    }
}

/// What to do after a failed condition.
#[derive(Debug, Clone)]
pub enum Next {
    /// Decided from the old item: refused, nothing was written.
    Refused(Decision),
    /// The guess was wrong; send this plan instead (one more call, still no read).
    Retry(SpendPlan),
}

/// The stored TAT of an item, if any.
pub fn stored_tat(item: Option<&Item>, tat_attr: &str) -> Option<Timestamp> {
    item.and_then(|i| num(i, tat_attr))
        .map(Timestamp::from_nanos)
}

impl SpendPlan {
    /// A spend (`cost` ≥ 1), betting on the case the hint implies: a hint in the future means the
    /// bucket is draining; no hint or a past one means idle.
    pub fn spend(
        rate: Rate,
        now: Timestamp,
        cost: u64,
        hint: Option<Timestamp>,
    ) -> Result<Self, RateError> {
        gcra::spend(&rate, None, now, cost)?; // validates cost <= burst
        let case = match hint {
            Some(t) if t > now => Case::Draining,
            _ => Case::Idle,
        };
        Ok(SpendPlan::betting(rate, now, cost, case))
    }

    /// A refund, betting on the case the hint implies.
    pub fn refund(
        rate: Rate,
        now: Timestamp,
        cost: u64,
        hint: Option<Timestamp>,
    ) -> Result<Self, RateError> {
        gcra::refund(&rate, None, now, cost)?;
        let inc = gcra::increment_nanos(&rate, cost);
        Ok(SpendPlan::refund_by(rate, now, cost, inc, hint))
    }

    /// A refund of `span` of the TAT rather than whole tokens (a lease gives back only what the
    /// refill has not, decision 1501), betting on the case the hint implies. `span` > 0.
    pub fn refund_span(
        rate: Rate,
        now: Timestamp,
        span: Duration,
        hint: Option<Timestamp>,
    ) -> Self {
        let inc = crate::clock::duration_nanos(span).max(1);
        let ei = rate.emission_interval_nanos().max(1);
        SpendPlan::refund_by(rate, now, u64::try_from(inc / ei).unwrap_or(0), inc, hint)
    }

    pub(super) fn refund_by(
        rate: Rate,
        now: Timestamp,
        cost: u64,
        inc: i64,
        hint: Option<Timestamp>,
    ) -> Self {
        let case = match hint {
            Some(t)
                if t.as_nanos() > now.as_nanos()
                    && t.as_nanos() < now.as_nanos().saturating_add(inc) =>
            {
                Case::RefundToFull
            }
            _ => Case::RefundPartial,
        };
        SpendPlan {
            inc,
            ..SpendPlan::betting(rate, now, cost, case)
        }
    }

    pub(super) fn betting(rate: Rate, now: Timestamp, cost: u64, case: Case) -> Self {
        SpendPlan {
            rate,
            now,
            cost,
            inc: gcra::increment_nanos(&rate, cost),
            case,
            state: None,
            refund_id: None,
        }
    }

    pub fn with_state(mut self, state: StateWrite) -> Self {
        self.state = Some(state);
        self
    }

    /// Makes a refund's write apply at most once ([`RefundId`]).
    pub fn with_refund_id(mut self, id: RefundId) -> Self {
        self.refund_id = Some(id);
        self
    }

    /// Whether this write sets the item's [`RateStamp`]: every write with state, but those whose item
    /// is known to carry it already and which cannot create the item (every case but idle
    /// requires a stored TAT, so the item exists; an idle spend may create it, or recreate it
    /// after its TTL).
    pub fn writes_stamp(&self) -> bool {
        self.state
            .as_ref()
            .is_some_and(|s| !s.stamp_known || self.case == Case::Idle)
    }

    /// The stamp this write sets, if it sets one.
    pub fn stamp(&self) -> Option<RateStamp> {
        let state = self.state.as_ref().filter(|_| self.writes_stamp())?;
        Some(RateStamp {
            rate: self.rate,
            limit_name: state.limit_name.clone(),
        })
    }

    /// After a failed condition returned `old`: whether the item carries this write's stamp (the
    /// retry leaves it out only then).
    pub fn learn_stamp(&mut self, old: Option<&RateStamp>) {
        let rate = self.rate;
        if let Some(state) = self.state.as_mut() {
            state.stamp_known = old.is_some_and(|s| s.matches(&rate, state.limit_name.as_deref()));
        }
    }

    pub fn is_refund(&self) -> bool {
        matches!(self.case, Case::RefundPartial | Case::RefundToFull)
    }

    /// This refund's decision against the TAT `old`.
    pub(super) fn give_back(&self, old: Option<Timestamp>) -> Decision {
        let span = Duration::from_nanos(u64::try_from(self.inc).unwrap_or(0));
        gcra::refund_span(&self.rate, old, self.now, span)
    }

    /// The decision for a write that succeeded. `new_tat` is the TAT DynamoDB returned
    /// (`UpdateItem` with `UPDATED_NEW`); inside a transaction nothing is returned, so pass `None`
    /// and the decision of a draining spend is computed from `hint` (exact when no other writer
    /// touched the bucket since the hint was taken; the admission itself is exact regardless).
    pub fn admitted(&self, new_tat: Option<Timestamp>, hint: Option<Timestamp>) -> Decision {
        let inc = self.inc;
        let now = self.now.as_nanos();
        let old = match self.case {
            Case::Idle => None,
            Case::Draining => {
                let limit = gcra::admit_limit(&self.rate, self.now, self.cost).as_nanos();
                let old = match new_tat {
                    Some(t) => t.as_nanos().saturating_sub(inc),
                    None => hint.map_or(now.saturating_add(1), |h| h.as_nanos()),
                };
                Some(Timestamp::from_nanos(old.clamp(
                    now.saturating_add(1),
                    limit.max(now.saturating_add(1)),
                )))
            }
            Case::RefundPartial => {
                let old = match new_tat {
                    Some(t) => t.as_nanos().saturating_add(inc),
                    None => hint.map_or(now.saturating_add(inc), |h| h.as_nanos()),
                };
                Some(Timestamp::from_nanos(old.max(now.saturating_add(inc))))
            }
            Case::RefundToFull => Some(Timestamp::from_nanos(now.saturating_add(1))),
        };
        // Cost was validated when the plan was made, so the arithmetic cannot fail.
        let d = if self.is_refund() {
            Ok(self.give_back(old))
        } else {
            gcra::spend(&self.rate, old, self.now, self.cost)
        };
        d.unwrap_or(Decision {
            allowed: true,
            remaining: 0,
            retry_in: Duration::ZERO,
            reset_in: Duration::ZERO,
            new_tat: self.now,
        })
    }

    /// The decision of a refund found applied (or counted as applied) by a failed condition: the
    /// bucket as its stored TAT `stored` leaves it, whichever case this send bet on.
    pub fn applied_as_stored(&self, stored: Option<Timestamp>) -> Decision {
        SpendPlan {
            case: Case::RefundPartial,
            ..self.clone()
        }
        .admitted(stored, None)
    }

    /// Decides from the old item a failed condition returned (`None`: there was no item).
    pub fn on_condition_failed(&self, old_item: Option<&Item>, tat_attr: &str) -> Next {
        let old = stored_tat(old_item, tat_attr);
        let now = self.now.as_nanos();
        if self.is_refund() {
            let d = self.give_back(old);
            if !d.allowed {
                return Next::Refused(d);
            }
            let case = match old {
                Some(t) if t.as_nanos() < now.saturating_add(self.inc) => Case::RefundToFull,
                _ => Case::RefundPartial,
            };
            return Next::Retry(SpendPlan {
                case,
                ..self.clone()
            });
        }
        match gcra::spend(&self.rate, old, self.now, self.cost) {
            Ok(d) if !d.allowed => Next::Refused(d),
            _ => {
                let case = match old {
                    Some(t) if t.as_nanos() > now => Case::Draining,
                    _ => Case::Idle,
                };
                Next::Retry(SpendPlan {
                    case,
                    ..self.clone()
                })
            }
        }
    }
}

#[cfg(test)]
pub(super) mod tests {
    use super::*;
    use crate::dynamo::item::n;

    const S: i64 = 1_000_000_000;

    pub(in crate::gcra_write) fn rate() -> Rate {
        Rate::new(10, 1, Duration::from_secs(1)).unwrap()
    }

    fn item(tat: i64) -> HashMap<String, AttributeValue> {
        HashMap::from([(attr::TAT.to_string(), n(tat))])
    }

    #[test]
    fn the_hint_picks_the_case() {
        let now = Timestamp::from_secs(100);
        assert_eq!(
            SpendPlan::spend(rate(), now, 1, None).unwrap().case,
            Case::Idle
        );
        assert_eq!(
            SpendPlan::spend(rate(), now, 1, Some(Timestamp::from_secs(99)))
                .unwrap()
                .case,
            Case::Idle
        );
        assert_eq!(
            SpendPlan::spend(rate(), now, 1, Some(Timestamp::from_secs(101)))
                .unwrap()
                .case,
            Case::Draining
        );
        assert!(SpendPlan::spend(rate(), now, 11, None).is_err());
    }

    #[test]
    fn a_failed_condition_decides_or_retries_from_the_old_item() {
        let now = Timestamp::from_secs(1_000);
        let plan = SpendPlan::spend(rate(), now, 1, None).unwrap();
        // Draining but admissible: retry as draining.
        match plan.on_condition_failed(Some(&item(1_005 * S)), attr::TAT) {
            Next::Retry(p) => assert_eq!(p.case, Case::Draining),
            other => panic!("{other:?}"),
        }
        // Empty: refused with Boulder's numbers, no further call.
        match plan.on_condition_failed(Some(&item(1_010 * S)), attr::TAT) {
            Next::Refused(d) => {
                assert!(!d.allowed);
                assert_eq!(d.retry_in, Duration::from_secs(1));
                assert_eq!(d.reset_in, Duration::from_secs(10));
            }
            other => panic!("{other:?}"),
        }
        // A draining bet on a bucket that has since filled: retry as idle.
        let draining = SpendPlan::spend(rate(), now, 1, Some(Timestamp::from_secs(1_001))).unwrap();
        match draining.on_condition_failed(Some(&item(999 * S)), attr::TAT) {
            Next::Retry(p) => assert_eq!(p.case, Case::Idle),
            other => panic!("{other:?}"),
        }
        match draining.on_condition_failed(None, attr::TAT) {
            Next::Retry(p) => assert_eq!(p.case, Case::Idle),
            other => panic!("{other:?}"),
        }
    }

    #[test]
    fn admitted_decisions_match_the_pure_arithmetic() {
        let now = Timestamp::from_secs(1_000);
        let idle = SpendPlan::spend(rate(), now, 1, None).unwrap();
        let d = idle.admitted(None, None);
        assert_eq!((d.remaining, d.reset_in), (9, Duration::from_secs(1)));
        let draining = SpendPlan::spend(rate(), now, 9, Some(Timestamp::from_secs(1_001))).unwrap();
        let d = draining.admitted(Some(Timestamp::from_secs(1_010)), None);
        assert_eq!(
            (d.remaining, d.retry_in, d.reset_in),
            (0, Duration::from_secs(9), Duration::from_secs(10))
        );
        let refund = SpendPlan::refund(rate(), now, 2, Some(Timestamp::from_secs(1_003))).unwrap();
        assert_eq!(refund.case, Case::RefundPartial);
        let d = refund.admitted(Some(Timestamp::from_secs(1_001)), None);
        assert_eq!(d.remaining, 9);
        let to_full = SpendPlan::refund(rate(), now, 5, Some(Timestamp::from_secs(1_003))).unwrap();
        assert_eq!(to_full.case, Case::RefundToFull);
        assert_eq!(to_full.admitted(None, None).remaining, 10);
        match to_full.on_condition_failed(None, attr::TAT) {
            Next::Refused(d) => assert!(!d.allowed && d.remaining == 10),
            other => panic!("{other:?}"),
        }
    }
}
