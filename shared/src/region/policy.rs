//! Where allotment should go: a pure function from each region's allotment and reported demand
//! to at most one move, with hysteresis so that allotment does not swing back and forth on noise.
//! Off the request path: the rebalancer calls it, then runs the move's saga.

/// One region as the rebalancer sees it.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Standing {
    pub region: String,
    pub allotment: u64,
    /// Tokens asked for in the last period (admitted plus refused), as the region reported them.
    pub demand: u64,
    /// Whether its lease is current (a region that stopped renewing is reclaimed, not rebalanced).
    pub live: bool,
}

/// The hysteresis: a region gets more only when its demand is over its allotment by more than
/// `high_permille`; a giver gives only what its demand leaves unused beyond `low_permille` of
/// headroom; and no move is smaller than `min_move`.
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

/// The demand a region must show before it is given more.
fn wants_more(s: &Standing, h: &Hysteresis) -> Option<u64> {
    let threshold = s.allotment + s.allotment * h.high_permille / 1000;
    (s.live && s.demand > threshold).then(|| s.demand - s.allotment)
}

/// What a region can give while keeping `low_permille` headroom over its demand.
fn spare(s: &Standing, h: &Hysteresis) -> u64 {
    if !s.live {
        return 0;
    }
    let keep = s.demand + s.demand * h.low_permille / 1000;
    s.allotment.saturating_sub(keep)
}

/// The one move that helps most: to the live region short by the most, from the live region with
/// the most to spare; `None` when nobody is short beyond the hysteresis or nobody can give.
pub fn plan(regions: &[Standing], h: &Hysteresis) -> Option<Order> {
    let (to, short) = regions
        .iter()
        .filter_map(|s| wants_more(s, h).map(|w| (s, w)))
        .max_by(|a, b| a.1.cmp(&b.1).then_with(|| b.0.region.cmp(&a.0.region)))?;
    let (from, give) = regions
        .iter()
        .filter(|s| s.region != to.region)
        .map(|s| (s, spare(s, h)))
        .max_by(|a, b| a.1.cmp(&b.1).then_with(|| b.0.region.cmp(&a.0.region)))?;
    let amount = short.min(give);
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
    fn a_dead_region_neither_gives_nor_takes() {
        let mut dead = st("b", 50, 0);
        dead.live = false;
        assert_eq!(
            plan(&[st("a", 50, 90), dead], &Hysteresis::default()),
            None
        );
    }
}
