//! Finishing what session `DELETE`s left (decision 2208). An ended row still holding sockets keeps
//! them counted; those still open (the `DELETE` stopped before closing them, or its close failed)
//! are closed here in phase 1, so their `$disconnect` — or a later run's probes — releases them. An
//! ended row holding no connection any more is deleted in phase 3 (its session unit was given back
//! when it was ended). Costs: 1 DeleteConnection per open socket of an ended row, 1 DeleteItem per
//! empty ended row.

use aws_sdk_dynamodb::error::SdkError;
use aws_sdk_dynamodb::operation::delete_item::DeleteItemError;

use super::Probe;
use crate::error::{Error, Result};
use crate::gateway::Delivery;
use crate::ids::{SessionId, TenantId};
use crate::session::{attr as session_attr, store as sstore};
use crate::Deps;

/// Closes `open` (`(session, connection)` of ended rows, not found gone); how many closes
/// answered 2xx.
pub(super) async fn close_open(probe: &Probe<'_>, open: &[(String, String)]) -> u64 {
    let ids: Vec<String> = open.iter().map(|(_, c)| c.clone()).collect();
    let closed = probe.gateway.close_each(&probe.endpoint, &ids).await;
    closed
        .into_iter()
        .filter(|(c, r)| match r {
            Ok(Delivery::Delivered) => true,
            Ok(Delivery::Gone) => false,
            Err(e) => {
                tracing::warn!(connection = %c, error = %e, "closing an ended session's socket failed");
                false
            }
        })
        .count() as u64
}

/// Deletes each ended row of `sids` that still holds no connection (1 DeleteItem each, refused
/// when a row holds one again or is no longer ended); how many were deleted.
pub(super) async fn delete_empty(deps: &Deps, t: &TenantId, sids: &[String]) -> Result<u64> {
    let mut deleted = 0;
    for raw in sids {
        let Ok(sid) = SessionId::parse(raw) else {
            continue;
        };
        let out = deps
            .dynamo
            .delete_item()
            .table_name(&deps.tables.sessions)
            .set_key(Some(sstore::key(t, &sid)))
            .condition_expression("attribute_exists(#end) AND attribute_not_exists(#ids)")
            .expression_attribute_names("#end", session_attr::ENDED_BY)
            .expression_attribute_names("#ids", session_attr::CONNECTION_IDS)
            .send()
            .await;
        match out {
            Ok(_) => deleted += 1,
            Err(SdkError::ServiceError(se))
                if matches!(
                    se.err(),
                    DeleteItemError::ConditionalCheckFailedException(_)
                ) => {}
            Err(e) => return Err(Error::dynamo("DeleteItem", e)),
        }
    }
    Ok(deleted)
}
