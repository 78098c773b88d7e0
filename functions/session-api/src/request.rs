//! What a session API request names, read without DynamoDB (so it is fuzzed alone:
//! tests/integration/fuzz.rs).

use aws_lambda_events::apigw::ApiGatewayV2httpRequest;
use serde_json::Value;
use shared::edge::respond;
use shared::ids::{SessionId, TenantId};
use shared::refusal::HttpAnswer;
use shared::ticket;

/// The largest request body read, in bytes: the ids, a subject and `connects` fit in far less. A
/// longer body is answered 413 before it is parsed, here as behind API Gateway (whose own limit,
/// Lambda's 6 MB invoke payload, is far higher).
pub const MAX_BODY: usize = 16 * 1024;

/// The request field asking for a ticket that admits more than one connect.
pub const CONNECTS: &str = "connects";

/// What a request names: the tenant, the session (absent: `PUT` makes one), the subject a ticket
/// is for and how many connects it admits (a backend's choices: a signed-in user's are its own
/// `sub` and 1, see [`crate::caller::Caller`]).
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Target {
    pub tenant: TenantId,
    pub session: Option<SessionId>,
    pub subject: Option<String>,
    /// `connects`: at least 1 when given.
    pub connects: Option<u64>,
}

/// The [`Target`] of a request. `bound` is the caller's tenant (see [`crate::caller_tenant`]): it
/// fills a missing `tenantId`, and a different one is refused with 403. Public so it is fuzzed
/// without DynamoDB (tests/integration/fuzz.rs).
pub fn target(
    event: &ApiGatewayV2httpRequest,
    bound: Option<&TenantId>,
    claim: &str,
) -> Result<Target, HttpAnswer> {
    let q = &event.query_string_parameters;
    let mut t = q.first("tenantId").map(str::to_string);
    let mut s = q.first("sessionId").map(str::to_string);
    let mut subject = q.first("subject").map(str::to_string);
    let mut connects = q.first(CONNECTS).map(|c| Value::String(c.to_string()));
    if let Some(body) = event.body.as_deref().filter(|b| !b.trim().is_empty()) {
        if body.len() > MAX_BODY {
            return Err(respond::message(
                413,
                format!("the request body is over {MAX_BODY} bytes"),
            ));
        }
        let v: Value = serde_json::from_str(body).map_err(|e| {
            respond::message(400, format!("the request body is not valid JSON: {e}"))
        })?;
        let Some(obj) = v.as_object() else {
            return Err(respond::message(
                400,
                "the request body must be a JSON object",
            ));
        };
        let field = |name: &str| -> Result<Option<String>, HttpAnswer> {
            match obj.get(name) {
                None | Some(Value::Null) => Ok(None),
                Some(Value::String(s)) => Ok(Some(s.clone())),
                Some(_) => Err(respond::message(400, format!("{name} must be a string"))),
            }
        };
        t = t.or(field("tenantId")?);
        s = s.or(field("sessionId")?);
        subject = subject.or(field("subject")?);
        connects = connects.or_else(|| obj.get(CONNECTS).filter(|v| !v.is_null()).cloned());
    }
    let bad = |e: shared::ids::IdError| respond::message(400, e.to_string());
    let tenant = match (t.as_deref(), bound) {
        (None, Some(own)) => own.clone(),
        (named, own) => {
            let named = TenantId::parse_opt(named).map_err(bad)?;
            if let Some(own) = own.filter(|own| **own != named) {
                return Err(respond::forbidden(format!(
                    "the caller's {claim} is {own}; it may not act for tenant {named}"
                )));
            }
            named
        }
    };
    if let Some(subject) = &subject {
        ticket::check_subject(subject).map_err(|e| respond::message(400, e))?;
    }
    Ok(Target {
        tenant,
        session: s
            .as_deref()
            .map(SessionId::parse)
            .transpose()
            .map_err(bad)?,
        subject,
        connects: connects.as_ref().map(count).transpose()?,
    })
}

/// `connects` as a number of at least 1 (a JSON number, or digits in the query or a string).
fn count(v: &Value) -> Result<u64, HttpAnswer> {
    let n = match v {
        Value::Number(n) => n.as_u64(),
        Value::String(s) => s.trim().parse().ok(),
        _ => None,
    };
    n.filter(|n| *n >= 1).ok_or_else(|| {
        respond::message(
            400,
            format!(
                "{CONNECTS} must be a whole number of at least 1 (the connects a ticket admits)"
            ),
        )
    })
}
