//! Primes a fresh DynamoDB Local the same way before every measured unit (decision 0800): a fixed
//! number of requests of every kind a measured path makes (`PutItem`, conditional `UpdateItem`,
//! `GetItem`, `Query`, `BatchGetItem`, `TransactWriteItems`) on one scratch table, from an uncounted
//! client. The emulator's JIT is then warm for whichever implementation comes next, and every unit
//! finds the same state: an empty emulator plus this one small table.

use aws_sdk_dynamodb::error::SdkError;
use aws_sdk_dynamodb::types::{AttributeValue, KeysAndAttributes, Put, TransactWriteItem, Update};
use aws_sdk_dynamodb::Client;

use crate::error::BenchError;
use crate::workloads::floor;

/// The scratch table (partition key `pk`).
pub const TABLE: &str = "prime-emulator";
/// Keys the requests cycle over.
const KEYS: u64 = 16;
/// Concurrent tasks priming.
const TASKS: u64 = 4;

fn key(i: u64) -> AttributeValue {
    AttributeValue::S(format!("k{}", i % KEYS))
}

/// A request's answer, where a refusal `also_primes` accepts (a failed condition, a cancelled
/// transaction) primed the emulator as well as a success.
fn primed<O, E, R>(
    operation: &'static str,
    res: Result<O, SdkError<E, R>>,
    also_primes: impl FnOnce(&E) -> bool,
) -> Result<(), BenchError>
where
    E: std::error::Error + 'static,
    R: std::fmt::Debug + 'static,
{
    let Err(e) = res else {
        return Ok(());
    };
    if e.as_service_error().is_some_and(also_primes) {
        Ok(())
    } else {
        Err(BenchError::dynamo(operation, e))
    }
}

async fn one(client: &Client, i: u64) -> Result<(), BenchError> {
    let build = |e: aws_sdk_dynamodb::error::BuildError| BenchError::Other(e.to_string());
    match i % 6 {
        0 => {
            client
                .put_item()
                .table_name(TABLE)
                .item("pk", key(i))
                .item("n", AttributeValue::N("0".into()))
                .send()
                .await
                .map_err(|e| BenchError::dynamo("PutItem", e))?;
        }
        1 => {
            let res = client
                .update_item()
                .table_name(TABLE)
                .key("pk", key(i))
                .update_expression("ADD n :one")
                .condition_expression("attribute_not_exists(n) OR n < :limit")
                .expression_attribute_values(":one", AttributeValue::N("1".into()))
                .expression_attribute_values(":limit", AttributeValue::N("1000000".into()))
                .send()
                .await;
            primed("UpdateItem", res, |s| {
                s.is_conditional_check_failed_exception()
            })?;
        }
        2 => {
            client
                .get_item()
                .table_name(TABLE)
                .key("pk", key(i))
                .send()
                .await
                .map_err(|e| BenchError::dynamo("GetItem", e))?;
        }
        3 => {
            client
                .query()
                .table_name(TABLE)
                .key_condition_expression("pk = :p")
                .expression_attribute_values(":p", key(i))
                .send()
                .await
                .map_err(|e| BenchError::dynamo("Query", e))?;
        }
        4 => {
            let keys = KeysAndAttributes::builder()
                .keys([("pk".to_string(), key(i))].into())
                .keys([("pk".to_string(), key(i + 1))].into())
                .build()
                .map_err(build)?;
            client
                .batch_get_item()
                .request_items(TABLE, keys)
                .send()
                .await
                .map_err(|e| BenchError::dynamo("BatchGetItem", e))?;
        }
        _ => {
            // Two distinct items (a transaction may not touch one item twice).
            let put = Put::builder()
                .table_name(TABLE)
                .item("pk", AttributeValue::S(format!("t{}", i % KEYS)))
                .build()
                .map_err(build)?;
            let update = Update::builder()
                .table_name(TABLE)
                .key("pk", AttributeValue::S(format!("u{}", i % KEYS)))
                .update_expression("ADD n :one")
                .expression_attribute_values(":one", AttributeValue::N("1".into()))
                .build()
                .map_err(build)?;
            let res = client
                .transact_write_items()
                .transact_items(TransactWriteItem::builder().put(put).build())
                .transact_items(TransactWriteItem::builder().update(update).build())
                .send()
                .await;
            // Concurrent primers may collide on an item: a cancelled transaction primes as well.
            primed("TransactWriteItems", res, |s| {
                s.is_transaction_canceled_exception()
            })?;
        }
    }
    Ok(())
}

/// Sends `requests` priming requests from [`TASKS`] tasks on `client` (uncounted).
pub async fn prime(client: &Client, requests: u64) -> Result<(), BenchError> {
    floor::ensure_table(client, TABLE).await?;
    let tasks = (0..TASKS).map(|t| {
        let client = client.clone();
        async move {
            let mut i = t;
            while i < requests {
                one(&client, i).await?;
                i += TASKS;
            }
            Ok::<(), BenchError>(())
        }
    });
    futures::future::try_join_all(tasks).await?;
    Ok(())
}
