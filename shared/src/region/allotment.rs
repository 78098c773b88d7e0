//! A region's allotment of a global limit, as its processes decide with it: declared limits, the
//! allotment each process last read from the ledger, and the rate a regional bucket spends at.
//!
//! A process uses an allotment it read for at most `refresh` (and never past the region's lease),
//! so a giver's lowering reaches every process of its region within `refresh`; the move's
//! quarantine includes it. No call here is on the hot path: [`Allotments::rate_for`] is a lookup,
//! [`Allotments::refresh`] one ledger read off the path.

use std::collections::HashMap;
use std::sync::Mutex;
use std::time::Duration;

use super::error::RegionError;
use super::ledger::{read_region, LedgerStore};
use crate::clock::Timestamp;
use crate::gcra::Rate;

/// How a global limit behaves when a region cannot read its allotment.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Mode {
    /// Never over `L`: without a fresh allotment the region refuses.
    Exact,
    /// A region that cannot refresh keeps deciding with its last allotment plus
    /// `overdraw_permille / 1000 × L / regions` for at most `overdraw_for` past it, then refuses.
    Bounded {
        overdraw_permille: u32,
        overdraw_for: Duration,
    },
}

/// A key-value GCRA bucket declared global: one total `L` over `regions`.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Declared {
    /// The bucket key, as the limiter stores it (`{nameId}:{id}`).
    pub bucket: String,
    pub total: u64,
    pub period: Duration,
    pub regions: Vec<String>,
    pub mode: Mode,
}

impl Declared {
    /// Checks that the limit can be split: its `burst` is its `count` (the allotment is both), at
    /// least one region, no region twice.
    pub fn new(
        bucket: &str,
        global: Rate,
        regions: Vec<String>,
        mode: Mode,
    ) -> Result<Self, RegionError> {
        let bad = |reason: &str| RegionError::BadDeclaration {
            limit: bucket.to_string(),
            reason: reason.to_string(),
        };
        if global.burst != global.count {
            return Err(bad("a global limit needs burst equal to count"));
        }
        let mut sorted = regions.clone();
        sorted.sort();
        sorted.dedup();
        if sorted.is_empty() || sorted.len() != regions.len() {
            return Err(bad("regions must be listed, each once"));
        }
        Ok(Declared {
            bucket: bucket.to_string(),
            total: global.count,
            period: global.period,
            regions,
            mode,
        })
    }

    /// The first allotments: `L` split as evenly as whole tokens allow (the first regions get the
    /// remainder), summing to exactly `L`.
    pub fn split(&self) -> Vec<(String, u64)> {
        let k = self.regions.len() as u64;
        self.regions
            .iter()
            .enumerate()
            .map(|(i, r)| {
                let extra = u64::from((i as u64) < self.total % k);
                (r.clone(), self.total / k + extra)
            })
            .collect()
    }

    /// The most any window admits across all regions, as a GCRA rate over `period`: `L` in exact
    /// mode, `L + overdraw` in bounded mode. Published with the limit.
    pub fn published_bound(&self) -> u64 {
        self.total + self.overdraw() * self.regions.len() as u64
    }

    /// The extra tokens one region may use while it cannot refresh (bounded mode; 0 in exact).
    pub fn overdraw(&self) -> u64 {
        match self.mode {
            Mode::Exact => 0,
            Mode::Bounded {
                overdraw_permille, ..
            } => {
                self.total * u64::from(overdraw_permille) / 1000 / self.regions.len().max(1) as u64
            }
        }
    }

    /// How long past its lease a region may still be deciding: the reclaim waits this plus the
    /// clock margin.
    pub fn overdraw_for(&self) -> Duration {
        match self.mode {
            Mode::Exact => Duration::ZERO,
            Mode::Bounded { overdraw_for, .. } => overdraw_for,
        }
    }
}

/// The allotment a process read.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Held {
    pub amount: u64,
    pub epoch: u64,
    /// The earlier of the region's lease and the read plus `refresh`.
    pub good_until: Timestamp,
}

/// What a regional bucket spends at.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Regional {
    /// Not a global limit: the limits file's rate.
    NotGlobal,
    /// The region's share: `amount` per period, burst `amount`.
    Share(Rate),
    /// No allotment to decide with (none held, 0, or run out): refuse without a call.
    Refuse { retry_in: Duration },
}

/// This process's view of its region's allotments, one per declared bucket.
#[derive(Debug)]
pub struct Allotments {
    region: String,
    refresh: Duration,
    entries: Mutex<HashMap<String, (Declared, Option<Held>)>>,
}

impl Allotments {
    pub fn new(region: &str, refresh: Duration) -> Self {
        Allotments {
            region: region.to_string(),
            refresh,
            entries: Mutex::new(HashMap::new()),
        }
    }

    /// This region's view of the global limits `declared` (by the limits file) over it: what the
    /// key-value limiter decides within. Each holds no allotment until its first
    /// [`refresh`](Self::refresh).
    pub fn for_declared(region: &str, refresh: Duration, declared: Vec<Declared>) -> Self {
        let a = Allotments::new(region, refresh);
        for d in declared {
            if d.regions.iter().any(|r| r == region) {
                a.declare(d);
            }
        }
        a
    }

    pub fn region(&self) -> &str {
        &self.region
    }

    pub fn refresh_every(&self) -> Duration {
        self.refresh
    }

    fn with<T>(&self, f: impl FnOnce(&mut HashMap<String, (Declared, Option<Held>)>) -> T) -> T {
        let mut guard = match self.entries.lock() {
            Ok(g) => g,
            Err(poisoned) => poisoned.into_inner(),
        };
        f(&mut guard)
    }

    pub fn declare(&self, d: Declared) {
        self.with(|m| m.insert(d.bucket.clone(), (d, None)));
    }

    pub fn declared(&self, bucket: &str) -> Option<Declared> {
        self.with(|m| m.get(bucket).map(|(d, _)| d.clone()))
    }

    pub fn held(&self, bucket: &str) -> Option<Held> {
        self.with(|m| m.get(bucket).and_then(|(_, h)| *h))
    }

    /// Sets what this process holds (after a ledger read, or the giver's own lowering, which
    /// must reach the cache before the ledger write).
    pub fn set(&self, bucket: &str, held: Held) {
        self.with(|m| {
            if let Some(e) = m.get_mut(bucket) {
                e.1 = Some(held);
            }
        });
    }

    /// Reads this region's item of `bucket` and holds it until `now + refresh` (or its lease).
    /// 1 `GetItem` (strongly consistent), off the hot path.
    pub async fn refresh<S: LedgerStore>(
        &self,
        store: &S,
        bucket: &str,
        now: Timestamp,
    ) -> Result<Held, RegionError> {
        let row = read_region(store, bucket, &self.region).await?;
        let held = Held {
            amount: row.allotment,
            epoch: row.epoch,
            good_until: row.lease_until.min(now.plus(self.refresh)),
        };
        self.set(bucket, held);
        Ok(held)
    }

    /// The rate `bucket` spends at now. A lookup, no call.
    pub fn rate_for(&self, bucket: &str, now: Timestamp) -> Regional {
        let Some((declared, held)) = self.with(|m| m.get(bucket).cloned()) else {
            return Regional::NotGlobal;
        };
        let refuse = Regional::Refuse {
            retry_in: self.refresh,
        };
        let Some(held) = held else { return refuse };
        let amount = if now < held.good_until {
            held.amount
        } else if now < held.good_until.plus(declared.overdraw_for()) {
            held.amount + declared.overdraw()
        } else {
            return refuse;
        };
        match Rate::new(amount, amount, declared.period) {
            Ok(rate) => Regional::Share(rate),
            Err(_) => refuse,
        }
    }
}
