//! `$default`: the per-session message counter, the TTL refresh and the read of the recipients, in
//! one conditional UpdateItem on the session item (no other row is touched).
//!
//! The counter is `msgMinute` (the minute it counts) and `msgCount`: every message of the minute on
//! a live session is counted and refreshes `sessionTTL`, refused ones included (every inbound
//! message refreshes the TTL, as in the AWS WebSocket sample). The write's `ALL_NEW` count decides:
//! the message is admitted when it is at most `messagesPerMinute`. Counts only grow within a
//! minute, so exactly the first `messagesPerMinute` messages of a minute are admitted, whatever the
//! concurrency, and a refusal never makes room for a later message (decision 0303).
//!
//! Whether this message opens a new minute or continues the stored one is guessed from the last
//! minute this process saw ([`MinuteHint`]); a wrong guess costs one more UpdateItem, decided from
//! the `ALL_OLD` image the failed condition returns (no read).
//!
//! Before counting, [`standing`] holds the sender against its tenant as the process's tenant cache
//! has it now (not the limits the authorizer captured at `$connect`): a deleted tenant, or a
//! `connectAuth` that no longer admits how the socket was admitted, ends the socket, and the
//! current limits count the message. The cache serves a row for `TURNSTILE_TENANT_CACHE_SECS`
//! (60 by default), so a change reaches every socket's next message within that time. A hit costs
//! no call; a miss 1 GetItem (strongly consistent).

use std::sync::atomic::{AtomicI64, Ordering};

use aws_sdk_dynamodb::error::SdkError;
use aws_sdk_dynamodb::operation::update_item::UpdateItemError;
use aws_sdk_dynamodb::types::{AttributeValue, ReturnValue, ReturnValuesOnConditionCheckFailure};

use super::{Limit, Request};
use crate::counter::window::MinuteWindow;
use crate::dynamo::item::{self, n, Item};
use crate::error::{Error, Result};
use crate::ids::TenantId;
use crate::refusal::Refusal;
use crate::session::{attr as session_attr, store as sstore};
use crate::tenant::{ConnectAuth, Limits, TenantCache};

/// Writes per message before giving up (the session's counter kept changing).
const ATTEMPTS: u32 = 3;

/// The last message minute this process saw, to guess which update to try first.
#[derive(Debug, Default)]
pub struct MinuteHint(AtomicI64);

impl MinuteHint {
    fn get(&self) -> i64 {
        self.0.load(Ordering::Relaxed)
    }
    fn set(&self, m: i64) {
        self.0.fetch_max(m, Ordering::Relaxed);
    }
}

/// What the tenant, as the cache has it now, says about a socket admitted earlier.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum Standing {
    /// The tenant's current limits count this message.
    Current(Limits),
    /// The tenant row is gone: the socket is closed.
    TenantGone,
    /// The tenant now asks `required` at `$connect`, which the way the socket was admitted
    /// (`admitted`, from the authorizer context) does not meet: the socket is closed.
    Revoked {
        admitted: ConnectAuth,
        required: ConnectAuth,
    },
}

/// The sender's [`Standing`]: 0 calls on a cache hit, 1 GetItem on a miss.
pub async fn standing(
    deps: &crate::Deps,
    tenants: &TenantCache,
    t: &TenantId,
    admitted: ConnectAuth,
) -> Result<Standing> {
    Ok(match tenants.get(deps, t).await? {
        None => Standing::TenantGone,
        Some(tenant) if !tenant.limits.connect_auth.admits(admitted) => Standing::Revoked {
            admitted,
            required: tenant.limits.connect_auth,
        },
        Some(tenant) => Standing::Current(tenant.limits),
    })
}

#[derive(Debug)]
pub enum MessageAdmission {
    /// Counted; the session's connections (the sender included) to deliver to.
    Admitted { connection_ids: Vec<String> },
    /// Over `messagesPerMinute`: the session's TTL was refreshed, the message is not delivered
    /// (unless the tenant is in shadow mode: then to `connection_ids`).
    Refused {
        refusal: Refusal,
        connection_ids: Vec<String>,
    },
    /// The session is gone or expired, or this connection is no longer in it: close the sender.
    NoSession,
}

#[derive(Clone, Copy, Debug, PartialEq)]
enum Case {
    /// The stored counter is for `m`: increment it.
    SameMinute(i64),
    /// The stored counter is older (or absent): start `m` at 1.
    NewMinute(i64),
}

/// Counts one message from `cid` on the session and refreshes its TTL, admitted or not. 1
/// UpdateItem when the minute guess is right, 2 when it is wrong.
pub async fn count(r: Request<'_>, hint: &MinuteHint) -> Result<MessageAdmission> {
    let (deps, t, sid, cid, limits) = (r.deps, r.t, r.sid, r.cid, r.limits);
    let now = deps.clock.now();
    let m = MinuteWindow::at(now).start;
    let mut case = if hint.get() == m {
        Case::SameMinute(m)
    } else {
        Case::NewMinute(m)
    };
    // Two guesses at most; a third only if the minute changed in between (another writer).
    for _ in 0..ATTEMPTS {
        match attempt(r, case).await? {
            Ok(new) => {
                hint.set(match case {
                    Case::SameMinute(x) | Case::NewMinute(x) => x,
                });
                let counted = item::num(&new, session_attr::MSG_COUNT).unwrap_or(i64::MAX);
                let over =
                    crate::mutation::active(r.deps, crate::mutation::Mutation::MessageOffByOne);
                let cap = limits.messages_per_minute + u64::from(over);
                if counted > i64::try_from(cap).unwrap_or(i64::MAX) {
                    let who = format!("session {sid} of tenant {t}");
                    return Ok(MessageAdmission::Refused {
                        refusal: Limit::MessagesPerMinute.refusal(limits, now, &who),
                        connection_ids: item::string_set(&new, session_attr::CONNECTION_IDS),
                    });
                }
                return Ok(MessageAdmission::Admitted {
                    connection_ids: item::string_set(&new, session_attr::CONNECTION_IDS),
                });
            }
            Err(old) => {
                let Some(old) = old else {
                    return Ok(MessageAdmission::NoSession);
                };
                let ttl = item::num(&old, session_attr::SESSION_TTL).unwrap_or(0);
                let member = item::string_set(&old, session_attr::CONNECTION_IDS)
                    .iter()
                    .any(|c| c == cid.as_str());
                if ttl <= now.as_secs() || !member {
                    return Ok(MessageAdmission::NoSession);
                }
                case = match item::num(&old, session_attr::MSG_MINUTE) {
                    Some(sm) if sm >= m => {
                        hint.set(sm);
                        Case::SameMinute(sm)
                    }
                    _ => Case::NewMinute(m),
                };
            }
        }
    }
    Err(Error::contended(
        format!(
            "counting a message on {t}/#{}",
            crate::ticket::fingerprint(sid.as_str())
        ),
        ATTEMPTS,
    ))
}

/// One UpdateItem that counts the message and refreshes the TTL. `Ok(new image)` when written;
/// `Err(old image)` when the condition failed (session gone, expired, sender not in it, or the
/// minute guess wrong).
async fn attempt(r: Request<'_>, case: Case) -> Result<std::result::Result<Item, Option<Item>>> {
    let (deps, t, sid, cid, limits) = (r.deps, r.t, r.sid, r.cid, r.limits);
    let now = deps.clock.now().as_secs();
    let ttl = now.saturating_add(i64::try_from(limits.session_ttl).unwrap_or(i64::MAX / 2));
    let live = "#ttl > :now AND contains(#ids, :cid)";
    let mut req = deps
        .dynamo
        .update_item()
        .table_name(&deps.tables.sessions)
        .set_key(Some(sstore::key(t, sid)))
        .expression_attribute_names("#ttl", session_attr::SESSION_TTL)
        .expression_attribute_names("#ids", session_attr::CONNECTION_IDS)
        .expression_attribute_names("#m", session_attr::MSG_MINUTE)
        .expression_attribute_names("#n", session_attr::MSG_COUNT)
        .expression_attribute_values(":now", n(now))
        .expression_attribute_values(":ttl", n(ttl))
        .expression_attribute_values(":cid", AttributeValue::S(cid.to_string()))
        .expression_attribute_values(":one", n(1))
        .return_values(ReturnValue::AllNew)
        .return_values_on_condition_check_failure(ReturnValuesOnConditionCheckFailure::AllOld);
    req = match case {
        Case::SameMinute(m) => req
            .update_expression("SET #n = #n + :one, #ttl = :ttl")
            .condition_expression(format!("{live} AND #m = :m"))
            .expression_attribute_values(":m", n(m)),
        Case::NewMinute(m) => req
            .update_expression("SET #m = :m, #n = :one, #ttl = :ttl")
            .condition_expression(format!("{live} AND (attribute_not_exists(#m) OR #m < :m)"))
            .expression_attribute_values(":m", n(m)),
    };
    match req.send().await {
        Ok(out) => Ok(Ok(out.attributes().cloned().unwrap_or_default())),
        Err(SdkError::ServiceError(se)) => match se.err() {
            UpdateItemError::ConditionalCheckFailedException(e) => {
                Ok(Err(e.item().filter(|i| !i.is_empty()).cloned()))
            }
            _ => Err(Error::dynamo("UpdateItem", SdkError::ServiceError(se))),
        },
        Err(e) => Err(Error::dynamo("UpdateItem", e)),
    }
}
