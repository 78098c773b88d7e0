//! The authorizer context: what the authorizer learned (tenant, session, the tenant's limits) travels
//! with the connection in `requestContext.authorizer`, so `$connect`, `$disconnect` and `$default`
//! need no tenant read. API Gateway may deliver context numbers as strings: both are accepted.

use std::collections::HashMap;

use serde_json::{Map, Value};

use crate::ids::{IdError, SessionId, TenantId};
use crate::tenant::{attr as tenant_attr, Limits};
use crate::ticket::TicketUse;

pub const TENANT_ID: &str = "tenantId";
pub const SESSION_ID: &str = "sessionId";
/// The session incarnation a connect ticket named (`$connect` joins only that one).
pub const SESSION_NONCE: &str = "sessionNonce";
/// Who the connect ticket or token was issued to, when it says.
pub const SUBJECT: &str = "subject";
/// How the connection was authenticated (`ticket`, `jwt` or `none`).
pub const CONNECT_AUTH: &str = "connectAuth";
/// The connect ticket's id, under which `$connect` counts its uses (decision 3607).
pub const TICKET_ID: &str = "ticketId";
/// How many connects the ticket admits.
pub const TICKET_CONNECTS: &str = "ticketConnects";
/// When the ticket expires (epoch seconds): its count outlives it.
pub const TICKET_EXPIRES_AT: &str = "ticketExpiresAt";

/// What the authorizer verified about who connects: added to the context of an Allow.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Grant {
    pub method: crate::tenant::ConnectAuth,
    pub nonce: Option<String>,
    pub subject: Option<String>,
    /// The ticket's uses to count, when a ticket was presented.
    pub ticket: Option<TicketUse>,
}

impl Grant {
    /// Adds the grant's fields to an Allow's context.
    pub fn add_to(&self, context: &mut Value) {
        let Value::Object(m) = context else { return };
        m.insert(
            CONNECT_AUTH.into(),
            Value::String(self.method.as_str().into()),
        );
        if let Some(n) = &self.nonce {
            m.insert(SESSION_NONCE.into(), Value::String(n.clone()));
        }
        if let Some(s) = &self.subject {
            m.insert(SUBJECT.into(), Value::String(s.clone()));
        }
        if let Some(u) = &self.ticket {
            m.insert(TICKET_ID.into(), Value::String(u.id.clone()));
            m.insert(TICKET_CONNECTS.into(), Value::from(u.connects));
            m.insert(TICKET_EXPIRES_AT.into(), Value::from(u.expires_at));
        }
    }
}

/// How the connection was admitted, as the authorizer's Allow recorded it: `$default` holds it
/// against the tenant's current `connectAuth`. Absent or unknown counts as `none` (nothing shown).
pub fn connect_auth(fields: &HashMap<String, Value>) -> crate::tenant::ConnectAuth {
    text(fields, CONNECT_AUTH)
        .and_then(|a| a.parse().ok())
        .unwrap_or(crate::tenant::ConnectAuth::None)
}

/// The session nonce a `$connect` event's context carries.
pub fn nonce(fields: &HashMap<String, Value>) -> Option<String> {
    text(fields, SESSION_NONCE)
}

/// The ticket whose uses a `$connect` counts, when the context names one (all three fields).
pub fn ticket_use(fields: &HashMap<String, Value>) -> Option<TicketUse> {
    Some(TicketUse {
        id: text(fields, TICKET_ID)?,
        connects: number(fields, TICKET_CONNECTS)?.max(1),
        expires_at: i64::try_from(number(fields, TICKET_EXPIRES_AT)?).ok()?,
    })
}

/// The context an Allow carries.
pub fn build(t: &TenantId, sid: &SessionId, limits: &Limits) -> Value {
    let mut m = Map::new();
    m.insert(TENANT_ID.into(), Value::String(t.to_string()));
    m.insert(SESSION_ID.into(), Value::String(sid.to_string()));
    for (name, v) in limits.fields() {
        m.insert(name.into(), Value::from(v));
    }
    for (name, value) in limits.policies() {
        m.insert(name.into(), Value::String(value.into()));
    }
    if let Some(shards) = limits.spread_shards() {
        m.insert(tenant_attr::CONNECTION_SHARDS.into(), Value::from(shards));
    }
    Value::Object(m)
}

fn text(fields: &HashMap<String, Value>, name: &str) -> Option<String> {
    match fields.get(name)? {
        Value::String(s) => Some(s.clone()),
        _ => None,
    }
}

fn number(fields: &HashMap<String, Value>, name: &str) -> Option<u64> {
    match fields.get(name)? {
        Value::Number(n) => n.as_u64(),
        Value::String(s) => s.trim().parse().ok(),
        _ => None,
    }
}

/// Tenant and session from the context, validated.
pub fn ids(fields: &HashMap<String, Value>) -> Result<(TenantId, SessionId), IdError> {
    Ok((
        TenantId::parse_opt(text(fields, TENANT_ID).as_deref())?,
        SessionId::parse_opt(text(fields, SESSION_ID).as_deref())?,
    ))
}

/// A named setting: absent (an authorizer deployed before it existed) means its default; an
/// unknown value is `None`.
fn named<T: std::str::FromStr + Default>(fields: &HashMap<String, Value>, name: &str) -> Option<T> {
    match text(fields, name) {
        None => Some(T::default()),
        Some(a) => a.parse().ok(),
    }
}

/// The limits, when the context carries all of them. A context without `rateAlgorithm`,
/// `enforcement` or `onFailure` means fixed, enforce, closed; an unknown value means no limits (the
/// caller then reads the tenant row).
pub fn limits(fields: &HashMap<String, Value>) -> Option<Limits> {
    let l = Limits {
        connections_per_session: number(fields, tenant_attr::CONNECTIONS_PER_SESSION)?,
        tenant_connections: number(fields, tenant_attr::TENANT_CONNECTIONS)?,
        session_per_minute: number(fields, tenant_attr::SESSION_PER_MINUTE)?,
        tenant_per_minute: number(fields, tenant_attr::TENANT_PER_MINUTE)?,
        session_ttl: number(fields, tenant_attr::SESSION_TTL)?,
        messages_per_minute: number(fields, tenant_attr::MESSAGES_PER_MINUTE)?,
        rate_algorithm: named(fields, tenant_attr::RATE_ALGORITHM)?,
        enforcement: named(fields, tenant_attr::ENFORCEMENT)?,
        on_failure: named(fields, tenant_attr::ON_FAILURE)?,
        // How the tenant authenticates connects matters only to the authorizer, which read the row.
        connect_auth: Default::default(),
        // Only the session API's PUT counts sessions, and it reads the row.
        max_sessions: crate::tenant::DEFAULT_MAX_SESSIONS,
        max_sessions_per_subject: crate::tenant::DEFAULT_MAX_SESSIONS_PER_SUBJECT,
        // Where a ticket may come from matters only to the authorizer, which read the row.
        ticket_in_query: false,
        connection_shards: match fields.get(tenant_attr::CONNECTION_SHARDS) {
            None => 1,
            Some(_) => number(fields, tenant_attr::CONNECTION_SHARDS)?,
        },
    };
    // Shards that do not fit the limits: the row decides (and is malformed).
    l.check_shards().ok().map(|()| l)
}

/// Who a WebSocket event is from: the tenant and session from the authorizer context (falling back
/// to the `tenantId`/`sessionId` query strings, present on `$connect`), and the connection id.
pub fn websocket_ids(
    req: &aws_lambda_events::apigw::ApiGatewayWebsocketProxyRequest,
) -> Result<(TenantId, SessionId, crate::ids::ConnectionId), IdError> {
    let fields = &req.request_context.authorizer.fields;
    let q = &req.query_string_parameters;
    let t = text(fields, TENANT_ID).or_else(|| q.first(TENANT_ID).map(str::to_string));
    let s = text(fields, SESSION_ID).or_else(|| q.first(SESSION_ID).map(str::to_string));
    let c = req.request_context.connection_id.as_deref();
    Ok((
        TenantId::parse_opt(t.as_deref())?,
        SessionId::parse_opt(s.as_deref())?,
        crate::ids::ConnectionId::parse_opt(c)?,
    ))
}

/// The limits for a WebSocket event: from the authorizer context, else the tenant (cached read).
/// `Ok(None)` when the tenant does not exist.
pub async fn websocket_limits(
    deps: &crate::Deps,
    cache: &crate::tenant::TenantCache,
    req: &aws_lambda_events::apigw::ApiGatewayWebsocketProxyRequest,
    t: &TenantId,
) -> crate::Result<Option<Limits>> {
    if let Some(l) = limits(&req.request_context.authorizer.fields) {
        return Ok(Some(l));
    }
    Ok(cache.get(deps, t).await?.map(|t| t.limits))
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn the_connect_auth_travels_in_the_context_and_absent_means_none() {
        use crate::tenant::ConnectAuth;
        let t = TenantId::parse("acme").unwrap();
        let s = SessionId::parse("s1").unwrap();
        let mut v = build(&t, &s, &Limits::example(60, 5, 2, 10, 200, 60));
        let bare: HashMap<String, Value> = serde_json::from_value(v.clone()).unwrap();
        assert_eq!(connect_auth(&bare), ConnectAuth::None);
        let grant = Grant {
            method: ConnectAuth::Jwt,
            nonce: None,
            subject: None,
            ticket: None,
        };
        grant.add_to(&mut v);
        let mut f: HashMap<String, Value> = serde_json::from_value(v).unwrap();
        assert_eq!(connect_auth(&f), ConnectAuth::Jwt);
        f.insert(CONNECT_AUTH.into(), Value::from("magic"));
        assert_eq!(connect_auth(&f), ConnectAuth::None);
    }

    #[test]
    fn connection_shards_travel_in_the_context_and_absent_means_one() {
        let t = TenantId::parse("acme").unwrap();
        let s = SessionId::parse("s1").unwrap();
        let l = Limits::example(60, 5, 2, 10, 200, 60);
        let plain: HashMap<String, Value> = serde_json::from_value(build(&t, &s, &l)).unwrap();
        assert!(
            !plain.contains_key(tenant_attr::CONNECTION_SHARDS),
            "unsharded: as before"
        );
        let sh = l.with_connection_shards(4);
        let mut f: HashMap<String, Value> = serde_json::from_value(build(&t, &s, &sh)).unwrap();
        assert_eq!(limits(&f), Some(sh));
        // More shards than tenantConnections: not usable, the handler reads the row.
        f.insert(tenant_attr::CONNECTION_SHARDS.into(), Value::from(11));
        assert_eq!(limits(&f), None);
    }

    #[test]
    fn a_tickets_use_travels_in_the_context() {
        let use_ = TicketUse {
            id: "tk-1".into(),
            connects: 3,
            expires_at: 1_700_000_060,
        };
        let grant = Grant {
            method: crate::tenant::ConnectAuth::Ticket,
            nonce: Some("n".into()),
            subject: None,
            ticket: Some(use_.clone()),
        };
        let mut ctx = Value::Object(Map::new());
        grant.add_to(&mut ctx);
        let mut fields: HashMap<String, Value> = serde_json::from_value(ctx).unwrap();
        assert_eq!(ticket_use(&fields), Some(use_.clone()));
        // API Gateway may pass the numbers as strings.
        fields.insert(TICKET_CONNECTS.into(), Value::from("3"));
        assert_eq!(ticket_use(&fields), Some(use_));
        fields.remove(TICKET_ID);
        assert_eq!(ticket_use(&fields), None);
    }

    #[test]
    fn context_round_trips_and_accepts_stringified_numbers() {
        let t = TenantId::parse("acme").unwrap();
        let s = SessionId::parse("s1").unwrap();
        let l = Limits::example(60, 5, 2, 10, 200, 60);
        let v = build(&t, &s, &l);
        let fields: HashMap<String, Value> = serde_json::from_value(v).unwrap();
        assert_eq!(ids(&fields).unwrap(), (t.clone(), s.clone()));
        assert_eq!(limits(&fields), Some(l));
        let mut strings: HashMap<String, Value> = fields
            .iter()
            .map(|(k, v)| {
                (
                    k.clone(),
                    Value::String(v.to_string().trim_matches('"').into()),
                )
            })
            .collect();
        assert_eq!(limits(&strings), Some(l));
        strings.remove(tenant_attr::SESSION_TTL);
        assert_eq!(limits(&strings), None);
        // The algorithm travels too; a context without it is fixed, an unknown one is no limits.
        let g = l.with_rate_algorithm(crate::tenant::WindowAlgorithm::Gcra);
        let mut fields: HashMap<String, Value> = serde_json::from_value(build(&t, &s, &g)).unwrap();
        assert_eq!(limits(&fields), Some(g));
        fields.remove(tenant_attr::RATE_ALGORITHM);
        assert_eq!(limits(&fields), Some(l));
        fields.insert(tenant_attr::RATE_ALGORITHM.into(), Value::from("sliding"));
        assert_eq!(limits(&fields), None);
        // So do the policies.
        let p = l
            .with_enforcement(crate::tenant::Enforcement::Shadow)
            .with_on_failure(crate::tenant::OnFailure::Open);
        let mut fields: HashMap<String, Value> = serde_json::from_value(build(&t, &s, &p)).unwrap();
        assert_eq!(limits(&fields), Some(p));
        fields.remove(tenant_attr::ENFORCEMENT);
        fields.remove(tenant_attr::ON_FAILURE);
        assert_eq!(limits(&fields), Some(l));
        fields.insert(tenant_attr::ON_FAILURE.into(), Value::from("maybe"));
        assert_eq!(limits(&fields), None);
    }
}
