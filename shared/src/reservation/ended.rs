//! A resource's partition: its ended marker and the rows of the tokens bound to it.
//!
//! **Bound rows** (decision 0101). A token's binding is a row keyed by the resource, partition
//! `:ended:{resource id}`, sort key the reservation id, holding `resourceName`, `accountId`, the
//! token's `expirationTime` (also its TTL) and `binding`, the value its ledger entry takes (the
//! expiry and a bind id: [`Binding`]). The remover reads a resource's tokens with one strongly
//! consistent Query of that partition, so rows carry no `resourceId`: writing one costs 1 WCU and
//! no resource-index write (the index stays, for rows written before and by rate-limiter-py).
//! Binding one reservation to one resource only is the ledger's job: its entry moves from an
//! unbound expiry to this row's binding once (decision 0101, "Bound rows").
//!
//! **The ended marker**, sort key `~ended` in the same partition. The remover
//! first records that the resource ended, and a bind reads the marker (strongly consistent) after
//! writing its row and before extending its ledger entry: either the bind sees the marker and
//! releases itself, or its row was written before the marker, hence before the remover's Query
//! (decision 0101, "Ended resources"). The marker expires, by TTL, one token lifetime after the
//! event: a bind later than that would be of a resource ended hours before.
//!
//! The partition key is named for the marker, its first item. No coordinate starts with `:`,
//! since an empty resource name is refused ([`super::coordinate::encode`]), so no coordinate's rows
//! or ledger can be confused with it; a reservation id never starts with `~`, so no bound row is the
//! marker.

use aws_sdk_dynamodb::operation::delete_item::DeleteItemError;
use aws_sdk_dynamodb::operation::update_item::UpdateItemError;
use aws_sdk_dynamodb::types::{AttributeValue, ReturnValue};

use super::coordinate::MAX_COORDINATE_BYTES;
use super::ledger::{is_live, Binding};
use super::limiter::attempt_of;
use super::{NonFungibleLimiter, Reservation};
use crate::dynamo;
use crate::dynamo::item::{lenient_opt_int, n, s, Item};
use crate::error::{Error, Result};

/// Sort key of an ended-resource marker.
pub const ENDED_ID: &str = "~ended";
/// Partition-key prefix of an ended-resource marker; no coordinate starts with `:`.
pub const ENDED_PREFIX: &str = ":ended:";
/// The longest resource id a token may be bound to (its marker's key must fit DynamoDB's 2,048).
pub const MAX_RESOURCE_ID_BYTES: usize = MAX_COORDINATE_BYTES - ENDED_PREFIX.len();

/// The marker's partition key for `resource_id`, or why there can be none.
pub fn marker_key(resource_id: &str) -> Result<String> {
    if resource_id.is_empty() || resource_id.len() > MAX_RESOURCE_ID_BYTES {
        return Err(Error::InvalidArgument(format!(
            "a resource id must be 1 to {MAX_RESOURCE_ID_BYTES} bytes (got {})",
            resource_id.len()
        )));
    }
    Ok(format!("{ENDED_PREFIX}{resource_id}"))
}

/// A bind's row as its write left it: the binding it holds, and whether this call wrote that
/// binding (its freshly drawn id is there: a row that was there before keeps its own binding, so
/// a bind never mistakes another call's row, or its own earlier attempt's, for one it may delete).
#[derive(Debug, Clone, Copy)]
pub(super) struct BoundRow {
    pub binding: Binding,
    pub created: bool,
}

impl NonFungibleLimiter {
    /// Reads the binding a bound row records.
    pub(super) fn binding_of(&self, item: &Item) -> Result<Binding> {
        let name = self.inner.attrs.binding;
        match item.get(name) {
            Some(AttributeValue::N(v)) => Binding::parse(v),
            _ => None,
        }
        .ok_or_else(|| Error::MalformedItem {
            table: self.inner.table.clone(),
            reason: format!("bound row without a binding: {name}={:?}", item.get(name)),
        })
    }

    /// Records that `resource_id` ended, for one token lifetime. 1 PutItem (1 WCU); idempotent
    /// (a redelivered event rewrites it).
    pub(super) async fn mark_ended(&self, resource_id: &str) -> Result<()> {
        let key = marker_key(resource_id)?;
        let exp = self.inner.clock.now().plus(self.inner.token_ttl).as_secs();
        let mut item = self.key(&key, ENDED_ID);
        item.insert(self.inner.attrs.expiration_time.to_string(), n(exp));
        dynamo::put(&self.inner.client, &self.inner.table, item).await
    }

    /// Bind's first write: the row of `r` in `resource_id`'s partition holding `drawn`, unless the
    /// row already holds a binding (the same bind run again by its client, or an earlier attempt
    /// of this reservation's bind to this resource), which is kept. Returns the binding the row
    /// holds, the one the ledger entry is then moved to (so a repeated bind is the same bind), and
    /// whether it is `drawn`: an SDK re-send after a lost answer finds its own id, so it too knows
    /// the row is its own. 1 UpdateItem (1 WCU).
    pub(super) async fn write_bound_row(
        &self,
        r: &Reservation,
        resource_id: &str,
        drawn: Binding,
    ) -> Result<BoundRow> {
        let key = marker_key(resource_id)?;
        let a = self.inner.attrs;
        let mut attempt = 0;
        loop {
            let sent = self
                .update_row(&key, &r.id)
                .update_expression(
                    "SET #rn = :rn, #acct = :acct, #exp = if_not_exists(#exp, :exp), \
                     #bind = if_not_exists(#bind, :bind)",
                )
                .expression_attribute_names("#rn", a.resource_name)
                .expression_attribute_names("#acct", a.account_id)
                .expression_attribute_names("#exp", a.expiration_time)
                .expression_attribute_names("#bind", a.binding)
                .expression_attribute_values(":rn", s(&r.resource))
                .expression_attribute_values(":acct", s(&r.account))
                .expression_attribute_values(":exp", n(drawn.exp))
                .expression_attribute_values(":bind", drawn.value())
                .return_values(ReturnValue::UpdatedNew)
                .send()
                .await;
            match sent {
                Ok(out) => {
                    let new = out.attributes().cloned().unwrap_or_default();
                    let binding = self.binding_of(&new)?;
                    return Ok(BoundRow {
                        binding,
                        created: binding == drawn,
                    });
                }
                // Unconditional: the only answer short of an error is "throttled, retry".
                Err(err) => {
                    attempt_of("UpdateItem", err, |_: &UpdateItemError| None)?;
                    Self::pause(&mut attempt, &r.coordinate).await?;
                }
            }
        }
    }

    /// Deletes the row of `id` in `resource_id`'s partition while it still holds `binding` (one a
    /// failed bind wrote itself, or one the remover released). 1 DeleteItem; a failure is logged:
    /// the row holds no capacity, and TTL removes it at its expiry.
    pub(super) async fn delete_bound_row(&self, resource_id: &str, id: &str, binding: Binding) {
        let Ok(key) = marker_key(resource_id) else {
            return;
        };
        let sent = self
            .delete_row(&key, id)
            .condition_expression("#bind = :bind")
            .expression_attribute_names("#bind", self.inner.attrs.binding)
            .expression_attribute_values(":bind", binding.value())
            .send()
            .await;
        if let Err(e) = sent {
            if !matches!(
                e.as_service_error(),
                Some(DeleteItemError::ConditionalCheckFailedException(_))
            ) {
                tracing::warn!(reservation = %id, resource_id = %resource_id, error = %Error::dynamo("DeleteItem", e), "could not delete a bound row; it holds no capacity and expires on its own");
            }
        }
    }

    /// Whether `resource_id` has ended (a live marker). 1 GetItem, strongly consistent.
    pub(super) async fn has_ended(&self, resource_id: &str) -> Result<bool> {
        let key = marker_key(resource_id)?;
        let marker = self.key(&key, ENDED_ID);
        let Some(item) =
            dynamo::get_consistent(&self.inner.client, &self.inner.table, marker).await?
        else {
            return Ok(false);
        };
        let exp = lenient_opt_int(&item, &self.inner.table, self.inner.attrs.expiration_time)?;
        // Past its expiry the marker no longer counts, whether or not TTL has removed it yet.
        Ok(exp.is_some_and(|e| is_live(e, self.inner.clock.now())))
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::reservation::coordinate::encode;

    #[test]
    fn no_coordinate_can_be_a_marker_and_every_marker_key_fits() {
        for (resource, account) in [("emr", "1"), ("e", ":ended:x"), ("~ended", "x")] {
            let c = encode(resource, account).unwrap();
            assert!(!c.starts_with(ENDED_PREFIX), "{c}");
        }
        assert!(
            encode("", "ended:x").is_err(),
            "the only way to start with ':'"
        );
        let longest = "j".repeat(MAX_RESOURCE_ID_BYTES);
        assert_eq!(marker_key(&longest).unwrap().len(), MAX_COORDINATE_BYTES);
        assert!(marker_key(&format!("{longest}j")).is_err());
        assert!(marker_key("").is_err());
    }
}
