//! The tenant key guard and tenant-scoped credentials (one assumed role per tenant, cached).

use crate::isolation::CrossTenantKey;
use std::borrow::Cow;
use std::fmt;
use std::sync::Arc;
use std::time::{Duration, SystemTime};

use aws_credential_types::Credentials;
use aws_sdk_dynamodb::Client;
use aws_sdk_sts::types::Tag;

use super::policy::TENANT_ROLE_ARN_VAR;
use crate::cache::{Cache, WhenFull};
use crate::clock::{SharedClock, Timestamp};
use crate::config::{ConfigError, Vars};
use crate::error::{error_chain, Error, Result};
use crate::ids::TenantId;

/// The session tag the tenant role's policy reads (`${aws:PrincipalTag/tenantId}`).
pub const TENANT_TAG: &str = "tenantId";
/// Requested lifetime of tenant credentials; the role's `MaxSessionDuration` must be at least this.
pub const SESSION_DURATION: Duration = Duration::from_secs(3600);
/// Cached credentials are replaced this long before they expire, so a request never starts with
/// credentials that could expire mid-call.
pub const REFRESH_BEFORE_EXPIRY: Duration = Duration::from_secs(300);
/// At most this many tenants' clients are kept per process; beyond it the soonest-expiring goes.
pub const MAX_CACHED_TENANTS: usize = 1024;

/// True when `key` belongs to `tenant`: it is the tenant id, or the tenant id followed by `:`.
/// Tenant ids cannot contain `:` (see [`crate::ids`]), so the first segment is unambiguous.
pub fn key_in_tenant(tenant: &TenantId, key: &str) -> bool {
    match key.strip_prefix(tenant.as_str()) {
        Some(rest) => rest.is_empty() || rest.starts_with(':'),
        None => false,
    }
}

/// Guard 1: `Ok` only for keys of `tenant` (see [`key_in_tenant`]).
pub fn check_key(tenant: &TenantId, key: &str) -> Result<(), CrossTenantKey> {
    if key_in_tenant(tenant, key) {
        Ok(())
    } else {
        Err(CrossTenantKey {
            tenant: tenant.to_string(),
            key: key.to_string(),
        })
    }
}

/// Isolation settings from the environment.
#[derive(Debug, Clone, PartialEq, Eq, Default)]
pub struct IsolationConfig {
    /// `TENANT_ROLE_ARN`: the role to assume per tenant, or `None` for the execution role.
    pub tenant_role_arn: Option<String>,
}

impl IsolationConfig {
    pub fn from_vars(vars: &Vars) -> Result<Self, ConfigError> {
        let Some(arn) = vars.get(TENANT_ROLE_ARN_VAR) else {
            return Ok(IsolationConfig::default());
        };
        // arn:{partition}:iam::{account}:role/{path/}{name}
        let parts: Vec<&str> = arn.splitn(6, ':').collect();
        let ok = parts.len() == 6
            && parts[0] == "arn"
            && !parts[1].is_empty()
            && parts[2] == "iam"
            && parts[4].len() == 12
            && parts[4].chars().all(|c| c.is_ascii_digit())
            && parts[5]
                .strip_prefix("role/")
                .is_some_and(|n| !n.is_empty());
        if !ok {
            return Err(ConfigError::Invalid {
                var: TENANT_ROLE_ARN_VAR.into(),
                value: arn,
                reason: "expected an IAM role ARN (arn:aws:iam::123456789012:role/name), or unset \
                         to use the execution role"
                    .into(),
            });
        }
        Ok(IsolationConfig {
            tenant_role_arn: Some(arn),
        })
    }
}

/// Remembers `value` for `tenant` until [`REFRESH_BEFORE_EXPIRY`] before `expires`. A full cache
/// first drops the entries no longer served, then the one that expires soonest.
pub(super) fn remember<V: Clone>(
    cache: &Cache<TenantId, V>,
    tenant: TenantId,
    value: V,
    expires: Timestamp,
    now: Timestamp,
) {
    cache.insert_until(tenant, value, now, expires.minus(REFRESH_BEFORE_EXPIRY));
}

/// `RoleSessionName` for a tenant: `turnstile-{tenant}`, cut to STS's 64 characters. Tenant ids use
/// only characters STS allows in session names. It names the session in CloudTrail; the session
/// tag, not the name, is what IAM checks.
pub fn session_name(tenant: &TenantId) -> String {
    let mut name = format!("turnstile-{tenant}");
    name.truncate(64);
    name
}

/// DynamoDB clients for tenants: the execution role's, or tenant-scoped ones (see the module docs).
/// Clones share the cache.
#[derive(Clone)]
pub struct TenantClients {
    pub(super) inner: Arc<Inner>,
}

pub(super) struct Inner {
    pub(super) base: Client,
    pub(super) clock: SharedClock,
    pub(super) assume: Option<Assume>,
}

pub(super) struct Assume {
    pub(super) sts: aws_sdk_sts::Client,
    pub(super) role_arn: String,
    /// The function's session policy ([`policy`]), sent with every `AssumeRole`.
    pub(super) policy: String,
    /// Each tenant's client and the instant it stops being served.
    pub(super) cache: Cache<TenantId, (Client, Timestamp)>,
}

impl fmt::Debug for TenantClients {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.debug_struct("TenantClients")
            .field("role_arn", &self.role_arn())
            .finish()
    }
}

impl TenantClients {
    /// Every tenant gets `base` (the execution role's client); only the key guard applies.
    pub fn execution_role(base: Client, clock: SharedClock) -> Self {
        TenantClients {
            inner: Arc::new(Inner {
                base,
                clock,
                assume: None,
            }),
        }
    }

    /// Each tenant gets a client like `base` (same endpoint, region, interceptors) but signed with
    /// credentials from `AssumeRole` on `role_arn` tagged with the tenant and limited by `policy`
    /// (a session policy: the function's own actions, [`super::policy::session_policy_for`]).
    pub fn assuming(
        base: Client,
        sts: aws_sdk_sts::Client,
        role_arn: impl Into<String>,
        policy: impl Into<String>,
        clock: SharedClock,
    ) -> Self {
        TenantClients {
            inner: Arc::new(Inner {
                base,
                clock,
                assume: Some(Assume {
                    sts,
                    role_arn: role_arn.into(),
                    policy: policy.into(),
                    cache: Cache::new(MAX_CACHED_TENANTS, WhenFull::EvictSoonestExpiring),
                }),
            }),
        }
    }

    /// For a function's [`Deps`](crate::Deps): reads `TENANT_ROLE_ARN` from `deps.vars`; with a role,
    /// STS uses the SDK's default configuration (the execution role's credentials, `AWS_REGION`)
    /// and every `AssumeRole` carries the session policy of `deps.function` (an error when the
    /// process names no tenant-facing function). Call once at start-up, next to `Deps::from_env`.
    pub async fn from_deps(deps: &crate::Deps) -> Result<Self> {
        let config = IsolationConfig::from_vars(&deps.vars)?;
        if config.tenant_role_arn.is_none() {
            return Ok(Self::execution_role(
                deps.dynamo.clone(),
                deps.clock.clone(),
            ));
        }
        let sdk = aws_config::defaults(aws_config::BehaviorVersion::latest())
            .load()
            .await;
        Self::from_deps_with(deps, &sdk)
    }

    /// [`from_deps`](Self::from_deps) with the STS client built from `sdk` (the tests' fake STS).
    pub fn from_deps_with(deps: &crate::Deps, sdk: &aws_config::SdkConfig) -> Result<Self> {
        let config = IsolationConfig::from_vars(&deps.vars)?;
        let base = deps.dynamo.clone();
        let clock = deps.clock.clone();
        Ok(match config.tenant_role_arn {
            None => Self::execution_role(base, clock),
            Some(arn) => {
                let region = base.config().region().map(|r| r.as_ref().to_string());
                let policy = super::policy::session_policy_for(
                    deps.function,
                    &deps.tables,
                    &arn,
                    region.as_deref(),
                )?;
                Self::assuming(base, aws_sdk_sts::Client::new(sdk), arn, policy, clock)
            }
        })
    }

    /// The assumed role, or `None` when the execution role is used.
    pub fn role_arn(&self) -> Option<&str> {
        self.inner.assume.as_ref().map(|a| a.role_arn.as_str())
    }

    /// The session policy sent with each `AssumeRole`, or `None` when the execution role is used.
    pub fn session_policy(&self) -> Option<&str> {
        self.inner.assume.as_ref().map(|a| a.policy.as_str())
    }

    /// The client for `tenant`. With a tenant role: cached credentials if still fresh, else one STS
    /// `AssumeRole` call. Concurrent first uses of one tenant may each call STS; the last one wins the
    /// cache, and all of them get valid credentials.
    pub async fn for_tenant(&self, tenant: &TenantId) -> Result<TenantClient> {
        Ok(self.for_tenant_until(tenant).await?.0)
    }

    /// [`for_tenant`](Self::for_tenant), with the instant until which this client is the one served
    /// (`None`: the execution role's, always): what is built on the client (a limiter with its
    /// hints) may be kept until then.
    pub async fn for_tenant_until(
        &self,
        tenant: &TenantId,
    ) -> Result<(TenantClient, Option<Timestamp>)> {
        let Some(assume) = &self.inner.assume else {
            let client = TenantClient {
                tenant: tenant.clone(),
                client: self.inner.base.clone(),
            };
            return Ok((client, None));
        };
        let now = self.inner.clock.now();
        let (client, until) = match assume.cache.fresh(tenant, now) {
            Some(cached) => cached,
            None => {
                let (client, expires) = self.assume_role(assume, tenant, now).await?;
                let until = expires.minus(REFRESH_BEFORE_EXPIRY);
                remember(
                    &assume.cache,
                    tenant.clone(),
                    (client.clone(), until),
                    expires,
                    now,
                );
                (client, until)
            }
        };
        let client = TenantClient {
            tenant: tenant.clone(),
            client,
        };
        Ok((client, Some(until)))
    }

    pub(super) async fn assume_role(
        &self,
        assume: &Assume,
        tenant: &TenantId,
        now: Timestamp,
    ) -> Result<(Client, Timestamp)> {
        let sts_err = |what: &str| Error::AssumeRole {
            tenant: tenant.to_string(),
            message: what.to_string(),
        };
        let tag = Tag::builder()
            .key(TENANT_TAG)
            .value(tenant.as_str())
            .build()
            .map_err(|e| sts_err(&e.to_string()))?;
        let out = assume
            .sts
            .assume_role()
            .role_arn(&assume.role_arn)
            .role_session_name(session_name(tenant))
            .duration_seconds(SESSION_DURATION.as_secs() as i32)
            .tags(tag)
            // The function's own actions: the credentials get the intersection with the role's.
            .policy(&assume.policy)
            // A transitive tag survives role chaining and cannot be replaced by a later AssumeRole.
            .transitive_tag_keys(TENANT_TAG)
            .send()
            .await
            .map_err(|e| sts_err(&error_chain(&e)))?;
        let creds = out
            .credentials()
            .ok_or_else(|| sts_err("the response has no credentials"))?;
        let expiration = *creds.expiration();
        // The cache runs on the injected clock; STS's expiry is wall-clock time, so keep the lifetime
        // STS granted, measured from our `now` (never longer than we asked for).
        let granted = SystemTime::try_from(expiration)
            .ok()
            .and_then(|exp| exp.duration_since(SystemTime::now()).ok())
            .unwrap_or(Duration::ZERO)
            .min(SESSION_DURATION);
        let credentials = Credentials::new(
            creds.access_key_id(),
            creds.secret_access_key(),
            Some(creds.session_token().to_string()),
            SystemTime::try_from(expiration).ok(),
            "turnstile-tenant-role",
        );
        let config = self
            .inner
            .base
            .config()
            .to_builder()
            .credentials_provider(credentials)
            .build();
        Ok((Client::from_conf(config), now.plus(granted)))
    }
}

/// The [`Deps`](crate::Deps) a handler uses for `tenant`'s rows, once the tenant id is validated:
/// with a tenant role, a clone of `deps` whose `dynamo` is the tenant-scoped client (the clone is
/// cheap: SDK clients are `Arc`s); without one (`clients` is `None`, or built without
/// `TENANT_ROLE_ARN`), `deps` itself, borrowed — no STS call, no clone, no extra DynamoDB call.
/// Handlers reach it through their `State`'s [`Tenancy`](crate::function::Tenancy), which each
/// crate's `init` builds with [`TenantClients::from_deps`].
pub async fn tenant_deps<'d>(
    clients: Option<&TenantClients>,
    deps: &'d crate::Deps,
    tenant: &TenantId,
) -> Result<Cow<'d, crate::Deps>> {
    match clients {
        Some(c) if c.role_arn().is_some() => {
            let scoped = c.for_tenant(tenant).await?;
            Ok(Cow::Owned(crate::Deps {
                dynamo: scoped.client().clone(),
                ..deps.clone()
            }))
        }
        _ => Ok(Cow::Borrowed(deps)),
    }
}

/// A DynamoDB client scoped to one tenant, with the key guard.
#[derive(Debug, Clone)]
pub struct TenantClient {
    pub(super) tenant: TenantId,
    pub(super) client: Client,
}

impl TenantClient {
    pub fn tenant(&self) -> &TenantId {
        &self.tenant
    }

    /// The client: tenant-role credentials when `TENANT_ROLE_ARN` is set, else the execution role's.
    pub fn client(&self) -> &Client {
        &self.client
    }

    /// Guard 1: `key` if it belongs to this tenant, else an error; use it on every leading key.
    pub fn key<'k>(&self, key: &'k str) -> Result<&'k str, CrossTenantKey> {
        check_key(&self.tenant, key).map(|()| key)
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn t(s: &str) -> TenantId {
        TenantId::parse(s).unwrap()
    }

    #[test]
    fn the_key_guard_accepts_only_the_tenant_and_its_colon_keys() {
        // (tenant, key, accepted)
        let cases = [
            ("ab", "ab", true),
            ("ab", "ab:", true),
            ("ab", "ab:minute:1700000000", true),
            ("ab", "ab:s1:minute:1700000000", true),
            ("ab", "ab:conn:L0SM9cOFvHcCIhw=", true),
            ("ab", "abc", false),
            ("ab", "abc:minute:1700000000", false),
            ("ab", "a", false),
            ("ab", "", false),
            ("ab", ":ab", false),
            ("ab", "xab", false),
            ("ab", "AB", false),
            ("ab", "ab.c", false),
            ("ab", "ab-c:x", false),
            ("abc", "ab", false),
            ("abc", "ab:c", false),
            ("a.b", "a.b:x", true),
            ("a.b", "aXb", false),
            ("a.b", "a.bc", false),
        ];
        for (tenant, key, want) in cases {
            assert_eq!(key_in_tenant(&t(tenant), key), want, "{tenant} / {key:?}");
            assert_eq!(
                check_key(&t(tenant), key).is_ok(),
                want,
                "{tenant} / {key:?}"
            );
        }
        let err = check_key(&t("ab"), "abc:1").unwrap_err();
        assert_eq!(
            err.to_string(),
            "key \"abc:1\" is outside tenant \"ab\": a tenant's keys are its id or start with \"ab:\""
        );
    }

    #[test]
    fn the_role_arn_is_optional_but_must_be_a_role() {
        let none = IsolationConfig::from_vars(&Vars::from_pairs([(TENANT_ROLE_ARN_VAR, " ")]));
        assert_eq!(none.unwrap().tenant_role_arn, None, "blank means unset");
        let arn = "arn:aws:iam::123456789012:role/turnstile/tenant-access";
        let set = IsolationConfig::from_vars(&Vars::from_pairs([(TENANT_ROLE_ARN_VAR, arn)]));
        assert_eq!(set.unwrap().tenant_role_arn.as_deref(), Some(arn));
        for bad in [
            "tenant-role",
            "arn:aws:iam::123456789012:user/bob",
            "arn:aws:iam::1234:role/x",
            "arn:aws:sts::123456789012:role/x",
            "arn:aws:iam::123456789012:role/",
        ] {
            let err = IsolationConfig::from_vars(&Vars::from_pairs([(TENANT_ROLE_ARN_VAR, bad)]))
                .unwrap_err();
            assert!(err.to_string().contains(TENANT_ROLE_ARN_VAR), "{err}");
        }
    }

    #[test]
    fn cached_values_are_served_until_five_minutes_before_expiry() {
        let start = Timestamp::from_secs(1_700_000_000);
        let cache = Cache::new(8, WhenFull::EvictSoonestExpiring);
        remember(&cache, t("ab"), 1, start.plus(SESSION_DURATION), start);
        assert_eq!(cache.fresh(&t("ab"), start), Some(1));
        assert_eq!(cache.fresh(&t("abc"), start), None, "per tenant");
        let fresh_until = start.plus(SESSION_DURATION - REFRESH_BEFORE_EXPIRY);
        assert_eq!(
            cache.fresh(&t("ab"), fresh_until.minus(Duration::from_nanos(1))),
            Some(1)
        );
        assert_eq!(
            cache.fresh(&t("ab"), fresh_until),
            None,
            "refreshed 5 min early"
        );
        remember(
            &cache,
            t("ab"),
            2,
            fresh_until.plus(SESSION_DURATION),
            fresh_until,
        );
        assert_eq!(cache.fresh(&t("ab"), fresh_until), Some(2));
    }

    #[test]
    fn the_cache_is_bounded_and_drops_stale_entries_first() {
        let now = Timestamp::from_secs(1_000_000);
        let min = Duration::from_secs(60);
        let hour = Duration::from_secs(3600);
        let cache = Cache::new(2, WhenFull::EvictSoonestExpiring);
        remember(&cache, t("short"), 0, now.plus(min * 10), now);
        remember(&cache, t("a"), 1, now.plus(hour), now);
        assert_eq!(cache.len(), 2);
        // Six minutes on, "short" is within 5 minutes of expiry: no longer served, dropped first.
        let later = now.plus(min * 6);
        assert_eq!(cache.fresh(&t("short"), later), None);
        remember(&cache, t("b"), 2, later.plus(hour * 2), later);
        assert_eq!(cache.len(), 2);
        assert_eq!(cache.fresh(&t("a"), later), Some(1));
        // Full of live entries: the soonest-expiring ("a") makes room.
        remember(&cache, t("c"), 3, later.plus(hour * 3), later);
        assert_eq!(cache.fresh(&t("a"), later), None);
        assert_eq!(cache.fresh(&t("b"), later), Some(2));
        assert_eq!(cache.fresh(&t("c"), later), Some(3));
    }

    #[test]
    fn session_names_fit_sts_limits() {
        assert_eq!(session_name(&t("acme")), "turnstile-acme");
        let long = "x".repeat(128);
        assert_eq!(session_name(&t(&long)).len(), 64);
    }
}
