//! Session rows: create-or-refresh, get and delete. The closing and releasing of connections that a
//! replace or delete implies lives in `crate::admission`.

use std::collections::HashMap;

use aws_sdk_dynamodb::error::SdkError;
use aws_sdk_dynamodb::operation::update_item::UpdateItemError;
use aws_sdk_dynamodb::types::{
    AttributeValue, Delete, Put, ReturnValue, ReturnValuesOnConditionCheckFailure,
    TransactWriteItem,
};

use super::{attr, Session};
use crate::dynamo;
use crate::dynamo::item::{self, n, s, Item};
use crate::error::{Error, Result};
use crate::ids::{SessionId, TenantId};
use crate::tenant::MAX_CONNECTION_SHARDS;
use crate::Deps;

/// The shard count a session (or its stream image) recorded: `connShards`, 1 when absent.
pub fn connection_shards(it: &Item) -> u64 {
    item::num(it, attr::CONNECTION_SHARDS)
        .and_then(|v| u64::try_from(v).ok())
        .map_or(1, |v| v.clamp(1, MAX_CONNECTION_SHARDS))
}

/// Where the connections of a session item (or its `ALL_OLD` image) were charged.
pub fn charges(it: &Item) -> super::Charges {
    super::Charges::from_attrs(it, |v| v.as_n().ok().and_then(|n| n.parse().ok()))
}

/// The session's key. Its leading (partition) key is the tenant id itself, taken from the validated
/// [`TenantId`], so it passes the key guard by construction (no format to get wrong; tested below).
pub fn key(t: &TenantId, sid: &SessionId) -> HashMap<String, AttributeValue> {
    HashMap::from([
        (attr::TENANT_ID.to_string(), s(t.as_str())),
        (attr::SESSION_ID.to_string(), s(sid.as_str())),
    ])
}

pub fn from_item(table: &str, it: &Item) -> Result<Session> {
    let mut connection_ids = item::string_set(it, attr::CONNECTION_IDS);
    connection_ids.sort();
    Ok(Session {
        tenant_id: item::strict_str(it, table, attr::TENANT_ID)?,
        session_id: item::strict_str(it, table, attr::SESSION_ID)?,
        session_ttl: item::strict_opt_i64(it, table, attr::SESSION_TTL)?.unwrap_or(0),
        connection_ids,
        charges: charges(it),
        nonce: item::lenient_opt_str(it, table, attr::SESSION_NONCE)?,
        owner: item::lenient_opt_str(it, table, attr::OWNER)?,
    })
}

/// What [`refresh`] found.
#[derive(Debug)]
pub enum Refresh {
    /// The session was live; its TTL is now the new one.
    Live(Session),
    /// No such row: creating one is the caller's (counted) job.
    Missing,
    /// A stored session had expired without DynamoDB deleting it yet (the row as it was).
    Expired(Session),
    /// The row is another user's (live or expired): nothing was written; the caller answers as
    /// for a missing session.
    NotYours,
}

/// A fresh `sessionNonce` (128 random bits).
pub fn new_nonce() -> Result<String> {
    crate::ticket::random_token(16).map_err(|e| Error::Other(e.to_string()))
}

/// Refreshes a live session's TTL to `ttl` (epoch seconds), keeping its `sessionNonce` (or giving
/// it one, for rows from before tickets). Never creates a row: a missing one is created with the
/// tenant's session count (`admission::sessions`). `own`: only a session this user owns is
/// refreshed (another's answers [`Refresh::NotYours`]). 1 UpdateItem.
pub async fn refresh(
    deps: &Deps,
    t: &TenantId,
    sid: &SessionId,
    ttl: i64,
    own: Option<&str>,
) -> Result<Refresh> {
    let now = deps.clock.now().as_secs();
    let table = &deps.tables.sessions;
    let mut req = deps.dynamo.update_item();
    let mut cond = "attribute_exists(#sid) AND #ttl > :now".to_string();
    if let Some(o) = own {
        cond.push_str(" AND #owner = :owner");
        req = req
            .expression_attribute_names("#owner", attr::OWNER)
            .expression_attribute_values(":owner", s(o));
    }
    let res = req
        .table_name(table)
        .set_key(Some(key(t, sid)))
        .update_expression("SET #ttl = :ttl, #nonce = if_not_exists(#nonce, :nonce)")
        .condition_expression(cond)
        .expression_attribute_names("#ttl", attr::SESSION_TTL)
        .expression_attribute_names("#sid", attr::SESSION_ID)
        .expression_attribute_names("#nonce", attr::SESSION_NONCE)
        .expression_attribute_values(":ttl", n(ttl))
        .expression_attribute_values(":nonce", s(new_nonce()?))
        .expression_attribute_values(":now", n(now))
        .return_values(ReturnValue::AllNew)
        .return_values_on_condition_check_failure(ReturnValuesOnConditionCheckFailure::AllOld)
        .send()
        .await;
    match res {
        Ok(out) => {
            let it = out.attributes().cloned().unwrap_or_default();
            Ok(Refresh::Live(from_item(table, &it)?))
        }
        Err(SdkError::ServiceError(se)) => match se.err() {
            UpdateItemError::ConditionalCheckFailedException(e) => {
                match e.item().filter(|i| !i.is_empty()) {
                    None => Ok(Refresh::Missing),
                    Some(old) => {
                        let row = from_item(table, old)?;
                        Ok(if row.reached_by(own) {
                            Refresh::Expired(row)
                        } else {
                            Refresh::NotYours
                        })
                    }
                }
            }
            _ => Err(Error::dynamo("UpdateItem", SdkError::ServiceError(se))),
        },
        Err(e) => Err(Error::dynamo("UpdateItem", e)),
    }
}

/// A new, empty session row (the item a create puts), owned by `owner` when a user created it.
pub fn new_row(t: &TenantId, sid: &SessionId, ttl: i64, nonce: &str, owner: Option<&str>) -> Item {
    let mut it = key(t, sid);
    it.insert(attr::SESSION_TTL.to_string(), n(ttl));
    it.insert(attr::SESSION_NONCE.to_string(), s(nonce));
    if let Some(o) = owner {
        it.insert(attr::OWNER.to_string(), s(o));
    }
    it
}

/// The session a create or a replace wrote.
pub fn fresh(
    t: &TenantId,
    sid: &SessionId,
    ttl: i64,
    nonce: String,
    owner: Option<String>,
) -> Session {
    Session {
        tenant_id: t.to_string(),
        session_id: sid.to_string(),
        session_ttl: ttl,
        connection_ids: vec![],
        charges: Default::default(),
        nonce: Some(nonce),
        owner,
    }
}

/// The condition that the row still holds exactly the connections of `seen`, the image the
/// caller will release from: `(expression, names, values)`. `connectionIds` is compared (a
/// joining or leaving connection changes it; `$default`'s message counter on the same row does
/// not), and each id's `chg:{cid}` is written with the id, so the image's charges hold too; and
/// the owner, whose session count a deletion gives back.
fn holds_connections_of(seen: &Session) -> (String, HashMap<String, String>, Item) {
    let names = HashMap::from([
        ("#sid".to_string(), attr::SESSION_ID.to_string()),
        ("#ids".to_string(), attr::CONNECTION_IDS.to_string()),
        ("#owner".to_string(), attr::OWNER.to_string()),
    ]);
    let mut values = Item::new();
    // The owner too: a row deleted and created again by another user meanwhile is not `seen`
    // (its owner's session count is what a deletion gives back).
    let owner = match &seen.owner {
        Some(o) => {
            values.insert(":owner".to_string(), s(o));
            "#owner = :owner"
        }
        None => "attribute_not_exists(#owner)",
    };
    if seen.connection_ids.is_empty() {
        // DynamoDB keeps no empty set: the last id leaving removes the attribute.
        let cond = format!("attribute_exists(#sid) AND attribute_not_exists(#ids) AND {owner}");
        return (cond, names, values);
    }
    values.insert(
        ":ids".to_string(),
        AttributeValue::Ss(seen.connection_ids.clone()),
    );
    (
        format!("attribute_exists(#sid) AND #ids = :ids AND {owner}"),
        names,
        values,
    )
}

/// The deletion of the row `seen` was read from, as the lead item of a release transaction
/// (`admission::release::exactly_once`): only while it holds exactly `seen`'s connections, so the
/// image is what left with it. A refusal returns the row as it is now (`ALL_OLD`).
pub fn delete_item(
    table: &str,
    t: &TenantId,
    sid: &SessionId,
    seen: &Session,
) -> Result<TransactWriteItem> {
    let (cond, names, values) = holds_connections_of(seen);
    let delete = Delete::builder()
        .table_name(table)
        .set_key(Some(key(t, sid)))
        .condition_expression(cond)
        .set_expression_attribute_names(Some(names))
        .set_expression_attribute_values((!values.is_empty()).then_some(values))
        .return_values_on_condition_check_failure(ReturnValuesOnConditionCheckFailure::AllOld)
        .build()
        .map_err(|e| Error::build_request("a session deletion", e))?;
    Ok(TransactWriteItem::builder().delete(delete).build())
}

/// The replacement of the expired row `stale` by `fresh` (a new row), as the lead item of a
/// release transaction: only while the row is still that expired one (same TTL, so a concurrent
/// refresh is never overwritten) holding exactly `stale`'s connections (so `stale` is what left
/// with it). A refusal returns the row as it is now.
pub fn replace_item(table: &str, fresh: Item, stale: &Session) -> Result<TransactWriteItem> {
    let (cond, mut names, mut values) = holds_connections_of(stale);
    names.insert("#ttl".into(), attr::SESSION_TTL.into());
    values.insert(":old".into(), n(stale.session_ttl));
    let put = Put::builder()
        .table_name(table)
        .set_item(Some(fresh))
        .condition_expression(format!("{cond} AND #ttl = :old"))
        .set_expression_attribute_names(Some(names))
        .set_expression_attribute_values(Some(values))
        .return_values_on_condition_check_failure(ReturnValuesOnConditionCheckFailure::AllOld)
        .build()
        .map_err(|e| Error::build_request("a session replacement", e))?;
    Ok(TransactWriteItem::builder().put(put).build())
}

/// 1 GetItem (strongly consistent). Returns the row whether or not it has expired.
pub async fn get(deps: &Deps, t: &TenantId, sid: &SessionId) -> Result<Option<Session>> {
    let table = &deps.tables.sessions;
    let item = dynamo::get_consistent(&deps.dynamo, table, key(t, sid)).await?;
    item.map(|it| from_item(table, &it)).transpose()
}

/// 1 DeleteItem returning the deleted row. Releases nothing and gives nothing back: what a TTL
/// deletion does to the row (tests). Session `DELETE` is `admission::closing::delete`.
pub async fn delete(deps: &Deps, t: &TenantId, sid: &SessionId) -> Result<Option<Session>> {
    let out = deps
        .dynamo
        .delete_item()
        .table_name(&deps.tables.sessions)
        .set_key(Some(key(t, sid)))
        .return_values(ReturnValue::AllOld)
        .send()
        .await
        .map_err(|e| Error::dynamo("DeleteItem", e))?;
    out.attributes()
        .map(|it| from_item(&deps.tables.sessions, it))
        .transpose()
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::isolation::check_key;

    #[test]
    fn the_recorded_shard_count_defaults_to_one_and_is_bounded() {
        let mut it = Item::new();
        assert_eq!(connection_shards(&it), 1);
        it.insert(attr::CONNECTION_SHARDS.into(), n(8));
        assert_eq!(connection_shards(&it), 8);
        it.insert(attr::CONNECTION_SHARDS.into(), n(100_000));
        assert_eq!(connection_shards(&it), MAX_CONNECTION_SHARDS);
    }

    #[test]
    fn the_session_key_leads_with_exactly_the_tenant() {
        for (t, sid) in [("ab", "s1"), ("a.b", "x"), ("abc", "ab"), ("t-1_x", "conn")] {
            let (t, sid) = (TenantId::parse(t).unwrap(), SessionId::parse(sid).unwrap());
            let k = key(&t, &sid);
            let lead = k[attr::TENANT_ID].as_s().unwrap();
            check_key(&t, lead).unwrap();
            assert_eq!(lead, t.as_str());
            assert_eq!(k[attr::SESSION_ID].as_s().unwrap(), sid.as_str());
        }
    }
}
