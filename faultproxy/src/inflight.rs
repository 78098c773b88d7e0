//! The items in-flight writes hold, to decide transaction conflicts the way DynamoDB does: a
//! transaction that touches an item held by another transaction or by a single-item write is
//! cancelled (`TransactionConflict` at that index), and a single-item write on an item a
//! transaction holds is refused (`TransactionConflictException`). Two single-item writes never
//! conflict (DynamoDB serialises them). The first to arrive holds the item until its answer.

use std::collections::HashMap;
use std::sync::{Arc, Mutex};

use crate::keys::ItemKey;

#[derive(Debug, Default, Clone, Copy)]
struct Holders {
    transactions: u32,
    singles: u32,
}

/// Items held by requests in flight.
#[derive(Debug, Default)]
pub struct InFlight {
    held: Mutex<HashMap<ItemKey, Holders>>,
}

/// Holds its items until dropped (when the upstream's answer has been read, or the request was
/// abandoned).
#[derive(Debug)]
pub struct Hold {
    registry: Arc<InFlight>,
    keys: Vec<ItemKey>,
    transaction: bool,
}

impl InFlight {
    fn lock(&self) -> std::sync::MutexGuard<'_, HashMap<ItemKey, Holders>> {
        self.held.lock().unwrap_or_else(|p| p.into_inner())
    }

    /// Holds the keys of a transaction, or returns the indexes of those another request holds.
    pub fn hold_transaction(self: &Arc<Self>, keys: &[ItemKey]) -> Result<Hold, Vec<usize>> {
        let mut held = self.lock();
        let busy: Vec<usize> = keys
            .iter()
            .enumerate()
            .filter(|(_, k)| held.get(*k).is_some_and(|h| h.transactions + h.singles > 0))
            .map(|(i, _)| i)
            .collect();
        if !busy.is_empty() {
            return Err(busy);
        }
        for k in keys {
            held.entry(k.clone()).or_default().transactions += 1;
        }
        Ok(Hold {
            registry: self.clone(),
            keys: keys.to_vec(),
            transaction: true,
        })
    }

    /// Holds the key of a single-item write, or `None` when a transaction holds it.
    pub fn hold_single(self: &Arc<Self>, key: &ItemKey) -> Option<Hold> {
        let mut held = self.lock();
        if held.get(key).is_some_and(|h| h.transactions > 0) {
            return None;
        }
        held.entry(key.clone()).or_default().singles += 1;
        Some(Hold {
            registry: self.clone(),
            keys: vec![key.clone()],
            transaction: false,
        })
    }

    /// Items held right now (for tests).
    pub fn len(&self) -> usize {
        self.lock().len()
    }

    #[cfg(test)]
    pub fn is_empty(&self) -> bool {
        self.len() == 0
    }
}

impl Drop for Hold {
    fn drop(&mut self) {
        let mut held = self.registry.lock();
        for k in &self.keys {
            if let Some(h) = held.get_mut(k) {
                if self.transaction {
                    h.transactions = h.transactions.saturating_sub(1);
                } else {
                    h.singles = h.singles.saturating_sub(1);
                }
                if h.transactions == 0 && h.singles == 0 {
                    held.remove(k);
                }
            }
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::keys::test_key as k;

    #[test]
    fn overlapping_transactions_conflict_at_the_shared_indexes() {
        let r = Arc::new(InFlight::default());
        let first = r.hold_transaction(&[k("a"), k("b")]).unwrap();
        assert_eq!(
            r.hold_transaction(&[k("c"), k("b"), k("a")]).unwrap_err(),
            vec![1, 2]
        );
        // Disjoint items do not conflict.
        let other = r.hold_transaction(&[k("c")]).unwrap();
        drop(first);
        drop(other);
        assert!(r.is_empty());
        assert!(r.hold_transaction(&[k("a"), k("b"), k("c")]).is_ok());
    }

    #[test]
    fn single_writes_conflict_only_with_transactions() {
        let r = Arc::new(InFlight::default());
        let w1 = r.hold_single(&k("a")).unwrap();
        let w2 = r.hold_single(&k("a")).unwrap();
        // A transaction arriving while a single write is in flight is cancelled.
        assert_eq!(r.hold_transaction(&[k("a")]).unwrap_err(), vec![0]);
        drop(w1);
        assert!(r.hold_transaction(&[k("a")]).is_err());
        drop(w2);
        let t = r.hold_transaction(&[k("a")]).unwrap();
        // A single write while a transaction holds the item is refused.
        assert!(r.hold_single(&k("a")).is_none());
        assert!(r.hold_single(&k("b")).is_some());
        drop(t);
        assert!(r.hold_single(&k("a")).is_some());
    }
}
