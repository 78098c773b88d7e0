//! Decisions over time, for the dashboard's charts: a bounded ring of per-second counts by tenant
//! and outcome (admitted, or refused by a named limit), fed by [`super::decisions::Recorded`] as
//! the local stack routes each invocation. The tables say where things stand now; only the stack
//! saw each decision as it happened, so the history lives here, in memory, for [`SECONDS`] seconds.

use std::collections::{BTreeMap, VecDeque};

use serde::Serialize;

/// Seconds of history kept and served (five minutes).
pub const SECONDS: i64 = 300;
/// Distinct (tenant, outcome) counters in one second; a burst over more tenants than this counts the
/// rest under [`OTHER_TENANTS`], so a flood of made-up tenant ids cannot grow the ring.
pub const KEYS_PER_SECOND: usize = 200;
/// Where decisions beyond [`KEYS_PER_SECOND`] (and those naming no tenant) are counted.
pub const OTHER_TENANTS: &str = "";
/// The refusal "limit" of an authorizer Deny that names no limit (no ticket, no session, ...).
pub const DENIED: &str = "denied";
/// Longest tenant id or limit name kept (longer ones are cut): ids come from requests.
const NAME_CHARS: usize = 64;

/// One second's counts, keyed by (tenant, limit); the limit is `None` for admissions.
#[derive(Debug, Default)]
struct Second {
    at: i64,
    counts: BTreeMap<(String, Option<String>), u32>,
}

/// The ring: seconds in increasing order, none older than [`SECONDS`] before the newest.
#[derive(Debug, Default)]
pub struct Series {
    seconds: VecDeque<Second>,
}

/// What `GET /dashboard/decisions` answers: the server's second and the non-empty counts in the
/// last [`SECONDS`] seconds, oldest first.
#[derive(Debug, Clone, PartialEq, Eq, Serialize)]
#[serde(rename_all = "camelCase")]
pub struct Points {
    /// Epoch seconds now, by the stack's clock: the page aligns its x axis on it.
    pub now: i64,
    pub seconds: i64,
    pub points: Vec<Point>,
}

/// One tenant's decisions in one second.
#[derive(Debug, Clone, PartialEq, Eq, Serialize)]
#[serde(rename_all = "camelCase")]
pub struct Point {
    /// Epoch seconds.
    pub at: i64,
    /// Empty when the decision named no tenant (or the second ran out of room).
    pub tenant: String,
    pub admitted: u32,
    /// Refusals by the limit that said no ([`DENIED`] for an authorizer Deny naming none).
    pub refused: BTreeMap<String, u32>,
}

fn cut(s: &str) -> String {
    s.chars().take(NAME_CHARS).collect()
}

impl Series {
    /// Counts one decision at epoch second `at`: admitted when `refused_by` is `None`.
    pub fn record(&mut self, at: i64, tenant: Option<&str>, refused_by: Option<&str>) {
        let newest = self.seconds.back().map_or(at, |s| s.at.max(at));
        while self
            .seconds
            .front()
            .is_some_and(|s| s.at <= newest - SECONDS)
        {
            self.seconds.pop_front();
        }
        if at <= newest - SECONDS {
            return;
        }
        // Decisions arrive in time order but for a clock step; a late one finds its place.
        let i = self.seconds.partition_point(|s| s.at < at);
        if self.seconds.get(i).is_none_or(|s| s.at != at) {
            self.seconds.insert(
                i,
                Second {
                    at,
                    counts: BTreeMap::new(),
                },
            );
        }
        let second = &mut self.seconds[i];
        let mut key = (cut(tenant.unwrap_or(OTHER_TENANTS)), refused_by.map(cut));
        if !second.counts.contains_key(&key) && second.counts.len() >= KEYS_PER_SECOND {
            key.0 = OTHER_TENANTS.to_string();
        }
        *second.counts.entry(key).or_default() += 1;
    }

    /// The counts of the last [`SECONDS`] seconds up to `now` (epoch seconds), oldest first.
    pub fn points(&self, now: i64) -> Points {
        let mut points = Vec::new();
        for s in self
            .seconds
            .iter()
            .filter(|s| s.at > now - SECONDS && s.at <= now)
        {
            let mut by_tenant: BTreeMap<&str, Point> = BTreeMap::new();
            for ((tenant, limit), n) in &s.counts {
                let p = by_tenant.entry(tenant).or_insert_with(|| Point {
                    at: s.at,
                    tenant: tenant.clone(),
                    admitted: 0,
                    refused: BTreeMap::new(),
                });
                match limit {
                    None => p.admitted += n,
                    Some(l) => *p.refused.entry(l.clone()).or_default() += n,
                }
            }
            points.extend(by_tenant.into_values());
        }
        Points {
            now,
            seconds: SECONDS,
            points,
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn counts_by_second_tenant_and_limit() {
        let mut s = Series::default();
        s.record(100, Some("acme"), None);
        s.record(100, Some("acme"), None);
        s.record(100, Some("acme"), Some("connectionsPerSession"));
        s.record(101, Some("beta"), Some("messagesPerMinute"));
        s.record(101, None, Some(DENIED));
        let p = s.points(101);
        assert_eq!(p.now, 101);
        assert_eq!(p.points.len(), 3);
        assert_eq!((p.points[0].at, p.points[0].tenant.as_str()), (100, "acme"));
        assert_eq!(p.points[0].admitted, 2);
        assert_eq!(p.points[0].refused["connectionsPerSession"], 1);
        assert_eq!(p.points[1].tenant, OTHER_TENANTS);
        assert_eq!(p.points[1].refused[DENIED], 1);
        assert_eq!(p.points[2].tenant, "beta");
    }

    #[test]
    fn keeps_five_minutes_and_places_late_decisions() {
        let mut s = Series::default();
        for at in 0..1000 {
            s.record(at, Some("acme"), None);
        }
        assert_eq!(s.seconds.len(), SECONDS as usize);
        assert_eq!(s.seconds.front().unwrap().at, 1000 - SECONDS);
        s.record(950, Some("acme"), None);
        s.record(10, Some("acme"), None);
        let p = s.points(999);
        assert_eq!(p.points.len(), SECONDS as usize);
        assert_eq!(p.points.iter().find(|p| p.at == 950).unwrap().admitted, 2);
        // A second nobody asked about yet is not served before its time.
        assert!(s.points(900).points.iter().all(|p| p.at <= 900));
    }

    #[test]
    fn a_flood_of_tenants_is_bounded() {
        let mut s = Series::default();
        for i in 0..(KEYS_PER_SECOND + 50) {
            s.record(7, Some(&format!("t{i}{}", "x".repeat(100))), None);
        }
        let second = &s.seconds[0];
        assert_eq!(second.counts.len(), KEYS_PER_SECOND + 1);
        assert_eq!(second.counts[&(OTHER_TENANTS.to_string(), None)], 50);
        assert!(second
            .counts
            .keys()
            .all(|k| k.0.chars().count() <= NAME_CHARS));
    }
}
