//! The one in-process cache: a bounded map behind a mutex, shared by clones of whatever holds it.
//! Entries may carry a freshness window (time passed in, so a manual clock tests it); what happens
//! when a new key meets a full cache is chosen per cache ([`WhenFull`]). Every cache here only ever
//! saves a call or a wait: losing an entry costs a read, never a wrong decision.
//!
//! Not a crate: the well-kept ones (moka, quick_cache) expire on their own clock, not Turnstile's
//! injected [`crate::clock::Clock`], and tests step time by hand.

use std::borrow::Borrow;
use std::collections::HashMap;
use std::hash::Hash;
use std::sync::{Mutex, MutexGuard};

use crate::clock::Timestamp;

/// What inserting a new key into a full cache does.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum WhenFull {
    /// Forget everything, then insert (cheap; bounds memory under a flood of distinct keys).
    Clear,
    /// Keep what is there; the new key is not stored.
    Refuse,
    /// Drop the entry whose window ends soonest (entries without one go last).
    EvictSoonestExpiring,
}

#[derive(Debug, Clone)]
struct Entry<V> {
    value: V,
    /// Served while `from <= now < until` ([`Cache::fresh`]).
    window: Option<(Timestamp, Timestamp)>,
}

impl<V> Entry<V> {
    fn fresh_at(&self, now: Timestamp) -> bool {
        self.window
            .is_none_or(|(from, until)| from <= now && now < until)
    }
}

/// A bounded map of `K` to `V` (see the module docs).
#[derive(Debug)]
pub struct Cache<K, V> {
    entries: Mutex<HashMap<K, Entry<V>>>,
    capacity: usize,
    when_full: WhenFull,
}

impl<K: Eq + Hash + Clone, V: Clone> Cache<K, V> {
    /// At most `capacity` entries (at least 1).
    pub fn new(capacity: usize, when_full: WhenFull) -> Self {
        Cache {
            entries: Mutex::new(HashMap::new()),
            capacity: capacity.max(1),
            when_full,
        }
    }

    fn lock(&self) -> MutexGuard<'_, HashMap<K, Entry<V>>> {
        // Every operation is one map update, so a panic elsewhere cannot leave the map
        // inconsistent: a poisoned lock is still usable.
        self.entries.lock().unwrap_or_else(|p| p.into_inner())
    }

    /// The value, whatever its window (for caches whose entries have none).
    pub fn get<Q>(&self, key: &Q) -> Option<V>
    where
        K: Borrow<Q>,
        Q: Hash + Eq + ?Sized,
    {
        self.lock().get(key).map(|e| e.value.clone())
    }

    /// The value if fresh at `now` (entries inserted without a window always are).
    pub fn fresh<Q>(&self, key: &Q, now: Timestamp) -> Option<V>
    where
        K: Borrow<Q>,
        Q: Hash + Eq + ?Sized,
    {
        self.lock()
            .get(key)
            .filter(|e| e.fresh_at(now))
            .map(|e| e.value.clone())
    }

    /// Stores `value` with no window; false when a full [`WhenFull::Refuse`] cache kept it out.
    pub fn insert(&self, key: K, value: V) -> bool {
        self.store(
            key,
            Entry {
                value,
                window: None,
            },
            None,
        )
    }

    /// Stores `value`, fresh from `now` until `until`; a full cache first drops the entries no
    /// longer fresh at `now`. False when a full [`WhenFull::Refuse`] cache kept it out.
    pub fn insert_until(&self, key: K, value: V, now: Timestamp, until: Timestamp) -> bool {
        self.store(
            key,
            Entry {
                value,
                window: Some((now, until)),
            },
            Some(now),
        )
    }

    fn store(&self, key: K, entry: Entry<V>, now: Option<Timestamp>) -> bool {
        let mut map = self.lock();
        if !self.make_room(&mut map, &key, now) {
            return false;
        }
        map.insert(key, entry);
        true
    }

    /// Whether `key` may be added (room made per [`WhenFull`]).
    fn make_room(&self, map: &mut HashMap<K, Entry<V>>, key: &K, now: Option<Timestamp>) -> bool {
        if map.len() < self.capacity || map.contains_key(key) {
            return true;
        }
        if let Some(now) = now {
            map.retain(|_, e| e.fresh_at(now));
            if map.len() < self.capacity {
                return true;
            }
        }
        match self.when_full {
            WhenFull::Clear => map.clear(),
            WhenFull::Refuse => return false,
            WhenFull::EvictSoonestExpiring => {
                let soonest = map
                    .iter()
                    .min_by_key(|(_, e)| (e.window.is_none(), e.window.map(|(_, until)| until)))
                    .map(|(k, _)| k.clone());
                if let Some(k) = soonest {
                    map.remove(&k);
                }
            }
        }
        true
    }

    /// Changes the value of an existing entry in place; `None` when absent.
    pub fn update<Q, R>(&self, key: &Q, f: impl FnOnce(&mut V) -> R) -> Option<R>
    where
        K: Borrow<Q>,
        Q: Hash + Eq + ?Sized,
    {
        self.lock().get_mut(key).map(|e| f(&mut e.value))
    }

    /// Changes the value of `key`, first inserting `init()` (no window) when absent; false when a
    /// full [`WhenFull::Refuse`] cache kept a new key out (`f` not run).
    pub fn upsert(&self, key: K, init: impl FnOnce() -> V, f: impl FnOnce(&mut V)) -> bool {
        let mut map = self.lock();
        if !self.make_room(&mut map, &key, None) {
            return false;
        }
        let e = map.entry(key).or_insert_with(|| Entry {
            value: init(),
            window: None,
        });
        f(&mut e.value);
        true
    }

    pub fn remove<Q>(&self, key: &Q) -> Option<V>
    where
        K: Borrow<Q>,
        Q: Hash + Eq + ?Sized,
    {
        self.lock().remove(key).map(|e| e.value)
    }

    /// Forgets every entry.
    pub fn clear(&self) {
        self.lock().clear();
    }

    pub fn len(&self) -> usize {
        self.lock().len()
    }

    pub fn is_empty(&self) -> bool {
        self.lock().is_empty()
    }

    pub fn capacity(&self) -> usize {
        self.capacity
    }
}

#[cfg(test)]
mod tests {
    use std::time::Duration;

    use super::*;

    #[test]
    fn a_full_cache_clears_refuses_or_evicts_as_told() {
        let c = Cache::new(2, WhenFull::Clear);
        c.insert("a", 1);
        c.insert("b", 2);
        c.insert("b", 3);
        assert_eq!(c.len(), 2, "an existing key never makes room");
        c.insert("c", 4);
        assert_eq!((c.len(), c.get("a"), c.get("c")), (1, None, Some(4)));

        let r = Cache::new(1, WhenFull::Refuse);
        assert!(r.insert("a", 1));
        assert!(!r.insert("b", 2));
        assert!(!r.upsert("b", || 0, |v| *v += 1));
        assert!(r.upsert("a", || 0, |v| *v += 1));
        assert_eq!((r.get("a"), r.get("b")), (Some(2), None));
        assert_eq!(r.update("a", |v| std::mem::replace(v, 9)), Some(2));
        assert_eq!((r.remove("a"), r.is_empty()), (Some(9), true));
    }

    #[test]
    fn windows_decide_freshness_and_stale_entries_go_first() {
        let now = Timestamp::from_secs(1_000_000);
        let min = Duration::from_secs(60);
        let c = Cache::new(2, WhenFull::EvictSoonestExpiring);
        c.insert_until("short", 0, now, now.plus(min));
        c.insert_until("a", 1, now, now.plus(min * 60));
        assert_eq!(c.fresh("short", now), Some(0));
        assert_eq!(
            c.fresh("short", now.minus(Duration::from_nanos(1))),
            None,
            "not before"
        );
        let later = now.plus(min * 2);
        assert_eq!(c.fresh("short", later), None);
        assert_eq!(c.get("short"), Some(0), "get ignores windows");
        c.insert_until("b", 2, later, later.plus(min * 120));
        assert_eq!(
            (c.len(), c.fresh("a", later)),
            (2, Some(1)),
            "the stale one made room"
        );
        c.insert_until("c", 3, later, later.plus(min * 180));
        assert_eq!(c.fresh("a", later), None, "soonest to expire made room");
        assert_eq!(
            (c.fresh("b", later), c.fresh("c", later)),
            (Some(2), Some(3))
        );
    }
}
