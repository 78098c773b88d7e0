//! What a run reconciles and how: its options, the grace between its phases, where it pauses.

use super::budget::{Budget, MAX_GRACE};
use std::time::Duration;

use crate::gateway::Gateway;
use crate::ids::TenantId;

/// Default grace between the phases: longer than any `$connect` or release can be half-way.
pub const DEFAULT_GRACE: Duration = Duration::from_secs(30);
/// The handlers' timeout (`template.yaml`, `Globals.Function.Timeout`): no `$connect` or release is
/// half-way for longer, since the handler is stopped.
pub const HANDLER_TIMEOUT: Duration = Duration::from_secs(10);
/// The shortest grace accepted from configuration: the handler timeout plus 5 s for the last
/// request's flight and scheduling.
pub const MIN_GRACE: Duration = Duration::from_secs(15);
/// Repair writes tried when releases keep landing between the last read and the write.
pub const REPAIR_ATTEMPTS: u32 = 4;

/// Validates a configured grace: at least [`MIN_GRACE`], or the reasoning of the module docs fails
/// (a grace of 0 repairs a connect half-way through down to below the truth); at most
/// [`MAX_GRACE`], or two graces leave the run too little of its function's timeout to finish.
pub fn check_grace(grace: Duration) -> std::result::Result<Duration, String> {
    if grace > MAX_GRACE {
        return Err(format!(
            "the reconcile grace must be at most {} s, not {} s: a run waits two graces inside \
             the reconciler's {} s timeout and needs the rest for its work",
            MAX_GRACE.as_secs(),
            grace.as_secs_f64(),
            super::budget::FUNCTION_TIMEOUT.as_secs()
        ));
    }
    if grace < MIN_GRACE {
        Err(format!(
            "the reconcile grace must be at least {} s (the handlers' {} s timeout plus a margin), \
             not {} s: a shorter grace can repair a count below the connections it holds",
            MIN_GRACE.as_secs(),
            HANDLER_TIMEOUT.as_secs(),
            grace.as_secs_f64()
        ))
    } else {
        Ok(grace)
    }
}

/// What to reconcile and how.
#[derive(Debug, Clone)]
pub struct Options {
    /// One tenant, or every tenant in the tenant table.
    pub tenant: Option<TenantId>,
    /// Report only: release nothing, write nothing.
    pub dry_run: bool,
    /// Time between the phases (see the module docs). Not checked here (tests use short ones):
    /// the entry points validate configured values with [`check_grace`].
    pub grace: Duration,
    /// The run's and each tenant's time ([`Budget::for_grace`] for a scheduled run).
    pub budget: Budget,
}

/// Where the Management API is, to find gone sockets; `None` skips probing.
pub struct Probe<'a> {
    pub gateway: &'a Gateway,
    pub endpoint: String,
}

/// Where a run waits between its phases (module docs): `grace` of wall-clock time in [`run`].
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Pause {
    /// After phase 1 (the counter before, the probes), before the releases and the read.
    AfterProbe,
    /// After phase 2 (the read and the truth), before the repair.
    AfterRead,
}
