//! OIDC JWTs for the WebSocket `$connect` authorizer (tenants with `connectAuth: jwt`,
//! docs/connect-jwt.md): a browser presents its identity provider's ID token and the tenant comes from
//! a claim, not from the query string.
//!
//! [`OidcVerifier::verify`] checks, in order: the token's shape and header ([`token`]), its key in
//! the issuer's JWKS ([`jwks`], fetched over HTTPS by [`fetch`] and cached per process), the
//! signature (RS256 or ES256, as the key says), then `iss`, `aud`, `exp`, `nbf` and the tenant claim.
//! Time is the caller's `now` (the injected clock), never the system clock. No DynamoDB call.
//!
//! Errors never carry the token; only short, sanitised claim values (an issuer, an algorithm name).

mod config;
mod fetch;
mod jwks;
mod outcome;
mod quote;
mod token;
mod verifier;

pub use config::*;
pub use outcome::*;
pub use verifier::*;
