//! Moving allotment between regions: three single-item conditional writes, each idempotent by
//! the move's id, so a crash between any two strands the amount for a while and a retry of any
//! step (after a lost answer, a `ReplicatedWriteConflictException`) changes nothing twice.
//! Decision 4200 carries the argument that the allotments never sum past the limit.
//!
//! | step | item written | condition | calls |
//! |---|---|---|---|
//! | [`lower`] | the giver's `region#{from}` | id not in its outbox, `allotment >= amount`, epoch | 1 `UpdateItem` |
//! | [`record`] | `move#{id}`, copied from the giver's outbox | absent | 1 `GetItem` + 1 `PutItem` |
//! | [`raise`] | the receiver's `region#{to}`, once past `releaseAt` | id not in its inbox | 1 `GetItem` + 1 `UpdateItem` |

use std::collections::HashMap;
use std::time::Duration;

use super::allotment::Declared;
use super::error::RegionError;
use super::ledger::{
    attr, read_region, Change, Entry, LedgerKey, LedgerStore, RegionRow, Write, Written,
};
use crate::clock::Timestamp;
use crate::dynamo::item::n;

/// A move to make: `amount` of `limit` from one region to another.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Move {
    pub limit: String,
    pub id: String,
    pub from: String,
    pub to: String,
    pub amount: u64,
}

/// How long a lowered amount stays unused before a receiver may raise: the limit's period (a
/// bucket spent to its burst under the old allotment refills in one period), the longest a
/// process uses an allotment it read, the clock margin between regions, and in bounded mode the
/// time a process may overdraw past its last read.
pub fn quarantine(limit: &Declared, refresh: Duration, margin: Duration) -> Duration {
    limit.period + refresh + margin + limit.overdraw_for()
}

/// What [`raise`] did.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum Raised {
    /// Raised by this call.
    Now,
    /// Raised earlier (a retry, or another rebalancer finished it).
    Already,
    /// Not before this instant (by the receiver's clock).
    NotBefore(Timestamp),
}

fn names(pairs: &[(&str, &str)]) -> HashMap<String, String> {
    pairs
        .iter()
        .map(|(k, v)| (k.to_string(), v.to_string()))
        .collect()
}

fn box_has(old: &Option<crate::dynamo::item::Item>, id: &str, boxed: &str) -> bool {
    old.as_ref()
        .and_then(|it| it.get(boxed))
        .and_then(|v| v.as_m().ok())
        .is_some_and(|m| m.contains_key(id))
}

/// Step 1: the giver lowers its own allotment by `amount` and notes the move in its outbox, in
/// one write. Its processes must already decide with the lowered allotment (the caller lowers its
/// cache first). `epoch` is the giver's as last read; `release_at` is `now + quarantine`.
pub async fn lower<S: LedgerStore>(
    store: &S,
    mv: &Move,
    epoch: u64,
    release_at: Timestamp,
) -> Result<(), RegionError> {
    let entry = Entry {
        from: mv.from.clone(),
        to: mv.to.clone(),
        amount: mv.amount,
        release_at,
    };
    let w = Write {
        key: LedgerKey::region(&mv.limit, &mv.from),
        change: Change::Update("SET #a = #a - :d, #o.#id = :m".into()),
        condition: "attribute_not_exists(#o.#id) AND #a >= :d AND #e = :e".into(),
        names: names(&[
            ("#a", attr::ALLOTMENT),
            ("#o", attr::OUTBOX),
            ("#id", &mv.id),
            ("#e", attr::EPOCH),
        ]),
        values: HashMap::from([
            (":d".to_string(), n(mv.amount)),
            (":m".to_string(), entry.to_value()),
            (":e".to_string(), n(epoch)),
        ]),
    };
    match store.write(w).await? {
        Written::Applied => Ok(()),
        Written::Refused(old) if box_has(&old, &mv.id, attr::OUTBOX) => Ok(()),
        Written::Refused(None) => Err(RegionError::NoRegion {
            limit: mv.limit.clone(),
            region: mv.from.clone(),
        }),
        Written::Refused(Some(it)) => {
            let row = RegionRow::from_item(&it)?;
            if row.epoch != epoch {
                Err(RegionError::Fenced {
                    limit: mv.limit.clone(),
                    region: mv.from.clone(),
                    epoch: row.epoch,
                })
            } else {
                Err(RegionError::Short {
                    limit: mv.limit.clone(),
                    region: mv.from.clone(),
                    held: row.allotment,
                    asked: mv.amount,
                })
            }
        }
    }
}

/// Step 2: the move item, copied from the giver's outbox (so it exists only for a move that was
/// lowered), created if absent.
pub async fn record<S: LedgerStore>(
    store: &S,
    limit: &str,
    from: &str,
    id: &str,
) -> Result<Entry, RegionError> {
    let giver = read_region(store, limit, from).await?;
    let entry = giver
        .outbox
        .get(id)
        .cloned()
        .ok_or_else(|| RegionError::NotLowered {
            limit: limit.to_string(),
            id: id.to_string(),
        })?;
    let key = LedgerKey::movement(limit, id);
    let mut item = key.to_item();
    if let aws_sdk_dynamodb::types::AttributeValue::M(m) = entry.to_value() {
        item.extend(m);
    }
    let w = Write {
        key,
        change: Change::Put(item),
        condition: "attribute_not_exists(#i)".into(),
        names: names(&[("#i", attr::ITEM)]),
        values: HashMap::new(),
    };
    store.write(w).await?;
    Ok(entry)
}

/// Step 3: the receiver raises its own allotment by the recorded amount, once `now` (its clock)
/// is past the move's `releaseAt`, noting the id in its inbox in the same write.
pub async fn raise<S: LedgerStore>(
    store: &S,
    limit: &str,
    id: &str,
    now: Timestamp,
) -> Result<Raised, RegionError> {
    let Some(it) = store.get(&LedgerKey::movement(limit, id)).await? else {
        return Err(RegionError::NotLowered {
            limit: limit.to_string(),
            id: id.to_string(),
        });
    };
    let entry = Entry::from_map(&it, id)?;
    if now < entry.release_at {
        return Ok(Raised::NotBefore(entry.release_at));
    }
    let w = Write {
        key: LedgerKey::region(limit, &entry.to),
        change: Change::Update("SET #a = #a + :d, #i.#id = :at".into()),
        condition: "attribute_exists(#a) AND attribute_not_exists(#i.#id)".into(),
        names: names(&[("#a", attr::ALLOTMENT), ("#i", attr::INBOX), ("#id", id)]),
        values: HashMap::from([
            (":d".to_string(), n(entry.amount)),
            (":at".to_string(), n(now.as_nanos())),
        ]),
    };
    match store.write(w).await? {
        Written::Applied => Ok(Raised::Now),
        Written::Refused(old) if box_has(&old, id, attr::INBOX) => Ok(Raised::Already),
        Written::Refused(_) => Err(RegionError::NoRegion {
            limit: limit.to_string(),
            region: entry.to,
        }),
    }
}

/// The moves of a limit lowered and not yet raised (from the region items alone): what a
/// rebalancer resumes with [`record`] and [`raise`]. Their amounts are the capacity in transit.
pub fn in_transit(rows: &[RegionRow]) -> Vec<(String, Entry)> {
    let raised: std::collections::HashSet<&String> =
        rows.iter().flat_map(|r| r.inbox.keys()).collect();
    let mut open: Vec<(String, Entry)> = rows
        .iter()
        .flat_map(|r| r.outbox.iter())
        .filter(|(id, _)| !raised.contains(id))
        .map(|(id, e)| (id.clone(), e.clone()))
        .collect();
    open.sort_by(|a, b| a.0.cmp(&b.0));
    open
}

/// Records and raises every move in transit whose release time has come: the rebalancer's
/// resumption after any crash. Returns how many it raised.
pub async fn resume<S: LedgerStore>(
    store: &S,
    limit: &str,
    now: Timestamp,
) -> Result<usize, RegionError> {
    let (rows, _) = super::ledger::read_all(store, limit).await?;
    let mut raised = 0;
    for (id, entry) in in_transit(&rows) {
        if now < entry.release_at {
            continue;
        }
        record(store, limit, &entry.from, &id).await?;
        if raise(store, limit, &id, now).await? == Raised::Now {
            raised += 1;
        }
    }
    Ok(raised)
}
