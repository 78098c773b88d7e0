//! Paginated reads: a Query or Scan run page by page with the SDK's own paginator (one call per
//! page, up to 1 MB each, until DynamoDB returns no `LastEvaluatedKey`). Each item goes to `each`
//! in order; the first error stops the read (no further page is asked for).

use aws_sdk_dynamodb::operation::query::builders::QueryFluentBuilder;
use aws_sdk_dynamodb::operation::scan::builders::ScanFluentBuilder;

use super::item::Item;
use crate::error::{Error, Result};

/// Every item `query` matches.
pub async fn query(
    query: QueryFluentBuilder,
    mut each: impl FnMut(&Item) -> Result<()>,
) -> Result<()> {
    let mut items = query.into_paginator().items().send();
    while let Some(item) = items.next().await {
        each(&item.map_err(|e| Error::dynamo("Query", e))?)?;
    }
    Ok(())
}

/// Every item `scan` reads.
pub async fn scan(
    scan: ScanFluentBuilder,
    mut each: impl FnMut(&Item) -> Result<()>,
) -> Result<()> {
    let mut items = scan.into_paginator().items().send();
    while let Some(item) = items.next().await {
        each(&item.map_err(|e| Error::dynamo("Scan", e))?)?;
    }
    Ok(())
}
