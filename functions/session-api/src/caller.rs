//! Who calls the session API: the tenant a caller is bound to (docs/session-api-auth.md), and
//! whether it is a backend, trusted with every session of its tenant, or a signed-in user (JWT
//! claims), who reaches only the sessions it created unless the configured admin claim makes it
//! a tenant admin (decision 3602).

use std::collections::HashMap;

use aws_lambda_events::apigw::ApiGatewayV2httpRequest;
use shared::admission::respond;
use shared::admission::sessions;
use shared::config::{ConfigError, Vars};
use shared::ids::TenantId;
use shared::refusal::HttpAnswer;
use shared::ticket;

use crate::State;

/// `TURNSTILE_SESSION_API_AUTH`: how the session API learns its caller's tenant. Required: the
/// permissive choice exists only when named.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Auth {
    /// `none`: a request without JWT claims acts for the tenant it names. For callers trusted with
    /// every tenant (the local stack, a private backend).
    None,
    /// `iam`: API Gateway checked a SigV4 signature; the tenant binding is
    /// `TURNSTILE_SESSION_IAM_BINDING`.
    Iam,
    /// `jwt`: API Gateway validated a JWT; the caller's tenant is its tenant claim.
    Jwt,
}

/// The role whose session names are tenant ids (`TURNSTILE_SESSION_IAM_ROLE_ARN`).
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct CallerRole {
    pub account: String,
    /// The role's name (its path is not part of an assumed-role ARN).
    pub name: String,
}

/// `TURNSTILE_SESSION_IAM_BINDING`: how an IAM caller is bound to a tenant. API Gateway passes no
/// principal tags to the function (`requestContext.authorizer.iam` has `accessKey`, `accountId`,
/// `callerId`, `cognitoIdentity`, `principalOrgId`, `userArn`, `userId`), so the binding is read
/// from the caller's ARN.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum IamBinding {
    /// `role-session-name` (default): the caller must be a session of [`CallerRole`]; its session
    /// name is its tenant (the role's trust policy pins it: `sts:RoleSessionName` =
    /// `${aws:PrincipalTag/tenantId}`).
    RoleSessionName(CallerRole),
    /// `any-tenant`: any caller IAM lets through acts for the tenant it names.
    AnyTenant,
}

pub const AUTH_VAR: &str = "TURNSTILE_SESSION_API_AUTH";
pub const TENANT_CLAIM_VAR: &str = "TURNSTILE_SESSION_TENANT_CLAIM";
pub const IAM_BINDING_VAR: &str = "TURNSTILE_SESSION_IAM_BINDING";
pub const IAM_ROLE_VAR: &str = "TURNSTILE_SESSION_IAM_ROLE_ARN";

pub(crate) fn invalid(var: &str, value: String, reason: &str) -> ConfigError {
    ConfigError::Invalid {
        var: var.to_string(),
        value,
        reason: reason.to_string(),
    }
}

/// `(account, role name)` of `arn:{partition}:iam::{account}:role/{path/}{name}`.
pub(crate) fn role_arn(arn: &str) -> Option<CallerRole> {
    let parts: Vec<&str> = arn.splitn(6, ':').collect();
    if parts.len() != 6 || parts[0] != "arn" || parts[2] != "iam" {
        return None;
    }
    let account = parts[4];
    if account.len() != 12 || !account.chars().all(|c| c.is_ascii_digit()) {
        return None;
    }
    let name = parts[5].strip_prefix("role/")?.rsplit('/').next()?;
    (!name.is_empty()).then(|| CallerRole {
        account: account.to_string(),
        name: name.to_string(),
    })
}

/// The IAM binding the variables name; `None` for `role-session-name` without a role when the mode
/// is not `iam` (`required`: it is, and the role must be named).
pub(crate) fn iam_binding(vars: &Vars, required: bool) -> Result<Option<IamBinding>, ConfigError> {
    let named = vars.string_or(IAM_BINDING_VAR, "role-session-name");
    let role = vars.get(IAM_ROLE_VAR).filter(|r| !r.is_empty());
    match named.to_ascii_lowercase().replace('_', "-").as_str() {
        "any-tenant" => Ok(Some(IamBinding::AnyTenant)),
        "role-session-name" => match role {
            Some(arn) => role_arn(&arn)
                .map(|r| Some(IamBinding::RoleSessionName(r)))
                .ok_or_else(|| {
                    invalid(
                        IAM_ROLE_VAR,
                        arn,
                        "expected an IAM role ARN (arn:aws:iam::123456789012:role/name)",
                    )
                }),
            None if required => Err(ConfigError::Missing {
                var: IAM_ROLE_VAR.into(),
                hint: "the ARN of the role whose session names are tenant ids (the template's \
                       SessionCallerRole), or TURNSTILE_SESSION_IAM_BINDING=any-tenant"
                    .into(),
            }),
            None => Ok(None),
        },
        "none" => Err(invalid(
            IAM_BINDING_VAR,
            named,
            "`none` was renamed: say any-tenant to let every IAM caller act for any tenant",
        )),
        _ => Err(invalid(
            IAM_BINDING_VAR,
            named,
            "expected role-session-name or any-tenant",
        )),
    }
}

/// The tenant the caller is bound to, `None` when it may name any (see the module docs), or the
/// 403 that refuses it.
pub fn caller_tenant(
    state: &State,
    event: &ApiGatewayV2httpRequest,
) -> Result<Option<TenantId>, HttpAnswer> {
    let authorizer = event.request_context.authorizer.as_ref();
    let claim = &state.tenant_claim;
    // JWT claims bind in every mode: a route with a JWT authorizer never acts for another tenant.
    if let Some(claims) = authorizer.and_then(|a| a.jwt.as_ref()).map(|j| &j.claims) {
        let Some(value) = claims.get(claim.as_str()) else {
            return Err(respond::forbidden(format!(
                "the token has no {claim} claim, so it is bound to no tenant"
            )));
        };
        return TenantId::parse(value).map(Some).map_err(|e| {
            respond::forbidden(format!("the token's {claim} claim is not a tenant id: {e}"))
        });
    }
    match (state.auth, &state.iam_binding) {
        (Auth::None, _) => Ok(None),
        (Auth::Jwt, _) => Err(respond::forbidden(format!(
            "the request carries no JWT claims (is the route's JWT authorizer attached?); \
             the caller's tenant comes from its {claim} claim"
        ))),
        (Auth::Iam, binding) => {
            let Some(iam) = authorizer.and_then(|a| a.iam.as_ref()) else {
                return Err(respond::forbidden(
                    "the request carries no IAM identity (is the route's AWS_IAM authorization \
                     attached?)",
                ));
            };
            let role = match binding {
                Some(IamBinding::RoleSessionName(role)) => role,
                Some(IamBinding::AnyTenant) | None => return Ok(None),
            };
            let arn = iam.user_arn.as_deref().unwrap_or("");
            let Some((account, name, session)) = assumed_role(arn) else {
                return Err(respond::forbidden(format!(
                    "the caller ({arn:?}) is not an assumed role: with {IAM_BINDING_VAR}=\
                     role-session-name the tenant is the session name of role {}",
                    role.name
                )));
            };
            if account != role.account || name != role.name {
                return Err(respond::forbidden(format!(
                    "the caller is a session of role {name} in account {account}; only sessions \
                     of role {} in account {} are bound to a tenant by their name",
                    role.name, role.account
                )));
            }
            TenantId::parse(session).map(Some).map_err(|e| {
                respond::forbidden(format!(
                    "the caller's role session name is not a tenant id: {e}"
                ))
            })
        }
    }
}

/// `(account, RoleName, SessionName)` of
/// `arn:{partition}:sts::{account}:assumed-role/{RoleName}/{SessionName}`.
fn assumed_role(arn: &str) -> Option<(&str, &str, &str)> {
    let parts: Vec<&str> = arn.splitn(6, ':').collect();
    if parts.len() != 6 || parts[0] != "arn" || parts[2] != "sts" {
        return None;
    }
    let rest = parts[5].strip_prefix("assumed-role/")?;
    let (role, session) = rest.split_once('/')?;
    (!role.is_empty() && !session.is_empty() && !session.contains('/'))
        .then_some((parts[4], role, session))
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
