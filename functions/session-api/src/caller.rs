//! Who calls the session API: the tenant a caller is bound to (docs/session-api-auth.md), and
//! whether it is a backend, trusted with every session of its tenant, or a signed-in user (JWT
//! claims), who reaches only the sessions it created unless the configured admin claim makes it
//! a tenant admin (decision 3602).

use std::collections::HashMap;

use aws_lambda_events::apigw::ApiGatewayV2httpRequest;
use http::Method;
use shared::admission::sessions;
use shared::caller::{Caller as Bound, CallerVars};
use shared::config::{ConfigError, Vars};
use shared::edge::respond;
use shared::ids::TenantId;
use shared::refusal::HttpAnswer;
use shared::ticket;

use crate::request::{target, Target};
use crate::State;

pub use shared::caller::{Auth, Binding, CallerRole, IamBinding};

pub const AUTH_VAR: &str = CallerVars::SESSION.auth;
pub const TENANT_CLAIM_VAR: &str = CallerVars::SESSION.tenant_claim;
pub const IAM_BINDING_VAR: &str = CallerVars::SESSION.iam_binding;
pub const IAM_ROLE_VAR: &str = CallerVars::SESSION.iam_role;

pub(crate) fn invalid(var: &str, value: String, reason: &str) -> ConfigError {
    ConfigError::Invalid {
        var: var.to_string(),
        value,
        reason: reason.to_string(),
    }
}

/// Who a request is from, before any DynamoDB call: the tenant its caller is bound to (refused when
/// the request names another), the tenant and session it names, and whether it is a backend or a
/// signed-in user. `Err`: the refusal to answer (403 or 400 problem+json).
pub fn authenticate(
    state: &State,
    event: &ApiGatewayV2httpRequest,
    method: &Method,
) -> Result<(Target, Caller), HttpAnswer> {
    let bound = match caller_tenant(state, event) {
        Ok(bound) => bound,
        Err(refused) => {
            tracing::warn!(method = %method, "session API caller refused: {}", refused.body);
            return Err(refused);
        }
    };
    let has_claims = event
        .request_context
        .authorizer
        .as_ref()
        .is_some_and(|a| a.jwt.is_some());
    let claim = if has_claims {
        format!("{} claim", state.binding.tenant_claim)
    } else {
        "role session name".to_string()
    };
    let target = target(event, bound.as_ref(), &claim)?;
    Ok((target, caller(state, event)?))
}

/// The tenant the caller is bound to, `None` when it may name any (the binding `shared::caller`
/// reads for every HTTP API), or the 403 that refuses it.
pub fn caller_tenant(
    state: &State,
    event: &ApiGatewayV2httpRequest,
) -> Result<Option<TenantId>, HttpAnswer> {
    Ok(match state.binding.caller(&event.request_context)? {
        Bound::Tenant(t) => Some(t),
        Bound::AnyTenant => None,
    })
}

/// `TURNSTILE_SESSION_ADMIN_CLAIM`: the JWT claim that makes a signed-in user a tenant admin,
/// who reaches every session of its tenant. Unset: no user is an admin.
pub const ADMIN_CLAIM_VAR: &str = "TURNSTILE_SESSION_ADMIN_CLAIM";
/// The JWT claim naming the user: a session's owner and its tickets' subject.
pub const SUBJECT_CLAIM: &str = "sub";

/// The admin claim (`TURNSTILE_SESSION_ADMIN_CLAIM`): `name` (the claim must be `true`) or
/// `name=value` (the claim is `value`, or a list holding it: API Gateway passes an array claim
/// such as `cognito:groups` as `[a b]`).
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct AdminClaim {
    pub name: String,
    pub value: Option<String>,
}

impl AdminClaim {
    /// The claim `TURNSTILE_SESSION_ADMIN_CLAIM` names, if any.
    pub fn from_vars(vars: &Vars) -> Result<Option<AdminClaim>, ConfigError> {
        let Some(raw) = vars.get(ADMIN_CLAIM_VAR).filter(|v| !v.trim().is_empty()) else {
            return Ok(None);
        };
        let (name, value) = match raw.split_once('=') {
            Some((n, v)) => (n.trim(), Some(v.trim())),
            None => (raw.trim(), None),
        };
        let bad = |s: &str| s.is_empty() || s.chars().any(|c| c.is_whitespace() || c.is_control());
        if bad(name) || value.is_some_and(bad) {
            return Err(invalid(
                ADMIN_CLAIM_VAR,
                raw,
                "expected a claim name (it must be true) or name=value, without spaces \
                 (e.g. turnstile:admin or cognito:groups=turnstile-admins)",
            ));
        }
        Ok(Some(AdminClaim {
            name: name.to_string(),
            value: value.map(str::to_string),
        }))
    }

    /// Whether `claims` carry it.
    pub fn held_by(&self, claims: &HashMap<String, String>) -> bool {
        let Some(got) = claims.get(&self.name).map(|v| v.trim()) else {
            return false;
        };
        match &self.value {
            None => got == "true",
            Some(want) => {
                got == want
                    || got
                        .trim_start_matches('[')
                        .trim_end_matches(']')
                        .split([' ', ','])
                        .any(|e| e.trim() == want)
            }
        }
    }
}

/// Who calls, beyond its tenant.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum Caller {
    /// A backend (IAM, or a trusted caller without JWT claims): acts on every session of its
    /// tenant, names the subject of the tickets it mints and may ask for more connects per ticket.
    Backend,
    /// A signed-in user (JWT claims): its `sub` owns the sessions it creates and is its tickets'
    /// subject; `admin` (the admin claim) reaches every session of its tenant.
    User { sub: String, admin: bool },
}

impl Caller {
    /// What the session store is told about this caller.
    pub fn sessions(&self) -> sessions::Caller<'_> {
        match self {
            Caller::Backend => sessions::Caller::BACKEND,
            Caller::User { sub, admin } => sessions::Caller {
                subject: Some(sub),
                own_only: !admin,
            },
        }
    }

    /// The owner a session must have for this caller to reach it (`None`: any).
    pub fn own(&self) -> Option<&str> {
        self.sessions().own()
    }
}

/// The caller of a request whose tenant binding held ([`caller_tenant`]): a user when it carries
/// JWT claims (their `sub` must be a usable subject: 403 otherwise), else a backend.
pub fn caller(state: &State, event: &ApiGatewayV2httpRequest) -> Result<Caller, HttpAnswer> {
    let authorizer = event.request_context.authorizer.as_ref();
    let Some(claims) = authorizer.and_then(|a| a.jwt.as_ref()).map(|j| &j.claims) else {
        return Ok(Caller::Backend);
    };
    let Some(sub) = claims.get(SUBJECT_CLAIM) else {
        return Err(respond::forbidden(
            "the token has no sub claim, so it names no user to own sessions",
        ));
    };
    ticket::check_subject(sub)
        .map_err(|e| respond::forbidden(format!("the token's sub claim is not usable: {e}")))?;
    let admin = state
        .admin_claim
        .as_ref()
        .is_some_and(|a| a.held_by(claims));
    Ok(Caller::User {
        sub: sub.clone(),
        admin,
    })
}

#[cfg(test)]
mod tests {
    use super::*;
    use shared::caller::{assumed_role, role_arn};

    #[test]
    fn the_session_name_is_read_only_from_assumed_role_arns() {
        let ok = "arn:aws:sts::123456789012:assumed-role/session-api-caller/tenant-a";
        assert_eq!(
            assumed_role(ok),
            Some(("123456789012", "session-api-caller", "tenant-a"))
        );
        let china = "arn:aws-cn:sts::123456789012:assumed-role/r/t.1";
        assert_eq!(assumed_role(china).map(|a| a.2), Some("t.1"));
        for not in [
            "",
            "arn:aws:iam::123456789012:user/ops",
            "arn:aws:iam::123456789012:role/session-api-caller",
            "arn:aws:sts::123456789012:federated-user/bob",
            "arn:aws:sts::123456789012:assumed-role/r/",
            "arn:aws:sts::123456789012:assumed-role/r",
            "arn:aws:sts::123456789012:assumed-role//t",
        ] {
            assert_eq!(assumed_role(not), None, "{not}");
        }
    }

    #[test]
    fn the_caller_role_is_read_from_a_role_arn_without_its_path() {
        let r = role_arn("arn:aws:iam::123456789012:role/svc/session-caller").unwrap();
        assert_eq!(
            (r.account.as_str(), r.name.as_str()),
            ("123456789012", "session-caller")
        );
        assert!(role_arn("arn:aws:iam::1234:role/x").is_none());
        assert!(role_arn("arn:aws:sts::123456789012:assumed-role/x/y").is_none());
    }

    fn claims(pairs: &[(&str, &str)]) -> HashMap<String, String> {
        pairs
            .iter()
            .map(|(k, v)| (k.to_string(), v.to_string()))
            .collect()
    }

    #[test]
    fn the_admin_claim_is_a_true_flag_or_a_value_in_a_list() {
        let read = |v: &str| AdminClaim::from_vars(&Vars::from_pairs([(ADMIN_CLAIM_VAR, v)]));
        assert_eq!(read("").unwrap(), None);
        let flag = read("turnstile:admin").unwrap().unwrap();
        assert!(flag.held_by(&claims(&[("turnstile:admin", "true")])));
        assert!(!flag.held_by(&claims(&[("turnstile:admin", "false")])));
        assert!(!flag.held_by(&claims(&[("sub", "u")])));
        let group = read("cognito:groups=ops").unwrap().unwrap();
        assert!(group.held_by(&claims(&[("cognito:groups", "[dev ops]")])));
        assert!(group.held_by(&claims(&[("cognito:groups", "ops")])));
        assert!(!group.held_by(&claims(&[("cognito:groups", "[dev operators]")])));
        for bad in ["a b", "=x", "name=", "a=b c"] {
            assert!(read(bad).is_err(), "{bad}");
        }
    }
}
