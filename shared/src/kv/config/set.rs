//! A validated set of limits and the keys of their buckets.

use std::collections::HashMap;
use std::fmt;
use std::sync::Arc;

use arc_swap::ArcSwap;
use serde::Serialize;

use super::super::names::IdFormat;
use crate::gcra::Rate;
use crate::shard::Shards;

/// Env var naming the limits file (the CLI's `--config` takes precedence).
pub const LIMITS_FILE_VAR: &str = "TURNSTILE_LIMITS_FILE";

/// A problem at `s`'s place in the limits file.
pub(super) fn at<T>(s: &serde_saphyr::Spanned<T>, reason: String) -> Problem {
    Problem {
        line: s.referenced.line(),
        column: s.referenced.column(),
        reason,
    }
}

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

pub(super) fn join(problems: &[Problem]) -> String {
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

/// A bucket: the limit name and a canonical id, keyed `{nameId}:{id}` in DynamoDB, or
/// `{tenant}:{nameId}:{id}` when a tenant's limiter scopes it ([`Limiter::for_tenant`]).
///
/// [`Limiter::for_tenant`]: super::super::Limiter::for_tenant
#[derive(Debug, Clone, PartialEq, Eq, Hash, Serialize)]
pub struct BucketKey {
    pub name: String,
    pub name_id: u16,
    pub id: String,
    /// The tenant whose key space holds the bucket (tenant ids never contain `:`, so the first
    /// segment of a scoped key is always its tenant).
    #[serde(skip_serializing_if = "Option::is_none")]
    pub scope: Option<String>,
}

impl BucketKey {
    /// The key stored in the buckets table: `{nameId}:{id}`, after `{tenant}:` when scoped.
    pub fn key(&self) -> String {
        match &self.scope {
            Some(t) => format!("{t}:{}:{}", self.name_id, self.id),
            None => self.limit_key(),
        }
    }

    /// `{nameId}:{id}`: how the limits file's overrides are keyed, whatever the scope.
    pub fn limit_key(&self) -> String {
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
    pub(super) names: HashMap<String, NameDef>,
    pub(super) by_number: HashMap<u16, String>,
    pub(super) defaults: HashMap<u16, Rate>,
    /// Keyed by the interned bucket key `{nameId}:{canonicalId}`.
    pub(super) overrides: HashMap<String, Rate>,
    /// `shards:` of the entries that declare it (absent: one item, decision 1500).
    pub(super) default_shards: HashMap<u16, Shards>,
    pub(super) override_shards: HashMap<String, Shards>,
    /// Overrides declared `global:` (decision 4200), keyed as `overrides`.
    pub(super) globals: HashMap<String, crate::region::Declared>,
}

impl LimitSet {
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
            scope: None,
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
            .get(&bucket.limit_key())
            .or_else(|| self.defaults.get(&bucket.name_id))
            .copied()
            .ok_or_else(|| KeyError::NoLimit(bucket.name.clone()))
    }

    /// The `shards:` of the entry [`rate`](Self::rate) takes the limit from (absent: 1).
    pub fn shards(&self, bucket: &BucketKey) -> Shards {
        let key = bucket.limit_key();
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

    /// The global limit `bucket` is, if its override declares one.
    pub fn global(&self, bucket: &BucketKey) -> Option<&crate::region::Declared> {
        self.globals.get(&bucket.limit_key())
    }

    /// Every global limit the file declares, by bucket key.
    /// This region's allotments of the global limits declared here (none held until refreshed).
    pub fn allotments(
        &self,
        region: &str,
        refresh: std::time::Duration,
    ) -> crate::region::Allotments {
        crate::region::Allotments::for_declared(region, refresh, self.global_limits())
    }

    pub fn global_limits(&self) -> Vec<crate::region::Declared> {
        let mut v: Vec<_> = self.globals.values().cloned().collect();
        v.sort_by(|a, b| a.bucket.cmp(&b.bucket));
        v
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
