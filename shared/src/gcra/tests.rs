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
