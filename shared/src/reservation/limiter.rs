//! The non-fungible limiter: reservations and resource tokens with exact capacity.
//!
//! Capacity lives in a per-coordinate **ledger** item in the token table itself: same
//! `resourceCoordinate`, sort key [`LEDGER_ID`], and a map `live` of reservation id → expiry (epoch
//! seconds). It has no `resourceId`, so it stays out of the resource index, and no `expirationTime`,
//! so TTL never removes it (and rate-limiter-py's count, which filters on `expirationTime`, ignores
//! it). Every change to a token row changes its ledger entry in the same transaction, so
//! `size(live)` can be checked in the write's condition instead of counting first.

use std::collections::{BTreeMap, HashMap};
use std::future::Future;
use std::panic::AssertUnwindSafe;
use std::sync::{Arc, Mutex};
use std::time::Duration;

use aws_sdk_dynamodb::error::{ProvideErrorMetadata, SdkError};
use aws_sdk_dynamodb::operation::transact_write_items::TransactWriteItemsError;
use aws_sdk_dynamodb::types::{
    AttributeValue, CancellationReason, Delete, Put, ReturnValuesOnConditionCheckFailure,
    TransactWriteItem, Update,
};
use aws_sdk_dynamodb::Client;
use futures::FutureExt;
use serde::Serialize;

use super::coordinate::{self, CoordinateError};
use super::Attrs;
use crate::clock::{SharedClock, Timestamp};
use crate::config::ConfigError;
use crate::error::{Error, Result};
use crate::limit::item::{n, opt_int, opt_str, parse_int, req_str, s, Item};
use crate::limit::{Companion, Effective, LimitRow, LimitStore};
use crate::token::{backoff, is_conflict};
use crate::Deps;

/// Sort key of the ledger item. `~` sorts after every uuid, so the ledger lists last.
pub const LEDGER_ID: &str = "~ledger";
/// The ledger's map attribute: reservation id → expiry in epoch seconds.
pub const LEDGER_MAP: &str = "live";
/// A reservation not bound to a resource expires after this (the seed's 300 s).
pub const DEFAULT_RESERVATION_TTL: Duration = Duration::from_secs(300);
/// A bound resource token expires after this (the seed's 8 hours).
pub const DEFAULT_TOKEN_TTL: Duration = Duration::from_secs(8 * 3600);

const MAX_ATTEMPTS: u32 = 64;
/// Expired ledger entries pruned per write (keeps expressions small).
const MAX_PRUNE: usize = 50;
const MAX_CACHED: usize = 10_000;

/// Why a reservation or token operation was refused.
#[derive(Debug, thiserror::Error)]
pub enum ReservationError {
    /// All capacity is held by live reservations and tokens.
    #[error("no capacity on {coordinate}: {live} of {limit} in use")]
    Limited {
        coordinate: String,
        limit: u64,
        live: u64,
    },
    /// The limit row says `limit <= 0`.
    #[error("account is blocked on {coordinate} (limit <= 0)")]
    Blocked { coordinate: String },
    /// The reservation expired or was deleted: its capacity may already be someone else's.
    #[error("reservation {reservation_id} on {coordinate} has expired or was deleted")]
    Gone {
        coordinate: String,
        reservation_id: String,
    },
    /// The reservation is already bound to another resource.
    #[error("reservation {reservation_id} is already bound to resource {bound_to}")]
    AlreadyBound {
        reservation_id: String,
        bound_to: String,
    },
    /// The (resource, account) pair has no unambiguous `resourceCoordinate` (names the field).
    #[error(transparent)]
    InvalidCoordinate(#[from] CoordinateError),
    #[error(transparent)]
    Store(#[from] Error),
}

/// A held unit of capacity; bind it with [`create_token`](Self::create_token) or give it back with
/// [`delete`](Self::delete). Cheap to clone.
#[derive(Debug, Clone)]
pub struct Reservation {
    limiter: NonFungibleLimiter,
    pub resource: String,
    pub account: String,
    pub coordinate: String,
    pub id: String,
    /// When the reservation stops counting unless bound (`None` on a handle built by
    /// [`NonFungibleLimiter::reservation`], which does not know).
    pub expires_at: Option<Timestamp>,
}

/// A reservation bound to a resource instance (an EMR cluster id).
#[derive(Debug, Clone, PartialEq, Eq, Serialize)]
pub struct Token {
    pub coordinate: String,
    pub reservation_id: String,
    pub resource_id: String,
    /// Epoch seconds (`expirationTime`).
    pub expiration_time: i64,
}

/// One row of the non-fungible table, as listed.
#[derive(Debug, Clone, PartialEq, Eq, Serialize)]
pub struct TokenRow {
    pub coordinate: String,
    pub reservation_id: String,
    pub resource_name: Option<String>,
    pub account_id: Option<String>,
    pub resource_id: Option<String>,
    pub expiration_time: Option<i64>,
    /// False once `expirationTime` has passed, whether or not TTL has removed the row yet.
    pub live: bool,
}

/// The last ledger state seen: each entry's expiry and the raw value a condition must match.
#[derive(Debug, Clone, Default)]
struct Ledger {
    exists: bool,
    live: BTreeMap<String, (i64, AttributeValue)>,
}

/// Non-fungible tokens (seed 001): reservations that become resource tokens, capacity exact under
/// concurrency. Clones share caches; build one per process.
///
/// Calls: [`get_reservation`](Self::get_reservation) **1** TransactWriteItems warm, **2** cold
/// (a BatchGetItem for the limit row and ledger first), **3** the first time a coordinate is used
/// (a Query counts rows written without a ledger), +1 per lost race, +1 to confirm a refusal
/// the cached ledger predicts; [`Reservation::create_token`] **1**; [`Reservation::delete`] **1**
/// (2 when the ledger entry was already pruned).
#[derive(Debug, Clone)]
pub struct NonFungibleLimiter {
    inner: Arc<Inner>,
}

#[derive(Debug)]
struct Inner {
    client: Client,
    table: String,
    index: String,
    attrs: Attrs,
    limits: LimitStore,
    clock: SharedClock,
    reservation_ttl: Duration,
    token_ttl: Duration,
    ledgers: Mutex<HashMap<String, Ledger>>,
}

enum Attempt<T> {
    Done(T),
    /// A condition failed; the ledger as it is now (from ALL_OLD).
    Raced(Ledger),
    Conflict,
}

fn build<T, E: std::fmt::Display>(r: std::result::Result<T, E>) -> Result<T> {
    r.map_err(|e| Error::Other(format!("building a DynamoDB request: {e}")))
}

/// Expiries are whole epoch seconds (the TTL attribute's unit), rounded down as the seed does
/// (`int(time()) + ttl`): a reservation lives at most its TTL.
fn expiry_secs(t: Timestamp) -> i64 {
    t.as_secs()
}

/// Live means the expiry (epoch seconds) is still ahead of `now`.
fn is_live(exp: i64, now: Timestamp) -> bool {
    Timestamp::from_secs(exp) > now
}

impl NonFungibleLimiter {
    pub fn new(
        client: Client,
        table: &str,
        resource_index: &str,
        style: crate::table::AttributeStyle,
        limits: LimitStore,
        clock: SharedClock,
    ) -> Self {
        NonFungibleLimiter {
            inner: Arc::new(Inner {
                client,
                table: table.to_string(),
                index: resource_index.to_string(),
                attrs: Attrs::of(style),
                limits,
                clock,
                reservation_ttl: DEFAULT_RESERVATION_TTL,
                token_ttl: DEFAULT_TOKEN_TTL,
                ledgers: Mutex::new(HashMap::new()),
            }),
        }
    }

    /// The non-fungible and limit tables named in `deps`.
    pub fn from_deps(deps: &Deps) -> Result<Self, ConfigError> {
        Ok(Self::new(
            deps.dynamo.clone(),
            &deps.tables.non_fungible_tokens,
            &deps.tables.resource_index,
            deps.style,
            LimitStore::from_deps(deps)?,
            deps.clock.clone(),
        ))
    }

    /// Changes how long reservations and bound tokens live (defaults 5 min and 8 h).
    pub fn with_ttls(self, reservation: Duration, token: Duration) -> Self {
        let inner = &self.inner;
        NonFungibleLimiter {
            inner: Arc::new(Inner {
                client: inner.client.clone(),
                table: inner.table.clone(),
                index: inner.index.clone(),
                attrs: inner.attrs,
                limits: inner.limits.clone(),
                clock: inner.clock.clone(),
                reservation_ttl: reservation,
                token_ttl: token,
                ledgers: Mutex::new(HashMap::new()),
            }),
        }
    }

    pub fn limits(&self) -> &LimitStore {
        &self.inner.limits
    }

    /// The seed's `resourceCoordinate`, `"{resource}:{account}"`; a resource name holding `:` is
    /// refused so that no two pairs share a coordinate ([`coordinate::encode`]).
    pub fn coordinate(resource: &str, account: &str) -> Result<String, CoordinateError> {
        coordinate::encode(resource, account)
    }

    /// Refuses ids that are not reservations: empty, or the ledger's own sort key (deleting it
    /// through a handle would drop the coordinate's capacity record).
    fn check_id(id: &str) -> Result<()> {
        if id.is_empty() || id == LEDGER_ID {
            return Err(Error::Other(format!(
                "{id:?} is not a reservation id (empty, or the ledger's sort key)"
            )));
        }
        Ok(())
    }

    fn key(&self, coordinate: &str, id: &str) -> Item {
        let a = self.inner.attrs;
        Item::from([
            (a.resource_coordinate.to_string(), s(coordinate)),
            (a.reservation_id.to_string(), s(id)),
        ])
    }

    fn parse_ledger(&self, item: Option<&Item>) -> Result<Ledger> {
        let Some(item) = item.filter(|i| !i.is_empty()) else {
            return Ok(Ledger::default());
        };
        let mut live = BTreeMap::new();
        match item.get(LEDGER_MAP) {
            Some(AttributeValue::M(m)) => {
                for (rid, v) in m {
                    let exp = match v {
                        AttributeValue::N(x) => parse_int(x),
                        _ => None,
                    }
                    .ok_or_else(|| Error::MalformedItem {
                        table: self.inner.table.clone(),
                        reason: format!("ledger entry {rid} is not a number: {v:?}"),
                    })?;
                    live.insert(rid.clone(), (exp, v.clone()));
                }
            }
            None => {}
            Some(other) => {
                return Err(Error::MalformedItem {
                    table: self.inner.table.clone(),
                    reason: format!("ledger attribute {LEDGER_MAP} is not a map: {other:?}"),
                })
            }
        }
        Ok(Ledger {
            exists: item.contains_key(LEDGER_MAP),
            live,
        })
    }

    fn cached_ledger(&self, coordinate: &str) -> Option<Ledger> {
        self.inner.ledgers.lock().ok()?.get(coordinate).cloned()
    }

    fn remember(&self, coordinate: &str, ledger: Ledger) {
        if let Ok(mut m) = self.inner.ledgers.lock() {
            if m.len() >= MAX_CACHED {
                m.clear();
            }
            m.insert(coordinate.to_string(), ledger);
        }
    }

    fn forget_entry(&self, coordinate: &str, id: &str) {
        if let Ok(mut m) = self.inner.ledgers.lock() {
            if let Some(l) = m.get_mut(coordinate) {
                l.live.remove(id);
            }
        }
    }

    /// 1 GetItem (strongly consistent) for the ledger.
    async fn read_ledger(&self, coordinate: &str) -> Result<Ledger> {
        let out = self
            .inner
            .client
            .get_item()
            .table_name(&self.inner.table)
            .set_key(Some(self.key(coordinate, LEDGER_ID)))
            .consistent_read(true)
            .send()
            .await
            .map_err(|e| Error::dynamo("GetItem", e))?;
        let l = self.parse_ledger(out.item())?;
        self.remember(coordinate, l.clone());
        Ok(l)
    }

    /// 1 BatchGetItem: the limit row and the ledger.
    async fn read_cold(
        &self,
        resource: &str,
        account: &str,
        coordinate: &str,
    ) -> Result<(Option<LimitRow>, Ledger)> {
        let key = self.key(coordinate, LEDGER_ID);
        let (row, ledger) = self
            .inner
            .limits
            .get_with(resource, account, &self.inner.table, key, true)
            .await?;
        let ledger = match ledger {
            Companion::Unprocessed => self.read_ledger(coordinate).await?,
            Companion::Found(item) => {
                let l = self.parse_ledger(item.as_ref())?;
                self.remember(coordinate, l.clone());
                l
            }
        };
        Ok((row, ledger))
    }

    /// A handle on an existing reservation (from a listing or another process), to bind or delete.
    pub fn reservation(
        &self,
        resource: &str,
        account: &str,
        id: &str,
    ) -> Result<Reservation, ReservationError> {
        let coordinate = Self::coordinate(resource, account)?;
        Self::check_id(id)?;
        Ok(Reservation {
            limiter: self.clone(),
            resource: resource.to_string(),
            account: account.to_string(),
            coordinate,
            id: id.to_string(),
            expires_at: None,
        })
    }

    /// Reserves one unit of (resource, account)'s capacity for the reservation TTL (5 min default).
    ///
    /// `default_limit` applies when no limit row exists; `limit <= 0` blocks. Exact under
    /// concurrency: the reservation row and its ledger entry are written in one transaction whose
    /// condition is the ledger's size, so at most `limit` live entries can ever exist. Expired entries
    /// seen in the ledger are pruned in the same write (each conditioned on its old value).
    /// Calls: **1** warm, **2** cold, **3** on a coordinate's first use (its ledger is created,
    /// counting rows that exist without one), +1 per lost race, +1 to confirm a cached refusal.
    pub async fn get_reservation(
        &self,
        resource: &str,
        account: &str,
        default_limit: i64,
    ) -> Result<Reservation, ReservationError> {
        let coordinate = Self::coordinate(resource, account)?;
        let now = self.inner.clock.now();
        let (row, mut ledger, mut cached) = match (
            self.inner.limits.cached(resource, account),
            self.cached_ledger(&coordinate),
        ) {
            (Some(row), Some(l)) => (row, l, true),
            (Some(row), None) => (row, self.read_ledger(&coordinate).await?, false),
            (None, Some(l)) => (self.inner.limits.get(resource, account).await?, l, true),
            (None, None) => {
                let (row, l) = self.read_cold(resource, account, &coordinate).await?;
                (row, l, false)
            }
        };
        let limit = match Effective::capacity(row.as_ref(), default_limit) {
            Effective::Blocked => return Err(ReservationError::Blocked { coordinate }),
            Effective::Limited { limit, .. } => limit,
        };
        let expires_at = now.plus(self.inner.reservation_ttl);
        let exp = expiry_secs(expires_at);
        let mut legacy_checked = false;
        for attempt in 0..MAX_ATTEMPTS {
            if !ledger.exists && !legacy_checked {
                // No ledger yet: count live rows written without one (by rate-limiter-py, before
                // the switch), so they hold capacity until they expire. One Query, once.
                legacy_checked = true;
                for row in self.list(resource, account).await? {
                    if let (true, Some(e)) = (row.live, row.expiration_time) {
                        ledger.live.insert(row.reservation_id, (e, n(e)));
                    }
                }
            }
            let expired: Vec<(&String, &AttributeValue)> = ledger
                .live
                .iter()
                .filter(|(_, (e, _))| !is_live(*e, now))
                .map(|(k, (_, raw))| (k, raw))
                .collect();
            let live = (ledger.live.len() - expired.len()) as u64;
            if live >= limit {
                if cached {
                    // Others may have released since we looked: confirm with one read.
                    ledger = self.read_ledger(&coordinate).await?;
                    cached = false;
                    continue;
                }
                return Err(ReservationError::Limited {
                    coordinate,
                    limit,
                    live,
                });
            }
            let prune: Vec<(String, AttributeValue)> = expired
                .iter()
                .take(MAX_PRUNE)
                .map(|(k, v)| ((*k).clone(), (*v).clone()))
                .collect();
            let unpruned = (expired.len() - prune.len()) as u64;
            if live + unpruned >= limit {
                // Too many expired entries to prune in the admission write: prune first.
                self.prune(&coordinate, &prune).await?;
                ledger = self.read_ledger(&coordinate).await?;
                continue;
            }
            let id = uuid::Uuid::new_v4().to_string();
            match self
                .try_reserve(
                    resource,
                    account,
                    &coordinate,
                    &id,
                    exp,
                    &ledger,
                    &prune,
                    limit,
                )
                .await?
            {
                Attempt::Done(()) => {
                    for (k, _) in &prune {
                        ledger.live.remove(k);
                    }
                    ledger.exists = true;
                    ledger.live.insert(id.clone(), (exp, n(exp)));
                    self.remember(&coordinate, ledger);
                    return Ok(Reservation {
                        limiter: self.clone(),
                        resource: resource.to_string(),
                        account: account.to_string(),
                        coordinate,
                        id,
                        expires_at: Some(Timestamp::from_secs(exp)),
                    });
                }
                Attempt::Raced(actual) => {
                    ledger = actual;
                    cached = false;
                    self.remember(&coordinate, ledger.clone());
                }
                Attempt::Conflict => backoff(attempt).await,
            }
        }
        Err(Error::Other(format!(
            "{coordinate} is contended: no definite outcome after {MAX_ATTEMPTS} attempts"
        ))
        .into())
    }

    #[allow(clippy::too_many_arguments)]
    async fn try_reserve(
        &self,
        resource: &str,
        account: &str,
        coordinate: &str,
        id: &str,
        exp: i64,
        ledger: &Ledger,
        prune: &[(String, AttributeValue)],
        limit: u64,
    ) -> Result<Attempt<()>> {
        let a = self.inner.attrs;
        let mut row = self.key(coordinate, id);
        row.insert(a.resource_name.into(), s(resource));
        row.insert(a.account_id.into(), s(account));
        row.insert(a.expiration_time.into(), n(exp));
        let put = build(
            Put::builder()
                .table_name(&self.inner.table)
                .set_item(Some(row))
                .condition_expression("attribute_not_exists(#pk)")
                .expression_attribute_names("#pk", a.resource_coordinate)
                .build(),
        )?;
        let mut up = Update::builder()
            .table_name(&self.inner.table)
            .set_key(Some(self.key(coordinate, LEDGER_ID)))
            .expression_attribute_names("#live", LEDGER_MAP)
            .return_values_on_condition_check_failure(ReturnValuesOnConditionCheckFailure::AllOld);
        if ledger.exists {
            let mut set = "SET #live.#new = :exp".to_string();
            let mut cond = "size(#live) < :cap".to_string();
            let mut removes = Vec::new();
            for (i, (k, raw)) in prune.iter().enumerate() {
                up = up
                    .expression_attribute_names(format!("#x{i}"), k)
                    .expression_attribute_values(format!(":x{i}"), raw.clone());
                removes.push(format!("#live.#x{i}"));
                cond.push_str(&format!(" AND #live.#x{i} = :x{i}"));
            }
            if !removes.is_empty() {
                set.push_str(&format!(" REMOVE {}", removes.join(", ")));
            }
            up = up
                .update_expression(set)
                .condition_expression(cond)
                .expression_attribute_names("#new", id)
                .expression_attribute_values(":exp", n(exp))
                .expression_attribute_values(":cap", n(limit as i64 + prune.len() as i64));
        } else {
            up = up
                .update_expression("SET #live = :m, #rn = :rn, #acct = :acct")
                .condition_expression("attribute_not_exists(#live)")
                .expression_attribute_names("#rn", a.resource_name)
                .expression_attribute_names("#acct", a.account_id)
                .expression_attribute_values(":m", {
                    // The new entry, plus live rows found without a ledger (see get_reservation).
                    let pruned: Vec<&String> = prune.iter().map(|(k, _)| k).collect();
                    let mut m: HashMap<String, AttributeValue> = ledger
                        .live
                        .iter()
                        .filter(|(k, _)| !pruned.contains(k))
                        .map(|(k, (_, raw))| (k.clone(), raw.clone()))
                        .collect();
                    m.insert(id.to_string(), n(exp));
                    AttributeValue::M(m)
                })
                .expression_attribute_values(":rn", s(resource))
                .expression_attribute_values(":acct", s(account));
        }
        let up = build(up.build())?;
        let items = vec![
            TransactWriteItem::builder().put(put).build(),
            TransactWriteItem::builder().update(up).build(),
        ];
        self.transact(items, 1).await
    }

    /// Removes expired ledger entries (each conditioned on its old value). 1 UpdateItem.
    async fn prune(&self, coordinate: &str, prune: &[(String, AttributeValue)]) -> Result<()> {
        if prune.is_empty() {
            return Ok(());
        }
        let mut req = self
            .inner
            .client
            .update_item()
            .table_name(&self.inner.table)
            .set_key(Some(self.key(coordinate, LEDGER_ID)))
            .expression_attribute_names("#live", LEDGER_MAP);
        let mut removes = Vec::new();
        let mut cond = Vec::new();
        for (i, (k, raw)) in prune.iter().enumerate() {
            req = req
                .expression_attribute_names(format!("#x{i}"), k)
                .expression_attribute_values(format!(":x{i}"), raw.clone());
            removes.push(format!("#live.#x{i}"));
            cond.push(format!("#live.#x{i} = :x{i}"));
        }
        match req
            .update_expression(format!("REMOVE {}", removes.join(", ")))
            .condition_expression(cond.join(" AND "))
            .send()
            .await
        {
            Ok(_) => Ok(()),
            // Someone else pruned or changed them; the caller re-reads.
            Err(e) if e.code() == Some("ConditionalCheckFailedException") => Ok(()),
            Err(e) => Err(Error::dynamo("UpdateItem", e)),
        }
    }

    /// Sends a transaction. `ledger_index` is the position of the ledger write, whose failed
    /// condition returns the ledger as it is. Any other failed condition is reported with its item.
    async fn transact(
        &self,
        items: Vec<TransactWriteItem>,
        ledger_index: usize,
    ) -> Result<Attempt<()>> {
        match self
            .inner
            .client
            .transact_write_items()
            .set_transact_items(Some(items))
            .send()
            .await
        {
            Ok(_) => Ok(Attempt::Done(())),
            Err(SdkError::ServiceError(se)) => {
                if let TransactWriteItemsError::TransactionCanceledException(t) = se.err() {
                    let reasons = t.cancellation_reasons();
                    let code = |r: &CancellationReason| r.code().unwrap_or("None").to_string();
                    if reasons.iter().any(|r| is_conflict(Some(&code(r)))) {
                        return Ok(Attempt::Conflict);
                    }
                    if let Some(r) = reasons.get(ledger_index) {
                        if code(r) == "ConditionalCheckFailed" {
                            return Ok(Attempt::Raced(self.parse_ledger(r.item())?));
                        }
                    }
                    // Another item's condition failed (a uuid collision, or the caller's check).
                    return Ok(Attempt::Raced(Ledger {
                        exists: true,
                        ..Default::default()
                    }));
                }
                if is_conflict(se.err().code()) {
                    return Ok(Attempt::Conflict);
                }
                Err(Error::dynamo(
                    "TransactWriteItems",
                    SdkError::ServiceError(se),
                ))
            }
            Err(e) => Err(Error::dynamo("TransactWriteItems", e)),
        }
    }

    /// Binds a live reservation to `resource_id` for the token TTL (8 h default). **1**
    /// TransactWriteItems: the row (must exist, be unexpired and unbound or bound to the same id)
    /// and its ledger entry (must still be live) change together; an expired or deleted reservation
    /// is [`ReservationError::Gone`] and writes nothing.
    async fn bind(&self, r: &Reservation, resource_id: &str) -> Result<Token, ReservationError> {
        if resource_id.is_empty() {
            return Err(Error::Other("resource id must be non-empty".into()).into());
        }
        let a = self.inner.attrs;
        for attempt in 0..MAX_ATTEMPTS {
            let now = self.inner.clock.now();
            let now_s = now.as_secs();
            let exp = expiry_secs(now.plus(self.inner.token_ttl));
            let row = build(
                Update::builder()
                    .table_name(&self.inner.table)
                    .set_key(Some(self.key(&r.coordinate, &r.id)))
                    .update_expression("SET #rid = :rid, #exp = :exp")
                    .condition_expression(
                        "attribute_exists(#pk) AND #exp > :now AND (attribute_not_exists(#rid) OR #rid = :rid)",
                    )
                    .expression_attribute_names("#pk", a.resource_coordinate)
                    .expression_attribute_names("#rid", a.resource_id)
                    .expression_attribute_names("#exp", a.expiration_time)
                    .expression_attribute_values(":rid", s(resource_id))
                    .expression_attribute_values(":exp", n(exp))
                    .expression_attribute_values(":now", n(now_s))
                    .return_values_on_condition_check_failure(ReturnValuesOnConditionCheckFailure::AllOld)
                    .build(),
            )?;
            let ledger = build(
                Update::builder()
                    .table_name(&self.inner.table)
                    .set_key(Some(self.key(&r.coordinate, LEDGER_ID)))
                    .update_expression("SET #live.#id = :exp")
                    .condition_expression("#live.#id > :now")
                    .expression_attribute_names("#live", LEDGER_MAP)
                    .expression_attribute_names("#id", &r.id)
                    .expression_attribute_values(":exp", n(exp))
                    .expression_attribute_values(":now", n(now_s))
                    .build(),
            )?;
            let items = vec![
                TransactWriteItem::builder().update(row).build(),
                TransactWriteItem::builder().update(ledger).build(),
            ];
            let sent = self
                .inner
                .client
                .transact_write_items()
                .set_transact_items(Some(items))
                .send()
                .await;
            match sent {
                Ok(_) => {
                    if let Ok(mut m) = self.inner.ledgers.lock() {
                        if let Some(l) = m.get_mut(&r.coordinate) {
                            l.live.insert(r.id.clone(), (exp, n(exp)));
                        }
                    }
                    return Ok(Token {
                        coordinate: r.coordinate.clone(),
                        reservation_id: r.id.clone(),
                        resource_id: resource_id.to_string(),
                        expiration_time: exp,
                    });
                }
                Err(SdkError::ServiceError(se)) => {
                    if let TransactWriteItemsError::TransactionCanceledException(t) = se.err() {
                        let reasons = t.cancellation_reasons();
                        let code =
                            |i: usize| reasons.get(i).and_then(|r| r.code()).unwrap_or("None");
                        if is_conflict(Some(code(0))) || is_conflict(Some(code(1))) {
                            backoff(attempt).await;
                            continue;
                        }
                        let old = reasons.first().and_then(|r| r.item());
                        if let Some(old) = old {
                            let bound = opt_str(old, &self.inner.table, a.resource_id)?;
                            let exp = opt_int(old, &self.inner.table, a.expiration_time)?;
                            if let (Some(b), Some(e)) = (bound, exp) {
                                if b != resource_id && is_live(e, now) {
                                    return Err(ReservationError::AlreadyBound {
                                        reservation_id: r.id.clone(),
                                        bound_to: b,
                                    });
                                }
                            }
                        }
                        self.forget_entry(&r.coordinate, &r.id);
                        return Err(ReservationError::Gone {
                            coordinate: r.coordinate.clone(),
                            reservation_id: r.id.clone(),
                        });
                    }
                    if is_conflict(se.err().code()) {
                        backoff(attempt).await;
                        continue;
                    }
                    return Err(
                        Error::dynamo("TransactWriteItems", SdkError::ServiceError(se)).into(),
                    );
                }
                Err(e) => return Err(Error::dynamo("TransactWriteItems", e).into()),
            }
        }
        Err(Error::Other(format!("{} is contended", r.coordinate)).into())
    }

    /// Deletes a reservation or token row and releases its capacity. Idempotent: deleting what is
    /// already gone is a no-op. **1** TransactWriteItems (row delete + ledger entry removal); when the
    /// ledger no longer holds the entry (pruned after expiry), **+1** DeleteItem for the row alone.
    /// Returns whether a live ledger entry was released.
    pub async fn release(&self, coordinate: &str, id: &str) -> Result<bool> {
        Self::check_id(id)?;
        for attempt in 0..MAX_ATTEMPTS {
            let del = build(
                Delete::builder()
                    .table_name(&self.inner.table)
                    .set_key(Some(self.key(coordinate, id)))
                    .build(),
            )?;
            let ledger = build(
                Update::builder()
                    .table_name(&self.inner.table)
                    .set_key(Some(self.key(coordinate, LEDGER_ID)))
                    .update_expression("REMOVE #live.#id")
                    .condition_expression("attribute_exists(#live.#id)")
                    .expression_attribute_names("#live", LEDGER_MAP)
                    .expression_attribute_names("#id", id)
                    .build(),
            )?;
            let items = vec![
                TransactWriteItem::builder().delete(del).build(),
                TransactWriteItem::builder().update(ledger).build(),
            ];
            match self
                .inner
                .client
                .transact_write_items()
                .set_transact_items(Some(items))
                .send()
                .await
            {
                Ok(_) => {
                    self.forget_entry(coordinate, id);
                    return Ok(true);
                }
                Err(SdkError::ServiceError(se)) => {
                    let conflict = match se.err() {
                        TransactWriteItemsError::TransactionCanceledException(t) => t
                            .cancellation_reasons()
                            .iter()
                            .any(|r| is_conflict(r.code())),
                        e => is_conflict(e.code()),
                    };
                    if conflict {
                        backoff(attempt).await;
                        continue;
                    }
                    if !matches!(
                        se.err(),
                        TransactWriteItemsError::TransactionCanceledException(_)
                    ) {
                        return Err(Error::dynamo(
                            "TransactWriteItems",
                            SdkError::ServiceError(se),
                        ));
                    }
                    // The ledger no longer holds the entry: just remove the row.
                    self.inner
                        .client
                        .delete_item()
                        .table_name(&self.inner.table)
                        .set_key(Some(self.key(coordinate, id)))
                        .send()
                        .await
                        .map_err(|e| Error::dynamo("DeleteItem", e))?;
                    self.forget_entry(coordinate, id);
                    return Ok(false);
                }
                Err(e) => return Err(Error::dynamo("TransactWriteItems", e)),
            }
        }
        Err(Error::Other(format!("{coordinate} is contended")))
    }

    /// Runs `work` with a fresh reservation; if `work` fails or panics the reservation is deleted
    /// (then the error is returned or the panic resumed). On success the reservation is left as the
    /// work left it: bound with `create_token`, or expiring unused after the reservation TTL.
    /// (With `panic = "abort"`, as in release Lambdas, a panic ends the process instead; the
    /// reservation then expires after its TTL.)
    pub async fn with_reservation<F, Fut, T, E>(
        &self,
        resource: &str,
        account: &str,
        default_limit: i64,
        work: F,
    ) -> std::result::Result<T, E>
    where
        F: FnOnce(Reservation) -> Fut,
        Fut: Future<Output = std::result::Result<T, E>>,
        E: From<ReservationError>,
    {
        let r = self
            .get_reservation(resource, account, default_limit)
            .await?;
        let outcome = AssertUnwindSafe(work(r.clone())).catch_unwind().await;
        match outcome {
            Ok(Ok(v)) => Ok(v),
            Ok(Err(e)) => {
                if let Err(de) = r.delete().await {
                    tracing::warn!(reservation = %r.id, error = %de, "could not delete the reservation after failed work; it expires on its own");
                }
                Err(e)
            }
            Err(panic) => {
                if let Err(de) = r.delete().await {
                    tracing::warn!(reservation = %r.id, error = %de, "could not delete the reservation after a panic; it expires on its own");
                }
                std::panic::resume_unwind(panic)
            }
        }
    }

    fn parse_row(&self, item: &Item, now: Timestamp) -> Result<TokenRow> {
        let a = self.inner.attrs;
        let t = &self.inner.table;
        let exp = opt_int(item, t, a.expiration_time)?;
        Ok(TokenRow {
            coordinate: req_str(item, t, a.resource_coordinate)?,
            reservation_id: req_str(item, t, a.reservation_id)?,
            resource_name: opt_str(item, t, a.resource_name)?,
            account_id: opt_str(item, t, a.account_id)?,
            resource_id: opt_str(item, t, a.resource_id)?,
            expiration_time: exp,
            live: exp.is_some_and(|e| is_live(e, now)),
        })
    }

    /// Every reservation and token row of (resource, account), live or not (the ledger excluded).
    /// One strongly consistent Query per page.
    pub async fn list(&self, resource: &str, account: &str) -> Result<Vec<TokenRow>> {
        let a = self.inner.attrs;
        let now = self.inner.clock.now();
        let coordinate = Self::coordinate(resource, account)?;
        let mut out = Vec::new();
        let mut start: Option<Item> = None;
        loop {
            let page = self
                .inner
                .client
                .query()
                .table_name(&self.inner.table)
                .key_condition_expression("#pk = :pk")
                .expression_attribute_names("#pk", a.resource_coordinate)
                .expression_attribute_values(":pk", s(&coordinate))
                .consistent_read(true)
                .set_exclusive_start_key(start.take())
                .send()
                .await
                .map_err(|e| Error::dynamo("Query", e))?;
            for item in page.items() {
                if item.get(a.reservation_id) == Some(&s(LEDGER_ID)) {
                    continue;
                }
                out.push(self.parse_row(item, now)?);
            }
            match page.last_evaluated_key() {
                Some(k) if !k.is_empty() => start = Some(k.clone()),
                _ => break,
            }
        }
        Ok(out)
    }

    /// The rows bound to `resource_id`, by the resource index (eventually consistent), one Query per
    /// page of `page_size` (None: DynamoDB's default page).
    pub async fn find_by_resource_id(
        &self,
        resource_id: &str,
        page_size: Option<i32>,
    ) -> Result<Vec<TokenRow>> {
        let a = self.inner.attrs;
        let now = self.inner.clock.now();
        let mut out = Vec::new();
        let mut start: Option<Item> = None;
        loop {
            let page = self
                .inner
                .client
                .query()
                .table_name(&self.inner.table)
                .index_name(&self.inner.index)
                .key_condition_expression("#rid = :rid")
                .expression_attribute_names("#rid", a.resource_id)
                .expression_attribute_values(":rid", s(resource_id))
                .set_limit(page_size)
                .set_exclusive_start_key(start.take())
                .send()
                .await
                .map_err(|e| Error::dynamo("Query", e))?;
            for item in page.items() {
                out.push(self.parse_row(item, now)?);
            }
            match page.last_evaluated_key() {
                Some(k) if !k.is_empty() => start = Some(k.clone()),
                _ => break,
            }
        }
        Ok(out)
    }

    /// Removes every token bound to `resource_id` and releases its capacity (the token remover's
    /// work). Already removed tokens are a no-op. Calls: Query pages + 1 transaction per token.
    pub async fn remove_by_resource_id(
        &self,
        resource_id: &str,
        page_size: Option<i32>,
    ) -> Result<Vec<TokenRow>> {
        let rows = self.find_by_resource_id(resource_id, page_size).await?;
        for row in &rows {
            self.release(&row.coordinate, &row.reservation_id).await?;
        }
        Ok(rows)
    }
}

impl Reservation {
    /// Binds this reservation to a resource instance for the token TTL (8 h default). An expired or
    /// deleted reservation is [`ReservationError::Gone`]; nothing is written. **1** call.
    pub async fn create_token(&self, resource_id: &str) -> Result<Token, ReservationError> {
        self.limiter.bind(self, resource_id).await
    }

    /// Deletes the reservation (or its token) and releases its capacity; idempotent. **1** call.
    pub async fn delete(&self) -> Result<(), ReservationError> {
        self.limiter.release(&self.coordinate, &self.id).await?;
        Ok(())
    }
}
