//! Whose tenant an HTTP API caller acts for: the one binding of an API Gateway HTTP API (payload
//! v2) request to a tenant, for every HTTP API that serves tenants (docs/session-api-auth.md,
//! docs/decide-api.md).
//!
//! An API names its variables with a [`CallerVars`] (one prefix: [`CallerVars::DECIDE`] reads
//! `TURNSTILE_DECIDE_AUTH`, `TURNSTILE_DECIDE_TENANT_CLAIM`, `TURNSTILE_DECIDE_IAM_BINDING`,
//! `TURNSTILE_DECIDE_IAM_ROLE_ARN`; [`CallerVars::SESSION`] the session API's `TURNSTILE_SESSION_*`
//! names), and [`Binding::from_vars`] reads them with one meaning for every API:
//!
//! - JWT claims bind in every mode: a request carrying them (`requestContext.authorizer.jwt`)
//!   acts only for the tenant in its tenant claim, whatever the mode says.
//! - `jwt`: no claims is a refusal (the route's authorizer is missing).
//! - `iam`: the caller must be a session of the role the role variable names; its role session
//!   name is its tenant (the role's trust policy pins it to the caller's `tenantId` principal
//!   tag). `…_IAM_BINDING=any-tenant` instead trusts every IAM caller with every tenant.
//! - `none`: callers trusted with every tenant (named explicitly: there is no default).
//!
//! [`Binding::caller`] is pure (no call, no clock): request context in, [`Caller`] or a 403
//! problem+json out. An API that must never act for a tenant the caller merely names (the decide
//! API) refuses `none` and `any-tenant` at load with [`Binding::require_bound`].

use aws_lambda_events::apigw::ApiGatewayV2httpRequestContext;

use crate::config::{ConfigError, Vars};
use crate::ids::TenantId;
use crate::refusal::{problem, HttpAnswer};

/// The names of one API's caller variables.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct CallerVars {
    /// `none`, `iam` or `jwt` (required).
    pub auth: &'static str,
    /// The JWT claim naming the tenant (default [`DEFAULT_TENANT_CLAIM`]).
    pub tenant_claim: &'static str,
    /// `role-session-name` (default) or `any-tenant`.
    pub iam_binding: &'static str,
    /// The role whose session names are tenant ids.
    pub iam_role: &'static str,
}

impl CallerVars {
    /// The session API's names.
    pub const SESSION: CallerVars = CallerVars {
        auth: "TURNSTILE_SESSION_API_AUTH",
        tenant_claim: "TURNSTILE_SESSION_TENANT_CLAIM",
        iam_binding: "TURNSTILE_SESSION_IAM_BINDING",
        iam_role: "TURNSTILE_SESSION_IAM_ROLE_ARN",
    };
    /// The decide API's names.
    pub const DECIDE: CallerVars = CallerVars {
        auth: "TURNSTILE_DECIDE_AUTH",
        tenant_claim: "TURNSTILE_DECIDE_TENANT_CLAIM",
        iam_binding: "TURNSTILE_DECIDE_IAM_BINDING",
        iam_role: "TURNSTILE_DECIDE_IAM_ROLE_ARN",
    };
}

/// The claim read by default (Cognito user pools: `custom:tenantId`).
pub const DEFAULT_TENANT_CLAIM: &str = "tenantId";

/// How an API learns its caller's tenant. Required: the permissive choice exists only when named.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Auth {
    /// A request without JWT claims acts for the tenant it names.
    None,
    /// API Gateway checked a SigV4 signature; the tenant binding is [`IamBinding`].
    Iam,
    /// API Gateway validated a JWT; the caller's tenant is its tenant claim.
    Jwt,
}

/// The role whose session names are tenant ids.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct CallerRole {
    pub account: String,
    /// The role's name (its path is not part of an assumed-role ARN).
    pub name: String,
}

/// How an IAM caller is bound to a tenant. API Gateway passes no principal tags to the function
/// (`requestContext.authorizer.iam` has `accessKey`, `accountId`, `callerId`, `userArn`, ...), so
/// the binding is read from the caller's ARN.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum IamBinding {
    /// The caller must be a session of [`CallerRole`]; its session name is its tenant.
    RoleSessionName(CallerRole),
    /// Any caller IAM lets through acts for the tenant it names.
    AnyTenant,
}

/// Who a request is from.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum Caller {
    /// Bound to one tenant: it acts for no other.
    Tenant(TenantId),
    /// Trusted with every tenant (`none`, or `iam` with `any-tenant`): it names the tenant.
    AnyTenant,
}

/// One API's caller binding, read once per process.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Binding {
    pub auth: Auth,
    pub tenant_claim: String,
    /// Read only with [`Auth::Iam`].
    pub iam: Option<IamBinding>,
    /// The variable names, for messages.
    pub vars: CallerVars,
}

fn invalid(var: &str, value: String, reason: &str) -> ConfigError {
    ConfigError::Invalid {
        var: var.to_string(),
        value,
        reason: reason.to_string(),
    }
}

/// `(account, role name)` of `arn:{partition}:iam::{account}:role/{path/}{name}`.
pub fn role_arn(arn: &str) -> Option<CallerRole> {
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

/// `(account, RoleName, SessionName)` of
/// `arn:{partition}:sts::{account}:assumed-role/{RoleName}/{SessionName}`.
pub fn assumed_role(arn: &str) -> Option<(&str, &str, &str)> {
    let parts: Vec<&str> = arn.splitn(6, ':').collect();
    if parts.len() != 6 || parts[0] != "arn" || parts[2] != "sts" {
        return None;
    }
    let rest = parts[5].strip_prefix("assumed-role/")?;
    let (role, session) = rest.split_once('/')?;
    (!role.is_empty() && !session.is_empty() && !session.contains('/'))
        .then_some((parts[4], role, session))
}

impl Binding {
    /// Reads the variables `names` names from `vars`. The role variable is read in every mode (a
    /// template sets it whatever the mode) and required with `iam` and `role-session-name`.
    pub fn from_vars(vars: &Vars, names: CallerVars) -> Result<Binding, ConfigError> {
        let auth = match vars.get(names.auth) {
            None => {
                return Err(ConfigError::Missing {
                    var: names.auth.into(),
                    hint: format!(
                        "jwt (a JWT authorizer on the routes), iam (SigV4, bound by {}), or none \
                         (callers trusted with every tenant)",
                        names.iam_binding
                    ),
                })
            }
            Some(v) => match v.to_ascii_lowercase().as_str() {
                "none" => Auth::None,
                "iam" => Auth::Iam,
                "jwt" => Auth::Jwt,
                _ => return Err(invalid(names.auth, v, "expected none, iam or jwt")),
            },
        };
        let tenant_claim = vars.string_or(names.tenant_claim, DEFAULT_TENANT_CLAIM);
        if tenant_claim.is_empty()
            || tenant_claim
                .chars()
                .any(|c| c.is_whitespace() || c.is_control())
        {
            return Err(invalid(
                names.tenant_claim,
                tenant_claim,
                "expected a claim name without spaces (e.g. tenantId or custom:tenantId)",
            ));
        }
        let binding = iam_binding(vars, names, auth == Auth::Iam)?;
        Ok(Binding {
            auth,
            tenant_claim,
            iam: (auth == Auth::Iam).then_some(binding).flatten(),
            vars: names,
        })
    }

    /// Refuses a binding that lets a caller act for a tenant it only names (`none`, `any-tenant`):
    /// for an API whose every caller must be bound.
    pub fn require_bound(self) -> Result<Binding, ConfigError> {
        let v = self.vars;
        match (self.auth, &self.iam) {
            (Auth::None, _) => Err(invalid(
                v.auth,
                "none".into(),
                "this API binds every caller to its tenant: use jwt or iam",
            )),
            (Auth::Iam, Some(IamBinding::AnyTenant)) => Err(invalid(
                v.iam_binding,
                "any-tenant".into(),
                "this API binds every caller to its tenant: use role-session-name",
            )),
            _ => Ok(self),
        }
    }

    /// The caller of a request, or the 403 problem+json that refuses it. Pure.
    pub fn caller(&self, ctx: &ApiGatewayV2httpRequestContext) -> Result<Caller, HttpAnswer> {
        let authorizer = ctx.authorizer.as_ref();
        let claim = &self.tenant_claim;
        // JWT claims bind in every mode: a route with a JWT authorizer never acts for another tenant.
        if let Some(claims) = authorizer.and_then(|a| a.jwt.as_ref()).map(|j| &j.claims) {
            let Some(value) = claims.get(claim.as_str()) else {
                return Err(forbidden(format!(
                    "the token has no {claim} claim, so it is bound to no tenant"
                )));
            };
            return TenantId::parse(value).map(Caller::Tenant).map_err(|e| {
                forbidden(format!("the token's {claim} claim is not a tenant id: {e}"))
            });
        }
        match self.auth {
            Auth::None => Ok(Caller::AnyTenant),
            Auth::Jwt => Err(forbidden(format!(
                "the request carries no JWT claims (is the route's JWT authorizer attached?); \
                 the caller's tenant comes from its {claim} claim"
            ))),
            Auth::Iam => {
                let Some(iam) = authorizer.and_then(|a| a.iam.as_ref()) else {
                    return Err(forbidden(
                        "the request carries no IAM identity (is the route's AWS_IAM \
                         authorization attached?)",
                    ));
                };
                let role = match &self.iam {
                    Some(IamBinding::RoleSessionName(role)) => role,
                    Some(IamBinding::AnyTenant) | None => return Ok(Caller::AnyTenant),
                };
                let arn = iam.user_arn.as_deref().unwrap_or("");
                let Some((account, name, session)) = assumed_role(arn) else {
                    return Err(forbidden(format!(
                        "the caller ({arn:?}) is not an assumed role: with {}=role-session-name \
                         the tenant is the session name of role {}",
                        self.vars.iam_binding, role.name
                    )));
                };
                if account != role.account || name != role.name {
                    return Err(forbidden(format!(
                        "the caller is a session of role {name} in account {account}; only \
                         sessions of role {} in account {} are bound to a tenant by their name",
                        role.name, role.account
                    )));
                }
                TenantId::parse(session).map(Caller::Tenant).map_err(|e| {
                    forbidden(format!(
                        "the caller's role session name is not a tenant id: {e}"
                    ))
                })
            }
        }
    }
}

/// The IAM binding the variables name; `None` for `role-session-name` without a role when the mode
/// is not `iam` (`required`: it is, and the role must be named).
fn iam_binding(
    vars: &Vars,
    names: CallerVars,
    required: bool,
) -> Result<Option<IamBinding>, ConfigError> {
    let named = vars.string_or(names.iam_binding, "role-session-name");
    let role = vars.get(names.iam_role).filter(|r| !r.is_empty());
    match named.to_ascii_lowercase().replace('_', "-").as_str() {
        "any-tenant" => Ok(Some(IamBinding::AnyTenant)),
        "role-session-name" => match role {
            Some(arn) => role_arn(&arn)
                .map(|r| Some(IamBinding::RoleSessionName(r)))
                .ok_or_else(|| {
                    invalid(
                        names.iam_role,
                        arn,
                        "expected an IAM role ARN (arn:aws:iam::123456789012:role/name)",
                    )
                }),
            None if required => Err(ConfigError::Missing {
                var: names.iam_role.into(),
                hint: format!(
                    "the ARN of the role whose session names are tenant ids, or {}=any-tenant",
                    names.iam_binding
                ),
            }),
            None => Ok(None),
        },
        _ => Err(invalid(
            names.iam_binding,
            named,
            "expected role-session-name or any-tenant",
        )),
    }
}

/// 403 problem+json.
pub fn forbidden(detail: impl Into<String>) -> HttpAnswer {
    problem(403, "Forbidden", detail)
}

#[cfg(test)]
mod tests {
    use super::*;
    use aws_lambda_events::apigw::{
        ApiGatewayRequestAuthorizer, ApiGatewayRequestAuthorizerIamDescription,
        ApiGatewayRequestAuthorizerJwtDescription,
    };

    const ROLE: &str = "arn:aws:iam::123456789012:role/svc/decide-caller";

    fn binding(pairs: &[(&str, &str)]) -> Result<Binding, ConfigError> {
        Binding::from_vars(&Vars::from_pairs(pairs.to_vec()), CallerVars::DECIDE)
    }

    fn with_claims(claims: &[(&str, &str)]) -> ApiGatewayV2httpRequestContext {
        let mut jwt = ApiGatewayRequestAuthorizerJwtDescription::default();
        jwt.claims = claims
            .iter()
            .map(|(k, v)| (k.to_string(), v.to_string()))
            .collect();
        let mut a = ApiGatewayRequestAuthorizer::default();
        a.jwt = Some(jwt);
        let mut ctx = ApiGatewayV2httpRequestContext::default();
        ctx.authorizer = Some(a);
        ctx
    }

    fn with_iam(arn: &str) -> ApiGatewayV2httpRequestContext {
        let mut iam = ApiGatewayRequestAuthorizerIamDescription::default();
        iam.user_arn = Some(arn.to_string());
        let mut a = ApiGatewayRequestAuthorizer::default();
        a.iam = Some(iam);
        let mut ctx = ApiGatewayV2httpRequestContext::default();
        ctx.authorizer = Some(a);
        ctx
    }

    fn tenant(s: &str) -> Caller {
        Caller::Tenant(TenantId::parse(s).unwrap())
    }

    #[test]
    fn claims_bind_in_every_mode() {
        for mode in ["none", "iam", "jwt"] {
            let b = binding(&[
                ("TURNSTILE_DECIDE_AUTH", mode),
                ("TURNSTILE_DECIDE_IAM_ROLE_ARN", ROLE),
            ])
            .unwrap();
            assert_eq!(
                b.caller(&with_claims(&[("tenantId", "acme")])),
                Ok(tenant("acme"))
            );
            let no_claim = b.caller(&with_claims(&[("sub", "u1")])).unwrap_err();
            assert_eq!(no_claim.status, 403);
            assert!(
                no_claim.body.contains("no tenantId claim"),
                "{}",
                no_claim.body
            );
            let bad = b.caller(&with_claims(&[("tenantId", "a:b")])).unwrap_err();
            assert_eq!(bad.status, 403, "{mode}");
        }
    }

    #[test]
    fn iam_callers_are_bound_by_their_role_session_name() {
        let b = binding(&[
            ("TURNSTILE_DECIDE_AUTH", "iam"),
            ("TURNSTILE_DECIDE_IAM_ROLE_ARN", ROLE),
        ])
        .unwrap();
        let own = "arn:aws:sts::123456789012:assumed-role/decide-caller/acme";
        assert_eq!(b.caller(&with_iam(own)), Ok(tenant("acme")));
        for refused in [
            "arn:aws:sts::999999999999:assumed-role/decide-caller/acme",
            "arn:aws:sts::123456789012:assumed-role/other-role/acme",
            "arn:aws:iam::123456789012:user/ops",
            "arn:aws:sts::123456789012:assumed-role/decide-caller/a:b",
        ] {
            let r = b.caller(&with_iam(refused)).unwrap_err();
            assert_eq!(r.status, 403, "{refused}");
            assert_eq!(r.header("content-type"), Some("application/problem+json"));
        }
        let none = b
            .caller(&ApiGatewayV2httpRequestContext::default())
            .unwrap_err();
        assert!(none.body.contains("no IAM identity"), "{}", none.body);
    }

    #[test]
    fn jwt_mode_refuses_requests_without_claims_and_none_trusts_them() {
        let jwt = binding(&[("TURNSTILE_DECIDE_AUTH", "JWT")]).unwrap();
        let r = jwt
            .caller(&ApiGatewayV2httpRequestContext::default())
            .unwrap_err();
        assert!(r.body.contains("no JWT claims"), "{}", r.body);
        let none = binding(&[("TURNSTILE_DECIDE_AUTH", "none")]).unwrap();
        assert_eq!(
            none.caller(&ApiGatewayV2httpRequestContext::default()),
            Ok(Caller::AnyTenant)
        );
    }

    #[test]
    fn an_api_that_binds_every_caller_refuses_the_permissive_modes() {
        let none = binding(&[("TURNSTILE_DECIDE_AUTH", "none")]).unwrap();
        let e = none.require_bound().unwrap_err().to_string();
        assert!(e.contains("TURNSTILE_DECIDE_AUTH"), "{e}");
        let any = binding(&[
            ("TURNSTILE_DECIDE_AUTH", "iam"),
            ("TURNSTILE_DECIDE_IAM_BINDING", "any-tenant"),
        ])
        .unwrap();
        let e = any.require_bound().unwrap_err().to_string();
        assert!(e.contains("TURNSTILE_DECIDE_IAM_BINDING"), "{e}");
        assert!(binding(&[("TURNSTILE_DECIDE_AUTH", "jwt")])
            .unwrap()
            .require_bound()
            .is_ok());
    }

    #[test]
    fn the_variables_are_validated_under_the_apis_own_names() {
        let missing = binding(&[]).unwrap_err().to_string();
        assert!(missing.contains("TURNSTILE_DECIDE_AUTH"), "{missing}");
        let no_role = binding(&[("TURNSTILE_DECIDE_AUTH", "iam")]).unwrap_err();
        assert!(no_role
            .to_string()
            .contains("TURNSTILE_DECIDE_IAM_ROLE_ARN"));
        let bad_claim = binding(&[
            ("TURNSTILE_DECIDE_AUTH", "jwt"),
            ("TURNSTILE_DECIDE_TENANT_CLAIM", "a b"),
        ]);
        assert!(bad_claim.is_err());
        let session = Binding::from_vars(
            &Vars::from_pairs([("TURNSTILE_SESSION_API_AUTH", "jwt")]),
            CallerVars::SESSION,
        )
        .unwrap();
        assert_eq!(session.auth, Auth::Jwt);
    }

    #[test]
    fn arns_are_read_strictly() {
        let r = role_arn(ROLE).unwrap();
        assert_eq!(
            (r.account.as_str(), r.name.as_str()),
            ("123456789012", "decide-caller")
        );
        assert!(role_arn("arn:aws:iam::1234:role/x").is_none());
        let ok = "arn:aws:sts::123456789012:assumed-role/r/t.1";
        assert_eq!(assumed_role(ok), Some(("123456789012", "r", "t.1")));
        for not in [
            "",
            "arn:aws:sts::123456789012:assumed-role/r/",
            "arn:aws:sts::123456789012:assumed-role//t",
            "arn:aws:sts::123456789012:federated-user/bob",
        ] {
            assert_eq!(assumed_role(not), None, "{not}");
        }
    }
}
