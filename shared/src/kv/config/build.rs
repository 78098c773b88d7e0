//! Validation: the parsed file becomes a [`LimitSet`] only when it has no problem at all; otherwise
//! every problem, with its line, in file order.

use std::collections::HashMap;

use serde_saphyr::Spanned;

use super::file::{first_line, parse_period, FileModel, LimitSpec};
use super::set::at;
use super::{KeyError, LimitSet, LoadError, NameDef, Problem, LIMITS_FILE_VAR};
use crate::config::Vars;
use crate::gcra::Rate;
use crate::kv::names::{check_name, IdFormat};
use crate::shard::{Shards, MAX_SHARDS};

impl LimitSet {
    /// Parses and validates a whole file. Pure: no I/O.
    pub fn from_yaml(src: &str) -> Result<LimitSet, LoadError> {
        let file: FileModel = serde_saphyr::from_str(src).map_err(|e| {
            let (line, column) = e
                .location()
                .map(|l| (l.line(), l.column()))
                .unwrap_or((0, 0));
            LoadError::Invalid(vec![Problem {
                line,
                column,
                reason: first_line(&e.to_string()),
            }])
        })?;
        build(file)
    }

    /// Reads and validates a file.
    pub fn from_path(path: &str) -> Result<LimitSet, LoadError> {
        let src = std::fs::read_to_string(path).map_err(|e| LoadError::Read {
            path: path.to_string(),
            reason: e.to_string(),
        })?;
        Self::from_yaml(&src)
    }

    /// The file named by `TURNSTILE_LIMITS_FILE`, if set (`None` when unset: no key-value limits).
    pub fn from_vars(vars: &Vars) -> Result<Option<LimitSet>, LoadError> {
        match vars.get(LIMITS_FILE_VAR) {
            Some(path) => Self::from_path(&path).map(Some),
            None => Ok(None),
        }
    }
}

fn rate_of(key: &Spanned<String>, spec: &LimitSpec, problems: &mut Vec<Problem>) -> Option<Rate> {
    let k = &key.value;
    let mut ok = true;
    if spec.burst.value == 0 {
        problems.push(at(&spec.burst, format!("{k}: burst must be at least 1")));
        ok = false;
    }
    if spec.count.value == 0 {
        problems.push(at(&spec.count, format!("{k}: count must be at least 1")));
        ok = false;
    }
    let period = match parse_period(&spec.period.value) {
        Ok(p) if p.is_zero() => {
            problems.push(at(
                &spec.period,
                format!("{k}: period must be longer than zero"),
            ));
            None
        }
        Ok(p) => Some(p),
        Err(reason) => {
            problems.push(at(&spec.period, format!("{k}: {reason}")));
            None
        }
    };
    if let Some(sh) = &spec.shards {
        if matches!(sh.value, Shards::Fixed(n) if !(1..=MAX_SHARDS).contains(&n)) {
            let why = format!("{k}: shards must be 1..={MAX_SHARDS} or auto");
            problems.push(at(sh, why));
            ok = false;
        }
    }
    let period = period?;
    if !ok {
        return None;
    }
    match Rate::new(spec.burst.value, spec.count.value, period) {
        Ok(r) => Some(r),
        Err(e) => {
            problems.push(at(key, format!("{k}: {e}")));
            None
        }
    }
}

fn build(file: FileModel) -> Result<LimitSet, LoadError> {
    let mut problems = Vec::new();
    let mut set = LimitSet::default();
    let mut first_line: HashMap<String, u64> = HashMap::new();
    let mut dup =
        |section: &str, key: &str, span: &Spanned<String>, problems: &mut Vec<Problem>| {
            let line = span.referenced.line();
            match first_line.insert(format!("{section}\u{0}{key}"), line) {
                Some(prev) => {
                    problems.push(at(
                        span,
                        format!(
                            "duplicate key {:?} in {section} (first at line {prev})",
                            span.value
                        ),
                    ));
                    true
                }
                None => false,
            }
        };

    for (key, spec) in &file.names {
        if let Err(reason) = check_name(&key.value) {
            problems.push(at(key, reason));
            continue;
        }
        if dup("names", &key.value, key, &mut problems) {
            continue;
        }
        let format = match spec.format.value.parse::<IdFormat>() {
            Ok(f) => f,
            Err(reason) => {
                problems.push(at(&spec.format, format!("{}: {reason}", key.value)));
                continue;
            }
        };
        if spec.id.value == 0 {
            problems.push(at(
                &spec.id,
                format!("{}: id must be at least 1", key.value),
            ));
            continue;
        }
        if let Some(other) = set.by_number.get(&spec.id.value) {
            problems.push(at(
                &spec.id,
                format!(
                    "{}: id {} is already used by {other}",
                    key.value, spec.id.value
                ),
            ));
            continue;
        }
        set.by_number.insert(spec.id.value, key.value.clone());
        set.names.insert(
            key.value.clone(),
            NameDef {
                name: key.value.clone(),
                id: spec.id.value,
                format,
                shadow: spec.shadow,
            },
        );
    }

    for (key, spec) in &file.defaults {
        let Some(def) = set.names.get(&key.value).cloned() else {
            problems.push(at(
                key,
                format!(
                    "unknown limit name {:?} (declare it under names)",
                    key.value
                ),
            ));
            continue;
        };
        let is_dup = dup("defaults", &key.value, key, &mut problems);
        if let Some(g) = &spec.global {
            problems.push(at(
                g,
                format!(
                    "{}: a global limit is one bucket: declare it under overrides (Name:id)",
                    key.value
                ),
            ));
        }
        if let Some(rate) = rate_of(key, spec, &mut problems) {
            if !is_dup {
                set.defaults.insert(def.id, rate);
                if let Some(sh) = &spec.shards {
                    set.default_shards.insert(def.id, sh.value);
                }
            }
        }
    }

    for (key, spec) in &file.overrides {
        let Some((name, raw_id)) = key.value.split_once(':') else {
            problems.push(at(
                key,
                format!("override key {:?} is not Name:id", key.value),
            ));
            continue;
        };
        let bucket = match set.bucket(name, raw_id) {
            Ok(b) => b,
            Err(KeyError::UnknownName(n)) => {
                problems.push(at(
                    key,
                    format!("unknown limit name {n:?} in override {:?}", key.value),
                ));
                continue;
            }
            Err(e) => {
                problems.push(at(key, format!("override {:?}: {e}", key.value)));
                continue;
            }
        };
        let is_dup = dup("overrides", &bucket.key(), key, &mut problems);
        if let Some(rate) = rate_of(key, spec, &mut problems) {
            if !is_dup {
                if let Some(sh) = &spec.shards {
                    set.override_shards.insert(bucket.key(), sh.value);
                }
                set.overrides.insert(bucket.key(), rate);
                if let Some(g) = &spec.global {
                    let b = bucket.key();
                    if let Some(d) = super::global::declare(key, spec, g, rate, &b, &mut problems) {
                        set.globals.insert(b, d);
                    }
                }
            }
        }
    }

    if problems.is_empty() {
        Ok(set)
    } else {
        problems.sort_by_key(|p| (p.line, p.column));
        Err(LoadError::Invalid(problems))
    }
}
