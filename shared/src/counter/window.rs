//! The per-minute connection limits, as seed 003's fixed windows: `minStart = floor(epoch/60)*60`,
//! rows expiring at `minStart + 61`. Kept behind [`MinuteWindow`] so the per-tenant GCRA option
//! (`rateAlgorithm = gcra`, decision 0304) replaces the condition and update expression without
//! touching the admission transaction.

use std::time::Duration;

use crate::clock::Timestamp;

/// Seconds in a window.
pub const WINDOW_SECS: i64 = 60;

#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct MinuteWindow {
    /// Epoch seconds the window starts at.
    pub start: i64,
}

impl MinuteWindow {
    pub fn at(now: Timestamp) -> Self {
        MinuteWindow {
            start: now.as_secs().div_euclid(WINDOW_SECS) * WINDOW_SECS,
        }
    }

    /// The row's `itemTTL`: one second after the window ends.
    pub fn item_ttl(self) -> i64 {
        self.start + WINDOW_SECS + 1
    }

    /// Time from `now` until the next window opens (when a refused attempt can succeed).
    pub fn until_next(self, now: Timestamp) -> Duration {
        Timestamp::from_secs(self.start + WINDOW_SECS).since(now)
    }

    pub fn duration() -> Duration {
        Duration::from_secs(WINDOW_SECS as u64)
    }
}

/// The per-minute admission of one counter row as a transaction item: `ADD itemCount 1` and
/// `SET itemTTL = minStart + 61`, if the row is absent or `itemCount < cap`. One write, and nothing
/// spent when the condition fails. A tenant with `rateAlgorithm = gcra` gets a GCRA update instead
/// (`admission::connect`, decision 0304); `connect` calls this for both per-minute limits of a fixed
/// tenant and only reads whether its condition failed.
pub fn admit_item(
    table: &str,
    key: String,
    cap: u64,
    now: Timestamp,
) -> crate::Result<aws_sdk_dynamodb::types::TransactWriteItem> {
    use crate::admission::{item::n, txn};
    use crate::counter::attr;
    let w = MinuteWindow::at(now);
    txn::update(
        table,
        std::collections::HashMap::from([(
            attr::KEY.to_string(),
            aws_sdk_dynamodb::types::AttributeValue::S(key),
        )]),
        "ADD #c :one SET #t = :ttl",
        Some("attribute_not_exists(#c) OR #c < :cap"),
        txn::names(&[("#c", attr::ITEM_COUNT), ("#t", attr::ITEM_TTL)]),
        txn::values(vec![
            (":one", n(1)),
            (":ttl", n(w.item_ttl())),
            (":cap", n(cap)),
        ]),
    )
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn windows_are_fixed_minutes() {
        let now = Timestamp::from_millis(1_700_000_075_500);
        let w = MinuteWindow::at(now);
        assert_eq!(w.start, 1_700_000_040);
        assert_eq!(w.item_ttl(), 1_700_000_101);
        assert_eq!(w.until_next(now), Duration::from_millis(24_500));
        assert_eq!(
            MinuteWindow::at(Timestamp::from_secs(1_700_000_040)).start,
            1_700_000_040
        );
    }
}
