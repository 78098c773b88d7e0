//! Where tokens come from and what they must say, from the function's environment.

use std::net::IpAddr;
use std::time::Duration;

use http::Uri;

use crate::config::{ConfigError, Vars};

pub const ISSUER_VAR: &str = "TURNSTILE_CONNECT_JWT_ISSUER";
pub const AUDIENCE_VAR: &str = "TURNSTILE_CONNECT_JWT_AUDIENCE";
pub const TENANT_CLAIM_VAR: &str = "TURNSTILE_CONNECT_JWT_TENANT_CLAIM";
pub const JWKS_URL_VAR: &str = "TURNSTILE_CONNECT_JWKS_URL";
pub const JWKS_CACHE_VAR: &str = "TURNSTILE_CONNECT_JWKS_CACHE_SECS";
pub const LEEWAY_VAR: &str = "TURNSTILE_CONNECT_JWT_LEEWAY_SECS";

/// Clock skew tolerated on `exp`/`nbf` when unset.
pub const DEFAULT_LEEWAY: Duration = Duration::from_secs(60);
/// More skew than this would keep a revoked session's token alive too long.
pub const MAX_LEEWAY: Duration = Duration::from_secs(300);
/// How long a fetched JWKS is used before it is fetched again, when unset.
pub const DEFAULT_JWKS_TTL: Duration = Duration::from_secs(3600);
/// A shorter cache would only add calls to the identity provider; keys rotate in days.
pub const MIN_JWKS_TTL: Duration = Duration::from_secs(60);

/// Where tokens come from and what they must say (docs/connect-jwt.md).
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct OidcConfig {
    /// Compared exactly with the `iss` claim; also the base of OIDC discovery.
    pub issuer: String,
    /// The token's `aud` must contain one of these (Cognito: the app client id).
    pub audiences: Vec<String>,
    /// The claim naming the tenant, e.g. `custom:tenantId`.
    pub tenant_claim: String,
    /// The JWKS; `None`: `jwks_uri` from `{issuer}/.well-known/openid-configuration`.
    pub jwks_url: Option<String>,
    pub jwks_ttl: Duration,
    pub leeway: Duration,
}

impl OidcConfig {
    /// `None` when `TURNSTILE_CONNECT_JWT_ISSUER` is unset or empty (no tenant may use `jwt`).
    /// Everything else is checked here, so a typo fails at start-up rather than on a connection.
    pub fn from_vars(vars: &Vars) -> Result<Option<OidcConfig>, ConfigError> {
        let Some(issuer) = vars.get(ISSUER_VAR) else {
            return Ok(None);
        };
        url_var(ISSUER_VAR, &issuer)?;
        let audiences: Vec<String> = vars
            .required(
                AUDIENCE_VAR,
                "the token audiences (Cognito: the app client id), comma-separated",
            )?
            .split(',')
            .map(str::trim)
            .filter(|a| !a.is_empty())
            .map(str::to_string)
            .collect();
        if audiences.is_empty() {
            return Err(ConfigError::Missing {
                var: AUDIENCE_VAR.into(),
                hint: "at least one audience".into(),
            });
        }
        let jwks_url = vars.get(JWKS_URL_VAR);
        if let Some(url) = &jwks_url {
            url_var(JWKS_URL_VAR, url)?;
        }
        let jwks_ttl = vars.secs_or(JWKS_CACHE_VAR, DEFAULT_JWKS_TTL)?;
        if jwks_ttl < MIN_JWKS_TTL {
            return Err(invalid(
                JWKS_CACHE_VAR,
                jwks_ttl,
                "at least 60 seconds (keys rotate in days; less only adds calls)",
            ));
        }
        let leeway = vars.secs_or(LEEWAY_VAR, DEFAULT_LEEWAY)?;
        if leeway > MAX_LEEWAY {
            return Err(invalid(LEEWAY_VAR, leeway, "at most 300 seconds"));
        }
        Ok(Some(OidcConfig {
            issuer,
            audiences,
            tenant_claim: vars.string_or(TENANT_CLAIM_VAR, "tenantId"),
            jwks_url,
            jwks_ttl,
            leeway,
        }))
    }
}

pub(super) fn url_var(var: &str, url: &str) -> Result<(), ConfigError> {
    check_url(url)
        .map(drop)
        .map_err(|reason| ConfigError::Invalid {
            var: var.into(),
            value: url.into(),
            reason,
        })
}

pub(super) fn invalid(var: &str, value: Duration, reason: &str) -> ConfigError {
    ConfigError::Invalid {
        var: var.into(),
        value: value.as_secs().to_string(),
        reason: format!("expected {reason}"),
    }
}

/// `url` if it may be fetched: `https://` with a host, or `http://` to a loopback host.
pub fn check_url(url: &str) -> Result<Uri, String> {
    let uri: Uri = url
        .parse()
        .map_err(|_| "expected an https:// URL".to_string())?;
    let host = uri
        .host()
        .filter(|h| !h.is_empty())
        .ok_or("expected an https:// URL with a host")?;
    match uri.scheme_str() {
        Some("https") => Ok(uri),
        Some("http") if is_loopback(host) => Ok(uri),
        Some("http") => {
            Err("expected https:// (http:// only for 127.0.0.1, ::1 or localhost)".into())
        }
        _ => Err("expected an https:// URL".into()),
    }
}

fn is_loopback(host: &str) -> bool {
    host.eq_ignore_ascii_case("localhost")
        || host
            .trim_start_matches('[')
            .trim_end_matches(']')
            .parse::<IpAddr>()
            .is_ok_and(|ip| ip.is_loopback())
}

#[cfg(test)]
mod tests {
    use super::*;

    fn vars(pairs: &[(&str, &str)]) -> Vars {
        Vars::from_pairs(pairs.iter().copied())
    }

    const COGNITO: &str = "https://cognito-idp.eu-west-1.amazonaws.com/eu-west-1_abc";

    #[test]
    fn no_issuer_means_no_config() {
        assert_eq!(OidcConfig::from_vars(&vars(&[])), Ok(None));
        assert_eq!(
            OidcConfig::from_vars(&vars(&[(ISSUER_VAR, "  ")])),
            Ok(None)
        );
    }

    #[test]
    fn defaults_and_lists() {
        let c = OidcConfig::from_vars(&vars(&[
            (ISSUER_VAR, COGNITO),
            (AUDIENCE_VAR, " client-a, ,client-b "),
        ]))
        .unwrap()
        .unwrap();
        assert_eq!(
            c,
            OidcConfig {
                issuer: COGNITO.into(),
                audiences: vec!["client-a".into(), "client-b".into()],
                tenant_claim: "tenantId".into(),
                jwks_url: None,
                jwks_ttl: Duration::from_secs(3600),
                leeway: Duration::from_secs(60),
            }
        );
        let c = OidcConfig::from_vars(&vars(&[
            (ISSUER_VAR, COGNITO),
            (AUDIENCE_VAR, "a"),
            (TENANT_CLAIM_VAR, "custom:tenantId"),
            (JWKS_URL_VAR, "http://127.0.0.1:9/jwks"),
            (JWKS_CACHE_VAR, "600"),
            (LEEWAY_VAR, "0"),
        ]))
        .unwrap()
        .unwrap();
        assert_eq!(c.tenant_claim, "custom:tenantId");
        assert_eq!(c.jwks_url.as_deref(), Some("http://127.0.0.1:9/jwks"));
        assert_eq!(
            (c.jwks_ttl, c.leeway),
            (Duration::from_secs(600), Duration::ZERO)
        );
    }

    #[test]
    fn bad_values_name_their_variable() {
        let err = |pairs: &[(&str, &str)]| OidcConfig::from_vars(&vars(pairs)).unwrap_err();
        let var = |e: ConfigError| match e {
            ConfigError::Missing { var, .. } | ConfigError::Invalid { var, .. } => var,
        };
        assert_eq!(var(err(&[(ISSUER_VAR, COGNITO)])), AUDIENCE_VAR);
        assert_eq!(
            var(err(&[(ISSUER_VAR, COGNITO), (AUDIENCE_VAR, ",")])),
            AUDIENCE_VAR
        );
        for bad in ["http://idp.example.com", "ftp://x", "cognito", "https://"] {
            assert_eq!(
                var(err(&[(ISSUER_VAR, bad), (AUDIENCE_VAR, "a")])),
                ISSUER_VAR,
                "{bad}"
            );
        }
        let base = [(ISSUER_VAR, COGNITO), (AUDIENCE_VAR, "a")];
        let with = |k, v| {
            let mut p = base.to_vec();
            p.push((k, v));
            var(err(&p))
        };
        assert_eq!(with(JWKS_URL_VAR, "http://10.0.0.1/jwks"), JWKS_URL_VAR);
        assert_eq!(with(JWKS_CACHE_VAR, "59"), JWKS_CACHE_VAR);
        assert_eq!(with(JWKS_CACHE_VAR, "soon"), JWKS_CACHE_VAR);
        assert_eq!(with(LEEWAY_VAR, "301"), LEEWAY_VAR);
    }
}
