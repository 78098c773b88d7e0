//! How long and how often `$connect` tries before it gives up.

use std::time::Duration;

/// Wrong bets per step before giving up (a write refused with room: another writer moved the
/// item between this process's look and its write). Settle waits ([`SETTLE_ATTEMPTS`]) and
/// throttled attempts have budgets of their own.
pub const MAX_ATTEMPTS: u32 = 8;
/// How recent a reservation must be for a step-1 refusal to wait for it to settle.
pub const SETTLE: Duration = Duration::from_millis(500);
/// Step-1 refusals re-tried while reservations settle (jittered backoff up to 20, 40, 80, 160,
/// 320, 320 ms: under a second in all).
pub(super) const SETTLE_ATTEMPTS: u32 = 6;
/// Step 2 is not sent later than this after step 1 (so a reservation is settled within a known
/// time: the reconciler's grace must exceed it).
pub const JOIN_DEADLINE: Duration = Duration::from_secs(5);
