//! The truth of a tenant: its session rows, read whole (one strongly consistent Query, every
//! page). Every row's connection ids count, ended rows' included: a socket stays counted in its
//! row until it is known gone (decision 2208). Rows a session `DELETE` ended are not sessions any
//! more (their unit was given back with the end).

use std::collections::{BTreeMap, BTreeSet};

use aws_sdk_dynamodb::types::AttributeValue;

use crate::dynamo::item::{self, s};
use crate::dynamo::pages;
use crate::error::Result;
use crate::ids::TenantId;
use crate::session::attr as session_attr;
use crate::Deps;

/// A tenant's session rows as the truth reads them.
#[derive(Debug, Default)]
pub(super) struct Rows {
    /// Session id → its connection ids, ended rows' included: a socket stays counted in its row
    /// until it is known gone (decision 2208).
    pub ids: BTreeMap<String, Vec<String>>,
    /// Rows a session `DELETE` ended (their session unit given back): not sessions any more.
    pub ended: BTreeSet<String>,
}

impl Rows {
    /// The sessions the tenant's session count holds.
    pub fn sessions(&self) -> u64 {
        (self.ids.len() - self.ended.len()) as u64
    }

    /// Ended rows holding no connection any more: nothing left to count, to be deleted.
    pub fn ended_empty(&self) -> Vec<String> {
        self.ended
            .iter()
            .filter(|sid| self.ids.get(*sid).is_none_or(Vec::is_empty))
            .cloned()
            .collect()
    }

    /// `(session, connection)` of every connection of an ended row.
    pub fn of_ended(&self) -> Vec<(String, String)> {
        self.ended
            .iter()
            .flat_map(|sid| {
                let ids = self.ids.get(sid).cloned().unwrap_or_default();
                ids.into_iter().map(move |c| (sid.clone(), c))
            })
            .collect()
    }
}

/// The tenant's session rows (strongly consistent Query, every page). A resharded tenant
/// (`each`) is read whole (each id's `chg:{cid}`) and counted per counter.
pub(super) async fn sessions(
    deps: &Deps,
    t: &TenantId,
    n: u64,
    mut each: Option<&mut crate::reconcile::shards::PerCounter>,
    fenced: bool,
) -> Result<Rows> {
    let mut query = deps
        .dynamo
        .query()
        .table_name(&deps.tables.sessions)
        .key_condition_expression("#t = :t")
        .expression_attribute_names("#t", session_attr::TENANT_ID)
        .expression_attribute_names("#s", session_attr::SESSION_ID)
        .expression_attribute_names("#ids", session_attr::CONNECTION_IDS)
        .expression_attribute_names("#nsh", session_attr::CONNECTION_SHARDS)
        .expression_attribute_names("#end", session_attr::ENDED_BY)
        .expression_attribute_values(":t", s(t.as_str()))
        .projection_expression("#s, #ids, #nsh, #end")
        .consistent_read(true);
    if fenced {
        query = query
            .set_projection_expression(None)
            .set_expression_attribute_names(Some(
                [("#t".to_string(), session_attr::TENANT_ID.to_string())].into(),
            ));
    }
    let mut out = Rows::default();
    pages::query(query, |it| {
        if !fenced {
            crate::reconcile::shards::same_layout(it, n)?;
        }
        if let Some(AttributeValue::S(sid)) = it.get(session_attr::SESSION_ID) {
            let ids = item::string_set(it, session_attr::CONNECTION_IDS);
            if let Some(e) = each.as_deref_mut() {
                e.count_truth(t, &ids, &crate::session::store::charges(it))?;
            }
            if it.contains_key(session_attr::ENDED_BY) {
                out.ended.insert(sid.clone());
            }
            out.ids.insert(sid.clone(), ids);
        }
        Ok(())
    })
    .await?;
    Ok(out)
}

pub(super) fn truth_of(sessions: &BTreeMap<String, Vec<String>>) -> u64 {
    sessions.values().flatten().collect::<BTreeSet<_>>().len() as u64
}
