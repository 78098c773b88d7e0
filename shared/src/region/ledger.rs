//! The ledger: where each region's allotment of a global limit lives (an MRSC global table in
//! production). One partition per limit; in it one item per region, `region#{r}`, that only `r`
//! writes (a reclaim aside, decision 4200), and one item per move, `move#{id}`.
//!
//! The ledger is reached through [`LedgerStore`]: single-item reads, queries and conditional
//! writes, nothing else, because MRSC has no transactions and no TTL. [`DynamoLedger`] is the
//! DynamoDB one; the multi-region simulation wraps it in models of MRSC and of last-writer-wins.

use std::collections::HashMap;
use std::future::Future;

use aws_sdk_dynamodb::error::{ProvideErrorMetadata, SdkError};
use aws_sdk_dynamodb::operation::delete_item::DeleteItemError;
use aws_sdk_dynamodb::operation::put_item::PutItemError;
use aws_sdk_dynamodb::operation::update_item::UpdateItemError;
use aws_sdk_dynamodb::types::{
    AttributeDefinition, AttributeValue, BillingMode, KeySchemaElement, KeyType,
    ReturnValuesOnConditionCheckFailure, ScalarAttributeType,
};
use aws_sdk_dynamodb::Client;

use super::demand::Reported;
use super::error::RegionError;
use crate::clock::Timestamp;
use crate::dynamo::item::{n, s, Item};

pub mod attr {
    /// The global limit's bucket key: the partition.
    pub const LIMIT: &str = "limit";
    /// `region#{r}` or `move#{id}`.
    pub const ITEM: &str = "item";
    pub const ALLOTMENT: &str = "allotment";
    /// Nanoseconds since the epoch, by the region's own clock.
    pub const LEASE_UNTIL: &str = "leaseUntil";
    /// Bumped by a reclaim: writes carrying an older epoch are refused.
    pub const EPOCH: &str = "epoch";
    /// Moves this region lowered: id -> {to, amount, releaseAt}.
    pub const OUTBOX: &str = "outbox";
    /// Moves raised here (or, by a reclaim, marked received here): id -> when, in nanoseconds
    /// by the writer's clock (pruning waits until no late send of the move can still arrive).
    pub const INBOX: &str = "inbox";
    pub const FROM: &str = "from";
    pub const TO: &str = "to";
    pub const AMOUNT: &str = "amount";
    /// Nanoseconds since the epoch before which the receiver may not raise.
    pub const RELEASE_AT: &str = "releaseAt";
}

const REGION_PREFIX: &str = "region#";
const MOVE_PREFIX: &str = "move#";

/// One ledger item's key.
#[derive(Debug, Clone, PartialEq, Eq, Hash)]
pub struct LedgerKey {
    pub limit: String,
    pub item: String,
}

impl LedgerKey {
    pub fn region(limit: &str, region: &str) -> Self {
        LedgerKey {
            limit: limit.to_string(),
            item: format!("{REGION_PREFIX}{region}"),
        }
    }
    pub fn movement(limit: &str, id: &str) -> Self {
        LedgerKey {
            limit: limit.to_string(),
            item: format!("{MOVE_PREFIX}{id}"),
        }
    }
    pub fn to_item(&self) -> Item {
        HashMap::from([
            (attr::LIMIT.to_string(), s(&self.limit)),
            (attr::ITEM.to_string(), s(&self.item)),
        ])
    }
}

impl std::fmt::Display for LedgerKey {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        write!(f, "{}/{}", self.limit, self.item)
    }
}

/// A move as the giver's outbox and the move item hold it.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Entry {
    pub from: String,
    pub to: String,
    pub amount: u64,
    pub release_at: Timestamp,
}

impl Entry {
    pub fn to_value(&self) -> AttributeValue {
        AttributeValue::M(HashMap::from([
            (attr::FROM.to_string(), s(&self.from)),
            (attr::TO.to_string(), s(&self.to)),
            (attr::AMOUNT.to_string(), n(self.amount)),
            (attr::RELEASE_AT.to_string(), n(self.release_at.as_nanos())),
        ]))
    }
    pub fn from_map(m: &Item, at: &str) -> Result<Self, RegionError> {
        Ok(Entry {
            from: string(m, attr::FROM, at)?,
            to: string(m, attr::TO, at)?,
            amount: number(m, attr::AMOUNT, at)?,
            release_at: Timestamp::from_nanos(signed(m, attr::RELEASE_AT, at)?),
        })
    }
}

/// A region's item, read.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct RegionRow {
    pub region: String,
    pub allotment: u64,
    pub lease_until: Timestamp,
    pub epoch: u64,
    pub outbox: HashMap<String, Entry>,
    pub inbox: HashMap<String, Timestamp>,
    /// The demand the region last reported (`None`: never reported).
    pub reported: Option<Reported>,
}

impl RegionRow {
    pub fn from_item(it: &Item) -> Result<Self, RegionError> {
        let key = string(it, attr::ITEM, "region")?;
        let region = key
            .strip_prefix(REGION_PREFIX)
            .ok_or_else(|| malformed(&key, "not a region item".into()))?
            .to_string();
        let mut outbox = HashMap::new();
        for (id, v) in map(it, attr::OUTBOX) {
            let m = v
                .as_m()
                .map_err(|_| malformed(&key, format!("outbox {id}")))?;
            outbox.insert(id.clone(), Entry::from_map(m, &key)?);
        }
        let mut inbox = HashMap::new();
        for (id, v) in map(it, attr::INBOX) {
            let at = v
                .as_n()
                .ok()
                .and_then(|x| x.parse().ok())
                .ok_or_else(|| malformed(&key, format!("inbox {id}")))?;
            inbox.insert(id.clone(), Timestamp::from_nanos(at));
        }
        Ok(RegionRow {
            allotment: number(it, attr::ALLOTMENT, &key)?,
            lease_until: Timestamp::from_nanos(signed(it, attr::LEASE_UNTIL, &key)?),
            epoch: number(it, attr::EPOCH, &key)?,
            reported: Reported::from_item(it, &key)?,
            region,
            outbox,
            inbox,
        })
    }

    /// The item a new region starts from: its first allotment, a lease, empty boxes.
    pub fn new_item(limit: &str, region: &str, allotment: u64, lease_until: Timestamp) -> Item {
        let mut it = LedgerKey::region(limit, region).to_item();
        it.insert(attr::ALLOTMENT.into(), n(allotment));
        it.insert(attr::LEASE_UNTIL.into(), n(lease_until.as_nanos()));
        it.insert(attr::EPOCH.into(), n(0));
        it.insert(attr::OUTBOX.into(), AttributeValue::M(HashMap::new()));
        it.insert(attr::INBOX.into(), AttributeValue::M(HashMap::new()));
        it
    }
}

fn map<'a>(it: &'a Item, name: &str) -> impl Iterator<Item = (&'a String, &'a AttributeValue)> {
    it.get(name)
        .and_then(|v| v.as_m().ok())
        .into_iter()
        .flat_map(|m| m.iter())
}

fn malformed(item: &str, reason: String) -> RegionError {
    RegionError::Malformed {
        item: item.to_string(),
        reason,
    }
}

fn string(it: &Item, name: &str, at: &str) -> Result<String, RegionError> {
    it.get(name)
        .and_then(|v| v.as_s().ok())
        .cloned()
        .ok_or_else(|| malformed(at, format!("{name} missing")))
}

fn signed(it: &Item, name: &str, at: &str) -> Result<i64, RegionError> {
    it.get(name)
        .and_then(|v| v.as_n().ok())
        .and_then(|x| x.parse().ok())
        .ok_or_else(|| malformed(at, format!("{name} missing or not a whole number")))
}

fn number(it: &Item, name: &str, at: &str) -> Result<u64, RegionError> {
    u64::try_from(signed(it, name, at)?).map_err(|_| malformed(at, format!("{name} negative")))
}

/// A single-item conditional write: a whole new item, or an update expression.
#[derive(Debug, Clone)]
pub struct Write {
    pub key: LedgerKey,
    pub change: Change,
    pub condition: String,
    pub names: HashMap<String, String>,
    pub values: Item,
}

#[derive(Debug, Clone)]
pub enum Change {
    Put(Item),
    Update(String),
    /// Deletes the item (a finished move's record, when pruned).
    Delete,
}

/// What a conditional write did.
#[derive(Debug, Clone, PartialEq)]
pub enum Written {
    Applied,
    /// The condition failed; the item as it was (`None`: absent).
    Refused(Option<Item>),
}

/// The ledger's operations: no transaction, no TTL, no batch (MRSC offers none of the first two,
/// and a saga needs none of them).
pub trait LedgerStore: Send + Sync {
    /// A strongly consistent read of one item.
    fn get(
        &self,
        key: &LedgerKey,
    ) -> impl Future<Output = Result<Option<Item>, RegionError>> + Send;
    /// Every item of one limit (strongly consistent).
    fn items(&self, limit: &str) -> impl Future<Output = Result<Vec<Item>, RegionError>> + Send;
    fn write(&self, w: Write) -> impl Future<Output = Result<Written, RegionError>> + Send;
}

/// The ledger on a DynamoDB table (an MRSC global table in production).
#[derive(Debug, Clone)]
pub struct DynamoLedger {
    pub client: Client,
    pub table: String,
}

/// A failed conditional write's answer: `refused` holds the item the condition saw when the
/// failure was the condition (whichever operation sent it), else the error is the store's.
fn refused_or_error<E: ProvideErrorMetadata, R>(
    refused: Option<Option<&Item>>,
    operation: &'static str,
    key: &str,
    e: &SdkError<E, R>,
) -> Result<Written, RegionError> {
    match refused {
        Some(item) => Ok(Written::Refused(item.cloned())),
        None => Err(store_error(operation, key, e)),
    }
}

fn store_error<E: ProvideErrorMetadata, R>(
    operation: &'static str,
    key: &str,
    e: &SdkError<E, R>,
) -> RegionError {
    let code = e.code().unwrap_or("unknown");
    if code == "ReplicatedWriteConflictException" {
        return RegionError::Conflict {
            item: key.to_string(),
        };
    }
    RegionError::Store {
        operation,
        message: format!("{code}: {}", e.message().unwrap_or("no message")),
    }
}

impl LedgerStore for DynamoLedger {
    async fn get(&self, key: &LedgerKey) -> Result<Option<Item>, RegionError> {
        let out = self
            .client
            .get_item()
            .table_name(&self.table)
            .set_key(Some(key.to_item()))
            .consistent_read(true)
            .send()
            .await
            .map_err(|e| store_error("GetItem", &key.to_string(), &e))?;
        Ok(out.item)
    }

    async fn items(&self, limit: &str) -> Result<Vec<Item>, RegionError> {
        let mut all = Vec::new();
        let mut start = None;
        loop {
            let out = self
                .client
                .query()
                .table_name(&self.table)
                .key_condition_expression("#l = :l")
                .expression_attribute_names("#l", attr::LIMIT)
                .expression_attribute_values(":l", s(limit))
                .consistent_read(true)
                .set_exclusive_start_key(start)
                .send()
                .await
                .map_err(|e| store_error("Query", limit, &e))?;
            all.extend(out.items.unwrap_or_default());
            start = out.last_evaluated_key;
            if start.is_none() {
                return Ok(all);
            }
        }
    }

    async fn write(&self, w: Write) -> Result<Written, RegionError> {
        let key = w.key.to_string();
        let names = (!w.names.is_empty()).then_some(w.names);
        let values = (!w.values.is_empty()).then_some(w.values);
        match w.change {
            Change::Put(item) => self
                .client
                .put_item()
                .table_name(&self.table)
                .set_item(Some(item))
                .condition_expression(w.condition)
                .set_expression_attribute_names(names)
                .set_expression_attribute_values(values)
                .return_values_on_condition_check_failure(
                    ReturnValuesOnConditionCheckFailure::AllOld,
                )
                .send()
                .await
                .map(|_| Written::Applied)
                .or_else(|e| {
                    let refused = match e.as_service_error() {
                        Some(PutItemError::ConditionalCheckFailedException(c)) => Some(c.item()),
                        _ => None,
                    };
                    refused_or_error(refused, "PutItem", &key, &e)
                }),
            Change::Update(expr) => self
                .client
                .update_item()
                .table_name(&self.table)
                .set_key(Some(w.key.to_item()))
                .update_expression(expr)
                .condition_expression(w.condition)
                .set_expression_attribute_names(names)
                .set_expression_attribute_values(values)
                .return_values_on_condition_check_failure(
                    ReturnValuesOnConditionCheckFailure::AllOld,
                )
                .send()
                .await
                .map(|_| Written::Applied)
                .or_else(|e| {
                    let refused = match e.as_service_error() {
                        Some(UpdateItemError::ConditionalCheckFailedException(c)) => Some(c.item()),
                        _ => None,
                    };
                    refused_or_error(refused, "UpdateItem", &key, &e)
                }),
            Change::Delete => self
                .client
                .delete_item()
                .table_name(&self.table)
                .set_key(Some(w.key.to_item()))
                .set_condition_expression((!w.condition.is_empty()).then_some(w.condition))
                .set_expression_attribute_names(names)
                .set_expression_attribute_values(values)
                .send()
                .await
                .map(|_| Written::Applied)
                .or_else(|e| {
                    let refused = match e.as_service_error() {
                        Some(DeleteItemError::ConditionalCheckFailedException(_)) => Some(None),
                        _ => None,
                    };
                    refused_or_error(refused, "DeleteItem", &key, &e)
                }),
        }
    }
}

/// Creates the ledger table (pay per request, no TTL, no index: what MRSC allows). For DynamoDB
/// Local and the CLI; a deployment creates it from `template.yaml`.
pub async fn create_table(client: &Client, table: &str) -> Result<(), RegionError> {
    let key = |name: &str, kind: KeyType| {
        KeySchemaElement::builder()
            .attribute_name(name)
            .key_type(kind)
            .build()
    };
    let def = |name: &str| {
        AttributeDefinition::builder()
            .attribute_name(name)
            .attribute_type(ScalarAttributeType::S)
            .build()
    };
    let built = (|| {
        Ok::<_, aws_sdk_dynamodb::error::BuildError>((
            key(attr::LIMIT, KeyType::Hash)?,
            key(attr::ITEM, KeyType::Range)?,
            def(attr::LIMIT)?,
            def(attr::ITEM)?,
        ))
    })()
    .map_err(|e| RegionError::Store {
        operation: "CreateTable",
        message: e.to_string(),
    })?;
    client
        .create_table()
        .table_name(table)
        .billing_mode(BillingMode::PayPerRequest)
        .key_schema(built.0)
        .key_schema(built.1)
        .attribute_definitions(built.2)
        .attribute_definitions(built.3)
        .send()
        .await
        .map_err(|e| store_error("CreateTable", table, &e))?;
    Ok(())
}

/// Creates a limit's region items with allotments `split` (summing to at most the limit's
/// total: checked by the caller, [`super::allotment::Declared::split`]). A region already there is
/// left as it is, so running it twice changes nothing.
pub async fn init<S: LedgerStore>(
    store: &S,
    limit: &str,
    split: &[(String, u64)],
    lease_until: Timestamp,
) -> Result<(), RegionError> {
    for (region, amount) in split {
        let w = Write {
            key: LedgerKey::region(limit, region),
            change: Change::Put(RegionRow::new_item(limit, region, *amount, lease_until)),
            condition: "attribute_not_exists(#i)".into(),
            names: HashMap::from([("#i".to_string(), attr::ITEM.to_string())]),
            values: HashMap::new(),
        };
        store.write(w).await?;
    }
    Ok(())
}

/// A region's item, read (strongly consistent).
pub async fn read_region<S: LedgerStore>(
    store: &S,
    limit: &str,
    region: &str,
) -> Result<RegionRow, RegionError> {
    match store.get(&LedgerKey::region(limit, region)).await? {
        Some(it) => RegionRow::from_item(&it),
        None => Err(RegionError::NoRegion {
            limit: limit.to_string(),
            region: region.to_string(),
        }),
    }
}

/// Every region item of a limit, and the moves recorded (id -> entry).
pub async fn read_all<S: LedgerStore>(
    store: &S,
    limit: &str,
) -> Result<(Vec<RegionRow>, HashMap<String, Entry>), RegionError> {
    let mut regions = Vec::new();
    let mut moves = HashMap::new();
    for it in store.items(limit).await? {
        let key = string(&it, attr::ITEM, limit)?;
        if key.starts_with(REGION_PREFIX) {
            regions.push(RegionRow::from_item(&it)?);
        } else if let Some(id) = key.strip_prefix(MOVE_PREFIX) {
            moves.insert(id.to_string(), Entry::from_map(&it, &key)?);
        }
    }
    regions.sort_by(|a, b| a.region.cmp(&b.region));
    Ok((regions, moves))
}

/// The variable naming the ledger table (the stack's output `RegionLedgerTable`), for the CLI
/// and the rebalancer function.
pub const TABLE_VAR: &str = "TURNSTILE_LEDGER_TABLE";

/// A move id that never meets another (ids are compared, never parsed).
pub fn new_move_id() -> String {
    uuid::Uuid::new_v4().simple().to_string()
}
