//! GCRA: pure arithmetic over a bucket's theoretical arrival time (TAT), with no storage
//! and no clock of its own, so it is tested with exact instants through scripted sequences.
//!
//! Terms (Boulder's key-value rate limits): the *emission interval* `EI = period / count` is the
//! steady-state spacing of requests; the *burst offset* `EI * burst` is how long an empty bucket
//! takes to fill; the *cost increment* is `cost * EI`. A TAT in the past (or none) means a full
//! bucket.
//!
//! The arithmetic follows Boulder's `ratelimits` so results match its worked cases exactly
//! (see the tests), including its definition of `retry_in` on an allowed spend.

use std::time::Duration;

use serde::Serialize;

use crate::clock::Timestamp;

/// The longest burst offset (`period / count × burst`, the time an empty bucket takes to fill) a
/// [`Rate`] may have: 100 years (36,525 days). Times are `i64` nanoseconds (until 2262), so with this
/// bound every TAT, admit limit and TTL computed before the year 2162 is exact; longer limits are
/// refused by [`Rate::new`] and so by the limits file loader (decision 0600).
pub const MAX_BURST_OFFSET: Duration = Duration::from_secs(36_525 * 86_400);

/// A limit's parameters: `burst` tokens of capacity, refilled at `count` per `period`.
///
/// Build it with [`Rate::new`] (or [`Rate::per_minute`]), which refuses what the arithmetic cannot
/// represent. The arithmetic below never wraps or panics even on a rate built otherwise: it works
/// in `i128` and saturates only where a result is stored as a [`Timestamp`].
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash, Serialize)]
#[non_exhaustive]
pub struct Rate {
    pub burst: u64,
    pub count: u64,
    #[serde(with = "duration_ms")]
    pub period: Duration,
}

fn retry_after<S: serde::Serializer>(d: &Duration, s: S) -> Result<S::Ok, S::Error> {
    s.serialize_f64(crate::clock::retry_after_secs(*d))
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
    #[error(
        "period / count × burst is {} days; the longest limit allowed is 100 years (36525 days)",
        .days
    )]
    TooSlow { days: u128 },
    #[error("cost {cost} exceeds the burst of {burst}")]
    CostOverBurst { cost: u64, burst: u64 },
}

/// `i128` nanoseconds back to an `i64`, saturating at the ends of the time type.
fn clamp_i64(v: i128) -> i64 {
    v.clamp(i128::from(i64::MIN), i128::from(i64::MAX)) as i64
}

impl Rate {
    /// Validates the parameters: a zero anywhere would divide by zero or never admit, and a burst
    /// offset longer than [`MAX_BURST_OFFSET`] could not be represented in the time type.
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
        if rate.ei() == 0 {
            return Err(RateError::TooFast);
        }
        let offset = rate.ei() * u128::from(burst);
        if offset > MAX_BURST_OFFSET.as_nanos() {
            return Err(RateError::TooSlow {
                days: offset / 86_400_000_000_000,
            });
        }
        Ok(rate)
    }

    /// `count` per minute with a burst of the same size: the per-minute WebSocket connection
    /// limits.
    pub fn per_minute(count: u64) -> Result<Self, RateError> {
        Rate::new(count, count, Duration::from_secs(60))
    }

    /// The emission interval in nanoseconds, exact (a period may exceed an `i64` of nanoseconds).
    fn ei(&self) -> u128 {
        self.period.as_nanos() / u128::from(self.count.max(1))
    }

    /// The burst offset in nanoseconds, exact: at most 2^128 / 2^64 × 2^64, so no overflow.
    fn offset(&self) -> i128 {
        i128::try_from(self.ei().saturating_mul(u128::from(self.burst))).unwrap_or(i128::MAX)
    }

    /// `cost × EI` in nanoseconds, exact.
    fn inc(&self, cost: u64) -> i128 {
        i128::try_from(self.ei().saturating_mul(u128::from(cost))).unwrap_or(i128::MAX)
    }

    /// The emission interval in nanoseconds (saturating at `i64::MAX` for an unvalidated rate).
    pub fn emission_interval_nanos(&self) -> i64 {
        i64::try_from(self.ei()).unwrap_or(i64::MAX)
    }

    pub fn emission_interval(&self) -> Duration {
        Duration::from_nanos(u64::try_from(self.ei()).unwrap_or(u64::MAX))
    }

    /// The burst offset in nanoseconds (saturating at `i64::MAX` for an unvalidated rate; a rate
    /// from [`Rate::new`] is at most [`MAX_BURST_OFFSET`]).
    pub fn burst_offset_nanos(&self) -> i64 {
        clamp_i64(self.offset())
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
    /// How long until a request of the same cost could be allowed (0 when it could be now); in
    /// JSON `retryAfter`, in seconds, as HTTP's `Retry-After`.
    #[serde(rename = "retryAfter", serialize_with = "retry_after")]
    pub retry_in: Duration,
    /// How long until the bucket is full again (`resetMs` in JSON).
    #[serde(rename = "resetMs", with = "duration_ms")]
    pub reset_in: Duration,
    /// The TAT to store when `allowed` (unchanged on a denial; equal to the old one for a check).
    /// Saturates at [`Timestamp::MAX`] when the exact TAT lies past the end of the time type.
    #[serde(skip)]
    pub new_tat: Timestamp,
}

fn nanos_to_duration(n: i128) -> Duration {
    if n <= 0 {
        return Duration::ZERO;
    }
    let n = n as u128;
    Duration::new(
        u64::try_from(n / 1_000_000_000).unwrap_or(u64::MAX),
        (n % 1_000_000_000) as u32,
    )
}

fn whole_tokens(span_nanos: i128, ei: u128) -> u64 {
    if span_nanos <= 0 || ei == 0 {
        0
    } else {
        u64::try_from(span_nanos as u128 / ei).unwrap_or(u64::MAX)
    }
}

fn ts(nanos: i128) -> Timestamp {
    Timestamp::from_nanos(clamp_i64(nanos))
}

/// Decides a spend of `cost` (0 = a check that changes nothing) against the stored TAT.
pub fn spend(
    rate: &Rate,
    stored_tat: Option<Timestamp>,
    now: Timestamp,
    cost: u64,
) -> Result<Decision, RateError> {
    rate.check_cost(cost)?;
    let ei = rate.ei();
    let offset = rate.offset();
    let inc = rate.inc(cost);
    let now_n = i128::from(now.as_nanos());
    let tat = stored_tat.map_or(now_n, |t| i128::from(t.as_nanos()).max(now_n));
    // Saturating even in i128: an unvalidated rate's offset or increment may be near i128::MAX.
    let new_tat = tat.saturating_add(inc);
    let diff = now_n.saturating_sub(new_tat.saturating_sub(offset));
    if diff < 0 {
        return Ok(Decision {
            allowed: false,
            remaining: whole_tokens(now_n.saturating_sub(tat.saturating_sub(offset)), ei),
            retry_in: nanos_to_duration(diff.saturating_neg()),
            reset_in: nanos_to_duration(tat - now_n),
            new_tat: ts(tat),
        });
    }
    Ok(Decision {
        allowed: true,
        remaining: whole_tokens(diff, ei),
        retry_in: if diff < inc {
            nanos_to_duration(inc.saturating_sub(diff))
        } else {
            Duration::ZERO
        },
        reset_in: nanos_to_duration(new_tat - now_n),
        new_tat: ts(new_tat),
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
    Ok(give_back(rate, stored_tat, now, rate.inc(cost)))
}

/// Gives back `span` of the TAT rather than whole tokens: a lease refunds only the part of its
/// tokens the refill has not already returned (decision 1501), which is rarely a whole number.
/// Refused on a full bucket; never fills above the burst.
pub fn refund_span(
    rate: &Rate,
    stored_tat: Option<Timestamp>,
    now: Timestamp,
    span: Duration,
) -> Decision {
    let span = i128::try_from(span.as_nanos()).unwrap_or(i128::MAX);
    give_back(rate, stored_tat, now, span)
}

fn give_back(rate: &Rate, stored_tat: Option<Timestamp>, now: Timestamp, span: i128) -> Decision {
    let ei = rate.ei();
    let offset = rate.offset();
    let now_n = i128::from(now.as_nanos());
    let tat = stored_tat.map_or(now_n, |t| i128::from(t.as_nanos()).max(now_n));
    if tat <= now_n {
        return Decision {
            allowed: false,
            remaining: rate.burst,
            retry_in: Duration::ZERO,
            reset_in: Duration::ZERO,
            new_tat: ts(tat),
        };
    }
    let new_tat = tat.saturating_sub(span).max(now_n);
    let diff = now_n.saturating_sub(new_tat.saturating_sub(offset));
    Decision {
        allowed: true,
        remaining: whole_tokens(diff, ei).min(rate.burst),
        retry_in: Duration::ZERO,
        reset_in: nanos_to_duration(new_tat - now_n),
        new_tat: ts(new_tat),
    }
}

/// The largest stored TAT at which a spend of `cost` is still admitted at `now`:
/// `max(now, tat) + cost*EI - burstOffset <= now`  ⟺  `tat <= now + burstOffset - cost*EI`
/// (for `cost <= burst`, a TAT at or before `now` always qualifies). Storage uses it as the
/// condition of a single conditional write, so admission needs no read. Saturates at
/// [`Timestamp::MAX`]: when the exact limit lies beyond it, every storable TAT qualifies.
pub fn admit_limit(rate: &Rate, now: Timestamp, cost: u64) -> Timestamp {
    ts(i128::from(now.as_nanos())
        .saturating_add(rate.offset())
        .saturating_sub(rate.inc(cost)))
}

/// The cost increment as a duration, for `SET tat = tat + :inc` style updates (saturating at
/// `i64::MAX`; at most [`MAX_BURST_OFFSET`] for a rate from [`Rate::new`] and cost ≤ burst).
pub fn increment_nanos(rate: &Rate, cost: u64) -> i64 {
    clamp_i64(rate.inc(cost))
}

#[cfg(test)]
mod tests;

/// Property tests (docs/testing.md): any parameters, instants and costs.
#[cfg(test)]
mod fuzz_tests;
