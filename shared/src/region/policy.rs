//! Where allotment should go: a pure function from each region's allotment and reported demand
//! to at most one move. Allotment follows max-min fair shares of demand (so when demand exceeds
//! the limit, no region holds more than it uses while another is refused), with hysteresis so
//! that it does not swing back and forth on noise.
//! Off the request path: the rebalancer calls it, then runs the move's saga.

/// One region as the rebalancer sees it.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Standing {
    pub region: String,
    /// What it holds plus what is in transit to it (else a move still in quarantine looks like
    /// a shortage and is made again).
    pub allotment: u64,
    /// Tokens asked for in the last period (admitted plus refused), as the region reported them.
    pub demand: u64,
    /// Whether its lease is current (a region that stopped renewing is reclaimed, not rebalanced).
    pub live: bool,
}

/// The hysteresis: a region takes more only when it is short of its fair share by more than
/// `high_permille` of what it holds (and at least `min_move`); while the limit has room to spare, a
/// giver keeps `low_permille` of headroom over its own demand.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Hysteresis {
    pub high_permille: u64,
    pub low_permille: u64,
    pub min_move: u64,
}

impl Default for Hysteresis {
    fn default() -> Self {
        Hysteresis {
            high_permille: 200,
            low_permille: 200,
            min_move: 1,
        }
    }
}

/// A move to make: `amount` from one region to another.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Order {
    pub from: String,
    pub to: String,
    pub amount: u64,
}

/// Max-min fair shares of `total` for `demands`: the smallest demands are met in full, the rest
/// share what is left equally (whole tokens, rounding down). The shares never sum past `total`.
pub fn fair_shares(total: u64, demands: &[u64]) -> Vec<u64> {
    let mut order: Vec<usize> = (0..demands.len()).collect();
    order.sort_by_key(|i| demands[*i]);
    let mut shares = vec![0; demands.len()];
    let mut left = total;
    for (k, i) in order.iter().enumerate() {
        let even = left / (demands.len() - k) as u64;
        shares[*i] = demands[*i].min(even);
        left -= shares[*i];
    }
    shares
}

/// The one move that helps most: to the live region short of its fair share by the most (beyond
/// the hysteresis), from the live region holding the most beyond what it keeps; `None` when
/// nobody is short enough or nobody can give. Dead regions are left to the reclaim.
pub fn plan(regions: &[Standing], h: &Hysteresis) -> Option<Order> {
    let live: Vec<&Standing> = regions.iter().filter(|s| s.live).collect();
    let total: u64 = live.iter().map(|s| s.allotment).sum();
    let fair = fair_shares(total, &live.iter().map(|s| s.demand).collect::<Vec<_>>());
    let slack = (total - fair.iter().sum::<u64>()) / live.len().max(1) as u64;
    let (to, short) = live
        .iter()
        .zip(&fair)
        .filter_map(|(s, f)| {
            let short = f.saturating_sub(s.allotment);
            let band = h.min_move.max(1).max(s.allotment * h.high_permille / 1000);
            (short > band || (short >= h.min_move.max(1) && s.allotment == 0)).then_some((s, short))
        })
        .max_by(|a, b| a.1.cmp(&b.1).then_with(|| b.0.region.cmp(&a.0.region)))?;
    let (from, spare) = live
        .iter()
        .zip(&fair)
        .filter(|(s, _)| s.region != to.region)
        .map(|(s, f)| {
            let keep = f + (s.demand * h.low_permille / 1000).min(slack);
            (s, s.allotment.saturating_sub(keep))
        })
        .max_by(|a, b| a.1.cmp(&b.1).then_with(|| b.0.region.cmp(&a.0.region)))?;
    let amount = short.min(spare);
    (amount >= h.min_move.max(1)).then(|| Order {
        from: from.region.clone(),
        to: to.region.clone(),
        amount,
    })
}

#[cfg(test)]
mod tests {
    use super::*;

    fn st(region: &str, allotment: u64, demand: u64) -> Standing {
        Standing {
            region: region.into(),
            allotment,
            demand,
            live: true,
        }
    }

    #[test]
    fn a_busy_region_takes_from_an_idle_one() {
        let r = [st("a", 50, 90), st("b", 50, 5)];
        let o = plan(&r, &Hysteresis::default()).expect("a move");
        assert_eq!(
            o,
            Order {
                from: "b".into(),
                to: "a".into(),
                amount: 40
            }
        );
    }

    #[test]
    fn demand_inside_the_band_moves_nothing() {
        // 55 is within 20% over 50: no move, however idle b is.
        assert_eq!(
            plan(&[st("a", 50, 55), st("b", 50, 0)], &Hysteresis::default()),
            None
        );
        // a is short, but b needs what it holds.
        assert_eq!(
            plan(&[st("a", 50, 90), st("b", 50, 45)], &Hysteresis::default()),
            None
        );
    }

    #[test]
    fn no_swing_back_after_a_move() {
        let h = Hysteresis::default();
        let o = plan(&[st("a", 50, 90), st("b", 50, 5)], &h).expect("a move");
        // After the move, same demand: a holds 90, b 10; nobody is short beyond the band.
        assert_eq!(o.amount, 40);
        assert_eq!(plan(&[st("a", 90, 90), st("b", 10, 5)], &h), None);
    }

    #[test]
    fn over_the_limit_idle_headroom_goes_to_the_busy_region() {
        // Demand 3.3 x the limit: b and c use 5 each; keeping 20% headroom for them would leave
        // a refused while tokens idle.
        let r = [st("a", 10, 90), st("b", 10, 5), st("c", 10, 5)];
        let o = plan(&r, &Hysteresis::default()).expect("a move");
        assert_eq!((o.to.as_str(), o.amount), ("a", 5));
        assert_eq!(fair_shares(30, &[90, 5, 5]), vec![20, 5, 5]);
    }

    #[test]
    fn fair_shares_never_exceed_the_total() {
        for total in 0..40 {
            for d in [[0, 0, 0], [1, 50, 3], [40, 40, 40], [7, 8, 9]] {
                let f = fair_shares(total, &d);
                assert!(f.iter().sum::<u64>() <= total, "{total} {d:?} {f:?}");
                assert!(f.iter().zip(&d).all(|(s, want)| s <= want));
            }
        }
    }

    #[test]
    fn a_dead_region_neither_gives_nor_takes() {
        let mut dead = st("b", 50, 0);
        dead.live = false;
        assert_eq!(plan(&[st("a", 50, 90), dead], &Hysteresis::default()), None);
    }
}
