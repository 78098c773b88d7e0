//! The `$connect` JWT verifier (`shared::oidc`, docs/connect-jwt.md) against an identity provider
//! run by the test: RSA and P-256 key pairs generated at start (no private key is committed), the
//! OpenID configuration and the JWKS served by axum on 127.0.0.1:0, counting its requests. Time is
//! a fixed `now` moved by hand. No DynamoDB.

use std::net::TcpListener as StdListener;
use std::sync::atomic::{AtomicBool, AtomicUsize, Ordering};
use std::sync::{Arc, LazyLock, Mutex};
use std::time::Duration;

use aws_lc_rs::hmac;
use aws_lc_rs::rand::SystemRandom;
use aws_lc_rs::rsa::KeySize;
use aws_lc_rs::signature::{
    EcdsaKeyPair, KeyPair, RsaKeyPair, ECDSA_P256_SHA256_FIXED_SIGNING, RSA_PKCS1_SHA256,
};
use axum::extract::State;
use axum::http::StatusCode;
use axum::response::{IntoResponse, Response};
use axum::routing::get;
use axum::{Json, Router};
use base64::engine::general_purpose::URL_SAFE_NO_PAD;
use base64::Engine;
use proptest::prelude::*;
use serde_json::{json, Value};
use shared::clock::Timestamp;
use shared::fuzz;
use shared::oidc::{JwtError, OidcConfig, OidcVerifier, VerifiedToken};

const NOW: i64 = 1_700_000_000;
const AUDIENCE: &str = "app-client-1";
const CLAIM: &str = "custom:tenantId";
const TTL: Duration = Duration::from_secs(3600);

fn now() -> Timestamp {
    Timestamp::from_secs(NOW)
}

fn at(secs: u64) -> Timestamp {
    now().plus(Duration::from_secs(secs))
}

/// Test-only key pairs, generated once per test process.
struct Keys {
    rsa: RsaKeyPair,
    ec: EcdsaKeyPair,
    /// Not in the JWKS: a forger's key.
    stranger: RsaKeyPair,
    /// Served only by the tests that rotate keys.
    next_ec: EcdsaKeyPair,
}

static KEYS: LazyLock<Keys> = LazyLock::new(|| Keys {
    rsa: RsaKeyPair::generate(KeySize::Rsa2048).expect("an RSA key pair"),
    ec: EcdsaKeyPair::generate(&ECDSA_P256_SHA256_FIXED_SIGNING).expect("a P-256 key pair"),
    stranger: RsaKeyPair::generate(KeySize::Rsa2048).expect("an RSA key pair"),
    next_ec: EcdsaKeyPair::generate(&ECDSA_P256_SHA256_FIXED_SIGNING).expect("a P-256 key pair"),
});

fn b64(bytes: &[u8]) -> String {
    URL_SAFE_NO_PAD.encode(bytes)
}

fn rsa_jwk(pair: &RsaKeyPair, kid: &str) -> Value {
    let public = pair.public_key();
    json!({"kty": "RSA", "kid": kid, "alg": "RS256", "use": "sig",
           "n": b64(public.modulus().big_endian_without_leading_zero()),
           "e": b64(public.exponent().big_endian_without_leading_zero())})
}

/// Without `alg`, as some issuers publish them: the type implies ES256.
fn ec_jwk(pair: &EcdsaKeyPair, kid: &str) -> Value {
    let point = pair.public_key().as_ref();
    json!({"kty": "EC", "kid": kid, "crv": "P-256", "x": b64(&point[1..33]), "y": b64(&point[33..65])})
}

fn jwks() -> Value {
    json!({"keys": [rsa_jwk(&KEYS.rsa, "rsa-1"), ec_jwk(&KEYS.ec, "ec-1")]})
}

enum Signer<'a> {
    Rsa(&'a RsaKeyPair),
    Ec(&'a EcdsaKeyPair),
    Hmac(&'a [u8]),
    Nothing,
}

/// A compact JWS of `header` and `claims`, signed as told.
fn jwt(header: Value, claims: &Value, signer: Signer) -> String {
    let message = format!(
        "{}.{}",
        b64(header.to_string().as_bytes()),
        b64(claims.to_string().as_bytes())
    );
    let sig = match signer {
        Signer::Rsa(pair) => {
            let mut sig = vec![0; pair.public_modulus_len()];
            pair.sign(
                &RSA_PKCS1_SHA256,
                &SystemRandom::new(),
                message.as_bytes(),
                &mut sig,
            )
            .expect("RSA signing");
            sig
        }
        Signer::Ec(pair) => pair
            .sign(&SystemRandom::new(), message.as_bytes())
            .expect("ECDSA signing")
            .as_ref()
            .to_vec(),
        Signer::Hmac(secret) => hmac::sign(
            &hmac::Key::new(hmac::HMAC_SHA256, secret),
            message.as_bytes(),
        )
        .as_ref()
        .to_vec(),
        Signer::Nothing => Vec::new(),
    };
    format!("{message}.{}", b64(&sig))
}

fn rs256(claims: &Value) -> String {
    jwt(
        json!({"alg": "RS256", "kid": "rsa-1", "typ": "JWT"}),
        claims,
        Signer::Rsa(&KEYS.rsa),
    )
}

fn es256(claims: &Value) -> String {
    jwt(
        json!({"alg": "ES256", "kid": "ec-1"}),
        claims,
        Signer::Ec(&KEYS.ec),
    )
}

fn remove(claims: &mut Value, key: &str) {
    if let Some(m) = claims.as_object_mut() {
        m.remove(key);
    }
}

/// The identity provider: counts its requests; its JWKS can change, fail or stall.
#[derive(Clone)]
struct Idp {
    issuer: String,
    jwks: Arc<Mutex<Value>>,
    discovery_hits: Arc<AtomicUsize>,
    jwks_hits: Arc<AtomicUsize>,
    failing: Arc<AtomicBool>,
    stalling: Arc<AtomicBool>,
    /// What discovery says the issuer is (default: the real one).
    discovery_issuer: Arc<Mutex<Option<String>>>,
}

impl Idp {
    async fn start() -> Idp {
        let listener = tokio::net::TcpListener::bind("127.0.0.1:0").await.unwrap();
        let port = listener.local_addr().unwrap().port();
        let idp = Idp {
            issuer: format!("http://127.0.0.1:{port}/pool-1"),
            jwks: Arc::new(Mutex::new(jwks())),
            discovery_hits: Arc::default(),
            jwks_hits: Arc::default(),
            failing: Arc::default(),
            stalling: Arc::default(),
            discovery_issuer: Arc::default(),
        };
        let app = Router::new()
            .route("/pool-1/.well-known/openid-configuration", get(discovery))
            .route("/pool-1/jwks.json", get(serve_jwks))
            .with_state(idp.clone());
        tokio::spawn(async move { axum::serve(listener, app).await });
        idp
    }

    fn config(&self) -> OidcConfig {
        OidcConfig {
            issuer: self.issuer.clone(),
            audiences: vec!["another-client".into(), AUDIENCE.into()],
            tenant_claim: CLAIM.into(),
            jwks_url: None,
            jwks_ttl: TTL,
            leeway: Duration::from_secs(60),
        }
    }

    fn verifier(&self) -> OidcVerifier {
        OidcVerifier::new(self.config())
    }

    fn hits(&self) -> (usize, usize) {
        (
            self.discovery_hits.load(Ordering::SeqCst),
            self.jwks_hits.load(Ordering::SeqCst),
        )
    }

    fn claims(&self) -> Value {
        json!({"iss": self.issuer, "aud": AUDIENCE, "sub": "user-1", "token_use": "id",
               "iat": NOW - 10, "exp": NOW + 3600, CLAIM: "acme"})
    }

    fn claims_with(&self, key: &str, value: Value) -> Value {
        let mut c = self.claims();
        c[key] = value;
        c
    }
}

async fn discovery(State(idp): State<Idp>) -> Json<Value> {
    idp.discovery_hits.fetch_add(1, Ordering::SeqCst);
    let issuer = idp
        .discovery_issuer
        .lock()
        .unwrap()
        .clone()
        .unwrap_or(idp.issuer.clone());
    Json(
        json!({"issuer": issuer, "jwks_uri": format!("{}/jwks.json", idp.issuer),
                "id_token_signing_alg_values_supported": ["RS256"]}),
    )
}

async fn serve_jwks(State(idp): State<Idp>) -> Response {
    idp.jwks_hits.fetch_add(1, Ordering::SeqCst);
    if idp.stalling.load(Ordering::SeqCst) {
        std::future::pending::<()>().await;
    }
    if idp.failing.load(Ordering::SeqCst) {
        return (StatusCode::INTERNAL_SERVER_ERROR, "down").into_response();
    }
    let doc = idp.jwks.lock().unwrap().clone();
    Json(doc).into_response()
}

#[tokio::test]
async fn rs256_and_es256_tokens_give_their_tenant_and_subject() {
    let idp = Idp::start().await;
    let v = idp.verifier();
    let expected = VerifiedToken {
        tenant: "acme".parse().unwrap(),
        subject: Some("user-1".into()),
        expires_at: NOW + 3600,
    };
    assert_eq!(
        v.verify(&rs256(&idp.claims()), now()).await,
        Ok(expected.clone())
    );
    assert_eq!(v.verify(&es256(&idp.claims()), now()).await, Ok(expected));
    // An audience list, one of the configured audiences in it; no subject.
    let mut c = idp.claims_with("aud", json!(["someone-else", AUDIENCE]));
    remove(&mut c, "sub");
    c[CLAIM] = json!("tenant-2.eu_west");
    let t = v.verify(&es256(&c), now()).await.unwrap();
    assert_eq!((t.tenant.as_str(), t.subject), ("tenant-2.eu_west", None));
    assert_eq!(idp.hits(), (1, 1), "one discovery, one JWKS fetch");
}

#[tokio::test]
async fn exp_and_nbf_are_checked_against_the_given_now_with_the_leeway() {
    let idp = Idp::start().await;
    let v = idp.verifier();
    let exp = |e: i64| rs256(&idp.claims_with("exp", json!(e)));
    assert!(
        v.verify(&exp(NOW - 59), now()).await.is_ok(),
        "within leeway"
    );
    assert_eq!(
        v.verify(&exp(NOW - 60), now()).await,
        Err(JwtError::Expired {
            expired_at: NOW - 60
        })
    );
    // The same token, judged at another instant: only `now` decides, never the system clock.
    let token = exp(NOW + 100);
    assert!(v.verify(&token, at(159)).await.is_ok());
    assert_eq!(
        v.verify(&token, at(160)).await,
        Err(JwtError::Expired {
            expired_at: NOW + 100
        })
    );
    let nbf = |n: i64| es256(&idp.claims_with("nbf", json!(n)));
    assert!(
        v.verify(&nbf(NOW + 60), now()).await.is_ok(),
        "within leeway"
    );
    assert_eq!(
        v.verify(&nbf(NOW + 61), now()).await,
        Err(JwtError::NotYetValid)
    );
    let mut no_exp = idp.claims();
    remove(&mut no_exp, "exp");
    assert!(matches!(
        v.verify(&rs256(&no_exp), now()).await,
        Err(JwtError::Malformed(_))
    ));
}

#[tokio::test]
async fn issuer_audience_and_tenant_claims_are_refused_precisely() {
    let idp = Idp::start().await;
    let v = idp.verifier();
    let check = |c: Value| {
        let v = v.clone();
        async move { v.verify(&rs256(&c), now()).await }
    };
    assert_eq!(
        check(idp.claims_with("iss", json!("https://evil.example.com"))).await,
        Err(JwtError::WrongIssuer {
            found: Some("https://evil.example.com".into())
        })
    );
    assert_eq!(
        check(idp.claims_with("aud", json!("someone-else"))).await,
        Err(JwtError::WrongAudience)
    );
    assert_eq!(
        check(idp.claims_with("aud", json!([]))).await,
        Err(JwtError::WrongAudience)
    );
    let mut no_tenant = idp.claims();
    remove(&mut no_tenant, CLAIM);
    no_tenant["tenantId"] = json!("acme"); // not the configured claim
    assert_eq!(
        check(no_tenant).await,
        Err(JwtError::NoTenantClaim {
            claim: CLAIM.into()
        })
    );
    for bad in [
        json!("acme:other"),
        json!(""),
        json!("x".repeat(129)),
        json!(42),
    ] {
        let e = check(idp.claims_with(CLAIM, bad.clone())).await;
        assert!(
            matches!(&e, Err(JwtError::BadTenantClaim { claim, .. }) if claim == CLAIM),
            "{bad}: {e:?}"
        );
    }
}

#[tokio::test]
async fn forged_and_confused_tokens_are_refused_precisely() {
    let idp = Idp::start().await;
    let v = idp.verifier();
    let c = idp.claims();
    // Signed by a key the issuer never published, under a kid it does not have ...
    let stranger = jwt(
        json!({"alg": "RS256", "kid": "rsa-2"}),
        &c,
        Signer::Rsa(&KEYS.stranger),
    );
    assert_eq!(
        v.verify(&stranger, now()).await,
        Err(JwtError::UnknownKey {
            kid: "rsa-2".into()
        })
    );
    // ... or under a kid it has.
    let impostor = jwt(
        json!({"alg": "RS256", "kid": "rsa-1"}),
        &c,
        Signer::Rsa(&KEYS.stranger),
    );
    assert_eq!(
        v.verify(&impostor, now()).await,
        Err(JwtError::BadSignature)
    );
    // A valid token whose claims were edited after signing.
    let genuine = es256(&c);
    let edited = es256(&idp.claims_with(CLAIM, json!("victim")));
    let parts: Vec<&str> = genuine.split('.').collect();
    let other: Vec<&str> = edited.split('.').collect();
    let spliced = format!("{}.{}.{}", parts[0], other[1], parts[2]);
    assert_eq!(v.verify(&spliced, now()).await, Err(JwtError::BadSignature));
    // `alg: none`, with and without a signature.
    for sig in [Signer::Nothing, Signer::Rsa(&KEYS.rsa)] {
        let none = jwt(json!({"alg": "none", "kid": "rsa-1"}), &c, sig);
        assert_eq!(
            v.verify(&none, now()).await,
            Err(JwtError::UnsupportedAlgorithm("none".into()))
        );
    }
    // The classic confusion: HS256 keyed with the RSA public key (its DER and its JWK `n`).
    let public_der = KEYS.rsa.public_key().as_ref().to_vec();
    let n = rsa_jwk(&KEYS.rsa, "rsa-1")["n"]
        .as_str()
        .unwrap()
        .to_string();
    for secret in [public_der.as_slice(), n.as_bytes()] {
        let hs = jwt(
            json!({"alg": "HS256", "kid": "rsa-1"}),
            &c,
            Signer::Hmac(secret),
        );
        assert_eq!(
            v.verify(&hs, now()).await,
            Err(JwtError::UnsupportedAlgorithm("HS256".into()))
        );
    }
    // The header's algorithm must be the key's: ES256 claimed for the RSA key, and the reverse.
    let swapped = jwt(
        json!({"alg": "ES256", "kid": "rsa-1"}),
        &c,
        Signer::Ec(&KEYS.ec),
    );
    assert!(matches!(
        v.verify(&swapped, now()).await,
        Err(JwtError::UnsupportedAlgorithm(_))
    ));
    let swapped = jwt(
        json!({"alg": "RS256", "kid": "ec-1"}),
        &c,
        Signer::Rsa(&KEYS.rsa),
    );
    assert!(matches!(
        v.verify(&swapped, now()).await,
        Err(JwtError::UnsupportedAlgorithm(_))
    ));
    for alg in ["RS512", "PS256", "ES384", "EdDSA"] {
        let t = jwt(
            json!({"alg": alg, "kid": "rsa-1"}),
            &c,
            Signer::Rsa(&KEYS.rsa),
        );
        assert_eq!(
            v.verify(&t, now()).await,
            Err(JwtError::UnsupportedAlgorithm(alg.into()))
        );
    }
    assert_eq!(
        idp.hits(),
        (1, 1),
        "one fetch, at the first token with a kid"
    );
}

#[tokio::test]
async fn garbage_is_malformed_and_never_reaches_the_network() {
    let idp = Idp::start().await;
    let v = idp.verifier();
    let good = rs256(&idp.claims());
    let parts: Vec<&str> = good.split('.').collect();
    let garbage = [
        String::new(),
        "not a token".into(),
        "Bearer x.y.z".into(),
        "...".into(),
        "a.b".into(),
        format!("{good}.{}", parts[2]),
        format!("{}.{}", parts[0], parts[1]),
        format!("{}..{}", parts[0], parts[2]),
        format!("{good}="),
        good.replace('.', "%2E"),
        format!("{}.{}.{}", b64(b"{\"alg\":\"RS256\""), parts[1], parts[2]),
        format!("{}.{}.{}", b64(b"[1,2]"), parts[1], parts[2]),
        format!("{}.{}.{}", b64(b"{\"alg\":\"RS256\"}"), parts[1], parts[2]),
        "é.é.é".into(),
        "x".repeat(20_000),
        format!("{}.{}.{}", parts[0], "A".repeat(20_000), parts[2]),
    ];
    for g in &garbage {
        let e = v.verify(g, now()).await;
        assert!(matches!(e, Err(JwtError::Malformed(_))), "{g:.40}: {e:?}");
    }
    assert_eq!(idp.hits(), (0, 0));
    // A well-formed header over an undecodable payload: the signature is checked first.
    let t = format!("{}.{}.{}", parts[0], b64(b"not json"), parts[2]);
    assert_eq!(v.verify(&t, now()).await, Err(JwtError::BadSignature));
    // Signed, but the payload is not a JSON object.
    let t = jwt(
        json!({"alg": "RS256", "kid": "rsa-1"}),
        &json!([1, 2]),
        Signer::Rsa(&KEYS.rsa),
    );
    assert!(matches!(
        v.verify(&t, now()).await,
        Err(JwtError::Malformed(_))
    ));
}

#[tokio::test]
async fn the_jwks_is_fetched_once_for_many_verifications_and_callers_share_a_fetch() {
    let idp = Idp::start().await;
    let v = idp.verifier();
    let (rs, es) = (rs256(&idp.claims()), es256(&idp.claims()));
    for i in 0..50 {
        let t = if i % 2 == 0 { &rs } else { &es };
        assert!(v.verify(t, at(i)).await.is_ok());
    }
    assert_eq!(idp.hits(), (1, 1));

    // A cold verifier (its clones share its cache) asked by 20 callers at once.
    let idp = Idp::start().await;
    let v = idp.verifier();
    let calls = (0..20).map(|i| {
        let (v, t) = (
            v.clone(),
            if i % 2 == 0 {
                rs256(&idp.claims())
            } else {
                es256(&idp.claims())
            },
        );
        tokio::spawn(async move { v.verify(&t, now()).await })
    });
    for r in futures::future::join_all(calls).await {
        assert!(r.unwrap().is_ok());
    }
    assert_eq!(idp.hits(), (1, 1), "concurrent callers share one fetch");
}

#[tokio::test]
async fn the_jwks_is_refetched_after_its_ttl_and_discovery_is_not() {
    let idp = Idp::start().await;
    let v = idp.verifier();
    let t = rs256(&idp.claims_with("exp", json!(NOW + 10 * 3600)));
    assert!(v.verify(&t, now()).await.is_ok());
    assert!(v.verify(&t, at(3599)).await.is_ok());
    assert_eq!(idp.hits(), (1, 1));
    assert!(v.verify(&t, at(3600)).await.is_ok());
    assert_eq!(idp.hits(), (1, 2), "stale after the TTL");
    assert!(v.verify(&t, at(3601)).await.is_ok());
    assert_eq!(idp.hits(), (1, 2));
}

#[tokio::test]
async fn an_unknown_kid_refetches_at_most_once_a_minute_and_picks_up_rotated_keys() {
    let idp = Idp::start().await;
    let v = idp.verifier();
    let c = idp.claims();
    assert!(v.verify(&rs256(&c), now()).await.is_ok());
    assert_eq!(idp.hits(), (1, 1));

    // The issuer rotates: a new key appears in its JWKS.
    idp.jwks
        .lock()
        .unwrap()
        .get_mut("keys")
        .and_then(Value::as_array_mut)
        .unwrap()
        .push(ec_jwk(&KEYS.next_ec, "ec-2"));
    let rotated = jwt(
        json!({"alg": "ES256", "kid": "ec-2"}),
        &c,
        Signer::Ec(&KEYS.next_ec),
    );
    let unknown = JwtError::UnknownKey { kid: "ec-2".into() };
    assert_eq!(v.verify(&rotated, at(59)).await, Err(unknown));
    assert_eq!(idp.hits(), (1, 1), "the last fetch was under a minute ago");
    assert!(v.verify(&rotated, at(60)).await.is_ok());
    assert_eq!(idp.hits(), (1, 2), "one refetch found the new key");

    // Random kids: at most one fetch a minute, however many tokens.
    let forged = |i: u64| {
        jwt(
            json!({"alg": "RS256", "kid": format!("random-{i}")}),
            &c,
            Signer::Rsa(&KEYS.stranger),
        )
    };
    for i in 0..100 {
        assert!(matches!(
            v.verify(&forged(i), at(61 + i)).await,
            Err(JwtError::UnknownKey { .. })
        ));
    }
    assert_eq!(idp.hits(), (1, 3), "one refetch at 120 s, none before");
    assert!(v.verify(&rotated, at(161)).await.is_ok());
    assert_eq!(idp.hits(), (1, 3));
}

#[tokio::test]
async fn an_unreachable_jwks_is_unavailable_which_is_infrastructure() {
    // A port nobody listens on.
    let port = StdListener::bind("127.0.0.1:0")
        .unwrap()
        .local_addr()
        .unwrap()
        .port();
    let mut config = Idp::start().await.config();
    config.jwks_url = Some(format!("http://127.0.0.1:{port}/jwks.json"));
    let v = OidcVerifier::new(config.clone());
    let token =
        rs256(&json!({"iss": config.issuer, "aud": AUDIENCE, "exp": NOW + 60, CLAIM: "acme"}));
    let e = v.verify(&token, now()).await.unwrap_err();
    assert!(
        matches!(&e, JwtError::JwksUnavailable(m) if m.contains(&port.to_string())),
        "{e}"
    );
    assert!(e.is_infrastructure());
    assert!(!e.to_string().contains(&token), "{e}");
    // Through discovery, to an issuer that is not there.
    config.issuer = format!("http://127.0.0.1:{port}");
    config.jwks_url = None;
    let e = OidcVerifier::new(config).verify(&token, now()).await;
    assert!(matches!(e, Err(JwtError::JwksUnavailable(_))), "{e:?}");
}

#[tokio::test]
async fn an_outage_serves_the_old_keys_and_backs_off() {
    let idp = Idp::start().await;
    let v = idp.verifier();
    let t = es256(&idp.claims_with("exp", json!(NOW + 10 * 3600)));
    assert!(v.verify(&t, now()).await.is_ok());
    idp.failing.store(true, Ordering::SeqCst);
    // Stale, and the refetch fails: the key it had still verifies.
    assert!(v.verify(&t, at(3600)).await.is_ok());
    assert_eq!(idp.hits(), (1, 2));
    assert!(v.verify(&t, at(3604)).await.is_ok());
    let e = v.verify(&rs256(&idp.claims()), at(3604)).await;
    assert!(e.is_ok(), "{e:?}: rsa-1 was in the old keys too");
    let forged = jwt(
        json!({"alg": "RS256", "kid": "new"}),
        &idp.claims(),
        Signer::Rsa(&KEYS.stranger),
    );
    let e = v.verify(&forged, at(3604)).await.unwrap_err();
    assert!(e.is_infrastructure(), "{e}");
    assert_eq!(idp.hits(), (1, 2), "5 s of backoff after a failure");
    idp.failing.store(false, Ordering::SeqCst);
    assert!(v.verify(&t, at(3605)).await.is_ok());
    assert_eq!(idp.hits(), (1, 3));

    // A cold verifier during an outage has nothing to serve.
    idp.failing.store(true, Ordering::SeqCst);
    let cold = idp.verifier();
    let e = cold.verify(&t, now()).await.unwrap_err();
    assert!(
        matches!(&e, JwtError::JwksUnavailable(m) if m.contains("HTTP 500")),
        "{e}"
    );
}

#[tokio::test]
async fn a_configured_jwks_url_skips_discovery() {
    let idp = Idp::start().await;
    let mut config = idp.config();
    config.jwks_url = Some(format!("{}/jwks.json", idp.issuer));
    let v = OidcVerifier::new(config);
    assert!(v.verify(&rs256(&idp.claims()), now()).await.is_ok());
    assert_eq!(idp.hits(), (0, 1));
}

#[tokio::test]
async fn discovery_must_name_the_configured_issuer() {
    let idp = Idp::start().await;
    *idp.discovery_issuer.lock().unwrap() = Some("https://evil.example.com".into());
    let e = idp.verifier().verify(&rs256(&idp.claims()), now()).await;
    assert!(
        matches!(&e, Err(JwtError::JwksUnavailable(m)) if m.contains("evil.example.com")),
        "{e:?}"
    );
    assert_eq!(idp.hits(), (1, 0));
}

/// Waits the real fetch timeout (3 s): the one limit that is not on the injected clock.
#[tokio::test]
async fn a_stalled_jwks_fetch_times_out() {
    let idp = Idp::start().await;
    idp.stalling.store(true, Ordering::SeqCst);
    let started = std::time::Instant::now();
    let e = idp.verifier().verify(&rs256(&idp.claims()), now()).await;
    assert!(
        matches!(&e, Err(JwtError::JwksUnavailable(m)) if m.contains("no answer within")),
        "{e:?}"
    );
    assert!(started.elapsed() < Duration::from_secs(10));
}

/// One identity provider and verifier for the property tests, on a runtime of their own.
struct Fixture {
    runtime: tokio::runtime::Runtime,
    idp: Idp,
    verifier: OidcVerifier,
    valid: Vec<String>,
}

static FIXTURE: LazyLock<Fixture> = LazyLock::new(|| {
    let runtime = tokio::runtime::Builder::new_multi_thread()
        .worker_threads(1)
        .enable_all()
        .build()
        .expect("a runtime");
    let idp = runtime.block_on(Idp::start());
    let verifier = idp.verifier();
    let c = idp.claims();
    let valid = vec![rs256(&c), es256(&c)];
    for t in &valid {
        assert!(runtime.block_on(verifier.verify(t, now())).is_ok());
    }
    Fixture {
        runtime,
        idp,
        verifier,
        valid,
    }
});

/// How a valid token is damaged.
#[derive(Debug, Clone)]
enum Damage {
    Replace(prop::sample::Index, char),
    Insert(prop::sample::Index, char),
    Delete(prop::sample::Index),
    Truncate(prop::sample::Index),
    /// Part `i` of the token replaced by part `j` of the other valid token.
    Splice(usize, usize),
    Append(String),
}

fn damage() -> impl Strategy<Value = Damage> {
    let c = prop::sample::select(
        "ABCDEFGHIJKLMNOPQRSTUVWXYZabcdefghijklmnopqrstuvwxyz0123456789-_.=+/ %"
            .chars()
            .collect::<Vec<_>>(),
    );
    prop_oneof![
        (any::<prop::sample::Index>(), c.clone()).prop_map(|(i, c)| Damage::Replace(i, c)),
        (any::<prop::sample::Index>(), c).prop_map(|(i, c)| Damage::Insert(i, c)),
        any::<prop::sample::Index>().prop_map(Damage::Delete),
        any::<prop::sample::Index>().prop_map(Damage::Truncate),
        (0..3usize, 0..3usize).prop_map(|(i, j)| Damage::Splice(i, j)),
        fuzz::text().prop_map(Damage::Append),
    ]
}

fn apply(token: &str, other: &str, d: &Damage) -> String {
    let mut chars: Vec<char> = token.chars().collect();
    match d {
        Damage::Replace(i, c) => {
            let i = i.index(chars.len());
            chars[i] = *c;
        }
        Damage::Insert(i, c) => chars.insert(i.index(chars.len() + 1), *c),
        Damage::Delete(i) => {
            chars.remove(i.index(chars.len()));
        }
        Damage::Truncate(i) => chars.truncate(i.index(chars.len())),
        Damage::Splice(i, j) => {
            let mut parts: Vec<&str> = token.split('.').collect();
            let theirs: Vec<&str> = other.split('.').collect();
            parts[*i] = theirs[*j];
            return parts.join(".");
        }
        Damage::Append(s) => return format!("{token}{s}"),
    }
    chars.into_iter().collect()
}

/// True when no 16-character stretch of `token` appears in `text`.
fn quotes_nothing_of(text: &str, token: &str) -> bool {
    let chars: Vec<char> = token.chars().collect();
    chars
        .windows(16)
        .all(|w| !text.contains(&w.iter().collect::<String>()))
}

proptest! {
    #![proptest_config(fuzz::config(2))]

    /// `fuzz_jwt_strings`: any string (arbitrary text, or three base64url-ish parts) is refused
    /// with a typed error, without a panic, and the error does not quote it.
    #[test]
    fn fuzz_jwt_strings(
        s in prop_oneof![
            fuzz::text(),
            "[A-Za-z0-9_-]{0,60}\\.[A-Za-z0-9_-]{0,60}\\.[A-Za-z0-9_-]{0,60}",
            "eyJ[A-Za-z0-9_-]{0,40}\\.eyJ[A-Za-z0-9_-]{0,80}\\.[A-Za-z0-9_-]{0,90}",
        ],
    ) {
        let f = &*FIXTURE;
        let e = f.runtime.block_on(f.verifier.verify(&s, now()));
        prop_assert!(e.is_err(), "{:?} verified", s);
        if let Err(e) = e {
            prop_assert!(quotes_nothing_of(&e.to_string(), &s), "{}", e);
        }
    }

    /// `fuzz_damaged_tokens`: a valid RS256 or ES256 token with a character replaced, inserted or
    /// deleted, cut short, a part swapped for another token's, or text appended never verifies,
    /// and the refusal does not quote it.
    #[test]
    fn fuzz_damaged_tokens(which in 0..2usize, d in damage()) {
        let f = &*FIXTURE;
        let (token, other) = (&f.valid[which], &f.valid[1 - which]);
        let damaged = apply(token, other, &d);
        prop_assume!(damaged != *token);
        let e = f.runtime.block_on(f.verifier.verify(&damaged, now()));
        prop_assert!(e.is_err(), "{:?} still verified", d);
        if let Err(e) = e {
            prop_assert!(!e.is_infrastructure(), "{}", e);
            prop_assert!(quotes_nothing_of(&e.to_string(), &damaged), "{}", e);
        }
    }

    /// `fuzz_signed_claims`: any claims (valid ones mutated, or arbitrary JSON), properly signed:
    /// what verifies names the configured issuer and an audience, is not expired, and carries the
    /// tenant claim as given; the rest is a typed refusal.
    #[test]
    fn fuzz_signed_claims(
        claims in prop_oneof![
            3 => fuzz::mutated(FIXTURE.idp.claims()),
            1 => fuzz::json_with_keys(&["iss", "aud", "exp", "nbf", "sub", CLAIM]),
        ],
        ec in any::<bool>(),
    ) {
        let f = &*FIXTURE;
        let token = if ec { es256(&claims) } else { rs256(&claims) };
        match f.runtime.block_on(f.verifier.verify(&token, now())) {
            Ok(t) => {
                prop_assert_eq!(claims["iss"].as_str(), Some(f.idp.issuer.as_str()));
                prop_assert_eq!(claims[CLAIM].as_str(), Some(t.tenant.as_str()));
                prop_assert_eq!(claims["sub"].as_str(), t.subject.as_deref());
                prop_assert!(t.expires_at > NOW - 60);
                let aud = &claims["aud"];
                prop_assert!(aud == AUDIENCE || aud.as_array().is_some_and(|a| a.iter().any(|x| x == AUDIENCE)));
            }
            Err(e) => prop_assert!(!e.is_infrastructure(), "{}", e),
        }
    }
}

/// The authorizer end to end for a `jwt` tenant (against DynamoDB Local, the IdP above): the
/// token's tenant claim is the tenant, the session comes from the query, the subject reaches
/// `$connect`; a token for another tenant, for a ticket tenant, or one that fails verification is
/// refused, the last with no DynamoDB call; the JWKS is fetched once for all of it.
#[tokio::test]
async fn the_authorizer_admits_a_jwt_tenant_by_its_token_and_nobody_else() {
    use crate::ws_support::{authorizer_event, World, SMALL};
    use shared::clock::Clock;
    use shared::tenant::ConnectAuth;

    let idp = Idp::start().await;
    let w = World::new().await;
    let state = authorizer::init(&w.function_deps(&[
        ("TURNSTILE_CONNECT_JWT_ISSUER", idp.issuer.as_str()),
        ("TURNSTILE_CONNECT_JWT_AUDIENCE", AUDIENCE),
        ("TURNSTILE_CONNECT_JWT_TENANT_CLAIM", CLAIM),
    ]))
    .await
    .expect("the authorizer starts with an issuer configured");
    let jwt_tenant = SMALL.with_connect_auth(ConnectAuth::Jwt);
    w.put_tenant("acme", jwt_tenant).await;
    w.put_tenant("globex", jwt_tenant).await;
    w.put_tenant("initech", SMALL).await; // `ticket`, the default
    for t in ["acme", "globex", "initech"] {
        w.put_session(t, "s1").await;
    }
    let now = w.env.clock.now().as_secs() as i64;
    let token_for = |tenant: &str| {
        let mut c = idp.claims_with(CLAIM, json!(tenant));
        c["iat"] = json!(now - 10);
        c["exp"] = json!(now + 600);
        c
    };
    let run = |query: Vec<(&'static str, String)>| {
        let w = &w;
        let state = &state;
        async move {
            w.env.counter.reset();
            let q: Vec<(&str, &str)> = query.iter().map(|(k, v)| (*k, v.as_str())).collect();
            let r = authorizer::handle(w.deps(), state, authorizer_event(&q))
                .await
                .expect("the authorizer answers");
            (r, w.env.counter.total())
        }
    };

    // RS256 and ES256 tokens for acme admit to acme's session; the subject travels on.
    for token in [rs256(&token_for("acme")), es256(&token_for("acme"))] {
        let (r, _) = run(vec![("token", token), ("sessionId", "s1".into())]).await;
        assert_eq!(authorizer::decision(&r), authorizer::Decision::Allow);
        assert_eq!(r.context["tenantId"], "acme");
        assert_eq!(r.context["subject"], "user-1");
        assert_eq!(r.context["connectAuth"], "jwt");
    }
    // Naming the token's own tenant is fine; naming another is refused before any call.
    let (r, _) = run(vec![
        ("token", rs256(&token_for("acme"))),
        ("tenantId", "acme".into()),
        ("sessionId", "s1".into()),
    ])
    .await;
    assert_eq!(authorizer::decision(&r), authorizer::Decision::Allow);
    let (r, calls) = run(vec![
        ("token", rs256(&token_for("acme"))),
        ("tenantId", "globex".into()),
        ("sessionId", "s1".into()),
    ])
    .await;
    assert!(
        matches!(authorizer::decision(&r), authorizer::Decision::Deny(ref m) if m.contains("not the tenantId")),
        "{r:?}"
    );
    assert_eq!(calls, 0);
    // A tenant that takes tickets does not take a token, even a valid one for it.
    let (r, _) = run(vec![
        ("token", rs256(&token_for("initech"))),
        ("sessionId", "s1".into()),
    ])
    .await;
    assert!(
        matches!(authorizer::decision(&r), authorizer::Decision::Deny(ref m) if m.contains("ticket")),
        "{r:?}"
    );
    // Forged, expired and wrong-audience tokens: refused with no DynamoDB call.
    let forged = jwt(
        json!({"alg": "RS256", "kid": "rsa-1"}),
        &token_for("acme"),
        Signer::Rsa(&KEYS.stranger),
    );
    let mut expired = token_for("acme");
    expired["exp"] = json!(now - 3600);
    let mut other_audience = token_for("acme");
    other_audience["aud"] = json!("someone-else");
    for token in [forged, es256(&expired), rs256(&other_audience)] {
        let (r, calls) = run(vec![("token", token.clone()), ("sessionId", "s1".into())]).await;
        match authorizer::decision(&r) {
            authorizer::Decision::Deny(reason) => {
                assert!(quotes_nothing_of(&reason, &token), "{reason}")
            }
            d => panic!("admitted a bad token: {d:?}"),
        }
        assert_eq!(calls, 0, "a bad token costs no DynamoDB call");
    }
    // One discovery and one JWKS fetch served every verification above.
    assert_eq!(idp.hits(), (1, 1));
}
