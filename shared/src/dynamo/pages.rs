//! Paginated reads: a Query or Scan run page by page (one call per page, up to 1 MB each) until
//! DynamoDB returns no `LastEvaluatedKey`. Each item goes to `each` in order; the first error stops
//! the read (no further page is asked for).

use std::future::Future;

use aws_sdk_dynamodb::operation::query::builders::QueryFluentBuilder;
use aws_sdk_dynamodb::operation::scan::builders::ScanFluentBuilder;

use super::item::Item;
use crate::error::{Error, Result};

/// One page: its items and the key to start the next one from.
type Page = (Option<Vec<Item>>, Option<Item>);

/// Every item `query` matches.
pub async fn query(query: QueryFluentBuilder, each: impl FnMut(&Item) -> Result<()>) -> Result<()> {
    all(
        each,
        |start| {
            let page = query.clone().set_exclusive_start_key(start).send();
            async { page.await.map_err(|e| Error::dynamo("Query", e)) }
        },
        |out| (out.items, out.last_evaluated_key),
    )
    .await
}

/// Every item `scan` reads.
pub async fn scan(scan: ScanFluentBuilder, each: impl FnMut(&Item) -> Result<()>) -> Result<()> {
    all(
        each,
        |start| {
            let page = scan.clone().set_exclusive_start_key(start).send();
            async { page.await.map_err(|e| Error::dynamo("Scan", e)) }
        },
        |out| (out.items, out.last_evaluated_key),
    )
    .await
}

async fn all<O, F, Fut>(
    mut each: impl FnMut(&Item) -> Result<()>,
    mut fetch: F,
    page_of: impl Fn(O) -> Page,
) -> Result<()>
where
    F: FnMut(Option<Item>) -> Fut,
    Fut: Future<Output = Result<O>>,
{
    let mut start: Option<Item> = None;
    loop {
        let (items, next) = page_of(fetch(start.take()).await?);
        for item in items.iter().flatten() {
            each(item)?;
        }
        match next {
            Some(k) if !k.is_empty() => start = Some(k),
            _ => return Ok(()),
        }
    }
}
