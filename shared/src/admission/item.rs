//! Reading attributes out of DynamoDB items, with errors that name the table and attribute.

use std::collections::HashMap;

use aws_sdk_dynamodb::types::AttributeValue;

use crate::error::{Error, Result};

pub type Item = HashMap<String, AttributeValue>;

fn malformed(table: &str, reason: String) -> Error {
    Error::MalformedItem {
        table: table.to_string(),
        reason,
    }
}

pub fn string(table: &str, it: &Item, name: &str) -> Result<String> {
    match it.get(name) {
        Some(AttributeValue::S(s)) => Ok(s.clone()),
        Some(_) => Err(malformed(table, format!("{name} is not a string"))),
        None => Err(malformed(table, format!("{name} is missing"))),
    }
}

pub fn opt_number_i64(table: &str, it: &Item, name: &str) -> Result<Option<i64>> {
    match it.get(name) {
        Some(AttributeValue::N(n)) => n
            .parse::<i64>()
            .map(Some)
            .map_err(|_| malformed(table, format!("{name}={n} is not a whole number"))),
        Some(_) => Err(malformed(table, format!("{name} is not a number"))),
        None => Ok(None),
    }
}

pub fn opt_number_u64(table: &str, it: &Item, name: &str) -> Result<Option<u64>> {
    match opt_number_i64(table, it, name)? {
        Some(n) if n < 0 => Err(malformed(table, format!("{name}={n} is negative"))),
        Some(n) => Ok(Some(n as u64)),
        None => Ok(None),
    }
}

pub fn number_u64(table: &str, it: &Item, name: &str) -> Result<u64> {
    opt_number_u64(table, it, name)?.ok_or_else(|| malformed(table, format!("{name} is missing")))
}

/// A string set (absent = empty: DynamoDB removes a set when its last member goes).
pub fn string_set(it: &Item, name: &str) -> Vec<String> {
    match it.get(name) {
        Some(AttributeValue::Ss(v)) => v.clone(),
        _ => Vec::new(),
    }
}

/// A number attribute as i64, lenient (None when absent or not a number), for decisions on
/// `ALL_OLD` images where a missing attribute has a meaning of its own.
pub fn num(it: &Item, name: &str) -> Option<i64> {
    match it.get(name) {
        Some(AttributeValue::N(n)) => n.parse().ok(),
        _ => None,
    }
}

pub fn s(v: impl Into<String>) -> AttributeValue {
    AttributeValue::S(v.into())
}

pub fn n(v: impl std::fmt::Display) -> AttributeValue {
    AttributeValue::N(v.to_string())
}
