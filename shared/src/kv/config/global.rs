//! `global:` on an override: the bucket is one limit across regions (decision 4200), its `count`
//! the total `L` the regions share. Checked here with every problem's line, like the rest of the
//! file; a valid entry becomes a [`Declared`].

use std::collections::HashSet;
use std::time::Duration;

use serde_saphyr::Spanned;

use super::file::{parse_period, BoundedSpec, GlobalSpec, LimitSpec};
use super::set::at;
use super::Problem;
use crate::gcra::Rate;
use crate::region::{Declared, Mode};

/// The overdraw fraction as thousandths: `(0, 1]`, at most three decimals.
fn permille(key: &str, o: &Spanned<f64>, problems: &mut Vec<Problem>) -> Option<u32> {
    let x = o.value;
    let scaled = x * 1000.0;
    if !(x > 0.0 && x <= 1.0) {
        problems.push(at(
            o,
            format!("{key}: overdraw is a fraction of the total, above 0 and at most 1"),
        ));
        return None;
    }
    if (scaled - scaled.round()).abs() > 1e-6 {
        problems.push(at(o, format!("{key}: overdraw has at most three decimals")));
        return None;
    }
    // In (0, 1000] by the checks above.
    Some(scaled.round() as u32)
}

fn bounded(key: &str, b: &BoundedSpec, problems: &mut Vec<Problem>) -> Option<Mode> {
    let overdraw_permille = permille(key, &b.overdraw, problems);
    let overdraw_for = match parse_period(&b.overdraw_for.value) {
        Ok(d) if d > Duration::ZERO => Some(d),
        Ok(_) => {
            problems.push(at(
                &b.overdraw_for,
                format!("{key}: bounded `for` must be longer than zero"),
            ));
            None
        }
        Err(reason) => {
            problems.push(at(
                &b.overdraw_for,
                format!("{key}: bounded `for`: {reason}"),
            ));
            None
        }
    };
    Some(Mode::Bounded {
        overdraw_permille: overdraw_permille?,
        overdraw_for: overdraw_for?,
    })
}

/// The declaration of override `key` (bucket `bucket`, limit `rate`), or its problems.
pub(super) fn declare(
    key: &Spanned<String>,
    spec: &LimitSpec,
    global: &Spanned<GlobalSpec>,
    rate: Rate,
    bucket: &str,
    problems: &mut Vec<Problem>,
) -> Option<Declared> {
    let k = &key.value;
    let g = &global.value;
    let before = problems.len();
    if spec.burst.value != spec.count.value {
        problems.push(at(
            &spec.burst,
            format!("{k}: a global limit needs burst equal to count (its total)"),
        ));
    }
    if let Some(sh) = &spec.shards {
        problems.push(at(
            sh,
            format!("{k}: a global limit is not sharded (each region decides on one item)"),
        ));
    }
    if g.regions.is_empty() {
        problems.push(at(global, format!("{k}: global needs at least one region")));
    }
    let mut seen = HashSet::new();
    for r in &g.regions {
        let name = r.value.trim();
        if name.is_empty() || name.contains(char::is_whitespace) {
            problems.push(at(r, format!("{k}: {:?} is not a region name", r.value)));
        } else if !seen.insert(name) {
            problems.push(at(r, format!("{k}: region {name} is listed twice")));
        }
    }
    let mode = match &g.bounded {
        None => Some(Mode::Exact),
        Some(b) => bounded(k, b, problems),
    };
    if problems.len() > before {
        return None;
    }
    let regions = g
        .regions
        .iter()
        .map(|r| r.value.trim().to_string())
        .collect();
    match Declared::new(bucket, rate, regions, mode?) {
        Ok(d) => Some(d),
        Err(e) => {
            problems.push(at(global, format!("{k}: {e}")));
            None
        }
    }
}

#[cfg(test)]
mod tests {
    use super::super::{LimitSet, Problem};
    use crate::region::Mode;
    use std::time::Duration;

    const HEAD: &str = "names:\n  ApiCalls: { id: 1, format: string }\ndefaults:\n  ApiCalls: { burst: 10, count: 10, period: 60s }\noverrides:\n";

    fn problems(entry: &str) -> Vec<Problem> {
        match LimitSet::from_yaml(&format!("{HEAD}{entry}")) {
            Ok(_) => panic!("expected {entry:?} to be refused"),
            Err(e) => e.problems().to_vec(),
        }
    }

    #[test]
    fn an_override_declared_global_is_one_limit_over_its_regions() {
        let src = format!(
            "{HEAD}  ApiCalls:tenant-a:\n    burst: 300\n    count: 300\n    period: 60s\n    \
             global: {{ regions: [us-east-1, us-east-2, us-west-2] }}\n  ApiCalls:tenant-b:\n    \
             burst: 90\n    count: 90\n    period: 1m\n    global:\n      regions: [eu-west-1, \
             eu-west-2]\n      bounded: {{ overdraw: 0.1, for: 30s }}\n  ApiCalls:tenant-c: \
             {{ burst: 5, count: 5, period: 60s }}\n"
        );
        let set = LimitSet::from_yaml(&src).expect("loads");
        let all = set.global_limits();
        assert_eq!(all.len(), 2, "{all:?}");
        let a = &all[0];
        assert_eq!(
            (a.bucket.as_str(), a.total, a.period, a.mode),
            ("1:tenant-a", 300, Duration::from_secs(60), Mode::Exact)
        );
        assert_eq!(a.regions, ["us-east-1", "us-east-2", "us-west-2"]);
        let b = set.bucket("ApiCalls", "tenant-b").expect("bucket");
        let declared = set.global(&b).expect("global");
        assert_eq!(
            declared.mode,
            Mode::Bounded {
                overdraw_permille: 100,
                overdraw_for: Duration::from_secs(30)
            }
        );
        // 10 % of 90 split between two regions, each rounding down: 4 each.
        assert_eq!(declared.published_bound(), 90 + 2 * 4);
        let c = set.bucket("ApiCalls", "tenant-c").expect("bucket");
        assert!(
            set.global(&c).is_none(),
            "an override without global: is not"
        );
    }

    #[test]
    fn a_bad_global_is_refused_with_its_line() {
        let cases: &[(&str, &str)] = &[
            (
                "  ApiCalls:t: { burst: 20, count: 10, period: 60s, global: { regions: [a, b] } }\n",
                "burst equal to count",
            ),
            (
                "  ApiCalls:t: { burst: 10, count: 10, period: 60s, global: { regions: [] } }\n",
                "at least one region",
            ),
            (
                "  ApiCalls:t: { burst: 10, count: 10, period: 60s, global: { regions: [a, a] } }\n",
                "listed twice",
            ),
            (
                "  ApiCalls:t: { burst: 10, count: 10, period: 60s, shards: 2, global: { regions: [a] } }\n",
                "not sharded",
            ),
            (
                "  ApiCalls:t: { burst: 10, count: 10, period: 60s, global: { regions: [a], bounded: { overdraw: 1.5, for: 30s } } }\n",
                "at most 1",
            ),
            (
                "  ApiCalls:t: { burst: 10, count: 10, period: 60s, global: { regions: [a], bounded: { overdraw: 0.0001, for: 30s } } }\n",
                "three decimals",
            ),
            (
                "  ApiCalls:t: { burst: 10, count: 10, period: 60s, global: { regions: [a], bounded: { overdraw: 0.1, for: soon } } }\n",
                "bounded `for`",
            ),
            (
                "  ApiCalls:t: { burst: 10, count: 10, period: 60s, global: { regions: [a], bounded: { overdraw: 0.1 } } }\n",
                "missing field `for`",
            ),
            (
                "  ApiCalls:t: { burst: 10, count: 10, period: 60s, global: { regions: [a], exact: true } }\n",
                "unknown field `exact`",
            ),
        ];
        for (entry, want) in cases {
            let p = problems(entry);
            assert!(
                p.iter().any(|p| p.reason.contains(want) && p.line == 6),
                "{entry}: want {want:?} at line 6, got {p:?}"
            );
        }
        let p = match LimitSet::from_yaml(
            "names:\n  ApiCalls: { id: 1, format: string }\ndefaults:\n  ApiCalls: { burst: 10, \
             count: 10, period: 60s, global: { regions: [a] } }\n",
        ) {
            Ok(_) => panic!("a global default is refused"),
            Err(e) => e.problems().to_vec(),
        };
        assert!(
            p.iter().any(|p| p.reason.contains("under overrides")),
            "{p:?}"
        );
    }
}
