//! TransactWriteItems plumbing: building items, sending, reading the cancellation reasons (which are
//! index-aligned with the items), and backing off when concurrent transactions collide.

use std::collections::HashMap;
use std::time::Duration;

use aws_sdk_dynamodb::error::SdkError;
use aws_sdk_dynamodb::operation::transact_write_items::TransactWriteItemsError;
use aws_sdk_dynamodb::types::{
    AttributeValue, Delete, Put, ReturnValuesOnConditionCheckFailure, TransactWriteItem, Update,
};

use super::item::Item;
use crate::error::{Error, Result};
use crate::Deps;

/// Attempts for a transaction that keeps colliding with concurrent ones before giving up.
pub const MAX_ATTEMPTS: u32 = 8;

/// Why one item of a cancelled transaction failed.
#[derive(Debug, Clone, PartialEq)]
pub enum Reason {
    /// This item did not cause the cancellation.
    Ok,
    /// Its condition failed; the item as it was (`ALL_OLD`), `None` when it did not exist.
    ConditionFailed(Option<Item>),
    /// Another transaction or write was working on the item: retry.
    Conflict,
    /// Anything else (throttling, validation...), by code.
    Other(String),
}

/// The outcome of one TransactWriteItems call.
#[derive(Debug)]
pub enum Outcome {
    Committed,
    Cancelled(Vec<Reason>),
}

/// Builds names/values maps from slices.
pub fn names(pairs: &[(&str, &str)]) -> HashMap<String, String> {
    pairs
        .iter()
        .map(|(k, v)| (k.to_string(), v.to_string()))
        .collect()
}

pub fn values(pairs: Vec<(&str, AttributeValue)>) -> HashMap<String, AttributeValue> {
    pairs.into_iter().map(|(k, v)| (k.to_string(), v)).collect()
}

fn built<T, E: std::fmt::Display>(r: std::result::Result<T, E>) -> Result<T> {
    r.map_err(|e| Error::Other(format!("building a transaction item: {e}")))
}

/// An Update item that returns the old item when its condition fails.
pub fn update(
    table: &str,
    key: Item,
    update_expr: &str,
    condition: Option<&str>,
    names: HashMap<String, String>,
    values: HashMap<String, AttributeValue>,
) -> Result<TransactWriteItem> {
    let u = built(
        Update::builder()
            .table_name(table)
            .set_key(Some(key))
            .update_expression(update_expr)
            .set_condition_expression(condition.map(str::to_string))
            .set_expression_attribute_names((!names.is_empty()).then_some(names))
            .set_expression_attribute_values((!values.is_empty()).then_some(values))
            .return_values_on_condition_check_failure(ReturnValuesOnConditionCheckFailure::AllOld)
            .build(),
    )?;
    Ok(TransactWriteItem::builder().update(u).build())
}

/// A Put that succeeds only when no item has the key `key_attr`.
pub fn put_new(table: &str, item: Item, key_attr: &str) -> Result<TransactWriteItem> {
    let p = built(
        Put::builder()
            .table_name(table)
            .set_item(Some(item))
            .condition_expression("attribute_not_exists(#k)")
            .expression_attribute_names("#k", key_attr)
            .return_values_on_condition_check_failure(ReturnValuesOnConditionCheckFailure::AllOld)
            .build(),
    )?;
    Ok(TransactWriteItem::builder().put(p).build())
}

/// A Delete that succeeds only when the item exists (so exactly one deleter wins).
pub fn delete_existing(table: &str, key: Item, key_attr: &str) -> Result<TransactWriteItem> {
    let d = built(
        Delete::builder()
            .table_name(table)
            .set_key(Some(key))
            .condition_expression("attribute_exists(#k)")
            .expression_attribute_names("#k", key_attr)
            .return_values_on_condition_check_failure(ReturnValuesOnConditionCheckFailure::AllOld)
            .build(),
    )?;
    Ok(TransactWriteItem::builder().delete(d).build())
}

/// One TransactWriteItems call (1 round trip).
pub async fn send(deps: &Deps, items: Vec<TransactWriteItem>) -> Result<Outcome> {
    let n = items.len();
    match deps
        .dynamo
        .transact_write_items()
        .set_transact_items(Some(items))
        .send()
        .await
    {
        Ok(_) => Ok(Outcome::Committed),
        Err(SdkError::ServiceError(se)) => match se.err() {
            TransactWriteItemsError::TransactionCanceledException(e) => {
                let mut reasons: Vec<Reason> = e
                    .cancellation_reasons()
                    .iter()
                    .map(|r| match r.code() {
                        None | Some("None") => Reason::Ok,
                        Some("ConditionalCheckFailed") => {
                            Reason::ConditionFailed(r.item().filter(|i| !i.is_empty()).cloned())
                        }
                        Some("TransactionConflict") => Reason::Conflict,
                        Some(other) => Reason::Other(other.to_string()),
                    })
                    .collect();
                if reasons.len() != n {
                    // Without aligned reasons no item can be blamed: treat as a collision.
                    reasons = vec![Reason::Conflict; n];
                }
                Ok(Outcome::Cancelled(reasons))
            }
            // A conflict with a concurrent transaction on one of the items.
            TransactWriteItemsError::TransactionInProgressException(_) => {
                Ok(Outcome::Cancelled(vec![Reason::Conflict; n]))
            }
            _ => Err(Error::dynamo(
                "TransactWriteItems",
                SdkError::ServiceError(se),
            )),
        },
        Err(e) => Err(Error::dynamo("TransactWriteItems", e)),
    }
}

/// Jittered exponential backoff before retry `attempt` (1-based): up to 10 ms, 20 ms, 40 ms, ...
/// capped at 320 ms.
pub async fn backoff(attempt: u32) {
    let cap_ms = 10u64 << attempt.min(5);
    tokio::time::sleep(Duration::from_millis(jitter(cap_ms))).await;
}

/// A random value in 1..=max, from the standard library's randomly keyed hasher.
fn jitter(max: u64) -> u64 {
    use std::hash::{BuildHasher, Hasher};
    let mut h = std::collections::hash_map::RandomState::new().build_hasher();
    h.write_u64(max);
    1 + h.finish() % max.max(1)
}
