//! Sharded hot limits (decision 1500): one logical limit spread over `n` items, each on
//! its own partition key, so a limit is not capped by one item's write ceiling (~1,000 WCU/s).
//!
//! Each shard holds an exact share of every quantity (burst, rate): `share(total, n, i)` is
//! `⌊total/n⌋` plus one for the first `total mod n` shards, so the shares sum to the total and
//! the limit as a whole never admits more than its single-bucket bound. A request tries up to
//! [`TRIES`] distinct shards chosen at random (the "two random choices") before refusing. This
//! module is the arithmetic and the choice; the stores ([`crate::kv`]) do the writes.

use std::sync::Mutex;

use serde::{Deserialize, Serialize};

/// Env var: writes per second one item may take before a limit declared `shards: auto` is split.
pub const ITEM_WRITE_BUDGET_VAR: &str = "TURNSTILE_ITEM_WRITE_BUDGET";
/// Below DynamoDB's ~1,000 WCU/s per partition, leaving room for refusals' failed writes.
pub const DEFAULT_ITEM_WRITE_BUDGET: u64 = 800;
/// Most shards one limit may have (each is an item; a refused request probes at most [`TRIES`]).
pub const MAX_SHARDS: u32 = 4096;
/// Distinct shards a request tries before it is refused.
pub const TRIES: usize = 2;

/// How many shards a limit declares.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize, Deserialize)]
#[serde(untagged)]
pub enum Shards {
    /// Exactly this many (1: unsharded).
    Fixed(u32),
    /// `auto`: enough that each shard's admissions stay within the item write budget.
    Auto(AutoWord),
}

/// The word `auto` in a limits file.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "lowercase")]
pub enum AutoWord {
    Auto,
}

impl Default for Shards {
    fn default() -> Self {
        Shards::Fixed(1)
    }
}

impl Shards {
    pub const AUTO: Shards = Shards::Auto(AutoWord::Auto);

    /// The shard count before capping by the quantities: fixed, or `⌈per-second rate / budget⌉`
    /// where the rate is `count` per `period_ns`.
    pub fn wanted(self, count: u64, period_ns: u128, budget: u64) -> u32 {
        match self {
            Shards::Fixed(n) => n.clamp(1, MAX_SHARDS),
            Shards::Auto(_) => {
                let per_sec_x_budget = u128::from(budget.max(1)) * period_ns.max(1);
                let n = (u128::from(count) * 1_000_000_000).div_ceil(per_sec_x_budget);
                u32::try_from(n).unwrap_or(MAX_SHARDS).clamp(1, MAX_SHARDS)
            }
        }
    }
}

/// The shard count used: `wanted`, lowered so every shard holds at least one of each quantity (a
/// burst of 3 over 8 shards would leave 5 shards that can never admit; it runs as 3 shards).
pub fn effective(wanted: u32, quantities: &[u64]) -> u32 {
    let cap = quantities.iter().copied().min().unwrap_or(1).max(1);
    u32::try_from(u64::from(wanted.max(1)).min(cap)).unwrap_or(1)
}

/// Shard `i`'s share of `total` over `n` shards: the shares of `0..n` sum to `total` exactly and
/// differ by at most one.
pub fn share(total: u64, n: u32, i: u32) -> u64 {
    let n64 = u64::from(n.max(1));
    total / n64 + u64::from(u64::from(i) < total % n64)
}

/// Chooses which shards a request tries. Seeded in tests, so a test's choices are reproducible.
#[derive(Debug)]
pub struct Picker(Mutex<fastrand::Rng>);

impl Default for Picker {
    fn default() -> Self {
        Picker(Mutex::new(fastrand::Rng::new()))
    }
}

impl Picker {
    pub fn seeded(seed: u64) -> Self {
        Picker(Mutex::new(fastrand::Rng::with_seed(seed)))
    }

    /// Restarts the choices from `seed`.
    pub fn reseed(&self, seed: u64) {
        match self.0.lock() {
            Ok(mut g) => *g = fastrand::Rng::with_seed(seed),
            Err(p) => *p.into_inner() = fastrand::Rng::with_seed(seed),
        }
    }

    /// Up to `tries` distinct shards of `0..n`, uniformly at random, in the order to try them.
    pub fn choices(&self, n: u32, tries: usize) -> Vec<u32> {
        let n = n.max(1);
        let tries = tries.clamp(1, n as usize);
        let mut rng = match self.0.lock() {
            Ok(g) => g,
            Err(p) => p.into_inner(),
        };
        let first = rng.u32(0..n);
        let mut out = vec![first];
        // Each later choice is uniform over the shards not chosen yet.
        while out.len() < tries {
            let c = rng.u32(0..n);
            if !out.contains(&c) {
                out.push(c);
            }
        }
        out
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn shares_sum_to_the_total_and_differ_by_at_most_one() {
        for total in [1u64, 7, 8, 9, 100, 1_000, 12_345] {
            for n in 1..=17u32 {
                let s: Vec<u64> = (0..n).map(|i| share(total, n, i)).collect();
                assert_eq!(s.iter().sum::<u64>(), total, "total {total} n {n}");
                let (lo, hi) = (s.iter().min().unwrap(), s.iter().max().unwrap());
                assert!(hi - lo <= 1);
            }
        }
    }

    #[test]
    fn small_bursts_lower_the_shard_count() {
        assert_eq!(effective(8, &[3, 100]), 3);
        assert_eq!(effective(8, &[100, 5]), 5);
        assert_eq!(effective(8, &[100, 100]), 8);
        assert_eq!(effective(0, &[100]), 1);
    }

    #[test]
    fn auto_splits_by_the_write_budget() {
        let s = 1_000_000_000u128;
        assert_eq!(Shards::AUTO.wanted(800, s, 800), 1);
        assert_eq!(Shards::AUTO.wanted(801, s, 800), 2);
        assert_eq!(Shards::AUTO.wanted(10_000, s, 800), 13);
        assert_eq!(Shards::AUTO.wanted(60_000, 60 * s, 800), 2, "1,000/s");
        assert_eq!(Shards::AUTO.wanted(u64::MAX, 1, 1), MAX_SHARDS);
        assert_eq!(Shards::Fixed(0).wanted(1, s, 800), 1);
        assert_eq!(Shards::Fixed(4).wanted(1, s, 800), 4);
    }

    #[test]
    fn choices_are_distinct_reproducible_and_cover_every_shard() {
        let (a, b) = (Picker::seeded(7), Picker::seeded(7));
        let mut seen = [0u32; 8];
        for _ in 0..1_000 {
            let c = a.choices(8, TRIES);
            assert_eq!(c, b.choices(8, TRIES));
            assert_eq!(c.len(), 2);
            assert_ne!(c[0], c[1]);
            for i in c {
                seen[i as usize] += 1;
            }
        }
        assert!(seen.iter().all(|&k| k > 150), "{seen:?}");
        assert_eq!(Picker::seeded(1).choices(1, TRIES), vec![0]);
    }

    #[test]
    fn shards_parse_as_a_number_or_auto() {
        let n: Shards = serde_json::from_str("8").unwrap();
        assert_eq!(n, Shards::Fixed(8));
        let a: Shards = serde_json::from_str("\"auto\"").unwrap();
        assert_eq!(a, Shards::AUTO);
        assert!(serde_json::from_str::<Shards>("\"many\"").is_err());
    }
}
