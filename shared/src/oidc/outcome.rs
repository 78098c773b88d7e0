//! What verifying a token answers: the claims it vouches for, or why it was refused.

use crate::ids::TenantId;

/// Why a token was refused. Display texts never contain the token.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
pub enum JwtError {
    #[error("malformed token: {0}")]
    Malformed(String),
    #[error("unsupported algorithm {0:?}: only RS256 and ES256 are accepted")]
    UnsupportedAlgorithm(String),
    #[error("the token's key {kid:?} is not in the issuer's JWKS")]
    UnknownKey { kid: String },
    #[error("bad signature")]
    BadSignature,
    #[error("the token expired at {expired_at} (epoch seconds)")]
    Expired { expired_at: i64 },
    #[error("the token is not valid yet")]
    NotYetValid,
    #[error("the token's issuer is {found:?}, not the configured one")]
    WrongIssuer { found: Option<String> },
    #[error("the token's audience is not one of the configured ones")]
    WrongAudience,
    #[error("the token has no {claim} claim")]
    NoTenantClaim { claim: String },
    #[error("the token's {claim} claim is not a valid tenant id: {reason}")]
    BadTenantClaim { claim: String, reason: String },
    #[error("the issuer's keys could not be fetched: {0}")]
    JwksUnavailable(String),
}

impl JwtError {
    /// True when the fault is ours or the identity provider's, not the caller's: the authorizer
    /// answers 500 (retry later) instead of 401.
    pub fn is_infrastructure(&self) -> bool {
        matches!(self, JwtError::JwksUnavailable(_))
    }
}

/// What a verified token says.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct VerifiedToken {
    pub tenant: TenantId,
    /// `sub`, when the token has one (a user id, for logs and the session).
    pub subject: Option<String>,
    /// `exp`, epoch seconds (without the leeway).
    pub expires_at: i64,
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn only_an_unreachable_jwks_is_infrastructure() {
        assert!(JwtError::JwksUnavailable("timeout".into()).is_infrastructure());
        assert!(!JwtError::BadSignature.is_infrastructure());
        assert!(!JwtError::UnknownKey { kid: "k".into() }.is_infrastructure());
    }
}
