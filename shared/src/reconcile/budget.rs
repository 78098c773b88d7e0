//! How a run fits its function (decision 2205): each tenant's probes get a time budget, the run
//! takes new tenants only while its own budget lasts, and it starts where the last run stopped (a
//! cursor in the tenant table), so one tenant with very many sessions cannot starve the others:
//! every tenant is reached within `⌈tenants / tenants-per-run⌉` runs. Time is the injected clock's.
//!
//! The cursor is one item of the tenant table, `tenantId = "~reconciler"` (a `~` is never in a
//! tenant id, so it is no tenant; `tenant::store::list` skips it), holding `after`, the last tenant
//! a run took. 1 GetItem and 1 PutItem per run over every tenant; a run for one named tenant
//! leaves it alone. The execution role may read and write that one key only (`template.yaml`).

use std::time::Duration;

use aws_sdk_dynamodb::types::AttributeValue;

use crate::dynamo;
use crate::dynamo::item::{n, s};
use crate::error::Result;
use crate::ids::TenantId;
use crate::tenant::attr as tenant_attr;
use crate::Deps;

/// The reconciler function's timeout (`template.yaml`): two graces, the work and a margin fit in it.
pub const FUNCTION_TIMEOUT: Duration = Duration::from_secs(300);
/// The longest grace accepted: two of them leave the work 300 − 120 − [`MARGIN`] = 150 s.
pub const MAX_GRACE: Duration = Duration::from_secs(60);
/// Kept free of work at the end of a run (the last tenant's overrun, the cursor, the report).
pub const MARGIN: Duration = Duration::from_secs(30);
/// Probing time per tenant and phase: a tenant with more ids than that is probed in parts.
pub const TENANT_BUDGET: Duration = Duration::from_secs(10);

/// The key of the cursor item in the tenant table.
pub const CURSOR_KEY: &str = "~reconciler";
/// The cursor item's attributes: the last tenant taken, and when (epoch ms).
const AFTER: &str = "after";
const AT: &str = "at";

/// Time a run may spend working, and each tenant probing.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Budget {
    /// The run's work (graces excluded). New tenants are taken while less than half of it has
    /// gone (the other half is their phases 2 and 3).
    pub run: Duration,
    /// One tenant's probes in one phase; the ids left are probed by a later run.
    pub tenant: Duration,
}

impl Budget {
    /// What a run with this grace can spend inside [`FUNCTION_TIMEOUT`].
    pub fn for_grace(grace: Duration) -> Budget {
        Budget {
            run: FUNCTION_TIMEOUT
                .saturating_sub(grace * 2)
                .saturating_sub(MARGIN),
            tenant: TENANT_BUDGET,
        }
    }

    /// Whether a run that started taking tenants `spent` ago may take another.
    pub fn takes_more(&self, spent: Duration) -> bool {
        spent < self.run / 2
    }
}

/// `tenants` (sorted by id) starting after `after`, wrapping around.
pub fn rotate<T>(mut tenants: Vec<T>, id: impl Fn(&T) -> &TenantId, after: Option<&str>) -> Vec<T> {
    if let Some(after) = after {
        let start = tenants.partition_point(|t| id(t).as_str() <= after);
        tenants.rotate_left(start);
    }
    tenants
}

fn key() -> std::collections::HashMap<String, AttributeValue> {
    [(tenant_attr::TENANT_ID.to_string(), s(CURSOR_KEY))].into()
}

/// The last tenant the previous run took (1 GetItem, strongly consistent).
pub async fn read(deps: &Deps) -> Result<Option<String>> {
    let item = dynamo::get_consistent(&deps.dynamo, &deps.tables.tenants, key()).await?;
    Ok(item
        .as_ref()
        .and_then(|i| i.get(AFTER))
        .and_then(|v| v.as_s().ok())
        .cloned())
}

/// Records `after` as the last tenant taken (1 PutItem).
pub async fn write(deps: &Deps, after: &TenantId) -> Result<()> {
    let mut item = key();
    item.insert(AFTER.into(), s(after.as_str()));
    item.insert(AT.into(), n(deps.clock.now().as_millis()));
    dynamo::put(&deps.dynamo, &deps.tables.tenants, item).await
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn runs_start_after_the_cursor_and_wrap() {
        let ids: Vec<TenantId> = ["a", "b", "c", "d"]
            .iter()
            .map(|t| TenantId::parse(t).unwrap())
            .collect();
        let order = |after: Option<&str>| -> Vec<String> {
            rotate(ids.clone(), |t| t, after)
                .iter()
                .map(|t| t.to_string())
                .collect()
        };
        assert_eq!(order(None), ["a", "b", "c", "d"]);
        assert_eq!(order(Some("b")), ["c", "d", "a", "b"]);
        assert_eq!(order(Some("bb")), ["c", "d", "a", "b"], "a deleted tenant");
        assert_eq!(order(Some("d")), ["a", "b", "c", "d"]);
        assert!(!CURSOR_KEY.chars().all(|c| c.is_ascii_alphanumeric()));
        assert!(TenantId::parse(CURSOR_KEY).is_err(), "never a tenant id");
    }

    #[test]
    fn the_default_budget_fits_the_function_at_the_longest_grace() {
        let b = Budget::for_grace(MAX_GRACE);
        assert_eq!(b.run, Duration::from_secs(150));
        assert!(MAX_GRACE * 2 + b.run + MARGIN <= FUNCTION_TIMEOUT);
        assert!(b.takes_more(Duration::from_secs(74)));
        assert!(!b.takes_more(Duration::from_secs(75)));
    }
}
