//! What `$connect` last saw on each folded counter, so each write bets on the right case: a
//! bounded [`Cache`] per process (a lost hint costs one more write, never a wrong decision).

use crate::cache::{Cache, WhenFull};

/// Hints kept before the map is cleared (a cleared hint only costs one wrong guess).
const MAX_HINTS: usize = 10_000;

/// What this process last saw on each folded counter (the window start of a fixed minute, or the
/// TAT in nanoseconds of a GCRA bucket), to guess on the right case. A missing or stale hint costs
/// one more call, never a wrong decision.
#[derive(Debug)]
pub struct Hints(Cache<String, i64>);

impl Default for Hints {
    fn default() -> Self {
        Hints(Cache::new(MAX_HINTS, WhenFull::Clear))
    }
}

impl Hints {
    pub fn get(&self, key: &str) -> Option<i64> {
        self.0.get(key)
    }

    pub(super) fn set(&self, key: &str, v: Option<i64>) {
        match v {
            Some(v) => {
                self.0.insert(key.to_string(), v);
            }
            None => {
                self.0.remove(key);
            }
        }
    }
}
