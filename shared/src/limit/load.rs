//! Loading a service's limits: rate-limiter-py's JSON file
//! (`{"limits":[{"accountId","resourceName","limit","windowSec"}]}`) diffed against the rows the
//! `serviceName` index holds for that service. New and changed rows are put, rows the file no
//! longer lists are deleted; a dry run only computes the diff.
//!
//! A row belongs to the service named in its `serviceName`. Loading never re-owns another service's
//! row (nor a row without a service): the file's rows that exist under another owner are
//! [`Conflict`]s, and the load is refused whole unless [`LoadOptions::take_over`] is set. Every
//! write is conditional on the owner seen, so a concurrent loader cannot lose its rows either.

use std::collections::BTreeMap;

use serde::Serialize;
use serde_json::Value;

use super::{LimitRow, LimitStore, MAX_CAPACITY};
use crate::error::{Error, Result};

/// One entry of a limits file, validated.
#[derive(Debug, Clone, PartialEq, Eq, Serialize)]
#[serde(rename_all = "camelCase")]
pub struct LimitSpec {
    pub resource_name: String,
    pub account_id: String,
    pub limit: i64,
    pub window_sec: i64,
    /// The entry's optional `kind`; only checked at load (rows do not store it).
    #[serde(skip_serializing_if = "Option::is_none")]
    pub kind: Option<LimitKind>,
}

/// Which limiter an entry is for. rate-limiter-py's files do not say, and one limit table serves
/// both, so an entry without a kind must fit both limiters' ceilings.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize)]
#[serde(rename_all = "camelCase")]
pub enum LimitKind {
    /// A token bucket (`limit` tokens per `windowSec`): no ceiling.
    Fungible,
    /// Reservations of unique resources: at most [`MAX_CAPACITY`] live at once.
    NonFungible,
}

/// A changed row: what the table held and what the file says.
#[derive(Debug, Clone, PartialEq, Eq, Serialize)]
#[serde(rename_all = "camelCase")]
pub struct Change {
    pub before: LimitRow,
    pub after: LimitRow,
}

/// A row this load would touch that another service (or no service) owns.
#[derive(Debug, Clone, PartialEq, Eq, Serialize)]
#[serde(rename_all = "camelCase")]
pub struct Conflict {
    pub resource_name: String,
    pub account_id: String,
    /// The row's owner: another service, or `None` for a row without a service name.
    pub owner: Option<String>,
    /// The row as the table holds it.
    pub current: LimitRow,
    /// What the file asks for; `None` when this service meant to delete a row that another
    /// service took over meanwhile (left alone).
    pub wanted: Option<LimitRow>,
}

impl Conflict {
    fn new(current: LimitRow, wanted: Option<LimitRow>) -> Self {
        Conflict {
            resource_name: current.resource_name.clone(),
            account_id: current.account_id.clone(),
            owner: current.service_name.clone(),
            current,
            wanted,
        }
    }
}

/// How to load.
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq)]
pub struct LoadOptions {
    /// Compute and report the diff (conflicts included) without writing.
    pub dry_run: bool,
    /// Re-own the file's rows that another service owns (each write conditioned on the owner
    /// reported). Without it such rows refuse the whole load.
    pub take_over: bool,
}

/// What loading a file does (or, on a dry run, would do).
#[derive(Debug, Clone, PartialEq, Eq, Serialize)]
#[serde(rename_all = "camelCase")]
pub struct LimitDiff {
    pub service: String,
    pub added: Vec<LimitRow>,
    pub changed: Vec<Change>,
    pub removed: Vec<LimitRow>,
    pub unchanged: usize,
    /// Rows owned by others that were not (or, on a dry run, would not be) written. Non-empty
    /// means the load was refused, or lost a race for these rows.
    pub conflicts: Vec<Conflict>,
    /// With [`LoadOptions::take_over`]: rows re-owned from another service (would be, on a dry run).
    pub taken_over: Vec<Conflict>,
    /// False on a dry run and on a refused load.
    pub applied: bool,
}

impl LimitDiff {
    /// No change yet for `service`: where [`diff`] starts (and what a caller builds on).
    pub fn new(service: &str) -> Self {
        LimitDiff {
            service: service.to_string(),
            added: vec![],
            changed: vec![],
            removed: vec![],
            unchanged: 0,
            conflicts: vec![],
            taken_over: vec![],
            applied: false,
        }
    }

    pub fn is_empty(&self) -> bool {
        self.added.is_empty()
            && self.changed.is_empty()
            && self.removed.is_empty()
            && self.conflicts.is_empty()
            && self.taken_over.is_empty()
    }
}

fn bad(what: String) -> Error {
    Error::LimitsFile(what)
}

/// The line each entry of `limits` starts on (empty if the text is not a limits file: the
/// validation below then says why).
fn entry_lines(text: &str) -> Vec<usize> {
    #[derive(serde::Deserialize)]
    struct Doc<'a> {
        #[serde(borrow)]
        limits: Vec<&'a serde_json::value::RawValue>,
    }
    let Ok(doc) = serde_json::from_str::<Doc>(text) else {
        return Vec::new();
    };
    doc.limits
        .iter()
        .map(|raw| {
            let at = (raw.get().as_ptr() as usize).saturating_sub(text.as_ptr() as usize);
            text[..at.min(text.len())].matches('\n').count() + 1
        })
        .collect()
}

/// Parses and validates a limits file. Errors name the entry, its line and the field
/// (`limits[2] (line 9).windowSec`). The file is refused whole if any entry is bad, two entries
/// share (resourceName, accountId), or an entry not marked `"kind": "fungible"` is above the
/// non-fungible ceiling ([`MAX_CAPACITY`]).
pub fn parse_file(text: &str) -> Result<Vec<LimitSpec>> {
    let doc: Value = serde_json::from_str(text).map_err(|e| bad(format!("not valid JSON: {e}")))?;
    let list = doc
        .get("limits")
        .ok_or_else(|| bad("the top-level \"limits\" array is missing".into()))?
        .as_array()
        .ok_or_else(|| bad("\"limits\" must be an array".into()))?;
    let lines = entry_lines(text);
    let mut seen = BTreeMap::new();
    let mut out = Vec::with_capacity(list.len());
    for (i, entry) in list.iter().enumerate() {
        let at = match lines.get(i) {
            Some(line) => format!("limits[{i}] (line {line})"),
            None => format!("limits[{i}]"),
        };
        let field = |name: &str| -> Result<&Value> {
            entry
                .get(name)
                .ok_or_else(|| bad(format!("{at}.{name} is missing")))
        };
        let string = |name: &str| -> Result<String> {
            match field(name)?.as_str() {
                Some(v) if !v.trim().is_empty() => Ok(v.to_string()),
                _ => Err(bad(format!("{at}.{name} must be a non-empty string"))),
            }
        };
        let int = |name: &str| -> Result<i64> {
            let v = field(name)?;
            v.as_i64()
                .or_else(|| v.as_f64().filter(|f| f.fract() == 0.0).map(|f| f as i64))
                .ok_or_else(|| bad(format!("{at}.{name} must be a whole number, got {v}")))
        };
        let kind = match entry.get("kind") {
            None => None,
            Some(Value::String(k)) if k == "fungible" => Some(LimitKind::Fungible),
            Some(Value::String(k)) if k == "nonFungible" => Some(LimitKind::NonFungible),
            Some(other) => {
                return Err(bad(format!(
                    "{at}.kind must be \"fungible\" or \"nonFungible\", got {other}"
                )))
            }
        };
        let spec = LimitSpec {
            resource_name: string("resourceName")?,
            account_id: string("accountId")?,
            limit: int("limit")?,
            window_sec: int("windowSec")?,
            kind,
        };
        if spec.window_sec <= 0 {
            return Err(bad(format!(
                "{at}.windowSec must be positive, got {}",
                spec.window_sec
            )));
        }
        if kind != Some(LimitKind::Fungible) && spec.limit > MAX_CAPACITY as i64 {
            let hint = match kind {
                Some(_) => String::new(),
                None => format!(
                    "; if {:?} is a token bucket, mark the entry \"kind\": \"fungible\"",
                    spec.resource_name
                ),
            };
            return Err(bad(format!(
                "{at}.limit {} is above the non-fungible ceiling of {MAX_CAPACITY} live \
                 reservations per coordinate{hint}",
                spec.limit
            )));
        }
        let key = (spec.resource_name.clone(), spec.account_id.clone());
        if let Some(first) = seen.insert(key, i) {
            return Err(bad(format!(
                "{at} repeats limits[{first}] (resourceName {:?}, accountId {:?})",
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
    let mut d = LimitDiff::new(service);
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

/// Sorts the `added` rows by what a consistent read found under their keys (`found`): a row
/// that turns out to be this service's (the index lagged) becomes changed or unchanged; a row of
/// another owner becomes a conflict, or with `take_over` a row to take over.
pub fn resolve_added(d: &mut LimitDiff, found: &[LimitRow], take_over: bool) {
    let found: BTreeMap<(&str, &str), &LimitRow> = found
        .iter()
        .map(|r| ((r.resource_name.as_str(), r.account_id.as_str()), r))
        .collect();
    for after in std::mem::take(&mut d.added) {
        match found.get(&(after.resource_name.as_str(), after.account_id.as_str())) {
            None => d.added.push(after),
            Some(&current) if current.service_name.as_deref() == Some(d.service.as_str()) => {
                if *current == after {
                    d.unchanged += 1;
                } else {
                    d.changed.push(Change {
                        before: current.clone(),
                        after,
                    });
                }
            }
            Some(&current) => {
                let c = Conflict::new(current.clone(), Some(after));
                if take_over {
                    d.taken_over.push(c);
                } else {
                    d.conflicts.push(c);
                }
            }
        }
    }
}

/// Diffs the file against the service's rows (Query on the `serviceName` index, one call per page),
/// reads the rows the file adds (strongly consistent BatchGetItem, one per 100) to find rows other
/// services own, and unless `dry_run` applies it: one conditional PutItem per added, changed or
/// taken-over row, one conditional DeleteItem per removed row.
///
/// Rows owned by another service are never written unless `take_over`: their presence refuses the
/// load before anything is written (`conflicts` non-empty, `applied` false). A row re-owned by
/// another loader between the read and the write is left alone and reported in `conflicts`.
pub async fn load(
    store: &LimitStore,
    service: &str,
    desired: &[LimitSpec],
    opts: LoadOptions,
) -> Result<LimitDiff> {
    if service.trim().is_empty() {
        return Err(bad("the service name is empty".into()));
    }
    let existing = store.list(Some(service)).await?;
    let mut d = diff(service, desired, &existing);
    if !d.added.is_empty() {
        let keys: Vec<(String, String)> = d
            .added
            .iter()
            .map(|r| (r.resource_name.clone(), r.account_id.clone()))
            .collect();
        let found = store.get_many(&keys).await?;
        resolve_added(&mut d, &found, opts.take_over);
    }
    if opts.dry_run || !d.conflicts.is_empty() {
        return Ok(d);
    }
    let mut lost = Vec::new();
    let mut written = |current: Option<LimitRow>, wanted: &LimitRow| match current {
        None => true,
        Some(current) => {
            lost.push(Conflict::new(current, Some(wanted.clone())));
            false
        }
    };
    let mut added = Vec::new();
    for row in std::mem::take(&mut d.added) {
        if written(store.put_owned(&row, None).await?, &row) {
            added.push(row);
        }
    }
    let mut changed = Vec::new();
    for c in std::mem::take(&mut d.changed) {
        if written(store.put_owned(&c.after, None).await?, &c.after) {
            changed.push(c);
        }
    }
    let mut taken_over = Vec::new();
    for c in std::mem::take(&mut d.taken_over) {
        let Some(after) = c.wanted.clone() else {
            continue;
        };
        let from = Some(c.owner.as_deref());
        if written(store.put_owned(&after, from).await?, &after) {
            taken_over.push(c);
        }
    }
    let mut removed = Vec::new();
    for row in std::mem::take(&mut d.removed) {
        match store
            .delete_owned(&row.resource_name, &row.account_id, service)
            .await?
        {
            None => removed.push(row),
            Some(current) => lost.push(Conflict::new(current, None)),
        }
    }
    (d.added, d.changed, d.taken_over, d.removed) = (added, changed, taken_over, removed);
    d.conflicts = lost;
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
                .contains("limits[0] (line 1).windowSec is missing")
        );
        assert!(err(
            r#"{"limits":[{"accountId":"a","resourceName":"r","limit":"x","windowSec":1}]}"#
        )
        .contains("limits[0] (line 1).limit must be a whole number"));
        assert!(err(r#"{"limits":[
            {"accountId":"a","resourceName":"r","limit":1,"windowSec":1},
            {"accountId":"a","resourceName":"r","limit":2,"windowSec":1}]}"#)
        .contains("limits[1] (line 3) repeats limits[0]"));
        assert!(err(
            r#"{"limits":[{"accountId":"a","resourceName":"r","limit":1,"windowSec":0}]}"#
        )
        .contains("windowSec must be positive"));
        assert!(err(
            r#"{"limits":[{"accountId":"a","resourceName":"r","limit":1,"windowSec":1,"kind":"x"}]}"#
        )
        .contains("kind must be \"fungible\" or \"nonFungible\""));
    }

    #[test]
    fn a_limit_above_the_non_fungible_ceiling_is_refused_unless_fungible() {
        let file = |limit: u64, kind: &str| {
            format!(
                "{{\"limits\": [\n  {{\"accountId\": \"a\", \"resourceName\": \"ok\", \"limit\": 5, \"windowSec\": 60}},\n  \
                 {{\"accountId\": \"a\", \"resourceName\": \"emr\", \"limit\": {limit}, \"windowSec\": 60{kind}}}\n]}}"
            )
        };
        let at_ceiling = parse_file(&file(MAX_CAPACITY, "")).unwrap();
        assert_eq!(at_ceiling[1].limit, MAX_CAPACITY as i64);
        let err = parse_file(&file(MAX_CAPACITY + 1, ""))
            .unwrap_err()
            .to_string();
        assert!(err.contains("limits[1] (line 3).limit 100001"), "{err}");
        assert!(err.contains("ceiling of 100000"), "{err}");
        assert!(
            err.contains("\"kind\": \"fungible\""),
            "names the way out: {err}"
        );
        let err = parse_file(&file(MAX_CAPACITY + 1, ", \"kind\": \"nonFungible\""))
            .unwrap_err()
            .to_string();
        assert!(
            err.contains("ceiling of 100000") && !err.contains("mark the entry"),
            "{err}"
        );
        let fungible = parse_file(&file(5_000_000, ", \"kind\": \"fungible\"")).unwrap();
        assert_eq!(fungible[1].kind, Some(LimitKind::Fungible));
        assert_eq!(fungible[1].limit, 5_000_000);
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

    #[test]
    fn added_rows_of_other_owners_are_conflicts_unless_taken_over() {
        let desired = parse_file(
            r#"{"limits":[
            {"accountId":"new","resourceName":"r","limit":1,"windowSec":60},
            {"accountId":"billing","resourceName":"r","limit":2,"windowSec":60},
            {"accountId":"nobody","resourceName":"r","limit":3,"windowSec":60},
            {"accountId":"lagged","resourceName":"r","limit":4,"windowSec":60}]}"#,
        )
        .unwrap();
        let row = |acct: &str, limit, svc: Option<&str>| LimitRow {
            resource_name: "r".into(),
            account_id: acct.into(),
            limit,
            window_sec: Some(60),
            service_name: svc.map(String::from),
        };
        // The index does not yet show "lagged" as svc's; the consistent read does.
        let found = [
            row("billing", 9, Some("billing")),
            row("nobody", 9, None),
            row("lagged", 4, Some("svc")),
        ];
        let mut d = diff("svc", &desired, &[]);
        assert_eq!(d.added.len(), 4);
        resolve_added(&mut d, &found, false);
        assert_eq!(d.added, vec![row("new", 1, Some("svc"))]);
        assert_eq!(d.unchanged, 1);
        let owners: Vec<_> = d
            .conflicts
            .iter()
            .map(|c| (c.account_id.as_str(), c.owner.as_deref(), c.current.limit))
            .collect();
        assert_eq!(
            owners,
            [("billing", Some("billing"), 9), ("nobody", None, 9)]
        );
        assert_eq!(d.conflicts[0].wanted, Some(row("billing", 2, Some("svc"))));
        assert!(d.taken_over.is_empty());

        let mut d = diff("svc", &desired, &[]);
        resolve_added(&mut d, &found, true);
        assert!(d.conflicts.is_empty());
        assert_eq!(d.taken_over.len(), 2);
    }
}
