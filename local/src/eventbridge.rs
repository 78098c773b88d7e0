//! EventBridge, locally: turns `PutEvents` entries into the events a rule target receives, and
//! matches them against event patterns, so `POST /events` reaches `token-remover` only when the
//! deployed rule would have sent it there.
//!
//! Pattern support follows EventBridge's content filtering: a pattern is an object whose leaves are
//! arrays of alternatives; an event field matches when its value (or, for an array field, any element)
//! matches any alternative. Alternatives are literals or one of `prefix`, `suffix`,
//! `equals-ignore-case`, `anything-but` (a value, a list, or `{prefix}`/`{suffix}`), `exists`,
//! `numeric` (`<`, `<=`, `=`, `>=`, `>` pairs) and `wildcard` (`*`). `$or` takes a list of patterns.

use serde_json::{json, Map, Value};
use shared::clock::Timestamp;

#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
pub enum PatternError {
    #[error("pattern must be a JSON object, found {0}")]
    NotObject(String),
    #[error("pattern field {path}: {reason}")]
    Field { path: String, reason: String },
}

/// A validated event pattern.
#[derive(Debug, Clone, PartialEq)]
pub struct Pattern(Value);

impl Pattern {
    /// Validates the pattern's shape so a typo fails when the stack starts, not silently later.
    pub fn parse(value: Value) -> Result<Self, PatternError> {
        match &value {
            Value::Object(m) => check_object(m, "")?,
            other => return Err(PatternError::NotObject(kind(other).into())),
        }
        Ok(Pattern(value))
    }

    pub fn matches(&self, event: &Value) -> bool {
        match &self.0 {
            Value::Object(m) => object_matches(m, event),
            _ => false,
        }
    }
}

fn kind(v: &Value) -> &'static str {
    match v {
        Value::Null => "null",
        Value::Bool(_) => "a boolean",
        Value::Number(_) => "a number",
        Value::String(_) => "a string",
        Value::Array(_) => "an array",
        Value::Object(_) => "an object",
    }
}

fn field_err(path: &str, reason: impl Into<String>) -> PatternError {
    PatternError::Field {
        path: path.to_string(),
        reason: reason.into(),
    }
}

fn check_object(m: &Map<String, Value>, prefix: &str) -> Result<(), PatternError> {
    for (k, v) in m {
        let path = if prefix.is_empty() {
            k.clone()
        } else {
            format!("{prefix}.{k}")
        };
        if k == "$or" {
            let Value::Array(alts) = v else {
                return Err(field_err(&path, "$or takes a list of patterns"));
            };
            for alt in alts {
                let Value::Object(am) = alt else {
                    return Err(field_err(&path, "each $or alternative must be an object"));
                };
                check_object(am, prefix)?;
            }
            continue;
        }
        match v {
            Value::Object(inner) => check_object(inner, &path)?,
            Value::Array(alts) => {
                for alt in alts {
                    if let Value::Object(op) = alt {
                        check_operator(op, &path)?;
                    }
                }
            }
            other => {
                return Err(field_err(
                    &path,
                    format!(
                        "leaves must be arrays of alternatives, found {}",
                        kind(other)
                    ),
                ))
            }
        }
    }
    Ok(())
}

fn check_operator(op: &Map<String, Value>, path: &str) -> Result<(), PatternError> {
    let Some((name, arg)) = op.iter().next().filter(|_| op.len() == 1) else {
        return Err(field_err(path, "an operator object has exactly one key"));
    };
    let ok = match name.as_str() {
        "prefix" | "suffix" => {
            arg.is_string() || arg.get("equals-ignore-case").is_some_and(Value::is_string)
        }
        "equals-ignore-case" | "wildcard" => arg.is_string(),
        "exists" => arg.is_boolean(),
        "anything-but" => true,
        "numeric" => arg.as_array().is_some_and(|a| {
            a.len() % 2 == 0
                && a.chunks(2).all(|c| {
                    matches!(c[0].as_str(), Some("<" | "<=" | "=" | ">=" | ">")) && c[1].is_number()
                })
        }),
        "cidr" => arg.is_string(),
        _ => false,
    };
    if ok {
        Ok(())
    } else {
        Err(field_err(
            path,
            format!("unsupported or malformed operator {name:?}"),
        ))
    }
}

fn object_matches(pattern: &Map<String, Value>, event: &Value) -> bool {
    pattern.iter().all(|(k, p)| {
        if k == "$or" {
            return p.as_array().is_some_and(|alts| {
                alts.iter()
                    .any(|a| a.as_object().is_some_and(|m| object_matches(m, event)))
            });
        }
        let field = event.get(k);
        match p {
            Value::Object(inner) => field.is_some_and(|f| object_matches(inner, f)),
            Value::Array(alts) => alternatives_match(alts, field),
            _ => false,
        }
    })
}

fn alternatives_match(alts: &[Value], field: Option<&Value>) -> bool {
    alts.iter().any(|alt| match alt {
        Value::Object(op) if op.contains_key("exists") => {
            let want = op.get("exists").and_then(Value::as_bool).unwrap_or(true);
            // `exists` concerns leaf values: an absent field or an empty array does not exist.
            let present = match field {
                None | Some(Value::Object(_)) => false,
                Some(Value::Array(a)) => !a.is_empty(),
                Some(_) => true,
            };
            present == want
        }
        _ => match field {
            None => false,
            Some(Value::Array(items)) => items.iter().any(|v| value_matches(alt, v)),
            Some(v) => value_matches(alt, v),
        },
    })
}

fn value_matches(alt: &Value, v: &Value) -> bool {
    match alt {
        Value::Object(op) => op
            .iter()
            .next()
            .is_some_and(|(name, arg)| operator_matches(name, arg, v)),
        Value::Number(a) => v.as_f64().is_some_and(|x| Some(x) == a.as_f64()),
        literal => literal == v,
    }
}

fn operator_matches(name: &str, arg: &Value, v: &Value) -> bool {
    let s = v.as_str();
    match name {
        "prefix" => match (arg, s) {
            (Value::String(p), Some(s)) => s.starts_with(p.as_str()),
            (Value::Object(o), Some(s)) => o
                .get("equals-ignore-case")
                .and_then(Value::as_str)
                .is_some_and(|p| s.to_lowercase().starts_with(&p.to_lowercase())),
            _ => false,
        },
        "suffix" => match (arg, s) {
            (Value::String(p), Some(s)) => s.ends_with(p.as_str()),
            (Value::Object(o), Some(s)) => o
                .get("equals-ignore-case")
                .and_then(Value::as_str)
                .is_some_and(|p| s.to_lowercase().ends_with(&p.to_lowercase())),
            _ => false,
        },
        "equals-ignore-case" => {
            matches!((arg.as_str(), s), (Some(a), Some(s)) if a.eq_ignore_ascii_case(s))
        }
        "wildcard" => matches!((arg.as_str(), s), (Some(p), Some(s)) if wildcard(p, s)),
        "anything-but" => match arg {
            Value::Array(list) => !list.iter().any(|x| value_matches(x, v)),
            Value::Object(o) => !o
                .iter()
                .next()
                .is_some_and(|(n, a)| operator_matches(n, a, v)),
            single => !value_matches(single, v),
        },
        "numeric" => v.as_f64().is_some_and(|x| {
            arg.as_array().is_some_and(|a| {
                a.chunks(2).all(|c| {
                    let bound = c.get(1).and_then(Value::as_f64).unwrap_or(f64::NAN);
                    match c[0].as_str() {
                        Some("<") => x < bound,
                        Some("<=") => x <= bound,
                        Some("=") => x == bound,
                        Some(">=") => x >= bound,
                        Some(">") => x > bound,
                        _ => false,
                    }
                })
            })
        }),
        _ => false,
    }
}

/// `*` matches any run of characters.
fn wildcard(pattern: &str, s: &str) -> bool {
    let parts: Vec<&str> = pattern.split('*').collect();
    if parts.len() == 1 {
        return pattern == s;
    }
    let (first, last) = (parts[0], parts[parts.len() - 1]);
    if !s.starts_with(first)
        || !s[first.len()..].ends_with(last)
        || s.len() < first.len() + last.len()
    {
        return false;
    }
    let mut rest = &s[first.len()..s.len() - last.len()];
    for mid in &parts[1..parts.len() - 1] {
        match rest.find(mid) {
            Some(i) => rest = &rest[i + mid.len()..],
            None => return false,
        }
    }
    true
}

#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
pub enum EntryError {
    #[error("entry {index}: {field} is required")]
    Missing { index: usize, field: &'static str },
    #[error("entry {index}: Detail is not a JSON object: {reason}")]
    BadDetail { index: usize, reason: String },
}

/// Turns one `PutEvents` entry (`Source`, `DetailType`, `Detail` as a JSON string, optional
/// `Resources`, `Time`) into the event EventBridge delivers to a target.
pub fn event_from_entry(
    entry: &Value,
    index: usize,
    now: Timestamp,
    account: &str,
    region: &str,
) -> Result<Value, EntryError> {
    let text = |f: &'static str| -> Result<&str, EntryError> {
        entry
            .get(f)
            .and_then(Value::as_str)
            .filter(|s| !s.is_empty())
            .ok_or(EntryError::Missing { index, field: f })
    };
    let source = text("Source")?;
    let detail_type = text("DetailType")?;
    let detail_text = text("Detail")?;
    let detail: Value = serde_json::from_str(detail_text).map_err(|e| EntryError::BadDetail {
        index,
        reason: e.to_string(),
    })?;
    if !detail.is_object() {
        return Err(EntryError::BadDetail {
            index,
            reason: "it must be an object".into(),
        });
    }
    let time = entry
        .get("Time")
        .and_then(Value::as_str)
        .map(str::to_string)
        .unwrap_or_else(|| {
            let mut t = now.to_rfc3339();
            // EventBridge writes whole seconds: 2026-11-21T10:00:00Z.
            t.replace_range(19..23, "");
            t
        });
    Ok(json!({
        "version": "0",
        "id": uuid::Uuid::new_v4().to_string(),
        "detail-type": detail_type,
        "source": source,
        "account": account,
        "time": time,
        "region": region,
        "resources": entry.get("Resources").cloned().unwrap_or_else(|| json!([])),
        "detail": detail,
    }))
}

#[cfg(test)]
mod tests {
    use super::*;

    fn emr(state: &str, name: &str) -> Value {
        json!({
            "version": "0", "id": "1", "source": "aws.emr",
            "detail-type": "EMR Cluster State Change",
            "resources": [], "detail": {"state": state, "name": name, "clusterId": "j-1", "severity": "INFO"}
        })
    }

    #[test]
    fn the_emr_rule_matches_only_terminations() {
        let p = Pattern::parse(json!({
            "source": ["aws.emr"],
            "detail-type": ["EMR Cluster State Change"],
            "detail": {"state": ["TERMINATED", "TERMINATED_WITH_ERRORS"]}
        }))
        .unwrap();
        assert!(p.matches(&emr("TERMINATED", "x")));
        assert!(p.matches(&emr("TERMINATED_WITH_ERRORS", "x")));
        assert!(!p.matches(&emr("RUNNING", "x")));
        let mut other = emr("TERMINATED", "x");
        other["source"] = json!("aws.ec2");
        assert!(!p.matches(&other));
    }

    #[test]
    fn operators_behave_like_eventbridge() {
        let cases = [
            (
                json!({"detail": {"name": [{"prefix": "prod-"}]}}),
                emr("RUNNING", "prod-1"),
                true,
            ),
            (
                json!({"detail": {"name": [{"prefix": "prod-"}]}}),
                emr("RUNNING", "dev-1"),
                false,
            ),
            (
                json!({"detail": {"name": [{"suffix": "-debug"}]}}),
                emr("RUNNING", "a-debug"),
                true,
            ),
            (
                json!({"detail": {"name": [{"anything-but": {"prefix": "debug"}}]}}),
                emr("R", "debugging"),
                false,
            ),
            (
                json!({"detail": {"name": [{"anything-but": ["a", "b"]}]}}),
                emr("R", "c"),
                true,
            ),
            (
                json!({"detail": {"state": [{"equals-ignore-case": "terminated"}]}}),
                emr("TERMINATED", "x"),
                true,
            ),
            (
                json!({"detail": {"missing": [{"exists": false}]}}),
                emr("R", "x"),
                true,
            ),
            (
                json!({"detail": {"name": [{"exists": true}]}}),
                emr("R", "x"),
                true,
            ),
            (
                json!({"detail": {"name": [{"wildcard": "p*d-*"}]}}),
                emr("R", "prod-7"),
                true,
            ),
            (
                json!({"detail": {"name": [{"wildcard": "p*x"}]}}),
                emr("R", "prod-7"),
                false,
            ),
            (
                json!({"$or": [{"source": ["aws.ec2"]}, {"detail": {"state": ["RUNNING"]}}]}),
                emr("RUNNING", "x"),
                true,
            ),
            (
                json!({"resources": ["arn:x"]}),
                json!({"resources": ["arn:y", "arn:x"]}),
                true,
            ),
            (
                json!({"detail": {"n": [{"numeric": [">", 0, "<=", 5]}]}}),
                json!({"detail": {"n": 5}}),
                true,
            ),
            (
                json!({"detail": {"n": [{"numeric": [">", 5]}]}}),
                json!({"detail": {"n": 5}}),
                false,
            ),
        ];
        for (i, (pattern, event, want)) in cases.into_iter().enumerate() {
            let p = Pattern::parse(pattern).unwrap();
            assert_eq!(p.matches(&event), want, "case {i}");
        }
    }

    #[test]
    fn malformed_patterns_name_the_field() {
        let err = Pattern::parse(json!({"detail": {"state": "TERMINATED"}})).unwrap_err();
        assert_eq!(
            err,
            PatternError::Field {
                path: "detail.state".into(),
                reason: "leaves must be arrays of alternatives, found a string".into()
            }
        );
        assert!(Pattern::parse(json!(["x"])).is_err());
        assert!(Pattern::parse(json!({"a": [{"bogus": 1}]})).is_err());
        assert!(Pattern::parse(json!({"a": [{"numeric": [">", "x"]}]})).is_err());
    }

    #[test]
    fn put_events_entries_become_target_events() {
        let now = Timestamp::from_secs(1_795_000_000);
        let entry = json!({
            "Source": "aws.emr", "DetailType": "EMR Cluster State Change",
            "Detail": "{\"state\":\"TERMINATED\",\"clusterId\":\"j-1\"}"
        });
        let ev = event_from_entry(&entry, 0, now, "000000000000", "us-east-1").unwrap();
        assert_eq!(ev["detail-type"], "EMR Cluster State Change");
        assert_eq!(ev["detail"]["clusterId"], "j-1");
        assert_eq!(ev["time"], "2026-11-18T11:06:40Z");
        assert_eq!(ev["resources"], json!([]));
        let missing = json!({"Source": "aws.emr", "Detail": "{}"});
        assert_eq!(
            event_from_entry(&missing, 3, now, "a", "r").unwrap_err(),
            EntryError::Missing {
                index: 3,
                field: "DetailType"
            }
        );
        let bad = json!({"Source": "s", "DetailType": "d", "Detail": "[1]"});
        assert!(matches!(
            event_from_entry(&bad, 0, now, "a", "r"),
            Err(EntryError::BadDetail { .. })
        ));
    }
}

/// Property tests (docs/testing.md): patterns come from template.yaml, events from `POST /events`.
#[cfg(test)]
mod fuzz_tests {
    use super::*;
    use proptest::prelude::*;
    use shared::fuzz;

    const KEYS: &[&str] = &[
        "source",
        "detail-type",
        "detail",
        "state",
        "$or",
        "prefix",
        "suffix",
        "equals-ignore-case",
        "anything-but",
        "exists",
        "numeric",
        "wildcard",
        "cidr",
        "<",
        ">=",
        "=",
        "resources",
    ];

    /// A reference matcher for `*` patterns: dynamic programming over characters.
    fn wildcard_reference(p: &str, s: &str) -> bool {
        let (p, s): (Vec<char>, Vec<char>) = (p.chars().collect(), s.chars().collect());
        let mut row = vec![false; s.len() + 1];
        row[0] = true;
        for pc in &p {
            let mut next = vec![false; s.len() + 1];
            if *pc == '*' {
                let mut any = false;
                for j in 0..=s.len() {
                    any |= row[j];
                    next[j] = any;
                }
            } else {
                for j in 1..=s.len() {
                    next[j] = row[j - 1] && s[j - 1] == *pc;
                }
            }
            row = next;
        }
        row[s.len()]
    }

    proptest! {
        #![proptest_config(fuzz::config(1))]

        /// `fuzz_event_patterns`: any pattern JSON is accepted or refused with a typed
        /// `PatternError`; any accepted pattern matched against any event never panics.
        #[test]
        fn fuzz_event_patterns(
            pattern in prop_oneof![fuzz::json_with_keys(KEYS), fuzz::mutated(serde_json::json!({
                "source": ["aws.emr"], "detail-type": ["EMR Cluster State Change"],
                "detail": {"state": ["TERMINATED", {"prefix": "T"}, {"numeric": [">", 0, "<=", 5]},
                    {"anything-but": {"suffix": "x"}}, {"wildcard": "a*b"}, {"exists": true}]},
                "$or": [{"resources": [{"equals-ignore-case": "R"}]}, {"version": ["0"]}]
            }))],
            events in proptest::collection::vec(fuzz::json_with_keys(KEYS), 1..4),
        ) {
            match Pattern::parse(pattern) {
                Ok(p) => {
                    for e in &events {
                        let _ = p.matches(e);
                    }
                }
                Err(e) => prop_assert!(!e.to_string().is_empty()),
            }
        }

        /// `fuzz_wildcards`: the `wildcard` operator agrees with a reference matcher on any
        /// pattern and value (unicode included).
        #[test]
        fn fuzz_wildcards(p in "[ab*é]{0,8}", s in "[abé]{0,10}") {
            prop_assert_eq!(wildcard(&p, &s), wildcard_reference(&p, &s), "{:?} ~ {:?}", p, s);
        }

        /// `fuzz_put_events_entries`: any entry (valid ones with fields mutated, or anything)
        /// becomes an event whose `detail` is an object, or a typed `EntryError`.
        #[test]
        fn fuzz_put_events_entries(
            entry in prop_oneof![
                fuzz::mutated(serde_json::json!({
                    "Source": "aws.emr", "DetailType": "EMR Cluster State Change",
                    "Detail": "{\"state\":\"TERMINATED\",\"clusterId\":\"j-1\"}",
                    "Resources": ["arn:x"], "Time": "2026-11-21T10:00:00Z"
                })),
                fuzz::json_with_keys(&["Source", "DetailType", "Detail", "Resources", "Time"]),
            ],
            now in any::<i64>(),
        ) {
            match event_from_entry(&entry, 0, Timestamp::from_nanos(now), "000000000000", "us-east-1") {
                Ok(ev) => prop_assert!(ev["detail"].is_object()),
                Err(e) => prop_assert!(e.to_string().starts_with("entry 0: ")),
            }
        }
    }
}
