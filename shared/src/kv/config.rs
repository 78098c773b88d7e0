//! The limits file (seed 004): declared names, defaults keyed by name, overrides keyed `Name:id`.
//!
//! ```yaml
//! names:
//!   NewRegistrationsPerIPAddress: { id: 2, format: ipAddress }
//!   NewOrdersPerAccount: { id: 3, format: regId, shadow: true }   # deny nothing, meter would-denies
//! defaults:
//!   NewRegistrationsPerIPAddress: { burst: 20, count: 20, period: 1s }
//! overrides:
//!   NewRegistrationsPerIPAddress:10.0.0.2: { burst: 20, count: 40, period: 1s }
//! ```
//!
//! The whole file is validated before anything is used, and every problem is reported with its line
//! (see [`LoadError`]); a file with any problem is refused whole. [`Limits`] holds the current set and
//! swaps a fully built new one in on reload, so readers never see a half-loaded set.

use std::collections::HashMap;
use std::fmt;
use std::sync::Arc;
use std::time::Duration;

use arc_swap::ArcSwap;
use serde::de::{MapAccess, Visitor};
use serde::{Deserialize, Deserializer, Serialize};
use serde_saphyr::Spanned;

use super::names::{check_name, IdFormat};
use crate::gcra::Rate;
use crate::shard::{Shards, MAX_SHARDS};

/// Env var naming the limits file (the CLI's `--config` takes precedence).
pub const LIMITS_FILE_VAR: &str = "TURNSTILE_LIMITS_FILE";

/// One problem in a limits file, at a 1-based line and column (0 when the parser gave none).
#[derive(Debug, Clone, PartialEq, Eq, Serialize)]
pub struct Problem {
    pub line: u64,
    pub column: u64,
    pub reason: String,
}

impl fmt::Display for Problem {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        write!(f, "line {}: {}", self.line, self.reason)
    }
}

/// Why a limits file was refused. Nothing from a refused file is ever used.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
pub enum LoadError {
    #[error("cannot read limits file {path}: {reason}")]
    Read { path: String, reason: String },
    /// Every problem found, in file order.
    #[error("limits file refused: {}", join(.0))]
    Invalid(Vec<Problem>),
}

impl LoadError {
    pub fn problems(&self) -> &[Problem] {
        match self {
            LoadError::Invalid(p) => p,
            LoadError::Read { .. } => &[],
        }
    }
}

fn join(problems: &[Problem]) -> String {
    problems
        .iter()
        .map(|p| p.to_string())
        .collect::<Vec<_>>()
        .join("; ")
}

/// A declared limit name: its number in bucket keys and the format of its ids.
#[derive(Debug, Clone, PartialEq, Eq, Serialize)]
pub struct NameDef {
    pub name: String,
    pub id: u16,
    pub format: IdFormat,
    /// `shadow: true`: a denial is logged and metered but the spend is allowed (decision 1000).
    pub shadow: bool,
}

/// A bucket: the limit name and a canonical id, keyed `{nameId}:{id}` in DynamoDB.
#[derive(Debug, Clone, PartialEq, Eq, Hash, Serialize)]
pub struct BucketKey {
    pub name: String,
    pub name_id: u16,
    pub id: String,
}

impl BucketKey {
    /// The interned key stored in the buckets table: `{nameId}:{id}`.
    pub fn key(&self) -> String {
        format!("{}:{}", self.name_id, self.id)
    }

    /// The human form used in the limits file: `Name:id`.
    pub fn display_name(&self) -> String {
        format!("{}:{}", self.name, self.id)
    }
}

impl fmt::Display for BucketKey {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(&self.key())
    }
}

/// Why a name/id pair names no bucket, or no limit applies to it.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
pub enum KeyError {
    #[error("unknown limit name {0:?}")]
    UnknownName(String),
    #[error("unknown limit number {0}")]
    UnknownNameId(u16),
    #[error("id {id:?} does not fit limit {name} ({format}): {reason}")]
    BadId {
        name: String,
        format: IdFormat,
        id: String,
        reason: String,
    },
    #[error("limit {0} has no default and no override for this id")]
    NoLimit(String),
    #[error("{0:?} is not a bucket key (expected nameId:id or Name:id)")]
    Malformed(String),
}

/// A validated, interned set of limits: the value [`Limits`] swaps atomically.
#[derive(Debug, Clone, Default)]
pub struct LimitSet {
    names: HashMap<String, NameDef>,
    by_number: HashMap<u16, String>,
    defaults: HashMap<u16, Rate>,
    /// Keyed by the interned bucket key `{nameId}:{canonicalId}`.
    overrides: HashMap<String, Rate>,
    /// `shards:` of the entries that declare it (absent: one item, decision 1500).
    default_shards: HashMap<u16, Shards>,
    override_shards: HashMap<String, Shards>,
}

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
    pub fn from_vars(vars: &crate::config::Vars) -> Result<Option<LimitSet>, LoadError> {
        match vars.get(LIMITS_FILE_VAR) {
            Some(path) => Self::from_path(&path).map(Some),
            None => Ok(None),
        }
    }

    pub fn name(&self, name: &str) -> Option<&NameDef> {
        self.names.get(name)
    }

    /// Declared names, ordered by number.
    pub fn names(&self) -> Vec<&NameDef> {
        let mut v: Vec<_> = self.names.values().collect();
        v.sort_by_key(|n| n.id);
        v
    }

    /// The bucket of `name` for a raw id from a request (validated and canonicalised).
    pub fn bucket(&self, name: &str, raw_id: &str) -> Result<BucketKey, KeyError> {
        let def = self
            .names
            .get(name)
            .ok_or_else(|| KeyError::UnknownName(name.to_string()))?;
        let id = def
            .format
            .canonical(raw_id)
            .map_err(|reason| KeyError::BadId {
                name: def.name.clone(),
                format: def.format,
                id: raw_id.to_string(),
                reason,
            })?;
        Ok(BucketKey {
            name: def.name.clone(),
            name_id: def.id,
            id,
        })
    }

    /// A bucket from `{nameId}:{id}` (as stored) or `Name:id` (as written in the file).
    pub fn parse_bucket(&self, s: &str) -> Result<BucketKey, KeyError> {
        let (head, id) = s
            .split_once(':')
            .ok_or_else(|| KeyError::Malformed(s.to_string()))?;
        let name = match head.parse::<u16>() {
            Ok(n) => self
                .by_number
                .get(&n)
                .ok_or(KeyError::UnknownNameId(n))?
                .clone(),
            Err(_) => head.to_string(),
        };
        self.bucket(&name, id)
    }

    /// The limit for a bucket: its override if there is one, else its name's default.
    pub fn rate(&self, bucket: &BucketKey) -> Result<Rate, KeyError> {
        self.overrides
            .get(&bucket.key())
            .or_else(|| self.defaults.get(&bucket.name_id))
            .copied()
            .ok_or_else(|| KeyError::NoLimit(bucket.name.clone()))
    }

    /// The `shards:` of the entry [`rate`](Self::rate) takes the limit from (absent: 1).
    pub fn shards(&self, bucket: &BucketKey) -> Shards {
        let key = bucket.key();
        if self.overrides.contains_key(&key) {
            return self.override_shards.get(&key).copied().unwrap_or_default();
        }
        self.default_shards
            .get(&bucket.name_id)
            .copied()
            .unwrap_or_default()
    }

    pub fn default_rate(&self, name: &str) -> Option<Rate> {
        let def = self.names.get(name)?;
        self.defaults.get(&def.id).copied()
    }

    pub fn override_count(&self) -> usize {
        self.overrides.len()
    }
}

/// The current limits, replaced whole on reload.
#[derive(Debug)]
pub struct Limits(ArcSwap<LimitSet>);

impl Limits {
    pub fn new(set: LimitSet) -> Self {
        Limits(ArcSwap::from_pointee(set))
    }

    /// A snapshot: stays consistent for as long as the caller holds it, whatever reloads happen.
    pub fn current(&self) -> Arc<LimitSet> {
        self.0.load_full()
    }

    /// Builds a new set from `src` and swaps it in; on any error the current set stays as it was.
    pub fn reload_yaml(&self, src: &str) -> Result<(), LoadError> {
        let set = LimitSet::from_yaml(src)?;
        self.0.store(Arc::new(set));
        Ok(())
    }

    pub fn reload_path(&self, path: &str) -> Result<(), LoadError> {
        let set = LimitSet::from_path(path)?;
        self.0.store(Arc::new(set));
        Ok(())
    }
}

fn first_line(s: &str) -> String {
    s.lines().next().unwrap_or("").to_string()
}

/// Parses a Go-style duration (`1s`, `180m`, `1h30m`, `500ms`, `250us`, `10ns`): one or more
/// number+unit pairs, units `ns`, `us`/`µs`, `ms`, `s`, `m`, `h`. Whole numbers only, so no float
/// rounding creeps into the emission interval.
pub fn parse_period(s: &str) -> Result<Duration, String> {
    let bad = || format!("{s:?} is not a period (e.g. 1s, 500ms, 180m, 1h30m)");
    let mut rest = s.trim();
    if rest.is_empty() {
        return Err(bad());
    }
    let mut total: u128 = 0;
    while !rest.is_empty() {
        let digits = rest.bytes().take_while(u8::is_ascii_digit).count();
        if digits == 0 {
            return Err(bad());
        }
        let n: u128 = rest[..digits].parse().map_err(|_| bad())?;
        rest = &rest[digits..];
        let unit_len = rest
            .char_indices()
            .find(|(_, c)| c.is_ascii_digit())
            .map_or(rest.len(), |(i, _)| i);
        let nanos_per: u128 = match &rest[..unit_len] {
            "ns" => 1,
            "us" | "µs" => 1_000,
            "ms" => 1_000_000,
            "s" => 1_000_000_000,
            "m" => 60_000_000_000,
            "h" => 3_600_000_000_000,
            _ => return Err(bad()),
        };
        rest = &rest[unit_len..];
        total = total
            .checked_add(n.checked_mul(nanos_per).ok_or_else(bad)?)
            .ok_or_else(bad)?;
    }
    let nanos = u64::try_from(total).map_err(|_| format!("{s:?} is too long a period"))?;
    Ok(Duration::from_nanos(nanos))
}

// ----- the file's shape, with positions -----

#[derive(Deserialize)]
#[serde(deny_unknown_fields)]
struct FileModel {
    #[serde(default)]
    names: Entries<NameSpec>,
    #[serde(default)]
    defaults: Entries<LimitSpec>,
    #[serde(default)]
    overrides: Entries<LimitSpec>,
}

#[derive(Deserialize)]
#[serde(deny_unknown_fields)]
struct NameSpec {
    id: Spanned<u16>,
    format: Spanned<String>,
    #[serde(default)]
    shadow: bool,
}

#[derive(Deserialize)]
#[serde(deny_unknown_fields)]
struct LimitSpec {
    burst: Spanned<u64>,
    count: Spanned<u64>,
    period: Spanned<String>,
    /// A number (1..=4096) or `auto` (decision 1500).
    #[serde(default)]
    shards: Option<Spanned<Shards>>,
}

/// A mapping kept as a list in file order, so every key keeps its position and duplicates (which a
/// map would silently collapse) can be reported.
struct Entries<T>(Vec<(Spanned<String>, T)>);

impl<T> Default for Entries<T> {
    fn default() -> Self {
        Entries(Vec::new())
    }
}

impl<'de, T: Deserialize<'de>> Deserialize<'de> for Entries<T> {
    fn deserialize<D: Deserializer<'de>>(d: D) -> Result<Self, D::Error> {
        struct V<T>(std::marker::PhantomData<T>);
        impl<'de, T: Deserialize<'de>> Visitor<'de> for V<T> {
            type Value = Entries<T>;
            fn expecting(&self, f: &mut fmt::Formatter) -> fmt::Result {
                f.write_str("a mapping")
            }
            fn visit_unit<E>(self) -> Result<Self::Value, E> {
                Ok(Entries(Vec::new()))
            }
            fn visit_map<A: MapAccess<'de>>(self, mut map: A) -> Result<Self::Value, A::Error> {
                let mut out = Vec::new();
                while let Some(k) = map.next_key::<Spanned<String>>()? {
                    out.push((k, map.next_value::<T>()?));
                }
                Ok(Entries(out))
            }
        }
        d.deserialize_any(V(std::marker::PhantomData))
    }
}

fn at<T>(s: &Spanned<T>, reason: String) -> Problem {
    Problem {
        line: s.referenced.line(),
        column: s.referenced.column(),
        reason,
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

impl<'a, T> IntoIterator for &'a Entries<T> {
    type Item = &'a (Spanned<String>, T);
    type IntoIter = std::slice::Iter<'a, (Spanned<String>, T)>;
    fn into_iter(self) -> Self::IntoIter {
        self.0.iter()
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    const GOOD: &str = "\
names:
  NewRegistrationsPerIPAddress: { id: 2, format: ipAddress }
  NewOrdersPerAccount: { id: 3, format: regId }
  NewRegistrationsPerIPv6Range: { id: 4, format: ipv6RangeCIDR }
  CertificatesPerFQDNSetPerAccount: { id: 8, format: 'regId:fqdnSet' }
defaults:
  NewRegistrationsPerIPAddress:
    burst: 20
    count: 20
    period: 1s
  NewOrdersPerAccount:
    burst: 300
    count: 300
    period: 180m
overrides:
  NewRegistrationsPerIPAddress:10.0.0.2:
    burst: 20
    count: 40
    period: 1s
  NewOrdersPerAccount:12345678:
    burst: 300
    count: 600
    period: 180m
  CertificatesPerFQDNSetPerAccount:12345678:example.org,example.com:
    burst: 5
    count: 5
    period: 1h
";

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
        assert_eq!(b.key(), "3:12345678", "seed 004's typo: the enum is 3");
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
        let src = include_str!("../../../config/limits.example.yaml");
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

    /// Issue 12, defect 5: a limit whose burst offset (period / count × burst) cannot be held by
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
}

/// Property tests (docs/testing.md): the limits file is outside input.
#[cfg(test)]
mod fuzz_tests {
    use super::*;
    use crate::fuzz;
    use proptest::prelude::*;

    const VALID: &str = "\
names:
  Ip: { id: 2, format: ipAddress }
  Acct: { id: 3, format: regId }
  Range: { id: 4, format: ipv6RangeCIDR }
  Set: { id: 8, format: 'regId:fqdnSet' }
  Dom: { id: 9, format: 'regId:domain' }
  Any: { id: 10, format: string }
defaults:
  Ip:
    burst: 20
    count: 20
    period: 1s
  Acct: { burst: 300, count: 300, period: 180m }
overrides:
  Ip:10.0.0.2: { burst: 20, count: 40, period: 1s }
  Acct:12345678: { burst: 300, count: 600, period: 3h }
  Set:1:example.org,example.com: { burst: 5, count: 5, period: 1h }
  Range:2001:db8::/48: { burst: 5, count: 5, period: 1h30m }
  Any:x: { burst: 1, count: 1, period: 500ms }
";

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
}
