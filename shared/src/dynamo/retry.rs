//! Pacing the retries of writes that got no definite outcome (a conflict, a throttled item):
//! one jittered exponential backoff policy, with each caller's delays as named constants. Real
//! time on purpose: pacing decides nothing, so it does not go through the injected clock.

use std::time::Duration;

/// How a pause is drawn below its cap.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Jitter {
    /// Uniform in 1..=cap ms ("full jitter": colliding writers spread out most).
    Full,
    /// cap + uniform(0..=cap) ms (never shorter than the cap).
    Added,
    /// Exactly the cap.
    None,
}

/// Exponential backoff: the cap of retry `attempt` is `first_ms << min(attempt, max_doublings)`.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Backoff {
    pub first_ms: u64,
    pub max_doublings: u32,
    pub jitter: Jitter,
}

impl Backoff {
    /// Admission writes and transactions (WebSocket admission): up to 10 ms, 20 ms, 40 ms, ...
    /// capped at 320 ms, full jitter.
    pub const TRANSACTION: Backoff = Backoff {
        first_ms: 10,
        max_doublings: 5,
        jitter: Jitter::Full,
    };

    /// Conditional writes of token buckets and reservation ledgers: 1-2 ms doubling up to
    /// ~64-128 ms.
    pub const CONDITIONAL: Backoff = Backoff {
        first_ms: 1,
        max_doublings: 6,
        jitter: Jitter::Added,
    };

    /// The cap of retry `attempt`, in milliseconds (saturating).
    pub fn cap_ms(&self, attempt: u32) -> u64 {
        let doublings = attempt.min(self.max_doublings).min(63);
        self.first_ms.saturating_mul(1u64 << doublings)
    }

    /// A pause before retry `attempt`.
    pub fn delay(&self, attempt: u32) -> Duration {
        let cap = self.cap_ms(attempt);
        let ms = match self.jitter {
            Jitter::Full => fastrand::u64(1..=cap.max(1)),
            Jitter::Added => cap.saturating_add(fastrand::u64(0..=cap)),
            Jitter::None => cap,
        };
        Duration::from_millis(ms)
    }

    /// Sleeps [`delay`](Self::delay).
    pub async fn wait(&self, attempt: u32) {
        tokio::time::sleep(self.delay(attempt)).await;
    }
}

/// Error codes with which DynamoDB refuses a request before applying any of it: throttling, a
/// request it cannot take (`ValidationException`: an item over 400 KB, a bad expression), missing
/// permission, a missing table or index, a full item collection. A lost answer, a timeout or an
/// internal error may have applied; these never did.
pub fn certainly_not_applied(code: Option<&str>) -> bool {
    is_throttle(code)
        || matches!(
            code,
            Some(
                "ValidationException"
                    | "AccessDeniedException"
                    | "ResourceNotFoundException"
                    | "ItemCollectionSizeLimitExceededException"
                    | "UnrecognizedClientException"
                    | "MissingAuthenticationTokenException"
            )
        )
}

/// Throttling *exceptions* of a single call (the SDK has already retried them with its own
/// backoff): `ThrottlingException`, `ProvisionedThroughputExceededException`,
/// `RequestLimitExceeded`.
pub fn is_throttle(code: Option<&str>) -> bool {
    matches!(
        code,
        Some(
            "ThrottlingException"
                | "ProvisionedThroughputExceededException"
                | "RequestLimitExceeded"
        )
    )
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn each_policy_keeps_its_callers_delays() {
        let t = Backoff::TRANSACTION;
        assert_eq!(
            (0..8).map(|a| t.cap_ms(a)).collect::<Vec<_>>(),
            [10, 20, 40, 80, 160, 320, 320, 320]
        );
        let c = Backoff::CONDITIONAL;
        assert_eq!(c.cap_ms(0), 1);
        assert_eq!(c.cap_ms(6), 64);
        assert_eq!(c.cap_ms(60), 64);
        for a in 0..10 {
            let d = t.delay(a).as_millis() as u64;
            assert!((1..=t.cap_ms(a)).contains(&d), "full jitter {a}: {d}");
            let d = c.delay(a).as_millis() as u64;
            assert!(
                (c.cap_ms(a)..=2 * c.cap_ms(a)).contains(&d),
                "added {a}: {d}"
            );
        }
        let fixed = Backoff {
            first_ms: 5,
            max_doublings: 3,
            jitter: Jitter::None,
        };
        assert_eq!(fixed.delay(2), Duration::from_millis(20));
        assert_eq!(
            Backoff {
                first_ms: u64::MAX,
                ..fixed
            }
            .cap_ms(3),
            u64::MAX
        );
    }

    #[test]
    fn throttling_exceptions_are_not_conflicts() {
        assert!(is_throttle(Some("ThrottlingException")));
        assert!(!is_throttle(Some("TransactionConflict")));
        assert!(!super::super::txn::is_conflict(Some("ThrottlingException")));
    }

    /// Each code DynamoDB refuses with before applying anything gives
    /// `$connect`'s reservation back; an answer that may have applied (lost, timed out, a 5xx, a
    /// conflict) keeps it, for the reconciler.
    #[test]
    fn only_refusals_before_applying_are_certainly_not_applied() {
        let refused = [
            "ThrottlingException",
            "ProvisionedThroughputExceededException",
            "RequestLimitExceeded",
            "ValidationException",
            "AccessDeniedException",
            "ResourceNotFoundException",
            "ItemCollectionSizeLimitExceededException",
            "UnrecognizedClientException",
            "MissingAuthenticationTokenException",
        ];
        for code in refused {
            assert!(certainly_not_applied(Some(code)), "{code} must give back");
        }
        let maybe_applied = [
            None,
            Some("InternalServerError"),
            Some("ServiceUnavailable"),
            Some("RequestTimeout"),
            Some("RequestTimeoutException"),
            Some("TransactionConflictException"),
            Some("TransactionInProgressException"),
            Some("IdempotentParameterMismatchException"),
            Some("validationexception"),
            Some(""),
        ];
        for code in maybe_applied {
            assert!(!certainly_not_applied(code), "{code:?} may have applied");
        }
    }
}
