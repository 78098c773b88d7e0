//! Denials held in memory (decision 0603): a denial writes nothing, so this process keeps its
//! count per bucket and adds it to the bucket's next write, or writes it off the admission path
//! with [`Limiter::flush_throttles`].

use super::denials::BucketDenials;
use super::outcome::KvError;
use super::state::Limiter;
use crate::clock::Timestamp;
use crate::dynamo::item::{n, s};
use crate::gcra_write::{self};
use aws_sdk_dynamodb::error::SdkError;
use aws_sdk_dynamodb::operation::update_item::UpdateItemError;

impl Limiter {
    /// Writes the denials this process holds onto their buckets' items, each guarded by the
    /// bucket's `version` as seen when the denial was decided (optimistic lock): if anything wrote
    /// the bucket since, the write is skipped and the denials ride on this process's next spend of
    /// that bucket instead. Returns how many buckets were written.
    ///
    /// Off the admission path: call it after answering (or from the CLI). DynamoDB calls: **1**
    /// `UpdateItem` per bucket with held denials; none when there are none.
    pub async fn flush_throttles(&self, now: Timestamp) -> Result<usize, KvError> {
        let held: Vec<(String, BucketDenials)> = match self.pending.0.lock() {
            Ok(mut p) => p.drain().collect(),
            Err(_) => return Ok(0),
        };
        let mut written = 0;
        let mut first_error = None;
        for (key, p) in held {
            let Some(version) = p.version else {
                self.pending.keep(&key, Some(p), 0, now, None);
                continue;
            };
            let res = self
                .client
                .update_item()
                .table_name(&self.table)
                .key(crate::kv::attr::BUCKET, s(key.clone()))
                .condition_expression("#ver = :v")
                .update_expression(
                    "SET #ta = if_not_exists(#ta, :ft), #ua = :now ADD #tc :n, #ver :one",
                )
                .expression_attribute_names("#ver", gcra_write::attr::VERSION)
                .expression_attribute_names("#ta", gcra_write::attr::THROTTLED_AT)
                .expression_attribute_names("#tc", gcra_write::attr::THROTTLE_COUNT)
                .expression_attribute_names("#ua", gcra_write::attr::UPDATED_AT)
                .expression_attribute_values(":v", n(version))
                .expression_attribute_values(":ft", n(p.first.as_nanos()))
                .expression_attribute_values(":now", n(now.as_nanos()))
                .expression_attribute_values(":n", n(p.count))
                .expression_attribute_values(":one", n(1))
                .send()
                .await;
            match res {
                Ok(_) => written += 1,
                Err(SdkError::ServiceError(e))
                    if matches!(e.err(), UpdateItemError::ConditionalCheckFailedException(_)) =>
                {
                    let unguarded = BucketDenials { version: None, ..p };
                    self.pending.keep(&key, Some(unguarded), 0, now, None);
                }
                Err(e) => {
                    self.pending.keep(&key, Some(p), 0, now, None);
                    first_error.get_or_insert(crate::Error::dynamo("UpdateItem", e));
                }
            }
        }
        match first_error {
            Some(e) => Err(e.into()),
            None => Ok(written),
        }
    }

    /// Denials held in memory, not yet written (tests and diagnostics).
    pub fn held_throttles(&self) -> u64 {
        self.pending
            .0
            .lock()
            .map(|p| p.values().map(|p| p.count).sum())
            .unwrap_or(0)
    }
}
