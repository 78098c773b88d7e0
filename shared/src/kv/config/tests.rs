//! The limits file's unit tests: Boulder's layout, each refusal with its line, reloads.

use crate::gcra::Rate;
use std::sync::Arc;
use std::time::Duration;

use super::*;

const GOOD: &str = include_str!("fixtures/seed.yaml");

fn problems(src: &str) -> Vec<Problem> {
    match LimitSet::from_yaml(src) {
        Ok(_) => panic!("expected the file to be refused"),
        Err(e) => e.problems().to_vec(),
    }
}

#[test]
fn the_seed_layout_loads_with_interned_keys() {
    let set = LimitSet::from_yaml(GOOD).unwrap();
    let b = set.bucket("NewOrdersPerAccount", "12345678").unwrap();
    assert_eq!(b.key(), "3:12345678", "the name's enum is 3");
    assert_eq!(set.rate(&b).unwrap().count, 600);
    let other = set.bucket("NewOrdersPerAccount", "42").unwrap();
    assert_eq!(set.rate(&other).unwrap().count, 300);
    let ip = set
        .bucket("NewRegistrationsPerIPAddress", "10.0.0.2")
        .unwrap();
    assert_eq!(
        set.rate(&ip).unwrap(),
        Rate::new(20, 40, Duration::from_secs(1)).unwrap()
    );
    assert_eq!(set.parse_bucket("2:10.0.0.2").unwrap(), ip);
    assert_eq!(
        set.parse_bucket("NewRegistrationsPerIPAddress:10.0.0.2")
            .unwrap(),
        ip
    );
    let fq = set
        .bucket(
            "CertificatesPerFQDNSetPerAccount",
            "12345678:EXAMPLE.com,example.org",
        )
        .unwrap();
    assert_eq!(
        set.rate(&fq).unwrap().burst,
        5,
        "fqdn sets match in any order"
    );
    let v6 = set
        .bucket("NewRegistrationsPerIPv6Range", "2001:db8::/48")
        .unwrap();
    assert_eq!(
        set.rate(&v6).unwrap_err(),
        KeyError::NoLimit("NewRegistrationsPerIPv6Range".into())
    );
    assert_eq!(set.names().len(), 4);
    assert_eq!(set.override_count(), 3);
}

#[test]
fn the_example_file_in_the_repository_loads() {
    let src = include_str!("../../../../config/limits.example.yaml");
    let set = LimitSet::from_yaml(src).unwrap();
    assert!(set.name("NewOrdersPerAccount").is_some());
}

#[test]
fn zero_parameters_are_refused_with_their_lines() {
    let src = "\
names:
  A: { id: 1, format: string }
defaults:
  A:
    burst: 0
    count: 0
    period: 0s
";
    let p = problems(src);
    assert_eq!(p.len(), 3, "{p:?}");
    assert_eq!(
        (p[0].line, p[0].reason.as_str()),
        (5, "A: burst must be at least 1")
    );
    assert_eq!(
        (p[1].line, p[1].reason.as_str()),
        (6, "A: count must be at least 1")
    );
    assert_eq!(
        (p[2].line, p[2].reason.as_str()),
        (7, "A: period must be longer than zero")
    );
}

#[test]
fn unknown_names_and_bad_ids_are_refused_with_their_lines() {
    let src = "\
names:
  Ip: { id: 1, format: ipAddress }
  Range: { id: 2, format: ipv6RangeCIDR }
defaults:
  Nope: { burst: 1, count: 1, period: 1s }
overrides:
  Ip:10.0.0.300: { burst: 1, count: 1, period: 1s }
  Range:2001:db8::/64: { burst: 1, count: 1, period: 1s }
  Missing:1: { burst: 1, count: 1, period: 1s }
  NoColon: { burst: 1, count: 1, period: 1s }
";
    let p = problems(src);
    let lines: Vec<u64> = p.iter().map(|p| p.line).collect();
    assert_eq!(lines, vec![5, 7, 8, 9, 10], "{p:?}");
    assert!(p[0].reason.contains("unknown limit name \"Nope\""));
    assert!(
        p[1].reason.contains("not an IPv4 or IPv6 address"),
        "{}",
        p[1].reason
    );
    assert!(p[2].reason.contains("exactly /48"), "{}", p[2].reason);
    assert!(p[3].reason.contains("unknown limit name \"Missing\""));
    assert!(p[4].reason.contains("not Name:id"));
    let shown = LoadError::Invalid(p).to_string();
    assert!(
        shown.starts_with("limits file refused: line 5: unknown limit name"),
        "{shown}"
    );
}

#[test]
fn duplicate_keys_are_refused_including_equivalent_ids() {
    let src = "\
names:
  Ip: { id: 1, format: ipAddress }
  Set: { id: 2, format: 'regId:fqdnSet' }
  Other: { id: 1, format: string }
overrides:
  Ip:2001:db8::1: { burst: 1, count: 1, period: 1s }
  Ip:2001:0db8:0:0:0:0:0:1: { burst: 2, count: 2, period: 1s }
  Set:7:a.com,b.com: { burst: 1, count: 1, period: 1s }
  Set:7:b.com,a.com: { burst: 1, count: 1, period: 1s }
";
    let p = problems(src);
    let lines: Vec<u64> = p.iter().map(|p| p.line).collect();
    assert_eq!(lines, vec![4, 7, 9], "{p:?}");
    assert!(p[0].reason.contains("already used by Ip"));
    assert!(p[1].reason.contains("duplicate key") && p[1].reason.contains("line 6"));
    assert!(p[2].reason.contains("first at line 8"));
}

#[test]
fn literal_duplicate_keys_and_syntax_errors_are_refused() {
    let dup = "\
names:
  A: { id: 1, format: string }
defaults:
  A: { burst: 1, count: 1, period: 1s }
  A: { burst: 2, count: 2, period: 1s }
";
    let p = problems(dup);
    assert_eq!(p.len(), 1, "{p:?}");
    assert_eq!(p[0].line, 5, "{p:?}");
    assert!(p[0].reason.to_lowercase().contains("duplicate"), "{p:?}");

    let p = problems("names:\n  A: { id: 1, format: string\n");
    assert!(p[0].line >= 2, "{p:?}");
    let p = problems("names:\n  A: { id: 1, format: string, extra: 1 }\n");
    assert_eq!(p[0].line, 2, "{p:?}");
    let p = problems("limits: {}\n");
    assert_eq!(p[0].line, 1, "{p:?}");
    let p = problems("names:\n  A: { id: 1, format: ip }\n");
    assert!(p[0].reason.contains("unknown id format"), "{p:?}");
    let p = problems("names:\n  A: { id: 1, format: string }\ndefaults:\n  A: { burst: 1, count: 1, period: 1 fortnight }\n");
    assert_eq!(p[0].line, 4, "{p:?}");
    assert!(p[0].reason.contains("is not a period"), "{p:?}");
    let p = problems(
        "names:\n  A: { id: 1, format: string }\ndefaults:\n  A: { burst: 1, count: 1 }\n",
    );
    assert!(p[0].reason.contains("period"), "{p:?}");
}

/// A limit whose burst offset (period / count × burst) cannot be held by
/// the time type, or exceeds the documented maximum of 100 years, is refused at load, naming
/// the limit and its line.
#[test]
fn an_unrepresentable_limit_is_refused_with_its_line() {
    let src = "\
names:
  Slow: { id: 1, format: string }
defaults:
  Slow: { burst: 200000, count: 1, period: 24h }
overrides:
  Slow:ok: { burst: 36000, count: 1, period: 24h }
";
    let p = problems(src);
    assert_eq!(p.len(), 1, "{p:?}");
    assert_eq!(p[0].line, 4, "{p:?}");
    assert!(p[0].reason.starts_with("Slow: "), "{p:?}");
    assert!(p[0].reason.contains("100 years"), "{p:?}");
}

#[test]
fn the_file_comes_from_the_environment() {
    let vars = crate::config::Vars::from_pairs([(LIMITS_FILE_VAR, "/no/such/limits.yaml")]);
    let err = LimitSet::from_vars(&vars).unwrap_err();
    assert!(matches!(err, LoadError::Read { .. }), "{err}");
    assert!(err.to_string().contains("/no/such/limits.yaml"));
    let none = crate::config::Vars::from_pairs::<&str, &str>([]);
    assert!(LimitSet::from_vars(&none).unwrap().is_none());
    let path = concat!(env!("CARGO_MANIFEST_DIR"), "/../config/limits.example.yaml");
    let vars = crate::config::Vars::from_pairs([(LIMITS_FILE_VAR, path)]);
    assert!(LimitSet::from_vars(&vars).unwrap().is_some());
}

#[test]
fn periods_parse_like_go_durations() {
    assert_eq!(parse_period("1s").unwrap(), Duration::from_secs(1));
    assert_eq!(parse_period("180m").unwrap(), Duration::from_secs(10_800));
    assert_eq!(parse_period("1h30m").unwrap(), Duration::from_secs(5_400));
    assert_eq!(parse_period("500ms").unwrap(), Duration::from_millis(500));
    assert_eq!(parse_period("250us").unwrap(), Duration::from_micros(250));
    for bad in ["", "1", "s", "1.5s", "1d", "-1s", "1s2"] {
        assert!(parse_period(bad).is_err(), "{bad}");
    }
}

#[test]
fn a_failed_reload_keeps_the_old_set_whole() {
    let limits = Limits::new(LimitSet::from_yaml(GOOD).unwrap());
    let before = limits.current();
    let err = limits
            .reload_yaml("names:\n  A: { id: 1, format: string }\ndefaults:\n  A: { burst: 0, count: 1, period: 1s }\n")
            .unwrap_err();
    assert_eq!(err.problems()[0].line, 4);
    assert!(
        Arc::ptr_eq(&before, &limits.current()),
        "nothing was swapped in"
    );
    limits
            .reload_yaml("names:\n  A: { id: 1, format: string }\ndefaults:\n  A: { burst: 1, count: 1, period: 1s }\n")
            .unwrap();
    assert!(limits.current().name("NewOrdersPerAccount").is_none());
    assert!(
        before.name("NewOrdersPerAccount").is_some(),
        "an old snapshot stays usable"
    );
}
