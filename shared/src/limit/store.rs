//! Limit rows and their in-memory cache.

use std::sync::Arc;
use std::time::Duration;

use aws_sdk_dynamodb::error::SdkError;
use aws_sdk_dynamodb::operation::delete_item::DeleteItemError;
use aws_sdk_dynamodb::operation::put_item::PutItemError;
use aws_sdk_dynamodb::types::{KeysAndAttributes, ReturnValuesOnConditionCheckFailure};
use aws_sdk_dynamodb::Client;
use serde::Serialize;

use super::Attrs;
use crate::cache::{Cache, WhenFull};
use crate::clock::SharedClock;
use crate::config::{ConfigError, Vars};
use crate::dynamo::item::{lenient_int, lenient_opt_int, lenient_opt_str, lenient_str, n, s, Item};
use crate::dynamo::retry::Backoff;
use crate::dynamo::{self, pages};
use crate::error::{Error, Result};
use crate::table::AttributeStyle;
use crate::Deps;

/// The largest capacity a non-fungible limit may have. Admission costs stay flat beyond it; what
/// grows with the shard count is the strongly consistent Query that confirms a refusal (all
/// shards: ~0.9 KB each, ~1,400 RCU and 6 pages at this ceiling), so the ceiling bounds that read.
pub const MAX_CAPACITY: u64 = 100_000;

/// Env var: seconds a limit row (or its absence) is cached in memory. `0` disables the cache.
pub const CACHE_SECS_VAR: &str = "TURNSTILE_LIMIT_CACHE_SECS";
/// Default limit-row cache time.
pub const DEFAULT_CACHE: Duration = Duration::from_secs(60);
/// Cached entries beyond this are dropped wholesale, bounding memory in a long-lived process.
const MAX_CACHED: usize = 10_000;

/// A caller's default allowance: `limit` tokens per `window`, used when no limit row exists.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize)]
#[serde(rename_all = "camelCase")]
pub struct Quota {
    pub limit: i64,
    #[serde(rename = "window_sec")]
    pub window_secs: i64,
}

impl Quota {
    /// `limit` tokens per `window_secs` seconds (rate-limiter-py's `limit`, `windowSec`).
    pub const fn new(limit: i64, window_secs: i64) -> Self {
        Quota { limit, window_secs }
    }
}

/// One row of the limit table.
#[derive(Debug, Clone, PartialEq, Eq, Serialize)]
#[serde(rename_all = "camelCase")]
pub struct LimitRow {
    pub resource_name: String,
    pub account_id: String,
    pub limit: i64,
    /// Absent on rows that only limit non-fungible tokens.
    pub window_sec: Option<i64>,
    pub service_name: Option<String>,
}

/// What a (row, default) pair means for a caller.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize)]
#[serde(tag = "kind", rename_all = "lowercase")]
pub enum Effective {
    /// `limit <= 0`: the account may take nothing.
    Blocked,
    /// `limit` tokens per `window_ms` (window is 0 where no window applies).
    Limited { limit: u64, window_ms: u64 },
}

impl Effective {
    /// The row overrides the default's limit and (when present) its window; `limit <= 0` blocks.
    /// A window that is not positive is an error naming where it came from.
    pub fn resolve(row: Option<&LimitRow>, default: Quota, table: &str) -> Result<Effective> {
        let limit = row.map_or(default.limit, |r| r.limit);
        if limit <= 0 {
            return Ok(Effective::Blocked);
        }
        let (window, from) = match row.and_then(|r| r.window_sec) {
            Some(w) => (w, "limit row"),
            None => (default.window_secs, "default quota"),
        };
        if window <= 0 {
            return Err(Error::MalformedItem {
                table: table.to_string(),
                reason: format!("{from} has window {window} s; it must be positive"),
            });
        }
        Ok(Effective::Limited {
            limit: limit as u64,
            window_ms: (window as u64).saturating_mul(1000),
        })
    }

    /// For non-fungible tokens only the count matters.
    pub fn capacity(row: Option<&LimitRow>, default_limit: i64) -> Effective {
        let limit = row.map_or(default_limit, |r| r.limit);
        if limit <= 0 {
            Effective::Blocked
        } else {
            Effective::Limited {
                limit: limit as u64,
                window_ms: 0,
            }
        }
    }
}

/// Reads limit rows, remembering each answer (including "no row") for the cache time, so a warm
/// limiter spends no DynamoDB call on limits. Clones share the cache.
#[derive(Debug, Clone)]
pub struct LimitStore {
    inner: Arc<Inner>,
}

#[derive(Debug)]
struct Inner {
    client: Client,
    table: String,
    index: String,
    attrs: Attrs,
    clock: SharedClock,
    ttl: Duration,
    cache: Cache<(String, String), Option<LimitRow>>,
}

/// The other item of a [`LimitStore::get_with`] read.
#[derive(Debug, Clone, PartialEq)]
pub enum Companion {
    /// Read: the item, or `None` when it does not exist.
    Found(Option<Item>),
    /// DynamoDB left the key unprocessed (or the tables are one): the caller reads it its own way.
    Unprocessed,
}

impl LimitStore {
    pub fn new(
        client: Client,
        table: &str,
        service_index: &str,
        style: AttributeStyle,
        clock: SharedClock,
        ttl: Duration,
    ) -> Self {
        LimitStore {
            inner: Arc::new(Inner {
                client,
                table: table.to_string(),
                index: service_index.to_string(),
                attrs: Attrs::of(style),
                clock,
                ttl,
                cache: Cache::new(MAX_CACHED, WhenFull::Clear),
            }),
        }
    }

    /// The limit table from `deps`, caching rows for `TURNSTILE_LIMIT_CACHE_SECS` (default 60).
    pub fn from_deps(deps: &Deps) -> Result<Self, ConfigError> {
        Ok(Self::new(
            deps.dynamo.clone(),
            &deps.tables.limits,
            &deps.tables.limit_service_index,
            deps.style,
            deps.clock.clone(),
            Self::cache_ttl(&deps.vars)?,
        ))
    }

    /// Reads `TURNSTILE_LIMIT_CACHE_SECS`.
    pub fn cache_ttl(vars: &Vars) -> Result<Duration, ConfigError> {
        vars.secs_or(CACHE_SECS_VAR, DEFAULT_CACHE)
    }

    pub fn table(&self) -> &str {
        &self.inner.table
    }

    pub fn attrs(&self) -> Attrs {
        self.inner.attrs
    }

    /// The cached answer for (resource, account) if still fresh: `Some(None)` means "known: no row".
    pub fn cached(&self, resource: &str, account: &str) -> Option<Option<LimitRow>> {
        if self.inner.ttl.is_zero() {
            return None;
        }
        let now = self.inner.clock.now();
        self.inner
            .cache
            .fresh(&(resource.to_string(), account.to_string()), now)
    }

    /// Records an answer read elsewhere (e.g. by a limiter's BatchGetItem).
    pub fn remember(&self, resource: &str, account: &str, row: Option<LimitRow>) {
        if self.inner.ttl.is_zero() {
            return;
        }
        let now = self.inner.clock.now();
        // Cached for good under the simulation's `LimitCachedForever` mutation (compiles away
        // without the feature).
        let forever = crate::mutation::active_on(
            &self.inner.table,
            crate::mutation::Mutation::LimitCachedForever,
        );
        let ttl = if forever {
            self.inner.ttl * 1000
        } else {
            self.inner.ttl
        };
        self.inner.cache.insert_until(
            (resource.to_string(), account.to_string()),
            row,
            now,
            now.plus(ttl),
        );
    }

    /// Forgets every cached answer (after loading new limits in the same process).
    pub fn clear(&self) {
        self.inner.cache.clear();
    }

    pub fn key(&self, resource: &str, account: &str) -> Item {
        let a = self.inner.attrs;
        Item::from([
            (a.resource_name.to_string(), s(resource)),
            (a.account_id.to_string(), s(account)),
        ])
    }

    /// Parses a limit-table item.
    pub fn parse(&self, item: &Item) -> Result<LimitRow> {
        let a = self.inner.attrs;
        let t = &self.inner.table;
        Ok(LimitRow {
            resource_name: lenient_str(item, t, a.resource_name)?,
            account_id: lenient_str(item, t, a.account_id)?,
            limit: lenient_int(item, t, a.limit)?,
            window_sec: lenient_opt_int(item, t, a.window_sec)?,
            service_name: lenient_opt_str(item, t, a.service_name)?,
        })
    }

    pub(crate) fn to_item(&self, row: &LimitRow) -> Item {
        let a = self.inner.attrs;
        let mut item = self.key(&row.resource_name, &row.account_id);
        item.insert(a.limit.into(), n(row.limit));
        if let Some(w) = row.window_sec {
            item.insert(a.window_sec.into(), n(w));
        }
        if let Some(svc) = &row.service_name {
            item.insert(a.service_name.into(), s(svc));
        }
        item
    }

    /// Cold paths of the limiters: the limit row and one item of another table (a bucket, a ledger) in
    /// **1** BatchGetItem, the other item read strongly consistent when `consistent`. The limit row is
    /// remembered in the cache; an unprocessed limit key falls back to [`LimitStore::get`] (+1 call).
    /// When both live in one table the other item is left [`Companion::Unprocessed`] for the caller.
    pub async fn get_with(
        &self,
        resource: &str,
        account: &str,
        table: &str,
        key: Item,
        consistent: bool,
    ) -> Result<(Option<LimitRow>, Companion)> {
        if self.table() == table {
            return Ok((self.get(resource, account).await?, Companion::Unprocessed));
        }
        let req = |key: Item, consistent: bool| {
            KeysAndAttributes::builder()
                .keys(key)
                .consistent_read(consistent)
                .build()
                .map_err(|e| Error::build_request("BatchGetItem", e))
        };
        let out = self
            .inner
            .client
            .batch_get_item()
            .request_items(self.table(), req(self.key(resource, account), false)?)
            .request_items(table, req(key, consistent)?)
            .send()
            .await
            .map_err(|e| Error::dynamo("BatchGetItem", e))?;
        let unprocessed = |t: &str| {
            out.unprocessed_keys()
                .and_then(|u| u.get(t))
                .is_some_and(|k| !k.keys().is_empty())
        };
        let got = |t: &str| {
            out.responses()
                .and_then(|r| r.get(t))
                .and_then(|items| items.first())
                .cloned()
        };
        let row = if unprocessed(self.table()) {
            self.get(resource, account).await?
        } else {
            let row = got(self.table()).map(|i| self.parse(&i)).transpose()?;
            self.remember(resource, account, row.clone());
            row
        };
        let other = if unprocessed(table) {
            Companion::Unprocessed
        } else {
            Companion::Found(got(table))
        };
        Ok((row, other))
    }

    /// The row for (resource, account). **0 calls** when cached, else **1** GetItem.
    pub async fn get(&self, resource: &str, account: &str) -> Result<Option<LimitRow>> {
        if let Some(hit) = self.cached(resource, account) {
            return Ok(hit);
        }
        let out = self
            .inner
            .client
            .get_item()
            .table_name(&self.inner.table)
            .set_key(Some(self.key(resource, account)))
            .send()
            .await
            .map_err(|e| Error::dynamo("GetItem", e))?;
        let row = out.item().map(|i| self.parse(i)).transpose()?;
        self.remember(resource, account, row.clone());
        Ok(row)
    }

    /// Every row of `service` (by the `serviceName` index, paginated), or of the whole table.
    /// One Query/Scan call per page.
    pub async fn list(&self, service: Option<&str>) -> Result<Vec<LimitRow>> {
        let mut rows = Vec::new();
        let each = |item: &Item| {
            rows.push(self.parse(item)?);
            Ok(())
        };
        let client = &self.inner.client;
        match service {
            Some(svc) => {
                let q = client
                    .query()
                    .table_name(&self.inner.table)
                    .index_name(&self.inner.index)
                    .key_condition_expression("#svc = :svc")
                    .expression_attribute_names("#svc", self.inner.attrs.service_name)
                    .expression_attribute_values(":svc", s(svc));
                pages::query(q, each).await?
            }
            None => pages::scan(client.scan().table_name(&self.inner.table), each).await?,
        }
        rows.sort_by(|a, b| {
            (&a.resource_name, &a.account_id).cmp(&(&b.resource_name, &b.account_id))
        });
        Ok(rows)
    }

    /// Writes a row (1 PutItem) and forgets its cached answer.
    pub async fn put(&self, row: &LimitRow) -> Result<()> {
        dynamo::put(&self.inner.client, &self.inner.table, self.to_item(row)).await?;
        self.forget(&row.resource_name, &row.account_id);
        Ok(())
    }

    /// Strongly consistent reads of up to any number of rows: one BatchGetItem per 100 keys (+1 per
    /// round of unprocessed keys). Rows that do not exist are absent from the answer.
    pub async fn get_many(&self, keys: &[(String, String)]) -> Result<Vec<LimitRow>> {
        let mut rows = Vec::new();
        for chunk in keys.chunks(100) {
            let mut pending: Vec<Item> = chunk.iter().map(|(r, a)| self.key(r, a)).collect();
            for round in 0u32.. {
                if pending.is_empty() {
                    break;
                }
                if round > 0 {
                    Backoff::CONDITIONAL.wait(round.min(8)).await;
                }
                let req = KeysAndAttributes::builder()
                    .set_keys(Some(std::mem::take(&mut pending)))
                    .consistent_read(true)
                    .build()
                    .map_err(|e| Error::build_request("BatchGetItem", e))?;
                let out = self
                    .inner
                    .client
                    .batch_get_item()
                    .request_items(self.table(), req)
                    .send()
                    .await
                    .map_err(|e| Error::dynamo("BatchGetItem", e))?;
                if let Some(items) = out.responses().and_then(|r| r.get(self.table())) {
                    for item in items {
                        rows.push(self.parse(item)?);
                    }
                }
                if let Some(u) = out.unprocessed_keys().and_then(|u| u.get(self.table())) {
                    pending = u.keys().to_vec();
                }
            }
        }
        Ok(rows)
    }

    /// Writes `row` (1 PutItem) only if no row exists or the row already belongs to `row`'s service
    /// (or, to take it over, to `take_over_from`: `Some(None)` is a row without a service). The
    /// condition makes a concurrent loader of another service unable to lose its row to this one.
    /// `Ok(None)`: written; `Ok(Some(current))`: refused, the row as it is.
    pub async fn put_owned(
        &self,
        row: &LimitRow,
        take_over_from: Option<Option<&str>>,
    ) -> Result<Option<LimitRow>> {
        let a = self.inner.attrs;
        let Some(me) = row.service_name.as_deref() else {
            return Err(Error::InvalidArgument(format!(
                "limit row {}/{} has no service name",
                row.resource_name, row.account_id
            )));
        };
        let mut req = self
            .inner
            .client
            .put_item()
            .table_name(&self.inner.table)
            .set_item(Some(self.to_item(row)))
            .expression_attribute_names("#pk", a.resource_name)
            .expression_attribute_names("#svc", a.service_name)
            .expression_attribute_values(":me", s(me))
            .return_values_on_condition_check_failure(ReturnValuesOnConditionCheckFailure::AllOld);
        let cond = match take_over_from {
            None => "attribute_not_exists(#pk) OR #svc = :me",
            Some(None) => "attribute_not_exists(#pk) OR #svc = :me OR attribute_not_exists(#svc)",
            Some(Some(owner)) => {
                req = req.expression_attribute_values(":owner", s(owner));
                "attribute_not_exists(#pk) OR #svc = :me OR #svc = :owner"
            }
        };
        let sent = req.condition_expression(cond).send().await;
        self.forget(&row.resource_name, &row.account_id);
        match sent {
            Ok(_) => Ok(None),
            Err(SdkError::ServiceError(se)) => {
                if let PutItemError::ConditionalCheckFailedException(c) = se.err() {
                    return match c.item() {
                        Some(old) => Ok(Some(self.parse(old)?)),
                        None => Err(Error::Dynamo {
                            operation: "PutItem",
                            message: format!(
                                "limit row {}/{}: the ownership condition failed without the row",
                                row.resource_name, row.account_id
                            ),
                        }),
                    };
                }
                Err(Error::dynamo("PutItem", SdkError::ServiceError(se)))
            }
            Err(e) => Err(Error::dynamo("PutItem", e)),
        }
    }

    /// Deletes (resource, account) only while `service` owns it (1 DeleteItem). `Ok(None)`: deleted
    /// or already gone; `Ok(Some(current))`: another service (or none) owns it now, left alone.
    pub async fn delete_owned(
        &self,
        resource: &str,
        account: &str,
        service: &str,
    ) -> Result<Option<LimitRow>> {
        let sent = self
            .inner
            .client
            .delete_item()
            .table_name(&self.inner.table)
            .set_key(Some(self.key(resource, account)))
            .condition_expression("#svc = :me")
            .expression_attribute_names("#svc", self.inner.attrs.service_name)
            .expression_attribute_values(":me", s(service))
            .return_values_on_condition_check_failure(ReturnValuesOnConditionCheckFailure::AllOld)
            .send()
            .await;
        self.forget(resource, account);
        match sent {
            Ok(_) => Ok(None),
            Err(SdkError::ServiceError(se)) => {
                if let DeleteItemError::ConditionalCheckFailedException(c) = se.err() {
                    return c.item().map(|old| self.parse(old)).transpose();
                }
                Err(Error::dynamo("DeleteItem", SdkError::ServiceError(se)))
            }
            Err(e) => Err(Error::dynamo("DeleteItem", e)),
        }
    }

    /// Deletes a row (1 DeleteItem) and forgets its cached answer.
    pub async fn delete(&self, resource: &str, account: &str) -> Result<()> {
        self.inner
            .client
            .delete_item()
            .table_name(&self.inner.table)
            .set_key(Some(self.key(resource, account)))
            .send()
            .await
            .map_err(|e| Error::dynamo("DeleteItem", e))?;
        self.forget(resource, account);
        Ok(())
    }

    fn forget(&self, resource: &str, account: &str) {
        self.inner
            .cache
            .remove(&(resource.to_string(), account.to_string()));
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn row(limit: i64, window: Option<i64>) -> LimitRow {
        LimitRow {
            resource_name: "r".into(),
            account_id: "a".into(),
            limit,
            window_sec: window,
            service_name: None,
        }
    }

    #[test]
    fn the_row_overrides_the_default_and_zero_blocks() {
        let d = Quota::new(10, 100);
        assert_eq!(
            Effective::resolve(None, d, "t").unwrap(),
            Effective::Limited {
                limit: 10,
                window_ms: 100_000
            }
        );
        assert_eq!(
            Effective::resolve(Some(&row(3, Some(5))), d, "t").unwrap(),
            Effective::Limited {
                limit: 3,
                window_ms: 5_000
            }
        );
        assert_eq!(
            Effective::resolve(Some(&row(3, None)), d, "t").unwrap(),
            Effective::Limited {
                limit: 3,
                window_ms: 100_000
            }
        );
        assert_eq!(
            Effective::resolve(Some(&row(0, Some(5))), d, "t").unwrap(),
            Effective::Blocked
        );
        assert_eq!(
            Effective::resolve(Some(&row(-1, None)), d, "t").unwrap(),
            Effective::Blocked
        );
        assert!(Effective::resolve(Some(&row(1, Some(0))), d, "t").is_err());
        assert_eq!(Effective::capacity(None, 0), Effective::Blocked);
    }
}
