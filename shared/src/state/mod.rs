//! `RateLimitState`: one JSON view of any bucket, whatever its algorithm.
//!
//! Constructors: [`RateLimitState::from_gcra_item`] (a GCRA bucket's stored item),
//! [`RateLimitState::fixed_window`] (a per-window counter such as the per-minute connection rows)
//! and [`RateLimitState::token_bucket`] (a refilling token count such as rate-limiter-py's). Each
//! store plugs a [`StateReader`] into a [`Registry`] so `turnstile state <bucket>` finds the bucket
//! wherever it lives. Which fields are exact and which best-effort:
//! `docs/decisions/0603-rate-limit-state.md`.

use std::collections::HashMap;
use std::sync::Arc;
use std::time::Duration;

use aws_sdk_dynamodb::types::AttributeValue;
use aws_sdk_dynamodb::Client;
use futures::future::BoxFuture;
use serde::Serialize;

use crate::clock::Timestamp;
use crate::dynamo::item::num as int_attr;
use crate::gcra::Rate;
use crate::gcra_write::attr;
use crate::kv::{KeyError, LimitSet};
use crate::table::TableKind;

/// The view, with `RateLimitState`'s field names. Times are RFC 3339 (UTC, milliseconds).
#[derive(Debug, Clone, PartialEq, Serialize)]
#[serde(rename_all = "camelCase")]
pub struct RateLimitState {
    #[serde(rename = "@type")]
    pub type_name: &'static str,
    /// What is limited: the limit name for key-value buckets (`NewOrdersPerAccount`), or the
    /// store's own kind (`tenant`, `session`, `account`).
    pub entity_type: String,
    pub entity_id: String,
    pub bucket: String,
    #[serde(skip_serializing_if = "Option::is_none")]
    pub request_count: Option<u64>,
    pub window_start: String,
    pub window_end: String,
    #[serde(skip_serializing_if = "Option::is_none")]
    pub tokens_available: Option<u64>,
    #[serde(skip_serializing_if = "Option::is_none")]
    pub token_capacity: Option<u64>,
    #[serde(skip_serializing_if = "Option::is_none")]
    pub refill_rate: Option<f64>,
    /// Where `tokenCapacity` and `refillRate` come from (GCRA buckets): the item's stamp or the
    /// reader's limits file.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub rate_source: Option<RateSource>,
    /// The reader's limits file's rate for the bucket, when it differs from the stamp shown
    /// (another writer's rate, e.g. while a new limits file is being deployed).
    #[serde(skip_serializing_if = "Option::is_none")]
    pub limits_file_rate: Option<RateView>,
    #[serde(skip_serializing_if = "Option::is_none")]
    pub last_refill_at: Option<String>,
    pub reset_at: String,
    #[serde(skip_serializing_if = "Option::is_none")]
    pub is_throttled: Option<bool>,
    #[serde(skip_serializing_if = "Option::is_none")]
    pub throttled_at: Option<String>,
    #[serde(skip_serializing_if = "Option::is_none")]
    pub throttle_count: Option<u64>,
    #[serde(skip_serializing_if = "Option::is_none")]
    pub last_request_at: Option<String>,
    #[serde(skip_serializing_if = "Option::is_none")]
    pub peak_request_rate: Option<f64>,
    #[serde(skip_serializing_if = "Option::is_none")]
    pub version: Option<u64>,
    pub updated_at: String,
}

const TYPE_NAME: &str = "RateLimitState";

/// Where a GCRA view's capacity and refill rate come from.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize)]
#[serde(rename_all = "camelCase")]
pub enum RateSource {
    /// The rate stamped on the item, by the last writer that stamped it (decision 0603): the rate
    /// that writer ran, which while limits files change need not be the reader's. Tokens, reset
    /// and throttled-now are derived with it.
    Stored,
    /// The reader's limits file: the item carries no stamp, or there is no item.
    LimitsFile,
}

/// A rate as the view shows it.
#[derive(Debug, Clone, Copy, PartialEq, Serialize)]
#[serde(rename_all = "camelCase")]
pub struct RateView {
    pub token_capacity: u64,
    pub refill_rate: f64,
}

impl RateView {
    fn of(rate: &Rate) -> Self {
        RateView {
            token_capacity: rate.burst,
            refill_rate: rate.refill_per_sec(),
        }
    }
}

fn ts(t: Timestamp) -> String {
    t.to_rfc3339()
}

fn uint(item: &HashMap<String, AttributeValue>, name: &str) -> Option<u64> {
    int_attr(item, name).and_then(|v| u64::try_from(v).ok())
}

fn time(item: &HashMap<String, AttributeValue>, name: &str) -> Option<Timestamp> {
    int_attr(item, name).map(Timestamp::from_nanos)
}

/// Requests per second over a span, the span counted as at least one second (so a burst inside a
/// single instant reads as "n per second", not infinity).
fn per_sec(count: u64, span: Duration) -> f64 {
    let secs = span.as_secs_f64().max(1.0);
    (count as f64 / secs * 1000.0).round() / 1000.0
}

/// Why a state view could not be built.
#[derive(Debug, thiserror::Error)]
pub enum StateError {
    #[error(
        "bucket {0} has no stored limit parameters and no limits file was given to supply them"
    )]
    NoRate(String),
    #[error(transparent)]
    Key(#[from] KeyError),
    #[error("{0}")]
    Unsupported(String),
    #[error(transparent)]
    Store(#[from] crate::Error),
}

impl RateLimitState {
    /// A GCRA bucket from its stored item (`None`: no item, so the bucket is full).
    ///
    /// The rate is the one stamped on the item (the last stamping writer's), else `limits_rate`
    /// (the reader's limits file); `rateSource` says which, and `limitsFileRate` shows the limits
    /// file's when it differs from the stamp.
    pub fn from_gcra_item(
        bucket: &str,
        entity_type: &str,
        entity_id: &str,
        item: Option<&HashMap<String, AttributeValue>>,
        limits_rate: Option<Rate>,
        now: Timestamp,
    ) -> Result<Self, StateError> {
        let stamped = crate::gcra_write::RateStamp::of_item(item).map(|stamp| stamp.rate);
        let (rate, source) = match (stamped, limits_rate) {
            (Some(r), _) => (r, RateSource::Stored),
            (None, Some(r)) => (r, RateSource::LimitsFile),
            (None, None) => return Err(StateError::NoRate(bucket.to_string())),
        };
        let limits_file_rate = limits_rate.filter(|r| *r != rate).map(|r| RateView::of(&r));
        // i128: a stored TAT is outside input and may sit anywhere in the i64 range.
        let ei = i128::from(rate.emission_interval_nanos().max(1));
        let offset = i128::from(rate.burst_offset_nanos());
        let now_n = now.as_nanos();
        let tat = item.and_then(|i| int_attr(i, attr::TAT));
        let tat_eff = tat.map_or(now_n, |t| t.max(now_n));
        let span = i128::from(now_n) - (i128::from(tat_eff) - offset);
        let tokens = u64::try_from((span / ei).max(0))
            .unwrap_or(u64::MAX)
            .min(rate.burst);
        let last_refill = match tat {
            None => None,
            Some(t) if t <= now_n => Some(Timestamp::from_nanos(t)),
            Some(t) => {
                let at = i128::from(t) - offset + i128::from(tokens) * ei;
                Some(Timestamp::from_nanos(
                    at.clamp(i128::from(i64::MIN), i128::from(i64::MAX)) as i64,
                ))
            }
        };
        let get = |name: &str| item.and_then(|i| time(i, name));
        let count_of = |name: &str| item.and_then(|i| uint(i, name));
        let last_request = get(attr::LAST_REQUEST_AT);
        let window_start = get(attr::WINDOW_START).unwrap_or(now);
        let request_count = count_of(attr::REQUEST_COUNT).unwrap_or(0);
        let reset_at = Timestamp::from_nanos(tat_eff);
        // The stored window counters belong to the drain that started at `windowStart`; once the
        // bucket is full again that window is over.
        let window_open = tat.is_some_and(|t| t > now_n);
        Ok(RateLimitState {
            type_name: TYPE_NAME,
            entity_type: item
                .and_then(|i| match i.get(attr::LIMIT_NAME) {
                    Some(AttributeValue::S(s)) => Some(s.clone()),
                    _ => None,
                })
                .unwrap_or_else(|| entity_type.to_string()),
            entity_id: entity_id.to_string(),
            bucket: bucket.to_string(),
            request_count: Some(request_count),
            window_start: ts(if window_open { window_start } else { now }),
            window_end: ts(reset_at),
            tokens_available: Some(tokens),
            token_capacity: Some(rate.burst),
            refill_rate: Some(rate.refill_per_sec()),
            rate_source: Some(source),
            limits_file_rate,
            last_refill_at: last_refill.map(ts),
            reset_at: ts(reset_at),
            is_throttled: Some(tokens < 1),
            throttled_at: get(attr::THROTTLED_AT).map(ts),
            throttle_count: count_of(attr::THROTTLE_COUNT),
            last_request_at: last_request.map(ts),
            peak_request_rate: last_request
                .map(|lr| per_sec(request_count, lr.since(window_start))),
            version: count_of(attr::VERSION),
            // A spend sets `lastRequestAt` only, a refund or a throttle flush `updatedAt`.
            updated_at: ts(get(attr::UPDATED_AT).max(last_request).unwrap_or(now)),
        })
    }

    /// A fixed-window counter: `count` requests since `window_start`, in windows of `window`, with
    /// `limit` allowed per window. Pure.
    #[allow(clippy::too_many_arguments)]
    pub fn fixed_window(
        entity_type: &str,
        entity_id: &str,
        bucket: &str,
        count: u64,
        limit: u64,
        window_start: Timestamp,
        window: Duration,
        updated_at: Option<Timestamp>,
        now: Timestamp,
    ) -> Self {
        let window_end = window_start.plus(window);
        let open = now < window_end;
        RateLimitState {
            type_name: TYPE_NAME,
            entity_type: entity_type.to_string(),
            entity_id: entity_id.to_string(),
            bucket: bucket.to_string(),
            request_count: Some(if open { count } else { 0 }),
            window_start: ts(window_start),
            window_end: ts(window_end),
            tokens_available: None,
            token_capacity: None,
            refill_rate: None,
            rate_source: None,
            limits_file_rate: None,
            last_refill_at: None,
            reset_at: ts(window_end),
            is_throttled: Some(open && count >= limit),
            throttled_at: None,
            throttle_count: None,
            last_request_at: None,
            peak_request_rate: None,
            version: None,
            updated_at: ts(updated_at.unwrap_or(window_start)),
        }
    }

    /// A token bucket holding `tokens` at `last_refill`, refilling `refill_per_sec` up to
    /// `capacity`. The view is as of `now` (refill applied, whole tokens). Pure.
    #[allow(clippy::too_many_arguments)]
    pub fn token_bucket(
        entity_type: &str,
        entity_id: &str,
        bucket: &str,
        tokens: f64,
        capacity: u64,
        refill_per_sec: f64,
        last_refill: Timestamp,
        now: Timestamp,
    ) -> Self {
        let cap = capacity as f64;
        let elapsed = now.since(last_refill).as_secs_f64();
        let available = (tokens.max(0.0) + refill_per_sec.max(0.0) * elapsed).min(cap);
        let to_full = if refill_per_sec > 0.0 {
            // try_: a tiny rate could need longer than a Duration holds; that is "never".
            Duration::try_from_secs_f64(((cap - available) / refill_per_sec).max(0.0))
                .unwrap_or(Duration::MAX)
        } else {
            Duration::ZERO
        };
        let reset_at = now.plus(to_full);
        RateLimitState {
            type_name: TYPE_NAME,
            entity_type: entity_type.to_string(),
            entity_id: entity_id.to_string(),
            bucket: bucket.to_string(),
            request_count: None,
            window_start: ts(last_refill),
            window_end: ts(reset_at),
            tokens_available: Some(available.floor() as u64),
            token_capacity: Some(capacity),
            refill_rate: Some(refill_per_sec),
            rate_source: None,
            limits_file_rate: None,
            last_refill_at: Some(ts(last_refill)),
            reset_at: ts(reset_at),
            is_throttled: Some(available < 1.0),
            throttled_at: None,
            throttle_count: None,
            last_request_at: None,
            peak_request_rate: None,
            version: None,
            updated_at: ts(last_refill),
        }
    }
}

/// Reads the state of buckets kept in one table. Each store (buckets, counters, fungible tokens)
/// provides one.
pub trait StateReader: Send + Sync {
    fn kind(&self) -> TableKind;
    /// The bucket's state, from its key as the user wrote it (without the `table:` prefix).
    fn read<'a>(
        &'a self,
        key: &'a str,
        now: Timestamp,
    ) -> BoxFuture<'a, Result<RateLimitState, StateError>>;
}

/// The readers `turnstile state` consults, by table.
#[derive(Default)]
pub struct Registry {
    readers: Vec<Box<dyn StateReader>>,
}

impl Registry {
    pub fn with(mut self, reader: impl StateReader + 'static) -> Self {
        self.readers.push(Box::new(reader));
        self
    }

    /// `[table:]key`, where `table` is a table kind (`buckets`, `counters`, ...); without one, the
    /// buckets table.
    pub async fn read(&self, spec: &str, now: Timestamp) -> Result<RateLimitState, StateError> {
        let (kind, key) = match spec.split_once(':') {
            Some((head, rest)) => match TableKind::parse(head) {
                Some(kind) => (kind, rest),
                None => (TableKind::Buckets, spec),
            },
            None => (TableKind::Buckets, spec),
        };
        let reader = self
            .readers
            .iter()
            .find(|r| r.kind() == kind)
            .ok_or_else(|| {
                StateError::Unsupported(format!(
                    "no state reader for the {} table yet",
                    kind.as_str()
                ))
            })?;
        reader.read(key, now).await
    }
}

/// GCRA buckets in the buckets table: keys `{nameId}:{id}` (as stored) or `Name:id` (needs the
/// limits file to intern the name).
pub struct GcraReader {
    pub client: Client,
    pub table: String,
    pub limits: Option<Arc<LimitSet>>,
}

impl GcraReader {
    /// DynamoDB calls: **1** strongly consistent `GetItem`.
    pub async fn state(&self, key: &str, now: Timestamp) -> Result<RateLimitState, StateError> {
        let (stored_key, name, id, rate) = match &self.limits {
            Some(set) => {
                let b = set.parse_bucket(key)?;
                let rate = set.rate(&b).ok();
                (b.key(), b.name.clone(), b.id.clone(), rate)
            }
            None => {
                let (head, id) = key
                    .split_once(':')
                    .ok_or_else(|| KeyError::Malformed(key.to_string()))?;
                if head.parse::<u16>().is_err() {
                    return Err(StateError::Unsupported(format!(
                        "{key:?} names its limit; give the limits file (--config) or use the stored key nameId:id"
                    )));
                }
                (key.to_string(), head.to_string(), id.to_string(), None)
            }
        };
        let key = HashMap::from([(
            crate::kv::attr::BUCKET.to_string(),
            AttributeValue::S(stored_key.clone()),
        )]);
        let item = crate::dynamo::get_consistent(&self.client, &self.table, key).await?;
        RateLimitState::from_gcra_item(&stored_key, &name, &id, item.as_ref(), rate, now)
    }
}

impl StateReader for GcraReader {
    fn kind(&self) -> TableKind {
        TableKind::Buckets
    }
    fn read<'a>(
        &'a self,
        key: &'a str,
        now: Timestamp,
    ) -> BoxFuture<'a, Result<RateLimitState, StateError>> {
        Box::pin(self.state(key, now))
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    const S: i64 = 1_000_000_000;

    fn n(v: i64) -> AttributeValue {
        AttributeValue::N(v.to_string())
    }

    #[test]
    fn a_gcra_item_becomes_the_seed_view() {
        let rate = Rate::new(10, 1, Duration::from_secs(1)).unwrap();
        let now = Timestamp::from_secs(1_710_513_045);
        let item = HashMap::from([
            (attr::TAT.to_string(), n(now.as_nanos() + 7 * S)),
            (attr::VERSION.to_string(), n(4)),
            (attr::WINDOW_START.to_string(), n(now.as_nanos() - 2 * S)),
            (attr::REQUEST_COUNT.to_string(), n(4)),
            (attr::LAST_REQUEST_AT.to_string(), n(now.as_nanos())),
            (attr::UPDATED_AT.to_string(), n(now.as_nanos())),
            (attr::THROTTLE_COUNT.to_string(), n(2)),
            (attr::BURST.to_string(), n(10)),
            (attr::COUNT.to_string(), n(1)),
            (attr::PERIOD_NS.to_string(), n(S)),
            (
                attr::LIMIT_NAME.to_string(),
                AttributeValue::S("Worked".into()),
            ),
        ]);
        let s = RateLimitState::from_gcra_item("2:a", "2", "a", Some(&item), None, now).unwrap();
        assert_eq!(s.entity_type, "Worked");
        assert_eq!(s.tokens_available, Some(3));
        assert_eq!(s.token_capacity, Some(10));
        assert_eq!(s.refill_rate, Some(1.0));
        assert_eq!(s.reset_at, "2024-03-15T14:30:52.000Z");
        assert_eq!(s.window_start, "2024-03-15T14:30:43.000Z");
        assert_eq!(s.window_end, s.reset_at);
        assert_eq!(s.is_throttled, Some(false));
        assert_eq!(s.version, Some(4));
        assert_eq!(s.peak_request_rate, Some(2.0));
        let json = serde_json::to_value(&s).unwrap();
        for field in [
            "@type",
            "entityType",
            "entityId",
            "bucket",
            "requestCount",
            "windowStart",
            "windowEnd",
            "tokensAvailable",
            "tokenCapacity",
            "refillRate",
            "lastRefillAt",
            "resetAt",
            "isThrottled",
            "throttleCount",
            "lastRequestAt",
            "peakRequestRate",
            "version",
            "updatedAt",
        ] {
            assert!(json.get(field).is_some(), "{field} missing in {json}");
        }
        // Empty bucket: throttled.
        let mut empty = item.clone();
        empty.insert(attr::TAT.to_string(), n(now.as_nanos() + 10 * S));
        let s = RateLimitState::from_gcra_item("2:a", "2", "a", Some(&empty), None, now).unwrap();
        assert_eq!((s.tokens_available, s.is_throttled), (Some(0), Some(true)));
        // No item: a full bucket; the rate must come from the config.
        assert!(RateLimitState::from_gcra_item("2:a", "Worked", "a", None, None, now).is_err());
        let s =
            RateLimitState::from_gcra_item("2:a", "Worked", "a", None, Some(rate), now).unwrap();
        assert_eq!(
            (s.tokens_available, s.request_count, s.version),
            (Some(10), Some(0), None)
        );
        assert_eq!(
            (s.rate_source, s.limits_file_rate),
            (Some(RateSource::LimitsFile), None)
        );
        // The stamp wins over another rate in the limits file, which is shown beside it.
        let other = Rate::new(20, 2, Duration::from_secs(1)).unwrap();
        let s =
            RateLimitState::from_gcra_item("2:a", "2", "a", Some(&item), Some(other), now).unwrap();
        assert_eq!(
            (s.token_capacity, s.rate_source),
            (Some(10), Some(RateSource::Stored))
        );
        assert_eq!(
            s.limits_file_rate,
            Some(RateView {
                token_capacity: 20,
                refill_rate: 2.0
            })
        );
    }

    #[test]
    fn fixed_windows_and_token_buckets() {
        let start = Timestamp::from_secs(1_710_511_140); // 2024-03-15T13:59:00Z
        let now = start.plus(Duration::from_secs(55));
        let s = RateLimitState::fixed_window(
            "ip_address",
            "203.0.113.45",
            "ip:203.0.113.45:auth",
            10,
            10,
            start,
            Duration::from_secs(60),
            None,
            now,
        );
        assert_eq!(s.window_end, "2024-03-15T14:00:00.000Z");
        assert_eq!(s.reset_at, s.window_end);
        assert_eq!(s.is_throttled, Some(true));
        let after = RateLimitState::fixed_window(
            "t",
            "i",
            "b",
            10,
            10,
            start,
            Duration::from_secs(60),
            None,
            start.plus(Duration::from_secs(61)),
        );
        assert_eq!(
            (after.request_count, after.is_throttled),
            (Some(0), Some(false))
        );

        let last = Timestamp::from_secs(1_000);
        let tb = RateLimitState::token_bucket(
            "account",
            "a1",
            "svc:a1",
            5.0,
            10,
            0.1,
            last,
            last.plus(Duration::from_secs(30)),
        );
        assert_eq!(tb.tokens_available, Some(8));
        assert_eq!(tb.reset_at, last.plus(Duration::from_secs(50)).to_rfc3339());
        assert_eq!(tb.is_throttled, Some(false));
    }
}

/// Property tests (docs/testing.md): a stored bucket item is outside input.
#[cfg(test)]
mod fuzz_tests;
