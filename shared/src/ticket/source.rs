//! Where a function's ticket keys come from: a Secrets Manager secret (deployments; the template
//! generates it), re-read every `TURNSTILE_TICKET_KEYS_CACHE_SECS`, or a fixed set from
//! `TURNSTILE_TICKET_KEYS` (the local stack and tests). The warm path makes no call: the set is
//! read at start-up and then once per cache period, so a rotation step reaches every container
//! within that period (docs/connect-tickets.md).
//!
//! When a re-read fails, the previous set stays in use (a Secrets Manager hiccup must not refuse
//! every ticket), but only until `TURNSTILE_TICKET_KEYS_MAX_STALE_SECS` past its cache period: after
//! that, a retired or compromised key could otherwise stay valid in a warm container for as long as
//! the secret is unreadable, so tickets are refused (fail closed) until a read succeeds. Each outcome
//! is metered (`TicketKeys`, `Result` = `read`, `stale` or `expired`; the template alarms on the last
//! two).

use std::sync::{Arc, Mutex};
use std::time::Duration;

use super::keys::{KeySet, KEYS_VAR};
use crate::clock::Timestamp;
use crate::config::{ConfigError, Vars};
use crate::error::{error_chain, Error, Result};
use crate::telemetry::catalogue::{self, KeyRead};

/// The secret holding the key set (ARN or name).
pub const SECRET_VAR: &str = "TURNSTILE_TICKET_KEYS_SECRET";
/// Seconds a read of the secret is used before it is read again.
pub const CACHE_VAR: &str = "TURNSTILE_TICKET_KEYS_CACHE_SECS";
pub const DEFAULT_CACHE: Duration = Duration::from_secs(300);
/// Seconds past its cache period a set whose re-reads keep failing is still used; then tickets are
/// refused until a read succeeds.
pub const MAX_STALE_VAR: &str = "TURNSTILE_TICKET_KEYS_MAX_STALE_SECS";
pub const DEFAULT_MAX_STALE: Duration = Duration::from_secs(900);
/// The longest `TURNSTILE_TICKET_KEYS_MAX_STALE_SECS` accepted: a day, so a retired key's life is
/// bounded whatever the setting.
pub const MAX_MAX_STALE: Duration = Duration::from_secs(86_400);
/// The endpoint override the SDK itself honours; read from the function's variables so tests and
/// the local stack can point it at a loopback server.
pub const ENDPOINT_VAR: &str = "AWS_ENDPOINT_URL_SECRETS_MANAGER";
/// After a failed read, the secret is tried again this much later (meanwhile the stale set is used,
/// or, past its maximum age, tickets are refused without a call).
const RETRY_AFTER_FAILURE: Duration = Duration::from_secs(30);

/// A function's ticket keys. Cheap to share (`Arc` inside).
#[derive(Clone)]
pub struct KeySource {
    inner: Arc<Inner>,
}

impl std::fmt::Debug for KeySource {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        match &*self.inner {
            Inner::Fixed(k) => write!(f, "KeySource::Fixed({:?})", k.ids()),
            Inner::Secret(s) => write!(f, "KeySource::Secret({})", s.secret_id),
        }
    }
}

enum Inner {
    Fixed(Arc<KeySet>),
    Secret(SecretKeys),
}

struct SecretKeys {
    client: aws_sdk_secretsmanager::Client,
    secret_id: String,
    ttl: Duration,
    max_stale: Duration,
    cached: Mutex<Option<Cached>>,
    /// One read at a time: concurrent invocations of one container wait for it.
    reading: tokio::sync::Mutex<()>,
}

/// The last set read, with when it was read and when the secret is to be read next.
#[derive(Clone)]
struct Cached {
    keys: Arc<KeySet>,
    read_at: Timestamp,
    next_read: Timestamp,
    /// Why the last read failed, if it did (for the refusal's message).
    last_error: Option<String>,
}

/// What [`KeySource::keys`] does at an instant, given the cache.
enum Plan {
    Use(Arc<KeySet>),
    /// Past its maximum age, before the next read is due: refused without a call.
    Refuse(Cached),
    Read,
}

/// Which keys, as the variables say (read without a call, so `Config::from_vars` checks them).
#[derive(Debug, Clone, PartialEq)]
pub enum KeyConfig {
    /// `TURNSTILE_TICKET_KEYS`: the set itself.
    Inline(KeySet),
    /// `TURNSTILE_TICKET_KEYS_SECRET`, `TURNSTILE_TICKET_KEYS_CACHE_SECS` and
    /// `TURNSTILE_TICKET_KEYS_MAX_STALE_SECS`.
    Secret {
        id: String,
        cache: Duration,
        max_stale: Duration,
    },
}

impl KeyConfig {
    /// One of [`KEYS_VAR`] or [`SECRET_VAR`] is required: tickets are the default connect
    /// authentication, and a function without keys could only refuse them.
    pub fn from_vars(vars: &Vars) -> Result<KeyConfig, ConfigError> {
        match (vars.get(KEYS_VAR), vars.get(SECRET_VAR)) {
            (Some(_), Some(_)) => Err(ConfigError::Invalid {
                var: KEYS_VAR.into(),
                value: "(not shown)".into(),
                reason: format!("set either {KEYS_VAR} or {SECRET_VAR}, not both"),
            }),
            (Some(json), None) => KeySet::parse_json(&json)
                .map(KeyConfig::Inline)
                .map_err(|e| ConfigError::Invalid {
                    var: KEYS_VAR.into(),
                    value: "(not shown: it holds secrets)".into(),
                    reason: e.to_string(),
                }),
            (None, Some(id)) => {
                let max_stale = vars.secs_or(MAX_STALE_VAR, DEFAULT_MAX_STALE)?;
                if max_stale > MAX_MAX_STALE {
                    return Err(ConfigError::Invalid {
                        var: MAX_STALE_VAR.into(),
                        value: max_stale.as_secs().to_string(),
                        reason: format!(
                            "at most {} seconds: a retired key must not stay valid longer",
                            MAX_MAX_STALE.as_secs()
                        ),
                    });
                }
                Ok(KeyConfig::Secret {
                    id,
                    cache: vars.secs_or(CACHE_VAR, DEFAULT_CACHE)?,
                    max_stale,
                })
            }
            (None, None) => Err(ConfigError::Missing {
                var: SECRET_VAR.into(),
                hint: format!(
                    "connect tickets need a key set: the ARN of a Secrets Manager secret (the \
                     template creates one), or {KEYS_VAR} with the key set's JSON for local runs"
                ),
            }),
        }
    }
}

impl KeySource {
    pub fn fixed(keys: KeySet) -> KeySource {
        KeySource {
            inner: Arc::new(Inner::Fixed(Arc::new(keys))),
        }
    }

    /// The source `config` names. A secret is read once here, so a missing secret or permission
    /// fails the start-up, not the first connect. `vars` gives the Secrets Manager endpoint
    /// override ([`ENDPOINT_VAR`]), for tests and the local stack.
    pub async fn new(config: KeyConfig, vars: &Vars, now: Timestamp) -> Result<KeySource> {
        match config {
            KeyConfig::Inline(keys) => Ok(KeySource::fixed(keys)),
            KeyConfig::Secret {
                id,
                cache,
                max_stale,
            } => {
                let source = KeySource {
                    inner: Arc::new(Inner::Secret(SecretKeys {
                        client: secrets_client(vars).await,
                        secret_id: id,
                        ttl: cache,
                        max_stale,
                        cached: Mutex::new(None),
                        reading: tokio::sync::Mutex::new(()),
                    })),
                };
                source.keys(now).await?;
                Ok(source)
            }
        }
    }

    /// The live keys at `now`: the cached set, or one `GetSecretValue` when it is due. A failed
    /// re-read keeps the previous set (logged) until its maximum age, rather than refusing every
    /// ticket; past that age every call is refused until a read succeeds.
    pub async fn keys(&self, now: Timestamp) -> Result<Arc<KeySet>> {
        let s = match &*self.inner {
            Inner::Fixed(k) => return Ok(k.clone()),
            Inner::Secret(s) => s,
        };
        match s.plan(now) {
            Plan::Use(keys) => return Ok(keys),
            Plan::Refuse(c) => return Err(s.expired(&c)),
            Plan::Read => {}
        }
        let _reading = s.reading.lock().await;
        match s.plan(now) {
            Plan::Use(keys) => return Ok(keys),
            Plan::Refuse(c) => return Err(s.expired(&c)),
            Plan::Read => {}
        }
        let previous = s.cached();
        match (s.read().await, previous) {
            (Ok(keys), _) => {
                let keys = Arc::new(keys);
                catalogue::ticket_keys(KeyRead::Read);
                s.store(Cached {
                    keys: keys.clone(),
                    read_at: now,
                    next_read: now.plus(s.ttl),
                    last_error: None,
                });
                Ok(keys)
            }
            // At start-up: nothing to fall back on.
            (Err(e), None) => Err(e),
            (Err(e), Some(mut c)) => {
                let expires = s.expires(&c);
                c.last_error = Some(e.to_string());
                if now < expires {
                    tracing::warn!(secret = %s.secret_id, error = %e, stale_until = %expires,
                        "ticket keys: re-read failed; using the previous set");
                    catalogue::ticket_keys(KeyRead::Stale);
                    c.next_read = now.plus(RETRY_AFTER_FAILURE).min(expires);
                    let keys = c.keys.clone();
                    s.store(c);
                    Ok(keys)
                } else {
                    c.next_read = now.plus(RETRY_AFTER_FAILURE);
                    s.store(c.clone());
                    Err(s.expired(&c))
                }
            }
        }
    }
}

impl SecretKeys {
    fn plan(&self, now: Timestamp) -> Plan {
        let Some(c) = self.cached() else {
            return Plan::Read;
        };
        match (now < c.next_read, now < self.expires(&c)) {
            (true, true) => Plan::Use(c.keys),
            (true, false) => Plan::Refuse(c),
            (false, _) => Plan::Read,
        }
    }

    /// When a set read at `c.read_at` stops being used: its cache period plus the maximum age.
    fn expires(&self, c: &Cached) -> Timestamp {
        c.read_at.plus(self.ttl).plus(self.max_stale)
    }

    /// The refusal of a set past its maximum age (metered and logged once per refused call).
    fn expired(&self, c: &Cached) -> Error {
        catalogue::ticket_keys(KeyRead::Expired);
        let message = format!(
            "ticket keys: the set read from secret {} at {} is past its maximum age ({} s cache + \
             {} s, {MAX_STALE_VAR}) and the secret cannot be read{}: tickets are refused until it can",
            self.secret_id,
            c.read_at,
            self.ttl.as_secs(),
            self.max_stale.as_secs(),
            c.last_error
                .as_deref()
                .map(|e| format!(" ({e})"))
                .unwrap_or_default()
        );
        tracing::error!(secret = %self.secret_id, "{message}");
        Error::Other(message)
    }

    fn cached(&self) -> Option<Cached> {
        self.cached.lock().ok()?.clone()
    }

    fn store(&self, c: Cached) {
        if let Ok(mut slot) = self.cached.lock() {
            *slot = Some(c);
        }
    }

    async fn read(&self) -> Result<KeySet> {
        let out = self
            .client
            .get_secret_value()
            .secret_id(&self.secret_id)
            .send()
            .await
            .map_err(|e| {
                Error::Other(format!(
                    "Secrets Manager GetSecretValue {}: {}",
                    self.secret_id,
                    error_chain(&e)
                ))
            })?;
        let text = out.secret_string().ok_or_else(|| {
            Error::Other(format!(
                "secret {} has no SecretString (a binary secret cannot hold a ticket key set)",
                self.secret_id
            ))
        })?;
        KeySet::parse_json(text)
            .map_err(|e| Error::Other(format!("secret {}: {e}", self.secret_id)))
    }
}

async fn secrets_client(vars: &Vars) -> aws_sdk_secretsmanager::Client {
    match vars.get(ENDPOINT_VAR) {
        Some(url) if crate::dynamo::wants_local_credentials(&url, vars) => {
            aws_sdk_secretsmanager::Client::new(&crate::dynamo::local_sdk_config(&url))
        }
        _ => {
            let sdk = aws_config::defaults(aws_config::BehaviorVersion::latest())
                .load()
                .await;
            aws_sdk_secretsmanager::Client::new(&sdk)
        }
    }
}
