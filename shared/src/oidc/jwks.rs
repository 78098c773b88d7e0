//! The issuer's signing keys: parsed from its JWKS and cached per process.
//!
//! When the cache fetches (decision 2101), times being the callers' `now`:
//! - no keys yet, or keys older than the TTL: fetch before answering;
//! - a `kid` missing from fresh keys (the issuer rotated, or the token is forged): fetch again, but
//!   at most once per [`UNKNOWN_KID_INTERVAL`] since the last attempt, so random kids cannot make us
//!   hammer the identity provider; otherwise `UnknownKey` without a call (`JwksUnavailable` if that
//!   last attempt failed: the kid may be new);
//! - after a failed fetch, no new attempt for [`FAILURE_BACKOFF`]: callers get the old keys if the
//!   `kid` is among them (a stale key beats refusing everyone while the IdP is down), otherwise
//!   `JwksUnavailable`.
//!
//! One fetch at a time: concurrent callers queue on one async lock and, once through, find the
//! keys the first one fetched.

use std::collections::HashMap;
use std::sync::{Arc, Mutex, MutexGuard};
use std::time::Duration;

use base64::engine::general_purpose::URL_SAFE_NO_PAD;
use base64::Engine;
use jsonwebtoken::{Algorithm, DecodingKey};
use serde::Deserialize;
use serde_json::Value;

use super::config::OidcConfig;
use super::fetch::Fetcher;
use super::outcome::JwtError;
use super::quote::quoted;
use crate::clock::Timestamp;

/// An unknown `kid` may trigger a fetch this long after the previous attempt.
pub const UNKNOWN_KID_INTERVAL: Duration = Duration::from_secs(60);
/// After a failed fetch, no new attempt for this long (callers would each wait for the timeout).
pub const FAILURE_BACKOFF: Duration = Duration::from_secs(5);
/// Keys kept from one JWKS; an issuer publishes two or three.
const MAX_KEYS: usize = 64;

/// One verification key and the one algorithm it may verify.
pub(crate) struct Key {
    pub kid: String,
    pub alg: Algorithm,
    pub decoding: DecodingKey,
}

/// The usable keys of one JWKS, by `kid`.
#[derive(Default)]
pub(crate) struct KeySet(HashMap<String, Arc<Key>>);

impl KeySet {
    fn get(&self, kid: &str) -> Option<Arc<Key>> {
        self.0.get(kid).cloned()
    }
}

#[derive(Deserialize)]
struct Document {
    keys: Vec<Value>,
}

/// The members of a JWK we read (RFC 7517/7518).
#[derive(Deserialize)]
struct RawKey {
    kty: String,
    kid: Option<String>,
    #[serde(rename = "use")]
    usage: Option<String>,
    alg: Option<String>,
    n: Option<String>,
    e: Option<String>,
    crv: Option<String>,
    x: Option<String>,
    y: Option<String>,
}

/// The RSA (2048-8192 bit) and P-256 signing keys of a JWKS; other keys are skipped, so an issuer
/// adding, say, an encryption key breaks nothing. An error if none is usable.
pub(crate) fn parse(body: &[u8]) -> Result<KeySet, String> {
    let doc: Document =
        serde_json::from_slice(body).map_err(|_| "the JWKS is not a JSON {\"keys\": [...]}")?;
    let mut keys = HashMap::new();
    for raw in doc.keys.into_iter().take(MAX_KEYS) {
        let key = serde_json::from_value::<RawKey>(raw)
            .map_err(|_| "not a JWK".to_string())
            .and_then(key);
        match key {
            // The first of two keys with one kid wins; the issuer's order is its preference.
            Ok(k) => {
                keys.entry(k.kid.clone()).or_insert_with(|| Arc::new(k));
            }
            Err(reason) => tracing::debug!(reason, "JWKS key skipped"),
        }
    }
    if keys.is_empty() {
        return Err("the JWKS has no RS256 or ES256 signing key with a kid".into());
    }
    Ok(KeySet(keys))
}

fn key(raw: RawKey) -> Result<Key, String> {
    let kid = raw.kid.filter(|k| !k.is_empty()).ok_or("no kid")?;
    let skip = |why: &str| format!("{}: {why}", quoted(&kid));
    if let Some(usage) = raw.usage.as_deref().filter(|u| *u != "sig") {
        return Err(skip(&format!("use {}", quoted(usage))));
    }
    let alg = match (raw.kty.as_str(), raw.crv.as_deref()) {
        ("RSA", _) => Algorithm::RS256,
        ("EC", Some("P-256")) => Algorithm::ES256,
        _ => return Err(skip("neither RSA nor EC P-256")),
    };
    // The key's `alg` may only confirm what its type implies (RFC 7517 4.4).
    if let Some(named) = raw.alg.as_deref() {
        if named != format!("{alg:?}") {
            return Err(skip(&format!("alg {}", quoted(named))));
        }
    }
    let bytes = |v: Option<String>, name: &str| {
        v.and_then(|s| URL_SAFE_NO_PAD.decode(s).ok())
            .ok_or_else(|| skip(&format!("{name} missing or not base64url")))
    };
    let decoding = if alg == Algorithm::RS256 {
        let n = bytes(raw.n, "n")?;
        let e = bytes(raw.e, "e")?;
        let bits = n.iter().skip_while(|b| **b == 0).count() * 8;
        if !(2048..=8192).contains(&bits) || e.is_empty() {
            return Err(skip("RSA modulus outside 2048-8192 bits"));
        }
        DecodingKey::from_rsa_raw_components(&n, &e)
    } else {
        let (x, y) = (bytes(raw.x, "x")?, bytes(raw.y, "y")?);
        if x.len() != 32 || y.len() != 32 {
            return Err(skip("P-256 coordinates are 32 bytes"));
        }
        let mut point = Vec::with_capacity(65);
        point.push(0x04);
        point.extend_from_slice(&x);
        point.extend_from_slice(&y);
        // An uncompressed SEC1 point, what `from_ec_components` builds.
        DecodingKey::from_ec_der(&point)
    };
    Ok(Key { kid, alg, decoding })
}

/// What the cache knows, and the one rule ([`State::plan`]) deciding whether to fetch.
#[derive(Default)]
struct State {
    keys: Option<Arc<KeySet>>,
    fetched_at: Timestamp,
    last_attempt: Option<Timestamp>,
    last_error: Option<String>,
}

enum Plan {
    Use(Arc<Key>),
    Unknown,
    Unavailable(String),
    Fetch,
}

impl Plan {
    fn answer(self, kid: &str) -> Result<Arc<Key>, JwtError> {
        match self {
            Plan::Use(k) => Ok(k),
            Plan::Unknown => Err(JwtError::UnknownKey { kid: quoted(kid) }),
            Plan::Unavailable(e) => Err(JwtError::JwksUnavailable(e)),
            Plan::Fetch => Err(JwtError::JwksUnavailable("no fetch was made".into())),
        }
    }
}

impl State {
    fn plan(&self, kid: &str, now: Timestamp, ttl: Duration) -> Plan {
        let found = self.keys.as_ref().and_then(|k| k.get(kid));
        let attempted_within = |d: Duration| self.last_attempt.is_some_and(|at| now < at.plus(d));
        if self.keys.is_some() && now < self.fetched_at.plus(ttl) {
            return match (found, &self.last_error) {
                (Some(k), _) => Plan::Use(k),
                (None, _) if !attempted_within(UNKNOWN_KID_INTERVAL) => Plan::Fetch,
                // The last look for a new key failed: we cannot say the kid is forged.
                (None, Some(e)) => Plan::Unavailable(e.clone()),
                (None, None) => Plan::Unknown,
            };
        }
        match (&self.last_error, found) {
            (Some(_), Some(stale)) if attempted_within(FAILURE_BACKOFF) => Plan::Use(stale),
            (Some(e), None) if attempted_within(FAILURE_BACKOFF) => Plan::Unavailable(e.clone()),
            _ => Plan::Fetch,
        }
    }

    /// Records a fetch made at `now`, then answers from what is known.
    fn record(&mut self, fetched: Result<KeySet, String>, kid: &str, now: Timestamp) -> Plan {
        self.last_attempt = Some(now);
        match fetched {
            Ok(keys) => {
                self.keys = Some(Arc::new(keys));
                self.fetched_at = now;
                self.last_error = None;
            }
            Err(e) => self.last_error = Some(e),
        }
        match (
            self.keys.as_ref().and_then(|k| k.get(kid)),
            &self.last_error,
        ) {
            (Some(k), _) => Plan::Use(k),
            (None, Some(e)) => Plan::Unavailable(e.clone()),
            (None, None) => Plan::Unknown,
        }
    }
}

/// The per-process key cache (module docs).
pub(crate) struct KeyCache {
    ttl: Duration,
    issuer: String,
    state: Mutex<State>,
    /// Held for the whole of a fetch: one at a time.
    fetcher: tokio::sync::Mutex<Fetcher>,
}

impl KeyCache {
    pub(crate) fn new(config: &OidcConfig) -> Self {
        KeyCache {
            ttl: config.jwks_ttl,
            issuer: config.issuer.clone(),
            state: Mutex::new(State::default()),
            fetcher: tokio::sync::Mutex::new(Fetcher::new(config)),
        }
    }

    fn state(&self) -> MutexGuard<'_, State> {
        // Every update is a few assignments that cannot panic half-way: a poisoned lock is usable.
        self.state.lock().unwrap_or_else(|p| p.into_inner())
    }

    /// The key named `kid`, fetching the JWKS first when [`State::plan`] says so.
    pub(crate) async fn key(&self, kid: &str, now: Timestamp) -> Result<Arc<Key>, JwtError> {
        if let plan @ (Plan::Use(_) | Plan::Unknown | Plan::Unavailable(_)) =
            self.state().plan(kid, now, self.ttl)
        {
            return plan.answer(kid);
        }
        let mut fetcher = self.fetcher.lock().await;
        // Whoever held the lock before us may have fetched what we need.
        let plan = self.state().plan(kid, now, self.ttl);
        if !matches!(plan, Plan::Fetch) {
            return plan.answer(kid);
        }
        let fetched = fetcher.jwks().await.and_then(|body| parse(&body));
        match &fetched {
            Ok(keys) => tracing::info!(issuer = %self.issuer, keys = keys.0.len(), "JWKS fetched"),
            Err(error) => tracing::warn!(issuer = %self.issuer, error, "JWKS fetch failed"),
        }
        let answer = self.state().record(fetched, kid, now);
        drop(fetcher);
        answer.answer(kid)
    }
}

#[cfg(test)]
mod tests {
    use serde_json::json;

    use super::*;

    // A 2048-bit modulus (all bytes 0xc3) and P-256 coordinates: the shapes, not real keys;
    // signatures are tested end to end in tests/integration/oidc.rs.
    fn n() -> String {
        URL_SAFE_NO_PAD.encode([0xc3u8; 256])
    }
    fn coord() -> String {
        URL_SAFE_NO_PAD.encode([7u8; 32])
    }

    fn jwks(keys: Value) -> Vec<u8> {
        json!({ "keys": keys }).to_string().into_bytes()
    }

    #[test]
    fn only_rsa_and_p256_signing_keys_with_a_kid_are_kept() {
        let set = parse(&jwks(json!([
            {"kty": "RSA", "kid": "r", "n": n(), "e": "AQAB", "alg": "RS256", "use": "sig"},
            {"kty": "EC", "kid": "e", "crv": "P-256", "x": coord(), "y": coord()},
            {"kty": "RSA", "kid": "r", "n": "AQAB", "e": "AQAB"},
            {"kty": "RSA", "kid": "enc", "n": n(), "e": "AQAB", "use": "enc"},
            {"kty": "RSA", "kid": "rs512", "n": n(), "e": "AQAB", "alg": "RS512"},
            {"kty": "RSA", "kid": "hs", "n": n(), "e": "AQAB", "alg": "HS256"},
            {"kty": "RSA", "kid": "small", "n": URL_SAFE_NO_PAD.encode([0xc3u8; 128]), "e": "AQAB"},
            {"kty": "RSA", "n": n(), "e": "AQAB"},
            {"kty": "EC", "kid": "p384", "crv": "P-384", "x": coord(), "y": coord()},
            {"kty": "EC", "kid": "short", "crv": "P-256", "x": "AQAB", "y": coord()},
            {"kty": "oct", "kid": "secret", "k": "c2VjcmV0"},
            {"kty": "OKP", "kid": "ed", "crv": "Ed25519", "x": coord()},
            {"kid": "no-kty"},
            "not an object",
            {"kty": "RSA", "kid": 5, "n": n(), "e": "AQAB"},
        ])))
        .unwrap();
        let mut kids: Vec<&str> = set.0.keys().map(String::as_str).collect();
        kids.sort();
        assert_eq!(kids, ["e", "r"]);
        assert_eq!(set.get("r").map(|k| k.alg), Some(Algorithm::RS256));
        assert_eq!(set.get("e").map(|k| k.alg), Some(Algorithm::ES256));
    }

    #[test]
    fn a_jwks_without_usable_keys_is_an_error() {
        for body in [
            b"".to_vec(),
            b"<html>".to_vec(),
            b"{\"keys\": 1}".to_vec(),
            jwks(json!([])),
            jwks(json!([{"kty": "oct", "kid": "s", "k": "c2VjcmV0"}])),
        ] {
            assert!(parse(&body).is_err());
        }
    }

    fn state_with(kids: &[&str], fetched_at: Timestamp) -> State {
        let set = parse(&jwks(json!(kids
            .iter()
            .map(|k| json!({"kty": "EC", "kid": k, "crv": "P-256", "x": coord(), "y": coord()}))
            .collect::<Vec<_>>())))
        .unwrap();
        State {
            keys: Some(Arc::new(set)),
            fetched_at,
            last_attempt: Some(fetched_at),
            last_error: None,
        }
    }

    fn is(p: &Plan) -> &'static str {
        match p {
            Plan::Use(_) => "use",
            Plan::Unknown => "unknown",
            Plan::Unavailable(_) => "unavailable",
            Plan::Fetch => "fetch",
        }
    }

    const TTL: Duration = Duration::from_secs(3600);

    #[test]
    fn plans_follow_the_refetch_policy() {
        let t0 = Timestamp::from_secs(1_700_000_000);
        let at = |s: u64| t0.plus(Duration::from_secs(s));
        assert_eq!(is(&State::default().plan("a", t0, TTL)), "fetch", "cold");
        let s = state_with(&["a"], t0);
        assert_eq!(is(&s.plan("a", at(3599), TTL)), "use");
        assert_eq!(is(&s.plan("a", at(3600), TTL)), "fetch", "stale");
        assert_eq!(
            is(&s.plan("b", at(59), TTL)),
            "unknown",
            "fetched <60 s ago"
        );
        assert_eq!(is(&s.plan("b", at(60), TTL)), "fetch");
        assert_eq!(
            is(&s.plan("a", t0.minus(Duration::from_secs(5)), TTL)),
            "use",
            "a caller's earlier now is not a reason to fetch"
        );
    }

    #[test]
    fn failures_back_off_and_serve_stale_keys_meanwhile() {
        let t0 = Timestamp::from_secs(1_700_000_000);
        let at = |s: u64| t0.plus(Duration::from_secs(s));
        let mut cold = State::default();
        assert_eq!(is(&cold.record(Err("down".into()), "a", t0)), "unavailable");
        assert_eq!(is(&cold.plan("a", at(4), TTL)), "unavailable");
        assert_eq!(is(&cold.plan("a", at(5), TTL)), "fetch");

        let mut s = state_with(&["a"], t0);
        assert_eq!(is(&s.record(Err("down".into()), "a", at(3600))), "use");
        assert_eq!(is(&s.plan("a", at(3604), TTL)), "use", "stale, backing off");
        assert_eq!(is(&s.plan("b", at(3604), TTL)), "unavailable");
        assert_eq!(is(&s.plan("a", at(3605), TTL)), "fetch");
        assert_eq!(
            is(&s.record(Ok(KeySet::default()), "a", at(3605))),
            "unknown"
        );
        assert_eq!(s.last_error, None);
        assert_eq!(s.fetched_at, at(3605));

        let mut fresh = state_with(&["a"], t0);
        assert_eq!(
            is(&fresh.record(Err("down".into()), "new", at(100))),
            "unavailable",
            "an unknown kid during an outage is not known to be forged"
        );
        assert_eq!(is(&fresh.plan("a", at(101), TTL)), "use");
        assert_eq!(is(&fresh.plan("new", at(159), TTL)), "unavailable");
        assert_eq!(is(&fresh.plan("new", at(160), TTL)), "fetch");
    }
}
