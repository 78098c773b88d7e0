//! Per-item write rates, for throttling an item past W writes per second (DynamoDB throttles a hot
//! partition; one item is the smallest hot spot).

use std::collections::{HashMap, VecDeque};
use std::sync::Mutex;
use std::time::{Duration, Instant};

use crate::keys::ItemKey;

const WINDOW: Duration = Duration::from_secs(1);

/// Writes admitted per item in the last second.
#[derive(Debug, Default)]
pub struct ItemRates {
    recent: Mutex<HashMap<ItemKey, VecDeque<Instant>>>,
}

impl ItemRates {
    /// Admits one write to each of `keys` at `now` if every one of them has had fewer than
    /// `per_second` writes in the last second; otherwise admits none and returns the indexes of
    /// those over the rate. Throttled writes are not counted (DynamoDB does not apply them).
    pub fn admit(&self, keys: &[ItemKey], per_second: u32, now: Instant) -> Result<(), Vec<usize>> {
        let mut recent = self.recent.lock().unwrap_or_else(|p| p.into_inner());
        let mut over = Vec::new();
        for (i, k) in keys.iter().enumerate() {
            if let Some(q) = recent.get_mut(k) {
                while q.front().is_some_and(|t| now.duration_since(*t) >= WINDOW) {
                    q.pop_front();
                }
                if q.len() >= per_second as usize {
                    over.push(i);
                }
            } else if per_second == 0 {
                over.push(i);
            }
        }
        if !over.is_empty() {
            return Err(over);
        }
        for k in keys {
            recent.entry(k.clone()).or_default().push_back(now);
        }
        // Forget idle items now and then so the map stays small.
        if recent.len() > 10_000 {
            recent.retain(|_, q| q.back().is_some_and(|t| now.duration_since(*t) < WINDOW));
        }
        Ok(())
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::keys::test_key as k;

    #[test]
    fn an_item_is_throttled_past_w_writes_in_a_second() {
        let r = ItemRates::default();
        let t0 = Instant::now();
        for _ in 0..3 {
            assert!(r.admit(&[k("hot")], 3, t0).is_ok());
        }
        assert_eq!(r.admit(&[k("cold"), k("hot")], 3, t0), Err(vec![1]));
        // The refused transaction counted for neither item.
        assert!(r.admit(&[k("cold")], 1, t0).is_ok());
        // A second later the window has moved on.
        assert!(r.admit(&[k("hot")], 3, t0 + WINDOW).is_ok());
        assert_eq!(r.admit(&[k("x")], 0, t0), Err(vec![0]));
    }
}
