//! Reported demand: what each region tells the others it is asked for, so that allotment can
//! follow it ([`super::policy`]). A region measures its demand from its own regional bucket item
//! (the spends admitted and refused in the bucket's current window, which the one conditional
//! write already keeps: no call is added on the hot path) and reports it on its own ledger item,
//! in the same write that renews its lease ([`super::lease::renew_reporting`]).

use std::collections::HashMap;
use std::time::Duration;

use aws_sdk_dynamodb::types::AttributeValue;

use super::error::RegionError;
use crate::clock::Timestamp;
use crate::dynamo::item::{n, Item};
use crate::gcra_write::attr as bucket_attr;

/// Ledger attributes of a report.
pub mod attr {
    /// Spends asked per period (admitted plus refused), as last reported.
    pub const DEMAND: &str = "demand";
    /// The bucket's counters the report was measured from: the next report's baseline.
    pub const OBSERVED: &str = "observed";
    pub const ASKED: &str = "asked";
    pub const WINDOW_START: &str = "windowStart";
    pub const AT: &str = "at";
}

/// The least demand a live region reports: a region brought down to allotment 0 refuses without
/// a write, so its bucket counts nothing; one token lets it write again, and its writes carry the
/// refusals it holds, so its real demand shows.
pub const FLOOR: u64 = 1;

/// A regional bucket's counters at one instant: spends asked (admitted plus refused) since the
/// bucket last started draining from full.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Observed {
    pub asked: u64,
    pub window_start: Timestamp,
    pub at: Timestamp,
}

impl Observed {
    /// From the bucket's item as the GCRA write keeps it (`requestCount`, `throttleCount`,
    /// `windowStart`); no item is a bucket nobody asked of.
    pub fn from_bucket(item: Option<&Item>, now: Timestamp) -> Observed {
        let num = |name: &str| {
            item.and_then(|it| it.get(name))
                .and_then(|v| v.as_n().ok())
                .and_then(|x| x.parse::<i64>().ok())
        };
        let count = |name: &str| num(name).and_then(|x| u64::try_from(x).ok()).unwrap_or(0);
        Observed {
            asked: count(bucket_attr::REQUEST_COUNT) + count(bucket_attr::THROTTLE_COUNT),
            window_start: num(bucket_attr::WINDOW_START).map_or(now, Timestamp::from_nanos),
            at: now,
        }
    }

    fn to_value(self) -> AttributeValue {
        AttributeValue::M(HashMap::from([
            (attr::ASKED.to_string(), n(self.asked)),
            (
                attr::WINDOW_START.to_string(),
                n(self.window_start.as_nanos()),
            ),
            (attr::AT.to_string(), n(self.at.as_nanos())),
        ]))
    }

    fn from_value(v: &AttributeValue, at: &str) -> Result<Observed, RegionError> {
        let bad = |what: &str| RegionError::Malformed {
            item: at.to_string(),
            reason: format!("observed {what} missing or not a whole number"),
        };
        let m = v.as_m().map_err(|_| bad("map"))?;
        let num = |name: &str| {
            m.get(name)
                .and_then(|v| v.as_n().ok())
                .and_then(|x| x.parse::<i64>().ok())
                .ok_or_else(|| bad(name))
        };
        Ok(Observed {
            asked: u64::try_from(num(attr::ASKED)?).map_err(|_| bad(attr::ASKED))?,
            window_start: Timestamp::from_nanos(num(attr::WINDOW_START)?),
            at: Timestamp::from_nanos(num(attr::AT)?),
        })
    }
}

/// Spends asked per `period`, from the counters now and those of the last report: the growth
/// since that report, over the time since it, when the window is the same one; else the average
/// over the window so far, taken over at least one period (a window a second old is not
/// extrapolated: a window starts when the bucket was full, so demand was low just before).
pub fn per_period(before: Option<&Observed>, now: &Observed, period: Duration) -> u64 {
    let (asked, over) = match before {
        Some(b) if b.window_start == now.window_start && b.asked <= now.asked && b.at < now.at => {
            (now.asked - b.asked, now.at.since(b.at))
        }
        _ => (now.asked, now.at.since(now.window_start).max(period)),
    };
    let rate = u128::from(asked) * period.as_nanos() / over.as_nanos().max(1);
    u64::try_from(rate).unwrap_or(u64::MAX)
}

/// A region's report on its own ledger item: its demand, and the counters it was measured from.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Reported {
    pub demand: u64,
    pub observed: Observed,
}

impl Reported {
    /// The report after `before`: demand per period from the counters `now`, at least [`FLOOR`].
    pub fn measure(before: Option<&Reported>, now: Observed, period: Duration) -> Reported {
        Reported {
            demand: per_period(before.map(|r| &r.observed), &now, period).max(FLOOR),
            observed: now,
        }
    }

    /// The report as read from a region item (`None`: never reported).
    pub fn from_item(it: &Item, at: &str) -> Result<Option<Reported>, RegionError> {
        let Some(observed) = it.get(attr::OBSERVED) else {
            return Ok(None);
        };
        let demand = it
            .get(attr::DEMAND)
            .and_then(|v| v.as_n().ok())
            .and_then(|x| x.parse::<u64>().ok())
            .ok_or_else(|| RegionError::Malformed {
                item: at.to_string(),
                reason: "demand missing or not a whole number".into(),
            })?;
        Ok(Some(Reported {
            demand,
            observed: Observed::from_value(observed, at)?,
        }))
    }

    /// The `SET` clause, names and values that write this report.
    pub fn assignments(&self) -> (String, HashMap<String, String>, Item) {
        (
            "#dm = :dm, #ob = :ob".into(),
            HashMap::from([
                ("#dm".to_string(), attr::DEMAND.to_string()),
                ("#ob".to_string(), attr::OBSERVED.to_string()),
            ]),
            HashMap::from([
                (":dm".to_string(), n(self.demand)),
                (":ob".to_string(), self.observed.to_value()),
            ]),
        )
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    const P: Duration = Duration::from_secs(60);

    fn at(secs: i64) -> Timestamp {
        Timestamp::from_secs(1_000_000 + secs)
    }

    fn obs(asked: u64, start: i64, now: i64) -> Observed {
        Observed {
            asked,
            window_start: at(start),
            at: at(now),
        }
    }

    #[test]
    fn the_growth_since_the_last_report_over_its_time() {
        // 300 more in 60 s of one window: 300 per minute, whatever the window held before.
        assert_eq!(
            per_period(Some(&obs(900, 0, 120)), &obs(1200, 0, 180), P),
            300
        );
        // 60 more in 120 s: 30 per minute.
        assert_eq!(
            per_period(Some(&obs(900, 0, 120)), &obs(960, 0, 240), P),
            30
        );
        // Runs more often than the period: 15 in a minute of an hour's limit is 900 an hour.
        let hour = Duration::from_secs(3600);
        assert_eq!(
            per_period(Some(&obs(15, 0, 60)), &obs(30, 0, 120), hour),
            900
        );
    }

    #[test]
    fn a_new_window_is_averaged_over_at_least_a_period() {
        // The bucket filled up and started again: its count is this window's alone.
        assert_eq!(
            per_period(Some(&obs(900, 0, 120)), &obs(40, 150, 180), P),
            40
        );
        // 600 over 120 s: 300 per minute.
        assert_eq!(per_period(None, &obs(600, 0, 120), P), 300);
    }

    #[test]
    fn an_idle_region_reports_the_floor() {
        let r = Reported::measure(None, Observed::from_bucket(None, at(0)), P);
        assert_eq!(r.demand, FLOOR);
    }

    #[test]
    fn a_report_reads_back_as_written() {
        let r = Reported {
            demand: 42,
            observed: obs(7, 3, 9),
        };
        let (_, names, values) = r.assignments();
        let item: Item = names
            .iter()
            .map(|(k, name)| {
                let v = values[&k.replacen('#', ":", 1)].clone();
                (name.clone(), v)
            })
            .collect();
        assert_eq!(Reported::from_item(&item, "x").expect("parses"), Some(r));
        assert_eq!(
            Reported::from_item(&Item::new(), "x").expect("parses"),
            None
        );
    }
}
