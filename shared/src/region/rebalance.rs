//! The rebalancer of one region, off the request path (a scheduled function, or the CLI by hand):
//! it finishes the moves due to its region, reclaims regions whose lease ran out, and starts the
//! move the policy asks of its region. Every ledger write is sent again, up to [`TRIES`] times,
//! while it fails with a replicated write conflict or no answer: each step is idempotent.

use std::future::Future;
use std::time::Duration;

use super::allotment::Declared;
use super::error::RegionError;
use super::lease::{self, LeaseTerms, Reclaim};
use super::ledger::{new_move_id, Entry, LedgerStore, RegionRow};
use super::policy::{plan, Hysteresis, Order, Standing};
use super::saga::{self, Move, Raised};
use crate::clock::Timestamp;

/// How many times one step is sent.
pub const TRIES: usize = 3;

/// Sends `step` until it succeeds, fails for a reason a resend cannot change, or `TRIES` are spent.
pub async fn again<T, F, Fut>(mut step: F) -> Result<T, RegionError>
where
    F: FnMut() -> Fut,
    Fut: Future<Output = Result<T, RegionError>>,
{
    let mut out = step().await;
    for _ in 1..TRIES {
        match &out {
            Err(RegionError::Conflict { .. } | RegionError::Store { .. }) => out = step().await,
            _ => break,
        }
    }
    out
}

/// One region's rebalancer for one global limit.
#[derive(Debug, Clone)]
pub struct Rebalancer<'a> {
    pub limit: &'a Declared,
    pub region: &'a str,
    pub terms: LeaseTerms,
    pub hysteresis: Hysteresis,
    /// How long a lowered amount stays unused ([`saga::quarantine`]).
    pub quarantine: Duration,
}

/// What one pass did.
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub struct Pass {
    pub raised: usize,
    pub reclaimed: Vec<Move>,
    pub started: Option<Move>,
}

impl<'a> Rebalancer<'a> {
    /// A rebalancer whose processes refresh their allotment every `refresh`.
    pub fn new(limit: &'a Declared, region: &'a str, refresh: Duration, terms: LeaseTerms) -> Self {
        Rebalancer {
            limit,
            region,
            terms,
            hysteresis: Hysteresis::default(),
            quarantine: saga::quarantine(limit, refresh, terms.clock_margin),
        }
    }

    /// How long past its lease a region may still be deciding: the clock margin, and the
    /// overdraw time in bounded mode.
    pub fn grace(&self) -> Duration {
        self.terms.clock_margin + self.limit.overdraw_for()
    }

    /// Records and raises the moves to this region whose release has come (a crash between
    /// steps leaves them behind). Returns how many it raised.
    pub async fn finish_incoming<S: LedgerStore>(
        &self,
        store: &S,
        rows: &[RegionRow],
        now: Timestamp,
    ) -> usize {
        let bucket = &self.limit.bucket;
        let mut raised = 0;
        for (id, entry) in saga::in_transit(rows) {
            if entry.to != self.region || now < entry.release_at {
                continue;
            }
            if again(|| saga::record(store, bucket, &entry.from, &id))
                .await
                .is_ok()
                && again(|| saga::raise(store, bucket, &id, now)).await.ok() == Some(Raised::Now)
            {
                raised += 1;
            }
        }
        raised
    }

    /// Reclaims, into this region, every region whose lease plus the grace is past — only while
    /// this region's own lease is current. Each reclaim's move is recorded; it is raised by
    /// [`finish_incoming`](Self::finish_incoming) once released.
    pub async fn reclaim_expired<S: LedgerStore>(
        &self,
        store: &S,
        rows: &[RegionRow],
        now: Timestamp,
    ) -> Vec<Move> {
        let bucket = &self.limit.bucket;
        let own_lease = rows
            .iter()
            .any(|row| row.region == self.region && now < row.lease_until);
        if !own_lease {
            return Vec::new();
        }
        let moving = saga::in_transit(rows);
        let mut taken = Vec::new();
        for row in rows {
            if row.region == self.region || now <= row.lease_until.plus(self.grace()) {
                continue;
            }
            let what = Reclaim {
                region: &row.region,
                to: self.region,
                grace: self.grace(),
                period: self.limit.period,
            };
            if let Ok(Some(mv)) = again(|| lease::reclaim(store, bucket, &what, now, &moving)).await
            {
                let _ = again(|| saga::record(store, bucket, &mv.from, &mv.id)).await;
                taken.push(mv);
            }
        }
        taken
    }

    /// Each region as the policy sees it: its allotment plus what is in transit to it, its
    /// reported demand, and whether its lease (plus the grace) is current.
    pub fn standings(
        &self,
        rows: &[RegionRow],
        demand: impl Fn(&str) -> u64,
        now: Timestamp,
    ) -> Vec<Standing> {
        let moving: Vec<(String, Entry)> = saga::in_transit(rows);
        rows.iter()
            .map(|row| {
                let incoming: u64 = moving
                    .iter()
                    .filter(|(_, e)| e.to == row.region)
                    .map(|(_, e)| e.amount)
                    .sum();
                Standing {
                    region: row.region.clone(),
                    allotment: row.allotment + incoming,
                    demand: demand(&row.region),
                    live: now <= row.lease_until.plus(self.grace()),
                }
            })
            .collect()
    }

    /// The move the policy asks of this region (`None` when it asks another region to give).
    pub fn order(&self, standings: &[Standing]) -> Option<Order> {
        plan(standings, &self.hysteresis).filter(|o| o.from == self.region)
    }

    /// Step 1 of `order`, this region giving: lowers its allotment (the caller's processes must
    /// already decide with the lowered amount, or within their refresh, which the quarantine
    /// covers). `epoch` is this region's as last read.
    pub async fn lower<S: LedgerStore>(
        &self,
        store: &S,
        order: Order,
        epoch: u64,
        now: Timestamp,
    ) -> Result<Move, RegionError> {
        let mv = Move {
            limit: self.limit.bucket.clone(),
            id: new_move_id(),
            from: order.from,
            to: order.to,
            amount: order.amount,
        };
        let release_at = now.plus(self.quarantine);
        again(|| saga::lower(store, &mv, epoch, release_at)).await?;
        Ok(mv)
    }

    /// Step 2 of a move this region lowered.
    pub async fn record<S: LedgerStore>(&self, store: &S, mv: &Move) -> Result<(), RegionError> {
        again(|| saga::record(store, &mv.limit, &mv.from, &mv.id))
            .await
            .map(|_| ())
    }

    /// One pass: finish what is due here, reclaim the expired, start the move the policy asks of
    /// this region. Reads the ledger once (a `Query`), then the calls of each step.
    pub async fn run_once<S: LedgerStore>(
        &self,
        store: &S,
        demand: impl Fn(&str) -> u64,
        epoch: u64,
        now: Timestamp,
    ) -> Result<Pass, RegionError> {
        let (rows, _) = super::ledger::read_all(store, &self.limit.bucket).await?;
        self.run_on(store, &rows, demand, epoch, now).await
    }

    /// [`run_once`](Self::run_once) on region rows the caller has just read (and, for its own
    /// region, just renewed): the calls of each step, no read of its own.
    pub async fn run_on<S: LedgerStore>(
        &self,
        store: &S,
        rows: &[RegionRow],
        demand: impl Fn(&str) -> u64,
        epoch: u64,
        now: Timestamp,
    ) -> Result<Pass, RegionError> {
        let raised = self.finish_incoming(store, rows, now).await;
        let reclaimed = self.reclaim_expired(store, rows, now).await;
        let mut started = None;
        if let Some(order) = self.order(&self.standings(rows, demand, now)) {
            let mv = self.lower(store, order, epoch, now).await?;
            self.record(store, &mv).await?;
            started = Some(mv);
        }
        Ok(Pass {
            raised,
            reclaimed,
            started,
        })
    }
}
