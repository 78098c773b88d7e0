//! Property tests (docs/testing.md): the limits file is outside input.

use crate::gcra::Rate;
use std::time::Duration;

use super::*;
use crate::fuzz;
use proptest::prelude::*;

const VALID: &str = include_str!("fixtures/every-format.yaml");

/// Every refusal is `LoadError::Invalid` with at least one problem, each on a line of the file.
fn check_refusal(src: &str, r: Result<LimitSet, LoadError>) -> Result<(), TestCaseError> {
    if let Err(e) = r {
        let LoadError::Invalid(problems) = &e else {
            return Err(TestCaseError::fail(format!("not Invalid: {e}")));
        };
        prop_assert!(!problems.is_empty());
        let lines = src.lines().count() as u64 + 1;
        for p in problems {
            prop_assert!(
                (1..=lines).contains(&p.line),
                "problem without a line of the file: {:?} in {:?}",
                p,
                src
            );
            prop_assert!(!p.reason.is_empty());
        }
    }
    Ok(())
}

fn period_text() -> impl Strategy<Value = String> {
    prop_oneof![
        (
            any::<u64>(),
            proptest::sample::select(&["ns", "us", "ms", "s", "m", "h", "d", ""])
        )
            .prop_map(|(n, u)| format!("{n}{u}")),
        (1u64..100_000, proptest::sample::select(&["s", "m", "h"]))
            .prop_map(|(n, u)| format!("{n}{u}")),
        fuzz::text(),
    ]
}

fn number() -> impl Strategy<Value = String> {
    prop_oneof![
        4 => (0u64..1_000_000).prop_map(|n| n.to_string()),
        2 => any::<u64>().prop_map(|n| n.to_string()),
        1 => any::<i64>().prop_map(|n| n.to_string()),
        1 => Just("18446744073709551616".to_string()),
        1 => fuzz::text().prop_map(|t| format!("{t:?}")),
    ]
}

proptest! {
    #![proptest_config(fuzz::config(2))]

    /// `fuzz_limits_yaml_text`: arbitrary text never panics the loader; a refusal is typed and
    /// every problem carries a line of the file.
    #[test]
    fn fuzz_limits_yaml_text(src in prop_oneof![fuzz::text(), "[a-zA-Z0-9:{},\\[\\] \n'\"&*!|>-]{0,200}"]) {
        check_refusal(&src, LimitSet::from_yaml(&src))?;
    }

    /// `fuzz_limits_yaml_mutated`: a valid file with lines replaced, removed, duplicated or
    /// characters inserted never panics; refusals carry lines; whatever loads answers lookups.
    #[test]
    fn fuzz_limits_yaml_mutated(src in fuzz::mutated_text(VALID), id in fuzz::text()) {
        let r = LimitSet::from_yaml(&src);
        if let Ok(set) = &r {
            for n in set.names() {
                if let Ok(b) = set.bucket(&n.name, &id) {
                    let _ = set.rate(&b);
                    prop_assert_eq!(set.parse_bucket(&b.key()).ok(), Some(b.clone()));
                }
            }
            let _ = set.parse_bucket(&id);
        }
        check_refusal(&src, r)?;
    }

    /// `fuzz_limits_yaml_numbers`: any burst, count and period either load as a rate that
    /// `Rate::new` accepts (so its arithmetic cannot overflow), or are refused on the line of
    /// the field or limit at fault.
    #[test]
    fn fuzz_limits_yaml_numbers(burst in number(), count in number(), period in period_text()) {
        let src = format!(
            "names:\n  A: {{ id: 1, format: string }}\ndefaults:\n  A:\n    burst: {burst}\n    count: {count}\n    period: {period:?}\n"
        );
        let r = LimitSet::from_yaml(&src);
        match &r {
            Ok(set) => {
                let rate = set.default_rate("A").unwrap();
                prop_assert_eq!(Rate::new(rate.burst, rate.count, rate.period), Ok(rate));
            }
            Err(e) => {
                for p in e.problems() {
                    prop_assert!((4..=8).contains(&p.line), "{:?}", p);
                }
            }
        }
        check_refusal(&src, r)?;
    }

    /// `fuzz_periods`: any text either parses to the exact sum of its parts or is refused;
    /// `{n}ns` round-trips for every `u64`.
    #[test]
    fn fuzz_periods(s in prop_oneof![fuzz::text(), period_text(), "([0-9]{1,3}(h|m|s|ms|us|µs|ns)){1,4}"], n in any::<u64>()) {
        if let Ok(d) = parse_period(&s) {
            prop_assert!(d.as_nanos() <= u128::from(u64::MAX));
        }
        prop_assert_eq!(parse_period(&format!("{n}ns")), Ok(Duration::from_nanos(n)));
    }
}
