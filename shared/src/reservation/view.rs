//! What a process last saw of one coordinate's ledger shards ([`super::shard`]): a hint for
//! choosing a shard with room and for predicting a refusal, never a capacity decision (that is the
//! admission write's condition). Shared by the process's tasks through the ledger cache, so a warm
//! admission clones one shard, not the coordinate's thousands of entries.

use std::collections::BTreeMap;
use std::sync::{Arc, Mutex, MutexGuard};

use super::ledger::{is_live, Binding, Ledger};
use super::shard::{self, share};
use crate::clock::Timestamp;

/// Random shards probed for room before every shard seen is looked at (keeps a warm admission's
/// choice O(1) on a coordinate of thousands of shards that is not nearly full).
const PROBES: usize = 8;

/// The shards seen; `complete` when all of them were read at once, so a shard missing from `shards`
/// is known not to exist (rather than not seen).
#[derive(Debug, Clone, Default, PartialEq)]
pub(super) struct View {
    pub shards: BTreeMap<u32, Ledger>,
    pub complete: bool,
}

/// Where to admit next ([`View::choose`]).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(super) enum Choice {
    /// Write to this shard (creating it if seen not to exist).
    Shard(u32),
    /// Some shards were never seen and none seen has room: read them all first.
    ReadAll,
    /// Every shard under the limit is full as seen.
    Full,
}

/// The cache's handle on a coordinate's view.
pub(super) type SharedView = Arc<Mutex<View>>;

/// Locks a view; a task that panicked while holding it left at worst a stale hint.
pub(super) fn lock(v: &SharedView) -> MutexGuard<'_, View> {
    v.lock().unwrap_or_else(|p| p.into_inner())
}

impl View {
    /// A view of one shard as read.
    pub fn of_shard(k: u32, ledger: Ledger) -> View {
        View {
            shards: BTreeMap::from([(k, ledger)]),
            complete: false,
        }
    }

    /// Shard 0 is known not to exist: the coordinate has no ledger yet.
    pub fn without_ledger(&self) -> bool {
        match self.shards.get(&0) {
            Some(l) => !l.exists,
            None => self.complete,
        }
    }

    /// The ledger an admission on shard `k` writes against: as seen, else absent (the write creates
    /// it; [`View::choose`] names a shard not seen only when it is known not to exist).
    pub fn for_write(&self, k: u32) -> Ledger {
        self.shards.get(&k).cloned().unwrap_or_default()
    }

    /// Whether shard `k` exists as seen and may admit under `limit` at `now`.
    fn has_room(&self, k: u32, now: Timestamp, limit: u64) -> bool {
        self.shards
            .get(&k)
            .is_some_and(|l| l.exists && live_in(l, now) < share(k, limit))
    }

    /// Where an admission under `limit` should try: an existing shard with room as seen, at random
    /// so that concurrent callers spread out; else the first shard under the limit not seen to
    /// exist, to create (shards fill first to last, so that is where the frontier is); else, with
    /// shards never seen, read them all first (a blind write to a shard that does not exist would
    /// fail, costing a call and a write unit); else full.
    pub fn choose(&self, now: Timestamp, limit: u64) -> Choice {
        let n = shard::shard_count(limit);
        for _ in 0..PROBES {
            let k = fastrand::u32(0..n);
            if self.has_room(k, now, limit) {
                return Choice::Shard(k);
            }
        }
        let open: Vec<u32> = self
            .shards
            .range(..n)
            .map(|(k, _)| *k)
            .filter(|&k| self.has_room(k, now, limit))
            .collect();
        if !open.is_empty() {
            return Choice::Shard(open[fastrand::usize(..open.len())]);
        }
        match (0..n).find(|k| !self.shards.get(k).is_some_and(|l| l.exists)) {
            Some(k) if self.complete || self.shards.contains_key(&k) => Choice::Shard(k),
            Some(_) => Choice::ReadAll,
            None => Choice::Full,
        }
    }

    /// Unexpired entries over every shard seen (shards past the last one too: they still hold).
    pub fn live(&self, now: Timestamp) -> u64 {
        self.shards.values().map(|l| live_in(l, now)).sum()
    }

    /// Every shard's entries as one ledger, for listings (exists if any shard does).
    pub fn merged(&self) -> Ledger {
        let mut out = Ledger::default();
        for l in self.shards.values() {
            out.exists |= l.exists;
            out.live
                .extend(l.live.iter().map(|(k, v)| (k.clone(), v.clone())));
        }
        out
    }

    /// The shard seen holding `id`'s entry: the one its id names, else (an id from before
    /// sharding) any shard seen holding it.
    pub fn holder(&self, id: &str) -> Option<u32> {
        match shard::of_reservation(id) {
            Some(k) => self.shards.contains_key(&k).then_some(k),
            None => self
                .shards
                .iter()
                .find(|(_, l)| l.live.contains_key(id))
                .map(|(k, _)| *k),
        }
    }

    /// Drops reservation `id`'s entry from its shard, if seen.
    pub fn forget(&mut self, id: &str) {
        if let Some(k) = self.holder(id) {
            self.shards.entry(k).and_modify(|l| {
                l.live.remove(id);
            });
        }
    }

    /// Records `id`'s entry as bound (`binding`) in its shard, if that shard was seen.
    pub fn extend(&mut self, id: &str, binding: Binding) {
        if let Some(k) = self.holder(id) {
            self.shards.entry(k).and_modify(|l| {
                l.live
                    .insert(id.to_string(), (binding.exp, binding.value()));
            });
        }
    }
}

fn live_in(l: &Ledger, now: Timestamp) -> u64 {
    l.live.values().filter(|(e, _)| is_live(*e, now)).count() as u64
}

#[cfg(test)]
mod tests {
    use super::super::ledger::tests::ledger;
    use super::*;
    use crate::dynamo::item::n;

    const NOW: i64 = 1_000;

    fn now() -> Timestamp {
        Timestamp::from_secs(NOW)
    }

    /// Shard `k` holding `live` unexpired and `dead` expired entries.
    fn shard_with(k: u32, live: usize, dead: usize) -> Ledger {
        let ids: Vec<(String, i64)> = (0..live)
            .map(|i| (shard::reservation_id(&format!("l{i}"), k), NOW + 60))
            .chain((0..dead).map(|i| (shard::reservation_id(&format!("d{i}"), k), NOW - 1)))
            .collect();
        let refs: Vec<(&str, i64)> = ids.iter().map(|(i, e)| (i.as_str(), *e)).collect();
        ledger(&refs)
    }

    #[test]
    fn a_choice_lands_on_existing_shards_with_room_then_the_frontier() {
        // Limit 40: shards 0 and 1 hold 16 each, shard 2 holds 8.
        let mut v = View::default();
        v.shards.insert(0, shard_with(0, 16, 0));
        v.shards.insert(1, shard_with(1, 15, 1));
        v.shards.insert(2, shard_with(2, 8, 0));
        for _ in 0..200 {
            assert_eq!(
                v.choose(now(), 40),
                Choice::Shard(1),
                "expired entries are room"
            );
        }
        v.shards.insert(1, shard_with(1, 16, 0));
        assert_eq!(v.choose(now(), 40), Choice::Full);
        assert_eq!(v.live(now()), 40);
        // Raised to 64: shard 2's share grows (it exists: written to first), then shard 3, never
        // seen, is read before it is written.
        assert_eq!(v.choose(now(), 64), Choice::Shard(2));
        v.shards.insert(2, shard_with(2, 16, 0));
        assert_eq!(v.choose(now(), 64), Choice::ReadAll);
        v.complete = true;
        assert_eq!(
            v.choose(now(), 64),
            Choice::Shard(3),
            "read: it does not exist, create it"
        );
        // Existing shards with room come before creating one, wherever they are.
        v.shards.insert(3, shard_with(3, 16, 0));
        v.shards.insert(1, shard_with(1, 3, 0));
        assert_eq!(v.choose(now(), 80), Choice::Shard(1));
    }

    #[test]
    fn a_coordinate_has_no_ledger_only_when_shard_0_is_seen_absent() {
        let mut v = View::of_shard(0, shard_with(0, 1, 0));
        assert!(!v.without_ledger());
        assert!(
            !v.for_write(5).exists,
            "written to only once known absent: created"
        );
        assert!(v.for_write(0).exists);
        v.shards.insert(0, Ledger::default());
        assert!(v.without_ledger());
        let empty = View {
            complete: true,
            ..View::default()
        };
        assert!(empty.without_ledger());
        assert!(!View::default().without_ledger(), "not seen is not absent");
    }

    #[test]
    fn entries_are_found_in_their_shard_and_merged_for_listings() {
        let mut v = View::default();
        v.shards.insert(0, shard_with(0, 1, 0));
        v.shards.insert(3, shard_with(3, 2, 0));
        let id = shard::reservation_id("l1", 3);
        let bound = Binding {
            exp: NOW + 999,
            id: 7,
        };
        v.extend(&id, bound);
        assert_eq!(v.shards[&3].live[&id], (NOW + 999, bound.value()));
        v.forget(&id);
        assert!(!v.shards[&3].live.contains_key(&id));
        // An entry of a shard never seen is not invented.
        v.extend(&shard::reservation_id("x", 9), bound);
        assert!(!v.shards.contains_key(&9));
        // Ids from before sharding are found wherever a shard holds them.
        v.shards
            .get_mut(&3)
            .unwrap()
            .live
            .insert("py-1".into(), (NOW + 9, n(NOW + 9)));
        assert_eq!(v.holder("py-1"), Some(3));
        v.forget("py-1");
        assert_eq!(v.holder("py-1"), None);
        let m = v.merged();
        assert!(m.exists);
        assert_eq!(m.live.len(), 2);
    }
}
