//! Pruning finished moves from a region's item: each move leaves an entry in its giver's outbox
//! and one in its receiver's inbox, and an item holds about 5,000 before DynamoDB's 400 KB. An
//! entry goes only once no send of its move can still arrive: a signed request is refused 15
//! minutes after it was signed, so [`LATE_SEND`] after the last step of a move (its raise, whose
//! instant the inbox holds), plus the clock margin, nothing of it is in flight.
//!
//! - The giver prunes first: once the receiver's inbox holds the id and [`LATE_SEND`] has passed
//!   since (and since the move's release), it deletes the move's record, then removes the id from
//!   its outbox. A late lower of the move could otherwise lower again (stranding the amount), a
//!   late record recreate the record.
//! - The receiver prunes after: once no outbox holds the id and [`LATE_SEND`] has passed since its
//!   raise, it removes the id from its inbox. Removed while an outbox still held it, the move
//!   would look in transit again and be raised twice; removed early, a late raise would apply.
//!
//! Each region prunes only its own item (decision 4200's one writer per region item); a record
//! deleted is no allotment, so the allotments' sum is untouched.

use std::collections::HashMap;
use std::time::Duration;

use super::error::RegionError;
use super::ledger::{attr, Change, LedgerKey, LedgerStore, RegionRow, Write};
use super::rebalance::again;
use crate::clock::Timestamp;

/// How long after it was sent a write may still reach DynamoDB: 15 minutes of signature
/// validity, and a minute's margin.
pub const LATE_SEND: Duration = Duration::from_secs(16 * 60);

/// The most ids one pass removes (one `UpdateItem`, a short expression).
pub const MAX_PER_PASS: usize = 50;

/// What `region` may prune now.
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub struct Prunable {
    /// Moves it gave whose raise is old enough: their records and outbox entries go.
    pub outbox: Vec<String>,
    /// Moves it received that no outbox holds any more and whose raise is old enough.
    pub inbox: Vec<String>,
}

impl Prunable {
    pub fn is_empty(&self) -> bool {
        self.outbox.is_empty() && self.inbox.is_empty()
    }
}

/// The entries of `region`'s item that no send can reach any more, from rows read together.
pub fn prunable(rows: &[RegionRow], region: &str, now: Timestamp, margin: Duration) -> Prunable {
    let wait = LATE_SEND + margin;
    let Some(own) = rows.iter().find(|r| r.region == region) else {
        return Prunable::default();
    };
    let received = |id: &str, to: &str| {
        rows.iter()
            .find(|r| r.region == to)
            .and_then(|r| r.inbox.get(id).copied())
    };
    let mut outbox: Vec<String> = own
        .outbox
        .iter()
        .filter(|(id, e)| {
            received(id, &e.to).is_some_and(|at| now > at.max(e.release_at).plus(wait))
        })
        .map(|(id, _)| id.clone())
        .collect();
    let mut inbox: Vec<String> = own
        .inbox
        .iter()
        .filter(|(id, at)| {
            now > at.plus(wait) && !rows.iter().any(|r| r.outbox.contains_key(id.as_str()))
        })
        .map(|(id, _)| id.clone())
        .collect();
    outbox.sort();
    inbox.sort();
    outbox.truncate(MAX_PER_PASS);
    inbox.truncate(MAX_PER_PASS - outbox.len());
    Prunable { outbox, inbox }
}

/// Prunes `what` from `region`'s item: a `DeleteItem` per move record given away, then one
/// `UpdateItem` removing the ids from the boxes. Returns how many entries went. Safe to repeat:
/// deleting an absent record and removing an absent entry change nothing.
pub async fn prune<S: LedgerStore>(
    store: &S,
    limit: &str,
    region: &str,
    what: &Prunable,
) -> Result<usize, RegionError> {
    if what.is_empty() {
        return Ok(0);
    }
    for id in &what.outbox {
        let w = Write {
            key: LedgerKey::movement(limit, id),
            change: Change::Delete,
            condition: String::new(),
            names: HashMap::new(),
            values: HashMap::new(),
        };
        again(|| store.write(w.clone())).await?;
    }
    // DynamoDB refuses a name the expressions do not use: each box only when pruned.
    let mut names = HashMap::from([("#a".to_string(), attr::ALLOTMENT.to_string())]);
    if !what.outbox.is_empty() {
        names.insert("#o".to_string(), attr::OUTBOX.to_string());
    }
    if !what.inbox.is_empty() {
        names.insert("#i".to_string(), attr::INBOX.to_string());
    }
    let mut paths = Vec::new();
    for (k, id) in what.outbox.iter().enumerate() {
        names.insert(format!("#p{k}"), id.clone());
        paths.push(format!("#o.#p{k}"));
    }
    for (k, id) in what.inbox.iter().enumerate() {
        names.insert(format!("#q{k}"), id.clone());
        paths.push(format!("#i.#q{k}"));
    }
    let w = Write {
        key: LedgerKey::region(limit, region),
        change: Change::Update(format!("REMOVE {}", paths.join(", "))),
        condition: "attribute_exists(#a)".into(),
        names,
        values: HashMap::new(),
    };
    again(|| store.write(w.clone())).await?;
    Ok(paths.len())
}
