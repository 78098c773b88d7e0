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

    /// Boulder's documented example: 20 per second with a burst of 20; 19 left after the first
    /// request, full again in 50 ms; the 21st request in the same instant is refused for 50 ms.
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
    fn a_span_refund_gives_back_time_not_tokens() {
        let rate = Rate::new(10, 10, Duration::from_secs(1)).unwrap();
        let now = t(100 * S);
        let spent = spend(&rate, None, now, 6).unwrap();
        let back = refund_span(&rate, Some(spent.new_tat), now, ms(250));
        assert_eq!(
            (back.allowed, back.remaining),
            (true, 6),
            "2.5 tokens back: 6.5 left"
        );
        assert_eq!(back.new_tat, now.plus(ms(350)));
        assert_eq!(
            refund_span(&rate, Some(back.new_tat), now, ms(1_000)).new_tat,
            now
        );
        assert!(
            !refund_span(&rate, Some(now), now, ms(1)).allowed,
            "full: nothing to give"
        );
        assert_eq!(refund(&rate, Some(spent.new_tat), now, 2).unwrap(), {
            refund_span(&rate, Some(spent.new_tat), now, ms(200))
        });
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

    /// `burst: 200000, count: 1, period: 24h` has a burst offset of 547 years,
    /// beyond an i64 of nanoseconds. Whatever built the rate, the arithmetic must neither wrap nor
    /// panic, and the answers must be the exact ones.
    #[test]
    fn a_very_slow_limit_never_wraps() {
        let day = Duration::from_secs(86_400);
        let rate = Rate {
            burst: 200_000,
            count: 1,
            period: day,
        };
        let now = t(1_795_000_000 * S); // November 2026
                                        // Any stored TAT admits one more request: the admit limit is past every representable time.
        assert_eq!(admit_limit(&rate, now, 1), Timestamp::MAX);
        let tat = now.plus(day * 10);
        let d = spend(&rate, Some(tat), now, 1).unwrap();
        assert!(d.allowed, "{d:?}");
        assert_eq!(d.remaining, 200_000 - 11);
        assert_eq!((d.retry_in, d.reset_in), (Duration::ZERO, day * 11));
        assert_eq!(d.new_tat, now.plus(day * 11));
        let back = refund(&rate, Some(d.new_tat), now, 5).unwrap();
        assert_eq!((back.allowed, back.remaining), (true, 200_000 - 11 + 5));
    }

    /// Instants near the end of the time type: answers stay exact, stored TATs saturate, and the
    /// admit limit never wraps below `now`.
    #[test]
    fn extreme_instants_never_wrap() {
        let rate = Rate::new(10, 1, Duration::from_secs(1)).unwrap();
        let now = t(i64::MAX - S / 2);
        let d = spend(&rate, None, now, 1).unwrap();
        assert!(d.allowed);
        assert_eq!((d.remaining, d.reset_in), (9, ms(1000)));
        assert_eq!(
            d.new_tat,
            Timestamp::MAX,
            "the exact TAT is past the end: saturated"
        );
        assert_eq!(admit_limit(&rate, now, 1), Timestamp::MAX);
        let d = spend(&rate, Some(Timestamp::MAX), now, 10).unwrap();
        assert!(!d.allowed);
        assert_eq!(d.reset_in, ms(500));
        let back = refund(&rate, Some(Timestamp::MAX), now, 10).unwrap();
        assert_eq!(
            (back.allowed, back.remaining, back.new_tat),
            (true, 10, now)
        );
        // And at the start of the type: nothing below MIN, no wrap to the far future.
        let early = Timestamp::MIN;
        assert_eq!(admit_limit(&rate, early, 10), early);
        let d = spend(&rate, Some(early), early, 10).unwrap();
        assert_eq!((d.allowed, d.remaining), (true, 0));
        assert_eq!(d.new_tat, t(i64::MIN + 10 * S));
    }

    /// Found by `fuzz_gcra_arithmetic` (shrunk case): a rate built without `Rate::new`, with a
    /// burst offset beyond even an i128 of nanoseconds, overflowed the refund's arithmetic.
    #[test]
    fn an_unvalidated_extreme_rate_never_panics() {
        let rate = Rate {
            burst: u64::MAX,
            count: 1,
            period: Duration::from_nanos(9_223_372_036_854_775_809),
        };
        let now = t(-3_929_752_072_655_343_309);
        let d = refund(&rate, Some(t(0)), now, 0).unwrap();
        assert!(d.allowed, "{d:?}");
        assert!(
            !spend(&rate, Some(t(0)), now, u64::MAX).unwrap().allowed,
            "not yet full"
        );
        assert_eq!(admit_limit(&rate, now, 0), Timestamp::MAX);
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
        let day = Duration::from_secs(86_400);
        assert_eq!(
            Rate::new(200_000, 1, day).unwrap_err(),
            RateError::TooSlow { days: 200_000 }
        );
        assert!(Rate::new(36_525, 1, day).is_ok(), "exactly 100 years");
        assert!(Rate::new(36_526, 1, day).is_err());
        // A period longer than an i64 of nanoseconds is fine when period / count × burst fits.
        let long = Rate::new(1, 1_000, day * 365_000).unwrap();
        assert_eq!(long.emission_interval(), day * 365);
        assert_eq!(
            Rate::per_minute(60).unwrap().emission_interval(),
            Duration::from_secs(1)
        );
    }
}

/// Property tests (docs/testing.md): any parameters, instants and costs.
#[cfg(test)]
mod fuzz_tests {
    use super::*;
    use proptest::prelude::*;

    fn big_or_small() -> impl Strategy<Value = u64> {
        prop_oneof![1u64..=1_000, any::<u64>(), Just(u64::MAX), Just(0)]
    }

    fn instant() -> impl Strategy<Value = i64> {
        prop_oneof![
            any::<i64>(),
            Just(i64::MAX),
            Just(i64::MIN),
            (1_700_000_000_000_000_000i64..1_900_000_000_000_000_000),
        ]
    }

    proptest! {
        #![proptest_config(crate::fuzz::config(1))]

        /// `fuzz_gcra_arithmetic`: a valid rate's spends, refunds and admit limits never panic or
        /// wrap; the admit limit (the conditional write) agrees exactly with `spend`; an allowed
        /// spend leaves at most `burst - cost` tokens; a refused rate is a typed error.
        #[test]
        fn fuzz_gcra_arithmetic(
            burst in big_or_small(),
            count in big_or_small(),
            period_ns in prop_oneof![any::<u64>(), 1u64..=86_400_000_000_000],
            now in instant(),
            tat in proptest::option::of(instant()),
            cost_pick in any::<prop::sample::Index>(),
        ) {
            let period = Duration::from_nanos(period_ns);
            let Ok(rate) = Rate::new(burst, count, period) else {
                // The unchecked struct is still safe to compute with.
                let raw = Rate { burst, count: count.max(1), period };
                let _ = spend(&raw, tat.map(Timestamp::from_nanos), Timestamp::from_nanos(now), 1);
                let _ = refund(&raw, tat.map(Timestamp::from_nanos), Timestamp::from_nanos(now), 1);
                let _ = admit_limit(&raw, Timestamp::from_nanos(now), 1);
                return Ok(());
            };
            prop_assert!(rate.burst_offset_nanos() as u128 <= MAX_BURST_OFFSET.as_nanos());
            let cost = cost_pick.index(usize::try_from(burst.min(1 << 20)).unwrap_or(1) + 1) as u64;
            let (now, tat) = (Timestamp::from_nanos(now), tat.map(Timestamp::from_nanos));
            let d = spend(&rate, tat, now, cost).unwrap();
            let limit = admit_limit(&rate, now, cost);
            prop_assert!(limit >= now);
            let admitted = tat.is_none_or(|t| t <= limit);
            prop_assert_eq!(d.allowed, admitted, "admit limit {:?} vs {:?}", limit, d);
            prop_assert!(d.remaining <= rate.burst);
            if d.allowed {
                prop_assert!(d.remaining <= rate.burst - cost, "{:?}", d);
                prop_assert!(d.new_tat >= tat.unwrap_or(now).max(now));
            } else {
                prop_assert_eq!(d.new_tat, tat.unwrap_or(now).max(now));
            }
            let r = refund(&rate, tat, now, cost).unwrap();
            prop_assert!(r.remaining <= rate.burst);
            prop_assert!(r.new_tat >= now);
            prop_assert!(spend(&rate, tat, now, burst.saturating_add(1)).is_err() || burst == u64::MAX);
        }
    }
}
