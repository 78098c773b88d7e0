//! One region's scheduled pass (the `region-rebalancer` function, every few minutes): for each
//! global limit its ledger declares over this region, it measures the region's demand from its
//! regional bucket, renews the region's lease and reports the demand in one write, then runs the
//! [`Rebalancer`] on what it read — finishing the moves due here, reclaiming expired regions and
//! lowering this region's allotment toward a region short of its fair share (with hysteresis).
//!
//! Calls per pass: 1 `Query` of the declarations; per limit 1 `Query` of its ledger partition,
//! 1 `GetItem` of the regional bucket (this region's buckets table) and 1 `UpdateItem` (lease and
//! report), plus the saga's calls of each move it lowers (`UpdateItem` + `GetItem` + `PutItem`)
//! or raises (`GetItem` + `PutItem` when unrecorded + `GetItem` + `UpdateItem`), and, once
//! finished moves are old enough, a `DeleteItem` per record and one `UpdateItem` to prune them
//! ([`prune`]).

use std::time::Duration;

use aws_sdk_dynamodb::Client;
use serde::Serialize;

use super::allotment::Declared;
use super::declarations;
use super::demand::{Observed, Reported};
use super::error::RegionError;
use super::lease::{self, LeaseTerms};
use super::ledger::{read_all, read_region, LedgerStore, RegionRow};
use super::prune;
use super::rebalance::{again, Rebalancer};
use crate::clock::Timestamp;
use crate::dynamo::item::s;

/// How long a process uses an allotment it read, unless the deployment says otherwise: the
/// quarantine of each move includes it.
pub const DEFAULT_REFRESH: Duration = Duration::from_secs(5);

/// How many schedule intervals a lease outlives its renewal: a run may be late or missed (an
/// EventBridge schedule delivers at least once, within about a minute) without the region's
/// processes running out of allotment.
pub const LEASE_INTERVALS: u32 = 3;

/// Where a region's pass runs and how often.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Schedule {
    /// This region's name on the ledger (the function's `AWS_REGION`).
    pub region: String,
    /// The schedule's interval.
    pub every: Duration,
    /// How long this region's processes use an allotment they read.
    pub refresh: Duration,
    /// The largest difference between two regions' clocks the deployment assumes.
    pub clock_margin: Duration,
}

impl Schedule {
    /// A lease of [`LEASE_INTERVALS`] intervals, renewed every interval.
    pub fn terms(&self) -> LeaseTerms {
        LeaseTerms {
            lease: self.every * LEASE_INTERVALS,
            renew_every: self.every,
            clock_margin: self.clock_margin,
        }
    }
}

/// The regional buckets table, where this region's demand is measured.
#[derive(Debug, Clone)]
pub struct Buckets<'a> {
    pub client: &'a Client,
    pub table: &'a str,
    /// The table's key attribute (`kv::attr::BUCKET`: the key-value limits own the table).
    pub key: &'a str,
}

impl Buckets<'_> {
    /// 1 `GetItem` (eventually consistent: demand is a trend, not a right).
    async fn observe(&self, bucket: &str, now: Timestamp) -> Result<Observed, RegionError> {
        let out = self
            .client
            .get_item()
            .table_name(self.table)
            .key(self.key, s(bucket))
            .send()
            .await
            .map_err(|e| RegionError::Store {
                operation: "GetItem",
                message: aws_sdk_dynamodb::error::DisplayErrorContext(&e).to_string(),
            })?;
        Ok(Observed::from_bucket(out.item.as_ref(), now))
    }
}

/// What a pass did for one limit.
#[derive(Debug, Clone, Default, PartialEq, Eq, Serialize)]
#[serde(rename_all = "camelCase")]
pub struct LimitPass {
    pub limit: String,
    /// This region's demand as reported (spends per period).
    pub demand: u64,
    /// Moves to this region raised.
    pub raised: usize,
    /// Regions reclaimed into this one.
    pub reclaimed: Vec<String>,
    /// The move this region lowered, if any: `(to, amount)`.
    pub lowered: Option<(String, u64)>,
    /// Entries of finished moves removed from this region's outbox and inbox.
    pub pruned: usize,
    /// Why the limit was left as it was, when it failed.
    pub error: Option<String>,
}

/// What a pass did.
#[derive(Debug, Clone, Default, PartialEq, Eq, Serialize)]
#[serde(rename_all = "camelCase")]
pub struct Summary {
    pub region: String,
    pub limits: Vec<LimitPass>,
    /// Declarations that do not parse (each named; the others ran).
    pub malformed: Vec<String>,
}

/// The pass over every limit the ledger declares with this region among its regions. A failure
/// on one limit is reported in its [`LimitPass`] and the others still run; only a ledger that
/// cannot be read at all is an error.
pub async fn run<S: LedgerStore>(
    ledger: &S,
    buckets: &Buckets<'_>,
    schedule: &Schedule,
    now: Timestamp,
) -> Result<Summary, RegionError> {
    let (limits, malformed) = declarations::declared(ledger).await?;
    let mut summary = Summary {
        region: schedule.region.clone(),
        limits: Vec::new(),
        malformed: malformed.iter().map(ToString::to_string).collect(),
    };
    for limit in limits
        .iter()
        .filter(|d| d.regions.contains(&schedule.region))
    {
        let pass = match run_limit(ledger, buckets, schedule, limit, now).await {
            Ok(pass) => pass,
            Err(e) => LimitPass {
                limit: limit.bucket.clone(),
                error: Some(e.to_string()),
                ..LimitPass::default()
            },
        };
        summary.limits.push(pass);
    }
    Ok(summary)
}

/// One limit: measure, renew and report, rebalance.
pub async fn run_limit<S: LedgerStore>(
    ledger: &S,
    buckets: &Buckets<'_>,
    schedule: &Schedule,
    limit: &Declared,
    now: Timestamp,
) -> Result<LimitPass, RegionError> {
    let region = schedule.region.as_str();
    let terms = schedule.terms();
    let (mut rows, _) = read_all(ledger, &limit.bucket).await?;
    let own = rows
        .iter()
        .position(|r| r.region == region)
        .ok_or_else(|| RegionError::NoRegion {
            limit: limit.bucket.clone(),
            region: region.to_string(),
        })?;
    let observed = buckets.observe(&limit.bucket, now).await?;
    let report = Reported::measure(rows[own].reported.as_ref(), observed, limit.period);
    let (bucket, terms, report_ref) = (&limit.bucket, &terms, &report);
    let renew = |epoch: u64| {
        again(move || {
            lease::renew_reporting(ledger, bucket, region, epoch, now, terms, Some(report_ref))
        })
    };
    let (epoch, lease_until) = match renew(rows[own].epoch).await {
        Ok(until) => (rows[own].epoch, until),
        // Reclaimed while this region was away: rejoin with the epoch its item has now.
        Err(RegionError::Fenced { .. }) => {
            rows[own] = read_region(ledger, &limit.bucket, region).await?;
            (rows[own].epoch, renew(rows[own].epoch).await?)
        }
        Err(e) => return Err(e),
    };
    let me: &mut RegionRow = &mut rows[own];
    me.epoch = epoch;
    me.lease_until = lease_until;
    me.reported = Some(report);
    let demand = |r: &str| {
        rows.iter()
            .find(|row| row.region == r)
            .and_then(|row| row.reported)
            .map_or(0, |rep| rep.demand)
    };
    let rebalancer = Rebalancer::new(limit, region, schedule.refresh, *terms);
    let pass = rebalancer.run_on(ledger, &rows, demand, epoch, now).await?;
    let finished = prune::prunable(&rows, region, now, terms.clock_margin);
    let pruned = prune::prune(ledger, &limit.bucket, region, &finished).await?;
    Ok(LimitPass {
        limit: limit.bucket.clone(),
        demand: report.demand,
        raised: pass.raised,
        reclaimed: pass.reclaimed.into_iter().map(|m| m.from).collect(),
        lowered: pass.started.map(|m| (m.to, m.amount)),
        pruned,
        error: None,
    })
}
