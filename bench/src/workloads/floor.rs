//! The floor: the cheapest possible DynamoDB admission, one bare conditional `UpdateItem` on one item
//! (`ADD n 1` if `n < limit`), issued directly through the SDK with no library code around it.
//! Every single-call Turnstile path is one such write plus its own logic, so its latency is the
//! yardstick ("p50 within 1.2 x the floor"); see docs/decisions/0802-the-floor.md.
//!
//! DynamoDB calls per decision: 1 (`UpdateItem`), asking for nothing extra (no
//! `ReturnConsumedCapacity`, no `ReturnValues`): the cheapest correct request for an admission. Its
//! write units come from the run's meter like every other workload's.

use std::sync::Arc;

use aws_sdk_dynamodb::error::ProvideErrorMetadata;
use aws_sdk_dynamodb::types::{
    AttributeDefinition, AttributeValue, BillingMode, KeySchemaElement, KeyType,
    ScalarAttributeType,
};
use aws_sdk_dynamodb::Client;
use futures::future::BoxFuture;

use crate::error::BenchError;
use crate::workload::{BenchCtx, Decision, Params, Workload};

pub struct Floor {
    client: Client,
    table: String,
    key: String,
    limit: String,
}

/// The floor's own table (`{prefix}floor`, partition key `pk`), created once per bench run.
pub async fn ensure_table(client: &Client, table: &str) -> Result<(), BenchError> {
    let build = |e: aws_sdk_dynamodb::error::BuildError| BenchError::Other(e.to_string());
    let res = client
        .create_table()
        .table_name(table)
        .billing_mode(BillingMode::PayPerRequest)
        .attribute_definitions(
            AttributeDefinition::builder()
                .attribute_name("pk")
                .attribute_type(ScalarAttributeType::S)
                .build()
                .map_err(build)?,
        )
        .key_schema(
            KeySchemaElement::builder()
                .attribute_name("pk")
                .key_type(KeyType::Hash)
                .build()
                .map_err(build)?,
        )
        .send()
        .await;
    match res {
        Ok(_) => Ok(()),
        Err(e) if e.code() == Some("ResourceInUseException") => Ok(()),
        Err(e) => Err(BenchError::dynamo("CreateTable", e)),
    }
}

pub async fn build(ctx: &BenchCtx, params: &Params) -> Result<Arc<dyn Workload>, BenchError> {
    let table = format!("{}floor", ctx.prefix);
    ensure_table(&ctx.client, &table).await?;
    Ok(Arc::new(Floor {
        client: ctx.client.clone(),
        table,
        key: params.key.clone(),
        limit: params.limit.to_string(),
    }))
}

impl Floor {
    async fn once(&self) -> Result<Decision, BenchError> {
        let res = self
            .client
            .update_item()
            .table_name(&self.table)
            .key("pk", AttributeValue::S(self.key.clone()))
            .update_expression("ADD n :one")
            .condition_expression("attribute_not_exists(n) OR n < :limit")
            .expression_attribute_values(":one", AttributeValue::N("1".into()))
            .expression_attribute_values(":limit", AttributeValue::N(self.limit.clone()))
            .send()
            .await;
        match res {
            Ok(_) => Ok(Decision::admitted(None)),
            Err(e) => {
                let refused = e
                    .as_service_error()
                    .is_some_and(|s| s.is_conditional_check_failed_exception());
                if refused {
                    Ok(Decision::refused(None))
                } else {
                    Err(BenchError::dynamo("UpdateItem", e))
                }
            }
        }
    }
}

impl Workload for Floor {
    fn decide(&self, _worker: usize, _seq: u64) -> BoxFuture<'_, Result<Decision, BenchError>> {
        Box::pin(self.once())
    }
}
