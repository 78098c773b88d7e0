//! Sessions: a tenant's session, its live connection ids, and its expiry.

pub mod store;
pub mod stream;

use serde::Serialize;

use crate::table::{TableDef, TableKind};

pub mod attr {
    pub const TENANT_ID: &str = "tenantId";
    pub const SESSION_ID: &str = "sessionId";
    pub const CONNECTION_IDS: &str = "connectionIds";
    /// Epoch seconds; DynamoDB's TTL deletes the session after it, and the stream tells the sweeper.
    pub const SESSION_TTL: &str = "sessionTTL";
    /// Epoch seconds of the minute the message counter belongs to.
    pub const MSG_MINUTE: &str = "msgMinute";
    /// Messages received on the session during `msgMinute`, refused ones included (a message is
    /// admitted when its count is at most `messagesPerMinute`; decision 0303).
    pub const MSG_COUNT: &str = "msgCount";
    /// Epoch seconds of the minute `connMinuteCount` counts (fixed windows; decision 0306).
    pub const CONN_MINUTE: &str = "connMinute";
    /// Connections opened on the session during `connMinute`.
    pub const CONN_MINUTE_COUNT: &str = "connMinuteCount";
    /// The session's per-minute connection bucket (`rateAlgorithm = gcra`): its TAT, epoch ns.
    pub const CONN_TAT: &str = "connTat";
    /// Epoch seconds of the latest join: every connection of the row joined by then, so a close
    /// answering 410 a grace later proves the socket gone (`admission::closing`, decision 2208).
    pub const JOINED_AT: &str = "joinedAt";
    /// The request token of the session `DELETE` that ended the row: its `sessionTTL` removed (so
    /// every path sees it as expired, and DynamoDB's TTL never deletes it while it still counts
    /// sockets) and its session unit given back (decision 2208).
    pub const ENDED_BY: &str = "endedBy";
    /// Epoch seconds of that end: no connection joined the row after it.
    pub const ENDED_AT: &str = "endedAt";
    /// The tenant's `connectionShards` when a connection last joined (only when above 1): a
    /// release finds the counter shard of each id from it (decision 1502).
    pub const CONNECTION_SHARDS: &str = "connShards";
    /// Random, fixed when the row is created (and when an expired row is replaced): connect
    /// tickets name it, so a ticket does not survive its session's delete or re-create (decision
    /// 2100). Not returned by the API.
    pub const SESSION_NONCE: &str = "sessionNonce";
    /// The signed-in user (a JWT `sub`) who created the session, fixed for the row's life (kept
    /// when an expired row is replaced): only that user, a tenant admin or a backend reaches the
    /// session, and it counts under the user's `maxSessionsPerSubject` (decision 3602). Absent on
    /// sessions a backend created.
    pub const OWNER: &str = "owner";
    /// `chg:{cid}`: the counter connection `cid` was charged on at its `$connect` (a number: its
    /// shard, or [`super::TENANT_COUNTER`]), written by the join and removed by the release that
    /// takes the id out, so every release goes back where the unit was taken (decision 2206).
    pub const CHARGE_PREFIX: &str = "chg:";
    /// `rel:{cid}`: the request token of the release that took `cid` out, until that release
    /// has decremented (so the SDK's retry of its session write knows its own earlier attempt:
    /// decision 2206).
    pub const RELEASE_PREFIX: &str = "rel:";
}

/// The `chg:{cid}` value of a connection charged on the tenant's one `{tenant}` counter.
pub const TENANT_COUNTER: i64 = -1;

/// The name of `cid`'s charge attribute on its session (`chg:{cid}`).
pub fn charge_attr(cid: &str) -> String {
    format!("{}{cid}", attr::CHARGE_PREFIX)
}

/// The name of `cid`'s release-token attribute on its session (`rel:{cid}`).
pub fn release_attr(cid: &str) -> String {
    format!("{}{cid}", attr::RELEASE_PREFIX)
}

/// Where a session's connections were charged, as its item (or stream image) recorded it.
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub struct Charges {
    /// Connection id → its `chg:{cid}`: a shard index, or [`TENANT_COUNTER`].
    pub recorded: std::collections::BTreeMap<String, i64>,
}

impl Charges {
    /// Reads every `chg:{cid}` number of an item's attributes (`num` reads one value).
    pub fn from_attrs<'a, V: 'a>(
        attrs: impl IntoIterator<Item = (&'a String, &'a V)>,
        num: impl Fn(&V) -> Option<i64>,
    ) -> Charges {
        let recorded = attrs
            .into_iter()
            .filter_map(|(k, v)| {
                let cid = k.strip_prefix(attr::CHARGE_PREFIX)?;
                num(v).map(|i| (cid.to_string(), i))
            })
            .collect();
        Charges { recorded }
    }
}

pub fn table(name: &str) -> TableDef {
    TableDef::keyed(TableKind::Sessions, name, attr::TENANT_ID)
        .sorted_by(attr::SESSION_ID)
        .expiring(attr::SESSION_TTL)
        .streamed("NEW_AND_OLD_IMAGES")
}

/// A new session id for `PUT /session` without one: 128 random bits as 22 base64url characters,
/// so a session's name cannot be guessed (a caller's own ids are names, not secrets).
pub fn new_id() -> crate::Result<crate::ids::SessionId> {
    let token = crate::ticket::random_token(16).map_err(|e| crate::Error::Other(e.to_string()))?;
    Ok(crate::ids::SessionId::parse(&token)?)
}

/// A session as the API returns it.
#[derive(Debug, Clone, PartialEq, Eq, Serialize)]
#[serde(rename_all = "camelCase")]
pub struct Session {
    pub tenant_id: String,
    pub session_id: String,
    /// Epoch seconds after which the session is expired (whether or not DynamoDB deleted it yet).
    #[serde(rename = "sessionTTL")]
    pub session_ttl: i64,
    /// Open connections, sorted.
    pub connection_ids: Vec<String>,
    /// Where each connection was charged (decision 2206).
    #[serde(skip)]
    pub charges: Charges,
    /// `sessionNonce` (absent on rows written before tickets existed, until their next refresh).
    #[serde(skip)]
    pub nonce: Option<String>,
    /// The signed-in user who created it (`owner`); `None` for a backend's session.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub owner: Option<String>,
}

impl Session {
    /// Expired when `sessionTTL <= now`: DynamoDB deletes expired items late (hours to days).
    pub fn is_expired(&self, now_secs: i64) -> bool {
        self.session_ttl <= now_secs
    }

    /// Whether a caller reaching only `own`'s sessions (`None`: every session) reaches this one.
    pub fn reached_by(&self, own: Option<&str>) -> bool {
        own.is_none_or(|o| self.owner.as_deref() == Some(o))
    }
}
