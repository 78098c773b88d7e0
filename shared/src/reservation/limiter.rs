//! The non-fungible limiter's core: its types, configuration, keys and the ledger cache. The
//! operations live beside it by concept: [`super::reserve`] (admission), [`super::tokens`] (bind,
//! release, scoped form) and [`super::queries`] (listings, the remover's work).
//!
//! Capacity lives only in the per-coordinate ledger items ([`super::ledger`]); bound rows, in the
//! resource's partition ([`super::ended`]), let the remover find a resource's tokens. Design:
//! decision 0101.

use std::sync::Arc;
use std::time::Duration;

use aws_sdk_dynamodb::error::{ProvideErrorMetadata, SdkError};
use aws_sdk_dynamodb::operation::delete_item::builders::DeleteItemFluentBuilder;
use aws_sdk_dynamodb::operation::update_item::builders::UpdateItemFluentBuilder;
use aws_sdk_dynamodb::operation::update_item::UpdateItemError;
use aws_sdk_dynamodb::types::ReturnValuesOnConditionCheckFailure;
use aws_sdk_dynamodb::Client;
use serde::Serialize;

use super::coordinate::{self, CoordinateError};
use super::ledger::{Binding, Ledger, LEDGER_ID};
use super::shard;
use super::view::{lock, SharedView, View};
use super::Attrs;
use crate::cache::{Cache, WhenFull};
use crate::clock::{SharedClock, Timestamp};
use crate::config::ConfigError;
use crate::dynamo;
use crate::dynamo::item::{s, Item};
use crate::dynamo::txn::is_conflict;
use crate::error::{Error, Result};
use crate::interleave::Interleave;
use crate::limit::{Companion, LimitRow, LimitStore};
use crate::Deps;

/// A reservation not bound to a resource expires after this (rate-limiter-py's 300 s).
pub const DEFAULT_RESERVATION_TTL: Duration = Duration::from_secs(300);
/// A bound resource token expires after this (rate-limiter-py's 8 hours).
pub const DEFAULT_TOKEN_TTL: Duration = Duration::from_secs(8 * 3600);

pub(super) const MAX_ATTEMPTS: u32 = 64;
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
    /// The limit is above what the sharded ledger is built for ([`shard::MAX_CAPACITY`]); limits
    /// files refuse such rows at load, so this is a row written another way or a default limit.
    #[error("the limit {limit} of {coordinate} is above the non-fungible ceiling of {ceiling}")]
    AboveCeiling {
        coordinate: String,
        limit: u64,
        ceiling: u64,
    },
    /// The reservation expired or was deleted: its capacity may already be someone else's.
    #[error("reservation {reservation_id} on {coordinate} has expired or was deleted")]
    Gone {
        coordinate: String,
        reservation_id: String,
    },
    /// The reservation is already bound to another resource, until `bound_until` (epoch seconds).
    /// Which resource is not recorded per reservation (decision 0101, "Bound rows"); `turnstile
    /// reservation list --resource-id` shows a resource's tokens.
    #[error("reservation {reservation_id} is already bound to another resource (until {bound_until}, epoch seconds)")]
    AlreadyBound {
        reservation_id: String,
        bound_until: i64,
    },
    /// The resource ended (the remover saw its event) before this bind could hold capacity for
    /// it: the reservation is released.
    #[error(
        "resource {resource_id} has ended; reservation {reservation_id} was released, not bound"
    )]
    ResourceEnded {
        reservation_id: String,
        resource_id: String,
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
    pub(super) limiter: NonFungibleLimiter,
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
#[serde(rename_all = "camelCase")]
pub struct Token {
    pub coordinate: String,
    pub reservation_id: String,
    pub resource_id: String,
    /// Epoch seconds (`expirationTime`).
    pub expiration_time: i64,
}

/// One row of the non-fungible table, as listed.
#[derive(Debug, Clone, PartialEq, Eq, Serialize)]
#[serde(rename_all = "camelCase")]
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
/// Non-fungible tokens (rate-limiter-py's): reservations that become resource tokens, capacity
/// exact under concurrency. Clones share caches; build one per process.
///
/// Calls (no transactions): [`get_reservation`](Self::get_reservation) **1** UpdateItem warm,
/// **2** cold (a BatchGetItem for the limit row and ledger first), **3** the first time a coordinate
/// is used (a Query counts rows written without a ledger), +1 per lost race, +1 to confirm a
/// refusal the cached ledger predicts; [`Reservation::create_token`] **3** (the bound row, the
/// ended-resource marker read, the ledger entry); [`Reservation::delete`] **1** (the ledger entry).
/// Write units at any count of live reservations: reserve 1, bind 2, release 1.
#[derive(Debug, Clone)]
pub struct NonFungibleLimiter {
    pub(super) inner: Arc<Inner>,
}

#[derive(Debug)]
pub(super) struct Inner {
    pub(super) client: Client,
    pub(super) table: String,
    pub(super) index: String,
    pub(super) attrs: Attrs,
    pub(super) limits: LimitStore,
    pub(super) clock: SharedClock,
    pub(super) reservation_ttl: Duration,
    pub(super) token_ttl: Duration,
    pub(super) ledgers: Cache<String, SharedView>,
    pub(super) interleave: Interleave,
}
/// One conditional write's outcome.
pub(super) enum Attempt<T> {
    Done(T),
    /// The condition failed; the item as it is (from ALL_OLD), `None` when absent.
    Failed(Option<Item>),
    /// Throttled or conflicted: pause and retry.
    Retry,
}

/// Sends an `UpdateItem` with `ALL_OLD` on a failed condition, as an attempt: applied, or failed
/// with the item as it was.
pub(super) async fn update_attempt(req: UpdateItemFluentBuilder) -> Result<Attempt<()>> {
    let sent = req
        .return_values_on_condition_check_failure(ReturnValuesOnConditionCheckFailure::AllOld)
        .send()
        .await;
    match sent {
        Ok(_) => Ok(Attempt::Done(())),
        Err(err) => attempt_of("UpdateItem", err, |e| match e {
            UpdateItemError::ConditionalCheckFailedException(c) => Some(c.item().cloned()),
            _ => None,
        }),
    }
}

/// Sorts an SDK error of a conditional write: `Failed` with the old item on a failed condition,
/// `Retry` on throttling, else an error naming the operation.
pub(super) fn attempt_of<E>(
    operation: &'static str,
    err: SdkError<E, aws_smithy_runtime_api::http::Response>,
    failed_item: impl FnOnce(&E) -> Option<Option<Item>>,
) -> Result<Attempt<()>>
where
    E: ProvideErrorMetadata + std::error::Error + Send + Sync + 'static,
{
    if let SdkError::ServiceError(se) = &err {
        if let Some(old) = failed_item(se.err()) {
            return Ok(Attempt::Failed(old));
        }
        if is_conflict(se.err().code()) {
            return Ok(Attempt::Retry);
        }
    }
    Err(Error::dynamo(operation, err))
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
                ledgers: Cache::new(MAX_CACHED, WhenFull::Clear),
                interleave: Interleave::none(),
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
        self.rebuilt(|i| {
            i.reservation_ttl = reservation;
            i.token_ttl = token;
        })
    }

    /// Runs `interleave` between the writes of each operation (tests force orders with it).
    pub fn with_interleave(self, interleave: Interleave) -> Self {
        self.rebuilt(|i| i.interleave = interleave)
    }

    /// A limiter with `change` applied and an empty ledger cache (clones of `self` keep theirs).
    fn rebuilt(self, change: impl FnOnce(&mut Inner)) -> Self {
        let i = &self.inner;
        let mut inner = Inner {
            client: i.client.clone(),
            table: i.table.clone(),
            index: i.index.clone(),
            attrs: i.attrs,
            limits: i.limits.clone(),
            clock: i.clock.clone(),
            reservation_ttl: i.reservation_ttl,
            token_ttl: i.token_ttl,
            ledgers: Cache::new(MAX_CACHED, WhenFull::Clear),
            interleave: i.interleave.clone(),
        };
        change(&mut inner);
        NonFungibleLimiter {
            inner: Arc::new(inner),
        }
    }

    pub fn limits(&self) -> &LimitStore {
        &self.inner.limits
    }

    /// rate-limiter-py's `resourceCoordinate`, `"{resource}:{account}"`; a resource name holding
    /// `:` is refused so that no two pairs share a coordinate ([`coordinate::encode`]).
    pub fn coordinate(resource: &str, account: &str) -> Result<String, CoordinateError> {
        coordinate::encode(resource, account)
    }

    /// Refuses ids that are not reservations: empty, or starting with `~` like the ledger shards'
    /// sort keys (deleting one through a handle would drop capacity records).
    pub(super) fn check_id(id: &str) -> Result<()> {
        if id.is_empty() || id.starts_with('~') {
            return Err(Error::InvalidArgument(format!(
                "{id:?} is not a reservation id (empty, or a ledger's sort key: starts with `~`)"
            )));
        }
        Ok(())
    }

    pub(super) fn key(&self, coordinate: &str, id: &str) -> Item {
        let a = self.inner.attrs;
        Item::from([
            (a.resource_coordinate.to_string(), s(coordinate)),
            (a.reservation_id.to_string(), s(id)),
        ])
    }

    /// An UpdateItem of one row (`coordinate`, `id`): where every conditional write here starts.
    pub(super) fn update_row(&self, coordinate: &str, id: &str) -> UpdateItemFluentBuilder {
        self.inner
            .client
            .update_item()
            .table_name(&self.inner.table)
            .set_key(Some(self.key(coordinate, id)))
    }

    /// A DeleteItem of one row (`coordinate`, `id`).
    pub(super) fn delete_row(&self, coordinate: &str, id: &str) -> DeleteItemFluentBuilder {
        self.inner
            .client
            .delete_item()
            .table_name(&self.inner.table)
            .set_key(Some(self.key(coordinate, id)))
    }

    /// The cached view of a coordinate's shards, as a copy (tests).
    #[cfg(test)]
    pub(super) fn cached_ledger(&self, coordinate: &str) -> Option<View> {
        self.inner.ledgers.get(coordinate).map(|v| lock(&v).clone())
    }

    /// Caches `view` as the coordinate's, returning the shared handle.
    pub(super) fn remember(&self, coordinate: &str, view: View) -> SharedView {
        let shared = SharedView::new(view.into());
        self.inner
            .ledgers
            .insert(coordinate.to_string(), shared.clone());
        shared
    }

    pub(super) fn forget_entry(&self, coordinate: &str, id: &str) {
        if let Some(v) = self.inner.ledgers.get(coordinate) {
            lock(&v).forget(id);
        }
    }

    /// Records an entry of a cached ledger shard as bound (after binding).
    pub(super) fn extend_entry(&self, coordinate: &str, id: &str, binding: Binding) {
        if let Some(v) = self.inner.ledgers.get(coordinate) {
            lock(&v).extend(id, binding);
        }
    }

    /// 1 GetItem (strongly consistent) of ledger shard `k`.
    pub(super) async fn read_ledger(&self, coordinate: &str, k: u32) -> Result<Ledger> {
        let key = self.key(coordinate, &shard::sort_key(k));
        let item = dynamo::get_consistent(&self.inner.client, &self.inner.table, key).await?;
        Ledger::parse(&self.inner.table, item.as_ref())
    }

    /// 1 BatchGetItem: the limit row and ledger shard 0 (whose absence means no ledger yet).
    pub(super) async fn read_cold(
        &self,
        resource: &str,
        account: &str,
        coordinate: &str,
    ) -> Result<(Option<LimitRow>, SharedView)> {
        let key = self.key(coordinate, LEDGER_ID);
        let (row, ledger) = self
            .inner
            .limits
            .get_with(resource, account, &self.inner.table, key, true)
            .await?;
        let ledger = match ledger {
            Companion::Unprocessed => self.read_ledger(coordinate, 0).await?,
            Companion::Found(item) => Ledger::parse(&self.inner.table, item.as_ref())?,
        };
        Ok((row, self.remember(coordinate, View::of_shard(0, ledger))))
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
}

#[cfg(test)]
mod tests {
    use super::super::ledger::tests::ledger;
    use super::*;
    use crate::clock::ManualClock;
    use crate::table::AttributeStyle;

    /// A limiter that never calls DynamoDB (nothing here sends a request).
    fn limiter(style: AttributeStyle) -> NonFungibleLimiter {
        let client = crate::dynamo::local_client("http://127.0.0.1:9", None);
        let clock: SharedClock = Arc::new(ManualClock::new(Timestamp::from_secs(1_000)));
        let limits = LimitStore::new(
            client.clone(),
            "limits",
            "limits-index",
            style,
            clock.clone(),
            Duration::from_secs(60),
        );
        NonFungibleLimiter::new(client, "nf", "nf-index", style, limits, clock)
    }

    #[test]
    fn ids_that_are_not_reservations_are_refused() {
        for bad in ["", LEDGER_ID, "~ledger.3"] {
            let err = NonFungibleLimiter::check_id(bad).unwrap_err();
            assert!(matches!(err, Error::InvalidArgument(_)), "{bad:?}: {err}");
        }
        assert!(NonFungibleLimiter::check_id("3f1c-uuid").is_ok());
        assert!(NonFungibleLimiter::check_id("3f1c-uuid.3").is_ok());
        let l = limiter(AttributeStyle::Camel);
        assert!(matches!(
            l.reservation("emr", "acct", LEDGER_ID),
            Err(ReservationError::Store(Error::InvalidArgument(_)))
        ));
        assert!(matches!(
            l.reservation("emr:x", "acct", "id"),
            Err(ReservationError::InvalidCoordinate(_))
        ));
        let r = l.reservation("emr", "acct", "id").unwrap();
        assert_eq!((r.coordinate.as_str(), r.expires_at), ("emr:acct", None));
    }

    #[test]
    fn keys_follow_the_attribute_style() {
        let camel = limiter(AttributeStyle::Camel).key("emr:acct", "id");
        assert_eq!(camel.get("resourceCoordinate"), Some(&s("emr:acct")));
        assert_eq!(camel.get("reservationId"), Some(&s("id")));
        let snake = limiter(AttributeStyle::Snake).key("emr:acct", "id");
        assert_eq!(snake.get("resource_coordinate"), Some(&s("emr:acct")));
        assert_eq!(snake.len(), 2);
    }

    #[test]
    fn the_ledger_cache_forgets_and_extends_entries_of_known_ledgers_only() {
        let l = limiter(AttributeStyle::Camel);
        assert_eq!(l.cached_ledger("c"), None);
        let bound = Binding { exp: 99, id: 7 };
        let mut after = ledger(&[]);
        after.live.insert("b".into(), (99, bound.value()));
        let seen = || Some(View::of_shard(0, after.clone()));
        l.remember("c", View::of_shard(0, ledger(&[("a", 10), ("b", 20)])));
        l.forget_entry("c", "a");
        l.extend_entry("c", "b", bound);
        assert_eq!(l.cached_ledger("c"), seen());
        // Unknown coordinates stay unknown: no ledger is invented from one entry.
        l.extend_entry("other", "x", bound);
        l.forget_entry("other", "x");
        assert_eq!(l.cached_ledger("other"), None);
        // New TTLs start a fresh cache (the old ledgers were seen under other expiries).
        let l2 = l
            .clone()
            .with_ttls(Duration::from_secs(1), Duration::from_secs(2));
        assert_eq!(l2.cached_ledger("c"), None);
        assert_eq!(l2.inner.reservation_ttl, Duration::from_secs(1));
        assert_eq!(l.cached_ledger("c"), seen());
    }
}
