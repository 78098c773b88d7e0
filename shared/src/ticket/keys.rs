//! The keys tickets are signed with. A key set is JSON, as Secrets Manager stores it: one key
//! `{"id": "k1", "secret": "..."}` (what the template's generated secret holds at first) or
//! `{"keys": [{...}, {...}]}`, where the first key signs and every key verifies. Rotation moves
//! through three sets, each live in every container before the next is written (decision 2100):
//! `[old, new]` (new verifies), `[new, old]` (new signs, old tickets still pass), `[new]`.

use std::fmt;

use aws_lc_rs::hmac;
use base64::engine::general_purpose::URL_SAFE_NO_PAD as B64;
use base64::Engine as _;
use serde::{Deserialize, Serialize};

/// The key set itself, inline (local runs and tests; deployments use a Secrets Manager secret).
pub const KEYS_VAR: &str = "TURNSTILE_TICKET_KEYS";
/// The shortest secret accepted, in bytes (256 bits of base64url text carry 192 bits; the
/// template's generated secret has 64 alphanumerics, ~380 bits).
pub const MIN_SECRET_LEN: usize = 32;
/// At most this many live keys: two in a rotation, three while one is staged.
pub const MAX_KEYS: usize = 3;

#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
pub enum KeyError {
    #[error("the ticket key set is not JSON of the expected shape ({{\"id\", \"secret\"}} or {{\"keys\": [...]}}): {0}")]
    Shape(String),
    #[error("the ticket key set is empty")]
    Empty,
    #[error("the ticket key set has {0} keys; at most {MAX_KEYS} may be live")]
    TooMany(usize),
    #[error("ticket key id {0:?} must be 1 to 32 letters, digits, '-' or '_'")]
    BadId(String),
    #[error("ticket key {0:?} appears twice")]
    Duplicate(String),
    #[error("ticket key {id:?} has a {len}-byte secret; at least {MIN_SECRET_LEN} are required")]
    ShortSecret { id: String, len: usize },
    #[error("the system random source failed")]
    Random,
}

/// Key ids travel in tickets and logs: short names, subprotocol-safe.
pub(super) fn valid_id(id: &str) -> bool {
    (1..=32).contains(&id.len())
        && id
            .chars()
            .all(|c| c.is_ascii_alphanumeric() || c == '-' || c == '_')
}

/// One signing key. Its secret never leaves this type (Debug shows the id only).
#[derive(Clone)]
pub struct TicketKey {
    id: String,
    secret: String,
    hmac: hmac::Key,
}

impl fmt::Debug for TicketKey {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.debug_struct("TicketKey").field("id", &self.id).finish()
    }
}

impl PartialEq for TicketKey {
    fn eq(&self, other: &Self) -> bool {
        self.id == other.id && self.secret == other.secret
    }
}

impl TicketKey {
    pub fn new(id: &str, secret: &str) -> Result<TicketKey, KeyError> {
        if !valid_id(id) {
            return Err(KeyError::BadId(id.to_string()));
        }
        if secret.len() < MIN_SECRET_LEN {
            return Err(KeyError::ShortSecret {
                id: id.to_string(),
                len: secret.len(),
            });
        }
        Ok(TicketKey {
            id: id.to_string(),
            secret: secret.to_string(),
            hmac: hmac::Key::new(hmac::HMAC_SHA256, secret.as_bytes()),
        })
    }

    pub fn id(&self) -> &str {
        &self.id
    }

    pub(super) fn sign(&self, data: &[u8]) -> Vec<u8> {
        hmac::sign(&self.hmac, data).as_ref().to_vec()
    }

    /// Constant time, as `hmac::verify` compares.
    pub(super) fn verify(&self, data: &[u8], tag: &[u8]) -> bool {
        hmac::verify(&self.hmac, data, tag).is_ok()
    }
}

#[derive(Serialize, Deserialize)]
#[serde(deny_unknown_fields)]
struct WireKey {
    id: String,
    secret: String,
}

#[derive(Deserialize)]
#[serde(untagged)]
enum WireSet {
    Many { keys: Vec<WireKey> },
    One(WireKey),
}

/// Live keys, the first signing.
#[derive(Debug, Clone, PartialEq)]
pub struct KeySet {
    keys: Vec<TicketKey>,
}

impl KeySet {
    pub fn new(keys: Vec<TicketKey>) -> Result<KeySet, KeyError> {
        if keys.is_empty() {
            return Err(KeyError::Empty);
        }
        if keys.len() > MAX_KEYS {
            return Err(KeyError::TooMany(keys.len()));
        }
        for (i, k) in keys.iter().enumerate() {
            if keys[..i].iter().any(|o| o.id == k.id) {
                return Err(KeyError::Duplicate(k.id.clone()));
            }
        }
        Ok(KeySet { keys })
    }

    /// Parses the JSON a secret holds. Errors never quote a secret.
    pub fn parse_json(text: &str) -> Result<KeySet, KeyError> {
        let wire: WireSet = serde_json::from_str(text).map_err(|e| {
            // serde's message may quote input at the error's position: keep only its location.
            KeyError::Shape(format!("at line {} column {}", e.line(), e.column()))
        })?;
        let keys = match wire {
            WireSet::Many { keys } => keys,
            WireSet::One(k) => vec![k],
        };
        KeySet::new(
            keys.iter()
                .map(|k| TicketKey::new(&k.id, &k.secret))
                .collect::<Result<_, _>>()?,
        )
    }

    /// A fresh one-key set with a random 256-bit secret (the local stack; `turnstile tickets`).
    pub fn generate(id: &str) -> Result<KeySet, KeyError> {
        KeySet::new(vec![TicketKey::new(id, &random_token(32)?)?])
    }

    /// The key new tickets are signed with.
    pub fn signing(&self) -> &TicketKey {
        &self.keys[0]
    }

    pub fn get(&self, id: &str) -> Option<&TicketKey> {
        self.keys.iter().find(|k| k.id == id)
    }

    pub fn ids(&self) -> Vec<&str> {
        self.keys.iter().map(|k| k.id.as_str()).collect()
    }

    /// Rotation step 1: a new random key after the live ones (it verifies; the first still signs).
    /// Its id is the next free `k{n}`.
    pub fn with_new_key(&self) -> Result<KeySet, KeyError> {
        let id = (1..)
            .map(|n| format!("k{n}"))
            .find(|id| self.get(id).is_none())
            .unwrap_or_else(|| "k0".into());
        let mut keys = self.keys.clone();
        keys.push(TicketKey::new(&id, &random_token(32)?)?);
        KeySet::new(keys)
    }

    /// Rotation step 2: the last key signs; the others still verify.
    pub fn promoted(&self) -> KeySet {
        let mut keys = self.keys.clone();
        keys.rotate_right(1);
        KeySet { keys }
    }

    /// Rotation step 3: only the signing key stays.
    pub fn retired(&self) -> KeySet {
        KeySet {
            keys: vec![self.keys[0].clone()],
        }
    }

    /// The JSON form, secrets included: for the secret's value only, never for a log.
    pub fn to_json(&self) -> String {
        let keys: Vec<WireKey> = self
            .keys
            .iter()
            .map(|k| WireKey {
                id: k.id.clone(),
                secret: k.secret.clone(),
            })
            .collect();
        serde_json::json!({ "keys": keys }).to_string()
    }
}

/// `bytes` random bytes from the system CSPRNG, as base64url text (also a valid session id).
pub fn random_token(bytes: usize) -> Result<String, KeyError> {
    let mut buf = vec![0u8; bytes];
    aws_lc_rs::rand::fill(&mut buf).map_err(|_| KeyError::Random)?;
    Ok(B64.encode(buf))
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn both_secret_shapes_parse_and_bad_sets_are_refused_without_quoting_secrets() {
        let one = KeySet::parse_json(r#"{"id":"k1","secret":"0123456789abcdef0123456789abcdef"}"#)
            .unwrap();
        assert_eq!(one.ids(), ["k1"]);
        let two = KeySet::parse_json(&one.with_new_key().unwrap().to_json()).unwrap();
        assert_eq!(two.ids(), ["k1", "k2"]);
        let short = KeySet::parse_json(r#"{"id":"k1","secret":"tooshort"}"#).unwrap_err();
        assert_eq!(
            short,
            KeyError::ShortSecret {
                id: "k1".into(),
                len: 8
            }
        );
        let e = KeySet::parse_json(r#"{"id":"k1","secret":"hunter2hunter2hunter2hunter2hunter2""#)
            .unwrap_err();
        assert!(!e.to_string().contains("hunter2"), "{e}");
        assert_eq!(
            KeySet::parse_json(r#"{"keys":[]}"#).unwrap_err(),
            KeyError::Empty
        );
        let s = "0123456789abcdef0123456789abcdef";
        let dup =
            format!(r#"{{"keys":[{{"id":"a","secret":"{s}"}},{{"id":"a","secret":"{s}"}}]}}"#);
        assert_eq!(
            KeySet::parse_json(&dup).unwrap_err(),
            KeyError::Duplicate("a".into())
        );
        assert!(matches!(
            KeySet::parse_json(&format!(r#"{{"id":"a.b","secret":"{s}"}}"#)),
            Err(KeyError::BadId(_))
        ));
        assert!(!format!("{one:?}").contains("0123456789"));
    }

    #[test]
    fn random_tokens_are_long_and_distinct() {
        let a = random_token(16).unwrap();
        assert_eq!(a.len(), 22);
        assert_ne!(a, random_token(16).unwrap());
    }
}
