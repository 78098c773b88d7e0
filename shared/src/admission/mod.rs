//! WebSocket admission: the conditional writes behind `$connect`, `$disconnect`,
//! `$default`, the session API and the TTL sweeper (the reconciler that repairs leaked counts is
//! `crate::reconcile`, above this module).
//! Every admission is a conditional update, or ordered conditional updates proven never to
//! over-admit; see `docs/decisions/0300-websocket-admission.md` and
//! `0306-connect-without-a-transaction.md`.
//!
//! Call budgets (DynamoDB round trips and write units, common path):
//! - [`precheck::check`] (authorizer): 1 BatchGetItem of 2 items.
//! - [`connect::admit`] (`$connect`): 2 UpdateItem, 2 WCU (1 more per wrong minute bet; a refusal
//!   by the session costs 3, by the tenant 1, by a zero limit 0); with a connect ticket 1 more
//!   for its use (and 1 more to give it back on a refusal).
//! - [`release::disconnect`] (`$disconnect`): 3 UpdateItem, 3 WCU (1 when nothing is released; decision 2206).
//! - [`message::count`] (`$default`): 1 UpdateItem, 1 WCU (2 when the cached minute guess is wrong),
//!   after [`message::standing`]: no call with the tenant cached, 1 GetItem on a cache miss.
//! - [`closing::delete`] (session `DELETE`): 1 GetItem + 1 TransactWriteItems without connections;
//!   with them 1 more for the end, then one per release attempt (decision 2208).
//! - Sharded tenants (`connectionShards` > 1, [`shards`], decision 1502): the same 2 writes when
//!   the random shard admits; 1 BatchGetItem of the shards and a write per shard tried otherwise.

pub mod closing;
pub mod connect;
pub mod message;
pub mod precheck;
pub mod release;
pub mod sessions;
pub mod shards;
pub mod verdict;
pub mod write;

use std::time::Duration;

use serde::Serialize;

use crate::counter::window::MinuteWindow;
use crate::refusal::{Policy, QuotaUnit, Refusal, Usage};
use crate::tenant::{attr as tenant_attr, Limits};

/// One WebSocket request as the authorizer context names it: the tenant, the session and the
/// connection, under the tenant's limits.
#[derive(Debug, Clone, Copy)]
pub struct Request<'a> {
    pub deps: &'a crate::Deps,
    pub t: &'a crate::ids::TenantId,
    pub sid: &'a crate::ids::SessionId,
    pub cid: &'a crate::ids::ConnectionId,
    pub limits: &'a Limits,
    /// The `sessionNonce` the connect ticket named (authorizer context): `$connect` joins only that
    /// incarnation of the session, so a ticket never joins a session deleted and re-created under
    /// the same id after the authorizer read it (decision 2100). `None`: any.
    pub nonce: Option<&'a str>,
    /// The connect ticket's id and how many connects it admits (authorizer context): `$connect`
    /// counts itself as one of its uses (decision 3607). `None`: no ticket.
    pub ticket: Option<&'a crate::ticket::TicketUse>,
}

/// How long a client refused for an open-connection cap is told to wait: the cap has no reset time
/// (it frees when someone disconnects), so this is only a polite pace for retries.
pub const OPEN_CONNECTION_RETRY: Duration = Duration::from_secs(10);

/// The WebSocket limits, named as the tenant row names them.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize)]
pub enum Limit {
    #[serde(rename = "tenantConnections")]
    TenantConnections,
    #[serde(rename = "connectionsPerSession")]
    ConnectionsPerSession,
    #[serde(rename = "tenantPerMinute")]
    TenantPerMinute,
    #[serde(rename = "sessionPerMinute")]
    SessionPerMinute,
    #[serde(rename = "messagesPerMinute")]
    MessagesPerMinute,
    /// Sessions the tenant holds (the session API's `PUT`; decision 2204).
    #[serde(rename = "maxSessions")]
    MaxSessions,
    /// Sessions one signed-in user holds (the session API's `PUT`; decision 3602).
    #[serde(rename = "maxSessionsPerSubject")]
    MaxSessionsPerSubject,
}

impl Limit {
    pub fn name(self) -> &'static str {
        match self {
            Limit::TenantConnections => tenant_attr::TENANT_CONNECTIONS,
            Limit::ConnectionsPerSession => tenant_attr::CONNECTIONS_PER_SESSION,
            Limit::TenantPerMinute => tenant_attr::TENANT_PER_MINUTE,
            Limit::SessionPerMinute => tenant_attr::SESSION_PER_MINUTE,
            Limit::MessagesPerMinute => tenant_attr::MESSAGES_PER_MINUTE,
            Limit::MaxSessions => tenant_attr::MAX_SESSIONS,
            Limit::MaxSessionsPerSubject => tenant_attr::MAX_SESSIONS_PER_SUBJECT,
        }
    }

    pub fn cap(self, l: &Limits) -> u64 {
        match self {
            Limit::TenantConnections => l.tenant_connections,
            Limit::ConnectionsPerSession => l.connections_per_session,
            Limit::TenantPerMinute => l.tenant_per_minute,
            Limit::SessionPerMinute => l.session_per_minute,
            Limit::MessagesPerMinute => l.messages_per_minute,
            Limit::MaxSessions => l.session_cap(),
            Limit::MaxSessionsPerSubject => l.subject_session_cap(),
        }
    }

    fn per_minute(self) -> bool {
        matches!(
            self,
            Limit::TenantPerMinute | Limit::SessionPerMinute | Limit::MessagesPerMinute
        )
    }

    /// The refusal for this limit at `now` (via `shared::refusal`, the one 429 formatter).
    pub fn refusal(self, limits: &Limits, now: crate::clock::Timestamp, who: &str) -> Refusal {
        let cap = self.cap(limits);
        let (policy, reset, retry) = if self.per_minute() {
            let until = MinuteWindow::at(now).until_next(now);
            (
                Policy::new(self.name(), cap, Some(MinuteWindow::duration())),
                Some(until),
                until,
            )
        } else {
            (
                Policy::new(self.name(), cap, None).with_unit(QuotaUnit::ConcurrentRequests),
                None,
                OPEN_CONNECTION_RETRY,
            )
        };
        let what = match self {
            Limit::TenantConnections => format!("{who} holds {cap} open connections, its limit"),
            Limit::ConnectionsPerSession => {
                format!("{who} holds {cap} open connections, its limit per session")
            }
            Limit::TenantPerMinute => format!("{who} opened {cap} connections this minute"),
            Limit::SessionPerMinute => format!("{who} opened {cap} connections this minute"),
            Limit::MessagesPerMinute => format!("{who} sent {cap} messages this minute"),
            Limit::MaxSessions | Limit::MaxSessionsPerSubject => format!(
                "{who} holds {cap} sessions, its limit; delete one (or let one expire) first"
            ),
        };
        Refusal::new(
            Usage {
                policy,
                remaining: 0,
                reset,
            },
            retry,
            what,
        )
    }
}
