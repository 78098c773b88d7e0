//! The tenant's policy applied to a decision (decision 1000): shadow mode lets a would-refused
//! request through, the failure policy decides what a DynamoDB failure or timeout gives, and every
//! decision is metered here (`Decisions`, `Refusals`, `DecisionLatency`), so handlers only answer.
//!
//! A shadow decision writes exactly what enforce mode writes; a would-refused `$connect` is then
//! admitted by a second pair of writes with the limits lifted, so the connection holds its slot
//! like any other (disconnect, the sweeper and the reconciler see a normal member). A failed-open
//! request writes nothing more: it is unaccounted, never counted.

use std::time::Instant;

use super::connect::{self, Admission, Hints};
use super::message::{self, MessageAdmission, MinuteHint};
use super::precheck::Precheck;
use super::{Limit, Request};
use crate::error::{Error, Result};
use crate::ids::{ConnectionId, SessionId, TenantId};
use crate::refusal::Refusal;
use crate::telemetry::catalogue::{self, Outcome, Path};
use crate::tenant::{Enforcement, Limits, OnFailure};
use crate::Deps;

/// A cap no tenant reaches: what a shadow tenant's would-refused connect is admitted under.
const LIFTED: u64 = 1 << 40;

/// What a request comes to under its tenant's policy.
#[derive(Debug)]
pub enum Verdict<A> {
    /// Decided as enforce mode decides (admitted, refused, or no session).
    Decided(A),
    /// A shadow tenant: `limit` would have refused; the request went through with `admitted`.
    Shadow {
        limit: Limit,
        refusal: Refusal,
        admitted: A,
    },
    /// DynamoDB failed or timed out and the tenant fails open: let through, unaccounted.
    FailedOpen(Error),
    /// DynamoDB failed or timed out and the tenant fails closed (the default): refuse with a 5xx.
    FailedClosed(Error),
}

/// Whether `e` is the store failing (a DynamoDB error, a timeout, a contention give-up) rather
/// than a bug or bad data (the key guard, a malformed row), which never fails open: the
/// infrastructure failures of [`Error::is_infrastructure`].
pub fn is_store_failure(e: &Error) -> bool {
    e.is_infrastructure()
}

/// The failure verdict for `e` under `limits.on_failure`, metered.
fn failed<A>(path: Path, e: Error, limits: &Limits, t: &TenantId, started: Instant) -> Verdict<A> {
    let open = limits.on_failure == OnFailure::Open && is_store_failure(&e);
    let outcome = if open {
        Outcome::FailOpen
    } else {
        Outcome::Error
    };
    tracing::warn!(tenant = %t, path = path.as_str(), outcome = outcome.as_str(), error = %e, "decision failed");
    meter(path, outcome, None, t, started);
    if open {
        Verdict::FailedOpen(e)
    } else {
        Verdict::FailedClosed(e)
    }
}

fn meter(path: Path, outcome: Outcome, limit: Option<Limit>, t: &TenantId, started: Instant) {
    catalogue::decision(
        path,
        outcome,
        limit.map(Limit::name),
        Some(t.as_str()),
        started.elapsed(),
    );
}

fn would_refuse(path: Path, limit: Limit, t: &TenantId, sid: &SessionId, started: Instant) {
    tracing::info!(tenant = %t, session = %crate::ticket::fingerprint(sid.as_str()), limit = limit.name(), path = path.as_str(), "shadow: would refuse");
    meter(path, Outcome::ShadowRefused, Some(limit), t, started);
}

/// `$connect` under the tenant's policy: [`connect::admit_hinted`] (its calls and units); for a
/// shadow tenant's would-refuse, 2 more `UpdateItem` (2 WCU) that admit it with the caps lifted.
pub async fn connect(r: Request<'_>, hints: &Hints) -> Verdict<Admission> {
    let (t, sid, limits) = (r.t, r.sid, r.limits);
    let started = Instant::now();
    let path = Path::Connect;
    let decided = match connect::admit_hinted(r, hints).await {
        Ok(a) => a,
        Err(e) => return failed(path, e, limits, t, started),
    };
    match decided {
        Admission::Refused { limit, refusal } if limits.enforcement == Enforcement::Shadow => {
            would_refuse(path, limit, t, sid, started);
            // Shadow lifts every cap but the session's ceiling: its ids live in one item.
            let lifted = Limits {
                connections_per_session: crate::tenant::MAX_CONNECTIONS_PER_SESSION,
                tenant_connections: LIFTED,
                session_per_minute: LIFTED,
                tenant_per_minute: LIFTED,
                ..*limits
            };
            let r = Request {
                limits: &lifted,
                ..r
            };
            match connect::admit_hinted(r, hints).await {
                Ok(admitted) => Verdict::Shadow {
                    limit,
                    refusal,
                    admitted,
                },
                Err(e) => failed(path, e, limits, t, started),
            }
        }
        Admission::Refused { limit, refusal } => {
            meter(path, Outcome::Refused, Some(limit), t, started);
            Verdict::Decided(Admission::Refused { limit, refusal })
        }
        a @ (Admission::Admitted | Admission::AlreadyAdmitted) => {
            meter(path, Outcome::Admitted, None, t, started);
            Verdict::Decided(a)
        }
        a @ (Admission::NoSession | Admission::TicketSpent { .. }) => Verdict::Decided(a),
    }
}

/// `$default` under the tenant's policy: [`message::count`] (its calls and units; a refused message
/// is counted in both modes). A shadow tenant's would-refused message is delivered.
pub async fn message(
    deps: &Deps,
    t: &TenantId,
    sid: &SessionId,
    cid: &ConnectionId,
    limits: &Limits,
    hint: &MinuteHint,
) -> Verdict<MessageAdmission> {
    let started = Instant::now();
    let path = Path::Message;
    let r = Request {
        deps,
        t,
        sid,
        cid,
        limits,
        nonce: None,
        ticket: None,
    };
    let counted = match message::count(r, hint).await {
        Ok(c) => c,
        Err(e) => return failed(path, e, limits, t, started),
    };
    let limit = Limit::MessagesPerMinute;
    match counted {
        MessageAdmission::Refused {
            refusal,
            connection_ids,
        } if limits.enforcement == Enforcement::Shadow => {
            would_refuse(path, limit, t, sid, started);
            Verdict::Shadow {
                limit,
                refusal,
                admitted: MessageAdmission::Admitted { connection_ids },
            }
        }
        r @ MessageAdmission::Refused { .. } => {
            meter(path, Outcome::Refused, Some(limit), t, started);
            Verdict::Decided(r)
        }
        a @ MessageAdmission::Admitted { .. } => {
            meter(path, Outcome::Admitted, None, t, started);
            Verdict::Decided(a)
        }
        n @ MessageAdmission::NoSession => Verdict::Decided(n),
    }
}

/// `$default` when its tenant row could not be read: the failure policy the authorizer captured
/// at `$connect` (`captured`, from the context) decides; without one it fails closed.
pub fn message_unread(
    e: Error,
    captured: Option<&Limits>,
    t: &TenantId,
) -> Verdict<MessageAdmission> {
    let closed = Limits::example(0, 0, 0, 0, 0, 0);
    failed(
        Path::Message,
        e,
        captured.unwrap_or(&closed),
        t,
        Instant::now(),
    )
}

/// The authorizer's pre-check under the tenant's policy, metered: a shadow tenant's
/// `OverLimit` becomes `Allow` (logged and metered `shadow_refused`); a store failure becomes
/// `Allow` for a tenant failing open, and stays an error (API Gateway answers 500) otherwise.
pub fn authorizer(
    checked: Result<Precheck>,
    limits: &Limits,
    t: &TenantId,
    sid: &SessionId,
    started: Instant,
) -> Result<Precheck> {
    let path = Path::Authorizer;
    match checked {
        Ok(Precheck::OverLimit(limit)) if limits.enforcement == Enforcement::Shadow => {
            would_refuse(path, limit, t, sid, started);
            Ok(Precheck::Allow)
        }
        Ok(Precheck::OverLimit(limit)) => {
            meter(path, Outcome::Refused, Some(limit), t, started);
            Ok(Precheck::OverLimit(limit))
        }
        Ok(Precheck::Allow) => {
            meter(path, Outcome::Admitted, None, t, started);
            Ok(Precheck::Allow)
        }
        Ok(other) => Ok(other),
        Err(e) => match failed::<()>(path, e, limits, t, started) {
            Verdict::FailedClosed(e) => Err(e),
            _ => Ok(Precheck::Allow),
        },
    }
}

#[cfg(test)]
mod tests {
    use std::time::Duration;

    use super::*;
    use crate::isolation::CrossTenantKey;

    /// Decision 1000: what the admission paths return when DynamoDB fails, times out or stays
    /// contended follows the tenant's `onFailure`; a bug or bad data never fails open.
    #[test]
    fn store_failures_are_the_infrastructure_errors_of_the_admission_paths() {
        for e in [
            Error::contended("reserving a connection for tenant t", 8),
            Error::build_request("BatchGetItem", "missing keys"),
            Error::TimedOut {
                what: "joining c to t/s".into(),
                after: Duration::from_secs(5),
            },
            Error::Other("one-off".into()),
        ] {
            assert!(is_store_failure(&e), "{e}");
        }
        for e in [
            Error::MalformedItem {
                table: "sessions".into(),
                reason: "x".into(),
            },
            Error::CrossTenantKey(CrossTenantKey {
                tenant: "ab".into(),
                key: "abc:conn:x".into(),
            }),
        ] {
            assert!(!is_store_failure(&e), "{e}");
        }
    }
}
