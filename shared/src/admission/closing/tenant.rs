//! `turnstile tenant delete`: the tenant row first — no process admits a new session or connection
//! for it once its tenant cache has seen that (`TURNSTILE_TENANT_CACHE_SECS`) — then every session
//! of the tenant ended as session `DELETE` ends one ([`super::delete`]), page by page, its sockets
//! closed through the Management API. A session created by a process still holding the row in its
//! cache after the sessions were paged is ended by running the delete again; its sockets are closed
//! by `$default` on their first message once that process's cache has expired.

use serde::Serialize;

use super::Sockets;
use crate::dynamo::item;
use crate::error::{Error, Result};
use crate::ids::{SessionId, TenantId};
use crate::session::attr as session_attr;
use crate::Deps;

/// Sessions read per page.
const PAGE: i32 = 100;

/// What ending a tenant did.
#[derive(Debug, Clone, Default, PartialEq, Eq, Serialize)]
#[serde(rename_all = "camelCase")]
pub struct TenantEnded {
    pub tenant_id: String,
    /// Whether the tenant row existed (and was deleted).
    pub deleted: bool,
    /// Sessions ended.
    pub sessions: u64,
    /// Sockets closed and released.
    pub closed: u64,
    /// Sockets not known gone yet: still counted in their ended sessions, released by their
    /// `$disconnect`, the reconciler or the sweep (`{session}: [connection ids]`).
    pub closing: std::collections::BTreeMap<String, Vec<String>>,
}

/// Whether the tenant holds any session row (1 Query of one item).
pub async fn has_sessions(deps: &Deps, t: &TenantId) -> Result<bool> {
    let out = query(deps, t)
        .limit(1)
        .send()
        .await
        .map_err(|e| Error::dynamo("Query", e))?;
    Ok(!out.items().is_empty())
}

/// Deletes the tenant row (1 DeleteItem), then ends each of its sessions (1 Query per page of
/// [`PAGE`], and per session what [`super::delete`] costs).
pub async fn end_tenant(deps: &Deps, t: &TenantId, sockets: &dyn Sockets) -> Result<TenantEnded> {
    let mut report = TenantEnded {
        tenant_id: t.to_string(),
        deleted: crate::tenant::store::delete(deps, t).await?,
        ..TenantEnded::default()
    };
    let mut pages = query(deps, t).limit(PAGE).into_paginator().send();
    while let Some(page) = pages.next().await {
        let page = page.map_err(|e| Error::dynamo("Query", e))?;
        for it in page.items() {
            let raw = item::strict_str(it, &deps.tables.sessions, session_attr::SESSION_ID)?;
            let sid = SessionId::parse(&raw)?;
            let Some(ended) = super::delete(deps, t, &sid, None, sockets).await? else {
                continue;
            };
            report.sessions += 1;
            report.closed += ended.closed.len() as u64;
            if !ended.closing.is_empty() {
                report.closing.insert(raw, ended.closing);
            }
        }
    }
    Ok(report)
}

/// The tenant's session rows, by id (strongly consistent).
fn query(
    deps: &Deps,
    t: &TenantId,
) -> aws_sdk_dynamodb::operation::query::builders::QueryFluentBuilder {
    deps.dynamo
        .query()
        .table_name(&deps.tables.sessions)
        .key_condition_expression("#t = :t")
        .expression_attribute_names("#t", session_attr::TENANT_ID)
        .expression_attribute_names("#s", session_attr::SESSION_ID)
        .expression_attribute_values(":t", item::s(t.as_str()))
        .projection_expression("#s")
        .consistent_read(true)
}
