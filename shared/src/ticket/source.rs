//! Where a function's ticket keys come from: a Secrets Manager secret (deployments; the template
//! generates it), re-read every `TURNSTILE_TICKET_KEYS_CACHE_SECS`, or a fixed set from
//! `TURNSTILE_TICKET_KEYS` (the local stack and tests). The warm path makes no call: the set is
//! read at start-up and then once per cache period, so a rotation step reaches every container
//! within that period (docs/connect-tickets.md).

use std::sync::{Arc, Mutex};
use std::time::Duration;

use super::keys::{KeySet, KEYS_VAR};
use crate::clock::Timestamp;
use crate::config::{ConfigError, Vars};
use crate::error::{error_chain, Error, Result};

/// The secret holding the key set (ARN or name).
pub const SECRET_VAR: &str = "TURNSTILE_TICKET_KEYS_SECRET";
/// Seconds a read of the secret is used before it is read again.
pub const CACHE_VAR: &str = "TURNSTILE_TICKET_KEYS_CACHE_SECS";
pub const DEFAULT_CACHE: Duration = Duration::from_secs(300);
/// The endpoint override the SDK itself honours; read from the function's variables so tests and
/// the local stack can point it at a loopback server.
pub const ENDPOINT_VAR: &str = "AWS_ENDPOINT_URL_SECRETS_MANAGER";
/// After a failed re-read, the stale set is used and the read tried again this much later.
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
    /// The set and when it is to be read again.
    cached: Mutex<Option<(Arc<KeySet>, Timestamp)>>,
    /// One read at a time: concurrent invocations of one container wait for it.
    reading: tokio::sync::Mutex<()>,
}

/// Which keys, as the variables say (read without a call, so `Config::from_vars` checks them).
#[derive(Debug, Clone, PartialEq)]
pub enum KeyConfig {
    /// `TURNSTILE_TICKET_KEYS`: the set itself.
    Inline(KeySet),
    /// `TURNSTILE_TICKET_KEYS_SECRET` and `TURNSTILE_TICKET_KEYS_CACHE_SECS`.
    Secret { id: String, cache: Duration },
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
            (None, Some(id)) => Ok(KeyConfig::Secret {
                id,
                cache: vars.secs_or(CACHE_VAR, DEFAULT_CACHE)?,
            }),
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
            KeyConfig::Secret { id, cache } => {
                let source = KeySource {
                    inner: Arc::new(Inner::Secret(SecretKeys {
                        client: secrets_client(vars).await,
                        secret_id: id,
                        ttl: cache,
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
    /// re-read keeps the previous set (logged) rather than refusing every ticket.
    pub async fn keys(&self, now: Timestamp) -> Result<Arc<KeySet>> {
        let s = match &*self.inner {
            Inner::Fixed(k) => return Ok(k.clone()),
            Inner::Secret(s) => s,
        };
        if let Some(keys) = s.fresh(now) {
            return Ok(keys);
        }
        let _reading = s.reading.lock().await;
        if let Some(keys) = s.fresh(now) {
            return Ok(keys);
        }
        match s.read().await {
            Ok(keys) => {
                let keys = Arc::new(keys);
                s.store(keys.clone(), now.plus(s.ttl));
                Ok(keys)
            }
            Err(e) => match s.stale() {
                Some(stale) => {
                    tracing::warn!(secret = %s.secret_id, error = %e, "ticket keys: re-read failed; using the previous set");
                    s.store(stale.clone(), now.plus(RETRY_AFTER_FAILURE));
                    Ok(stale)
                }
                None => Err(e),
            },
        }
    }
}

impl SecretKeys {
    fn fresh(&self, now: Timestamp) -> Option<Arc<KeySet>> {
        let cached = self.cached.lock().ok()?;
        cached
            .as_ref()
            .filter(|(_, due)| now < *due)
            .map(|(k, _)| k.clone())
    }

    fn stale(&self) -> Option<Arc<KeySet>> {
        self.cached.lock().ok()?.as_ref().map(|(k, _)| k.clone())
    }

    fn store(&self, keys: Arc<KeySet>, due: Timestamp) {
        if let Ok(mut c) = self.cached.lock() {
            *c = Some((keys, due));
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
