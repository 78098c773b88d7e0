//! Tenant isolation: every row a tenant-facing function touches has a leading (partition)
//! key that is the tenant id itself or starts with `{tenantId}:` — tenants and sessions are keyed by
//! `tenantId`, counters by `{tenantId}` and `{tenantId}:swept:{sessionId}:{eventId}` (formerly also
//! per-minute and per-connection rows). Two independent guards hold a function to one tenant's rows:
//!
//! 1. **In code**, always (release builds included): [`check_key`] (and [`TenantClient::key`])
//!    refuse a key outside the tenant before any request is built; every counter-key builder
//!    (`crate::counter::keys`) returns its typed error ([`CrossTenantKey`], `Error::CrossTenantKey`). It compares whole segments: tenant `ab` owns `ab` and `ab:x`, never
//!    `abc` or `abc:x` (the AWS sample's prefix match let `ab` reach `abc`'s rows).
//! 2. **In IAM**, when `TENANT_ROLE_ARN` is set: [`TenantClients`] hands out a DynamoDB client per tenant
//!    whose credentials come from `sts:AssumeRole` on that role with the session tag `tenantId`. The
//!    role's policy (`TenantRole` in `template.yaml`) allows only `dynamodb:LeadingKeys` equal to the
//!    tag or matching `{tag}:*`, so a bug that skips guard 1 still cannot reach another tenant.
//!    Without `TENANT_ROLE_ARN` the execution role's client is returned (local runs, tests, and stacks
//!    deployed with `TenantIsolation=Disabled`); guard 1 still applies.
//! 3. **Per function**, with the role: each `AssumeRole` carries the function's session policy
//!    ([`policy`], decision 2202), so its tenant credentials allow only its own DynamoDB actions on
//!    its own tables (the intersection with the role's union of every function's actions).
//!
//! Cost: the first use of a tenant in a process, and one use per ~55 minutes after, makes one STS
//! `AssumeRole` call; every other use makes none (credentials are cached per tenant until
//! [`REFRESH_BEFORE_EXPIRY`] before they expire). See docs/decisions/0701-tenant-scoped-credentials.md
//! and 2202-least-privilege-sessions.md.

pub mod policy;
pub use crate::error::CrossTenantKey;
pub use policy::TENANT_ROLE_ARN_VAR;
mod guard;

pub use guard::*;
