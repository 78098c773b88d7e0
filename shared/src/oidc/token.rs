//! The token itself: its header (read before any key is looked up, so junk never reaches the
//! network), its signature (jsonwebtoken, with every clock-based check off), and its claims (checked
//! here against the injected `now`).

use std::sync::Arc;

use base64::engine::general_purpose::URL_SAFE_NO_PAD;
use base64::Engine;
use jsonwebtoken::errors::ErrorKind;
use jsonwebtoken::{Algorithm, Validation};
use serde_json::{Map, Value};

use super::config::OidcConfig;
use super::jwks::Key;
use super::outcome::{JwtError, VerifiedToken};
use super::quote::quoted;
use crate::clock::Timestamp;
use crate::ids::TenantId;

/// Far above an ID token's few KB, far below what would make base64 and JSON work costly.
pub(crate) const MAX_TOKEN_LEN: usize = 16 * 1024;
/// Longest `kid` accepted (Cognito's are 44 characters).
const MAX_KID_LEN: usize = 256;

/// What the header says, before anything is trusted.
#[derive(Debug, Clone, PartialEq, Eq)]
pub(crate) struct Header {
    pub alg: Algorithm,
    pub kid: String,
}

fn malformed(what: &str) -> JwtError {
    JwtError::Malformed(what.to_string())
}

/// The header of a compact JWS: three base64url parts, a JSON object with `alg` RS256 or ES256
/// (anything else, `none` and `HS*` included, is refused here) and a `kid`.
pub(crate) fn header(token: &str) -> Result<Header, JwtError> {
    if token.len() > MAX_TOKEN_LEN {
        return Err(malformed("longer than 16 KiB"));
    }
    let parts: Vec<&str> = token.split('.').collect();
    if parts.len() != 3 {
        return Err(malformed("expected three dot-separated parts"));
    }
    let base64url = |p: &str| {
        !p.is_empty()
            && p.bytes()
                .all(|b| b.is_ascii_alphanumeric() || b == b'-' || b == b'_')
    };
    let json = Some(parts[0])
        .filter(|h| base64url(h))
        .and_then(|h| URL_SAFE_NO_PAD.decode(h).ok())
        .ok_or_else(|| malformed("the header is not base64url"))?;
    let Ok(Value::Object(fields)) = serde_json::from_slice::<Value>(&json) else {
        return Err(malformed("the header is not a JSON object"));
    };
    let Some(Value::String(alg)) = fields.get("alg") else {
        return Err(malformed("the header has no alg"));
    };
    let alg = match alg.as_str() {
        "RS256" => Algorithm::RS256,
        "ES256" => Algorithm::ES256,
        other => return Err(JwtError::UnsupportedAlgorithm(quoted(other))),
    };
    // RFC 7515 4.1.11: extensions we do not understand must be refused.
    if fields.contains_key("crit") {
        return Err(malformed("critical header extensions are not supported"));
    }
    // After `alg`, so that an unsigned `alg: none` token is refused for what it is.
    if !parts[1..].iter().all(|p| base64url(p)) {
        return Err(malformed(
            "the payload or signature is empty or not base64url",
        ));
    }
    match fields.get("kid") {
        Some(Value::String(kid)) if !kid.is_empty() && kid.len() <= MAX_KID_LEN => Ok(Header {
            alg,
            kid: kid.clone(),
        }),
        _ => Err(malformed("the header has no usable kid")),
    }
}

/// The claims, once the signature is checked with `key` and `key`'s algorithm (the header must
/// name the same one: the JWKS decides the algorithm, not the token).
pub(crate) fn verified_claims(
    token: &str,
    header: &Header,
    key: &Arc<Key>,
) -> Result<Map<String, Value>, JwtError> {
    if header.alg != key.alg {
        return Err(JwtError::UnsupportedAlgorithm(format!(
            "{:?} (the key {} is {:?})",
            header.alg,
            quoted(&key.kid),
            key.alg
        )));
    }
    let mut validation = Validation::new(key.alg);
    // Time, issuer and audience are checked by `check_claims` against the injected clock.
    validation.validate_exp = false;
    validation.validate_nbf = false;
    validation.validate_aud = false;
    validation.required_spec_claims.clear();
    validation.leeway = 0;
    jsonwebtoken::decode::<Map<String, Value>>(token, &key.decoding, &validation)
        .map(|data| data.claims)
        .map_err(|e| match e.kind() {
            ErrorKind::InvalidSignature => JwtError::BadSignature,
            ErrorKind::InvalidAlgorithm | ErrorKind::MissingAlgorithm => {
                JwtError::UnsupportedAlgorithm(format!("{:?}", header.alg))
            }
            ErrorKind::Base64(_) | ErrorKind::Json(_) | ErrorKind::Utf8(_) => {
                malformed("the payload is not a base64url JSON object")
            }
            ErrorKind::InvalidToken => malformed("expected three dot-separated parts"),
            // A key the crypto library refuses (e.g. RSA under 2048 bits) proves nothing.
            _ => JwtError::BadSignature,
        })
}

/// `iss`, `aud`, `exp`, `nbf` (with the leeway, against `now`) and the tenant claim of signed claims.
pub(crate) fn check_claims(
    config: &OidcConfig,
    claims: &Map<String, Value>,
    now: Timestamp,
) -> Result<VerifiedToken, JwtError> {
    match claims.get("iss") {
        Some(Value::String(iss)) if *iss == config.issuer => {}
        other => {
            return Err(JwtError::WrongIssuer {
                found: other.map(|v| quoted(v.as_str().unwrap_or("(not a string)"))),
            })
        }
    }
    let audience_ok = match claims.get("aud") {
        Some(Value::String(aud)) => config.audiences.contains(aud),
        Some(Value::Array(auds)) => auds
            .iter()
            .filter_map(Value::as_str)
            .any(|a| config.audiences.iter().any(|c| c == a)),
        _ => false,
    };
    if !audience_ok {
        return Err(JwtError::WrongAudience);
    }
    let expires_at = numeric_date(claims, "exp")?.ok_or_else(|| malformed("no exp claim"))?;
    if Timestamp::from_secs(expires_at).plus(config.leeway) <= now {
        return Err(JwtError::Expired {
            expired_at: expires_at,
        });
    }
    if let Some(nbf) = numeric_date(claims, "nbf")? {
        if now.plus(config.leeway) < Timestamp::from_secs(nbf) {
            return Err(JwtError::NotYetValid);
        }
    }
    let claim = &config.tenant_claim;
    let tenant = match claims.get(claim) {
        None | Some(Value::Null) => {
            return Err(JwtError::NoTenantClaim {
                claim: claim.clone(),
            })
        }
        Some(Value::String(t)) => TenantId::parse(t).map_err(|e| e.to_string()),
        Some(_) => Err("not a string".to_string()),
    }
    .map_err(|reason| JwtError::BadTenantClaim {
        claim: claim.clone(),
        reason,
    })?;
    Ok(VerifiedToken {
        tenant,
        subject: claims
            .get("sub")
            .and_then(Value::as_str)
            .map(str::to_string),
        expires_at,
    })
}

/// A NumericDate claim (RFC 7519 2: seconds, possibly fractional), rounded down.
fn numeric_date(claims: &Map<String, Value>, name: &str) -> Result<Option<i64>, JwtError> {
    match claims.get(name) {
        None | Some(Value::Null) => Ok(None),
        Some(Value::Number(n)) => match (n.as_i64(), n.as_f64()) {
            (Some(i), _) => Ok(Some(i)),
            // `as` saturates; JSON numbers are finite.
            (None, Some(f)) => Ok(Some(f.floor() as i64)),
            (None, None) => Err(malformed(&format!("the {name} claim is not a number"))),
        },
        Some(_) => Err(malformed(&format!("the {name} claim is not a number"))),
    }
}

#[cfg(test)]
mod tests {
    use std::time::Duration;

    use serde_json::json;

    use super::*;

    fn b64(v: &Value) -> String {
        URL_SAFE_NO_PAD.encode(v.to_string())
    }

    fn token_with(header: Value) -> String {
        format!("{}.{}.c2ln", b64(&header), b64(&json!({})))
    }

    #[test]
    fn headers_name_rs256_or_es256_and_a_kid() {
        let h = header(&token_with(
            json!({"alg": "ES256", "kid": "k1", "typ": "JWT"}),
        ))
        .unwrap();
        assert_eq!(
            h,
            Header {
                alg: Algorithm::ES256,
                kid: "k1".into()
            }
        );
        let none = format!("{}.{}.", b64(&json!({"alg": "none"})), b64(&json!({})));
        assert_eq!(
            header(&none),
            Err(JwtError::UnsupportedAlgorithm("none".into()))
        );
        for alg in ["none", "HS256", "RS512", "PS256", "ES384", "EdDSA", "rs256"] {
            assert_eq!(
                header(&token_with(json!({"alg": alg, "kid": "k"}))),
                Err(JwtError::UnsupportedAlgorithm(alg.into()))
            );
        }
        let m = |t: &str| matches!(header(t), Err(JwtError::Malformed(_)));
        assert!(m(&token_with(json!({"alg": "RS256"}))));
        assert!(m(&token_with(json!({"alg": "RS256", "kid": 7}))));
        assert!(m(&token_with(json!({"alg": "RS256", "kid": ""}))));
        assert!(m(&token_with(
            json!({"alg": "RS256", "kid": "k", "crit": ["b64"]})
        )));
        assert!(m(&token_with(json!(["alg"]))));
        assert!(m(&token_with(json!({"alg": 256, "kid": "k"}))));
        assert!(m(""));
        assert!(m("a.b"));
        assert!(m("a.b.c.d"));
        assert!(m("a..c"));
        assert!(m(&format!(
            "{}.e30.",
            b64(&json!({"alg": "RS256", "kid": "k"}))
        )));
        assert!(m("a+/.b.c"));
        assert!(m("eyJ.e30.x"));
        assert!(m(&"a".repeat(MAX_TOKEN_LEN + 1)));
    }

    fn config() -> OidcConfig {
        OidcConfig {
            issuer: "https://idp.example.com".into(),
            audiences: vec!["app".into(), "other".into()],
            tenant_claim: "custom:tenantId".into(),
            jwks_url: None,
            jwks_ttl: Duration::from_secs(3600),
            leeway: Duration::from_secs(60),
        }
    }

    const NOW: i64 = 1_700_000_000;

    fn check(claims: Value) -> Result<VerifiedToken, JwtError> {
        let Value::Object(map) = claims else {
            panic!("an object")
        };
        check_claims(&config(), &map, Timestamp::from_secs(NOW))
    }

    fn good() -> Value {
        json!({"iss": "https://idp.example.com", "aud": "app", "exp": NOW + 1, "nbf": NOW,
               "sub": "user-1", "custom:tenantId": "acme"})
    }

    fn with(k: &str, v: Value) -> Value {
        let mut c = good();
        c[k] = v;
        c
    }

    fn without(k: &str) -> Value {
        let mut c = good();
        if let Some(m) = c.as_object_mut() {
            m.remove(k);
        }
        c
    }

    #[test]
    fn good_claims_give_the_tenant_subject_and_expiry() {
        let v = check(good()).unwrap();
        assert_eq!(v.tenant.as_str(), "acme");
        assert_eq!(v.subject.as_deref(), Some("user-1"));
        assert_eq!(v.expires_at, NOW + 1);
        assert_eq!(check(without("sub")).unwrap().subject, None);
        assert!(check(with("aud", json!(["x", "other"]))).is_ok());
        assert!(check(with("exp", json!(NOW as f64 + 0.5))).is_ok());
        assert!(check(without("nbf")).is_ok());
    }

    #[test]
    fn issuer_and_audience_must_match_exactly() {
        assert_eq!(
            check(with("iss", json!("https://idp.example.com/"))),
            Err(JwtError::WrongIssuer {
                found: Some("https://idp.example.com/".into())
            })
        );
        assert_eq!(
            check(without("iss")),
            Err(JwtError::WrongIssuer { found: None })
        );
        for aud in [
            json!("App"),
            json!([]),
            json!([1]),
            json!(null),
            json!({"a": 1}),
        ] {
            assert_eq!(check(with("aud", aud)), Err(JwtError::WrongAudience));
        }
        assert_eq!(check(without("aud")), Err(JwtError::WrongAudience));
    }

    #[test]
    fn exp_and_nbf_allow_the_leeway_and_no_more() {
        assert!(check(with("exp", json!(NOW - 59))).is_ok());
        assert_eq!(
            check(with("exp", json!(NOW - 60))),
            Err(JwtError::Expired {
                expired_at: NOW - 60
            })
        );
        assert!(check(with("nbf", json!(NOW + 60))).is_ok());
        assert_eq!(
            check(with("nbf", json!(NOW + 61))),
            Err(JwtError::NotYetValid)
        );
        for bad in [json!("soon"), json!(true), json!([1])] {
            assert!(matches!(
                check(with("exp", bad.clone())),
                Err(JwtError::Malformed(_))
            ));
            assert!(matches!(
                check(with("nbf", bad)),
                Err(JwtError::Malformed(_))
            ));
        }
        assert!(matches!(check(without("exp")), Err(JwtError::Malformed(_))));
        assert!(matches!(
            check(with("exp", json!(u64::MAX))),
            Ok(VerifiedToken {
                expires_at: i64::MAX,
                ..
            })
        ));
        assert!(matches!(
            check(with("exp", json!(-1e300))),
            Err(JwtError::Expired { .. })
        ));
    }

    #[test]
    fn the_tenant_claim_must_be_a_valid_tenant_id() {
        let claim = "custom:tenantId".to_string();
        assert_eq!(
            check(without("custom:tenantId")),
            Err(JwtError::NoTenantClaim {
                claim: claim.clone()
            })
        );
        assert_eq!(
            check(with("custom:tenantId", Value::Null)),
            Err(JwtError::NoTenantClaim {
                claim: claim.clone()
            })
        );
        for bad in [json!("a:b"), json!(""), json!(7), json!(["acme"])] {
            assert!(matches!(
                check(with("custom:tenantId", bad)),
                Err(JwtError::BadTenantClaim { claim: c, .. }) if c == claim
            ));
        }
    }
}
