//! The fungible limiter: its state and its take/refund loop.

use super::shard_vars::shards_from_vars;
use std::collections::HashMap;
use std::future::Future;
use std::sync::{Arc, Mutex};
use std::time::Duration;

use aws_sdk_dynamodb::error::{ProvideErrorMetadata, SdkError};
use aws_sdk_dynamodb::operation::update_item::UpdateItemError;
use aws_sdk_dynamodb::types::{AttributeValue, ReturnValue, ReturnValuesOnConditionCheckFailure};
use aws_sdk_dynamodb::Client;
use serde::Serialize;

use super::super::bucket::{format_ms, parse_ms, refill, time_for, BucketState};
use super::super::Attrs;
use crate::cache::{Cache, WhenFull};
use crate::clock::{SharedClock, Timestamp};
use crate::config::ConfigError;
use crate::dynamo::item::{n, s, Item};
use crate::dynamo::retry::Backoff;
use crate::dynamo::txn::is_conflict;
use crate::error::{Error, Result};
use crate::limit::{Companion, Effective, LimitRow, LimitStore, Quota};
use crate::Deps;

/// Attempts before a decision gives up with [`Error::Contended`]; each failed attempt
/// returned the bucket's real state, so this only trips under extreme contention.
pub(super) const MAX_ATTEMPTS: u32 = 64;
/// Bucket states remembered beyond this are dropped wholesale (bounded memory).
pub(super) const MAX_CACHED: usize = 10_000;

/// How a decision was reached.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize)]
#[serde(rename_all = "kebab-case")]
pub enum Source {
    /// A conditional write (granted), or the state a write's failed condition returned (denied).
    Dynamodb,
    /// Refused from the last state seen: the bucket cannot hold a token before `retry_after`.
    RejectionCache,
    /// The limit row says `limit <= 0`.
    Blocked,
}

/// The answer to one `get_token`.
#[derive(Debug, Clone, PartialEq, Eq, Serialize)]
#[serde(rename_all = "camelCase")]
pub struct Decision {
    pub resource: String,
    pub account: String,
    pub granted: bool,
    /// Tokens left after this decision.
    pub remaining: u64,
    /// The limit and window that applied (0 when blocked).
    pub limit: u64,
    pub window_ms: u64,
    /// Denied: how long until a token can be had (`None` when blocked: no wait will help). In
    /// JSON `retryAfter`, in seconds, as HTTP's `Retry-After`.
    #[serde(rename = "retryAfter", serialize_with = "retry_after")]
    pub retry_after_ms: Option<u64>,
    /// How long until the bucket is full again.
    pub reset_ms: u64,
    /// The instant decided at, and the reset instant, in RFC 3339.
    pub at: String,
    pub reset_at: String,
    pub source: Source,
}

pub(super) fn retry_after<S: serde::Serializer>(ms: &Option<u64>, s: S) -> Result<S::Ok, S::Error> {
    match ms {
        Some(ms) => s.serialize_f64(crate::clock::retry_after_secs(Duration::from_millis(*ms))),
        None => s.serialize_none(),
    }
}

impl Decision {
    pub fn retry_after(&self) -> Option<Duration> {
        self.retry_after_ms.map(Duration::from_millis)
    }
    pub fn reset(&self) -> Duration {
        Duration::from_millis(self.reset_ms)
    }
}

/// Why scoped work did not run.
#[derive(Debug, thiserror::Error)]
pub enum TokenError {
    #[error("rate limited: no token for {} / {} (retry after {:?} ms)", .0.resource, .0.account, .0.retry_after_ms)]
    Limited(Box<Decision>),
    #[error("the event carries no account id for resource {0}")]
    MissingAccount(String),
    #[error(transparent)]
    Store(#[from] Error),
}

/// What we last saw of a bucket row: the parsed state and the raw values the next write's condition
/// must match exactly (Python may have written `8.0` where we would write `8`).
#[derive(Debug, Clone, Default)]
pub(super) struct Seen {
    pub(super) tokens_raw: Option<AttributeValue>,
    pub(super) refill_raw: Option<AttributeValue>,
    pub(super) state: Option<BucketState>,
}

/// Fungible tokens (rate-limiter-py's): a token bucket per (resource, account) in the token table,
/// with limits from the limit table. Clones share caches; build one per process.
///
/// Call budget of [`get_token`](Self::get_token): warm (limit row cached and bucket seen) **1**
/// UpdateItem; cold **2** (one BatchGetItem for the limit row and bucket, then the write); a
/// bucket known to be empty **0** until its next token is due; each lost race adds 1 (the failed
/// write returns the winner's state, so no read is needed).
#[derive(Debug, Clone)]
pub struct FungibleLimiter {
    pub(super) inner: Arc<Inner>,
}

#[derive(Debug)]
pub(super) struct Inner {
    pub(super) client: Client,
    pub(super) table: String,
    pub(super) attrs: Attrs,
    pub(super) limits: LimitStore,
    pub(super) clock: SharedClock,
    pub(super) seen: Cache<(String, String), Seen>,
    /// Resources spread over more than one bucket row (decision 1500), and the shard choices.
    pub(super) shards: Mutex<HashMap<String, u32>>,
    pub(super) picker: crate::shard::Picker,
}

/// One bucket row a take works on: the logical `resource` (for the decision and the limit row),
/// the partition key it is stored under, and the tokens per window it holds.
#[derive(Debug, Clone, Copy)]
pub(super) struct Bucket<'a> {
    pub(super) resource: &'a str,
    pub(super) store: &'a str,
    pub(super) account: &'a str,
    pub(super) limit: u64,
    pub(super) window: u64,
}

impl FungibleLimiter {
    pub fn new(
        client: Client,
        table: &str,
        style: crate::table::AttributeStyle,
        limits: LimitStore,
        clock: SharedClock,
    ) -> Self {
        FungibleLimiter {
            inner: Arc::new(Inner {
                client,
                table: table.to_string(),
                attrs: Attrs::of(style),
                limits,
                clock,
                seen: Cache::new(MAX_CACHED, WhenFull::Clear),
                shards: Mutex::new(HashMap::new()),
                picker: crate::shard::Picker::default(),
            }),
        }
    }

    /// The token and limit tables named in `deps`; limit rows cached for
    /// `TURNSTILE_LIMIT_CACHE_SECS` (default 60 s).
    pub fn from_deps(deps: &Deps) -> Result<Self, ConfigError> {
        let limiter = Self::new(
            deps.dynamo.clone(),
            &deps.tables.fungible_tokens,
            deps.style,
            LimitStore::from_deps(deps)?,
            deps.clock.clone(),
        );
        if let Ok(mut m) = limiter.inner.shards.lock() {
            *m = shards_from_vars(&deps.vars)?;
        }
        Ok(limiter)
    }

    pub fn limits(&self) -> &LimitStore {
        &self.inner.limits
    }

    pub(super) fn key(&self, resource: &str, account: &str) -> Item {
        let a = self.inner.attrs;
        Item::from([
            (a.resource_name.to_string(), s(resource)),
            (a.account_id.to_string(), s(account)),
        ])
    }

    pub(super) fn parse(&self, item: Option<&Item>) -> Result<Seen> {
        let Some(item) = item.filter(|i| !i.is_empty()) else {
            return Ok(Seen::default());
        };
        let a = self.inner.attrs;
        let t = &self.inner.table;
        let tokens_raw = item.get(a.tokens).cloned();
        let refill_raw = item.get(a.last_refill).cloned();
        let tokens = crate::dynamo::item::lenient_opt_int(item, t, a.tokens)?;
        let last_refill = match &refill_raw {
            None | Some(AttributeValue::Null(_)) => None,
            Some(AttributeValue::N(v)) => {
                Some(parse_ms(v).ok_or_else(|| Error::MalformedItem {
                    table: t.clone(),
                    reason: format!("{}={v:?} is not a number", a.last_refill),
                })?)
            }
            Some(other) => {
                return Err(Error::MalformedItem {
                    table: t.clone(),
                    reason: format!("{} should be a number, found {other:?}", a.last_refill),
                })
            }
        };
        Ok(Seen {
            state: tokens.map(|tokens| BucketState {
                tokens,
                last_refill,
            }),
            tokens_raw,
            refill_raw,
        })
    }

    pub(super) fn seen(&self, resource: &str, account: &str) -> Option<Seen> {
        self.inner
            .seen
            .get(&(resource.to_string(), account.to_string()))
    }

    pub(super) fn remember(&self, resource: &str, account: &str, seen: &Seen) {
        self.inner
            .seen
            .insert((resource.to_string(), account.to_string()), seen.clone());
    }

    /// Takes one token from (resource, account)'s bucket if it has one.
    ///
    /// `default` applies when the limit table has no row for the pair; a row with `limit <= 0`
    /// blocks the account. DynamoDB calls: **1** warm, **2** cold, **0** when the last state seen
    /// shows the bucket empty until after now (the rejection cache: it only ever refuses), plus 1 per
    /// lost race. Takes between refills are relative decrements, so concurrent takers of a hot
    /// bucket do not lose races to each other (decision 0100).
    pub async fn get_token(
        &self,
        resource: &str,
        account: &str,
        default: Quota,
    ) -> Result<Decision> {
        if resource.is_empty() || account.is_empty() {
            return Err(Error::InvalidArgument(
                "resource name and account id must be non-empty".into(),
            ));
        }
        let now = self.inner.clock.now();
        let shards = self.shards_of(resource);
        if shards > 1 {
            return self
                .get_token_sharded(resource, account, default, shards, now)
                .await;
        }
        let (row, seen, from_cache) = match (
            self.inner.limits.cached(resource, account),
            self.seen(resource, account),
        ) {
            (Some(row), Some(seen)) => (row, seen, true),
            // Bucket unknown: assume it is new; a failed condition returns the real row.
            (Some(row), None) => (row, Seen::default(), false),
            (None, Some(seen)) => (self.inner.limits.get(resource, account).await?, seen, true),
            (None, None) => {
                let (row, seen) = self.read_cold(resource, account).await?;
                (row, seen, false)
            }
        };
        let (limit, window) =
            match Effective::resolve(row.as_ref(), default, self.inner.limits.table())? {
                Effective::Blocked => return Ok(self.blocked(resource, account, now)),
                Effective::Limited { limit, window_ms } => (limit, window_ms),
            };
        let bucket = Bucket {
            resource,
            store: resource,
            account,
            limit,
            window,
        };
        self.take(bucket, seen, from_cache, now).await
    }

    /// Takes a token from one bucket row (`store`: the resource's, or a shard's) holding `limit`
    /// tokens per `window` ms; `seen` is its last known state.
    pub(super) async fn take(
        &self,
        b: Bucket<'_>,
        mut seen: Seen,
        mut from_cache: bool,
        now: Timestamp,
    ) -> Result<Decision> {
        let (resource, store, account) = (b.resource, b.store, b.account);
        let (limit, window) = (b.limit, b.window);
        let window_ns = window.saturating_mul(1_000_000);
        for attempt in 0..MAX_ATTEMPTS {
            let r = refill(seen.state.as_ref(), limit, window_ns, now.as_nanos());
            if r.available == 0 {
                let source = if from_cache {
                    Source::RejectionCache
                } else {
                    Source::Dynamodb
                };
                return Ok(self.decision(
                    resource,
                    account,
                    now,
                    false,
                    0,
                    r.last_refill,
                    limit,
                    window,
                    source,
                ));
            }
            // Nothing accrued since the state seen (and no clamping): a relative take suffices.
            let accrued = seen.state.as_ref().is_none_or(|st| {
                st.last_refill != Some(r.last_refill) || u64::try_from(st.tokens) != Ok(r.available)
            });
            let take = if accrued || seen.refill_raw.is_none() {
                Take::Set {
                    tokens: r.available - 1,
                    last_refill: r.last_refill,
                }
            } else {
                Take::Decrement { limit }
            };
            match self.write(store, account, &seen, take, now).await {
                Ok(new) => {
                    // After a relative take the row holds what concurrent takers left.
                    let remaining = new
                        .state
                        .as_ref()
                        .and_then(|st| u64::try_from(st.tokens).ok())
                        .unwrap_or(r.available - 1);
                    self.remember(store, account, &new);
                    return Ok(self.decision(
                        resource,
                        account,
                        now,
                        true,
                        remaining,
                        r.last_refill,
                        limit,
                        window,
                        Source::Dynamodb,
                    ));
                }
                Err(Lost::Race(actual)) => {
                    seen = actual;
                    from_cache = false;
                    self.remember(store, account, &seen);
                    // Many losses in a row: a hot bucket refilling under us; spread the retries.
                    if attempt >= 4 {
                        Backoff::CONDITIONAL.wait(attempt - 4).await;
                    }
                }
                Err(Lost::Conflict) => Backoff::CONDITIONAL.wait(attempt).await,
                Err(Lost::Failed(e)) => return Err(e),
            }
        }
        Err(Error::contended(
            format!("bucket {store}/{account}"),
            MAX_ATTEMPTS,
        ))
    }

    /// Runs `work` only if a token is granted; otherwise returns [`TokenError::Limited`] without
    /// polling it. Same call budget as [`get_token`](Self::get_token).
    pub async fn with_token<F: Future>(
        &self,
        resource: &str,
        account: &str,
        default: Quota,
        work: F,
    ) -> Result<F::Output, TokenError> {
        let d = self.get_token(resource, account, default).await?;
        if d.granted {
            Ok(work.await)
        } else {
            Err(TokenError::Limited(Box::new(d)))
        }
    }

    /// Cold read: the limit row and the bucket in **1** BatchGetItem (the bucket read strongly
    /// consistent). Unprocessed keys fall back to a GetItem for the limit and "unknown" for the bucket.
    pub(super) async fn read_cold(
        &self,
        resource: &str,
        account: &str,
    ) -> Result<(Option<LimitRow>, Seen)> {
        let (row, bucket) = self
            .inner
            .limits
            .get_with(
                resource,
                account,
                &self.inner.table,
                self.key(resource, account),
                true,
            )
            .await?;
        let seen = match bucket {
            Companion::Unprocessed => Seen::default(),
            Companion::Found(item) => {
                let seen = self.parse(item.as_ref())?;
                self.remember(resource, account, &seen);
                seen
            }
        };
        Ok((row, seen))
    }

    /// The conditional write. [`Take::Set`]: the bucket must still be exactly as `seen`, and gets
    /// the refilled count minus one. [`Take::Decrement`]: no token has accrued since `seen`, so the
    /// write only needs the same `lastRefill` and a token left (`tokens - 1`, `1 <= tokens <= limit`);
    /// concurrent takers then do not invalidate each other, and each still takes a real token.
    pub(super) async fn write(
        &self,
        resource: &str,
        account: &str,
        seen: &Seen,
        take: Take,
        now: Timestamp,
    ) -> std::result::Result<Seen, Lost> {
        let a = self.inner.attrs;
        let mut cond = Vec::new();
        let mut req = self
            .inner
            .client
            .update_item()
            .table_name(&self.inner.table)
            .set_key(Some(self.key(resource, account)))
            .expression_attribute_names("#t", a.tokens)
            .expression_attribute_names("#r", a.last_refill)
            .expression_attribute_names("#l", a.last_token)
            .expression_attribute_values(":now", AttributeValue::N(format_ms(now.as_nanos())))
            .return_values(ReturnValue::AllNew)
            .return_values_on_condition_check_failure(ReturnValuesOnConditionCheckFailure::AllOld);
        match take {
            Take::Set {
                tokens,
                last_refill,
            } => {
                req = req
                    .update_expression("SET #t = :nt, #r = :nr, #l = :now")
                    .expression_attribute_values(":nt", n(tokens as i64))
                    .expression_attribute_values(":nr", AttributeValue::N(format_ms(last_refill)));
                match &seen.tokens_raw {
                    Some(v) => {
                        cond.push("#t = :ot");
                        req = req.expression_attribute_values(":ot", v.clone());
                    }
                    None => cond.push("attribute_not_exists(#t)"),
                }
            }
            Take::Decrement { limit } => {
                req = req
                    .update_expression("SET #t = #t - :one, #l = :now")
                    .expression_attribute_values(":one", n(1))
                    .expression_attribute_values(":lim", n(limit as i64));
                cond.push("#t >= :one AND #t <= :lim");
            }
        }
        match &seen.refill_raw {
            Some(v) => {
                cond.push("#r = :or");
                req = req.expression_attribute_values(":or", v.clone());
            }
            None => cond.push("attribute_not_exists(#r)"),
        }
        match req.condition_expression(cond.join(" AND ")).send().await {
            Ok(out) => self.parse(out.attributes()).map_err(Lost::Failed),
            Err(SdkError::ServiceError(se)) => match se.err() {
                UpdateItemError::ConditionalCheckFailedException(c) => match self.parse(c.item()) {
                    Ok(actual) => Err(Lost::Race(actual)),
                    Err(e) => Err(Lost::Failed(e)),
                },
                e if is_conflict(e.code()) => Err(Lost::Conflict),
                _ => Err(Lost::Failed(Error::dynamo(
                    "UpdateItem",
                    SdkError::ServiceError(se),
                ))),
            },
            Err(e) => Err(Lost::Failed(Error::dynamo("UpdateItem", e))),
        }
    }

    pub(super) fn blocked(&self, resource: &str, account: &str, now: Timestamp) -> Decision {
        Decision {
            resource: resource.into(),
            account: account.into(),
            granted: false,
            remaining: 0,
            limit: 0,
            window_ms: 0,
            retry_after_ms: None,
            reset_ms: 0,
            at: now.to_rfc3339(),
            reset_at: now.to_rfc3339(),
            source: Source::Blocked,
        }
    }

    #[allow(clippy::too_many_arguments)]
    pub(super) fn decision(
        &self,
        resource: &str,
        account: &str,
        now: Timestamp,
        granted: bool,
        remaining: u64,
        last_refill: i64,
        limit: u64,
        window_ms: u64,
        source: Source,
    ) -> Decision {
        let window_ns = window_ms.saturating_mul(1_000_000);
        let until = |t: i64| Timestamp::from_nanos(t).since(now);
        let next = until(time_for(remaining, 1, last_refill, limit, window_ns));
        let full_at =
            Timestamp::from_nanos(time_for(remaining, limit, last_refill, limit, window_ns))
                .max(now);
        Decision {
            resource: resource.into(),
            account: account.into(),
            granted,
            remaining,
            limit,
            window_ms,
            retry_after_ms: (!granted).then(|| ceil_ms(next)),
            reset_ms: ceil_ms(full_at.since(now)),
            at: now.to_rfc3339(),
            reset_at: full_at.to_rfc3339(),
            source,
        }
    }
}

pub(super) fn ceil_ms(d: Duration) -> u64 {
    u64::try_from(d.as_nanos().div_ceil(1_000_000)).unwrap_or(u64::MAX)
}

/// Why a conditional write did not land.
/// How a write takes its token (see [`FungibleLimiter::write`]).
#[derive(Debug, Clone, Copy)]
pub(super) enum Take {
    Set { tokens: u64, last_refill: i64 },
    Decrement { limit: u64 },
}

pub(super) enum Lost {
    /// Someone else wrote first; this is the row as they left it.
    Race(Seen),
    /// A transaction held the item; retry after a pause.
    Conflict,
    Failed(Error),
}
