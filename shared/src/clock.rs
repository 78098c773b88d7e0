//! Time as an injected dependency: every decision takes its "now" from a [`Clock`], so tests move a
//! [`ManualClock`] instead of sleeping, and replays (`--now`) decide at a chosen instant.

use std::fmt;
use std::sync::atomic::{AtomicI64, Ordering};
use std::sync::Arc;
use std::time::{Duration, SystemTime, UNIX_EPOCH};

/// A wait as the JSON retry hint `retryAfter` carries it everywhere (HTTP bodies, frames, the CLI):
/// seconds, with milliseconds as fractions, rounded up so that a refusal never says 0.
pub fn retry_after_secs(wait: Duration) -> f64 {
    wait.as_nanos().div_ceil(1_000_000) as f64 / 1000.0
}

/// An instant, as nanoseconds since the Unix epoch.
///
/// Nanoseconds keep GCRA arithmetic exact for rates such as 3 per second (a 333,333,333 ns interval)
/// that milliseconds would round; an `i64` lasts until the year 2262.
#[derive(Copy, Clone, Debug, PartialEq, Eq, PartialOrd, Ord, Hash, Default)]
pub struct Timestamp(i64);

impl Timestamp {
    /// The last representable instant (2262-04-11T23:47:16.854Z).
    pub const MAX: Timestamp = Timestamp(i64::MAX);
    /// The first representable instant (1677-09-21).
    pub const MIN: Timestamp = Timestamp(i64::MIN);

    pub const fn from_nanos(nanos: i64) -> Self {
        Timestamp(nanos)
    }
    pub const fn from_millis(millis: i64) -> Self {
        Timestamp(millis.saturating_mul(1_000_000))
    }
    pub const fn from_secs(secs: i64) -> Self {
        Timestamp(secs.saturating_mul(1_000_000_000))
    }
    pub const fn as_nanos(self) -> i64 {
        self.0
    }
    /// Whole milliseconds, rounded down.
    pub const fn as_millis(self) -> i64 {
        self.0.div_euclid(1_000_000)
    }
    /// Whole seconds, rounded down (DynamoDB TTL attributes are epoch seconds).
    pub const fn as_secs(self) -> i64 {
        self.0.div_euclid(1_000_000_000)
    }
    pub fn plus(self, d: Duration) -> Self {
        Timestamp(self.0.saturating_add(duration_nanos(d)))
    }
    pub fn minus(self, d: Duration) -> Self {
        Timestamp(self.0.saturating_sub(duration_nanos(d)))
    }
    /// The time from `earlier` to `self`, zero if `earlier` is later.
    pub fn since(self, earlier: Timestamp) -> Duration {
        Duration::from_nanos(self.0.saturating_sub(earlier.0).max(0) as u64)
    }
    /// RFC 3339 in UTC with millisecond precision, the form the `RateLimitState` view uses.
    pub fn to_rfc3339(self) -> String {
        let secs = self.as_secs();
        let millis = self.as_millis().rem_euclid(1000);
        let (y, m, d) = civil_from_days(secs.div_euclid(86_400));
        let sod = secs.rem_euclid(86_400);
        format!(
            "{y:04}-{m:02}-{d:02}T{:02}:{:02}:{:02}.{millis:03}Z",
            sod / 3600,
            (sod / 60) % 60,
            sod % 60
        )
    }
}

impl fmt::Display for Timestamp {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(&self.to_rfc3339())
    }
}

/// Saturating conversion: durations beyond ~292 years are treated as "forever".
pub fn duration_nanos(d: Duration) -> i64 {
    i64::try_from(d.as_nanos()).unwrap_or(i64::MAX)
}

/// Days since 1970-01-01 to a proleptic Gregorian date (Howard Hinnant's algorithm).
fn civil_from_days(days: i64) -> (i64, u32, u32) {
    let z = days + 719_468;
    let era = z.div_euclid(146_097);
    let doe = z.rem_euclid(146_097);
    let yoe = (doe - doe / 1460 + doe / 36_524 - doe / 146_096) / 365;
    let doy = doe - (365 * yoe + yoe / 4 - yoe / 100);
    let mp = (5 * doy + 2) / 153;
    let d = (doy - (153 * mp + 2) / 5 + 1) as u32;
    let m = if mp < 10 { mp + 3 } else { mp - 9 } as u32;
    let y = yoe + era * 400 + i64::from(m <= 2);
    (y, m, d)
}

/// Where decisions get the current time.
pub trait Clock: Send + Sync + fmt::Debug {
    fn now(&self) -> Timestamp;
}

/// Shared handle to a clock, cheap to clone into handlers and limiters.
pub type SharedClock = Arc<dyn Clock>;

/// The wall clock.
#[derive(Debug, Default, Clone, Copy)]
pub struct SystemClock;

impl Clock for SystemClock {
    fn now(&self) -> Timestamp {
        let nanos = SystemTime::now()
            .duration_since(UNIX_EPOCH)
            .map(duration_nanos)
            .unwrap_or(0);
        Timestamp(nanos)
    }
}

/// A clock that only moves when told to; clones share the same time.
#[derive(Debug, Clone, Default)]
pub struct ManualClock(Arc<AtomicI64>);

impl ManualClock {
    pub fn new(start: Timestamp) -> Self {
        ManualClock(Arc::new(AtomicI64::new(start.as_nanos())))
    }
    /// Starts at the current wall-clock time, so TTLs written to DynamoDB Local stay meaningful.
    pub fn starting_now() -> Self {
        Self::new(SystemClock.now())
    }
    pub fn set(&self, t: Timestamp) {
        self.0.store(t.as_nanos(), Ordering::SeqCst);
    }
    pub fn advance(&self, d: Duration) {
        self.0.fetch_add(duration_nanos(d), Ordering::SeqCst);
    }
}

impl Clock for ManualClock {
    fn now(&self) -> Timestamp {
        Timestamp(self.0.load(Ordering::SeqCst))
    }
}

/// The wall clock as a [`SharedClock`].
pub fn system() -> SharedClock {
    Arc::new(SystemClock)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn manual_clock_moves_only_when_told_and_clones_share_time() {
        let clock = ManualClock::new(Timestamp::from_millis(1_000));
        let other = clock.clone();
        assert_eq!(clock.now(), Timestamp::from_millis(1_000));
        clock.advance(Duration::from_millis(250));
        assert_eq!(other.now().as_millis(), 1_250);
        other.set(Timestamp::from_secs(5));
        assert_eq!(clock.now().as_secs(), 5);
    }

    #[test]
    fn system_clock_is_near_the_wall_clock() {
        let wall = SystemTime::now().duration_since(UNIX_EPOCH).unwrap();
        let now = SystemClock.now();
        assert!((now.as_millis() - wall.as_millis() as i64).abs() < 5_000);
    }

    #[test]
    fn conversions_round_down_and_since_never_goes_negative() {
        let t = Timestamp::from_nanos(1_999_999_999);
        assert_eq!(t.as_secs(), 1);
        assert_eq!(t.as_millis(), 1_999);
        assert_eq!(Timestamp::from_nanos(-1).as_secs(), -1);
        assert_eq!(t.since(t.plus(Duration::from_secs(1))), Duration::ZERO);
        assert_eq!(
            t.plus(Duration::from_secs(2)).since(t),
            Duration::from_secs(2)
        );
    }

    #[test]
    fn rfc3339_matches_known_instants() {
        assert_eq!(
            Timestamp::from_secs(0).to_rfc3339(),
            "1970-01-01T00:00:00.000Z"
        );
        // 2024-03-15T14:30:45Z, an instant with every field non-zero.
        assert_eq!(
            Timestamp::from_millis(1_710_513_045_123).to_rfc3339(),
            "2024-03-15T14:30:45.123Z"
        );
        assert_eq!(
            Timestamp::from_secs(951_782_400).to_rfc3339(),
            "2000-02-29T00:00:00.000Z"
        );
    }
}
