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
//! Each builder passes its key through the key guard (`crate::isolation::key_in_tenant`) in debug
//! builds: a format that ever left the tenant's key space fails every test that builds it. Release
//! builds skip the check (the formats start with `{tenant}` or `{tenant}:` by construction, and
//! TenantRole's `dynamodb:LeadingKeys` condition enforces the same rule in IAM).

use crate::ids::{ConnectionId, SessionId, TenantId};
use crate::isolation::key_in_tenant;

/// The key guard on a built key (debug builds only; no cost in release).
fn guarded(t: &TenantId, key: String) -> String {
    debug_assert!(
        key_in_tenant(t, &key),
        "counter key {key:?} is outside tenant {t:?}"
    );
    key
}

/// `{tenant}`: open connections of the tenant.
pub fn tenant_connections(t: &TenantId) -> String {
    guarded(t, t.to_string())
}

/// `{tenant}:minute:{minStart}`.
pub fn tenant_minute(t: &TenantId, min_start: i64) -> String {
    guarded(t, format!("{t}:minute:{min_start}"))
}

/// `{tenant}:{session}:minute:{minStart}`.
pub fn session_minute(t: &TenantId, s: &SessionId, min_start: i64) -> String {
    guarded(t, format!("{t}:{s}:minute:{min_start}"))
}

/// `{tenant}:gcra:minute`: the tenant's per-minute bucket when it uses GCRA. Three segments like
/// `{tenant}:conn:{cid}` and `{tenant}:minute:{m}`, told apart by the literal middle word.
pub fn tenant_gcra_minute(t: &TenantId) -> String {
    guarded(t, format!("{t}:gcra:minute"))
}

/// `{tenant}:{session}:gcra:minute`: the session's per-minute bucket. Four segments like
/// `{tenant}:{session}:minute:{m}`, whose third segment is always `minute`, never `gcra`.
pub fn session_gcra_minute(t: &TenantId, s: &SessionId) -> String {
    guarded(t, format!("{t}:{s}:gcra:minute"))
}

/// `{tenant}:conn:{connectionId}`.
pub fn connection(t: &TenantId, c: &ConnectionId) -> String {
    guarded(t, format!("{t}:conn:{c}"))
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn keys_follow_the_seed_and_cannot_collide() {
        let t = TenantId::parse("acme").unwrap();
        let s = SessionId::parse("s1").unwrap();
        let c = ConnectionId::parse("L0SM9cOFvHcCIhw=").unwrap();
        assert_eq!(tenant_connections(&t), "acme");
        assert_eq!(tenant_minute(&t, 1_700_000_040), "acme:minute:1700000040");
        assert_eq!(
            session_minute(&t, &s, 1_700_000_040),
            "acme:s1:minute:1700000040"
        );
        assert_eq!(connection(&t, &c), "acme:conn:L0SM9cOFvHcCIhw=");
        assert_eq!(tenant_gcra_minute(&t), "acme:gcra:minute");
        assert_eq!(session_gcra_minute(&t, &s), "acme:s1:gcra:minute");
        // A session called "gcra" cannot produce the tenant bucket's key or a fixed window's.
        let gcra = SessionId::parse("gcra").unwrap();
        assert_ne!(session_gcra_minute(&t, &gcra), tenant_gcra_minute(&t));
        assert_ne!(
            session_gcra_minute(&t, &gcra),
            session_minute(&t, &gcra, 60)
        );
        // A session called "conn" or "minute" still yields a 4-segment key, never a 3-segment one.
        let conn = SessionId::parse("conn").unwrap();
        assert_eq!(session_minute(&t, &conn, 60).split(':').count(), 4);
        assert_eq!(connection(&t, &c).split(':').count(), 3);
        // Tenant "ab" never shares a key with tenant "abc": keys are compared whole, never by prefix.
        let ab = TenantId::parse("ab").unwrap();
        assert_ne!(tenant_connections(&ab), tenant_connections(&t));
        // Every format passes the key guard (and so TenantRole's LeadingKeys condition).
        for key in [
            tenant_connections(&ab),
            tenant_minute(&ab, 60),
            session_minute(&ab, &conn, 60),
            connection(&ab, &c),
            tenant_gcra_minute(&ab),
            session_gcra_minute(&ab, &conn),
        ] {
            crate::isolation::check_key(&ab, &key).unwrap();
        }
    }
}
