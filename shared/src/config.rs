//! Configuration from environment variables. Every variable has a documented name and default (see
//! docs/configuration.md); a malformed value is an error that names the variable and says what was
//! expected, never a silent fallback.
//!
//! Reads go through [`Vars`] so tests and the local stack pass variables explicitly instead of
//! mutating the process environment.

use std::collections::{BTreeSet, HashMap};
use std::fmt;
use std::str::FromStr;
use std::sync::{Arc, Mutex};
use std::time::Duration;

#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
pub enum ConfigError {
    #[error("environment variable {var} is required: {hint}")]
    Missing { var: String, hint: String },
    #[error("environment variable {var}={value:?} is invalid: {reason}")]
    Invalid {
        var: String,
        value: String,
        reason: String,
    },
}

/// A source of variables: the process environment or an explicit map.
#[derive(Clone)]
pub struct Vars(Arc<Lookup>);

type Lookup = dyn Fn(&str) -> Option<String> + Send + Sync;

impl fmt::Debug for Vars {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str("Vars")
    }
}

impl Vars {
    pub fn process() -> Self {
        Vars(Arc::new(|k| std::env::var(k).ok()))
    }

    pub fn from_pairs<K: Into<String>, V: Into<String>>(
        pairs: impl IntoIterator<Item = (K, V)>,
    ) -> Self {
        let map: HashMap<String, String> = pairs
            .into_iter()
            .map(|(k, v)| (k.into(), v.into()))
            .collect();
        Vars(Arc::new(move |k| map.get(k).cloned()))
    }

    /// These variables, with `overrides` taking precedence (the local stack sets endpoints this way).
    pub fn with_overrides<K: Into<String>, V: Into<String>>(
        &self,
        overrides: impl IntoIterator<Item = (K, V)>,
    ) -> Self {
        let (over, base) = (Vars::from_pairs(overrides), self.clone());
        Vars(Arc::new(move |k| (over.0)(k).or_else(|| (base.0)(k))))
    }

    /// The value, with surrounding whitespace removed; an empty value counts as unset.
    pub fn get(&self, var: &str) -> Option<String> {
        (self.0)(var)
            .map(|v| v.trim().to_string())
            .filter(|v| !v.is_empty())
    }

    pub fn string_or(&self, var: &str, default: &str) -> String {
        self.get(var).unwrap_or_else(|| default.to_string())
    }

    pub fn required(&self, var: &str, hint: &str) -> Result<String, ConfigError> {
        self.get(var).ok_or_else(|| ConfigError::Missing {
            var: var.to_string(),
            hint: hint.to_string(),
        })
    }

    /// Parses the variable if set; `expected` describes the accepted form for the error message.
    pub fn parse<T: FromStr>(&self, var: &str, expected: &str) -> Result<Option<T>, ConfigError> {
        match self.get(var) {
            None => Ok(None),
            Some(v) => v.parse::<T>().map(Some).map_err(|_| ConfigError::Invalid {
                var: var.to_string(),
                value: v,
                reason: format!("expected {expected}"),
            }),
        }
    }

    /// Whole seconds, `0` allowed (e.g. "no caching").
    pub fn secs_or(&self, var: &str, default: Duration) -> Result<Duration, ConfigError> {
        Ok(self
            .parse::<u64>(var, "a whole number of seconds")?
            .map(Duration::from_secs)
            .unwrap_or(default))
    }

    pub fn bool_or(&self, var: &str, default: bool) -> Result<bool, ConfigError> {
        match self.get(var) {
            None => Ok(default),
            Some(v) => match v.to_ascii_lowercase().as_str() {
                "1" | "true" | "yes" | "on" => Ok(true),
                "0" | "false" | "no" | "off" => Ok(false),
                _ => Err(ConfigError::Invalid {
                    var: var.to_string(),
                    value: v,
                    reason: "expected true or false".into(),
                }),
            },
        }
    }
}

/// The names read through a recording [`Vars`] (see [`Vars::recording`]); clones share the log.
#[derive(Debug, Clone, Default)]
pub struct ReadLog(Arc<Mutex<BTreeSet<String>>>);

impl ReadLog {
    /// Every variable name read so far, set or not.
    pub fn names(&self) -> BTreeSet<String> {
        self.0.lock().map(|s| s.clone()).unwrap_or_default()
    }
}

impl Vars {
    /// The same variables, plus a log of every name read through the returned `Vars`. The
    /// `template.yaml` check uses it to learn which variables a config constructor reads.
    pub fn recording(&self) -> (Vars, ReadLog) {
        let log = ReadLog::default();
        let (inner, names) = (self.0.clone(), log.0.clone());
        let vars = Vars(Arc::new(move |k| {
            if let Ok(mut n) = names.lock() {
                n.insert(k.to_string());
            }
            inner(k)
        }));
        (vars, log)
    }
}

impl Default for Vars {
    fn default() -> Self {
        Vars::process()
    }
}

/// Checks a DynamoDB table or index name (3-255 of `a-z A-Z 0-9 _ - .`) so a typo fails at start-up
/// with the variable's name rather than on the first request.
pub fn check_table_name(var: &str, value: &str) -> Result<(), ConfigError> {
    let ok_len = (3..=255).contains(&value.len());
    let ok_chars = value
        .chars()
        .all(|c| c.is_ascii_alphanumeric() || matches!(c, '_' | '-' | '.'));
    if ok_len && ok_chars {
        Ok(())
    } else {
        Err(ConfigError::Invalid {
            var: var.to_string(),
            value: value.to_string(),
            reason: "a DynamoDB name is 3-255 characters of a-z, A-Z, 0-9, '_', '-' and '.'".into(),
        })
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn missing_and_malformed_values_name_the_variable() {
        let vars = Vars::from_pairs([("N", "abc"), ("EMPTY", "  "), ("B", "maybe")]);
        let err = vars
            .required("NOPE", "set it to the table name")
            .unwrap_err();
        assert_eq!(
            err.to_string(),
            "environment variable NOPE is required: set it to the table name"
        );
        assert!(
            vars.required("EMPTY", "x").is_err(),
            "blank counts as unset"
        );
        let err = vars.secs_or("N", Duration::from_secs(1)).unwrap_err();
        assert_eq!(
            err,
            ConfigError::Invalid {
                var: "N".into(),
                value: "abc".into(),
                reason: "expected a whole number of seconds".into()
            }
        );
        assert!(vars
            .bool_or("B", false)
            .unwrap_err()
            .to_string()
            .contains("B=\"maybe\""));
    }

    #[test]
    fn defaults_apply_only_when_unset() {
        let vars = Vars::from_pairs([("S", " 30 "), ("T", "yes")]);
        assert_eq!(
            vars.secs_or("S", Duration::ZERO).unwrap(),
            Duration::from_secs(30)
        );
        assert_eq!(
            vars.secs_or("U", Duration::from_secs(7)).unwrap(),
            Duration::from_secs(7)
        );
        assert!(vars.bool_or("T", false).unwrap());
        assert_eq!(vars.string_or("U", "dflt"), "dflt");
    }

    #[test]
    fn overrides_win_and_the_rest_falls_through() {
        let base = Vars::from_pairs([("A", "1"), ("B", "2")]);
        let v = base.with_overrides([("B", "20"), ("C", "30")]);
        assert_eq!(v.get("A").as_deref(), Some("1"));
        assert_eq!(v.get("B").as_deref(), Some("20"));
        assert_eq!(v.get("C").as_deref(), Some("30"));
        assert_eq!(base.get("B").as_deref(), Some("2"));
    }

    #[test]
    fn a_recording_reads_the_same_values_and_logs_every_name() {
        let (vars, log) = Vars::from_pairs([("A", "1")]).recording();
        assert_eq!(vars.get("A").as_deref(), Some("1"));
        assert_eq!(vars.string_or("B", "dflt"), "dflt");
        let copy = vars.clone();
        assert!(copy.bool_or("C", true).unwrap());
        let names: Vec<String> = log.names().into_iter().collect();
        assert_eq!(names, ["A", "B", "C"]);
    }

    #[test]
    fn table_names_are_checked() {
        assert!(check_table_name("V", "turnstile-tenants").is_ok());
        assert!(check_table_name("V", "ab").is_err());
        assert!(check_table_name("V", "has space").is_err());
        assert!(check_table_name("V", &"x".repeat(256)).is_err());
    }
}
