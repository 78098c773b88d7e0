//! Reading and writing DynamoDB attribute values for the rate-limiter-py tables. Rows may have been
//! written by the Python library (numbers such as `1700000000123.456`), so reads are lenient about
//! number formats but strict about types: a string where a number belongs is a malformed item.

use std::collections::HashMap;

use aws_sdk_dynamodb::types::AttributeValue;

use crate::error::Error;

pub(crate) type Item = HashMap<String, AttributeValue>;

pub(crate) fn s(v: impl Into<String>) -> AttributeValue {
    AttributeValue::S(v.into())
}

pub(crate) fn n(v: i64) -> AttributeValue {
    AttributeValue::N(v.to_string())
}

fn malformed(table: &str, reason: String) -> Error {
    Error::MalformedItem {
        table: table.to_string(),
        reason,
    }
}

/// A string attribute, or `None` when absent.
pub(crate) fn opt_str(item: &Item, table: &str, name: &str) -> Result<Option<String>, Error> {
    match item.get(name) {
        None | Some(AttributeValue::Null(_)) => Ok(None),
        Some(AttributeValue::S(v)) => Ok(Some(v.clone())),
        Some(other) => Err(malformed(
            table,
            format!("attribute {name} should be a string, found {other:?}"),
        )),
    }
}

pub(crate) fn req_str(item: &Item, table: &str, name: &str) -> Result<String, Error> {
    opt_str(item, table, name)?
        .ok_or_else(|| malformed(table, format!("attribute {name} is missing")))
}

/// A number attribute rounded down to an integer (Python writes floats such as `8.0`), or `None`.
pub(crate) fn opt_int(item: &Item, table: &str, name: &str) -> Result<Option<i64>, Error> {
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

pub(crate) fn req_int(item: &Item, table: &str, name: &str) -> Result<i64, Error> {
    opt_int(item, table, name)?
        .ok_or_else(|| malformed(table, format!("attribute {name} is missing")))
}

/// An integer, or a decimal rounded down (`-7.5` → `-8`). Out-of-range values saturate.
pub(crate) fn parse_int(v: &str) -> Option<i64> {
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
        assert!(opt_int(&item, "t", "limit").is_err());
        assert_eq!(opt_int(&item, "t", "windowSec").unwrap(), None);
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
