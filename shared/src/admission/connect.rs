//! `$connect`: the authoritative admission, two ordered conditional writes and no transaction
//! (decision 0306). The per-minute windows are folded into the two items, so no other row is
//! touched:
//!
//! | step | item | write | condition |
//! |---|---|---|---|
//! | 1 reserve | counter `{tenant}` | `ADD itemCount 1, ver 1, resvTotal 1`, `SET reservedAt`, the tenant's minute | `itemCount < tenantConnections`, room this minute |
//! | 2 join | the session | `ADD connectionIds {cid}`, `SET sessionTTL`, the session's minute | exists, not expired, `size(connectionIds) < connectionsPerSession`, not already a member, room this minute |
//! | undo (only when 2 refused or gave up) | counter `{tenant}` | `ADD itemCount -1, ver 1, relTotal 1`, the minute given back | — |
//!
//! The tenant goes first: a crash between the writes leaves the tenant's count one too high (an
//! under-admission that `reconcile` repairs), never too low. Every write is sent at most once (no
//! SDK retry; only throttled attempts again). Admitted: 2 `UpdateItem` (2 WCU);
//! refused by the tenant: 1 (1 WCU); refused by the session: 3 (3 WCU). No call when a limit is 0.
//!
//! A connect with a ticket first counts itself as one of the ticket's uses ([`ticket_use`], one
//! idempotent `UpdateItem` on `{tenant}:ticket:{id}`, decision 3607), and gives the use back when
//! the connect is refused: admitted 3 `UpdateItem` (3 WCU); refused by the ticket 1 (1 WCU); by
//! the tenant 3, by the session 5.
//!
//! The minute windows: `fixed` tenants keep `connMinute` (the window's start) and
//! `connMinuteCount` on each item; `gcra` tenants keep `connTat` (`Rate::per_minute(limit)`). Each
//! write bets on a case (same window or a new one; idle or draining bucket) from what this
//! process last saw ([`Hints`]); a wrong bet fails its condition and the `ALL_OLD` image decides:
//! refused, or the right case (one more call, no read).
//!
//! A refusal by step 1 while another connect's reservation may still be undone (`reservedAt`
//! within [`SETTLE`]) is tried again after a short backoff, so a reservation that step 2 is about
//! to give back does not turn away a connect that fits once it is given back.

mod hints;
mod join;
mod reserve;
pub mod ticket_use;
pub(super) use counter::count_move;
pub use hints::Hints;
pub use join::join;
pub use reserve::{reserve, undo};
mod admit;
mod answer;
mod budgets;
mod counter;
mod minute;
mod sharded;

pub use admit::*;
pub use answer::*;
pub use budgets::*;
pub(super) use minute::*;
