//! Admission: [`NonFungibleLimiter::get_reservation`] is one conditional UpdateItem on one of the
//! coordinate's ledger shards (decision 0101). No row is written for an unbound reservation: the
//! ledger entry is the reservation, and it stops counting at its expiry.

use std::collections::BTreeSet;

use aws_sdk_dynamodb::operation::update_item::UpdateItemError;
use aws_sdk_dynamodb::types::{TransactWriteItem, Update};

use super::ledger::{expiry_secs, reserve_expr, seed_expr, Binding, Entries, Ledger, Plan, Prune};
use super::limiter::{attempt_of, update_attempt, Attempt, MAX_ATTEMPTS};
use super::shard::{self, shard_count, share, MAX_CAPACITY};
use super::view::{lock, Choice, SharedView, View};
use super::{NonFungibleLimiter, Reservation, ReservationError};
use crate::clock::Timestamp;
use crate::dynamo::item::n;
use crate::dynamo::retry::Backoff;
use crate::dynamo::txn;
use crate::error::{Error, Result};
use crate::interleave::Point;
use crate::limit::Effective;

/// The live rows of a coordinate without a ledger: their ledger entries, and the resource of
/// each bound one (rate-limiter-py's tokens).
#[derive(Clone, Default)]
struct LegacyRows {
    entries: Entries,
    tokens: Vec<(String, String)>,
}

/// Shards read fresh by this call: a refusal is answered only once every shard under the limit
/// has been, since releases elsewhere make the cached view stale.
#[derive(Default)]
struct Fresh {
    all: bool,
    some: BTreeSet<u32>,
}

impl Fresh {
    fn covers(&self, n: u32) -> bool {
        self.all || (0..n).all(|k| self.some.contains(&k))
    }
}

impl NonFungibleLimiter {
    /// Reserves one unit of (resource, account)'s capacity for the reservation TTL (5 min default).
    ///
    /// `default_limit` applies when no limit row exists; `limit <= 0` blocks; a limit above
    /// [`MAX_CAPACITY`] is refused ([`ReservationError::AboveCeiling`]). Exact under concurrency:
    /// the entry is added by one UpdateItem on one ledger shard whose condition is that shard's
    /// size under its share, and the shares sum to the limit. Expired entries seen in the shard are
    /// pruned in the same write (each conditioned on its old value).
    /// Calls: **1** warm, **2** cold, **3** on a coordinate's first use (its ledger is created,
    /// counting rows that exist without one; +1 per resource of rate-limiter-py tokens among them,
    /// whose ended marker is read after the creation), +1 per lost race or full shard met, +1 to
    /// confirm a cached refusal (a GetItem of the one shard, or a Query of them all).
    pub async fn get_reservation(
        &self,
        resource: &str,
        account: &str,
        default_limit: i64,
    ) -> Result<Reservation, ReservationError> {
        let coordinate = Self::coordinate(resource, account)?;
        let now = self.inner.clock.now();
        let mut fresh = Fresh::default();
        let (row, view) = match (
            self.inner.limits.cached(resource, account),
            self.cached_view(&coordinate),
        ) {
            (Some(row), Some(v)) => (row, v),
            (None, Some(v)) => (self.inner.limits.get(resource, account).await?, v),
            (row, None) => {
                fresh.some.insert(0);
                match row {
                    Some(row) => (row, self.read_shard(&coordinate, 0).await?),
                    None => self.read_cold(resource, account, &coordinate).await?,
                }
            }
        };
        let limit = match Effective::capacity(row.as_ref(), default_limit) {
            Effective::Blocked => return Err(ReservationError::Blocked { coordinate }),
            Effective::Limited { limit, .. } => limit,
        };
        if limit > MAX_CAPACITY {
            return Err(ReservationError::AboveCeiling {
                coordinate,
                limit,
                ceiling: MAX_CAPACITY,
            });
        }
        let n = shard_count(limit);
        let exp = expiry_secs(now.plus(self.inner.reservation_ttl));
        let pair = (resource, account);
        // Live rows of a coordinate without a ledger (read once, again if the ledger vanishes).
        let mut legacy: Option<LegacyRows> = None;
        for attempt in 0..MAX_ATTEMPTS {
            let without_ledger = lock(&view).without_ledger();
            let target = if without_ledger {
                // No ledger yet: shard 0 is created first, counting the live rows written without
                // one (by rate-limiter-py, before the switch), so they hold capacity until they
                // expire. One Query.
                let rows = match &legacy {
                    Some(e) => e.clone(),
                    None => {
                        let read = self.legacy_entries(&coordinate, now).await?;
                        self.inner
                            .interleave
                            .at(Point::ReserveAfterLegacyRead)
                            .await;
                        legacy.insert(read).clone()
                    }
                };
                let entries = rows.entries;
                if n > 1 && entries.len() as u64 >= share(0, limit) {
                    // More than shard 0 may hold: every shard they fill, in one transaction.
                    self.seed(&coordinate, &entries, limit, pair).await?;
                    self.release_ended_tokens(&coordinate, &entries, &rows.tokens)
                        .await?;
                    self.read_all(&coordinate, &view, &mut fresh).await?;
                    legacy = None;
                    continue;
                }
                let l = Ledger {
                    exists: false,
                    live: entries,
                };
                // Seen too, so that a refusal counts them.
                lock(&view).shards.insert(0, l.clone());
                Some((0, l))
            } else {
                let choice = lock(&view).choose(now, limit);
                match choice {
                    Choice::Shard(k) => Some((k, lock(&view).for_write(k))),
                    Choice::ReadAll => {
                        self.read_all(&coordinate, &view, &mut fresh).await?;
                        continue;
                    }
                    Choice::Full => None,
                }
            };
            let plan = target.and_then(|(k, l)| match l.plan(now, self.share_of(k, limit)) {
                Plan::Full { .. } => None,
                plan => Some((k, l, plan)),
            });
            let Some((k, ledger, plan)) = plan else {
                // Every shard is full as seen.
                if fresh.covers(n) {
                    return Err(ReservationError::Limited {
                        coordinate,
                        limit,
                        live: lock(&view).live(now),
                    });
                }
                if n == 1 {
                    self.reread(&coordinate, 0, &view, &mut fresh).await?;
                } else {
                    self.read_all(&coordinate, &view, &mut fresh).await?;
                }
                continue;
            };
            let prune = match plan {
                Plan::PruneFirst(prune) => {
                    self.prune(&coordinate, k, &prune).await?;
                    self.reread(&coordinate, k, &view, &mut fresh).await?;
                    continue;
                }
                Plan::Reserve(prune) => prune,
                Plan::Full { .. } => unreachable!("full shards are never planned"),
            };
            let id = shard::reservation_id(&uuid::Uuid::new_v4().to_string(), k);
            let share_k = self.share_of(k, limit);
            let admitted = match self
                .try_reserve(&coordinate, k, &id, exp, &ledger, &prune, share_k, pair)
                .await?
            {
                Attempt::Done(()) => {
                    let created = !ledger.exists;
                    let seeded = ledger.live.clone();
                    // Into the shard as the view has it now: other tasks of this process may have
                    // added entries since `ledger` was copied, and overwriting would lose them.
                    lock(&view)
                        .shards
                        .entry(k)
                        .or_insert(ledger)
                        .admitted(&prune, &id, exp);
                    if let (true, Some(rows)) = (created, &legacy) {
                        self.release_ended_tokens(&coordinate, &seeded, &rows.tokens)
                            .await?;
                    }
                    true
                }
                Attempt::Failed(actual) => {
                    let l = Ledger::parse(&self.inner.table, actual.as_ref())?;
                    if k == 0 && !l.exists {
                        // A ledger that vanished is rebuilt from the rows, as on first use.
                        legacy = None;
                    }
                    fresh.some.insert(k);
                    // Holding our entry means our own write applied and its answer was lost: the
                    // SDK re-sent it and the retry failed on what the first attempt wrote. The id
                    // is a fresh uuid, so the entry is ours.
                    let mine = l.holds(&id, exp);
                    lock(&view).shards.insert(k, l);
                    if let (true, false, Some(rows)) = (mine, ledger.exists, &legacy) {
                        self.release_ended_tokens(&coordinate, &ledger.live, &rows.tokens)
                            .await?;
                    }
                    mine
                }
                Attempt::Retry => {
                    Backoff::CONDITIONAL.wait(attempt).await;
                    continue;
                }
            };
            if admitted {
                return Ok(Reservation {
                    limiter: self.clone(),
                    resource: resource.to_string(),
                    account: account.to_string(),
                    coordinate,
                    id,
                    expires_at: Some(Timestamp::from_secs(exp)),
                });
            }
        }
        Err(Error::contended(coordinate, MAX_ATTEMPTS).into())
    }

    /// Shard `k`'s share of `limit`, as admission plans and conditions it (one more under the
    /// simulation's `ReservationOverShare` mutation, which compiles away without the feature).
    fn share_of(&self, k: u32, limit: u64) -> u64 {
        let over = crate::mutation::active_on(
            &self.inner.table,
            crate::mutation::Mutation::ReservationOverShare,
        );
        share(k, limit) + u64::from(over)
    }

    /// The live rows of a coordinate without a ledger, as ledger entries.
    async fn legacy_entries(&self, coordinate: &str, now: Timestamp) -> Result<LegacyRows> {
        let mut out = LegacyRows::default();
        let rows = self.list_rows(coordinate, now).await?;
        // None counted under the simulation's `LegacyRowsUncounted` mutation (compiles away
        // without the feature).
        let uncounted = crate::mutation::active_on(
            &self.inner.table,
            crate::mutation::Mutation::LegacyRowsUncounted,
        );
        if uncounted {
            return Ok(out);
        }
        for row in rows {
            if let (true, Some(e)) = (row.live, row.expiration_time) {
                if let Some(resource) = row.resource_id {
                    out.tokens.push((row.reservation_id.clone(), resource));
                }
                out.entries.insert(row.reservation_id, (e, n(e)));
            }
        }
        Ok(out)
    }

    /// After a ledger was created holding `seeded` (rows read before it existed), releases the
    /// tokens among them whose resource has ended: the remover marks a resource ended before it
    /// looks for its tokens, so one whose release found no ledger yet (and deleted the row) has
    /// its marker read here, after the creation. One strongly consistent GetItem per resource of
    /// those tokens, +1 UpdateItem per token released; only when a coordinate's ledger is created
    /// over rate-limiter-py's tokens.
    async fn release_ended_tokens(
        &self,
        coordinate: &str,
        seeded: &Entries,
        tokens: &[(String, String)],
    ) -> Result<()> {
        let resources: BTreeSet<&str> = tokens.iter().map(|(_, r)| r.as_str()).collect();
        for resource in resources {
            if !self.has_ended(resource).await? {
                continue;
            }
            for (id, _) in tokens.iter().filter(|(_, r)| r == resource) {
                if let Some((exp, _)) = seeded.get(id) {
                    // The entry as seeded: a legacy token's binding is its expiry (no bind id).
                    let binding = Binding { exp: *exp, id: 0 };
                    self.release_binding(coordinate, id, binding).await?;
                }
            }
        }
        Ok(())
    }

    /// Creates the shards `legacy` fills (fill-first, any excess in the last one written) in one
    /// TransactWriteItems, each only if it does not exist. 1 call (2 WCU per shard).
    async fn seed(
        &self,
        coordinate: &str,
        legacy: &Entries,
        limit: u64,
        pair: (&str, &str),
    ) -> Result<()> {
        let a = self.inner.attrs;
        let mut items = Vec::new();
        let mut entries = legacy.iter().peekable();
        let mut k = 0;
        while entries.peek().is_some() {
            // At most 100 items per transaction: the 100th shard takes whatever is left.
            let take = if k + 1 >= shard_count(limit).min(100) {
                usize::MAX
            } else {
                share(k, limit) as usize
            };
            let part: Entries = entries
                .by_ref()
                .take(take)
                .map(|(id, v)| (id.clone(), v.clone()))
                .collect();
            let e = seed_expr(&part, (a.resource_name, a.account_id), pair);
            let update = Update::builder()
                .table_name(&self.inner.table)
                .set_key(Some(self.key(coordinate, &shard::sort_key(k))))
                .update_expression(e.update)
                .condition_expression(e.condition)
                .set_expression_attribute_names(Some(e.names))
                .set_expression_attribute_values(Some(e.values))
                .build()
                .map_err(|e| Error::build_request("TransactWriteItems", e))?;
            items.push(TransactWriteItem::builder().update(update).build());
            k += 1;
        }
        // Cancelled: another caller created a ledger meanwhile; the caller reads what is there.
        txn::send(&self.inner.client, items).await?;
        Ok(())
    }

    /// The view of the coordinate's shards from one strongly consistent Query of them all (one
    /// call per page), stored in `view` (complete: unlisted shards do not exist).
    async fn read_all(&self, coordinate: &str, view: &SharedView, fresh: &mut Fresh) -> Result<()> {
        let read = self.read_shards(coordinate).await?;
        *lock(view) = read;
        fresh.all = true;
        Ok(())
    }

    /// Shard `k` read again (1 strongly consistent GetItem) into `view`.
    async fn reread(
        &self,
        coordinate: &str,
        k: u32,
        view: &SharedView,
        fresh: &mut Fresh,
    ) -> Result<()> {
        let l = self.read_ledger(coordinate, k).await?;
        lock(view).shards.insert(k, l);
        fresh.some.insert(k);
        Ok(())
    }

    fn cached_view(&self, coordinate: &str) -> Option<SharedView> {
        self.inner.ledgers.get(coordinate)
    }

    /// The live reservations and tokens of a coordinate as this process last saw its ledger
    /// (`None`: not seen), for an answer's remaining capacity. No call; after a reservation this
    /// process admitted, it counts that one.
    pub fn seen_live(&self, coordinate: &str) -> Option<u64> {
        let now = self.inner.clock.now();
        self.cached_view(coordinate).map(|v| lock(&v).live(now))
    }

    /// Shard `k`'s view from one strongly consistent GetItem, cached as the coordinate's view.
    async fn read_shard(&self, coordinate: &str, k: u32) -> Result<SharedView> {
        let l = self.read_ledger(coordinate, k).await?;
        Ok(self.remember(coordinate, View::of_shard(k, l)))
    }

    /// The admission write: 1 UpdateItem on shard `k` ([`reserve_expr`], `limit` its share). A
    /// failed condition hands back the shard as it is (ALL_OLD), from which the caller decides again
    /// without a read.
    #[allow(clippy::too_many_arguments)]
    async fn try_reserve(
        &self,
        coordinate: &str,
        k: u32,
        id: &str,
        exp: i64,
        ledger: &Ledger,
        prune: &Prune,
        limit: u64,
        pair: (&str, &str),
    ) -> Result<Attempt<()>> {
        let a = self.inner.attrs;
        let e = reserve_expr(
            ledger,
            prune,
            id,
            exp,
            limit,
            (a.resource_name, a.account_id),
            pair,
        );
        let req = self
            .update_row(coordinate, &shard::sort_key(k))
            .update_expression(e.update)
            .condition_expression(e.condition)
            .set_expression_attribute_names(Some(e.names))
            .set_expression_attribute_values(Some(e.values));
        update_attempt(req).await
    }

    /// Removes expired entries of shard `k` (each conditioned on its old value). 1 UpdateItem.
    async fn prune(&self, coordinate: &str, k: u32, prune: &Prune) -> Result<()> {
        if prune.is_empty() {
            return Ok(());
        }
        let mut req = self
            .update_row(coordinate, &shard::sort_key(k))
            .expression_attribute_names("#live", super::LEDGER_MAP);
        let mut removes = Vec::new();
        let mut cond = Vec::new();
        for (i, (k, raw)) in prune.iter().enumerate() {
            req = req
                .expression_attribute_names(format!("#x{i}"), k)
                .expression_attribute_values(format!(":x{i}"), raw.clone());
            removes.push(format!("#live.#x{i}"));
            cond.push(format!("#live.#x{i} = :x{i}"));
        }
        let sent = req
            .update_expression(format!("REMOVE {}", removes.join(", ")))
            .condition_expression(cond.join(" AND "))
            .send()
            .await;
        match sent {
            // A failed condition: someone else pruned or changed them; the caller re-reads.
            Ok(_) => Ok(()),
            Err(err) => match attempt_of("UpdateItem", err, |e| {
                matches!(e, UpdateItemError::ConditionalCheckFailedException(_)).then_some(None)
            })? {
                Attempt::Done(()) | Attempt::Failed(_) => Ok(()),
                Attempt::Retry => {
                    Backoff::CONDITIONAL.wait(0).await;
                    Ok(())
                }
            },
        }
    }
}
