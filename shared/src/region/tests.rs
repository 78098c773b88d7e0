use std::time::Duration;

use super::allotment::{Allotments, Declared, Held, Mode, Regional};
use crate::clock::Timestamp;
use crate::gcra::Rate;

fn regions(n: usize) -> Vec<String> {
    ["us-east-1", "us-east-2", "us-west-2"][..n]
        .iter()
        .map(|s| s.to_string())
        .collect()
}

fn declared(total: u64, mode: Mode) -> Declared {
    let rate = Rate::new(total, total, Duration::from_secs(60)).expect("rate");
    Declared::new("1:k", rate, regions(3), mode).expect("declared")
}

#[test]
fn the_first_split_sums_to_the_total() {
    for total in [1, 2, 3, 10, 100, 101] {
        let d = declared(total, Mode::Exact);
        let split = d.split();
        assert_eq!(split.iter().map(|(_, a)| a).sum::<u64>(), total, "{total}");
        let (min, max) = (
            split.iter().map(|s| s.1).min().unwrap_or(0),
            split.iter().map(|s| s.1).max().unwrap_or(0),
        );
        assert!(max - min <= 1, "{split:?}");
    }
}

#[test]
fn a_limit_whose_burst_is_not_its_count_is_refused() {
    let rate = Rate::new(10, 5, Duration::from_secs(1)).expect("rate");
    let e = Declared::new("1:k", rate, regions(2), Mode::Exact).unwrap_err();
    assert!(e.to_string().contains("burst equal to count"), "{e}");
    let rate = Rate::new(5, 5, Duration::from_secs(1)).expect("rate");
    let twice = vec!["a".to_string(), "a".to_string()];
    assert!(Declared::new("1:k", rate, twice, Mode::Exact).is_err());
}

#[test]
fn a_share_is_good_until_its_refresh_and_then_refused_in_exact_mode() {
    let a = Allotments::new("us-east-1", Duration::from_secs(5));
    let t0 = Timestamp::from_secs(1_000);
    assert_eq!(a.rate_for("1:k", t0), Regional::NotGlobal);
    a.declare(declared(30, Mode::Exact));
    assert!(matches!(a.rate_for("1:k", t0), Regional::Refuse { .. }));
    a.set(
        "1:k",
        Held {
            amount: 10,
            epoch: 0,
            good_until: t0.plus(Duration::from_secs(5)),
        },
    );
    let Regional::Share(r) = a.rate_for("1:k", t0) else {
        panic!("a share")
    };
    assert_eq!((r.burst, r.count), (10, 10));
    let later = t0.plus(Duration::from_secs(5));
    assert!(matches!(a.rate_for("1:k", later), Regional::Refuse { .. }));
}

#[test]
fn bounded_mode_overdraws_by_its_published_share_for_its_stated_time() {
    let mode = Mode::Bounded {
        overdraw_permille: 100,
        overdraw_for: Duration::from_secs(30),
    };
    let d = declared(300, mode);
    assert_eq!(d.overdraw(), 10);
    assert_eq!(d.published_bound(), 330);
    let a = Allotments::new("us-east-1", Duration::from_secs(5));
    a.declare(d);
    let t0 = Timestamp::from_secs(1_000);
    a.set(
        "1:k",
        Held {
            amount: 100,
            epoch: 0,
            good_until: t0,
        },
    );
    let Regional::Share(r) = a.rate_for("1:k", t0.plus(Duration::from_secs(29))) else {
        panic!("an overdraw share")
    };
    assert_eq!(r.count, 110);
    assert!(matches!(
        a.rate_for("1:k", t0.plus(Duration::from_secs(30))),
        Regional::Refuse { .. }
    ));
}
