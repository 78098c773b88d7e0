//! Ending a session's connections: the sockets are closed first, and each stays counted — its id in
//! its session row, where the reconciler's truth finds it — until it is known gone (decision 2208).
//! Session `DELETE` ([`delete`]), `PUT` over an expired session ([`drain_expired`]) and
//! `turnstile tenant delete` ([`end_tenant`]) end sessions here; the TTL sweeper, whose row
//! DynamoDB already deleted, closes before it releases ([`sweep`]).
//!
//! A socket is **known gone** when its close answered 2xx (API Gateway closes it), or answered
//! 410 at least [`MIN_GRACE`] after the last join of its row (`joinedAt`): API Gateway answers 410
//! for a socket still inside its `$connect` too, and no `$connect` still runs that long after its
//! join (the handlers' timeout is below it). Any other socket — a failed close, a 410 sooner — is
//! left in the row, counted: its `$disconnect`, the reconciler (gone on two probes a grace apart)
//! or the sweep of the row releases it.
//!
//! | step | call | write units |
//! |---|---|---|
//! | read the row | 1 GetItem (strongly consistent) | — |
//! | end it (a row with connections not ended yet): `sessionTTL` removed (joins, messages, tickets and refreshes refused, as on expiry; DynamoDB's TTL no longer deletes it), `endedBy` = this call's token, with the session count's `-1` | 1 TransactWriteItems, with a request token | 4 |
//! | close | 1 DeleteConnection per socket (a failed one tried again) | — |
//! | release: the row deleted (every socket known gone) or the known-gone ids taken out of it, while it holds exactly the ids read, with the decrement of each charged counter | 1 TransactWriteItems, with a request token | 2 per item |
//!
//! A session without connections is deleted with its unit in one transaction, as before. An
//! `$disconnect` landing between the read and the release (a closed socket's own) changes the row:
//! the release is refused, its old image read, and the next attempt releases what is left. An
//! ended row left holding sockets is finished by a later `DELETE` or `PUT` of the session, or by
//! the reconciler, which closes its sockets still open and deletes it once it is empty.

mod sweep;
mod tenant;
pub use sweep::{expired_of, sweep, Sweep};
pub use tenant::{end_tenant, has_sessions, TenantEnded};
mod delete;

pub use delete::*;
