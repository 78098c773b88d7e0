//! Event processors: which events name a tokenized resource, and where its id is.
//!
//! A processor is chosen by `source` and, optionally, `detail_type`; its predicate (`when`) decides
//! whether the event means the resource is gone; `resource_id` is the dotted path of the id.
//! The configuration is validated whole at start-up; every error names the field at fault
//! (`processors[0].when.all[1].in`).

use serde::Serialize;
use serde_json::Value;
use shared::token::json_path;

/// One test on a dotted path of the event.
#[derive(Debug, Clone, PartialEq, Serialize)]
#[serde(rename_all = "snake_case")]
pub enum Test {
    Equals(Value),
    NotEquals(Value),
    In(Vec<Value>),
    NotIn(Vec<Value>),
    /// Substring of a string, or element of an array.
    Contains(Value),
    NotContains(Value),
    Exists(bool),
}

/// A predicate tree: leaves test a path; `all`/`any`/`not` combine.
#[derive(Debug, Clone, PartialEq, Serialize)]
#[serde(rename_all = "snake_case")]
pub enum Predicate {
    All(Vec<Predicate>),
    Any(Vec<Predicate>),
    Not(Box<Predicate>),
    Leaf { path: String, test: Test },
}

impl Predicate {
    /// Evaluates against the event (as JSON). A missing path fails positive tests and passes
    /// negative ones (`not_equals`, `not_in`, `not_contains`, `exists: false`).
    pub fn eval(&self, event: &Value) -> bool {
        match self {
            Predicate::All(ps) => ps.iter().all(|p| p.eval(event)),
            Predicate::Any(ps) => ps.iter().any(|p| p.eval(event)),
            Predicate::Not(p) => !p.eval(event),
            Predicate::Leaf { path, test } => {
                let v = json_path(event, path).filter(|v| !v.is_null());
                match (test, v) {
                    (Test::Exists(want), v) => v.is_some() == *want,
                    (Test::Equals(x), Some(v)) => v == x,
                    (Test::NotEquals(x), Some(v)) => v != x,
                    (Test::In(xs), Some(v)) => xs.contains(v),
                    (Test::NotIn(xs), Some(v)) => !xs.contains(v),
                    (Test::Contains(x), Some(v)) => contains(v, x),
                    (Test::NotContains(x), Some(v)) => !contains(v, x),
                    (Test::NotEquals(_) | Test::NotIn(_) | Test::NotContains(_), None) => true,
                    (_, None) => false,
                }
            }
        }
    }
}

fn contains(haystack: &Value, needle: &Value) -> bool {
    match (haystack, needle) {
        (Value::String(h), Value::String(n)) => h.contains(n.as_str()),
        (Value::Array(items), n) => items.contains(n),
        _ => false,
    }
}

/// One processor.
#[derive(Debug, Clone, PartialEq, Serialize)]
pub struct Processor {
    pub source: String,
    pub detail_type: Option<String>,
    pub resource_id: String,
    pub when: Option<Predicate>,
}

/// rate-limiter-py's normalisation of a detail type: lower case, spaces removed.
fn norm(s: &str) -> String {
    s.chars()
        .filter(|c| !c.is_whitespace())
        .flat_map(char::to_lowercase)
        .collect()
}

/// The configured processors, in order.
#[derive(Debug, Clone, PartialEq, Serialize)]
pub struct Processors(pub Vec<Processor>);

impl Processors {
    /// The processor for an event: the first whose source and detail type both match, else the
    /// first with a matching source and no detail type (as rate-limiter-py picks them).
    pub fn select(&self, source: &str, detail_type: &str) -> Option<(usize, &Processor)> {
        let dt = norm(detail_type);
        let src = |p: &Processor| p.source.eq_ignore_ascii_case(source);
        self.0
            .iter()
            .enumerate()
            .find(|(_, p)| src(p) && p.detail_type.as_deref().is_some_and(|d| norm(d) == dt))
            .or_else(|| {
                self.0
                    .iter()
                    .enumerate()
                    .find(|(_, p)| src(p) && p.detail_type.is_none())
            })
    }

    /// Parses and validates a JSON or YAML document: either `{processors: [...]}` or the list itself.
    pub fn parse(text: &str) -> Result<Processors, String> {
        let doc: Value = match serde_json::from_str(text) {
            Ok(v) => v,
            Err(json_err) => serde_saphyr::from_str(text)
                .map_err(|yaml_err| format!("neither JSON ({json_err}) nor YAML ({yaml_err})"))?,
        };
        let list = match &doc {
            Value::Array(a) => a,
            Value::Object(o) => {
                if let Some(k) = o.keys().find(|k| k.as_str() != "processors") {
                    return Err(format!(
                        "unknown top-level key {k:?}; expected \"processors\""
                    ));
                }
                o.get("processors")
                    .and_then(Value::as_array)
                    .ok_or("processors: expected a list of processors")?
            }
            _ => return Err("expected a list of processors or {processors: [...]}".into()),
        };
        if list.is_empty() {
            return Err("processors: at least one processor is required".into());
        }
        let mut out = Vec::with_capacity(list.len());
        for (i, p) in list.iter().enumerate() {
            out.push(processor(p, &format!("processors[{i}]"))?);
        }
        Ok(Processors(out))
    }
}

fn non_empty_str(v: Option<&Value>, at: &str) -> Result<String, String> {
    match v {
        Some(Value::String(s)) if !s.trim().is_empty() => Ok(s.trim().to_string()),
        Some(other) => Err(format!("{at}: expected a non-empty string, got {other}")),
        None => Err(format!("{at}: required")),
    }
}

fn path(v: Option<&Value>, at: &str) -> Result<String, String> {
    let p = non_empty_str(v, at)?;
    if p.split('.').any(str::is_empty) {
        return Err(format!(
            "{at}: {p:?} is not a dotted path like detail.clusterId"
        ));
    }
    Ok(p)
}

fn processor(v: &Value, at: &str) -> Result<Processor, String> {
    let o = v.as_object().ok_or(format!("{at}: expected a mapping"))?;
    const KEYS: [&str; 4] = ["source", "detail_type", "resource_id", "when"];
    if let Some(k) = o.keys().find(|k| !KEYS.contains(&k.as_str())) {
        return Err(format!(
            "{at}.{k}: unknown field; expected one of {}",
            KEYS.join(", ")
        ));
    }
    Ok(Processor {
        source: non_empty_str(o.get("source"), &format!("{at}.source"))?,
        detail_type: match o.get("detail_type") {
            None | Some(Value::Null) => None,
            v => Some(non_empty_str(v, &format!("{at}.detail_type"))?),
        },
        resource_id: path(o.get("resource_id"), &format!("{at}.resource_id"))?,
        when: match o.get("when") {
            None | Some(Value::Null) => None,
            Some(p) => Some(predicate(p, &format!("{at}.when"))?),
        },
    })
}

const TESTS: [&str; 7] = [
    "equals",
    "not_equals",
    "in",
    "not_in",
    "contains",
    "not_contains",
    "exists",
];

fn scalar(v: &Value, at: &str) -> Result<Value, String> {
    match v {
        Value::String(_) | Value::Number(_) | Value::Bool(_) => Ok(v.clone()),
        other => Err(format!(
            "{at}: expected a string, number or boolean, got {other}"
        )),
    }
}

fn predicate(v: &Value, at: &str) -> Result<Predicate, String> {
    let o = v.as_object().ok_or(format!("{at}: expected a mapping"))?;
    let list = |key: &str| -> Result<Vec<Predicate>, String> {
        let items = o
            .get(key)
            .and_then(Value::as_array)
            .filter(|a| !a.is_empty())
            .ok_or(format!(
                "{at}.{key}: expected a non-empty list of predicates"
            ))?;
        items
            .iter()
            .enumerate()
            .map(|(i, p)| predicate(p, &format!("{at}.{key}[{i}]")))
            .collect()
    };
    let combinators: Vec<&str> = ["all", "any", "not"]
        .into_iter()
        .filter(|k| o.contains_key(*k))
        .collect();
    if !combinators.is_empty() {
        if o.len() != 1 {
            return Err(format!(
                "{at}: {} must be the only key of its mapping",
                combinators[0]
            ));
        }
        return match combinators[0] {
            "all" => Ok(Predicate::All(list("all")?)),
            "any" => Ok(Predicate::Any(list("any")?)),
            _ => Ok(Predicate::Not(Box::new(predicate(
                &o["not"],
                &format!("{at}.not"),
            )?))),
        };
    }
    let p = path(o.get("path"), &format!("{at}.path"))?;
    if let Some(k) = o
        .keys()
        .find(|k| k.as_str() != "path" && !TESTS.contains(&k.as_str()))
    {
        return Err(format!(
            "{at}.{k}: unknown test; expected one of {} (or all/any/not)",
            TESTS.join(", ")
        ));
    }
    let tests: Vec<&String> = o.keys().filter(|k| k.as_str() != "path").collect();
    let [name] = tests.as_slice() else {
        return Err(format!(
            "{at}: expected exactly one test beside path, one of {}",
            TESTS.join(", ")
        ));
    };
    let val = &o[name.as_str()];
    let field = format!("{at}.{name}");
    let scalars = |v: &Value| -> Result<Vec<Value>, String> {
        let a = v
            .as_array()
            .filter(|a| !a.is_empty())
            .ok_or(format!("{field}: expected a non-empty list"))?;
        a.iter()
            .enumerate()
            .map(|(i, x)| scalar(x, &format!("{field}[{i}]")))
            .collect()
    };
    let test = match name.as_str() {
        "equals" => Test::Equals(scalar(val, &field)?),
        "not_equals" => Test::NotEquals(scalar(val, &field)?),
        "in" => Test::In(scalars(val)?),
        "not_in" => Test::NotIn(scalars(val)?),
        "contains" => Test::Contains(scalar(val, &field)?),
        "not_contains" => Test::NotContains(scalar(val, &field)?),
        _ => Test::Exists(
            val.as_bool()
                .ok_or(format!("{field}: expected true or false"))?,
        ),
    };
    Ok(Predicate::Leaf { path: p, test })
}
