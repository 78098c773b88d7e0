//! The `resourceCoordinate` key of the non-fungible table: `"{resource}:{account}"`, as
//! rate-limiter-py writes it, made injective by refusing the separator in the resource name.
//!
//! With `:` allowed on both sides, (`emr`, `acct:1`) and (`emr:acct`, `1`) would both be
//! `emr:acct:1` and share one ledger. A resource name never contains `:`, so the first `:` of a
//! coordinate always ends the resource name and [`decode`] recovers the pair: two different pairs
//! can no longer encode alike. Accounts may contain `:` (ARNs, `org:team`). Rows of names without
//! `:` are byte-for-byte what rate-limiter-py writes. Decision 0101.

/// Separator between the resource name and the account id.
pub const SEPARATOR: char = ':';
/// DynamoDB's limit on a partition key value, in UTF-8 bytes.
pub const MAX_COORDINATE_BYTES: usize = 2048;
/// DynamoDB's limit on a sort key value, in UTF-8 bytes: the account id is the sort key of the
/// pair's limit row, read by every cold reservation, so a longer one could never reserve.
pub const MAX_ACCOUNT_BYTES: usize = 1024;

pub use crate::error::CoordinateError;

/// `"{resource}:{account}"`, or why the pair cannot be encoded unambiguously.
pub fn encode(resource: &str, account: &str) -> Result<String, CoordinateError> {
    if resource.is_empty() {
        return Err(CoordinateError::Empty {
            field: "resource name",
        });
    }
    if account.is_empty() {
        return Err(CoordinateError::Empty {
            field: "account id",
        });
    }
    if resource.contains(SEPARATOR) {
        return Err(CoordinateError::SeparatorInResource {
            resource: resource.to_string(),
        });
    }
    if account.len() > MAX_ACCOUNT_BYTES {
        return Err(CoordinateError::AccountTooLong {
            len: account.len(),
            max: MAX_ACCOUNT_BYTES,
        });
    }
    let len = resource.len() + SEPARATOR.len_utf8() + account.len();
    if len > MAX_COORDINATE_BYTES {
        return Err(CoordinateError::TooLong {
            resource: resource.to_string(),
            len,
            max: MAX_COORDINATE_BYTES,
        });
    }
    Ok(format!("{resource}{SEPARATOR}{account}"))
}

/// The (resource, account) a coordinate was encoded from: split at the first `:`. `None` when
/// there is no separator or a side is empty (not a coordinate [`encode`] writes).
pub fn decode(coordinate: &str) -> Option<(&str, &str)> {
    let (resource, account) = coordinate.split_once(SEPARATOR)?;
    (!resource.is_empty() && !account.is_empty()).then_some((resource, account))
}

#[cfg(test)]
mod tests {
    use std::collections::HashMap;

    use super::*;

    /// Every string of length 0..=max over `alphabet`.
    fn strings(alphabet: &[char], max: usize) -> Vec<String> {
        let mut all = vec![String::new()];
        let mut last = vec![String::new()];
        for _ in 0..max {
            last = last
                .iter()
                .flat_map(|s| alphabet.iter().map(move |c| format!("{s}{c}")))
                .collect();
            all.extend(last.iter().cloned());
        }
        all
    }

    /// Injectivity by exhaustion over a small alphabet holding the separator and a multi-byte
    /// character: every pair that encodes decodes back to itself, and no two pairs share an
    /// encoding. Refusals are exactly the empty sides and a ':' in the resource name.
    #[test]
    fn encoding_is_injective_over_every_short_pair() {
        let words = strings(&['a', ':', 'é'], 4);
        let mut seen: HashMap<String, (String, String)> = HashMap::new();
        let mut encoded = 0;
        for r in &words {
            for a in &words {
                match encode(r, a) {
                    Ok(c) => {
                        encoded += 1;
                        assert_eq!(decode(&c), Some((r.as_str(), a.as_str())), "{c:?}");
                        if let Some(other) = seen.insert(c.clone(), (r.clone(), a.clone())) {
                            panic!("{c:?} encodes both {other:?} and {:?}", (r, a));
                        }
                    }
                    Err(CoordinateError::Empty { .. }) => assert!(r.is_empty() || a.is_empty()),
                    Err(CoordinateError::SeparatorInResource { .. }) => assert!(r.contains(':')),
                    Err(e) => panic!("unexpected {e}"),
                }
            }
        }
        // 1 + 3 + 9 + 27 + 81 = 121 words; 2^0 + .. + 2^4 - 1 = 30 non-empty without ':'.
        assert_eq!(encoded, 30 * 120);
    }

    #[test]
    fn the_colliding_pair_of_issue_12_is_told_apart() {
        assert_eq!(encode("emr", "acct:1").unwrap(), "emr:acct:1");
        let err = encode("emr:acct", "1").unwrap_err();
        assert!(
            err.to_string().contains("resource name \"emr:acct\""),
            "{err}"
        );
        // Names rate-limiter-py users have (no ':') are unchanged.
        assert_eq!(encode("emr", "123456789012").unwrap(), "emr:123456789012");
        assert_eq!(decode("emr:acct:1"), Some(("emr", "acct:1")));
        assert_eq!(decode("emr"), None);
    }

    #[test]
    fn the_key_size_limits_are_checked_before_dynamodb_sees_them() {
        let long = "a".repeat(MAX_COORDINATE_BYTES);
        let resource = &long[..MAX_COORDINATE_BYTES - MAX_ACCOUNT_BYTES];
        assert!(matches!(
            encode(resource, &long[..MAX_ACCOUNT_BYTES]),
            Err(CoordinateError::TooLong { len: 2049, .. })
        ));
        assert!(encode(&resource[1..], &long[..MAX_ACCOUNT_BYTES]).is_ok());
        // The account is the sort key of the pair's limit row, which DynamoDB caps at 1,024 bytes.
        assert!(matches!(
            encode("emr", &long[..MAX_ACCOUNT_BYTES + 1]),
            Err(CoordinateError::AccountTooLong { len: 1025, .. })
        ));
    }
}
