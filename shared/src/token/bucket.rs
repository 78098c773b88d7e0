//! rate-limiter-py's token-bucket arithmetic, pure. Times are epoch nanoseconds here; the table
//! stores milliseconds (see [`format_ms`]).
//!
//! A bucket holds `tokens` as of `lastRefill`. At `now` it has
//! `available = min(limit, max(0, tokens) + floor(elapsed * limit / window))`.
//! `lastRefill` advances only by the time that bought whole tokens, `ceil(gained * window / limit)`,
//! so the fraction of a token already earned is kept for the next call. Rounding up means a refill
//! can never invent a token; it can drop less than one nanosecond of credit (when `window / limit`
//! is not a whole number of nanoseconds). A full bucket sets `lastRefill = now` (time spent full
//! earns nothing).

use serde::Serialize;

/// A bucket as stored: `tokens` (rate-limiter-py allows negative values) and `lastRefill`.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize)]
pub struct BucketState {
    pub tokens: i64,
    /// Epoch nanoseconds. `None` on rows written without it; such a bucket counts as long idle (full).
    pub last_refill: Option<i64>,
}

/// A bucket brought up to `now`.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Refilled {
    pub available: u64,
    /// Epoch nanoseconds.
    pub last_refill: i64,
}

fn ceil_div(a: u128, b: u128) -> u128 {
    a.div_ceil(b)
}

/// The bucket at `now` (ns); a missing bucket (`None`) is full. `window` is in nanoseconds.
pub fn refill(state: Option<&BucketState>, limit: u64, window: u64, now: i64) -> Refilled {
    let full = Refilled {
        available: limit,
        last_refill: now,
    };
    let Some(st) = state else { return full };
    let Some(last) = st.last_refill else {
        return full;
    };
    let elapsed = now.saturating_sub(last).max(0) as u128;
    let base = st.tokens.clamp(0, i64::try_from(limit).unwrap_or(i64::MAX)) as u128;
    let window = u128::from(window.max(1));
    let gained = elapsed * u128::from(limit) / window;
    let available = (base + gained).min(u128::from(limit)) as u64;
    if available >= limit {
        return full;
    }
    let used =
        i64::try_from(ceil_div(gained * window, u128::from(limit.max(1)))).unwrap_or(i64::MAX);
    Refilled {
        available,
        last_refill: last.saturating_add(used),
    }
}

/// When (ns) a bucket left with `tokens` tokens at `last_refill` next holds at least `want` tokens.
pub fn time_for(tokens: u64, want: u64, last_refill: i64, limit: u64, window: u64) -> i64 {
    let need = want.saturating_sub(tokens) as u128;
    let ns = ceil_div(need * u128::from(window), u128::from(limit.max(1)));
    last_refill.saturating_add(ns.min(i64::MAX as u128) as i64)
}

/// Epoch nanoseconds as rate-limiter-py's milliseconds: an integer when whole (`1700000000123`),
/// else with up to six decimals (`1700000000123.456789`), so no precision is lost and Python reads
/// it as a `Decimal`.
pub fn format_ms(ns: i64) -> String {
    // Sign and magnitude, as a decimal is read: -1 ns is "-0.000001", not "-1.999999".
    let sign = if ns < 0 { "-" } else { "" };
    let abs = ns.unsigned_abs();
    let (ms, frac) = (abs / 1_000_000, abs % 1_000_000);
    if frac == 0 {
        format!("{sign}{ms}")
    } else {
        let f = format!("{frac:06}");
        format!("{sign}{ms}.{}", f.trim_end_matches('0'))
    }
}

/// Milliseconds as stored (integer or decimal, as either library writes them) to nanoseconds;
/// digits beyond the nanosecond are dropped.
pub fn parse_ms(v: &str) -> Option<i64> {
    let v = v.trim();
    if let Ok(ms) = v.parse::<i64>() {
        return Some(ms.saturating_mul(1_000_000));
    }
    if let Some((int, frac)) = v.split_once('.') {
        if !frac.is_empty() && frac.bytes().all(|b| b.is_ascii_digit()) {
            let ms: i64 = int.parse().ok()?;
            let mut digits: String = frac.chars().take(6).collect();
            while digits.len() < 6 {
                digits.push('0');
            }
            let f: i64 = digits.parse().ok()?;
            let f = if int.starts_with('-') { -f } else { f };
            return Some(ms.saturating_mul(1_000_000).saturating_add(f));
        }
    }
    let f = v.parse::<f64>().ok().filter(|f| f.is_finite())?;
    Some((f * 1_000_000.0).floor() as i64)
}

#[cfg(test)]
mod tests {
    use super::*;

    const L: u64 = 10;
    const MS: i64 = 1_000_000;
    const W: u64 = 100_000 * MS as u64;

    fn st(tokens: i64, last: i64) -> BucketState {
        BucketState {
            tokens,
            last_refill: Some(last),
        }
    }

    #[test]
    fn the_seeds_examples() {
        // limit 10, window 100 s: 5 tokens + 30 s → 8.
        assert_eq!(refill(Some(&st(5, 0)), L, W, 30_000 * MS).available, 8);
        // -7 tokens + 30 s → 3 (negative balances count as empty).
        assert_eq!(refill(Some(&st(-7, 0)), L, W, 30_000 * MS).available, 3);
        // 0 tokens + 11,500 s → capped at the limit, and lastRefill moves to now.
        let r = refill(Some(&st(0, 0)), L, W, 11_500_000 * MS);
        assert_eq!(r.available, 10);
        assert_eq!(r.last_refill, 11_500_000 * MS);
        assert_eq!(refill(None, L, W, 7).available, 10);
    }

    #[test]
    fn partial_credit_is_kept_and_never_invented() {
        // 1 token per 10 s: after 15 s one token is bought with 10 s; 5 s of credit remain.
        let r = refill(Some(&st(0, 0)), L, W, 15_000 * MS);
        assert_eq!((r.available, r.last_refill), (1, 10_000 * MS));
        let r2 = refill(Some(&st(0, r.last_refill)), L, W, 20_000 * MS);
        assert_eq!(r2.available, 1, "the earlier 5 s plus 5 s buy a token");
        // 3 per second (333.33 ms each), emptied every millisecond for 10 s (+1 ms for the
        // nanoseconds rounding kept back): exactly 30 tokens, where millisecond rounding gave 29.
        let (limit, window) = (3, 1_000 * MS as u64);
        let mut s = st(0, 0);
        let mut total = 0;
        for now in 1..=10_001 {
            let r = refill(Some(&s), limit, window, now * MS);
            total += r.available;
            s = st(0, r.last_refill);
        }
        assert_eq!(total, 30);
    }

    #[test]
    fn next_token_and_reset_times() {
        // Empty at t=0: next token at 10 s, full at 100 s.
        assert_eq!(time_for(0, 1, 0, L, W), 10_000 * MS);
        assert_eq!(time_for(0, L, 0, L, W), 100_000 * MS);
        assert_eq!(time_for(10, 10, 5, L, W), 5);
        // 3 per second: next token after ceil(333,333,333.3) ns.
        assert_eq!(time_for(0, 1, 0, 3, 1_000 * MS as u64), 333_333_334);
    }

    #[test]
    fn clock_skew_and_lowered_limits_are_safe() {
        // lastRefill in the future (another writer's clock ahead): no credit, no panic.
        let r = refill(Some(&st(2, 50_000)), L, W, 40_000);
        assert_eq!((r.available, r.last_refill), (2, 50_000));
        // A row holding more tokens than a lowered limit is capped.
        assert_eq!(refill(Some(&st(50, 0)), L, W, 0).available, 10);
        // Missing lastRefill: treated as long idle.
        let legacy = BucketState {
            tokens: 0,
            last_refill: None,
        };
        assert_eq!(refill(Some(&legacy), L, W, 1).available, 10);
    }

    #[test]
    fn milliseconds_round_trip_at_nanosecond_precision() {
        assert_eq!(format_ms(1_700_000_000_123 * MS), "1700000000123");
        assert_eq!(
            format_ms(1_700_000_000_123 * MS + 456_700),
            "1700000000123.4567"
        );
        assert_eq!(parse_ms("1700000000123"), Some(1_700_000_000_123 * MS));
        assert_eq!(
            parse_ms("1700000000123.4567"),
            Some(1_700_000_000_123 * MS + 456_700)
        );
        assert_eq!(parse_ms("5.1234567"), Some(5 * MS + 123_456));
        assert_eq!(parse_ms("1.5E3"), Some(1_500 * MS));
        assert_eq!(parse_ms("x"), None);
        for ns in [0, 1, 999_999, 1_000_000, 1_234_567_891] {
            assert_eq!(parse_ms(&format_ms(ns)), Some(ns));
        }
    }
}

/// Regression cases found by `fuzz_token_bucket`.
#[cfg(test)]
mod fuzz_regressions {
    use super::*;

    /// A negative instant with a fraction of a millisecond was written as `-1.999999` for -1 ns
    /// (floor and remainder), which reads back as -1,999,999 ns.
    #[test]
    fn negative_instants_round_trip_through_stored_milliseconds() {
        assert_eq!(format_ms(-1), "-0.000001");
        assert_eq!(parse_ms(&format_ms(-1)), Some(-1));
        assert_eq!(format_ms(-1_500_000), "-1.5");
        assert_eq!(parse_ms(&format_ms(i64::MIN)), Some(i64::MIN));
        assert_eq!(format_ms(1_700_000_000_123_456_789), "1700000000123.456789");
    }
}

/// Property tests (docs/testing.md): bucket rows may have been written by anyone.
#[cfg(test)]
mod fuzz_tests {
    use super::*;
    use proptest::prelude::*;

    proptest! {
        #![proptest_config(crate::fuzz::config(1))]

        /// `fuzz_token_bucket`: any stored tokens, instants, limit and window refill without a
        /// panic, never above the limit and never moving `lastRefill` past now; stored millisecond
        /// numbers in any form parse or are refused, and every nanosecond instant round-trips
        /// through the stored form.
        #[test]
        fn fuzz_token_bucket(
            tokens in any::<i64>(),
            last in proptest::option::of(any::<i64>()),
            limit in prop_oneof![1u64..=1_000, any::<u64>()],
            window in any::<u64>(),
            now in any::<i64>(),
            want in any::<u64>(),
            stored in prop_oneof![crate::fuzz::text(), "-?[0-9]{1,22}(\\.[0-9]{0,12})?", "[0-9.eE+-]{1,12}"],
            ns in any::<i64>(),
        ) {
            let st = BucketState { tokens, last_refill: last };
            let r = refill(Some(&st), limit, window, now);
            prop_assert!(r.available <= limit);
            if r.available < limit {
                prop_assert!(r.last_refill <= now.max(last.unwrap_or(now)));
            }
            let _ = time_for(r.available, want, r.last_refill, limit, window);
            let _ = parse_ms(&stored);
            prop_assert_eq!(parse_ms(&format_ms(ns)), Some(ns));
        }
    }
}
