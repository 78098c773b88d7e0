//! `turnstile token take`: take one fungible token and print the decision, so operators can probe
//! a bucket by hand. `--now` decides at a given instant (replays, tests).

use std::sync::Arc;

use clap::Subcommand;
use shared::clock::{ManualClock, Timestamp};
use shared::limit::Quota;
use shared::token::FungibleLimiter;
use shared::{Deps, Error, Result};

pub(crate) type Args = crate::Nested<Cmd>;

#[derive(Debug, Subcommand)]
pub(crate) enum Cmd {
    /// Take one token from RESOURCE's bucket for ACCOUNT; prints granted, remaining, retry-after
    /// and reset as JSON.
    Take {
        resource: String,
        account: String,
        /// Default limit when the limit table has no row (required then).
        #[arg(long)]
        limit: Option<i64>,
        /// Default window in seconds when the limit table has no row (required then).
        #[arg(long)]
        window: Option<i64>,
        /// Decide at this instant: epoch milliseconds or RFC 3339 (default: now).
        #[arg(long, value_parser = parse_now)]
        now: Option<Timestamp>,
    },
}

/// Parses `--now`: epoch milliseconds (`1763719200000`) or RFC 3339 (`2026-11-21T10:00:00Z`,
/// `2026-11-21T11:00:00.250+01:00`).
pub fn parse_now(s: &str) -> std::result::Result<Timestamp, String> {
    let s = s.trim();
    if let Ok(ms) = s.parse::<i64>() {
        return Ok(Timestamp::from_millis(ms));
    }
    parse_rfc3339(s).ok_or_else(|| {
        format!("{s:?} is neither epoch milliseconds nor RFC 3339 (2026-11-21T10:00:00Z)")
    })
}

fn parse_rfc3339(s: &str) -> Option<Timestamp> {
    let b = s.as_bytes();
    if b.len() < 20 || b[4] != b'-' || b[7] != b'-' || !matches!(b[10], b'T' | b't' | b' ') {
        return None;
    }
    if b[13] != b':' || b[16] != b':' {
        return None;
    }
    let num = |r: std::ops::Range<usize>| -> Option<i64> {
        let t = s.get(r)?;
        t.bytes()
            .all(|c| c.is_ascii_digit())
            .then(|| t.parse().ok())?
    };
    let (y, mo, d) = (num(0..4)?, num(5..7)?, num(8..10)?);
    let (h, mi, sec) = (num(11..13)?, num(14..16)?, num(17..19)?);
    if !(1..=12).contains(&mo) || !(1..=31).contains(&d) || h > 23 || mi > 59 || sec > 60 {
        return None;
    }
    let mut rest = &s[19..];
    let mut nanos = 0i64;
    if let Some(frac) = rest.strip_prefix('.') {
        let digits: String = frac.chars().take_while(|c| c.is_ascii_digit()).collect();
        if digits.is_empty() {
            return None;
        }
        let padded: String = digits
            .chars()
            .chain(std::iter::repeat('0'))
            .take(9)
            .collect();
        nanos = padded.parse().ok()?;
        rest = &frac[digits.len()..];
    }
    let offset_secs = match rest {
        "Z" | "z" => 0,
        _ => {
            let sign = match rest.as_bytes().first()? {
                b'+' => 1,
                b'-' => -1,
                _ => return None,
            };
            let (oh, om) = rest[1..].split_once(':')?;
            if oh.len() != 2 || om.len() != 2 {
                return None;
            }
            sign * (oh.parse::<i64>().ok()? * 3600 + om.parse::<i64>().ok()? * 60)
        }
    };
    // Days from civil (Howard Hinnant).
    let y = if mo <= 2 { y - 1 } else { y };
    let era = y.div_euclid(400);
    let yoe = y - era * 400;
    let mp = (mo + 9) % 12;
    let doy = (153 * mp + 2) / 5 + d - 1;
    let doe = yoe * 365 + yoe / 4 - yoe / 100 + doy;
    let days = era * 146_097 + doe - 719_468;
    let secs = days * 86_400 + h * 3600 + mi * 60 + sec - offset_secs;
    Some(Timestamp::from_nanos(
        secs.checked_mul(1_000_000_000)?.checked_add(nanos)?,
    ))
}

/// Deps from the environment, with a frozen clock when `--now` is given.
pub(crate) async fn deps_at(now: Option<Timestamp>) -> Result<Deps> {
    let mut deps = crate::aws::deps().await?;
    if let Some(t) = now {
        deps.clock = Arc::new(ManualClock::new(t));
    }
    Ok(deps)
}

pub async fn run(args: Args) -> Result<crate::Exit> {
    match args.command {
        Cmd::Take {
            resource,
            account,
            limit,
            window,
            now,
        } => {
            let deps = deps_at(now).await?;
            let limiter = FungibleLimiter::from_deps(&deps)?;
            let default = match (limit, window) {
                (Some(l), Some(w)) => Quota::new(l, w),
                _ => {
                    // Without both defaults the limit row must exist (read once; get_token reuses it).
                    let row = limiter.limits().get(&resource, &account).await?;
                    match row {
                        Some(r) => Quota::new(
                            limit.unwrap_or(r.limit),
                            window.or(r.window_sec).unwrap_or(0),
                        ),
                        None => {
                            return Err(Error::Other(format!(
                                "no limit row for {resource}/{account}: pass --limit and --window"
                            )))
                        }
                    }
                }
            };
            let d = limiter.get_token(&resource, &account, default).await?;
            crate::print_json(&d)?;
            Ok(crate::Exit::granted(d.granted))
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn now_accepts_epoch_ms_and_rfc3339() {
        assert_eq!(
            parse_now("1710513045123").unwrap(),
            Timestamp::from_millis(1_710_513_045_123)
        );
        assert_eq!(
            parse_now("2024-03-15T14:30:45.123Z").unwrap(),
            Timestamp::from_millis(1_710_513_045_123)
        );
        assert_eq!(
            parse_now("2024-03-15T15:30:45+01:00").unwrap(),
            Timestamp::from_secs(1_710_513_045)
        );
        assert_eq!(
            parse_now("2000-02-29T00:00:00Z").unwrap(),
            Timestamp::from_secs(951_782_400)
        );
        assert!(parse_now("yesterday").is_err());
        assert!(parse_now("2024-13-01T00:00:00Z").is_err());
        assert!(
            parse_now("2024-03-15T14:30:45").is_err(),
            "an offset is required"
        );
    }
}
