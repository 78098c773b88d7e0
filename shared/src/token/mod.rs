//! Fungible tokens, as rate-limiter-py keeps them: a token bucket per (resource, account).
//!
//! [`bucket`] is the refill arithmetic; [`FungibleLimiter`] the DynamoDB side: direct
//! ([`FungibleLimiter::get_token`]), scoped ([`FungibleLimiter::with_token`]) and a Lambda handler
//! wrapper ([`FungibleLimiter::guard`]). Design: `docs/decisions/0100-fungible-tokens.md`.

pub mod bucket;
mod limiter;
pub use limiter::{
    account_at, shards_from_vars, Decision, FungibleLimiter, Guarded, Source, TokenError,
};
mod schema;

pub use schema::*;
