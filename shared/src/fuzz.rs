//! Input generators for the property ("fuzz") tests of every parser that takes outside input
//! (`docs/testing.md`). Built for this crate's tests and, with the `fuzz` feature, for the other
//! crates' tests; never part of a shipped binary.
//!
//! The case count is proptest's: 256 per property unless `PROPTEST_CASES` says otherwise
//! ([`config`]), so `make test` stays quick and `PROPTEST_CASES=10000 cargo test fuzz_` digs deeper.

use proptest::prelude::*;
use proptest::test_runner::Config;
use serde_json::{Map, Number, Value};

/// The proptest configuration for a property whose cases cost `weight` times a cheap one:
/// `PROPTEST_CASES` (default 256) divided by `weight`, at least 16. Failures are not written to
/// `proptest-regressions/`: a shrunk failing case becomes a named regression unit test instead.
pub fn config(weight: u32) -> Config {
    let base = Config::default();
    Config {
        cases: (base.cases / weight.max(1)).max(16),
        failure_persistence: None,
        ..base
    }
}

/// Strings as they arrive from outside: short ASCII, separators, unicode (multi-byte, control and
/// combining characters), and now and then a huge one.
pub fn text() -> impl Strategy<Value = String> {
    prop_oneof![
        4 => any::<String>(),
        4 => "[ -~]{0,24}",
        2 => "[a-zA-Z0-9:._/=+%*,#&?é€\u{0}\n\t\u{301}\u{1F600}-]{0,24}",
        1 => "[a-z%0-9]{2000,6000}",
    ]
}

/// Object keys: mostly the ones a parser looks for (`known`), sometimes anything.
pub fn key(known: &'static [&'static str]) -> BoxedStrategy<String> {
    if known.is_empty() {
        return text().boxed();
    }
    prop_oneof![
        3 => proptest::sample::select(known).prop_map(str::to_string),
        1 => text(),
    ]
    .boxed()
}

/// Any JSON scalar, including extreme numbers.
pub fn scalar() -> impl Strategy<Value = Value> {
    prop_oneof![
        Just(Value::Null),
        any::<bool>().prop_map(Value::Bool),
        any::<i64>().prop_map(Value::from),
        any::<u64>().prop_map(Value::from),
        prop_oneof![
            Just(0i64),
            Just(-1),
            Just(1),
            Just(i64::MAX),
            Just(i64::MIN)
        ]
        .prop_map(Value::from),
        any::<f64>().prop_filter_map("finite", |f| Number::from_f64(f).map(Value::Number)),
        text().prop_map(Value::String),
    ]
}

/// Any JSON value (nesting up to 4 deep), with object keys drawn mostly from `known`.
pub fn json_with_keys(known: &'static [&'static str]) -> BoxedStrategy<Value> {
    scalar()
        .prop_recursive(4, 48, 6, move |inner| {
            prop_oneof![
                proptest::collection::vec(inner.clone(), 0..6).prop_map(Value::Array),
                proptest::collection::vec((key(known), inner), 0..6)
                    .prop_map(|kv| Value::Object(kv.into_iter().collect::<Map<_, _>>())),
            ]
        })
        .boxed()
}

/// Any JSON value.
pub fn json() -> BoxedStrategy<Value> {
    json_with_keys(&[])
}

/// A step in a JSON document.
#[derive(Debug, Clone)]
enum Step {
    Key(String),
    Index(usize),
}

fn paths(v: &Value, at: &mut Vec<Step>, out: &mut Vec<Vec<Step>>) {
    match v {
        Value::Object(m) => {
            for (k, child) in m {
                at.push(Step::Key(k.clone()));
                out.push(at.clone());
                paths(child, at, out);
                at.pop();
            }
        }
        Value::Array(a) => {
            for (i, child) in a.iter().enumerate() {
                at.push(Step::Index(i));
                out.push(at.clone());
                paths(child, at, out);
                at.pop();
            }
        }
        _ => {}
    }
}

/// What happens to the chosen field of a valid document.
#[derive(Debug, Clone)]
pub enum Mutation {
    /// The field is removed.
    Remove,
    /// The field gets another value: a wrong type, a huge or odd string, an extreme number.
    Replace(Value),
    /// The field's string (if it is one) gets `text` appended.
    Append(String),
    /// The field's string (if it is one) becomes `text`: right type, wrong content.
    Retext(String),
}

fn apply(doc: &mut Value, path: &[Step], m: &Mutation) {
    let Some((last, parents)) = path.split_last() else {
        return;
    };
    let mut cur = doc;
    for step in parents {
        cur = match (step, cur) {
            (Step::Key(k), Value::Object(o)) => match o.get_mut(k) {
                Some(v) => v,
                None => return,
            },
            (Step::Index(i), Value::Array(a)) => match a.get_mut(*i) {
                Some(v) => v,
                None => return,
            },
            _ => return,
        };
    }
    match (last, cur) {
        (Step::Key(k), Value::Object(o)) => match m {
            Mutation::Remove => {
                o.remove(k);
            }
            Mutation::Replace(v) => {
                o.insert(k.clone(), v.clone());
            }
            Mutation::Append(t) => {
                if let Some(Value::String(s)) = o.get_mut(k) {
                    s.push_str(t);
                }
            }
            Mutation::Retext(t) => {
                if let Some(Value::String(s)) = o.get_mut(k) {
                    *s = t.clone();
                }
            }
        },
        (Step::Index(i), Value::Array(a)) if *i < a.len() => match m {
            Mutation::Remove => {
                a.remove(*i);
            }
            Mutation::Replace(v) => a[*i] = v.clone(),
            Mutation::Append(t) => {
                if let Value::String(s) = &mut a[*i] {
                    s.push_str(t);
                }
            }
            Mutation::Retext(t) => {
                if let Value::String(s) = &mut a[*i] {
                    *s = t.clone();
                }
            }
        },
        _ => {}
    }
}

/// A mutation: mostly a wrong-typed scalar, sometimes a whole arbitrary value.
pub fn mutation() -> impl Strategy<Value = Mutation> {
    prop_oneof![
        2 => Just(Mutation::Remove),
        4 => scalar().prop_map(Mutation::Replace),
        1 => json().prop_map(Mutation::Replace),
        2 => text().prop_map(Mutation::Append),
        4 => text().prop_map(Mutation::Retext),
    ]
}

/// A valid document with one to three fields (at any depth) mutated: near-valid input, which is
/// where parsers' edge cases live.
pub fn mutated(valid: Value) -> impl Strategy<Value = Value> {
    let mut all = Vec::new();
    paths(&valid, &mut Vec::new(), &mut all);
    let n = all.len().max(1);
    proptest::collection::vec((0..n, mutation()), 1..=3).prop_map(move |muts| {
        let mut doc = valid.clone();
        for (i, m) in muts {
            if let Some(p) = all.get(i) {
                apply(&mut doc, p, &m);
            }
        }
        doc
    })
}

/// A text document (YAML, a query string) with one to three edits: a line replaced, removed or
/// duplicated, or characters inserted at some byte offset (kept on a character boundary).
pub fn mutated_text(valid: &'static str) -> impl Strategy<Value = String> {
    let edit = prop_oneof![
        (any::<prop::sample::Index>(), text()).prop_map(|(i, t)| (0u8, i, t)),
        any::<prop::sample::Index>().prop_map(|i| (1u8, i, String::new())),
        any::<prop::sample::Index>().prop_map(|i| (2u8, i, String::new())),
        (any::<prop::sample::Index>(), text()).prop_map(|(i, t)| (3u8, i, t)),
    ];
    proptest::collection::vec(edit, 1..=3).prop_map(move |edits| {
        let mut doc = valid.to_string();
        for (kind, at, t) in edits {
            let mut lines: Vec<String> = doc.lines().map(str::to_string).collect();
            if lines.is_empty() {
                lines.push(String::new());
            }
            let li = at.index(lines.len());
            match kind {
                0 => lines[li] = t,
                1 => {
                    lines.remove(li);
                }
                2 => {
                    let l = lines[li].clone();
                    lines.insert(li, l);
                }
                _ => {
                    let mut b = at.index(doc.len() + 1);
                    while !doc.is_char_boundary(b) {
                        b -= 1;
                    }
                    doc.insert_str(b, &t);
                    continue;
                }
            }
            doc = lines.join("\n");
            doc.push('\n');
        }
        doc
    })
}

#[cfg(test)]
mod tests {
    use super::*;
    use proptest::strategy::ValueTree;
    use proptest::test_runner::TestRunner;

    #[test]
    fn mutations_change_valid_documents() {
        let valid = serde_json::json!({"a": {"b": [1, "x"]}, "c": "y"});
        let mut runner = TestRunner::deterministic();
        let strategy = mutated(valid.clone());
        let changed = (0..64)
            .filter(|_| strategy.new_tree(&mut runner).unwrap().current() != valid)
            .count();
        assert!(
            changed > 32,
            "only {changed} of 64 mutated documents differ"
        );
        let texts = mutated_text("a: 1\nb: 2\n");
        let changed = (0..64)
            .filter(|_| texts.new_tree(&mut runner).unwrap().current() != "a: 1\nb: 2\n")
            .count();
        assert!(changed > 32, "only {changed} of 64 mutated texts differ");
    }
}
