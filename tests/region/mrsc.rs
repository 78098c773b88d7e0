//! The ledger as the simulation sees it: the real ledger table on DynamoDB Local behind a model
//! of multi-Region strong consistency. Each region reaches it through its own [`Mrsc`] handle;
//! the model adds what DynamoDB Local lacks:
//!
//! - cross-region latency: a write occupies its item for `latency` of simulated time, and a
//!   write from another region landing inside that window is refused with
//!   `ReplicatedWriteConflictException` (changing nothing), as MRSC refuses overlapping writes;
//! - partitions: a region cut off from the ledger gets a store error for every call;
//! - lost answers: a write applied whose answer never arrives (the caller sees a store error and
//!   retries, which the saga's idempotency must absorb);
//! - injected conflicts: an overlapping write from a process the simulation does not run.
//!
//! It has no transactions and no TTL to offer: [`shared::region::LedgerStore`] has neither.

use std::collections::{HashMap, HashSet};
use std::sync::{Arc, Mutex};
use std::time::Duration;

use shared::clock::{Clock, ManualClock, Timestamp};
use shared::dynamo::item::Item;
use shared::region::ledger::{read_all, LedgerKey, Write, Written};
use shared::region::{DynamoLedger, LedgerStore, RegionError};

use super::oracle::sum_violation;

/// What the model knows and which faults are on; shared by every region's handle.
#[derive(Debug, Default)]
pub struct Net {
    /// Per item: the region that wrote it last and until when its write is in flight.
    pub in_flight: HashMap<LedgerKey, (String, Timestamp)>,
    pub partitioned: HashSet<String>,
    /// Per mille of writes whose answer is lost after they applied.
    pub lose_answer_permille: u32,
    /// Per mille of writes refused as overlapping a write the simulation does not run.
    pub conflict_permille: u32,
    pub rng: Option<fastrand::Rng>,
    pub conflicts: u64,
    pub lost_answers: u64,
    /// The limit's total, and what the oracle found after each applied write: the allotments'
    /// sum is judged after every write, not only between the schedule's steps.
    pub total: u64,
    pub violations: Vec<String>,
}

impl Net {
    fn roll(&mut self, permille: u32) -> bool {
        permille > 0 && self.rng.as_mut().is_some_and(|r| r.u32(0..1000) < permille)
    }
}

/// One region's handle on the ledger.
#[derive(Debug, Clone)]
pub struct Mrsc {
    pub inner: DynamoLedger,
    pub region: String,
    pub net: Arc<Mutex<Net>>,
    /// Simulated real time (not the region's skewed clock).
    pub real: ManualClock,
    pub latency: Duration,
}

impl Mrsc {
    fn net(&self) -> std::sync::MutexGuard<'_, Net> {
        match self.net.lock() {
            Ok(g) => g,
            Err(p) => p.into_inner(),
        }
    }

    fn cut_off(&self, operation: &'static str) -> Result<(), RegionError> {
        if self.net().partitioned.contains(&self.region) {
            return Err(RegionError::Store {
                operation,
                message: format!("{} is partitioned from the ledger", self.region),
            });
        }
        Ok(())
    }
}

impl LedgerStore for Mrsc {
    async fn get(&self, key: &LedgerKey) -> Result<Option<Item>, RegionError> {
        self.cut_off("GetItem")?;
        self.inner.get(key).await
    }

    async fn items(&self, limit: &str) -> Result<Vec<Item>, RegionError> {
        self.cut_off("Query")?;
        self.inner.items(limit).await
    }

    async fn write(&self, w: Write) -> Result<Written, RegionError> {
        self.cut_off("UpdateItem")?;
        let now = self.real.now();
        let lose = {
            let mut net = self.net();
            let overlapping = net
                .in_flight
                .get(&w.key)
                .is_some_and(|(who, until)| *who != self.region && now < *until);
            let permille = net.conflict_permille;
            let injected = net.roll(permille);
            if overlapping || injected {
                net.conflicts += 1;
                return Err(RegionError::Conflict {
                    item: w.key.to_string(),
                });
            }
            let permille = net.lose_answer_permille;
            net.roll(permille)
        };
        let key = w.key.clone();
        let out = self.inner.write(w).await?;
        if out == Written::Applied {
            let judged = match read_all(&self.inner, &key.limit).await {
                Ok((rows, _)) => sum_violation(&rows, self.net().total),
                Err(e) => Some(format!("ledger unreadable: {e}")),
            };
            if let Some(v) = judged {
                self.net()
                    .violations
                    .push(format!("after a write to {key}: {v}"));
            }
            // An applied write holds its item while it replicates; a refused one never left.
            self.net()
                .in_flight
                .insert(key, (self.region.clone(), now.plus(self.latency)));
        }
        if lose {
            self.net().lost_answers += 1;
            return Err(RegionError::Store {
                operation: "UpdateItem",
                message: "answer lost after the write applied".into(),
            });
        }
        Ok(out)
    }
}
