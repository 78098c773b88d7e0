//! DynamoDB Streams → Lambda, locally: polls a table's stream on DynamoDB Local and hands batches to a
//! handler in the shape a Lambda event source mapping delivers.
//!
//! DynamoDB Local reports a TTL deletion with `eventName` `UNKNOWN_TO_SDK_VERSION`, an `OldImage` and
//! no `userIdentity`; AWS delivers `REMOVE` with `userIdentity {type: Service, principalId:
//! dynamodb.amazonaws.com}`. The bridge rewrites the former into the latter, so the TTL sweeper's
//! production filter is what runs locally too. A user's own `DeleteItem` stays a plain `REMOVE`.
//!
//! [`StreamBridge::with_filters`] applies the event source mapping's `FilterCriteria`
//! (`crate::template::stream_filters`): records no pattern matches are dropped before delivery, as
//! Lambda drops them, so the handler runs only for what it runs for in AWS.

use std::collections::{BTreeMap, HashMap};
use std::future::Future;
use std::time::Duration;

use aws_lambda_events::event::dynamodb::Event;
use aws_sdk_dynamodbstreams::error::ProvideErrorMetadata;
use aws_sdk_dynamodbstreams::types::{AttributeValue, OperationType, Record, ShardIteratorType};
use aws_sdk_dynamodbstreams::Client;
use serde_json::{json, Map, Value};

#[derive(Debug, thiserror::Error)]
pub enum BridgeError {
    #[error("table {0} has no stream enabled")]
    NoStream(String),
    #[error("DynamoDB Streams {operation} failed: {message}")]
    Streams {
        operation: &'static str,
        message: String,
    },
    #[error("record does not fit the Lambda event shape: {0}")]
    Shape(String),
}

fn streams_err<E: std::error::Error + 'static>(operation: &'static str, e: E) -> BridgeError {
    BridgeError::Streams {
        operation,
        message: shared::error::error_chain(&e),
    }
}

/// A DynamoDB Streams client for DynamoDB Local (streams are served on the same port).
pub fn local_streams_client(endpoint: &str) -> Client {
    let sdk = shared::dynamo::local_sdk_config(endpoint);
    Client::from_conf(aws_sdk_dynamodbstreams::config::Builder::from(&sdk).build())
}

/// Where a bridge starts reading shards that exist when it starts.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum StartAt {
    /// Only changes made after the bridge started (the default for `turnstile dev`).
    Latest,
    /// Everything the stream still holds.
    TrimHorizon,
}

#[derive(Debug, Default, Clone)]
struct ShardCursor {
    iterator: Option<String>,
    last_sequence: Option<String>,
}

/// Polls one table's stream.
#[derive(Debug)]
pub struct StreamBridge {
    client: Client,
    table: String,
    stream_arn: String,
    start: StartAt,
    /// Open shards: their next iterator and the last sequence number read from them.
    iterators: BTreeMap<String, ShardCursor>,
    /// Shards that reported their end.
    closed: std::collections::BTreeSet<String>,
    discovered: bool,
    /// The mapping's filter patterns; a record is delivered when any matches (all, when empty).
    filters: Vec<crate::eventbridge::Pattern>,
}

impl StreamBridge {
    /// Finds the table's latest stream.
    pub async fn new(client: Client, table: &str, start: StartAt) -> Result<Self, BridgeError> {
        let out = client
            .list_streams()
            .table_name(table)
            .send()
            .await
            .map_err(|e| streams_err("ListStreams", e))?;
        let arn = out
            .streams()
            .iter()
            .filter_map(|s| s.stream_arn())
            .max()
            .ok_or_else(|| BridgeError::NoStream(table.to_string()))?
            .to_string();
        Ok(StreamBridge {
            client,
            table: table.to_string(),
            stream_arn: arn,
            start,
            iterators: BTreeMap::new(),
            closed: Default::default(),
            discovered: false,
            filters: Vec::new(),
        })
    }

    /// Delivers only records one of `filters` matches (Lambda's `FilterCriteria`).
    pub fn with_filters(mut self, filters: Vec<crate::eventbridge::Pattern>) -> Self {
        self.filters = filters;
        self
    }

    fn passes(&self, record: &Value) -> bool {
        self.filters.is_empty() || self.filters.iter().any(|p| p.matches(record))
    }

    pub fn stream_arn(&self) -> &str {
        &self.stream_arn
    }

    async fn discover_shards(&mut self) -> Result<(), BridgeError> {
        let desc = self
            .client
            .describe_stream()
            .stream_arn(&self.stream_arn)
            .send()
            .await
            .map_err(|e| streams_err("DescribeStream", e))?;
        let shards = desc
            .stream_description()
            .map(|d| d.shards().to_vec())
            .unwrap_or_default();
        for shard in shards {
            let Some(id) = shard.shard_id() else { continue };
            if self.closed.contains(id) || self.iterators.contains_key(id) {
                continue;
            }
            // Shards that appear after start-up are read from their beginning so nothing is missed.
            let kind = match (self.discovered, self.start) {
                (false, StartAt::Latest) => ShardIteratorType::Latest,
                _ => ShardIteratorType::TrimHorizon,
            };
            let iterator = self.iterator(id, kind, None).await?;
            self.iterators.insert(
                id.to_string(),
                ShardCursor {
                    iterator,
                    last_sequence: None,
                },
            );
        }
        self.discovered = true;
        Ok(())
    }

    async fn iterator(
        &self,
        shard: &str,
        kind: ShardIteratorType,
        after: Option<&str>,
    ) -> Result<Option<String>, BridgeError> {
        let out = self
            .client
            .get_shard_iterator()
            .stream_arn(&self.stream_arn)
            .shard_id(shard)
            .shard_iterator_type(kind)
            .set_sequence_number(after.map(str::to_string))
            .send()
            .await
            .map_err(|e| streams_err("GetShardIterator", e))?;
        Ok(out.shard_iterator().map(str::to_string))
    }

    /// Reads whatever is new on every shard, as Lambda-shaped records (oldest first per shard).
    pub async fn poll(&mut self) -> Result<Vec<Value>, BridgeError> {
        self.discover_shards().await?;
        let mut records = Vec::new();
        let shard_ids: Vec<String> = self.iterators.keys().cloned().collect();
        for id in shard_ids {
            let Some(cursor) = self.iterators.get(&id).cloned() else {
                continue;
            };
            let Some(iterator) = cursor.iterator.clone() else {
                continue;
            };
            let out = match self
                .client
                .get_records()
                .shard_iterator(iterator)
                .limit(100)
                .send()
                .await
            {
                Ok(out) => out,
                // An iterator DynamoDB no longer honours (DynamoDB Local also answers this for an
                // iterator handed out while the shard was empty): start again right after the last
                // record read, or from the shard's beginning when none was read yet.
                Err(e)
                    if matches!(
                        e.code(),
                        Some("TrimmedDataAccessException" | "ExpiredIteratorException")
                    ) =>
                {
                    let fresh = match &cursor.last_sequence {
                        Some(seq) => {
                            self.iterator(&id, ShardIteratorType::AfterSequenceNumber, Some(seq))
                                .await?
                        }
                        None => {
                            self.iterator(&id, ShardIteratorType::TrimHorizon, None)
                                .await?
                        }
                    };
                    tracing::debug!(shard = %id, "stream iterator renewed");
                    self.iterators.insert(
                        id,
                        ShardCursor {
                            iterator: fresh,
                            ..cursor
                        },
                    );
                    continue;
                }
                Err(e) => return Err(streams_err("GetRecords", e)),
            };
            let mut last_sequence = cursor.last_sequence;
            for r in out.records() {
                if let Some(seq) = r.dynamodb().and_then(|c| c.sequence_number()) {
                    last_sequence = Some(seq.to_string());
                }
                records.push(lambda_record(r, &self.stream_arn));
            }
            match out.next_shard_iterator() {
                Some(next) => {
                    self.iterators.insert(
                        id,
                        ShardCursor {
                            iterator: Some(next.to_string()),
                            last_sequence,
                        },
                    );
                }
                None => {
                    self.iterators.remove(&id);
                    self.closed.insert(id);
                }
            }
        }
        Ok(records)
    }

    /// Polls every `interval` until `shutdown` flips, delivering each non-empty batch to `deliver`
    /// the way an event source mapping with `ReportBatchItemFailures` does: records from the first
    /// reported failure on are delivered again, up to `max_retries` times, then dropped with a log.
    pub async fn run<F, Fut>(
        mut self,
        interval: Duration,
        max_retries: u32,
        mut shutdown: tokio::sync::watch::Receiver<bool>,
        deliver: F,
    ) where
        F: Fn(Event) -> Fut,
        Fut: Future<Output = Vec<String>>,
    {
        loop {
            if *shutdown.borrow() {
                return;
            }
            let polled = self.poll().await.map(|mut records| {
                records.retain(|r| self.passes(r));
                records
            });
            match polled {
                Ok(records) if !records.is_empty() => {
                    deliver_with_retries(&self.table, records, max_retries, &deliver).await
                }
                Ok(_) => {}
                Err(e) => tracing::warn!(table = %self.table, error = %e, "stream poll failed"),
            }
            tokio::select! {
                _ = tokio::time::sleep(interval) => {}
                _ = shutdown.changed() => {}
            }
        }
    }
}

async fn deliver_with_retries<F, Fut>(
    table: &str,
    mut records: Vec<Value>,
    max_retries: u32,
    deliver: &F,
) where
    F: Fn(Event) -> Fut,
    Fut: Future<Output = Vec<String>>,
{
    for attempt in 0..=max_retries {
        let event = match to_event(records.clone()) {
            Ok(e) => e,
            Err(e) => {
                tracing::error!(table, error = %e, "dropping a batch that does not parse");
                return;
            }
        };
        let failures = deliver(event).await;
        let Some(first) = records.iter().position(|r| {
            let seq = r["dynamodb"]["SequenceNumber"].as_str().unwrap_or_default();
            let id = r["eventID"].as_str().unwrap_or_default();
            failures.iter().any(|f| f == seq || f == id)
        }) else {
            return;
        };
        records.drain(..first);
        tracing::warn!(
            table,
            attempt,
            remaining = records.len(),
            "handler reported failures; redelivering"
        );
        tokio::time::sleep(Duration::from_millis(200)).await;
    }
    tracing::error!(
        table,
        dropped = records.len(),
        "giving up on records after retries"
    );
}

/// Wraps Lambda-shaped records into the typed event the handler takes.
pub fn to_event(records: Vec<Value>) -> Result<Event, BridgeError> {
    serde_json::from_value(json!({ "Records": records }))
        .map_err(|e| BridgeError::Shape(e.to_string()))
}

fn event_name(op: Option<&OperationType>) -> (&'static str, bool) {
    match op {
        Some(OperationType::Insert) => ("INSERT", false),
        Some(OperationType::Modify) => ("MODIFY", false),
        Some(OperationType::Remove) => ("REMOVE", false),
        // DynamoDB Local's TTL deletion ("UNKNOWN_TO_SDK_VERSION").
        _ => ("REMOVE", true),
    }
}

/// One stream record in the JSON shape Lambda delivers.
pub fn lambda_record(r: &Record, stream_arn: &str) -> Value {
    let (name, unknown_op) = event_name(r.event_name());
    let change = r.dynamodb();
    let image = |m: Option<&HashMap<String, AttributeValue>>| m.map(item_json);
    let old = change.and_then(|c| image(c.old_image()));
    let new = change.and_then(|c| image(c.new_image()));
    let mut dynamodb = Map::new();
    if let Some(c) = change {
        if let Some(t) = c.approximate_creation_date_time() {
            dynamodb.insert("ApproximateCreationDateTime".into(), json!(t.as_secs_f64()));
        }
        dynamodb.insert("Keys".into(), image(c.keys()).unwrap_or_else(|| json!({})));
        if let Some(n) = &new {
            dynamodb.insert("NewImage".into(), n.clone());
        }
        if let Some(o) = &old {
            dynamodb.insert("OldImage".into(), o.clone());
        }
        if let Some(s) = c.sequence_number() {
            dynamodb.insert("SequenceNumber".into(), json!(s));
        }
        dynamodb.insert("SizeBytes".into(), json!(c.size_bytes().unwrap_or(0)));
        if let Some(v) = c.stream_view_type() {
            dynamodb.insert("StreamViewType".into(), json!(v.as_str()));
        }
    }
    let mut rec = json!({
        "eventID": r.event_id().unwrap_or_default(),
        "eventName": name,
        "eventVersion": r.event_version().unwrap_or("1.1"),
        "eventSource": "aws:dynamodb",
        "awsRegion": r.aws_region().unwrap_or("ddblocal"),
        "eventSourceARN": stream_arn,
        "dynamodb": Value::Object(dynamodb),
    });
    let ttl_deletion = unknown_op && old.is_some() && new.is_none();
    if let Some(u) = r.user_identity() {
        rec["userIdentity"] = json!({"type": u.r#type().unwrap_or_default(), "principalId": u.principal_id().unwrap_or_default()});
    } else if ttl_deletion {
        rec["userIdentity"] = json!({"type": "Service", "principalId": "dynamodb.amazonaws.com"});
    }
    rec
}

fn item_json(m: &HashMap<String, AttributeValue>) -> Value {
    Value::Object(m.iter().map(|(k, v)| (k.clone(), attr_json(v))).collect())
}

/// DynamoDB JSON (`{"S": "x"}`, `{"SS": [...]}`, ...), as in Lambda's stream events.
fn attr_json(v: &AttributeValue) -> Value {
    use aws_smithy_types::base64::encode as b64;
    match v {
        AttributeValue::S(s) => json!({ "S": s }),
        AttributeValue::N(n) => json!({ "N": n }),
        AttributeValue::B(b) => json!({ "B": b64(b.as_ref()) }),
        AttributeValue::Ss(v) => json!({ "SS": v }),
        AttributeValue::Ns(v) => json!({ "NS": v }),
        AttributeValue::Bs(v) => {
            json!({ "BS": v.iter().map(|b| b64(b.as_ref())).collect::<Vec<_>>() })
        }
        AttributeValue::M(m) => json!({ "M": item_json(m) }),
        AttributeValue::L(l) => json!({ "L": l.iter().map(attr_json).collect::<Vec<_>>() }),
        AttributeValue::Null(_) => json!({ "NULL": true }),
        AttributeValue::Bool(b) => json!({ "BOOL": b }),
        _ => json!({ "NULL": true }),
    }
}
