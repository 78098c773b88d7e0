//! How a coordinate's capacity is split over ledger shards (decision 0101, "Sharded ledger").
//!
//! A limit `L` is held by `N = ceil(L / SHARD_CAPACITY)` ledger items, filled first to last: shard
//! `k` holds at most `min(SHARD_CAPACITY, L - k * SHARD_CAPACITY)` entries. The shares sum to `L`
//! exactly, so one conditional write on one shard is still an exact admission, and a shard never
//! grows past ~800 bytes: every ledger write is one write unit at any capacity. Shard 0 keeps the
//! unsharded ledger's sort key, so a ledger written before sharding is shard 0 unchanged.
//!
//! Everything here is pure.

use super::ledger::LEDGER_ID;

/// Entries per shard: 16 entries of ~51 bytes (a 41-character id and a binding: an expiry with a
/// six-digit bind id) plus the keys and the pair's names stay under 1 KB for coordinates up to 66
/// bytes, so a ledger write is 1 WCU (computed below by DynamoDB's size rules, and checked against
/// DynamoDB Local's consumed capacity by the reservation tests). Longer coordinates cost 2 WCU per
/// ledger write once a shard fills with bound tokens.
pub const SHARD_CAPACITY: u64 = 16;

pub use crate::limit::MAX_CAPACITY;

/// Separates a reservation id's uuid from its shard number (`{uuid}.{k}`); uuids never hold it.
const SHARD_SEPARATOR: char = '.';

/// The number of shards holding `limit` units (at least one, so a coordinate always has shard 0).
pub fn shard_count(limit: u64) -> u32 {
    limit.div_ceil(SHARD_CAPACITY).max(1) as u32
}

/// How many entries shard `k` may hold under `limit` (0 for shards past the last).
pub fn share(k: u32, limit: u64) -> u64 {
    limit
        .saturating_sub(u64::from(k) * SHARD_CAPACITY)
        .min(SHARD_CAPACITY)
}

/// The sort key of shard `k`: `~ledger` for shard 0 (the unsharded ledger's), `~ledger.{k}` after.
pub fn sort_key(k: u32) -> String {
    if k == 0 {
        LEDGER_ID.to_string()
    } else {
        format!("{LEDGER_ID}{SHARD_SEPARATOR}{k}")
    }
}

/// The shard a ledger sort key names, `None` for any other sort key (a token row).
pub fn of_sort_key(sk: &str) -> Option<u32> {
    match sk.strip_prefix(LEDGER_ID)? {
        "" => Some(0),
        rest => rest.strip_prefix(SHARD_SEPARATOR)?.parse().ok(),
    }
}

/// A new reservation's id in shard `k`: `{uuid}.{k}`.
pub fn reservation_id(uuid: &str, k: u32) -> String {
    format!("{uuid}{SHARD_SEPARATOR}{k}")
}

/// The shard holding reservation `id`'s entry: the number after its last `.`. `None` for ids
/// written before sharding (in shard 0) or by rate-limiter-py (seeded into shard 0, or into later
/// shards when shard 0 could not hold them all): those are looked for in shard 0 first, then
/// found with a read of every shard.
pub fn of_reservation(id: &str) -> Option<u32> {
    id.rsplit_once(SHARD_SEPARATOR)
        .and_then(|(_, k)| k.parse().ok())
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn shares_fill_first_and_sum_to_the_limit() {
        for limit in [1, 15, 16, 17, 32, 33, 1_000, 99_999, MAX_CAPACITY] {
            let n = shard_count(limit);
            let total: u64 = (0..n).map(|k| share(k, limit)).sum();
            assert_eq!(total, limit, "limit {limit}");
            assert!((0..n).all(|k| share(k, limit) >= 1), "no empty shard");
            assert_eq!(share(n, limit), 0, "nothing past the last shard");
        }
        assert_eq!(shard_count(0), 1);
        assert_eq!(shard_count(16), 1);
        assert_eq!(shard_count(17), 2);
        assert_eq!((share(0, 17), share(1, 17)), (16, 1));
        // Raising a limit only grows the last share or adds shards: what earlier shards may hold
        // never shrinks, so entries admitted under the old limit stay within the new shares.
        for k in 0..10 {
            assert!(share(k, 100) <= share(k, 101));
        }
    }

    /// The fullest shard of the highest shard number, by DynamoDB's item-size rules, for a
    /// coordinate of `resource` and `account` in the snake style (the longer attribute names).
    fn worst_shard_size(resource: &str, account: &str) -> u64 {
        let k = shard_count(MAX_CAPACITY) - 1;
        let uuid = "3f1c2d4e-0000-4000-8000-000000000000";
        let live: serde_json::Map<String, serde_json::Value> = (0..SHARD_CAPACITY)
            .map(|i| {
                let id = reservation_id(&format!("{}{i:02}", &uuid[..34]), k);
                // A bound token's value: every digit significant (16: 9 bytes).
                (id, serde_json::json!({"N": "1764201234.123457"}))
            })
            .collect();
        crate::capacity::item_size(&serde_json::json!({
            "resource_coordinate": {"S": format!("{resource}:{account}")},
            "reservation_id": {"S": sort_key(k)},
            "live": {"M": live},
            "resource_name": {"S": resource},
            "account_id": {"S": account},
        }))
    }

    #[test]
    fn a_full_shard_is_one_write_unit_for_coordinates_up_to_66_bytes() {
        // rate-limiter-py's own example coordinate (EMR, an AWS account id).
        assert!(worst_shard_size("emr", "123456789012") <= 1024);
        // A 66-byte coordinate still fits; names are counted twice (key and listing attributes).
        let resource = "r".repeat(40);
        let account = "a".repeat(25);
        assert_eq!(resource.len() + 1 + account.len(), 66);
        let size = worst_shard_size(&resource, &account);
        assert!(size <= 1024, "{size} bytes");
        assert!(
            worst_shard_size(&resource, &"a".repeat(27)) > 1024,
            "the documented bound is tight"
        );
    }

    #[test]
    fn ids_and_sort_keys_name_their_shard() {
        let u = "3f1c2d4e-0000-4000-8000-000000000000";
        assert_eq!(reservation_id(u, 0), format!("{u}.0"));
        assert_eq!(of_reservation(u), None);
        assert_eq!(of_reservation(&reservation_id(u, 0)), Some(0));
        assert_eq!(of_reservation(&reservation_id(u, 6_249)), Some(6_249));
        assert_eq!(of_reservation("legacy.not-a-number"), None);
        assert_eq!(sort_key(0), "~ledger");
        assert_eq!(sort_key(7), "~ledger.7");
        for k in [0, 1, 6_249] {
            assert_eq!(of_sort_key(&sort_key(k)), Some(k));
        }
        assert_eq!(of_sort_key(u), None);
        assert_eq!(of_sort_key("~ledgerx"), None);
        assert_eq!(of_sort_key("~ledger.x"), None);
    }
}
