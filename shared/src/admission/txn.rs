//! TransactWriteItems plumbing: sending, reading the cancellation reasons (which are index-aligned
//! with the items), and backing off when concurrent writes collide.

use std::time::Duration;

use aws_sdk_dynamodb::error::SdkError;
use aws_sdk_dynamodb::operation::transact_write_items::TransactWriteItemsError;
use aws_sdk_dynamodb::types::TransactWriteItem;

use super::item::Item;
use crate::error::{Error, Result};
use crate::Deps;

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
