//! Connect tickets (decision 2100): a short-lived grant to open WebSocket connections on one
//! session of one tenant, signed with HMAC-SHA256 by the session API and checked by the `$connect`
//! authorizer with no DynamoDB call.
//!
//! Wire form, four dot-separated parts, every one of them URL- and subprotocol-safe:
//!
//! ```text
//! tst1.{key id}.{base64url(JSON claims)}.{base64url(HMAC-SHA256(key, "tst1.{key id}.{claims}"))}
//! ```
//!
//! The claims name the tenant, the session, the session's nonce (fixed when its row is created, so
//! a ticket outlives neither a delete nor a re-create of the same name), the expiry (epoch
//! seconds), an optional subject the handlers see in the authorizer context, the ticket's own
//! random id and how many `$connect`s it may admit (counted by id on `$connect`: decision 3607). A
//! client presents it as the second entry of `Sec-WebSocket-Protocol: turnstile, <ticket>`, or as
//! the `ticket` query parameter where its tenant allows that (`ticketInQuery`).
//!
//! Verification order: length, shape, version, key id, signature (constant time), and only then the
//! claims: nothing an attacker writes is parsed as JSON before its signature holds. No error names
//! any part of the ticket but the key id.

mod keys;
pub mod presented;
#[cfg(feature = "tickets")]
pub mod source;
pub use keys::{random_token, KeyError, KeySet, TicketKey, KEYS_VAR};
pub use presented::{Credential, Presented};
mod claims;

pub use claims::*;
