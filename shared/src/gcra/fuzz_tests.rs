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
