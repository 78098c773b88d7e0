//! Sharded GCRA limits (decision 1500): a limit declared `shards: N` (or `auto`) is N buckets, each
//! its own item and partition key, each with an exact share of the burst and the rate. A spend tries
//! up to [`TRIES`] distinct shards chosen at random and is refused only when all of them refuse.

use super::super::config::{BucketKey, LimitSet};
use super::outcome::{KvError, Outcome};
use super::spend::Op;
use super::state::{Limiter, Located};
use crate::clock::Timestamp;
use crate::config::{ConfigError, Vars};
use crate::gcra::{self, Decision, Rate, RateError};
use crate::gcra_write::{self};
use crate::shard::{self, share, TRIES};
use std::time::Duration;

/// `TURNSTILE_ITEM_WRITE_BUDGET` (writes per second per item behind `shards: auto`), default 800.
pub fn item_write_budget(vars: &Vars) -> Result<u64, ConfigError> {
    match vars.parse::<u64>(
        shard::ITEM_WRITE_BUDGET_VAR,
        "a whole number of writes per second",
    )? {
        Some(0) => Err(ConfigError::Invalid {
            var: shard::ITEM_WRITE_BUDGET_VAR.into(),
            value: "0".into(),
            reason: "expected at least 1 write per second".into(),
        }),
        Some(b) => Ok(b),
        None => Ok(shard::DEFAULT_ITEM_WRITE_BUDGET),
    }
}

impl Limiter {
    /// The writes per second one item may take before a `shards: auto` limit is split.
    pub fn with_item_write_budget(mut self, writes_per_second: u64) -> Self {
        self.item_write_budget = writes_per_second.max(1);
        self
    }

    /// Seeds the random shard choices (tests and the simulation: reproducible runs).
    pub fn with_shard_seed(mut self, seed: u64) -> Self {
        self.picker = shard::Picker::seeded(seed);
        self
    }

    /// How many shards `bucket` is spread over: its declared `shards` (fixed, or from the item write
    /// budget), lowered so each shard holds at least one token of burst and of count.
    pub fn shard_count(&self, set: &LimitSet, bucket: &BucketKey, rate: &Rate) -> u32 {
        let wanted =
            set.shards(bucket)
                .wanted(rate.count, rate.period.as_nanos(), self.item_write_budget);
        shard::effective(wanted, &[rate.burst, rate.count])
    }

    /// Shard `i` of `n`'s rate: its share of the burst and of the count, over the same period.
    pub fn shard_rate(rate: &Rate, n: u32, i: u32) -> Result<Rate, RateError> {
        Rate::new(
            share(rate.burst, n, i),
            share(rate.count, n, i),
            rate.period,
        )
    }

    /// Shard `i`'s item key, `{nameId}/{i}:{id}` (after `{tenant}:` when scoped): the shard number
    /// sits before the `:` that ends the name number, where no id can reach, so it never collides
    /// with an unsharded bucket `{nameId}:{id}`.
    pub fn shard_key(bucket: &BucketKey, i: u32) -> String {
        match &bucket.scope {
            Some(t) => format!("{t}:{}/{i}:{}", bucket.name_id, bucket.id),
            None => format!("{}/{i}:{}", bucket.name_id, bucket.id),
        }
    }

    /// The items a write of `cost` on a limit of `n` > 1 shards tries: up to [`TRIES`] distinct
    /// shards chosen at random, each with its share of the rate. A spend (`spend`) of more than
    /// the smallest share (the last shard's, which bounds what every shard can admit at once) is
    /// refused.
    pub(super) fn candidates(
        &self,
        at: &Located,
        cost: u64,
        spend: bool,
    ) -> Result<Vec<(String, Rate)>, KvError> {
        let (rate, n) = (at.rate, at.shards);
        let smallest = share(rate.burst, n, n - 1);
        if spend && cost > smallest {
            return Err(RateError::CostOverBurst {
                cost,
                burst: smallest,
            }
            .into());
        }
        let mut c = Vec::with_capacity(TRIES);
        for i in self.picker.choices(n, TRIES) {
            c.push((
                Self::shard_key(&at.bucket, i),
                Self::shard_rate(&rate, n, i)?,
            ));
        }
        Ok(c)
    }

    /// A spend on a limit of `n` > 1 shards. DynamoDB calls: **1** `UpdateItem` when the first
    /// shard tried admits (warm; ≤ 2 cold), **2** when it refuses and the second decides (warm),
    /// so a refusal costs **2** calls and 2 WCU (two failed conditional writes), ≤ 4 cold. A shard
    /// that DynamoDB throttles counts as refusing; if every shard tried was throttled the throttle
    /// error is returned. The outcome is the admitting shard's, or the refusal with the shortest
    /// `retry_in` (numbers are per shard: `rate` is the shard's share).
    pub(super) async fn spend_sharded(
        &self,
        at: &Located,
        cost: u64,
        now: Timestamp,
    ) -> Result<Outcome, KvError> {
        let mut refused: Option<Outcome> = None;
        let mut throttled = None;
        for (key, shard_rate) in self.candidates(at, cost, true)? {
            let item = (key.as_str(), shard_rate);
            match self
                .write_item(Op::Spend, &at.bucket, item, cost, now)
                .await
            {
                Ok(o) if o.decision.allowed => return Ok(o),
                Ok(o) => {
                    if refused
                        .as_ref()
                        .is_none_or(|r| o.decision.retry_in < r.decision.retry_in)
                    {
                        refused = Some(o);
                    }
                }
                Err((e, true)) => {
                    throttled.get_or_insert(e);
                }
                Err((e, false)) => return Err(e),
            }
        }
        match (refused, throttled) {
            (Some(o), _) => Ok(o),
            (None, Some(e)) => Err(e),
            (None, None) => Err(KvError::Contended(at.bucket.key())),
        }
    }

    /// A refund on a sharded limit: given back to the first of [`TRIES`] random shards that is not
    /// full (each shard stays within its share, so the whole stays within the limit). DynamoDB
    /// calls: **1** `UpdateItem` warm, **2** when the first shard is full.
    pub(super) async fn refund_sharded(
        &self,
        at: &Located,
        cost: u64,
        now: Timestamp,
    ) -> Result<Outcome, KvError> {
        let mut last = None;
        for (key, shard_rate) in self.candidates(at, cost, false)? {
            let item = (key.as_str(), shard_rate);
            let o = self
                .write_item(Op::Refund, &at.bucket, item, cost, now)
                .await
                .map_err(|(e, _)| e)?;
            if o.decision.allowed {
                return Ok(o);
            }
            last = Some(o);
        }
        last.ok_or_else(|| KvError::Contended(at.bucket.key()))
    }

    /// A check on a sharded limit: every shard read (**n** strongly consistent `GetItem`s), the
    /// whole limit's numbers summed: `remaining` over all shards, allowed when some shard could take
    /// `cost` now (a spend tries only [`TRIES`] of them), `retry_in` the soonest, `reset_in` the
    /// latest. `rate` is the whole limit's.
    pub(super) async fn check_sharded(
        &self,
        at: &Located,
        cost: u64,
        now: Timestamp,
    ) -> Result<Outcome, KvError> {
        let (bucket, rate, n) = (&at.bucket, at.rate, at.shards);
        let mut sum = Decision {
            allowed: false,
            remaining: 0,
            retry_in: Duration::MAX,
            reset_in: Duration::ZERO,
            new_tat: now,
        };
        for i in 0..n {
            let shard_rate = Self::shard_rate(&rate, n, i)?;
            let key = Self::shard_key(bucket, i);
            let tat =
                gcra_write::stored_tat(self.read(&key).await?.as_ref(), gcra_write::attr::TAT);
            self.remember(&key, tat);
            let d = gcra::spend(&shard_rate, tat, now, cost.min(shard_rate.burst))?;
            let fits = cost <= shard_rate.burst;
            let left = gcra::spend(&shard_rate, tat, now, 0)?;
            sum.allowed |= d.allowed && fits;
            sum.remaining += left.remaining;
            if fits {
                sum.retry_in = sum.retry_in.min(d.retry_in);
            }
            sum.reset_in = sum.reset_in.max(d.reset_in);
        }
        if sum.retry_in == Duration::MAX {
            return Err(RateError::CostOverBurst {
                cost,
                burst: share(rate.burst, n, 0),
            }
            .into());
        }
        Ok(Self::outcome(bucket, rate, sum))
    }

    /// Deletes every shard of a sharded bucket (and the unsharded item, should the limit have been
    /// unsharded before). DynamoDB calls: `n + 1` `DeleteItem`.
    pub(super) async fn reset_shards(&self, bucket: &BucketKey, n: u32) -> Result<(), KvError> {
        let keys = (0..n)
            .map(|i| Self::shard_key(bucket, i))
            .chain([bucket.key()]);
        for key in keys {
            self.delete_bucket(&key).await?;
        }
        Ok(())
    }
}

#[cfg(test)]
mod tests {
    use crate::kv::LimitSet;
    use crate::shard::Shards;

    #[test]
    fn the_limits_file_takes_shards_and_refuses_bad_counts_with_their_line() {
        let src = "names:\n  A: { id: 1, format: string }\ndefaults:\n  A: { burst: 8, count: 8, period: 1s, shards: 4 }\noverrides:\n  A:x: { burst: 8, count: 8, period: 1s }\n  A:y: { burst: 8, count: 8, period: 1s, shards: auto }\n";
        let set = LimitSet::from_yaml(src).unwrap();
        let shards = |id: &str| set.shards(&set.bucket("A", id).unwrap());
        assert_eq!(shards("z"), Shards::Fixed(4), "the default's");
        assert_eq!(
            shards("x"),
            Shards::Fixed(1),
            "an override without shards is one item"
        );
        assert_eq!(shards("y"), Shards::AUTO);
        for (bad, why) in [
            ("0", "shards must be 1..=4096 or auto"),
            ("5000", "shards must be"),
        ] {
            let src = format!("names:\n  A: {{ id: 1, format: string }}\ndefaults:\n  A: {{ burst: 8, count: 8, period: 1s, shards: {bad} }}\n");
            let e = LimitSet::from_yaml(&src).unwrap_err();
            assert_eq!(e.problems()[0].line, 4, "{e}");
            assert!(e.to_string().contains(why), "{e}");
        }
        let e = LimitSet::from_yaml("names:\n  A: { id: 1, format: string }\ndefaults:\n  A: { burst: 8, count: 8, period: 1s, shards: many }\n").unwrap_err();
        assert!(!e.problems().is_empty());
    }
}
