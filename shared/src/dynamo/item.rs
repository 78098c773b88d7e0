//! Reading and writing attribute values of DynamoDB items: one codec for every table. Readers take
//! `(item, table, name)` and fail with [`Error::MalformedItem`] naming both; the lenient ones
//! ([`num`], [`string_set`]) read `ALL_OLD` images where a missing attribute has a meaning.
//!
//! Two strictness levels on purpose: Turnstile's own rows ([`string`], [`strict_opt_i64`]...) are
//! whole numbers and never `NULL`; rows the rate-limiter-py library may have written ([`lenient_opt_str`],
//! [`lenient_opt_int`]...) can hold `NULL` or numbers such as `1700000000123.456`, read rounded down.

use std::collections::HashMap;

use aws_sdk_dynamodb::types::AttributeValue;

use crate::error::{Error, Result};

pub type Item = HashMap<String, AttributeValue>;

pub fn s(v: impl Into<String>) -> AttributeValue {
    AttributeValue::S(v.into())
}

pub fn n(v: impl std::fmt::Display) -> AttributeValue {
    AttributeValue::N(v.to_string())
}

fn malformed(table: &str, reason: String) -> Error {
    Error::MalformedItem {
        table: table.to_string(),
        reason,
    }
}

/// A string attribute (strict: absent, `NULL` or another type is malformed).
pub fn strict_str(it: &Item, table: &str, name: &str) -> Result<String> {
    match it.get(name) {
        Some(AttributeValue::S(s)) => Ok(s.clone()),
        Some(_) => Err(malformed(table, format!("{name} is not a string"))),
        None => Err(malformed(table, format!("{name} is missing"))),
    }
}

/// A whole number, or `None` when absent (strict: `8.0` is malformed).
pub fn strict_opt_i64(it: &Item, table: &str, name: &str) -> Result<Option<i64>> {
    match it.get(name) {
        Some(AttributeValue::N(n)) => n
            .parse::<i64>()
            .map(Some)
            .map_err(|_| malformed(table, format!("{name}={n} is not a whole number"))),
        Some(_) => Err(malformed(table, format!("{name} is not a number"))),
        None => Ok(None),
    }
}

pub fn strict_opt_u64(it: &Item, table: &str, name: &str) -> Result<Option<u64>> {
    match strict_opt_i64(it, table, name)? {
        Some(n) if n < 0 => Err(malformed(table, format!("{name}={n} is negative"))),
        Some(n) => Ok(Some(n as u64)),
        None => Ok(None),
    }
}

pub fn strict_u64(it: &Item, table: &str, name: &str) -> Result<u64> {
    strict_opt_u64(it, table, name)?.ok_or_else(|| malformed(table, format!("{name} is missing")))
}

/// A string set (absent = empty: DynamoDB removes a set when its last member goes).
pub fn string_set(it: &Item, name: &str) -> Vec<String> {
    match it.get(name) {
        Some(AttributeValue::Ss(v)) => v.clone(),
        _ => Vec::new(),
    }
}

/// A number attribute as i64, lenient (None when absent or not an integer), for decisions on
/// `ALL_OLD` images where a missing attribute has a meaning of its own. An integer beyond `i64`
/// (DynamoDB numbers have 38 digits, and `SET tat = tat + :inc` can pass the end of the time type)
/// saturates rather than reading as absent, which for a TAT would mean a full bucket.
pub fn num(it: &Item, name: &str) -> Option<i64> {
    match it.get(name) {
        Some(AttributeValue::N(s)) => s.parse().ok().or_else(|| {
            s.trim()
                .parse::<i128>()
                .ok()
                .map(|v| v.clamp(i128::from(i64::MIN), i128::from(i64::MAX)) as i64)
        }),
        _ => None,
    }
}

/// A string attribute, or `None` when absent or `NULL` (rows the Python library wrote).
pub fn lenient_opt_str(item: &Item, table: &str, name: &str) -> Result<Option<String>> {
    match item.get(name) {
        None | Some(AttributeValue::Null(_)) => Ok(None),
        Some(AttributeValue::S(v)) => Ok(Some(v.clone())),
        Some(other) => Err(malformed(
            table,
            format!("attribute {name} should be a string, found {other:?}"),
        )),
    }
}

pub fn lenient_str(item: &Item, table: &str, name: &str) -> Result<String> {
    lenient_opt_str(item, table, name)?
        .ok_or_else(|| malformed(table, format!("attribute {name} is missing")))
}

/// A number attribute rounded down to an integer (Python writes floats such as `8.0`), or `None`.
pub fn lenient_opt_int(item: &Item, table: &str, name: &str) -> Result<Option<i64>> {
    match item.get(name) {
        None | Some(AttributeValue::Null(_)) => Ok(None),
        Some(AttributeValue::N(v)) => parse_int(v)
            .map(Some)
            .ok_or_else(|| malformed(table, format!("attribute {name}={v:?} is not a number"))),
        Some(other) => Err(malformed(
            table,
            format!("attribute {name} should be a number, found {other:?}"),
        )),
    }
}

pub fn lenient_int(item: &Item, table: &str, name: &str) -> Result<i64> {
    lenient_opt_int(item, table, name)?
        .ok_or_else(|| malformed(table, format!("attribute {name} is missing")))
}

/// An integer, or a decimal rounded down (`-7.5` → `-8`). Out-of-range values saturate.
pub fn parse_int(v: &str) -> Option<i64> {
    if let Ok(i) = v.trim().parse::<i64>() {
        return Some(i);
    }
    let f = v.trim().parse::<f64>().ok()?;
    if f.is_finite() {
        Some(f.floor() as i64)
    } else {
        None
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn numbers_written_by_python_are_read_leniently() {
        assert_eq!(parse_int("8"), Some(8));
        assert_eq!(parse_int("8.0"), Some(8));
        assert_eq!(parse_int("-7.5"), Some(-8));
        assert_eq!(parse_int("1700000000123.456"), Some(1_700_000_000_123));
        assert_eq!(parse_int("abc"), None);
        let mut item = Item::new();
        item.insert("limit".into(), s("ten"));
        assert!(lenient_opt_int(&item, "t", "limit").is_err());
        assert_eq!(lenient_opt_int(&item, "t", "windowSec").unwrap(), None);
    }

    #[test]
    fn turnstile_rows_are_read_strictly() {
        let item = Item::from([
            ("a".to_string(), n(7)),
            ("f".to_string(), n("8.0")),
            ("neg".to_string(), n(-1)),
            ("null".to_string(), AttributeValue::Null(true)),
        ]);
        assert_eq!(strict_opt_u64(&item, "t", "a").unwrap(), Some(7));
        assert!(
            strict_opt_i64(&item, "t", "f").is_err(),
            "not a whole number"
        );
        assert!(strict_u64(&item, "t", "neg").is_err(), "negative");
        assert!(strict_u64(&item, "t", "absent").is_err(), "missing");
        assert!(strict_str(&item, "t", "null").is_err());
        assert_eq!(
            lenient_opt_str(&item, "t", "null").unwrap(),
            None,
            "lenient reader"
        );
    }

    #[test]
    fn integers_past_i64_saturate() {
        let item = Item::from([("tat".to_string(), n("99999999999999999999999"))]);
        assert_eq!(num(&item, "tat"), Some(i64::MAX));
        assert_eq!(num(&item, "absent"), None);
    }
}

/// Property tests (docs/testing.md): limit and token rows may come from the Python library.
#[cfg(test)]
mod fuzz_tests {
    use proptest::prelude::*;

    proptest! {
        #![proptest_config(crate::fuzz::config(1))]

        /// `fuzz_stored_numbers`: any stored number text parses to an integer (rounded down,
        /// saturating) or to nothing; every `i64` parses to itself.
        #[test]
        fn fuzz_stored_numbers(
            v in prop_oneof![crate::fuzz::text(), "-?[0-9]{1,40}(\\.[0-9]{0,20})?([eE][+-]?[0-9]{1,4})?", "(NaN|inf|-inf|infinity)"],
            n in any::<i64>(),
        ) {
            let _ = super::parse_int(&v);
            prop_assert_eq!(super::parse_int(&n.to_string()), Some(n));
        }
    }
}
