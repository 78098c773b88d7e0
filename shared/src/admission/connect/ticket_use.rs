//! A connect ticket's uses (decision 3607): a ticket admits at most its `connects` `$connect`s,
//! counted as the connection ids on `{tenant}:ticket:{ticketId}` (counters table), so whoever else
//! holds the ticket (a leaked URL, a log) cannot take the session's other slots with it.
//!
//! | write | item | update | condition |
//! |---|---|---|---|
//! | claim (before step 1) | `{tenant}:ticket:{id}` | `ADD cids {cid}`, `SET itemTTL` | absent, or `contains(cids, cid)`, or `size(cids) < connects` |
//! | give back (only when the connect was refused) | the same | `DELETE cids {cid}` | — |
//!
//! Both writes only add or remove the connection's own id, so they are the same however often
//! they apply: the SDK's retries are on, and API Gateway's repeated `$connect` of one connection
//! finds its id already there and passes. The item expires [`USES_OUTLIVE`] after the ticket
//! (whose authorizer refuses it from `expiresAt` + [`crate::ticket::LEEWAY_SECS`] on), so a count
//! is never forgotten while its ticket can still be presented. Costs: 1 `UpdateItem` (1 WCU) per
//! ticket-authenticated `$connect`; 1 more when the connect is refused and its use given back.

use std::time::Duration;

use aws_sdk_dynamodb::types::{AttributeValue, ReturnValue};

use crate::admission::write::{self, ConditionalUpdate, Retries, UpdateOutcome};
use crate::counter::{attr as counter_attr, keys};
use crate::dynamo::item::{n, s, Item};
use crate::error::{Error, Result};
use crate::ids::{ConnectionId, TenantId};
use crate::ticket::{valid_ticket_id, TicketUse, LEEWAY_SECS};
use crate::Deps;

/// The connection ids a ticket admitted (a string set on its counter item).
pub const CONNECTION_IDS: &str = "cids";
/// How long a ticket's count outlives the ticket's expiry.
pub const USES_OUTLIVE: Duration = Duration::from_secs(300);

fn key(t: &TenantId, ticket: &TicketUse) -> Result<Item> {
    if !valid_ticket_id(&ticket.id) {
        return Err(Error::Other(
            "the authorizer context's ticket id is not a ticket id".into(),
        ));
    }
    let key = keys::ticket_uses(t, &ticket.id)?;
    Ok(Item::from([(counter_attr::KEY.to_string(), s(key))]))
}

fn one(cid: &ConnectionId) -> AttributeValue {
    AttributeValue::Ss(vec![cid.to_string()])
}

/// Counts `cid` as a use of `ticket`: `true` when the ticket admits it (a use left, or `cid` is
/// already one of its uses), `false` when its `connects` are taken. 1 `UpdateItem`.
pub async fn claim(
    deps: &Deps,
    t: &TenantId,
    cid: &ConnectionId,
    ticket: &TicketUse,
) -> Result<bool> {
    let expires = ticket
        .expires_at
        .saturating_add(LEEWAY_SECS)
        .saturating_add(USES_OUTLIVE.as_secs() as i64);
    let mut p = ConditionalUpdate::default();
    p.name("#ids", CONNECTION_IDS)
        .name("#ttl", counter_attr::ITEM_TTL);
    p.value(":cidset", one(cid))
        .value(":cid", s(cid.as_str()))
        .value(":max", n(ticket.connects))
        .value(":ttl", n(expires));
    p.conditions
        .push("attribute_not_exists(#ids) OR contains(#ids, :cid) OR size(#ids) < :max".into());
    p.add.push("#ids :cidset".into());
    p.set.push("#ttl = :ttl".into());
    update_uses(deps, t, ticket, &p).await
}

/// Gives `cid`'s use of `ticket` back (its connect was refused, so the ticket may admit another).
/// 1 `UpdateItem`; refused (nothing to give back) when the count is gone.
pub async fn give_back(
    deps: &Deps,
    t: &TenantId,
    cid: &ConnectionId,
    ticket: &TicketUse,
) -> Result<()> {
    let mut p = ConditionalUpdate::default();
    p.name("#ids", CONNECTION_IDS);
    p.value(":cidset", one(cid));
    p.conditions.push("attribute_exists(#ids)".into());
    p.delete.push("#ids :cidset".into());
    update_uses(deps, t, ticket, &p).await?;
    Ok(())
}

/// Applies `p` to `ticket`'s uses: `true` when its condition held. 1 `UpdateItem`.
async fn update_uses(
    deps: &Deps,
    t: &TenantId,
    ticket: &TicketUse,
    p: &ConditionalUpdate,
) -> Result<bool> {
    let key = key(t, ticket)?;
    let written = write::update(
        deps,
        &deps.tables.counters,
        &key,
        p,
        ReturnValue::None,
        Retries::Sdk,
    )
    .await?;
    Ok(matches!(written, UpdateOutcome::Applied(_)))
}
