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
        _ if rest.len() == 6
            && (rest.starts_with('+') || rest.starts_with('-'))
            && &rest[3..4] == ":" =>
        {
            let oh: i64 = rest[1..3].parse().map_err(|_| bad())?;
            let om: i64 = rest[4..6].parse().map_err(|_| bad())?;
            let sign = if rest.starts_with('-') { -1 } else { 1 };
            sign * (oh * 3600 + om * 60)
        }
        _ => return Err(bad()),
    };
    let days = days_from_civil(y, mo, d);
    let secs = days * 86_400 + h * 3600 + mi * 60 + sec - offset_secs;
    Ok(Timestamp::from_nanos(secs * 1_000_000_000 + nanos))
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
