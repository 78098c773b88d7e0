//! Tenant rows: their attribute names, the table, and each tenant's limits.

use super::policy::{ConnectAuth, Enforcement, OnFailure};
use super::window::WindowAlgorithm;
use serde::{Deserialize, Serialize};

use crate::table::{TableDef, TableKind};

/// Attribute names, as the AWS WebSocket rate-limiting sample writes them.
pub mod attr {
    pub const TENANT_ID: &str = "tenantId";
    pub const CONNECTIONS_PER_SESSION: &str = "connectionsPerSession";
    pub const TENANT_CONNECTIONS: &str = "tenantConnections";
    pub const SESSION_PER_MINUTE: &str = "sessionPerMinute";
    pub const TENANT_PER_MINUTE: &str = "tenantPerMinute";
    pub const SESSION_TTL: &str = "sessionTTL";
    pub const MESSAGES_PER_MINUTE: &str = "messagesPerMinute";
    /// How the two per-minute connection limits are enforced: `fixed` (calendar-minute windows,
    /// the default and what a row without the attribute means) or `gcra`.
    pub const RATE_ALGORITHM: &str = "rateAlgorithm";
    /// `enforce` (default) or `shadow` ([`super::Enforcement`]).
    pub const ENFORCEMENT: &str = "enforcement";
    /// `closed` (default) or `open` ([`super::OnFailure`]).
    pub const ON_FAILURE: &str = "onFailure";
    /// Items the tenant's open-connection count is spread over (absent or 1: the one `{tenant}`
    /// counter; decision 1502).
    pub const CONNECTION_SHARDS: &str = "connectionShards";
    /// `ticket` (default), `jwt` or `none` ([`super::ConnectAuth`]).
    pub const CONNECT_AUTH: &str = "connectAuth";
    /// Sessions the tenant may hold at once (absent: [`super::DEFAULT_MAX_SESSIONS`]; decision 2204).
    pub const MAX_SESSIONS: &str = "maxSessions";
    /// Sessions one signed-in user (a JWT `sub`) of the tenant may hold at once (absent:
    /// [`super::DEFAULT_MAX_SESSIONS_PER_SUBJECT`]; decision 3602).
    pub const MAX_SESSIONS_PER_SUBJECT: &str = "maxSessionsPerSubject";
    /// Whether `$connect` takes a ticket in the query string (`?ticket=`, kept in URL logs), a
    /// boolean; absent: no, only in the `Sec-WebSocket-Protocol` list (decision 3607).
    pub const TICKET_IN_QUERY: &str = "ticketInQuery";
}

/// The most counter shards a tenant may have (one BatchGetItem reads them all).
pub const MAX_CONNECTION_SHARDS: u64 = 100;
/// The most connections one session may hold, in every mode (shadow included): a session keeps
/// everything about its connections in one item, which DynamoDB limits to 400 KB. Each open
/// connection costs its id (API Gateway's 16 characters) and its `chg:{cid}` (22 bytes); a release
/// in flight keeps `chg:{cid}` and adds `rel:{cid}` (36 bytes) after its id left the set. At this
/// ceiling, with as many releases in flight as open connections and the longest tenant and session
/// ids, the item is ~384 KB (the unit test below computes it by DynamoDB's size rules). 10,000 was
/// sized on the ids alone, before `chg:`/`rel:` (decision 2206), and reached ~960 KB so.
pub const MAX_CONNECTIONS_PER_SESSION: u64 = 4_000;

/// Sessions a tenant may hold when its row does not say (`maxSessions`; decision 2204): bounded by
/// default, so one caller cannot create sessions without end.
pub const DEFAULT_MAX_SESSIONS: u64 = 10_000;
/// The most `maxSessions` may be, in every mode (shadow included): the reconciler reads every session
/// of a tenant in one run (decision 2204).
pub const MAX_SESSIONS_CEILING: u64 = 1_000_000;

/// Sessions one signed-in user may hold when the tenant row does not say
/// (`maxSessionsPerSubject`; decision 3602): enough for a few tabs and devices, few enough that
/// one user cannot hold the tenant's `maxSessions`.
pub const DEFAULT_MAX_SESSIONS_PER_SUBJECT: u64 = 10;

pub(super) fn default_max_sessions() -> u64 {
    DEFAULT_MAX_SESSIONS
}

pub(super) fn default_max_sessions_per_subject() -> u64 {
    DEFAULT_MAX_SESSIONS_PER_SUBJECT
}

pub(super) fn one() -> u64 {
    1
}

pub(super) fn is_one(v: &u64) -> bool {
    *v == 1
}

pub fn table(name: &str) -> TableDef {
    TableDef::keyed(TableKind::Tenants, name, attr::TENANT_ID)
}

/// Seconds a session lives when a tenant row lacks `sessionTTL` (the AWS sample's rows have none).
pub const DEFAULT_SESSION_TTL_SECS: u64 = 300;
/// Messages per minute per session when a tenant row lacks `messagesPerMinute`.
pub const DEFAULT_MESSAGES_PER_MINUTE: u64 = 600;

/// A tenant's WebSocket limits. A limit of 0 blocks that dimension entirely.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "camelCase")]
pub struct Limits {
    /// Open connections one session may hold.
    pub connections_per_session: u64,
    /// Open connections the whole tenant may hold.
    pub tenant_connections: u64,
    /// New connections per minute for one session.
    pub session_per_minute: u64,
    /// New connections per minute for the tenant.
    pub tenant_per_minute: u64,
    /// Seconds a session lives after its last use (`sessionTTL` on the tenant row).
    #[serde(rename = "sessionTTL")]
    pub session_ttl: u64,
    /// Messages per minute, per session.
    pub messages_per_minute: u64,
    /// How `tenantPerMinute` and `sessionPerMinute` are enforced (`rateAlgorithm`; fixed by default).
    #[serde(default)]
    pub rate_algorithm: WindowAlgorithm,
    /// Enforce or only report refusals (`enforcement`; enforce by default).
    #[serde(default)]
    pub enforcement: Enforcement,
    /// Fail closed or open when DynamoDB fails (`onFailure`; closed by default).
    #[serde(default)]
    pub on_failure: OnFailure,
    /// Counter items the open connections are spread over (`connectionShards`; 1 by default).
    #[serde(default = "one", skip_serializing_if = "is_one")]
    pub connection_shards: u64,
    /// What a `$connect` must present (`connectAuth`; a ticket by default).
    #[serde(default)]
    pub connect_auth: ConnectAuth,
    /// Sessions the tenant may hold at once (`maxSessions`; [`DEFAULT_MAX_SESSIONS`] by default).
    #[serde(default = "default_max_sessions")]
    pub max_sessions: u64,
    /// Sessions one signed-in user may hold at once (`maxSessionsPerSubject`;
    /// [`DEFAULT_MAX_SESSIONS_PER_SUBJECT`] by default).
    #[serde(default = "default_max_sessions_per_subject")]
    pub max_sessions_per_subject: u64,
    /// Whether a connect ticket is taken from the query string too (`ticketInQuery`; no by
    /// default: only from the subprotocol list).
    #[serde(default)]
    pub ticket_in_query: bool,
}

impl Limits {
    /// The AWS sample's example tenants: (tenantPerMinute, sessionPerMinute, connectionsPerSession,
    /// tenantConnections, sessionTTL, messagesPerMinute).
    pub const fn example(
        tenant_per_minute: u64,
        session_per_minute: u64,
        connections_per_session: u64,
        tenant_connections: u64,
        session_ttl: u64,
        messages_per_minute: u64,
    ) -> Limits {
        Limits {
            connections_per_session,
            tenant_connections,
            session_per_minute,
            tenant_per_minute,
            session_ttl,
            messages_per_minute,
            rate_algorithm: WindowAlgorithm::Fixed,
            enforcement: Enforcement::Enforce,
            on_failure: OnFailure::Closed,
            connection_shards: 1,
            connect_auth: ConnectAuth::Ticket,
            max_sessions: DEFAULT_MAX_SESSIONS,
            max_sessions_per_subject: DEFAULT_MAX_SESSIONS_PER_SUBJECT,
            ticket_in_query: false,
        }
    }

    /// The same limits with another cap on the tenant's sessions (decision 2204).
    pub const fn with_max_sessions(mut self, n: u64) -> Limits {
        self.max_sessions = n;
        self
    }

    /// The same limits with another cap on one user's sessions (decision 3602).
    pub const fn with_max_sessions_per_subject(mut self, n: u64) -> Limits {
        self.max_sessions_per_subject = n;
        self
    }

    /// The same limits, taking a connect ticket from the query string too, or not.
    pub const fn with_ticket_in_query(mut self, on: bool) -> Limits {
        self.ticket_in_query = on;
        self
    }

    /// The session cap a create is held to: `maxSessions`, or in shadow mode the ceiling (shadow
    /// reports refusals of the connection limits; the session count keeps a hard bound).
    pub fn session_cap(&self) -> u64 {
        match self.enforcement {
            Enforcement::Enforce => self.max_sessions,
            Enforcement::Shadow => MAX_SESSIONS_CEILING,
        }
    }

    /// The cap a signed-in user's create is held to: `maxSessionsPerSubject`, or in shadow mode
    /// the ceiling, as [`Limits::session_cap`].
    pub fn subject_session_cap(&self) -> u64 {
        match self.enforcement {
            Enforcement::Enforce => self.max_sessions_per_subject,
            Enforcement::Shadow => MAX_SESSIONS_CEILING,
        }
    }

    /// The same limits with another connect authentication.
    pub const fn with_connect_auth(mut self, a: ConnectAuth) -> Limits {
        self.connect_auth = a;
        self
    }

    /// The same limits with the open-connection count spread over `n` items (decision 1502).
    pub const fn with_connection_shards(mut self, n: u64) -> Limits {
        self.connection_shards = n;
        self
    }

    /// The same limits, enforced or in shadow mode.
    pub const fn with_enforcement(mut self, e: Enforcement) -> Limits {
        self.enforcement = e;
        self
    }

    /// The same limits with another failure policy.
    pub const fn with_on_failure(mut self, f: OnFailure) -> Limits {
        self.on_failure = f;
        self
    }

    /// The same limits under another per-minute algorithm.
    pub const fn with_rate_algorithm(mut self, a: WindowAlgorithm) -> Limits {
        self.rate_algorithm = a;
        self
    }

    /// Whether the limits can be stored and kept: `connectionsPerSession` at most
    /// [`MAX_CONNECTIONS_PER_SESSION`]; `connectionShards` 1 to [`MAX_CONNECTION_SHARDS`], and no more than
    /// `tenantConnections` or `tenantPerMinute` (each shard needs a share of at least one of both;
    /// a limit of 0 blocks the tenant whatever the shards). Decision 1502.
    pub fn check_shards(&self) -> Result<(), String> {
        if self.connections_per_session > MAX_CONNECTIONS_PER_SESSION {
            return Err(format!(
                "{} = {} is above the ceiling of {MAX_CONNECTIONS_PER_SESSION}: a session keeps \
                 its connection ids in one item, which DynamoDB limits to 400 KB",
                attr::CONNECTIONS_PER_SESSION,
                self.connections_per_session
            ));
        }
        for (name, v) in [
            (attr::MAX_SESSIONS, self.max_sessions),
            (
                attr::MAX_SESSIONS_PER_SUBJECT,
                self.max_sessions_per_subject,
            ),
        ] {
            if v > MAX_SESSIONS_CEILING {
                return Err(format!(
                    "{name} = {v} is above the ceiling of {MAX_SESSIONS_CEILING}: the reconciler \
                     reads every session of a tenant in one run",
                ));
            }
        }
        let n = self.connection_shards;
        if !(1..=MAX_CONNECTION_SHARDS).contains(&n) {
            return Err(format!(
                "{} = {n}: must be 1 to {MAX_CONNECTION_SHARDS}",
                attr::CONNECTION_SHARDS
            ));
        }
        for (name, v) in [
            (attr::TENANT_CONNECTIONS, self.tenant_connections),
            (attr::TENANT_PER_MINUTE, self.tenant_per_minute),
        ] {
            if n > 1 && v > 0 && n > v {
                return Err(format!(
                    "{} = {n} is more than {name} = {v}: every shard needs a share of at least one",
                    attr::CONNECTION_SHARDS
                ));
            }
        }
        Ok(())
    }

    /// `(name, value)` for every limit, in the tenant row's attribute names.
    pub fn fields(&self) -> [(&'static str, u64); 6] {
        [
            (attr::CONNECTIONS_PER_SESSION, self.connections_per_session),
            (attr::TENANT_CONNECTIONS, self.tenant_connections),
            (attr::SESSION_PER_MINUTE, self.session_per_minute),
            (attr::TENANT_PER_MINUTE, self.tenant_per_minute),
            (attr::SESSION_TTL, self.session_ttl),
            (attr::MESSAGES_PER_MINUTE, self.messages_per_minute),
        ]
    }

    /// `(name, value)` for how the limits are applied (the per-minute algorithm, enforcement, the
    /// failure policy), in the tenant row's attribute names: what the authorizer's context carries
    /// beside [`Limits::fields`].
    pub fn policies(&self) -> [(&'static str, &'static str); 3] {
        [
            (attr::RATE_ALGORITHM, self.rate_algorithm.as_str()),
            (attr::ENFORCEMENT, self.enforcement.as_str()),
            (attr::ON_FAILURE, self.on_failure.as_str()),
        ]
    }

    /// The open-connection count's shards, when it is spread over more than the one `{tenant}`
    /// counter (a row and a context leave the attribute out otherwise).
    pub fn spread_shards(&self) -> Option<u64> {
        (self.connection_shards != 1).then_some(self.connection_shards)
    }
}

/// A tenant row.
#[derive(Debug, Clone, PartialEq, Eq, Serialize)]
#[serde(rename_all = "camelCase")]
pub struct Tenant {
    pub tenant_id: crate::ids::TenantId,
    #[serde(flatten)]
    pub limits: Limits,
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn connection_shards_must_fit_the_limits() {
        let l = Limits::example(60, 5, 2, 10, 200, 60);
        assert!(l.check_shards().is_ok());
        assert!(l.with_connection_shards(10).check_shards().is_ok());
        let e = l.with_connection_shards(11).check_shards().unwrap_err();
        assert!(e.contains("tenantConnections = 10"), "{e}");
        assert!(l.with_connection_shards(0).check_shards().is_err());
        assert!(l.with_connection_shards(101).check_shards().is_err());
        let small_minute = Limits::example(4, 5, 2, 10, 200, 60).with_connection_shards(8);
        assert!(small_minute
            .check_shards()
            .unwrap_err()
            .contains("tenantPerMinute"));
        let huge = Limits::example(60, 5, MAX_CONNECTIONS_PER_SESSION + 1, 10, 200, 60);
        assert!(huge
            .check_shards()
            .unwrap_err()
            .contains(&format!("ceiling of {MAX_CONNECTIONS_PER_SESSION}")));
        let many = l.with_max_sessions(MAX_SESSIONS_CEILING + 1);
        assert!(many.check_shards().unwrap_err().contains("maxSessions"));
        let one_user = l.with_max_sessions_per_subject(MAX_SESSIONS_CEILING + 1);
        assert!(one_user
            .check_shards()
            .unwrap_err()
            .contains("maxSessionsPerSubject"));
        assert!(l
            .with_max_sessions(MAX_SESSIONS_CEILING)
            .check_shards()
            .is_ok());
    }

    /// The session item at the ceiling, by DynamoDB's size rules (`capacity::item_size`): the
    /// longest tenant and session ids the code accepts, every attribute the code writes on a
    /// session at its largest value, `live` open connections (`connectionIds` + `chg:{cid}`) and
    /// `releasing` releases in flight (`chg:{cid}` + `rel:{cid}`, their ids already out of the set).
    fn session_size(live: u64, releasing: u64) -> u64 {
        use crate::session::{attr as s, charge_attr, release_attr};
        use serde_json::{json, Map, Value};
        // API Gateway's connection ids: 12 random bytes, base64 (16 characters; the local stack
        // makes the same).
        let cid = |i: u64| format!("{i:015}=");
        let charged = json!({"N": (MAX_CONNECTION_SHARDS - 1).to_string()});
        let big = json!({"N": u64::MAX.to_string()});
        let mut item = Map::new();
        for (name, value) in [
            (
                s::TENANT_ID,
                json!({"S": "t".repeat(crate::ids::MAX_ID_LEN)}),
            ),
            (
                s::SESSION_ID,
                json!({"S": "s".repeat(crate::ids::MAX_ID_LEN)}),
            ),
            (s::SESSION_TTL, big.clone()),
            (
                s::SESSION_NONCE,
                json!({"S": crate::session::store::new_nonce().unwrap()}),
            ),
            (s::MSG_MINUTE, big.clone()),
            (s::MSG_COUNT, big.clone()),
            (s::CONN_MINUTE, big.clone()),
            (s::CONN_MINUTE_COUNT, big.clone()),
            (s::CONN_TAT, json!({"N": i64::MAX.to_string()})),
            (s::JOINED_AT, big.clone()),
            (s::ENDED_AT, big.clone()),
            (
                s::ENDED_BY,
                json!({"S": crate::admission::release::request_token()}),
            ),
            (
                s::CONNECTION_SHARDS,
                json!({"N": MAX_CONNECTION_SHARDS.to_string()}),
            ),
        ] {
            item.insert(name.to_string(), value);
        }
        let ids: Vec<Value> = (0..live).map(|i| json!(cid(i))).collect();
        item.insert(s::CONNECTION_IDS.to_string(), json!({ "SS": ids }));
        for i in 0..live + releasing {
            item.insert(charge_attr(&cid(i)), charged.clone());
        }
        for i in live..live + releasing {
            let token = crate::admission::release::request_token();
            item.insert(release_attr(&cid(i)), json!({ "S": token }));
        }
        crate::capacity::item_size(&Value::Object(item))
    }

    /// A session at the ceiling fits DynamoDB's 400 KB (409,600 bytes) with 5% to
    /// spare, even with every one of its connections' releases in flight at once while as many new
    /// connections joined. More than that in flight would need the whole membership to turn over
    /// within one release's round trip on an item whose every write costs ~375 WCU (a partition
    /// takes ~1,000 WCU/s): see decision 2207.
    #[test]
    fn a_session_at_the_ceiling_fits_the_item_limit_with_every_release_in_flight() {
        const ITEM_LIMIT: u64 = 409_600;
        let c = MAX_CONNECTIONS_PER_SESSION;
        let worst = session_size(c, c);
        assert!(
            worst <= ITEM_LIMIT * 95 / 100,
            "a session at {c} connections with {c} releases in flight is {worst} bytes \
             (limit {ITEM_LIMIT}, 5% margin: {})",
            ITEM_LIMIT * 95 / 100
        );
        // Per connection: 16 (id) + 22 (chg) open, 22 (chg) + 36 (rel) releasing.
        assert_eq!(session_size(c + 1, c) - worst, 38);
        assert_eq!(session_size(c, c + 1) - worst, 58);
        // The bound is not loose: half as many connections again would not fit.
        assert!(session_size(c * 3 / 2, c * 3 / 2) > ITEM_LIMIT);
    }
}
