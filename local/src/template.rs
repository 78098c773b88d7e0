//! EventBridge rules from `template.yaml`, so `POST /events` routes exactly as the deployed rules do.
//!
//! Reads `AWS::Events::Rule` resources (an `EventPattern` written inline or as `!Ref` to a parameter,
//! whose default — or an override — is the pattern's JSON) and SAM functions' `EventBridgeRule` /
//! `CloudWatchEvent` events. A target is a function resource; its `Metadata.BuildProperties.Binary`
//! names the function the local stack invokes. Schedules (`ScheduleExpression`, no pattern) match no
//! event and are skipped.

use std::collections::HashMap;

use serde_yaml_ng::Value as Yaml;

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

/// The rules of a template, with parameter values from `overrides` or the parameters' defaults.
pub fn rules(text: &str, overrides: &HashMap<String, String>) -> Result<Vec<Rule>, TemplateError> {
    let doc: Yaml =
        serde_yaml_ng::from_str(text).map_err(|e| TemplateError::Parse(e.to_string()))?;
    let empty = serde_yaml_ng::Mapping::new();
    let resources = doc
        .get("Resources")
        .and_then(Yaml::as_mapping)
        .unwrap_or(&empty);
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
    let pattern_of = |name: &str, v: &Yaml| -> Result<Pattern, TemplateError> {
        let json: serde_json::Value = match v {
            Yaml::Tagged(t) if t.tag == "Ref" => {
                let p = t
                    .value
                    .as_str()
                    .ok_or_else(|| rule_err(name, "!Ref needs a parameter name"))?;
                let text = param(p)
                    .ok_or_else(|| rule_err(name, format!("parameter {p} has no value")))?;
                serde_json::from_str(&text)
                    .map_err(|e| rule_err(name, format!("parameter {p} is not JSON: {e}")))?
            }
            other => serde_json::to_value(other).map_err(|e| rule_err(name, e.to_string()))?,
        };
        Pattern::parse(json).map_err(|e| rule_err(name, e.to_string()))
    };

    let mut out = Vec::new();
    for (key, res) in resources {
        let Some(name) = key.as_str() else { continue };
        match res.get("Type").and_then(Yaml::as_str) {
            Some("AWS::Events::Rule") => {
                let props = res
                    .get("Properties")
                    .ok_or_else(|| rule_err(name, "no Properties"))?;
                if props.get("State").and_then(Yaml::as_str) == Some("DISABLED") {
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
                for target in props
                    .get("Targets")
                    .and_then(Yaml::as_sequence)
                    .into_iter()
                    .flatten()
                {
                    let logical = match target.get("Arn") {
                        Some(Yaml::Tagged(t)) if t.tag == "GetAtt" => match &t.value {
                            Yaml::String(s) => s.split('.').next().map(str::to_string),
                            Yaml::Sequence(seq) => {
                                seq.first().and_then(Yaml::as_str).map(str::to_string)
                            }
                            _ => None,
                        },
                        _ => None,
                    };
                    let Some(binary) = logical.as_deref().and_then(binary_of) else {
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
                    .and_then(Yaml::as_mapping);
                for (ev_name, ev) in events.into_iter().flatten() {
                    let kind = ev.get("Type").and_then(Yaml::as_str);
                    if !matches!(kind, Some("EventBridgeRule" | "CloudWatchEvent")) {
                        continue;
                    }
                    let rule_name = format!("{name}.{}", ev_name.as_str().unwrap_or("event"));
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

#[cfg(test)]
mod tests {
    use super::*;
    use serde_json::json;

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
            let params: Vec<String> = serde_yaml_ng::from_str::<Yaml>(TEMPLATE)
                .ok()
                .and_then(|d| d.get("Parameters").and_then(Yaml::as_mapping).cloned())
                .map(|m| m.keys().filter_map(|k| k.as_str().map(str::to_string)).collect())
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
