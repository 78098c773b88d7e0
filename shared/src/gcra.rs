//! GCRA (seed 004): pure arithmetic over a bucket's theoretical arrival time (TAT), with no storage
//! and no clock of its own, so it is tested with exact instants through scripted sequences.
//!
//! Terms (seed 004): the *emission interval* `EI = period / count` is the steady-state spacing of
//! requests; the *burst offset* `EI * burst` is how long an empty bucket takes to fill; the *cost
//! increment* is `cost * EI`. A TAT in the past (or none) means a full bucket.
//!
//! The arithmetic follows Boulder's `ratelimits` so results match its worked cases exactly
//! (see the tests), including its definition of `retry_in` on an allowed spend.

use std::time::Duration;

use serde::Serialize;

use crate::clock::{duration_nanos, Timestamp};

/// A limit's parameters: `burst` tokens of capacity, refilled at `count` per `period`.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash, Serialize)]
pub struct Rate {
    pub burst: u64,
    pub count: u64,
    #[serde(with = "duration_ms")]
    pub period: Duration,
}

mod duration_ms {
    use serde::Serializer;
    use std::time::Duration;
    pub fn serialize<S: Serializer>(d: &Duration, s: S) -> Result<S::Ok, S::Error> {
        s.serialize_u128(d.as_millis())
    }
}

#[derive(Debug, Clone, Copy, PartialEq, Eq, thiserror::Error)]
pub enum RateError {
    #[error("burst must be at least 1")]
    ZeroBurst,
    #[error("count must be at least 1")]
    ZeroCount,
    #[error("period must be longer than zero")]
    ZeroPeriod,
    #[error("period / count is shorter than a nanosecond")]
    TooFast,
    #[error("cost {cost} exceeds the burst of {burst}")]
    CostOverBurst { cost: u64, burst: u64 },
}

impl Rate {
    /// Validates the parameters (a zero anywhere would divide by zero or never admit).
    pub fn new(burst: u64, count: u64, period: Duration) -> Result<Self, RateError> {
        let rate = Rate {
            burst,
            count,
            period,
        };
        if burst == 0 {
            return Err(RateError::ZeroBurst);
        }
        if count == 0 {
            return Err(RateError::ZeroCount);
        }
        if period.is_zero() {
            return Err(RateError::ZeroPeriod);
        }
        if rate.emission_interval_nanos() == 0 {
            return Err(RateError::TooFast);
        }
        Ok(rate)
    }

    /// `count` per minute with a burst of the same size: the per-minute limits of seed 003.
    pub fn per_minute(count: u64) -> Result<Self, RateError> {
        Rate::new(count, count, Duration::from_secs(60))
    }

    pub fn emission_interval_nanos(&self) -> i64 {
        duration_nanos(self.period) / i64::try_from(self.count).unwrap_or(i64::MAX)
    }

    pub fn emission_interval(&self) -> Duration {
        Duration::from_nanos(self.emission_interval_nanos().max(0) as u64)
    }

    pub fn burst_offset_nanos(&self) -> i64 {
        self.emission_interval_nanos()
            .saturating_mul(i64::try_from(self.burst).unwrap_or(i64::MAX))
    }

    fn increment(&self, cost: u64) -> i64 {
        self.emission_interval_nanos()
            .saturating_mul(i64::try_from(cost).unwrap_or(i64::MAX))
    }

    fn check_cost(&self, cost: u64) -> Result<(), RateError> {
        if cost > self.burst {
            Err(RateError::CostOverBurst {
                cost,
                burst: self.burst,
            })
        } else {
            Ok(())
        }
    }

    /// Tokens per second, for state views.
    pub fn refill_per_sec(&self) -> f64 {
        self.count as f64 / self.period.as_secs_f64()
    }
}

/// The outcome of a spend, check or refund.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize)]
#[serde(rename_all = "camelCase")]
pub struct Decision {
    pub allowed: bool,
    /// Whole tokens left after this decision.
    pub remaining: u64,
    /// How long until a request of the same cost could be allowed (0 when it could be now).
    #[serde(with = "duration_ms")]
    pub retry_in: Duration,
    /// How long until the bucket is full again.
    #[serde(with = "duration_ms")]
    pub reset_in: Duration,
    /// The TAT to store when `allowed` (unchanged on a denial; equal to the old one for a check).
    #[serde(skip)]
    pub new_tat: Timestamp,
}

fn nanos_to_duration(n: i64) -> Duration {
    Duration::from_nanos(n.max(0) as u64)
}

fn whole_tokens(span_nanos: i64, ei: i64) -> u64 {
    if span_nanos <= 0 || ei <= 0 {
        0
    } else {
        (span_nanos / ei) as u64
    }
}

/// Decides a spend of `cost` (0 = a check that changes nothing) against the stored TAT.
pub fn spend(
    rate: &Rate,
    stored_tat: Option<Timestamp>,
    now: Timestamp,
    cost: u64,
) -> Result<Decision, RateError> {
    rate.check_cost(cost)?;
    let ei = rate.emission_interval_nanos();
    let offset = rate.burst_offset_nanos();
    let now_n = now.as_nanos();
    let tat = stored_tat.map_or(now_n, |t| t.as_nanos().max(now_n));
    let new_tat = tat.saturating_add(rate.increment(cost));
    let diff = now_n - (new_tat - offset);
    if diff < 0 {
        return Ok(Decision {
            allowed: false,
            remaining: whole_tokens(now_n - (tat - offset), ei),
            retry_in: nanos_to_duration(-diff),
            reset_in: nanos_to_duration(tat - now_n),
            new_tat: Timestamp::from_nanos(tat),
        });
    }
    let inc = rate.increment(cost);
    Ok(Decision {
        allowed: true,
        remaining: whole_tokens(diff, ei),
        retry_in: if diff < inc {
            nanos_to_duration(inc - diff)
        } else {
            Duration::ZERO
        },
        reset_in: nanos_to_duration(new_tat - now_n),
        new_tat: Timestamp::from_nanos(new_tat),
    })
}

/// Gives `cost` tokens back. Refused (not allowed) on a full bucket; never fills above the burst.
pub fn refund(
    rate: &Rate,
    stored_tat: Option<Timestamp>,
    now: Timestamp,
    cost: u64,
) -> Result<Decision, RateError> {
    rate.check_cost(cost)?;
    let ei = rate.emission_interval_nanos();
    let offset = rate.burst_offset_nanos();
    let now_n = now.as_nanos();
    let tat = stored_tat.map_or(now_n, |t| t.as_nanos().max(now_n));
    if tat <= now_n {
        return Ok(Decision {
            allowed: false,
            remaining: rate.burst,
            retry_in: Duration::ZERO,
            reset_in: Duration::ZERO,
            new_tat: Timestamp::from_nanos(tat),
        });
    }
    let new_tat = (tat - rate.increment(cost)).max(now_n);
    let diff = now_n - (new_tat - offset);
    Ok(Decision {
        allowed: true,
        remaining: whole_tokens(diff, ei).min(rate.burst),
        retry_in: Duration::ZERO,
        reset_in: nanos_to_duration(new_tat - now_n),
        new_tat: Timestamp::from_nanos(new_tat),
    })
}

/// The largest stored TAT at which a spend of `cost` is still admitted at `now`:
/// `max(now, tat) + cost*EI - burstOffset <= now`  ⟺  `tat <= now + burstOffset - cost*EI`
/// (for `cost <= burst`, a TAT at or before `now` always qualifies). Storage uses it as the
/// condition of a single conditional write, so admission needs no read.
pub fn admit_limit(rate: &Rate, now: Timestamp, cost: u64) -> Timestamp {
    Timestamp::from_nanos(now.as_nanos() + rate.burst_offset_nanos() - rate.increment(cost))
}

/// The cost increment as a duration, for `SET tat = tat + :inc` style updates.
pub fn increment_nanos(rate: &Rate, cost: u64) -> i64 {
    rate.increment(cost)
}

#[cfg(test)]
mod tests {
    use super::*;

    const S: i64 = 1_000_000_000;

    fn t(nanos: i64) -> Timestamp {
        Timestamp::from_nanos(nanos)
    }
    fn ms(n: u64) -> Duration {
        Duration::from_millis(n)
    }

    /// The worked cases in the notes: burst 10, count 1, period 1 s, fresh bucket.
    #[test]
    fn boulder_worked_cases() {
        let rate = Rate::new(10, 1, Duration::from_secs(1)).unwrap();
        let now = t(1_000 * S);
        let d = spend(&rate, None, now, 1).unwrap();
        assert!(d.allowed);
        assert_eq!((d.remaining, d.reset_in, d.retry_in), (9, ms(1000), ms(0)));

        let d = spend(&rate, Some(d.new_tat), now, 9).unwrap();
        assert!(d.allowed);
        assert_eq!(
            (d.remaining, d.retry_in, d.reset_in),
            (0, ms(9000), ms(10_000))
        );

        let tat = d.new_tat;
        let d = spend(&rate, Some(tat), now, 1).unwrap();
        assert!(!d.allowed);
        assert_eq!(
            (d.remaining, d.retry_in, d.reset_in),
            (0, ms(1000), ms(10_000))
        );
        assert_eq!(d.new_tat, tat, "a denial leaves the TAT as it was");

        let later = t(1_001 * S);
        let d = spend(&rate, Some(tat), later, 0).unwrap();
        assert!(d.allowed);
        assert_eq!(d.remaining, 1);
        assert_eq!(d.new_tat, tat, "a check spends nothing");
    }

    /// Seed 004's example: 20 per second with a burst of 20; 19 left after the first request,
    /// full again in 50 ms; the 21st request in the same instant is refused for 50 ms.
    #[test]
    fn seed_004_example() {
        let rate = Rate::new(20, 20, Duration::from_secs(1)).unwrap();
        let now = t(5_000 * S);
        let first = spend(&rate, None, now, 1).unwrap();
        assert_eq!(
            (first.allowed, first.remaining, first.reset_in),
            (true, 19, ms(50))
        );
        let mut tat = first.new_tat;
        for _ in 0..19 {
            let d = spend(&rate, Some(tat), now, 1).unwrap();
            assert!(d.allowed);
            tat = d.new_tat;
        }
        let denied = spend(&rate, Some(tat), now, 1).unwrap();
        assert!(!denied.allowed);
        assert_eq!(denied.retry_in, ms(50));
        assert_eq!(
            spend(&rate, None, now, 21).unwrap_err(),
            RateError::CostOverBurst {
                cost: 21,
                burst: 20
            }
        );
        // 5 ms later the bucket has not yet earned a token; 50 ms later it has one.
        assert!(!spend(&rate, Some(tat), now.plus(ms(5)), 1).unwrap().allowed);
        assert!(
            spend(&rate, Some(tat), now.plus(ms(50)), 1)
                .unwrap()
                .allowed
        );
        // An override doubling the count halves the wait.
        let fast = Rate::new(40, 40, Duration::from_secs(1)).unwrap();
        let mut tat = None;
        for _ in 0..40 {
            tat = Some(spend(&fast, tat, now, 1).unwrap().new_tat);
        }
        assert_eq!(spend(&fast, tat, now, 1).unwrap().retry_in, ms(25));
    }

    #[test]
    fn refunds_never_exceed_the_burst_and_are_refused_when_full() {
        let rate = Rate::new(10, 1, Duration::from_secs(1)).unwrap();
        let now = t(100 * S);
        let full = refund(&rate, None, now, 1).unwrap();
        assert!(!full.allowed);
        let spent = spend(&rate, None, now, 3).unwrap();
        assert_eq!(spent.remaining, 7);
        let back = refund(&rate, Some(spent.new_tat), now, 2).unwrap();
        assert!(back.allowed);
        assert_eq!(back.remaining, 9);
        let over = refund(&rate, Some(back.new_tat), now, 5).unwrap();
        assert!(over.allowed);
        assert_eq!(over.remaining, 10);
        assert_eq!(over.new_tat, now, "a refund never moves the TAT before now");
    }

    #[test]
    fn admit_limit_agrees_with_spend() {
        let rate = Rate::new(5, 5, Duration::from_secs(1)).unwrap();
        let now = t(10 * S);
        let limit = admit_limit(&rate, now, 2);
        assert!(spend(&rate, Some(limit), now, 2).unwrap().allowed);
        assert!(
            !spend(&rate, Some(t(limit.as_nanos() + 1)), now, 2)
                .unwrap()
                .allowed
        );
        assert_eq!(increment_nanos(&rate, 2), 400_000_000);
    }

    #[test]
    fn bad_parameters_are_refused() {
        assert_eq!(Rate::new(0, 1, ms(1)).unwrap_err(), RateError::ZeroBurst);
        assert_eq!(Rate::new(1, 0, ms(1)).unwrap_err(), RateError::ZeroCount);
        assert_eq!(
            Rate::new(1, 1, Duration::ZERO).unwrap_err(),
            RateError::ZeroPeriod
        );
        assert_eq!(
            Rate::new(1, 10, Duration::from_nanos(5)).unwrap_err(),
            RateError::TooFast
        );
        assert_eq!(
            Rate::per_minute(60).unwrap().emission_interval(),
            Duration::from_secs(1)
        );
    }
}
