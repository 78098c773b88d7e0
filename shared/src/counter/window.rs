//! The per-minute connection limits, as fixed calendar-minute windows: `minStart =
//! floor(epoch/60)*60`, folded into the tenant's counter item and the session item (`connMinute`,
//! `connMinuteCount`; decision 0306). A tenant with `rateAlgorithm = gcra` keeps a GCRA TAT there
//! instead (0304).

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
