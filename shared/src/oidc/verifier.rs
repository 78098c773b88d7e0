//! The verifier's configuration, its errors, and the verifier itself.

use std::sync::Arc;

use crate::clock::Timestamp;

use super::config::OidcConfig;
use super::outcome::{JwtError, VerifiedToken};

/// Verifies `$connect` tokens; clones share one JWKS cache, so build one per process (in the
/// Lambda's state) and clone it freely.
#[derive(Clone)]
pub struct OidcVerifier {
    pub(super) inner: Arc<Inner>,
}

pub(super) struct Inner {
    pub(super) config: OidcConfig,
    pub(super) keys: super::jwks::KeyCache,
}

impl std::fmt::Debug for OidcVerifier {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("OidcVerifier")
            .field("config", &self.inner.config)
            .finish_non_exhaustive()
    }
}

impl OidcVerifier {
    /// No I/O: the JWKS is fetched by the first [`OidcVerifier::verify`] that needs it.
    pub fn new(config: OidcConfig) -> Self {
        let keys = super::jwks::KeyCache::new(&config);
        OidcVerifier {
            inner: Arc::new(Inner { config, keys }),
        }
    }

    pub fn config(&self) -> &OidcConfig {
        &self.inner.config
    }

    /// The token's tenant and subject, or why it is refused. Malformed tokens and refused
    /// algorithms never reach the network; a JWKS fetch happens on a cold or stale cache, or for an
    /// unknown `kid` at most once a minute ([`super::jwks::KeyCache`]).
    pub async fn verify(&self, token: &str, now: Timestamp) -> Result<VerifiedToken, JwtError> {
        let header = super::token::header(token)?;
        let key = self.inner.keys.key(&header.kid, now).await?;
        let claims = super::token::verified_claims(token, &header, &key)?;
        super::token::check_claims(&self.inner.config, &claims, now)
    }
}
