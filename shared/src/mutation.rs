//! Deliberately broken behaviours, for the fault-schedule simulation's mutation tests
//! (decision 2300): each shows the simulation's oracle catches a real class of bug. A mutation is
//! off unless this crate is built with the `mutations` feature (the test suite's build only; no
//! function binary enables it) *and* a test switched it on for one set of tables, so parallel
//! tests on other tables never see it. Without the feature, [`active`] is `false` and compiles away.

use crate::Deps;

/// One deliberate defect, each in a place the designs of decisions 0306 and 1502 rely on.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
pub enum Mutation {
    /// `$connect` gives its tenant reservation back even after the session write admitted it
    /// (an undo on the wrong branch: capacity released twice).
    UndoAfterJoin,
    /// The TTL sweeper decrements without its tombstone (a redelivered record releases again).
    SweepWithoutTombstone,
    /// A shard of a sharded tenant admits one past its share of the cap.
    ShardOverShare,
    /// The reconciler runs its phases back to back, without the grace.
    ReconcileWithoutGrace,
    /// A decrement is sent with the SDK's retries (a lost answer applies it twice).
    RetriedDecrement,
    /// `$connect`'s session write admits one past `connectionsPerSession`.
    SessionOverCap,
    /// `$default` admits one message past `messagesPerMinute` (an off-by-one in the check).
    MessageOffByOne,
    /// A reservation's ledger shard admits one past its share of the coordinate's limit.
    ReservationOverShare,
    /// A bind ignores the ended-resource marker (so a bind after the
    /// remover's event holds its unit for the token's lifetime).
    BindIgnoresEnded,
    /// A kv spend admits one token past the burst (an off-by-one in the tolerance).
    KvOverBurst,
    /// `$disconnect` takes the id out of its session without the membership condition (a
    /// redelivered or late `$disconnect` releases again).
    DisconnectWithoutMembership,
    /// The tenant's per-minute window admits one past `tenantPerMinute`.
    TenantMinuteOffByOne,
    /// A bind to an ended (or unknown) resource releases the entry whatever it holds, a binding
    /// to another resource included.
    BindReleasesBoundElsewhere,
    /// A failed bind deletes the bound row even when an earlier bind wrote it.
    BindDeletesOriginalRow,
    /// The token remover releases an entry whatever its binding (not only the row's own).
    RemoverReleasesAnyBinding,
    /// A kv refund whose answer was lost is sent again under a fresh refund id.
    KvRefundFreshId,
    /// A kv refund that went unanswered takes a new id behind a later refund (its first send
    /// may still land).
    KvRefundAfterUnanswered,
    /// Ending a session counts any 410 to its close as gone at once (a socket still inside its
    /// `$connect` is then counted nowhere).
    SessionEndWithoutProof,
    /// The reconciler's in-flight bound leaves out the releases that land after its read (a leak
    /// is then subtracted that a pending release takes off again).
    ReconcileMissesLateReleases,
    /// A coordinate's first reservation creates its ledger without the live rows written before
    /// it (rate-limiter-py's reservations and tokens then hold nothing).
    LegacyRowsUncounted,
    /// A limit row, once read, stays cached for good (a changed limit never reaches a warm
    /// limiter).
    LimitCachedForever,
}

impl Mutation {
    pub const ALL: [Mutation; 21] = [
        Mutation::UndoAfterJoin,
        Mutation::SweepWithoutTombstone,
        Mutation::ShardOverShare,
        Mutation::ReconcileWithoutGrace,
        Mutation::RetriedDecrement,
        Mutation::SessionOverCap,
        Mutation::MessageOffByOne,
        Mutation::ReservationOverShare,
        Mutation::BindIgnoresEnded,
        Mutation::KvOverBurst,
        Mutation::DisconnectWithoutMembership,
        Mutation::TenantMinuteOffByOne,
        Mutation::BindReleasesBoundElsewhere,
        Mutation::BindDeletesOriginalRow,
        Mutation::RemoverReleasesAnyBinding,
        Mutation::KvRefundFreshId,
        Mutation::KvRefundAfterUnanswered,
        Mutation::SessionEndWithoutProof,
        Mutation::ReconcileMissesLateReleases,
        Mutation::LegacyRowsUncounted,
        Mutation::LimitCachedForever,
    ];
}

/// `v`, or 0 while `m` is switched on for these deps (a term the mutation leaves out).
pub fn unless(deps: &Deps, m: Mutation, v: u64) -> u64 {
    if active(deps, m) {
        0
    } else {
        v
    }
}

#[cfg(feature = "mutations")]
static ON: std::sync::Mutex<Vec<(String, Mutation)>> = std::sync::Mutex::new(Vec::new());

/// Switches `m` on for the deps whose counter table is `counters` (until [`disable`]); the
/// non-fungible limiter, which holds no `Deps`, is matched by its own table's name instead
/// ([`active_on`]), so a test enables a reservation mutation with that name.
#[cfg(feature = "mutations")]
pub fn enable(counters: &str, m: Mutation) {
    let mut on = ON.lock().unwrap_or_else(|p| p.into_inner());
    on.push((counters.to_string(), m));
}

/// Switches every mutation off for the deps whose counter table is `counters`.
#[cfg(feature = "mutations")]
pub fn disable(counters: &str) {
    let mut on = ON.lock().unwrap_or_else(|p| p.into_inner());
    on.retain(|(c, _)| c != counters);
}

/// Whether `m` is switched on for these deps' tables.
#[cfg(feature = "mutations")]
pub fn active(deps: &Deps, m: Mutation) -> bool {
    let on = ON.lock().unwrap_or_else(|p| p.into_inner());
    on.iter()
        .any(|(c, x)| *x == m && *c == deps.tables.counters)
}

/// Whether `m` is switched on for the table named `table` (code that holds a table name, not
/// `Deps`: the non-fungible limiter).
#[cfg(feature = "mutations")]
pub fn active_on(table: &str, m: Mutation) -> bool {
    let on = ON.lock().unwrap_or_else(|p| p.into_inner());
    on.iter().any(|(c, x)| *x == m && c == table)
}

/// Whether `m` is switched on for `table`: never, in a build without the `mutations` feature.
#[cfg(not(feature = "mutations"))]
#[inline(always)]
pub fn active_on(_table: &str, _m: Mutation) -> bool {
    false
}

/// Whether `m` is switched on: never, in a build without the `mutations` feature.
#[cfg(not(feature = "mutations"))]
#[inline(always)]
pub fn active(_deps: &Deps, _m: Mutation) -> bool {
    false
}
