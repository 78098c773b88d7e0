//! A ticket's claims, minting and verifying it.

use super::keys::{random_token, KeyError, KeySet};
use std::time::Duration;

use base64::engine::general_purpose::URL_SAFE_NO_PAD as B64;
use base64::Engine as _;
use serde::{Deserialize, Serialize};

use crate::ids::{SessionId, TenantId};

/// The version prefix of every ticket this code mints.
pub const VERSION: &str = "tst1";
/// The query parameter a ticket may come in.
pub const QUERY_PARAM: &str = "ticket";
/// The subprotocol a browser offers first (`new WebSocket(url, ["turnstile", ticket])`); `$connect`
/// answers it, as the WebSocket handshake requires, and never echoes the ticket.
pub const SUBPROTOCOL: &str = "turnstile";
/// Longer input is refused before it is split.
pub const MAX_LEN: usize = 1024;
/// How long a ticket lives unless the session API is told otherwise.
pub const DEFAULT_TTL: Duration = Duration::from_secs(60);
/// The longest lifetime `TURNSTILE_TICKET_TTL_SECS` accepts: a ticket is a bearer grant.
pub const MAX_TTL: Duration = Duration::from_secs(3600);
/// Seconds a ticket is still taken after its expiry: the clocks of two Lambda hosts differ by
/// milliseconds (both follow Amazon Time Sync), so this only absorbs a second boundary.
pub const LEEWAY_SECS: i64 = 5;
/// The longest subject (a user id) a ticket carries.
pub const MAX_SUBJECT_LEN: usize = 128;
/// The `$connect`s a ticket admits unless its minter asks for more (a backend may, up to the
/// tenant's `connectionsPerSession`): a leaked ticket takes one slot, not the session.
pub const DEFAULT_CONNECTS: u64 = 1;
/// The longest ticket id accepted (the session API makes 22 characters).
pub const MAX_ID_LEN: usize = 64;

/// What a ticket grants.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Claims {
    pub tenant: TenantId,
    pub session: SessionId,
    /// The session row's `sessionNonce` when the ticket was minted.
    pub nonce: String,
    /// Epoch seconds after which the ticket is refused.
    pub expires_at: i64,
    /// Who the ticket was minted for, passed to the handlers: a JWT caller's `sub`, or what a
    /// backend named.
    pub subject: Option<String>,
    /// This ticket's random id ([`new_id`]): `$connect` counts the ticket's uses under it.
    pub id: String,
    /// How many `$connect`s (distinct connection ids) the ticket admits, at least 1.
    pub connects: u64,
}

/// What `$connect` needs to count a ticket's uses: its id, how many it admits, and until when
/// (the count outlives the ticket, never the other way round).
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct TicketUse {
    pub id: String,
    pub connects: u64,
    pub expires_at: i64,
}

impl Claims {
    /// What `$connect` counts this ticket's uses by.
    pub fn ticket_use(&self) -> TicketUse {
        TicketUse {
            id: self.id.clone(),
            connects: self.connects,
            expires_at: self.expires_at,
        }
    }
}

/// A new ticket id: 128 random bits, base64url (22 characters).
pub fn new_id() -> Result<String, KeyError> {
    random_token(16)
}

/// Whether `id` can be a ticket id: 1 to [`MAX_ID_LEN`] base64url characters (so it is one
/// segment of a counter key, and no other key's).
pub fn valid_ticket_id(id: &str) -> bool {
    !id.is_empty()
        && id.len() <= MAX_ID_LEN
        && id
            .bytes()
            .all(|b| b.is_ascii_alphanumeric() || b == b'-' || b == b'_')
}

/// The signed JSON: short names, nothing else accepted.
#[derive(Serialize, Deserialize)]
#[serde(deny_unknown_fields)]
pub(super) struct Wire {
    pub(super) t: String,
    pub(super) s: String,
    pub(super) n: String,
    pub(super) e: i64,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub(super) u: Option<String>,
    pub(super) i: String,
    pub(super) c: u64,
}

/// Why a ticket is refused. The messages are safe to log: none holds any part of the ticket except
/// a key id, which is a name, not a secret.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
pub enum TicketError {
    #[error("the ticket is malformed: {0}")]
    Malformed(&'static str),
    #[error(
        "the ticket is signed with key {kid:?}, which is not a live key (retired, or never issued)"
    )]
    UnknownKey { kid: String },
    #[error("the ticket's signature does not match (forged or altered)")]
    BadSignature,
    #[error("the ticket expired {ago_secs} s ago")]
    Expired { ago_secs: i64 },
}

/// Checks a subject before it is signed: it reaches the handlers' context and their logs.
pub fn check_subject(subject: &str) -> Result<(), String> {
    if subject.is_empty() || subject.len() > MAX_SUBJECT_LEN {
        return Err(format!("subject must be 1 to {MAX_SUBJECT_LEN} bytes long"));
    }
    if subject.chars().any(|c| c.is_control() || c.is_whitespace()) {
        return Err("subject must not contain spaces or control characters".into());
    }
    Ok(())
}

/// Signs `claims` with the set's signing key.
pub fn mint(keys: &KeySet, claims: &Claims) -> String {
    let key = keys.signing();
    let wire = Wire {
        t: claims.tenant.to_string(),
        s: claims.session.to_string(),
        n: claims.nonce.clone(),
        e: claims.expires_at,
        u: claims.subject.clone(),
        i: claims.id.clone(),
        c: claims.connects,
    };
    // Serialising a struct of strings and an integer cannot fail.
    let json = serde_json::to_vec(&wire).unwrap_or_default();
    let signed = format!("{VERSION}.{}.{}", key.id(), B64.encode(json));
    let tag = key.sign(signed.as_bytes());
    format!("{signed}.{}", B64.encode(tag))
}

/// The claims of `ticket` when one of `keys` signed it and it has not expired at `now_secs`.
pub fn verify(keys: &KeySet, ticket: &str, now_secs: i64) -> Result<Claims, TicketError> {
    if ticket.len() > MAX_LEN {
        return Err(TicketError::Malformed("longer than 1024 characters"));
    }
    let mut parts = ticket.split('.');
    let (Some(version), Some(kid), Some(payload), Some(tag), None) = (
        parts.next(),
        parts.next(),
        parts.next(),
        parts.next(),
        parts.next(),
    ) else {
        return Err(TicketError::Malformed("expected four dot-separated parts"));
    };
    if version != VERSION {
        return Err(TicketError::Malformed("unknown version (expected tst1)"));
    }
    if !super::keys::valid_id(kid) {
        return Err(TicketError::Malformed("the key id is not a key id"));
    }
    let Some(key) = keys.get(kid) else {
        return Err(TicketError::UnknownKey {
            kid: kid.to_string(),
        });
    };
    let tag = B64
        .decode(tag)
        .map_err(|_| TicketError::Malformed("the signature is not base64url"))?;
    let signed_len = version.len() + kid.len() + payload.len() + 2;
    if !key.verify(&ticket.as_bytes()[..signed_len], &tag) {
        return Err(TicketError::BadSignature);
    }
    // Signed by us: what follows only fails for a ticket minted by an incompatible version.
    let json = B64
        .decode(payload)
        .map_err(|_| TicketError::Malformed("the claims are not base64url"))?;
    let wire: Wire = serde_json::from_slice(&json)
        .map_err(|_| TicketError::Malformed("the claims are not the expected JSON"))?;
    let claims = Claims {
        tenant: TenantId::parse(&wire.t)
            .map_err(|_| TicketError::Malformed("the tenant is not a tenant id"))?,
        session: SessionId::parse(&wire.s)
            .map_err(|_| TicketError::Malformed("the session is not a session id"))?,
        nonce: wire.n,
        expires_at: wire.e,
        subject: wire.u,
        id: wire.i,
        connects: wire.c,
    };
    if !valid_ticket_id(&claims.id) {
        return Err(TicketError::Malformed("the ticket id is not a ticket id"));
    }
    if claims.connects == 0 {
        return Err(TicketError::Malformed("the ticket admits no connect"));
    }
    if now_secs > claims.expires_at.saturating_add(LEEWAY_SECS) {
        return Err(TicketError::Expired {
            ago_secs: now_secs - claims.expires_at,
        });
    }
    Ok(claims)
}

/// A short, stable, non-reversible name for a secret-ish value (a session id that grants entry, a
/// ticket) in logs: the first 12 hex digits of its SHA-256.
pub fn fingerprint(value: &str) -> String {
    let d = aws_lc_rs::digest::digest(&aws_lc_rs::digest::SHA256, value.as_bytes());
    d.as_ref()[..6].iter().map(|b| format!("{b:02x}")).collect()
}

#[cfg(test)]
mod tests {
    use super::*;

    fn claims(expires_at: i64) -> Claims {
        Claims {
            tenant: TenantId::parse("acme").unwrap(),
            session: SessionId::parse("s1").unwrap(),
            nonce: "n0".into(),
            expires_at,
            subject: Some("user-7".into()),
            id: "tk-1".into(),
            connects: 1,
        }
    }

    fn keys(json: &str) -> KeySet {
        KeySet::parse_json(json).unwrap()
    }

    const K1: &str = r#"{"id":"k1","secret":"0123456789abcdef0123456789abcdef"}"#;
    const K2: &str = r#"{"id":"k2","secret":"fedcba9876543210fedcba9876543210"}"#;

    #[test]
    fn a_minted_ticket_verifies_until_it_expires() {
        let k = keys(K1);
        let t = mint(&k, &claims(1_000));
        assert!(t.starts_with("tst1.k1."), "{t}");
        assert_eq!(verify(&k, &t, 999), Ok(claims(1_000)));
        assert_eq!(verify(&k, &t, 1_000 + LEEWAY_SECS), Ok(claims(1_000)));
        assert_eq!(
            verify(&k, &t, 1_010),
            Err(TicketError::Expired { ago_secs: 10 })
        );
    }

    #[test]
    fn another_key_an_altered_claim_or_a_bad_shape_is_refused() {
        let (k1, k2) = (keys(K1), keys(K2));
        let t = mint(&k1, &claims(1_000));
        assert_eq!(
            verify(&k2, &t, 0),
            Err(TicketError::UnknownKey { kid: "k1".into() })
        );
        // Same key id, another secret: a forgery.
        let forged = keys(r#"{"id":"k1","secret":"ffffffffffffffffffffffffffffffff"}"#);
        assert_eq!(
            verify(&k1, &mint(&forged, &claims(1_000)), 0),
            Err(TicketError::BadSignature)
        );
        // Claims swapped from another ticket under the first ticket's signature.
        let other = mint(
            &k1,
            &Claims {
                session: SessionId::parse("s2").unwrap(),
                ..claims(1_000)
            },
        );
        let p: Vec<&str> = t.split('.').collect();
        let q: Vec<&str> = other.split('.').collect();
        let spliced = format!("{}.{}.{}.{}", p[0], p[1], q[2], p[3]);
        assert_eq!(verify(&k1, &spliced, 0), Err(TicketError::BadSignature));
        for bad in [
            "",
            "tst1",
            "tst1.k1.x",
            "tst2.k1.e30.AA",
            "tst1.k1.e30.AA.x",
        ] {
            assert!(
                matches!(verify(&k1, bad, 0), Err(TicketError::Malformed(_))),
                "{bad}"
            );
        }
        assert!(matches!(
            verify(&k1, &"a".repeat(MAX_LEN + 1), 0),
            Err(TicketError::Malformed(_))
        ));
    }

    #[test]
    fn a_rotated_set_verifies_both_live_keys_and_signs_with_the_first() {
        let old = keys(K1);
        let t_old = mint(&old, &claims(1_000));
        let staged = old.with_new_key().unwrap();
        // Staged: the new key verifies, the old one still signs.
        assert_eq!(staged.signing().id(), "k1");
        let promoted = staged.promoted();
        let new_id = promoted.signing().id().to_string();
        assert_ne!(new_id, "k1");
        let t_new = mint(&promoted, &claims(1_000));
        assert!(verify(&promoted, &t_old, 0).is_ok());
        assert!(verify(&promoted, &t_new, 0).is_ok());
        let retired = promoted.retired();
        assert!(verify(&retired, &t_new, 0).is_ok());
        assert_eq!(
            verify(&retired, &t_old, 0),
            Err(TicketError::UnknownKey { kid: "k1".into() })
        );
    }

    #[test]
    fn subjects_are_short_printable_names() {
        assert!(check_subject("auth0|5f7c8ec7").is_ok());
        assert!(check_subject("").is_err());
        assert!(check_subject("a b").is_err());
        assert!(check_subject(&"x".repeat(MAX_SUBJECT_LEN + 1)).is_err());
    }

    #[test]
    fn fingerprints_are_short_and_stable() {
        assert_eq!(fingerprint("s1"), fingerprint("s1"));
        assert_ne!(fingerprint("s1"), fingerprint("s2"));
        assert_eq!(fingerprint("s1").len(), 12);
    }
}
