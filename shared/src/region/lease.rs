//! Leases: a region's allotment is good only until `leaseUntil`, which the region renews on its
//! own item. A region that stops renewing is *reclaimed* once its lease plus a grace (the clock
//! margin, and in bounded mode the overdraw time) is behind the reclaimer's clock: step 1 of a
//! move performed on its behalf, which also bumps its epoch so a late renewal is refused.

use std::collections::HashMap;
use std::time::Duration;

use super::demand::Reported;
use super::error::RegionError;
use super::ledger::{attr, read_region, Change, Entry, LedgerKey, LedgerStore, Write, Written};
use super::saga::Move;
use crate::clock::Timestamp;
use crate::dynamo::item::n;

/// How long a lease runs and how often it is renewed, and the clock margin between regions.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct LeaseTerms {
    pub lease: Duration,
    pub renew_every: Duration,
    /// The largest difference between two regions' clocks this deployment assumes.
    pub clock_margin: Duration,
}

impl Default for LeaseTerms {
    fn default() -> Self {
        LeaseTerms {
            lease: Duration::from_secs(30),
            renew_every: Duration::from_secs(10),
            clock_margin: Duration::from_secs(2),
        }
    }
}

/// Extends `region`'s lease to `now + lease` if its epoch is still `epoch`. 1 `UpdateItem`.
/// `Fenced`: the region was reclaimed and must read its item again (its allotment is then 0).
pub async fn renew<S: LedgerStore>(
    store: &S,
    limit: &str,
    region: &str,
    epoch: u64,
    now: Timestamp,
    terms: &LeaseTerms,
) -> Result<Timestamp, RegionError> {
    renew_reporting(store, limit, region, epoch, now, terms, None).await
}

/// [`renew`], writing the region's demand `report` in the same `UpdateItem` (the scheduled
/// rebalancer reports and renews at once: one write per pass). A report touches no allotment,
/// lease or epoch another writer conditions on, so it changes no argument of decision 4200.
pub async fn renew_reporting<S: LedgerStore>(
    store: &S,
    limit: &str,
    region: &str,
    epoch: u64,
    now: Timestamp,
    terms: &LeaseTerms,
    report: Option<&Reported>,
) -> Result<Timestamp, RegionError> {
    let until = now.plus(terms.lease);
    let mut w = Write {
        key: LedgerKey::region(limit, region),
        change: Change::Update("SET #u = :u".into()),
        condition: "#e = :e AND #u <= :u".into(),
        names: HashMap::from([
            ("#u".to_string(), attr::LEASE_UNTIL.to_string()),
            ("#e".to_string(), attr::EPOCH.to_string()),
        ]),
        values: HashMap::from([
            (":u".to_string(), n(until.as_nanos())),
            (":e".to_string(), n(epoch)),
        ]),
    };
    if let Some(r) = report {
        let (set, names, values) = r.assignments();
        w.change = Change::Update(format!("SET #u = :u, {set}"));
        w.names.extend(names);
        w.values.extend(values);
    }
    match store.write(w).await? {
        Written::Applied => Ok(until),
        Written::Refused(None) => Err(RegionError::NoRegion {
            limit: limit.to_string(),
            region: region.to_string(),
        }),
        Written::Refused(Some(it)) => {
            let row = super::ledger::RegionRow::from_item(&it)?;
            if row.epoch != epoch {
                Err(RegionError::Fenced {
                    limit: limit.to_string(),
                    region: region.to_string(),
                    epoch: row.epoch,
                })
            } else {
                // A later lease is already there (a retried renewal): keep it.
                Ok(row.lease_until)
            }
        }
    }
}

/// After `Fenced`: reads the region's item and renews with the epoch it now has, in one go (a
/// region that only read would stay expired until its next renewal, and could be reclaimed again
/// meanwhile). Its allotment is whatever the item holds (0 after a reclaim, until moves raise it).
/// 1 `GetItem` + 1 `UpdateItem`. Returns the epoch and the new lease.
pub async fn rejoin<S: LedgerStore>(
    store: &S,
    limit: &str,
    region: &str,
    now: Timestamp,
    terms: &LeaseTerms,
) -> Result<(u64, Timestamp), RegionError> {
    let row = read_region(store, limit, region).await?;
    let until = renew(store, limit, region, row.epoch, now, terms).await?;
    Ok((row.epoch, until))
}

/// A reclaim: whose allotment, to whom, after how long a grace past its lease (the clock
/// margin, plus the overdraw time in bounded mode), released how long after (the limit's period).
#[derive(Debug, Clone, Copy)]
pub struct Reclaim<'a> {
    pub region: &'a str,
    pub to: &'a str,
    pub grace: Duration,
    pub period: Duration,
}

/// Takes back all of `region`'s allotment once its lease plus `grace` is behind `now`, together
/// with the moves in transit to it (`incoming`, from [`super::saga::in_transit`]): one write on
/// its item marks each incoming move received there (so it can never be raised there later) and
/// puts the whole amount in its outbox as one move to `to`, bumping its epoch. The amount is
/// released `period` after the grace ends (the region may have spent its whole burst just before
/// its lease ran out), and not before any incoming move's own release. Finished by
/// [`super::saga::record`] and [`super::saga::raise`]. 1 `GetItem` + 1 `UpdateItem`.
/// `Ok(None)`: nothing to take. Call it only from a region whose own lease is current: two regions
/// back from an outage would otherwise take each other's allotment back and forth for ever.
pub async fn reclaim<S: LedgerStore>(
    store: &S,
    limit: &str,
    what: &Reclaim<'_>,
    now: Timestamp,
    incoming: &[(String, Entry)],
) -> Result<Option<Move>, RegionError> {
    let Reclaim {
        region,
        to,
        grace,
        period,
    } = *what;
    let row = read_region(store, limit, region).await?;
    let free_at = row.lease_until.plus(grace);
    if now <= free_at {
        return Err(RegionError::LeaseHeld {
            limit: limit.to_string(),
            region: region.to_string(),
            until: free_at,
        });
    }
    let incoming: Vec<&(String, Entry)> = incoming
        .iter()
        .filter(|(id, e)| e.to == region && !row.inbox.contains_key(id))
        .collect();
    let amount = row.allotment + incoming.iter().map(|(_, e)| e.amount).sum::<u64>();
    if amount == 0 {
        return Ok(None);
    }
    let mv = Move {
        limit: limit.to_string(),
        id: super::ledger::new_move_id(),
        from: region.to_string(),
        to: to.to_string(),
        amount,
    };
    let release_at = incoming
        .iter()
        .map(|(_, e)| e.release_at)
        .fold(free_at.plus(period), Timestamp::max);
    let entry = Entry {
        from: mv.from.clone(),
        to: mv.to.clone(),
        amount,
        release_at,
    };
    let mut names = HashMap::from([
        ("#a".to_string(), attr::ALLOTMENT.to_string()),
        ("#e".to_string(), attr::EPOCH.to_string()),
        ("#u".to_string(), attr::LEASE_UNTIL.to_string()),
        ("#o".to_string(), attr::OUTBOX.to_string()),
        ("#id".to_string(), mv.id.clone()),
    ]);
    if !incoming.is_empty() {
        names.insert("#i".to_string(), attr::INBOX.to_string());
    }
    let mut values = HashMap::from([
        (":zero".to_string(), n(0)),
        (":a".to_string(), n(row.allotment)),
        (":e".to_string(), n(row.epoch)),
        (":next".to_string(), n(row.epoch + 1)),
        (":u".to_string(), n(row.lease_until.as_nanos())),
        (":m".to_string(), entry.to_value()),
    ]);
    let mut update = "SET #a = :zero, #e = :next, #o.#id = :m".to_string();
    let mut condition =
        "#a = :a AND #e = :e AND #u = :u AND attribute_not_exists(#o.#id)".to_string();
    if !incoming.is_empty() {
        values.insert(":now".to_string(), n(now.as_nanos()));
    }
    for (k, (id, _)) in incoming.iter().enumerate() {
        names.insert(format!("#in{k}"), id.clone());
        update.push_str(&format!(", #i.#in{k} = :now"));
        condition.push_str(&format!(" AND attribute_not_exists(#i.#in{k})"));
    }
    let w = Write {
        key: LedgerKey::region(limit, region),
        change: Change::Update(update),
        condition,
        names,
        values,
    };
    match store.write(w).await? {
        Written::Applied => Ok(Some(mv)),
        // The region renewed, moved or was reclaimed meanwhile: nothing taken.
        Written::Refused(_) => Ok(None),
    }
}
