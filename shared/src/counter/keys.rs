//! Key formats of the counter ("Limit") table. Tenant, session and connection ids are validated
//! (`crate::ids`) and cannot contain `:`, so every key below has one parse and no id can reach
//! another tenant's rows: the segment count and the literal words tell the formats apart.
//!
//! | key | what it holds |
//! |---|---|
//! | `{tenant}` | the tenant's open connections (seed 003's count), and its per-minute window folded in (decision 0305) |
//! | `{tenant}:swept:{session}:{eventId}` | a TTL sweep already released: the stream record that did it (expires after the stream's retention) |
//!
//! The per-minute windows live on the `{tenant}` item and on the session item, and messages per
//! minute on the session item, so `$connect` writes two items and a message one; see
//! `docs/decisions/0305-connect-without-a-transaction.md` and `0303-message-counter-on-the-session.md`.

//!
//! Each builder passes its key through the key guard (`crate::isolation::key_in_tenant`) in debug
//! builds: a format that ever left the tenant's key space fails every test that builds it. Release
//! builds skip the check (the formats start with `{tenant}` or `{tenant}:` by construction, and
//! TenantRole's `dynamodb:LeadingKeys` condition enforces the same rule in IAM).

use crate::ids::{SessionId, TenantId};
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

/// `{tenant}:swept:{session}:{eventId}`: the tombstone of one TTL stream record, so its release
/// happens once however often the record is delivered. Four or more segments with the literal
/// `swept` second, so it can never equal `{tenant}`.
pub fn swept(t: &TenantId, s: &SessionId, event_id: &str) -> String {
    guarded(t, format!("{t}:swept:{s}:{event_id}"))
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn keys_follow_the_seed_and_cannot_collide() {
        let t = TenantId::parse("acme").unwrap();
        let s = SessionId::parse("s1").unwrap();
        assert_eq!(tenant_connections(&t), "acme");
        assert_eq!(swept(&t, &s, "ev-1"), "acme:swept:s1:ev-1");
        // Tenant "ab" never shares a key with tenant "abc": keys are compared whole, never by prefix.
        let ab = TenantId::parse("ab").unwrap();
        assert_ne!(tenant_connections(&ab), tenant_connections(&t));
        // Every format passes the key guard (and so TenantRole's LeadingKeys condition).
        for key in [tenant_connections(&ab), swept(&ab, &s, "e")] {
            crate::isolation::check_key(&ab, &key).unwrap();
        }
    }
}
