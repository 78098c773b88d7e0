//! Tenant rows in the tenant table: get (1 GetItem), put (1 PutItem), list (Scan pages), delete.

use std::collections::HashMap;
use std::str::FromStr;

use aws_sdk_dynamodb::types::AttributeValue;

use super::{attr, Limits, Tenant, DEFAULT_MESSAGES_PER_MINUTE, DEFAULT_SESSION_TTL_SECS};
use crate::dynamo::{self, item, pages};
use crate::error::{Error, Result};
use crate::ids::TenantId;
use crate::Deps;

fn key(id: &TenantId) -> HashMap<String, AttributeValue> {
    HashMap::from([(
        attr::TENANT_ID.to_string(),
        AttributeValue::S(id.to_string()),
    )])
}

/// Reads a tenant row into a [`Tenant`]. The AWS WebSocket sample's four limits are required;
/// `sessionTTL` and `messagesPerMinute` default when absent, so rows with only those four work.
pub fn from_item(table: &str, it: &HashMap<String, AttributeValue>) -> Result<Tenant> {
    let id = item::strict_str(it, table, attr::TENANT_ID)?;
    let tenant_id = TenantId::parse(&id).map_err(|e| Error::MalformedItem {
        table: table.to_string(),
        reason: e.to_string(),
    })?;
    let req = |name: &str| item::strict_u64(it, table, name);
    let opt = |name: &str, dflt: u64| -> Result<u64> {
        Ok(item::strict_opt_u64(it, table, name)?.unwrap_or(dflt))
    };
    let mut tenant = Tenant {
        tenant_id,
        limits: Limits {
            connections_per_session: req(attr::CONNECTIONS_PER_SESSION)?,
            tenant_connections: req(attr::TENANT_CONNECTIONS)?,
            session_per_minute: req(attr::SESSION_PER_MINUTE)?,
            tenant_per_minute: req(attr::TENANT_PER_MINUTE)?,
            session_ttl: opt(attr::SESSION_TTL, DEFAULT_SESSION_TTL_SECS)?,
            messages_per_minute: opt(attr::MESSAGES_PER_MINUTE, DEFAULT_MESSAGES_PER_MINUTE)?,
            rate_algorithm: named(table, it, attr::RATE_ALGORITHM)?,
            enforcement: named(table, it, attr::ENFORCEMENT)?,
            on_failure: named(table, it, attr::ON_FAILURE)?,
            connection_shards: opt(attr::CONNECTION_SHARDS, 1)?,
            connect_auth: named(table, it, attr::CONNECT_AUTH)?,
            max_sessions: opt(attr::MAX_SESSIONS, super::DEFAULT_MAX_SESSIONS)?,
            max_sessions_per_subject: opt(
                attr::MAX_SESSIONS_PER_SUBJECT,
                super::DEFAULT_MAX_SESSIONS_PER_SUBJECT,
            )?,
            ticket_in_query: flag(table, it, attr::TICKET_IN_QUERY)?,
        },
    };
    // A row written before the ceiling was lowered (decision 2207: 10,000 → 4,000) keeps serving
    // at the ceiling rather than becoming unreadable: no session can hold more in one item anyway.
    // Writes above it are still refused (`check_shards` in the CLI and the session API).
    let ceiling = super::MAX_CONNECTIONS_PER_SESSION;
    if tenant.limits.connections_per_session > ceiling {
        tracing::warn!(
            tenant = %tenant.tenant_id,
            stored = tenant.limits.connections_per_session,
            ceiling,
            "connectionsPerSession above the ceiling: served at the ceiling; lower it with `turnstile tenant put`"
        );
        tenant.limits.connections_per_session = ceiling;
    }
    tenant
        .limits
        .check_shards()
        .map_err(|reason| Error::MalformedItem {
            table: table.to_string(),
            reason,
        })?;
    Ok(tenant)
}

/// A named setting (`rateAlgorithm`, `enforcement`, `onFailure`, `connectAuth`): absent means its
/// default (rows written before the attribute existed: fixed, enforce, closed, and a connect
/// ticket — the secure choice, not the AWS sample's anonymous connect); an unknown
/// value makes the row malformed.
fn named<T: FromStr<Err = String> + Default>(
    table: &str,
    it: &HashMap<String, AttributeValue>,
    name: &str,
) -> Result<T> {
    match it.get(name) {
        None => Ok(T::default()),
        Some(AttributeValue::S(v)) => v.parse().map_err(|e: String| Error::MalformedItem {
            table: table.to_string(),
            reason: format!("{name}: {e}"),
        }),
        Some(other) => Err(Error::MalformedItem {
            table: table.to_string(),
            reason: format!("{name} is not a string: {other:?}"),
        }),
    }
}

/// A boolean setting (`ticketInQuery`): absent means no; anything but a boolean makes the row
/// malformed.
fn flag(table: &str, it: &HashMap<String, AttributeValue>, name: &str) -> Result<bool> {
    match it.get(name) {
        None => Ok(false),
        Some(AttributeValue::Bool(b)) => Ok(*b),
        Some(other) => Err(Error::MalformedItem {
            table: table.to_string(),
            reason: format!("{name} is not a boolean: {other:?}"),
        }),
    }
}

/// 1 GetItem (strongly consistent, so a tenant just created by the CLI is seen at once).
pub async fn get(deps: &Deps, id: &TenantId) -> Result<Option<Tenant>> {
    let table = &deps.tables.tenants;
    let item = dynamo::get_consistent(&deps.dynamo, table, key(id)).await?;
    item.map(|it| from_item(table, &it)).transpose()
}

/// 1 PutItem: creates or replaces the tenant row.
pub async fn put(deps: &Deps, tenant: &Tenant) -> Result<()> {
    tenant
        .limits
        .check_shards()
        .map_err(Error::InvalidArgument)?;
    let mut it = key(&tenant.tenant_id);
    let l = &tenant.limits;
    let fields = l.fields().into_iter().chain([
        (attr::MAX_SESSIONS, l.max_sessions),
        (attr::MAX_SESSIONS_PER_SUBJECT, l.max_sessions_per_subject),
    ]);
    for (name, value) in fields {
        it.insert(name.to_string(), AttributeValue::N(value.to_string()));
    }
    it.insert(
        attr::TICKET_IN_QUERY.to_string(),
        AttributeValue::Bool(l.ticket_in_query),
    );
    let policies = l
        .policies()
        .into_iter()
        .chain([(attr::CONNECT_AUTH, l.connect_auth.as_str())]);
    for (name, value) in policies {
        it.insert(name.to_string(), AttributeValue::S(value.to_string()));
    }
    if let Some(shards) = l.spread_shards() {
        it.insert(
            attr::CONNECTION_SHARDS.to_string(),
            AttributeValue::N(shards.to_string()),
        );
    }
    dynamo::put(&deps.dynamo, &deps.tables.tenants, it).await
}

/// 1 DeleteItem; true when a row was deleted.
pub async fn delete(deps: &Deps, id: &TenantId) -> Result<bool> {
    let out = deps
        .dynamo
        .delete_item()
        .table_name(&deps.tables.tenants)
        .set_key(Some(key(id)))
        .return_values(aws_sdk_dynamodb::types::ReturnValue::AllOld)
        .send()
        .await
        .map_err(|e| Error::dynamo("DeleteItem", e))?;
    Ok(out.attributes().is_some())
}

/// Keys of the tenant table starting with this are not tenants (ids cannot hold it).
pub const RESERVED: char = '~';

/// Every tenant (Scan, one call per 1 MB page), sorted by id. Rows that do not parse are reported in
/// the second list rather than failing the whole listing.
pub async fn list(deps: &Deps) -> Result<(Vec<Tenant>, Vec<String>)> {
    let mut tenants = Vec::new();
    let mut bad = Vec::new();
    let scan = deps.dynamo.scan().table_name(&deps.tables.tenants);
    pages::scan(scan, |it| {
        // Items whose key starts with `~` (never a tenant id) are not tenants: the reconciler's
        // cursor (`reconcile::budget`).
        if let Some(AttributeValue::S(id)) = it.get(attr::TENANT_ID) {
            if id.starts_with(RESERVED) {
                return Ok(());
            }
        }
        match from_item(&deps.tables.tenants, it) {
            Ok(t) => tenants.push(t),
            Err(e) => bad.push(e.to_string()),
        }
        Ok(())
    })
    .await?;
    tenants.sort_by(|a, b| a.tenant_id.cmp(&b.tenant_id));
    Ok((tenants, bad))
}

#[cfg(test)]
mod tests {
    use super::*;

    fn row(per_session: u64) -> HashMap<String, AttributeValue> {
        let n = |v: u64| AttributeValue::N(v.to_string());
        HashMap::from([
            (
                attr::TENANT_ID.to_string(),
                AttributeValue::S("acme".into()),
            ),
            (attr::CONNECTIONS_PER_SESSION.to_string(), n(per_session)),
            (attr::TENANT_CONNECTIONS.to_string(), n(100)),
            (attr::SESSION_PER_MINUTE.to_string(), n(10)),
            (attr::TENANT_PER_MINUTE.to_string(), n(100)),
        ])
    }

    /// Decision 2207: a row stored under the old ceiling (10,000) is served at the new one, not
    /// refused as malformed (which would deny every connect of that tenant after an upgrade).
    #[test]
    fn a_row_above_the_ceiling_is_served_at_the_ceiling() {
        let t = from_item("tenants", &row(10_000)).unwrap();
        assert_eq!(
            t.limits.connections_per_session,
            super::super::MAX_CONNECTIONS_PER_SESSION
        );
        let t = from_item("tenants", &row(7)).unwrap();
        assert_eq!(t.limits.connections_per_session, 7);
    }
}
