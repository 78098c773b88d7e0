//! Key formats of the counter ("Limit") table. Tenant, session and connection ids are validated
//! (`crate::ids`) and cannot contain `:`, so every key below has one parse and no id can reach
//! another tenant's rows: the segment count and the literal words tell the formats apart.
//!
//! | key | what it counts |
//! |---|---|
//! | `{tenant}` | the tenant's open connections (seed 003) |
//! | `{tenant}:minute:{minStart}` | connections opened by the tenant in that minute (seed 003) |
//! | `{tenant}:{session}:minute:{minStart}` | connections opened by the session in that minute (seed 003) |
//! | `{tenant}:conn:{connectionId}` | one open connection; its deletion releases the capacity once |
//! | `{tenant}:gcra:minute` | the tenant's per-minute GCRA bucket (`rateAlgorithm = gcra`, decision 0304) |
//! | `{tenant}:{session}:gcra:minute` | the session's per-minute GCRA bucket (same) |
//!
//! Messages per minute are counted on the session item itself (`msgMinute`/`msgCount`), so a
//! message costs one call; see `docs/decisions/0303-message-counter-on-the-session.md`.

//!
//! Each builder passes its key through the key guard (`crate::isolation::check_key`) in every build,
//! release included, and returns the guard's typed error instead of a key outside the tenant: a
//! format that ever left the tenant's key space fails the request (a logged 500-class answer),
//! never reaches DynamoDB, and never panics. The check is a prefix comparison on a short string; it
//! makes no call. TenantRole's `dynamodb:LeadingKeys` condition enforces the same rule in IAM.

use crate::ids::{ConnectionId, SessionId, TenantId};
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

/// `{tenant}:minute:{minStart}`.
pub fn tenant_minute(t: &TenantId, min_start: i64) -> Key {
    guarded(t, format!("{t}:minute:{min_start}"))
}

/// `{tenant}:{session}:minute:{minStart}`.
pub fn session_minute(t: &TenantId, s: &SessionId, min_start: i64) -> Key {
    guarded(t, format!("{t}:{s}:minute:{min_start}"))
}

/// `{tenant}:gcra:minute`: the tenant's per-minute bucket when it uses GCRA. Three segments like
/// `{tenant}:conn:{cid}` and `{tenant}:minute:{m}`, told apart by the literal middle word.
pub fn tenant_gcra_minute(t: &TenantId) -> Key {
    guarded(t, format!("{t}:gcra:minute"))
}

/// `{tenant}:{session}:gcra:minute`: the session's per-minute bucket. Four segments like
/// `{tenant}:{session}:minute:{m}`, whose third segment is always `minute`, never `gcra`.
pub fn session_gcra_minute(t: &TenantId, s: &SessionId) -> Key {
    guarded(t, format!("{t}:{s}:gcra:minute"))
}

/// `{tenant}:conn:{connectionId}`.
pub fn connection(t: &TenantId, c: &ConnectionId) -> Key {
    guarded(t, format!("{t}:conn:{c}"))
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn keys_follow_the_seed_and_cannot_collide() -> Result<(), CrossTenantKey> {
        let t = TenantId::parse("acme").unwrap();
        let s = SessionId::parse("s1").unwrap();
        let c = ConnectionId::parse("L0SM9cOFvHcCIhw=").unwrap();
        assert_eq!(tenant_connections(&t)?, "acme");
        assert_eq!(tenant_minute(&t, 1_700_000_040)?, "acme:minute:1700000040");
        assert_eq!(
            session_minute(&t, &s, 1_700_000_040)?,
            "acme:s1:minute:1700000040"
        );
        assert_eq!(connection(&t, &c)?, "acme:conn:L0SM9cOFvHcCIhw=");
        assert_eq!(tenant_gcra_minute(&t)?, "acme:gcra:minute");
        assert_eq!(session_gcra_minute(&t, &s)?, "acme:s1:gcra:minute");
        // A session called "gcra" cannot produce the tenant bucket's key or a fixed window's.
        let gcra = SessionId::parse("gcra").unwrap();
        assert_ne!(session_gcra_minute(&t, &gcra)?, tenant_gcra_minute(&t)?);
        assert_ne!(
            session_gcra_minute(&t, &gcra)?,
            session_minute(&t, &gcra, 60)?
        );
        // A session called "conn" or "minute" still yields a 4-segment key, never a 3-segment one.
        let conn = SessionId::parse("conn").unwrap();
        assert_eq!(session_minute(&t, &conn, 60)?.split(':').count(), 4);
        assert_eq!(connection(&t, &c)?.split(':').count(), 3);
        // Tenant "ab" never shares a key with tenant "abc": keys are compared whole, never by prefix.
        let ab = TenantId::parse("ab").unwrap();
        assert_ne!(tenant_connections(&ab)?, tenant_connections(&t)?);
        // Every format passes the key guard (and so TenantRole's LeadingKeys condition).
        for key in [
            tenant_connections(&ab)?,
            tenant_minute(&ab, 60)?,
            session_minute(&ab, &conn, 60)?,
            connection(&ab, &c)?,
            tenant_gcra_minute(&ab)?,
            session_gcra_minute(&ab, &conn)?,
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
