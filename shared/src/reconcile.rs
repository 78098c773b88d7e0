//! The reconciler: repairs a tenant's open-connection count that leaked high —
//! a `$connect` whose second write never happened, a `$disconnect` API Gateway never delivered, a
//! TTL sweep that ended in the DLQ — and releases connection ids whose socket is gone.
//!
//! The truth of a tenant is the union of its sessions' `connectionIds` (one `Query` of the session
//! table's tenant partition), rows a session `DELETE` ended included: their sockets are not known
//! gone yet (decision 2208). A run goes in three phases, `grace` apart (decision 0306):
//!
//! 1. **before**: read the counter (`resvTotal`, `ver`); ask the Management API about every id
//!    (`GET @connections`). A 410 is only a candidate: a connection inside its own `$connect` answers
//!    410 too. A probe that errors counts as live (and is reported), never skips the tenant.
//! 2. **read** (a grace later): candidates still gone are released as a disconnect releases them.
//!    Then the counter is read (`C`, `resvTotal`, `relTotal`, `repairs`) and, right after, the truth
//!    `T` (`truthAt` = when that read ended).
//! 3. **repair** (a grace later): the counter is read again. The units of `C` not in `T` are leaks,
//!    reservations pending at phase 2 (made within a grace before it: at most the growth of
//!    `resvTotal` since phase 1), or releases pending at phase 2 (decremented within a grace after
//!    it: at most the growth of `relTotal` since phase 2; any later is a crash, a leak). So
//!    `leak ≥ C − T − in_flight`, and `ADD itemCount −leak` is safe whatever runs meanwhile; it is
//!    conditioned on `relTotal` and `repairs` unchanged since that read (re-read and retried when a
//!    release lands in between), so no release and no other reconciler is counted twice. When
//!    nothing at all moved (`ver` unchanged since phase 1) the count is set to `T` exactly (which may
//!    raise it). Under load a leak below the in-flight bound waits for a quieter run; the count is
//!    never set below the connections that hold capacity. `grace` must exceed how long a `$connect`
//!    or release can be half-way: the handler timeout plus a margin ([`MIN_GRACE`]).
//!
//! A TTL sweep that arrives after a repair decrements only for a deletion later than `truthAt` plus
//! [`release::TRUTH_MARGIN`] (`release::swept`), so a session the truth already left out is not
//! subtracted twice even when this host's clock runs behind by up to that margin.
//!
//! Costs per tenant: 1 Query (2 with probing), 3 GetItem, at most 1 UpdateItem (one more per
//! release landing between the last read and the write, at most [`REPAIR_ATTEMPTS`]), plus 2
//! Management API calls per gone candidate and 2 UpdateItem per session with gone ids. A sharded
//! tenant (decision 1502): 3 BatchGetItem and at most 1 TransactWriteItems of its N shards instead.
//! The session count (decision 2204, `sessions`): 2 GetItem, at most 1 UpdateItem. With probing,
//! 1 GetItem of where the probes start, and 1 UpdateItem when that moves (`probe`).
//!
//! Ended rows are finished here too ([`ended`], decision 2208): their sockets found open in phase 1
//! are closed (1 DeleteConnection each), and those the truth finds empty are deleted in phase 3 (1
//! DeleteItem each).
//!
//! A run fits its function (decision 2205, [`budget`]): the grace is at most [`MAX_GRACE`], each
//! tenant's probes have a time budget, tenants are taken while the run's budget lasts (the rest are
//! `Deferred`), and a run over every tenant starts after the last one the previous run took.

pub mod budget;
mod ended;
mod probe;
mod report;
mod sessions;
mod start;
mod truth;
pub use budget::{Budget, MAX_GRACE};
pub use report::{Outcome, Report, TenantReport};
mod options;
mod run;
mod shards;
mod snapshot;
mod work;

pub use options::*;
pub use run::*;
