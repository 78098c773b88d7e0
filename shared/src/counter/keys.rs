//! Key formats of the counter ("Limit") table. Tenant, session and connection ids are validated
//! (`crate::ids`) and cannot contain `:`, so every key below has one parse and no id can reach
//! another tenant's rows: the segment count and the literal words tell the formats apart.
//!
//! | key | what it holds |
//! |---|---|
//! | `{tenant}` | the tenant's open connections, and its per-minute window folded in (decision 0306) |
//! | `{tenant}:shard:{i}` | shard `i` of a tenant with `connectionShards` > 1: its share of the open connections and of the minute (decision 1502) |
//! | `{tenant}:swept:{session}:{eventId}` | a TTL sweep already released: the stream record that did it (expires after the stream's retention) |
//! | `{tenant}:sessions` | the tenant's session count, under its `maxSessions` (decision 2204) |
//! | `{tenant}:subject:{hash}` | one signed-in user's session count, under `maxSessionsPerSubject`; `hash` is the base64url SHA-256 of the user's `sub` (decision 3602) |
//! | `{tenant}:ticket:{ticketId}` | the connection ids a connect ticket admitted, under its `connects` (expires after the ticket; decision 3607) |
//!
//! The per-minute windows live on the `{tenant}` item and on the session item, and messages per
//! minute on the session item, so `$connect` writes two items and a message one; see
//! `docs/decisions/0306-connect-without-a-transaction.md` and `0303-message-counter-on-the-session.md`.
//! (Before 0306 the table also held `{tenant}:minute:{m}`, `{tenant}:{session}:minute:{m}`,
//! `{tenant}:gcra:minute`, `{tenant}:{session}:gcra:minute` and `{tenant}:conn:{cid}` rows.)
//!
//! Each builder passes its key through the key guard (`crate::isolation::check_key`) in every build,
//! release included, and returns the guard's typed error instead of a key outside the tenant: a
//! format that ever left the tenant's key space fails the request (a logged 500-class answer),
//! never reaches DynamoDB, and never panics. The check is a prefix comparison on a short string; it
//! makes no call. TenantRole's `dynamodb:LeadingKeys` condition enforces the same rule in IAM.

use crate::ids::{SessionId, TenantId};
use crate::isolation::{check_key, CrossTenantKey};

/// A counter key, or the key guard's refusal.
pub type Key = Result<String, CrossTenantKey>;

/// The key guard on a built key, on the production path (not a `debug_assert`).
fn guarded(t: &TenantId, key: String) -> Key {
    check_key(t, &key).map(|()| key)
}

/// `{tenant}`: open connections of the tenant.
pub fn tenant_connections(t: &TenantId) -> Key {
    guarded(t, t.to_string())
}

/// `{tenant}:shard:{i}`: shard `i` of a sharded tenant's open connections (decision 1502). Three
/// segments with the literal `shard` second: never `{tenant}` nor a tombstone.
pub fn connection_shard(t: &TenantId, i: u64) -> Key {
    guarded(t, format!("{t}:shard:{i}"))
}

/// `{tenant}:swept:{session}:{eventId}`: the tombstone of one TTL stream record, so its release
/// happens once however often the record is delivered. Four or more segments with the literal
/// `swept` second, so it can never equal `{tenant}`.
pub fn swept(t: &TenantId, s: &SessionId, event_id: &str) -> Key {
    guarded(t, format!("{t}:swept:{s}:{event_id}"))
}

/// `{tenant}:sessions`: how many session rows the tenant holds (decision 2204). Two segments with
/// the literal `sessions` second: never `{tenant}` (one), a shard (three) nor a tombstone (four).
pub fn sessions(t: &TenantId) -> Key {
    guarded(t, format!("{t}:sessions"))
}

/// `{tenant}:subject:{hash}`: how many sessions the signed-in user `subject` (a JWT `sub`) holds
/// (decision 3602). The subject is hashed (SHA-256, base64url, 43 characters): a `sub` may hold
/// any character, `:` included, and a hash is one segment of a fixed alphabet. Three segments
/// with the literal `subject` second: no other format.
pub fn subject_sessions(t: &TenantId, subject: &str) -> Key {
    use base64::Engine as _;
    let d = aws_lc_rs::digest::digest(&aws_lc_rs::digest::SHA256, subject.as_bytes());
    let hash = base64::engine::general_purpose::URL_SAFE_NO_PAD.encode(d.as_ref());
    guarded(t, format!("{t}:subject:{hash}"))
}

/// `{tenant}:ticket:{ticketId}`: the uses of one connect ticket (decision 3607). `id` is a ticket
/// id (`crate::ticket::valid_ticket_id`: base64url, no `:`). Three segments with the literal
/// `ticket` second: no other format.
pub fn ticket_uses(t: &TenantId, id: &str) -> Key {
    guarded(t, format!("{t}:ticket:{id}"))
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn keys_follow_the_seed_and_cannot_collide() -> Result<(), CrossTenantKey> {
        let t = TenantId::parse("acme").unwrap();
        let s = SessionId::parse("s1").unwrap();
        assert_eq!(tenant_connections(&t)?, "acme");
        assert_eq!(swept(&t, &s, "ev-1")?, "acme:swept:s1:ev-1");
        assert_eq!(connection_shard(&t, 3)?, "acme:shard:3");
        assert_eq!(sessions(&t)?, "acme:sessions");
        assert_eq!(ticket_uses(&t, "tk-1")?, "acme:ticket:tk-1");
        // A subject is hashed into one segment, whatever it holds.
        let odd = subject_sessions(&t, "auth0|a:b/c")?;
        assert!(odd.starts_with("acme:subject:"), "{odd}");
        assert_eq!(odd.split(':').count(), 3, "{odd}");
        assert_ne!(odd, subject_sessions(&t, "auth0|a:b/d")?);
        // Tenant "ab" never shares a key with tenant "abc": keys are compared whole, never by prefix.
        let ab = TenantId::parse("ab").unwrap();
        assert_ne!(tenant_connections(&ab)?, tenant_connections(&t)?);
        // Every format passes the key guard (and so TenantRole's LeadingKeys condition).
        for key in [
            tenant_connections(&ab)?,
            swept(&ab, &s, "e")?,
            sessions(&ab)?,
            subject_sessions(&ab, "u")?,
            ticket_uses(&ab, "k")?,
        ] {
            crate::isolation::check_key(&ab, &key).unwrap();
        }
        Ok(())
    }

    /// The guard runs on the production path: a key outside the tenant is a typed error in every
    /// build (not a `debug_assert`, which release builds skip), and never a panic.
    #[test]
    fn a_forged_key_is_refused_in_every_build() {
        let ab = TenantId::parse("ab").unwrap();
        for forged in ["abc", "abc:minute:60", "xab:conn:c", "", ":ab", "AB:conn:c"] {
            let r = std::panic::catch_unwind(|| guarded(&ab, forged.to_string()));
            let err = r
                .expect("the guard never panics")
                .expect_err("a key outside the tenant is refused");
            assert_eq!(err.tenant, "ab");
            assert_eq!(err.key, forged);
        }
        assert_eq!(guarded(&ab, "ab:conn:c".into()).unwrap(), "ab:conn:c");
        // The error converts into the library's own variant (mapped to a 500 by the handlers).
        let e: crate::Error = guarded(&ab, "abc".into()).unwrap_err().into();
        assert!(matches!(e, crate::Error::CrossTenantKey(_)), "{e:?}");
    }
}
