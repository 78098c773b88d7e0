//! The capacity ledger: per coordinate, ledger items (shards, [`super::shard`]; shard 0's sort key
//! is [`LEDGER_ID`]) whose map [`LEDGER_MAP`] holds reservation id → expiry (epoch seconds) for
//! every reservation and token that may hold capacity. They are the only capacity record:
//! admitting is one conditional UpdateItem on one shard (`size(live) < share + k` while removing k
//! expired entries, each conditioned on its old value), so at most its share of entries exist in
//! a shard after any write, whatever runs concurrently. Token rows are written beside it without a
//! transaction (decision 0101).
//!
//! Everything here is pure: parsing, the admission plan and the expressions of the admission write.

use std::collections::{BTreeMap, HashMap};

use aws_sdk_dynamodb::types::AttributeValue;

use crate::clock::Timestamp;
use crate::dynamo::item::{n, parse_int, s, Item};
use crate::error::{Error, Result};

/// Sort key of the ledger item. `~` sorts after every uuid, so the ledger lists last.
pub const LEDGER_ID: &str = "~ledger";
/// The ledger's map attribute: reservation id → expiry in epoch seconds.
pub const LEDGER_MAP: &str = "live";
/// Expired ledger entries pruned per write (keeps expressions small).
pub(super) const MAX_PRUNE: usize = 50;

/// An entry to remove: its id and the raw stored value its removal is conditioned on.
pub(super) type Prune = Vec<(String, AttributeValue)>;

/// Reservation id → (expiry, the raw stored value a condition must match).
pub(super) type Entries = BTreeMap<String, (i64, AttributeValue)>;

/// The last state seen of one ledger item (one shard, [`super::shard`]).
#[derive(Debug, Clone, Default, PartialEq)]
pub(super) struct Ledger {
    pub exists: bool,
    pub live: Entries,
}

/// Expiries are whole epoch seconds (the TTL attribute's unit), rounded down as rate-limiter-py
/// does (`int(time()) + ttl`): a reservation lives at most its TTL.
pub(super) fn expiry_secs(t: Timestamp) -> i64 {
    t.as_secs()
}

/// Live means the expiry (epoch seconds) is still ahead of `now`.
pub(super) fn is_live(exp: i64, now: Timestamp) -> bool {
    Timestamp::from_secs(exp) > now
}

/// Bind ids are 1..=999,999: six decimal places of the ledger value.
const BIND_IDS: u32 = 1_000_000;
const BIND_ID_DIGITS: usize = 6;

/// A binding as the ledger entry and its bound row both record it: the token's expiry (epoch
/// seconds) and a random id drawn by the bind that wrote the row, stored as one number,
/// `{exp}.{id:06}`. The whole part is the expiry, so every `<=`, `>` and liveness test reads it as
/// before; the fraction tells two bindings expiring in the same second apart (on skewed clocks, or
/// binds in one second), so a row's release matches its own binding only (decision 0101, "Bound
/// rows"). Two binds of one reservation are confused only when they fall in the same second *and*
/// draw the same id: 1 in 999,999.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(super) struct Binding {
    pub exp: i64,
    pub id: u32,
}

impl Binding {
    /// A new binding expiring at `exp`, with a fresh random id.
    pub fn draw(exp: i64) -> Binding {
        Binding {
            exp,
            id: fastrand::u32(1..BIND_IDS),
        }
    }

    /// The number the ledger entry and the row hold (DynamoDB compares numbers by value, so its
    /// trimmed trailing zeros do not matter).
    pub fn value(self) -> AttributeValue {
        n(format!(
            "{}.{:0width$}",
            self.exp,
            self.id,
            width = BIND_ID_DIGITS
        ))
    }

    /// Reads a stored binding (`1764201234.0425` is id 42,500); `None` for anything else.
    pub fn parse(v: &str) -> Option<Binding> {
        let (whole, frac) = v.split_once('.').unwrap_or((v, ""));
        if frac.len() > BIND_ID_DIGITS || !frac.bytes().all(|b| b.is_ascii_digit()) {
            return None;
        }
        let id = format!("{frac:0<width$}", width = BIND_ID_DIGITS);
        Some(Binding {
            exp: whole.parse().ok()?,
            id: id.parse().ok()?,
        })
    }
}

/// What an admission should do with the ledger it has seen.
#[derive(Debug, Clone, PartialEq)]
pub(super) enum Plan {
    /// `live` unexpired entries already hold all `limit` units.
    Full { live: u64 },
    /// More expired entries than one write may remove stand in the way: remove these first.
    PruneFirst(Prune),
    /// Admit, removing these expired entries in the same write.
    Reserve(Prune),
}

/// An UpdateItem's expressions, built without a client so they can be checked offline.
#[derive(Debug, Clone, PartialEq)]
pub(super) struct Expr {
    pub update: String,
    pub condition: String,
    pub names: HashMap<String, String>,
    pub values: HashMap<String, AttributeValue>,
}

impl Ledger {
    /// Reads a ledger item (`None` or empty: no ledger yet). A non-map `live` or a non-number entry
    /// is a malformed item of `table`.
    pub fn parse(table: &str, item: Option<&Item>) -> Result<Ledger> {
        let Some(item) = item.filter(|i| !i.is_empty()) else {
            return Ok(Ledger::default());
        };
        let bad = |reason: String| Error::MalformedItem {
            table: table.to_string(),
            reason,
        };
        let mut live = BTreeMap::new();
        match item.get(LEDGER_MAP) {
            Some(AttributeValue::M(m)) => {
                for (rid, v) in m {
                    let exp = match v {
                        AttributeValue::N(x) => parse_int(x),
                        _ => None,
                    }
                    .ok_or_else(|| bad(format!("ledger entry {rid} is not a number: {v:?}")))?;
                    live.insert(rid.clone(), (exp, v.clone()));
                }
            }
            None => {}
            Some(other) => {
                return Err(bad(format!(
                    "ledger attribute {LEDGER_MAP} is not a map: {other:?}"
                )))
            }
        }
        Ok(Ledger {
            exists: item.contains_key(LEDGER_MAP),
            live,
        })
    }

    /// Whether the ledger holds `id` with expiry `exp`: a lost-answer retry's proof that the first
    /// attempt of an admission applied.
    pub fn holds(&self, id: &str, exp: i64) -> bool {
        self.live.get(id).is_some_and(|(e, _)| *e == exp)
    }

    /// Decides an admission at `now` under `limit`: full, prune first, or reserve (pruning up to
    /// [`MAX_PRUNE`] expired entries in the same write).
    pub fn plan(&self, now: Timestamp, limit: u64) -> Plan {
        let expired: Vec<(String, AttributeValue)> = self
            .live
            .iter()
            .filter(|(_, (e, _))| !is_live(*e, now))
            .map(|(k, (_, raw))| (k.clone(), raw.clone()))
            .collect();
        let live = self.live.len() as u64 - expired.len() as u64;
        if live >= limit {
            return Plan::Full { live };
        }
        let unpruned = expired.len().saturating_sub(MAX_PRUNE) as u64;
        let prune: Prune = expired.into_iter().take(MAX_PRUNE).collect();
        if live + unpruned >= limit {
            Plan::PruneFirst(prune)
        } else {
            Plan::Reserve(prune)
        }
    }

    /// The state after a successful admission of `id` (expiring at `exp`) that removed `prune`.
    pub fn admitted(&mut self, prune: &Prune, id: &str, exp: i64) {
        for (k, _) in prune {
            self.live.remove(k);
        }
        self.exists = true;
        self.live.insert(id.to_string(), (exp, n(exp)));
    }
}

/// The admission write on one shard: add `id` → `exp` if, after removing the `prune` entries
/// (each only if still holding the value seen), fewer than `limit` (the shard's share) entries
/// remain. A shard that does not exist is created holding the new entry plus `ledger.live` (rows
/// found without a ledger, in shard 0) by [`seed_expr`]. `id` must not already be present (a uuid).
pub(super) fn reserve_expr(
    ledger: &Ledger,
    prune: &Prune,
    id: &str,
    exp: i64,
    limit: u64,
    names_of: (&str, &str),
    pair: (&str, &str),
) -> Expr {
    let mut names = HashMap::from([
        ("#live".to_string(), LEDGER_MAP.to_string()),
        ("#new".to_string(), id.to_string()),
    ]);
    let mut values = HashMap::from([(":exp".to_string(), n(exp))]);
    if ledger.exists {
        let mut update = "SET #live.#new = :exp".to_string();
        let mut condition = "size(#live) < :cap AND attribute_not_exists(#live.#new)".to_string();
        let mut removes = Vec::new();
        for (i, (k, raw)) in prune.iter().enumerate() {
            names.insert(format!("#x{i}"), k.clone());
            values.insert(format!(":x{i}"), raw.clone());
            removes.push(format!("#live.#x{i}"));
            condition.push_str(&format!(" AND #live.#x{i} = :x{i}"));
        }
        if !removes.is_empty() {
            update.push_str(&format!(" REMOVE {}", removes.join(", ")));
        }
        values.insert(":cap".into(), n(limit as i64 + prune.len() as i64));
        Expr {
            update,
            condition,
            names,
            values,
        }
    } else {
        let pruned: Vec<&String> = prune.iter().map(|(k, _)| k).collect();
        let mut m: Entries = ledger
            .live
            .iter()
            .filter(|(k, _)| !pruned.contains(k))
            .map(|(k, v)| (k.clone(), v.clone()))
            .collect();
        m.insert(id.to_string(), (exp, n(exp)));
        seed_expr(&m, names_of, pair)
    }
}

/// The write creating a ledger item that holds `entries`, with the pair's names for listings:
/// only if the item has no map yet (a concurrent creator wins; the loser re-decides).
pub(super) fn seed_expr(entries: &Entries, names_of: (&str, &str), pair: (&str, &str)) -> Expr {
    let m = entries
        .iter()
        .map(|(k, (_, raw))| (k.clone(), raw.clone()))
        .collect();
    Expr {
        update: "SET #live = :m, #rn = :rn, #acct = :acct".into(),
        condition: "attribute_not_exists(#live)".into(),
        names: HashMap::from([
            ("#live".to_string(), LEDGER_MAP.to_string()),
            ("#rn".to_string(), names_of.0.to_string()),
            ("#acct".to_string(), names_of.1.to_string()),
        ]),
        values: HashMap::from([
            (":m".to_string(), AttributeValue::M(m)),
            (":rn".to_string(), s(pair.0)),
            (":acct".to_string(), s(pair.1)),
        ]),
    }
}

#[cfg(test)]
pub(super) mod tests {
    use super::*;

    /// A ledger holding `entries` (id, expiry), as read from DynamoDB.
    pub(in crate::reservation) fn ledger(entries: &[(&str, i64)]) -> Ledger {
        Ledger {
            exists: true,
            live: entries
                .iter()
                .map(|(k, e)| (k.to_string(), (*e, n(*e))))
                .collect(),
        }
    }

    const NOW: i64 = 1_000;

    fn now() -> Timestamp {
        Timestamp::from_secs(NOW)
    }

    #[test]
    fn the_plan_counts_only_unexpired_entries() {
        let l = ledger(&[("a", NOW + 1), ("b", NOW), ("c", NOW - 5)]);
        // An entry expiring now no longer counts.
        assert_eq!(l.plan(now(), 1), Plan::Full { live: 1 });
        assert_eq!(
            l.plan(now(), 2),
            Plan::Reserve(vec![("b".into(), n(NOW)), ("c".into(), n(NOW - 5))])
        );
        assert_eq!(Ledger::default().plan(now(), 1), Plan::Reserve(vec![]));
    }

    #[test]
    fn too_many_expired_entries_are_pruned_before_admitting() {
        let expired: Vec<(String, i64)> = (0..MAX_PRUNE + 3)
            .map(|i| (format!("e{i:03}"), NOW - 1))
            .collect();
        let refs: Vec<(&str, i64)> = expired.iter().map(|(k, e)| (k.as_str(), *e)).collect();
        let l = ledger(&refs);
        // 53 stale entries, limit 2: one write may remove 50, leaving 3 ≥ 2 in the way.
        match l.plan(now(), 2) {
            Plan::PruneFirst(p) => assert_eq!(p.len(), MAX_PRUNE),
            other => panic!("{other:?}"),
        }
        // Limit 4: 3 left after pruning 50, so the admission itself prunes.
        assert!(matches!(l.plan(now(), 4), Plan::Reserve(p) if p.len() == MAX_PRUNE));
    }

    #[test]
    fn the_admission_write_is_conditioned_on_size_and_each_pruned_value() {
        let l = ledger(&[("old", NOW - 1), ("a", NOW + 9)]);
        let prune = vec![("old".to_string(), n(NOW - 1))];
        let e = reserve_expr(
            &l,
            &prune,
            "new",
            NOW + 300,
            2,
            ("rn", "acct"),
            ("emr", "1"),
        );
        assert_eq!(e.update, "SET #live.#new = :exp REMOVE #live.#x0");
        assert_eq!(
            e.condition,
            "size(#live) < :cap AND attribute_not_exists(#live.#new) AND #live.#x0 = :x0"
        );
        // 2 entries now, one removed, one added: allowed only while size < 2 + 1.
        assert_eq!(e.values[":cap"], n(3));
        assert_eq!(e.values[":x0"], n(NOW - 1));
        assert_eq!(e.names["#x0"], "old");

        let mut after = l.clone();
        after.admitted(&prune, "new", NOW + 300);
        assert_eq!(after.live.keys().collect::<Vec<_>>(), ["a", "new"]);
    }

    #[test]
    fn a_new_ledger_starts_with_the_rows_found_without_one() {
        let mut legacy = ledger(&[("py-1", NOW + 60), ("py-old", NOW - 1)]);
        legacy.exists = false;
        let prune = vec![("py-old".to_string(), n(NOW - 1))];
        let e = reserve_expr(
            &legacy,
            &prune,
            "new",
            NOW + 300,
            5,
            ("rn", "ac"),
            ("emr", "1"),
        );
        assert_eq!(e.condition, "attribute_not_exists(#live)");
        let AttributeValue::M(m) = &e.values[":m"] else {
            panic!("not a map")
        };
        let mut keys: Vec<_> = m.keys().cloned().collect();
        keys.sort();
        assert_eq!(keys, ["new", "py-1"]);
    }

    #[test]
    fn a_binding_reads_back_as_written_and_its_whole_part_is_the_expiry() {
        for id in [1, 42_500, 999_999] {
            let b = Binding {
                exp: NOW + 28_800,
                id,
            };
            let AttributeValue::N(v) = b.value() else {
                panic!("not a number")
            };
            assert_eq!(Binding::parse(&v), Some(b), "{v}");
            // DynamoDB hands numbers back without trailing zeros.
            let trimmed = v.trim_end_matches('0');
            assert_eq!(Binding::parse(trimmed), Some(b), "{trimmed}");
            // Listings and liveness read the whole part.
            let l = Ledger::parse(
                "t",
                Some(&Item::from([(
                    LEDGER_MAP.to_string(),
                    AttributeValue::M(HashMap::from([("r".into(), n(trimmed))])),
                )])),
            )
            .unwrap();
            assert_eq!(l.live["r"].0, NOW + 28_800);
        }
        assert_eq!(Binding::parse("1000"), Some(Binding { exp: 1000, id: 0 }));
        assert_eq!(Binding::parse("1000.1234567"), None);
        assert_eq!(Binding::parse("1.5e9"), None);
        assert!((0..100).all(|_| Binding::draw(NOW).id > 0));
    }

    #[test]
    fn malformed_ledgers_are_errors() {
        let item = |v: AttributeValue| Item::from([(LEDGER_MAP.to_string(), v)]);
        assert!(Ledger::parse("t", Some(&item(s("x")))).is_err());
        let m = AttributeValue::M(HashMap::from([("a".into(), s("soon"))]));
        assert!(Ledger::parse("t", Some(&item(m))).is_err());
        let m = AttributeValue::M(HashMap::from([("a".into(), n(5))]));
        let l = Ledger::parse("t", Some(&item(m))).unwrap();
        assert!(l.exists);
        assert_eq!(l.live["a"].0, 5);
        assert_eq!(Ledger::parse("t", None).unwrap(), Ledger::default());
    }
}
