//! Loading a service's limits: rate-limiter-py's JSON file
//! (`{"limits":[{"accountId","resourceName","limit","windowSec"}]}`) diffed against the rows the
//! `serviceName` index holds for that service. New and changed rows are put, rows the file no
//! longer lists are deleted; a dry run only computes the diff.

use std::collections::BTreeMap;

use serde::Serialize;
use serde_json::Value;

use super::{LimitRow, LimitStore};
use crate::error::{Error, Result};

/// One entry of a limits file, validated.
#[derive(Debug, Clone, PartialEq, Eq, Serialize)]
pub struct LimitSpec {
    pub resource_name: String,
    pub account_id: String,
    pub limit: i64,
    pub window_sec: i64,
}

/// A changed row: what the table held and what the file says.
#[derive(Debug, Clone, PartialEq, Eq, Serialize)]
pub struct Change {
    pub before: LimitRow,
    pub after: LimitRow,
}

/// What loading a file does (or, on a dry run, would do).
#[derive(Debug, Clone, PartialEq, Eq, Serialize)]
pub struct LimitDiff {
    pub service: String,
    pub added: Vec<LimitRow>,
    pub changed: Vec<Change>,
    pub removed: Vec<LimitRow>,
    pub unchanged: usize,
    /// False on a dry run.
    pub applied: bool,
}

impl LimitDiff {
    pub fn is_empty(&self) -> bool {
        self.added.is_empty() && self.changed.is_empty() && self.removed.is_empty()
    }
}

fn bad(what: String) -> Error {
    Error::Other(format!("limits file: {what}"))
}

/// Parses and validates a limits file. Errors name the entry and field (`limits[2].windowSec`).
/// The file is refused whole if any entry is bad or two entries share (resourceName, accountId).
pub fn parse_file(text: &str) -> Result<Vec<LimitSpec>> {
    let doc: Value = serde_json::from_str(text).map_err(|e| bad(format!("not valid JSON: {e}")))?;
    let list = doc
        .get("limits")
        .ok_or_else(|| bad("the top-level \"limits\" array is missing".into()))?
        .as_array()
        .ok_or_else(|| bad("\"limits\" must be an array".into()))?;
    let mut seen = BTreeMap::new();
    let mut out = Vec::with_capacity(list.len());
    for (i, entry) in list.iter().enumerate() {
        let field = |name: &str| -> Result<&Value> {
            entry
                .get(name)
                .ok_or_else(|| bad(format!("limits[{i}].{name} is missing")))
        };
        let string = |name: &str| -> Result<String> {
            match field(name)?.as_str() {
                Some(v) if !v.trim().is_empty() => Ok(v.to_string()),
                _ => Err(bad(format!(
                    "limits[{i}].{name} must be a non-empty string"
                ))),
            }
        };
        let int = |name: &str| -> Result<i64> {
            let v = field(name)?;
            v.as_i64()
                .or_else(|| v.as_f64().filter(|f| f.fract() == 0.0).map(|f| f as i64))
                .ok_or_else(|| {
                    bad(format!(
                        "limits[{i}].{name} must be a whole number, got {v}"
                    ))
                })
        };
        let spec = LimitSpec {
            resource_name: string("resourceName")?,
            account_id: string("accountId")?,
            limit: int("limit")?,
            window_sec: int("windowSec")?,
        };
        if spec.window_sec <= 0 {
            return Err(bad(format!(
                "limits[{i}].windowSec must be positive, got {}",
                spec.window_sec
            )));
        }
        let key = (spec.resource_name.clone(), spec.account_id.clone());
        if let Some(first) = seen.insert(key, i) {
            return Err(bad(format!(
                "limits[{i}] repeats limits[{first}] (resourceName {:?}, accountId {:?})",
                spec.resource_name, spec.account_id
            )));
        }
        out.push(spec);
    }
    Ok(out)
}

/// The diff between the service's current rows and the file, without touching the table.
pub fn diff(service: &str, desired: &[LimitSpec], existing: &[LimitRow]) -> LimitDiff {
    let mut current: BTreeMap<(&str, &str), &LimitRow> = existing
        .iter()
        .map(|r| ((r.resource_name.as_str(), r.account_id.as_str()), r))
        .collect();
    let mut d = LimitDiff {
        service: service.to_string(),
        added: vec![],
        changed: vec![],
        removed: vec![],
        unchanged: 0,
        applied: false,
    };
    for spec in desired {
        let after = LimitRow {
            resource_name: spec.resource_name.clone(),
            account_id: spec.account_id.clone(),
            limit: spec.limit,
            window_sec: Some(spec.window_sec),
            service_name: Some(service.to_string()),
        };
        match current.remove(&(spec.resource_name.as_str(), spec.account_id.as_str())) {
            None => d.added.push(after),
            Some(before) if *before == after => d.unchanged += 1,
            Some(before) => d.changed.push(Change {
                before: before.clone(),
                after,
            }),
        }
    }
    d.removed = current.into_values().cloned().collect();
    d
}

/// Diffs the file against the service's rows (Query on the `serviceName` index, one call per page)
/// and, unless `dry_run`, applies it: one PutItem per added or changed row, one DeleteItem per
/// removed row. Rows of other services are never touched.
pub async fn load(
    store: &LimitStore,
    service: &str,
    desired: &[LimitSpec],
    dry_run: bool,
) -> Result<LimitDiff> {
    if service.trim().is_empty() {
        return Err(bad("the service name is empty".into()));
    }
    let existing = store.list(Some(service)).await?;
    let mut d = diff(service, desired, &existing);
    if dry_run {
        return Ok(d);
    }
    for row in d.added.iter().chain(d.changed.iter().map(|c| &c.after)) {
        store.put(row).await?;
    }
    for row in &d.removed {
        store.delete(&row.resource_name, &row.account_id).await?;
    }
    d.applied = true;
    Ok(d)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_bad_file_names_the_entry_and_field() {
        let err = |t: &str| parse_file(t).unwrap_err().to_string();
        assert!(err("{}").contains("\"limits\" array is missing"));
        assert!(
            err(r#"{"limits":[{"accountId":"a","resourceName":"r","limit":1}]}"#)
                .contains("limits[0].windowSec is missing")
        );
        assert!(err(
            r#"{"limits":[{"accountId":"a","resourceName":"r","limit":"x","windowSec":1}]}"#
        )
        .contains("limits[0].limit must be a whole number"));
        assert!(err(r#"{"limits":[
            {"accountId":"a","resourceName":"r","limit":1,"windowSec":1},
            {"accountId":"a","resourceName":"r","limit":2,"windowSec":1}]}"#)
        .contains("limits[1] repeats limits[0]"));
        assert!(err(
            r#"{"limits":[{"accountId":"a","resourceName":"r","limit":1,"windowSec":0}]}"#
        )
        .contains("windowSec must be positive"));
    }

    #[test]
    fn the_diff_sorts_rows_into_added_changed_removed() {
        let desired = parse_file(
            r#"{"limits":[
            {"accountId":"a","resourceName":"r","limit":5,"windowSec":60},
            {"accountId":"b","resourceName":"r","limit":1,"windowSec":60},
            {"accountId":"c","resourceName":"r","limit":2,"windowSec":60}]}"#,
        )
        .unwrap();
        let row = |acct: &str, limit| LimitRow {
            resource_name: "r".into(),
            account_id: acct.into(),
            limit,
            window_sec: Some(60),
            service_name: Some("svc".into()),
        };
        let d = diff("svc", &desired, &[row("a", 5), row("b", 9), row("z", 1)]);
        assert_eq!(d.unchanged, 1);
        assert_eq!(d.added, vec![row("c", 2)]);
        assert_eq!(d.changed.len(), 1);
        assert_eq!(d.changed[0].after, row("b", 1));
        assert_eq!(d.removed, vec![row("z", 1)]);
    }
}
