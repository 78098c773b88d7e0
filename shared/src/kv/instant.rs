//! Instants typed by operators (`turnstile kv ... --now`): epoch milliseconds or RFC 3339.

use crate::clock::Timestamp;

/// Parses `1710513045123` (epoch milliseconds) or an RFC 3339 date-time such as
/// `2024-03-15T14:30:45Z`, `2024-03-15T14:30:45.123+01:00` (fractions to the nanosecond).
pub fn parse_instant(s: &str) -> Result<Timestamp, String> {
    let s = s.trim();
    let bad = || format!("{s:?} is neither epoch milliseconds nor an RFC 3339 date-time");
    if !s.is_empty() && s.bytes().all(|b| b.is_ascii_digit()) {
        return s
            .parse::<i64>()
            .map(Timestamp::from_millis)
            .map_err(|_| bad());
    }
    let b = s.as_bytes();
    if b.len() < 20
        || b[4] != b'-'
        || b[7] != b'-'
        || !matches!(b[10], b'T' | b't' | b' ')
        || b[13] != b':'
        || b[16] != b':'
    {
        return Err(bad());
    }
    let num = |r: std::ops::Range<usize>| -> Result<i64, String> {
        let part = s.get(r).ok_or_else(bad)?;
        if part.bytes().all(|c| c.is_ascii_digit()) {
            part.parse().map_err(|_| bad())
        } else {
            Err(bad())
        }
    };
    let (y, mo, d, h, mi, sec) = (
        num(0..4)?,
        num(5..7)?,
        num(8..10)?,
        num(11..13)?,
        num(14..16)?,
        num(17..19)?,
    );
    if !(1..=12).contains(&mo)
        || !(1..=days_in_month(y, mo)).contains(&d)
        || h > 23
        || mi > 59
        || sec > 60
    {
        return Err(bad());
    }
    let mut rest = &s[19..];
    let mut nanos: i64 = 0;
    if let Some(frac) = rest.strip_prefix('.') {
        let digits = frac.bytes().take_while(u8::is_ascii_digit).count();
        if digits == 0 || digits > 9 {
            return Err(bad());
        }
        nanos = frac[..digits].parse::<i64>().map_err(|_| bad())? * 10_i64.pow(9 - digits as u32);
        rest = &frac[digits..];
    }
    let offset_secs = match rest {
        "Z" | "z" => 0,
        // `get`, not indexing: a multi-byte character may straddle any of these offsets.
        _ if rest.len() == 6
            && (rest.starts_with('+') || rest.starts_with('-'))
            && rest.get(3..4) == Some(":") =>
        {
            let part = |r: std::ops::Range<usize>| {
                rest.get(r)
                    .filter(|p| p.bytes().all(|b| b.is_ascii_digit()))
            };
            let oh: i64 = part(1..3).ok_or_else(bad)?.parse().map_err(|_| bad())?;
            let om: i64 = part(4..6).ok_or_else(bad)?.parse().map_err(|_| bad())?;
            let sign = if rest.starts_with('-') { -1 } else { 1 };
            sign * (oh * 3600 + om * 60)
        }
        _ => return Err(bad()),
    };
    let days = days_from_civil(y, mo, d);
    let secs = days * 86_400 + h * 3600 + mi * 60 + sec - offset_secs;
    // Years 0000-9999 fit the arithmetic above; nanoseconds since 1970 in an i64 do not.
    secs.checked_mul(1_000_000_000)
        .and_then(|n| n.checked_add(nanos))
        .map(Timestamp::from_nanos)
        .ok_or_else(|| {
            format!(
                "{s:?} is outside the instants this tool can represent (1677-09-21 to 2262-04-11)"
            )
        })
}

fn days_in_month(y: i64, m: i64) -> i64 {
    match m {
        2 if (y % 4 == 0 && y % 100 != 0) || y % 400 == 0 => 29,
        2 => 28,
        4 | 6 | 9 | 11 => 30,
        _ => 31,
    }
}

/// Days since 1970-01-01 of a proleptic Gregorian date (Howard Hinnant's algorithm).
fn days_from_civil(y: i64, m: i64, d: i64) -> i64 {
    let y = if m <= 2 { y - 1 } else { y };
    let era = y.div_euclid(400);
    let yoe = y - era * 400;
    let mp = (m + 9) % 12;
    let doy = (153 * mp + 2) / 5 + d - 1;
    let doe = yoe * 365 + yoe / 4 - yoe / 100 + doy;
    era * 146_097 + doe - 719_468
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn epoch_millis_and_rfc3339_round_trip() {
        let t = Timestamp::from_millis(1_710_513_045_123);
        assert_eq!(parse_instant("1710513045123").unwrap(), t);
        assert_eq!(parse_instant("2024-03-15T14:30:45.123Z").unwrap(), t);
        assert_eq!(parse_instant("2024-03-15T15:30:45.123+01:00").unwrap(), t);
        assert_eq!(parse_instant(&t.to_rfc3339()).unwrap(), t);
        assert_eq!(
            parse_instant("2000-02-29T00:00:00Z").unwrap(),
            Timestamp::from_secs(951_782_400)
        );
        assert_eq!(
            parse_instant("1970-01-01T00:00:00.000000001Z").unwrap(),
            Timestamp::from_nanos(1)
        );
        for bad in [
            "",
            "yesterday",
            "2024-02-30T00:00:00Z",
            "2024-03-15T14:30:45",
            "2024-03-15T25:00:00Z",
            "-5",
        ] {
            assert!(parse_instant(bad).is_err(), "{bad}");
        }
    }
}

/// Regression cases found by `fuzz_instants`.
#[cfg(test)]
mod fuzz_regressions {
    use super::*;

    /// Year 0 overflowed the nanosecond multiplication (a panic in debug, a wrong instant in
    /// release); it is refused instead.
    #[test]
    fn instants_outside_the_time_type_are_refused() {
        let e = parse_instant("0000-01-01T00:00:00Z").unwrap_err();
        assert!(e.contains("outside"), "{e}");
        assert!(parse_instant("9999-12-31T23:59:59Z").is_err());
        assert!(parse_instant("2262-04-11T23:47:16.854775807Z").is_ok());
        assert!(parse_instant("2262-04-11T23:47:16.854775808Z").is_err());
    }

    /// A multi-byte character inside the UTC offset made `&rest[3..4]` slice through it.
    #[test]
    fn a_multi_byte_offset_is_refused() {
        assert!(parse_instant("2024-03-15T14:30:45+0é00").is_err());
        assert!(parse_instant("2024-03-15T14:30:45+é:00").is_err());
        assert!(parse_instant("2024-03-15T14:30:45+01:0é").is_err());
        assert_eq!(
            parse_instant("2024-03-15T15:30:45+01:00"),
            parse_instant("2024-03-15T14:30:45Z")
        );
    }
}

/// Property tests (docs/testing.md): `--now` is typed by operators.
#[cfg(test)]
mod fuzz_tests {
    use super::*;
    use proptest::prelude::*;

    proptest! {
        #![proptest_config(crate::fuzz::config(1))]

        /// `fuzz_instants`: any text parses or is refused with a message, never a panic; every
        /// representable millisecond instant round-trips through RFC 3339 and epoch milliseconds.
        #[test]
        fn fuzz_instants(
            s in prop_oneof![
                crate::fuzz::text(),
                "[0-9]{4}-[0-9]{2}-[0-9]{2}[Tt ][0-9]{2}:[0-9]{2}:[0-9]{2}(\\.[0-9]{0,12})?(Z|z|[+-][0-9é]{2}:?[0-9é]{2}|)",
                "[0-9]{1,25}",
            ],
            ms in (i64::MIN / 1_000_000)..=(i64::MAX / 1_000_000),
        ) {
            if let Err(e) = parse_instant(&s) {
                prop_assert!(!e.is_empty());
            }
            let t = Timestamp::from_millis(ms);
            if (0..=9999).contains(&t.to_rfc3339()[..4].parse::<i32>().unwrap_or(-1)) {
                prop_assert_eq!(parse_instant(&t.to_rfc3339()), Ok(t));
            }
            if ms >= 0 {
                prop_assert_eq!(parse_instant(&ms.to_string()), Ok(t));
            }
        }
    }
}
