//! TransactWriteItems plumbing: sending, and reading the cancellation reasons (index-aligned with
//! the items) once for every caller; [`is_conflict`] sorts the error codes that mean "no definite
//! outcome, try again" for single-item writes too.

use aws_sdk_dynamodb::error::SdkError;
use aws_sdk_dynamodb::operation::transact_write_items::TransactWriteItemsError;
use aws_sdk_dynamodb::types::{CancellationReason, TransactWriteItem};
use aws_sdk_dynamodb::Client;

use crate::dynamo::item::Item;
use crate::error::{Error, Result};

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

impl Reason {
    /// One SDK cancellation reason.
    pub fn of(r: &CancellationReason) -> Reason {
        match r.code() {
            None | Some("None") => Reason::Ok,
            Some("ConditionalCheckFailed") => {
                Reason::ConditionFailed(r.item().filter(|i| !i.is_empty()).cloned())
            }
            Some("TransactionConflict") => Reason::Conflict,
            Some(other) => Reason::Other(other.to_string()),
        }
    }

    /// Whether a retry may succeed where this failed: a conflict, or an [`is_conflict`] code
    /// (a throttled item of a cancelled transaction).
    pub fn is_conflict(&self) -> bool {
        match self {
            Reason::Conflict => true,
            Reason::Other(code) => is_conflict(Some(code)),
            Reason::Ok | Reason::ConditionFailed(_) => false,
        }
    }
}

/// The outcome of one TransactWriteItems call.
#[derive(Debug)]
pub enum Outcome {
    Committed,
    Cancelled(Vec<Reason>),
}

/// One TransactWriteItems call (1 round trip).
pub async fn send(client: &Client, items: Vec<TransactWriteItem>) -> Result<Outcome> {
    let n = items.len();
    match client
        .transact_write_items()
        .set_transact_items(Some(items))
        .send()
        .await
    {
        Ok(_) => Ok(Outcome::Committed),
        Err(e) => cancelled(e, n).map(Outcome::Cancelled),
    }
}

/// [`send`] with a `ClientRequestToken`: the SDK's retry of an attempt that applied but lost its
/// answer carries the same token, and DynamoDB answers it as committed without applying it again
/// (for 10 minutes; after that its conditions decide). 1 round trip.
pub async fn send_with_token(
    client: &Client,
    items: Vec<TransactWriteItem>,
    token: &str,
) -> Result<Outcome> {
    let n = items.len();
    match client
        .transact_write_items()
        .set_transact_items(Some(items))
        .client_request_token(token)
        .send()
        .await
    {
        Ok(_) => Ok(Outcome::Committed),
        Err(e) => cancelled(e, n).map(Outcome::Cancelled),
    }
}

/// The per-item reasons of a failed TransactWriteItems of `n` items, or the error when it was not
/// cancelled. Reasons that do not align with the items, and a `TransactionInProgressException`,
/// blame no item: every item reads [`Reason::Conflict`] (retry).
pub fn cancelled(err: SdkError<TransactWriteItemsError>, n: usize) -> Result<Vec<Reason>> {
    match err {
        SdkError::ServiceError(se) => match se.err() {
            TransactWriteItemsError::TransactionCanceledException(e) => {
                let reasons: Vec<Reason> =
                    e.cancellation_reasons().iter().map(Reason::of).collect();
                if reasons.len() != n {
                    return Ok(vec![Reason::Conflict; n]);
                }
                Ok(reasons)
            }
            // A conflict with a concurrent transaction on one of the items.
            TransactWriteItemsError::TransactionInProgressException(_) => {
                Ok(vec![Reason::Conflict; n])
            }
            _ => Err(Error::dynamo(
                "TransactWriteItems",
                SdkError::ServiceError(se),
            )),
        },
        e => Err(Error::dynamo("TransactWriteItems", e)),
    }
}

/// Error codes that mean "no definite outcome; try again": another transaction held the item, or
/// an item of a cancelled transaction was throttled (the SDK does not retry a cancellation). A
/// throttling *exception* (`ThrottlingException`, `ProvisionedThroughputExceededException`,
/// `RequestLimitExceeded`: [`super::retry::is_throttle`]) is not here: the SDK has already retried
/// it with backoff, and looping on it kept a warm `get_token` past 8 s under persistent
/// throttling; failing closed is bounded (decision 0900).
pub fn is_conflict(code: Option<&str>) -> bool {
    matches!(
        code,
        Some(
            "TransactionConflictException"
                | "TransactionConflict"
                | "ThrottlingError"
                | "ProvisionedThroughputExceeded"
                | "TransactionInProgressException"
        )
    )
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn reasons_are_decoded_once() {
        let r = |code: Option<&str>| {
            let mut b = CancellationReason::builder();
            if let Some(c) = code {
                b = b.code(c);
            }
            Reason::of(&b.build())
        };
        assert_eq!(r(None), Reason::Ok);
        assert_eq!(r(Some("None")), Reason::Ok);
        assert_eq!(
            r(Some("ConditionalCheckFailed")),
            Reason::ConditionFailed(None)
        );
        assert_eq!(r(Some("TransactionConflict")), Reason::Conflict);
        assert!(r(Some("ThrottlingError")).is_conflict());
        assert!(!r(Some("ValidationError")).is_conflict());
        assert!(!r(Some("ConditionalCheckFailed")).is_conflict());
    }
}
