//! EventBridge rules from `template.yaml`, so `POST /events` routes exactly as the deployed rules do.
//!
//! Reads `AWS::Events::Rule` resources (an `EventPattern` written inline or as `!Ref` to a parameter,
//! whose default — or an override — is the pattern's JSON) and SAM functions' `EventBridgeRule` /
//! `CloudWatchEvent` events. A target is a function resource; its `Metadata.BuildProperties.Binary`
//! names the function the local stack invokes. Schedules (`ScheduleExpression`, no pattern) match no
//! event and are skipped.
//!
//! [`stream_filters`] reads an event source mapping's `FilterCriteria`, so the stream bridge drops
//! the records Lambda would drop before invoking the function.
//!
//! [`to_json`] reads the YAML with `serde-saphyr` (the crate `shared` reads the limits file with)
//! and writes CloudFormation's short-form tags in their long form (`!Ref X` → `{"Ref": X}`), so the
//! template is plain JSON here and in the template check (tests/integration/template.rs).

use std::collections::HashMap;
use std::fmt;

use serde::de::{Deserialize, Deserializer, MapAccess, SeqAccess, Visitor};
use serde_json::{json, Map, Value};
use serde_saphyr::Tagged;

use crate::eventbridge::Pattern;
use crate::http_api::Rule;

#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
pub enum TemplateError {
    #[error("template.yaml does not parse: {0}")]
    Parse(String),
    #[error("rule {rule}: {reason}")]
    Rule { rule: String, reason: String },
}

fn rule_err(rule: &str, reason: impl Into<String>) -> TemplateError {
    TemplateError::Rule {
        rule: rule.to_string(),
        reason: reason.into(),
    }
}

/// A CloudFormation YAML document as JSON, every short-form tag in its long form: `!Ref X` →
/// `{"Ref": X}`, `!Condition C` → `{"Condition": C}`, `!GetAtt A.B` → `{"Fn::GetAtt": [A, B]}`,
/// any other `!F x` → `{"Fn::F": x}`.
pub fn to_json(text: &str) -> Result<Value, TemplateError> {
    serde_saphyr::from_str::<Cfn>(text)
        .map(|Cfn(v)| v)
        .map_err(|e| TemplateError::Parse(e.to_string()))
}

/// One YAML node with its tag applied (see [`to_json`]).
struct Cfn(Value);

impl<'de> Deserialize<'de> for Cfn {
    fn deserialize<D: Deserializer<'de>>(d: D) -> Result<Self, D::Error> {
        let Tagged(Untagged(v), tag) = Tagged::<Untagged>::deserialize(d)?;
        Ok(Cfn(
            match tag.as_deref().map(|t| t.trim_start_matches('!')) {
                None => v,
                Some("Ref") => json!({ "Ref": v }),
                Some("Condition") => json!({ "Condition": v }),
                Some("GetAtt") => match v {
                    Value::String(s) => match s.split_once('.') {
                        Some((resource, attribute)) => {
                            json!({ "Fn::GetAtt": [resource, attribute] })
                        }
                        None => json!({ "Fn::GetAtt": s }),
                    },
                    other => json!({ "Fn::GetAtt": other }),
                },
                Some(f) => json!({ format!("Fn::{f}"): v }),
            },
        ))
    }
}

/// A node's value, its children tagged nodes again.
struct Untagged(Value);

impl<'de> Deserialize<'de> for Untagged {
    fn deserialize<D: Deserializer<'de>>(d: D) -> Result<Self, D::Error> {
        struct V;
        impl<'de> Visitor<'de> for V {
            type Value = Value;
            fn expecting(&self, f: &mut fmt::Formatter) -> fmt::Result {
                f.write_str("a YAML node")
            }
            fn visit_unit<E>(self) -> Result<Value, E> {
                Ok(Value::Null)
            }
            fn visit_none<E>(self) -> Result<Value, E> {
                Ok(Value::Null)
            }
            fn visit_bool<E>(self, b: bool) -> Result<Value, E> {
                Ok(b.into())
            }
            fn visit_i64<E>(self, n: i64) -> Result<Value, E> {
                Ok(n.into())
            }
            fn visit_u64<E>(self, n: u64) -> Result<Value, E> {
                Ok(n.into())
            }
            fn visit_f64<E>(self, n: f64) -> Result<Value, E> {
                Ok(n.into())
            }
            fn visit_str<E>(self, s: &str) -> Result<Value, E> {
                Ok(s.into())
            }
            fn visit_string<E>(self, s: String) -> Result<Value, E> {
                Ok(s.into())
            }
            fn visit_seq<A: SeqAccess<'de>>(self, mut seq: A) -> Result<Value, A::Error> {
                let mut out = Vec::new();
                while let Some(Cfn(v)) = seq.next_element()? {
                    out.push(v);
                }
                Ok(Value::Array(out))
            }
            fn visit_map<A: MapAccess<'de>>(self, mut map: A) -> Result<Value, A::Error> {
                let mut out = Map::new();
                while let Some((k, Cfn(v))) = map.next_entry::<String, Cfn>()? {
                    out.insert(k, v);
                }
                Ok(Value::Object(out))
            }
        }
        d.deserialize_any(V).map(Untagged)
    }
}

/// A template's `Resources` (none when it has no such map).
fn resources(doc: &Value) -> &Map<String, Value> {
    static NONE: std::sync::LazyLock<Map<String, Value>> = std::sync::LazyLock::new(Map::new);
    doc.get("Resources")
        .and_then(Value::as_object)
        .unwrap_or(&NONE)
}

/// The rules of a template, with parameter values from `overrides` or the parameters' defaults.
pub fn rules(text: &str, overrides: &HashMap<String, String>) -> Result<Vec<Rule>, TemplateError> {
    let doc = to_json(text)?;
    let resources = resources(&doc);
    let param = |name: &str| -> Option<String> {
        overrides.get(name).cloned().or_else(|| {
            doc.get("Parameters")?
                .get(name)?
                .get("Default")?
                .as_str()
                .map(str::to_string)
        })
    };
    let binary_of = |logical: &str| -> Option<String> {
        resources
            .get(logical)?
            .get("Metadata")?
            .get("BuildProperties")?
            .get("Binary")?
            .as_str()
            .map(str::to_string)
    };
    let pattern_of = |name: &str, v: &Value| -> Result<Pattern, TemplateError> {
        let json: Value = match v.get("Ref") {
            Some(r) => {
                let p = r
                    .as_str()
                    .ok_or_else(|| rule_err(name, "!Ref needs a parameter name"))?;
                let text = param(p)
                    .ok_or_else(|| rule_err(name, format!("parameter {p} has no value")))?;
                serde_json::from_str(&text)
                    .map_err(|e| rule_err(name, format!("parameter {p} is not JSON: {e}")))?
            }
            None => v.clone(),
        };
        Pattern::parse(json).map_err(|e| rule_err(name, e.to_string()))
    };

    let mut out = Vec::new();
    for (name, res) in resources {
        match res.get("Type").and_then(Value::as_str) {
            Some("AWS::Events::Rule") => {
                let props = res
                    .get("Properties")
                    .ok_or_else(|| rule_err(name, "no Properties"))?;
                if props.get("State").and_then(Value::as_str) == Some("DISABLED") {
                    continue;
                }
                // A schedule (the reconciler's) matches no event: `POST /events` never reaches
                // it; run its function with `turnstile invoke` or `turnstile reconcile` instead.
                if props.get("EventPattern").is_none() && props.get("ScheduleExpression").is_some()
                {
                    continue;
                }
                let pattern = pattern_of(
                    name,
                    props
                        .get("EventPattern")
                        .ok_or_else(|| rule_err(name, "no EventPattern"))?,
                )?;
                for target in elements(props, "Targets") {
                    let logical = target
                        .get("Arn")
                        .and_then(|arn| arn.get("Fn::GetAtt"))
                        .and_then(|g| match g {
                            Value::String(s) => s.split('.').next(),
                            Value::Array(parts) => parts.first().and_then(Value::as_str),
                            _ => None,
                        });
                    let Some(binary) = logical.and_then(binary_of) else {
                        tracing::warn!(
                            rule = name,
                            "a target that is not one of our functions is skipped"
                        );
                        continue;
                    };
                    out.push(Rule {
                        name: name.to_string(),
                        pattern: pattern.clone(),
                        target: binary,
                    });
                }
            }
            Some("AWS::Serverless::Function") => {
                let Some(binary) = binary_of(name) else {
                    continue;
                };
                let events = res
                    .get("Properties")
                    .and_then(|p| p.get("Events"))
                    .and_then(Value::as_object);
                for (ev_name, ev) in events.into_iter().flatten() {
                    let kind = ev.get("Type").and_then(Value::as_str);
                    if !matches!(kind, Some("EventBridgeRule" | "CloudWatchEvent")) {
                        continue;
                    }
                    let rule_name = format!("{name}.{ev_name}");
                    let Some(p) = ev.get("Properties").and_then(|p| p.get("Pattern")) else {
                        continue;
                    };
                    out.push(Rule {
                        name: rule_name.clone(),
                        pattern: pattern_of(&rule_name, p)?,
                        target: binary.clone(),
                    });
                }
            }
            _ => {}
        }
    }
    Ok(out)
}

/// The filter patterns (any one matches) of the event source mappings that invoke the function
/// built as `binary`: an `AWS::Lambda::EventSourceMapping` whose `FunctionName` is `!Ref` to it, or
/// the function's own `DynamoDB` events. Empty when none filters (every record is delivered).
pub fn stream_filters(text: &str, binary: &str) -> Result<Vec<Pattern>, TemplateError> {
    let doc = to_json(text)?;
    let resources = resources(&doc);
    let is_ours = |logical: &str| {
        resources
            .get(logical)
            .and_then(|r| r.pointer("/Metadata/BuildProperties/Binary"))
            .and_then(Value::as_str)
            == Some(binary)
    };
    let mut criteria: Vec<(String, &Value)> = Vec::new();
    for (name, res) in resources {
        match res.get("Type").and_then(Value::as_str) {
            Some("AWS::Lambda::EventSourceMapping") => {
                let target = res
                    .pointer("/Properties/FunctionName/Ref")
                    .and_then(Value::as_str);
                if let (Some(target), Some(c)) = (target, res.pointer("/Properties/FilterCriteria"))
                {
                    if is_ours(target) {
                        criteria.push((name.clone(), c));
                    }
                }
            }
            Some("AWS::Serverless::Function") if is_ours(name) => {
                let events = res.pointer("/Properties/Events").and_then(Value::as_object);
                for (ev_name, ev) in events.into_iter().flatten() {
                    if ev.get("Type").and_then(Value::as_str) != Some("DynamoDB") {
                        continue;
                    }
                    if let Some(c) = ev.pointer("/Properties/FilterCriteria") {
                        criteria.push((format!("{name}.{ev_name}"), c));
                    }
                }
            }
            _ => {}
        }
    }
    let mut out = Vec::new();
    for (name, c) in criteria {
        for filter in elements(c, "Filters") {
            let text = filter
                .get("Pattern")
                .and_then(Value::as_str)
                .ok_or_else(|| rule_err(&name, "a filter without a Pattern string"))?;
            let json: Value = serde_json::from_str(text)
                .map_err(|e| rule_err(&name, format!("filter pattern is not JSON: {e}")))?;
            out.push(Pattern::parse(json).map_err(|e| rule_err(&name, e.to_string()))?);
        }
    }
    Ok(out)
}

/// The elements of `v[key]` when it is an array (none when it is absent or not an array: the
/// callers name what they need from each element).
fn elements<'a>(v: &'a Value, key: &str) -> impl Iterator<Item = &'a Value> + 'a {
    v.get(key).and_then(Value::as_array).into_iter().flatten()
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn the_sweepers_filter_passes_only_ttl_removes() {
        let text = include_str!("../../template.yaml");
        let filters = stream_filters(text, "ttl-sweeper").unwrap();
        assert_eq!(filters.len(), 1);
        let passes = |r: &Value| filters.iter().any(|p| p.matches(r));
        let ttl = json!({"eventName": "REMOVE",
            "userIdentity": {"type": "Service", "principalId": "dynamodb.amazonaws.com"}});
        assert!(passes(&ttl));
        assert!(!passes(&json!({"eventName": "INSERT"})));
        assert!(!passes(&json!({"eventName": "MODIFY"})));
        assert!(
            !passes(&json!({"eventName": "REMOVE"})),
            "a user's DeleteItem"
        );
        assert!(stream_filters(text, "token-remover").unwrap().is_empty());
    }

    const TEMPLATE: &str = r#"
Parameters:
  Pattern:
    Type: String
    Default: '{"source": ["aws.emr"], "detail": {"state": ["TERMINATED"]}}'
Resources:
  RemoverFunction:
    Type: AWS::Serverless::Function
    Metadata:
      BuildProperties:
        Binary: token-remover
  TheRule:
    Type: AWS::Events::Rule
    Properties:
      EventPattern: !Ref Pattern
      State: ENABLED
      Targets:
        - Id: t
          Arn: !GetAtt RemoverFunction.Arn
  Off:
    Type: AWS::Events::Rule
    Properties:
      EventPattern: {"source": ["x"]}
      State: DISABLED
      Targets: []
"#;

    #[test]
    fn rules_come_from_the_template_with_parameter_defaults_or_overrides() {
        let rules = rules(TEMPLATE, &HashMap::new()).unwrap();
        assert_eq!(rules.len(), 1);
        assert_eq!(rules[0].name, "TheRule");
        assert_eq!(rules[0].target, "token-remover");
        let terminated = json!({"source": "aws.emr", "detail": {"state": "TERMINATED"}});
        assert!(rules[0].pattern.matches(&terminated));

        let o = HashMap::from([(
            "Pattern".to_string(),
            r#"{"source": ["aws.ec2"]}"#.to_string(),
        )]);
        let rules = super::rules(TEMPLATE, &o).unwrap();
        assert!(!rules[0].pattern.matches(&terminated));
    }

    #[test]
    fn the_projects_template_routes_emr_terminations_to_the_token_remover() {
        let text = include_str!("../../template.yaml");
        let rules = rules(text, &HashMap::new()).unwrap();
        assert!(!rules.is_empty());
        let ev = |state: &str| {
            json!({"source": "aws.emr", "detail-type": "EMR Cluster State Change",
                   "detail": {"state": state, "clusterId": "j-1"}})
        };
        let targets = |e: &serde_json::Value| -> Vec<&str> {
            rules
                .iter()
                .filter(|r| r.pattern.matches(e))
                .map(|r| r.target.as_str())
                .collect()
        };
        assert_eq!(targets(&ev("TERMINATED")), ["token-remover"]);
        assert_eq!(targets(&ev("TERMINATED_WITH_ERRORS")), ["token-remover"]);
        assert!(targets(&ev("RUNNING")).is_empty());
    }

    #[test]
    fn a_bad_pattern_parameter_names_the_rule() {
        let bad = TEMPLATE.replace(
            r#"'{"source": ["aws.emr"], "detail": {"state": ["TERMINATED"]}}'"#,
            "'not json'",
        );
        let err = rules(&bad, &HashMap::new()).unwrap_err();
        assert!(
            err.to_string()
                .starts_with("rule TheRule: parameter Pattern is not JSON"),
            "{err}"
        );
    }
}

/// Property tests (docs/testing.md): the template and its pattern parameters are configuration
/// the local stack reads at start.
#[cfg(test)]
mod fuzz_tests {
    use super::*;
    use proptest::prelude::*;
    use shared::fuzz;

    const TEMPLATE: &str = include_str!("../../template.yaml");

    proptest! {
        #![proptest_config(fuzz::config(8))]

        /// `fuzz_template_rules`: the project's template with lines mutated, and any JSON text as
        /// every pattern parameter, gives rules or a typed `TemplateError`, never a panic.
        #[test]
        fn fuzz_template_rules(
            text in fuzz::mutated_text(TEMPLATE),
            pattern in prop_oneof![fuzz::text(), fuzz::json().prop_map(|v| v.to_string())],
        ) {
            let _ = rules(&text, &HashMap::new());
            let params: Vec<String> = to_json(TEMPLATE)
                .ok()
                .and_then(|d| d.get("Parameters").and_then(Value::as_object).cloned())
                .map(|m| m.keys().cloned().collect())
                .unwrap_or_default();
            let o: HashMap<String, String> =
                params.into_iter().map(|p| (p, pattern.clone())).collect();
            match rules(TEMPLATE, &o) {
                Ok(rs) => {
                    for r in rs {
                        let _ = r.pattern.matches(&serde_json::Value::Null);
                    }
                }
                Err(e) => prop_assert!(!e.to_string().is_empty()),
            }
        }
    }
}
