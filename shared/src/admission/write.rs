//! One conditional `UpdateItem` built from expression parts, with the old item back when its
//! condition fails (`ReturnValuesOnConditionCheckFailure = ALL_OLD`), so callers decide without a
//! read. Writes that must apply at most once (decrements, `$connect`'s reservation, which retried
//! after a lost answer would reserve twice or refuse while holding a unit, and `$connect`'s session
//! write, whose "already a member" answer would otherwise be mistaken for a repeated `$connect`) are sent with
//! the SDK's automatic retries off: a timeout then leaves the write unknown, and the caller keeps
//! the safe side (a count too high, repaired by the reconciler) instead of applying it twice.
//! Throttling answers are retried here: DynamoDB rejected those requests without applying them.

use std::collections::HashMap;

use aws_sdk_dynamodb::config::retry::RetryConfig;
use aws_sdk_dynamodb::error::{ProvideErrorMetadata, SdkError};
use aws_sdk_dynamodb::operation::update_item::UpdateItemError;
use aws_sdk_dynamodb::types::{AttributeValue, ReturnValue, ReturnValuesOnConditionCheckFailure};

use crate::dynamo::item::Item;
use crate::dynamo::retry::{self, Backoff};
use crate::error::{error_chain, Error, Result};
use crate::Deps;

/// Throttled attempts of an at-most-once write before giving up (each one a counted call).
const THROTTLE_ATTEMPTS: u32 = 4;

/// The parts of one conditional update; [`ConditionalUpdate::update`] and [`ConditionalUpdate::condition`] join them.
#[derive(Debug, Clone, Default)]
pub struct ConditionalUpdate {
    pub conditions: Vec<String>,
    pub set: Vec<String>,
    pub add: Vec<String>,
    pub delete: Vec<String>,
    pub remove: Vec<String>,
    pub names: HashMap<String, String>,
    pub values: HashMap<String, AttributeValue>,
}

impl ConditionalUpdate {
    pub fn name(&mut self, placeholder: &str, attr: &str) -> &mut Self {
        self.names.insert(placeholder.into(), attr.into());
        self
    }

    pub fn value(&mut self, placeholder: &str, v: AttributeValue) -> &mut Self {
        self.values.insert(placeholder.into(), v);
        self
    }

    pub fn condition(&self) -> Option<String> {
        (!self.conditions.is_empty()).then(|| {
            self.conditions
                .iter()
                .map(|c| format!("({c})"))
                .collect::<Vec<_>>()
                .join(" AND ")
        })
    }

    /// These parts as one `Update` of a `TransactWriteItems` on `key` of `table` (no old image on a
    /// failed condition: the cancellation reason says which item failed). `what` names it in errors.
    pub fn transact_update(
        self,
        table: &str,
        key: Item,
        what: &'static str,
    ) -> Result<aws_sdk_dynamodb::types::TransactWriteItem> {
        let update = aws_sdk_dynamodb::types::Update::builder()
            .table_name(table)
            .set_key(Some(key))
            .set_condition_expression(self.condition())
            .update_expression(self.update())
            .set_expression_attribute_names(Some(self.names))
            .set_expression_attribute_values(Some(self.values))
            .return_values_on_condition_check_failure(ReturnValuesOnConditionCheckFailure::None)
            .build()
            .map_err(|e| Error::build_request(what, e))?;
        Ok(aws_sdk_dynamodb::types::TransactWriteItem::builder()
            .update(update)
            .build())
    }

    pub fn update(&self) -> String {
        let mut u = Vec::new();
        if !self.set.is_empty() {
            u.push(format!("SET {}", self.set.join(", ")));
        }
        if !self.add.is_empty() {
            u.push(format!("ADD {}", self.add.join(", ")));
        }
        if !self.delete.is_empty() {
            u.push(format!("DELETE {}", self.delete.join(", ")));
        }
        if !self.remove.is_empty() {
            u.push(format!("REMOVE {}", self.remove.join(", ")));
        }
        u.join(" ")
    }
}

/// How a write may be retried.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Retries {
    /// The SDK's standard retries: for writes whose repetition errs on the safe side.
    Sdk,
    /// At most once: only throttled attempts (never applied) are sent again.
    AtMostOnce,
}

/// The outcome of one conditional update.
#[derive(Debug)]
pub enum UpdateOutcome {
    /// Applied; the attributes asked for with `returned` (empty when none).
    Applied(Item),
    /// The condition failed: the item as it was (`None` when there was no item). Nothing changed.
    Refused(Option<Item>),
}

/// One `UpdateItem` on `key` of `table` (1 call; at most [`THROTTLE_ATTEMPTS`] when throttled
/// with [`Retries::AtMostOnce`]).
pub async fn update(
    deps: &Deps,
    table: &str,
    key: &Item,
    parts: &ConditionalUpdate,
    returned: ReturnValue,
    retries: Retries,
) -> Result<UpdateOutcome> {
    let mut attempt = 0;
    loop {
        attempt += 1;
        let mut req = deps
            .dynamo
            .update_item()
            .table_name(table)
            .set_key(Some(key.clone()))
            .update_expression(parts.update())
            .set_condition_expression(parts.condition())
            .set_expression_attribute_names((!parts.names.is_empty()).then(|| parts.names.clone()))
            .set_expression_attribute_values(
                (!parts.values.is_empty()).then(|| parts.values.clone()),
            )
            .return_values(returned.clone())
            .return_values_on_condition_check_failure(ReturnValuesOnConditionCheckFailure::AllOld)
            .customize();
        if retries == Retries::AtMostOnce {
            req = req.config_override(
                aws_sdk_dynamodb::config::Builder::default().retry_config(RetryConfig::disabled()),
            );
        }
        match req.send().await {
            Ok(out) => {
                return Ok(UpdateOutcome::Applied(
                    out.attributes().cloned().unwrap_or_default(),
                ))
            }
            Err(SdkError::ServiceError(se)) => match se.err() {
                UpdateItemError::ConditionalCheckFailedException(e) => {
                    return Ok(UpdateOutcome::Refused(
                        e.item().filter(|i| !i.is_empty()).cloned(),
                    ))
                }
                other
                    if retries == Retries::AtMostOnce
                        && retry::is_throttle(other.code())
                        && attempt < THROTTLE_ATTEMPTS =>
                {
                    Backoff::TRANSACTION.wait(attempt).await;
                }
                other if retry::certainly_not_applied(other.code()) => {
                    let code = other.code().unwrap_or_default().to_string();
                    return Err(Error::DynamoRejected {
                        operation: "UpdateItem",
                        code,
                        message: error_chain(&SdkError::ServiceError(se)),
                    });
                }
                _ => return Err(Error::dynamo("UpdateItem", SdkError::ServiceError(se))),
            },
            // Never sent: the request could not be built.
            Err(e @ SdkError::ConstructionFailure(_)) => {
                return Err(Error::DynamoRejected {
                    operation: "UpdateItem",
                    code: "ConstructionFailure".into(),
                    message: error_chain(&e),
                })
            }
            Err(e) => return Err(Error::dynamo("UpdateItem", e)),
        }
    }
}

/// [`update`] with nothing returned, sent at most once ([`Retries::AtMostOnce`]): `$connect`'s
/// writes and the decrements, which an SDK retry of a lost answer would apply twice.
pub async fn update_once(
    deps: &Deps,
    table: &str,
    key: &Item,
    parts: &ConditionalUpdate,
) -> Result<UpdateOutcome> {
    update(
        deps,
        table,
        key,
        parts,
        ReturnValue::None,
        Retries::AtMostOnce,
    )
    .await
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn parts_join_into_expressions() {
        let mut p = ConditionalUpdate::default();
        assert_eq!(p.condition(), None);
        p.conditions.push("a OR b".into());
        p.conditions.push("c".into());
        p.set.push("#x = :x".into());
        p.add.push("#c :one".into());
        p.add.push("#v :one".into());
        assert_eq!(p.condition().unwrap(), "(a OR b) AND (c)");
        assert_eq!(p.update(), "SET #x = :x ADD #c :one, #v :one");
        assert!(retry::is_throttle(Some("ThrottlingException")));
        assert!(!retry::is_throttle(Some("ConditionalCheckFailedException")));
    }
}
