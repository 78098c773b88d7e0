//! Ended resources (issue 22 item 14). The remover finds a resource's tokens through the resource
//! index, which is eventually consistent: a TERMINATED event handled before a bind of that
//! resource (or before the bind's row reached the index) found nothing, and the late bind then
//! held capacity for the token's lifetime. So the remover first records that the resource ended,
//! in an item keyed by the resource id, and a bind reads that item (strongly consistent) after
//! writing its row: either the bind sees the marker and releases itself, or its row was written
//! before the marker, hence before the remover's index query (decision 0101, "Ended resources").
//!
//! The marker lives in the non-fungible table under partition key `:ended:{resource id}`: a
//! coordinate never starts with `:`, since an empty resource name is refused
//! ([`super::coordinate::encode`]), so no coordinate's rows or ledger can be confused with it. It
//! has no `resourceId` (it stays out of the resource index) and expires, by TTL, one token
//! lifetime after the event: a bind later than that would be of a resource ended hours before.

use super::coordinate::MAX_COORDINATE_BYTES;
use super::ledger::is_live;
use super::NonFungibleLimiter;
use crate::dynamo::item::{n, opt_int};
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

impl NonFungibleLimiter {
    /// Records that `resource_id` ended, for one token lifetime. 1 PutItem (1 WCU); idempotent
    /// (a redelivered event rewrites it).
    pub(super) async fn mark_ended(&self, resource_id: &str) -> Result<()> {
        let key = marker_key(resource_id)?;
        let exp = self.inner.clock.now().plus(self.inner.token_ttl).as_secs();
        let mut item = self.key(&key, ENDED_ID);
        item.insert(self.inner.attrs.expiration_time.to_string(), n(exp));
        self.inner
            .client
            .put_item()
            .table_name(&self.inner.table)
            .set_item(Some(item))
            .send()
            .await
            .map_err(|e| Error::dynamo("PutItem", e))?;
        Ok(())
    }

    /// Whether `resource_id` has ended (a live marker). 1 GetItem, strongly consistent.
    pub(super) async fn has_ended(&self, resource_id: &str) -> Result<bool> {
        let key = marker_key(resource_id)?;
        let out = self
            .inner
            .client
            .get_item()
            .table_name(&self.inner.table)
            .set_key(Some(self.key(&key, ENDED_ID)))
            .consistent_read(true)
            .send()
            .await
            .map_err(|e| Error::dynamo("GetItem", e))?;
        let Some(item) = out.item() else {
            return Ok(false);
        };
        let exp = opt_int(item, &self.inner.table, self.inner.attrs.expiration_time)?;
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
