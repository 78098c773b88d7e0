//! The one definition of every Turnstile table, assembled from the concepts' own descriptions
//! (`tenant::table`, `session::table`, ...), and creating them. Code, tests, the CLI (`turnstile
//! tables create`) and the `template.yaml` check all read it from here. It sits above the concepts;
//! the types it assembles ([`crate::table`]) sit below them.

use std::time::Duration;

use aws_sdk_dynamodb::error::ProvideErrorMetadata;
use aws_sdk_dynamodb::types::{
    AttributeDefinition, BillingMode, GlobalSecondaryIndex, KeySchemaElement, KeyType, Projection,
    ProjectionType, ScalarAttributeType, StreamSpecification, StreamViewType, TableStatus,
    TimeToLiveSpecification,
};
use aws_sdk_dynamodb::Client;
use serde::Serialize;

use crate::error::{Error, Result};
use crate::table::{AttrType, AttributeStyle, KeyAttr, TableDef, TableKind, TableNames};
use crate::{counter, kv, limit, reservation, session, tenant, token};

/// Every table's definition under the given names and attribute style.
pub fn catalog(names: &TableNames, style: AttributeStyle) -> Vec<TableDef> {
    TableKind::ALL
        .iter()
        .map(|k| definition(*k, names, style))
        .collect()
}

pub fn definition(kind: TableKind, names: &TableNames, style: AttributeStyle) -> TableDef {
    match kind {
        TableKind::Tenants => tenant::table(&names.tenants),
        TableKind::Sessions => session::table(&names.sessions),
        TableKind::Counters => counter::table(&names.counters),
        TableKind::Buckets => kv::table(&names.buckets),
        TableKind::FungibleTokens => token::table(&names.fungible_tokens, style),
        TableKind::Limits => limit::table(&names.limits, &names.limit_service_index, style),
        TableKind::NonFungibleTokens => {
            reservation::table(&names.non_fungible_tokens, &names.resource_index, style)
        }
    }
}

/// What [`ensure`] did.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize)]
#[serde(rename_all = "lowercase")]
pub enum Ensured {
    Created,
    Existed,
}

fn sdk_build<T, E: std::fmt::Display>(r: std::result::Result<T, E>) -> Result<T> {
    r.map_err(|e| Error::build_request("a table request", e))
}

fn key_element(attr: &KeyAttr, key_type: KeyType) -> Result<KeySchemaElement> {
    sdk_build(
        KeySchemaElement::builder()
            .attribute_name(attr.name)
            .key_type(key_type)
            .build(),
    )
}

fn key_schema(pk: &KeyAttr, sk: Option<&KeyAttr>) -> Result<Vec<KeySchemaElement>> {
    let mut v = vec![key_element(pk, KeyType::Hash)?];
    if let Some(sk) = sk {
        v.push(key_element(sk, KeyType::Range)?);
    }
    Ok(v)
}

/// Creates the table if it does not exist, waits until it is active, and turns TTL on. Safe to run
/// any number of times, including concurrently.
pub async fn ensure(client: &Client, def: &TableDef) -> Result<Ensured> {
    let mut attrs: Vec<&KeyAttr> = vec![&def.partition_key];
    attrs.extend(def.sort_key.iter());
    for ix in &def.indexes {
        attrs.push(&ix.partition_key);
        attrs.extend(ix.sort_key.iter());
    }
    let mut definitions = Vec::new();
    let mut seen = std::collections::HashSet::new();
    for a in attrs {
        if seen.insert(a.name) {
            let ty = match a.ty {
                AttrType::S => ScalarAttributeType::S,
                AttrType::N => ScalarAttributeType::N,
            };
            definitions.push(sdk_build(
                AttributeDefinition::builder()
                    .attribute_name(a.name)
                    .attribute_type(ty)
                    .build(),
            )?);
        }
    }
    let mut req = client
        .create_table()
        .table_name(&def.name)
        .billing_mode(BillingMode::PayPerRequest)
        .set_attribute_definitions(Some(definitions))
        .set_key_schema(Some(key_schema(&def.partition_key, def.sort_key.as_ref())?));
    for ix in &def.indexes {
        req = req.global_secondary_indexes(sdk_build(
            GlobalSecondaryIndex::builder()
                .index_name(&ix.name)
                .set_key_schema(Some(key_schema(&ix.partition_key, ix.sort_key.as_ref())?))
                .projection(
                    Projection::builder()
                        .projection_type(ProjectionType::All)
                        .build(),
                )
                .build(),
        )?);
    }
    if let Some(view) = def.stream {
        req = req.stream_specification(sdk_build(
            StreamSpecification::builder()
                .stream_enabled(true)
                .stream_view_type(StreamViewType::from(view))
                .build(),
        )?);
    }
    let ensured = match req.send().await {
        Ok(_) => Ensured::Created,
        Err(e) if e.code() == Some("ResourceInUseException") => Ensured::Existed,
        Err(e) => return Err(Error::dynamo("CreateTable", e)),
    };
    wait_active(client, &def.name).await?;
    if let Some(attr) = def.ttl_attribute {
        let spec = sdk_build(
            TimeToLiveSpecification::builder()
                .attribute_name(attr)
                .enabled(true)
                .build(),
        )?;
        match client
            .update_time_to_live()
            .table_name(&def.name)
            .time_to_live_specification(spec)
            .send()
            .await
        {
            Ok(_) => {}
            // Already enabled (a second `ensure`) is what we wanted.
            Err(e) if e.code() == Some("ValidationException") => {}
            Err(e) => return Err(Error::dynamo("UpdateTimeToLive", e)),
        }
    }
    Ok(ensured)
}

async fn wait_active(client: &Client, name: &str) -> Result<()> {
    for _ in 0..600 {
        let out = client
            .describe_table()
            .table_name(name)
            .send()
            .await
            .map_err(|e| Error::dynamo("DescribeTable", e))?;
        if out.table().and_then(|t| t.table_status()) == Some(&TableStatus::Active) {
            return Ok(());
        }
        tokio::time::sleep(Duration::from_millis(100)).await;
    }
    Err(Error::TimedOut {
        what: format!("table {name} becoming ACTIVE"),
        after: Duration::from_secs(60),
    })
}

/// Ensures every table in `defs`, in order.
pub async fn ensure_all(client: &Client, defs: &[TableDef]) -> Result<Vec<(String, Ensured)>> {
    let mut out = Vec::with_capacity(defs.len());
    for def in defs {
        out.push((def.name.clone(), ensure(client, def).await?));
    }
    Ok(out)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn catalog_follows_the_attribute_style() {
        let names = TableNames::default();
        let camel = definition(TableKind::FungibleTokens, &names, AttributeStyle::Camel);
        let snake = definition(TableKind::FungibleTokens, &names, AttributeStyle::Snake);
        assert_eq!(camel.partition_key.name, "resourceName");
        assert_eq!(snake.partition_key.name, "resource_name");
        let nf = definition(TableKind::NonFungibleTokens, &names, AttributeStyle::Camel);
        assert_eq!(nf.indexes[0].partition_key.name, "resourceId");
        let sessions = definition(TableKind::Sessions, &names, AttributeStyle::Camel);
        assert_eq!(sessions.ttl_attribute, Some("sessionTTL"));
        assert_eq!(sessions.stream, Some("NEW_AND_OLD_IMAGES"));
        assert_eq!(
            catalog(&names, AttributeStyle::Camel).len(),
            TableKind::ALL.len()
        );
    }
}
