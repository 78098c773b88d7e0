//! How results are printed: `--output json` (the default, pretty JSON) or `--output table`, the same
//! document for a person: a list of objects as one row each, an object as `field  value` lines.
//! Identifier columns (`...Id`) come first, the others in name order. Nested objects become dotted columns (`limits.tenantConnections`); lists of plain values are
//! joined with ", "; anything deeper is compact JSON in its cell.

use std::sync::OnceLock;

use serde_json::{Map, Value};

/// `--output`: what stdout carries.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Default, clap::ValueEnum)]
pub enum Format {
    /// Pretty JSON (camelCase keys; docs/cli.md, "JSON").
    #[default]
    Json,
    /// Aligned columns for reading.
    Table,
}

static FORMAT: OnceLock<Format> = OnceLock::new();

/// Sets the format for the whole run (the first call wins).
pub fn set(format: Format) {
    let _ = FORMAT.set(format);
}

pub fn format() -> Format {
    FORMAT.get().copied().unwrap_or_default()
}

/// A value as one cell: strings bare, null as `-`, lists of plain values joined.
fn cell(v: &Value) -> String {
    match v {
        Value::Null => "-".into(),
        Value::String(s) => s.clone(),
        Value::Array(items) if items.iter().all(|i| !i.is_object() && !i.is_array()) => {
            if items.is_empty() {
                "-".into()
            } else {
                items.iter().map(cell).collect::<Vec<_>>().join(", ")
            }
        }
        other => other.to_string(),
    }
}

/// An object's fields, nested objects flattened into dotted names.
fn flatten(prefix: &str, m: &Map<String, Value>, out: &mut Vec<(String, Value)>) {
    for (k, v) in m {
        let name = if prefix.is_empty() {
            k.clone()
        } else {
            format!("{prefix}.{k}")
        };
        match v {
            Value::Object(inner) if !inner.is_empty() => flatten(&name, inner, out),
            other => out.push((name, other.clone())),
        }
    }
}

/// Rows of cells under a header, each column as wide as its widest cell.
fn columns(header: &[String], rows: &[Vec<String>]) -> String {
    let widths: Vec<usize> = (0..header.len())
        .map(|i| {
            rows.iter()
                .map(|r| r[i].chars().count())
                .chain([header[i].chars().count()])
                .max()
                .unwrap_or(0)
        })
        .collect();
    let line = |cells: &[String]| {
        cells
            .iter()
            .zip(&widths)
            .map(|(c, w)| format!("{c:<w$}"))
            .collect::<Vec<_>>()
            .join("  ")
            .trim_end()
            .to_string()
    };
    let mut out = vec![line(header)];
    out.push(line(
        &widths.iter().map(|w| "-".repeat(*w)).collect::<Vec<_>>(),
    ));
    out.extend(rows.iter().map(|r| line(r)));
    out.join("\n")
}

/// The table for `value`.
pub fn table(value: &Value) -> String {
    match value {
        Value::Array(items) if items.is_empty() => "(none)".into(),
        Value::Array(items) if items.iter().all(Value::is_object) => {
            let flat: Vec<Vec<(String, Value)>> = items
                .iter()
                .filter_map(Value::as_object)
                .map(|m| {
                    let mut f = Vec::new();
                    flatten("", m, &mut f);
                    f
                })
                .collect();
            let mut header: Vec<String> = Vec::new();
            for row in &flat {
                for (k, _) in row {
                    if !header.contains(k) {
                        header.push(k.clone());
                    }
                }
            }
            // Identifiers first (`tenantId`, `reservationId`): they name the row.
            let is_id = |h: &String| h.ends_with("Id") && !h.contains('.');
            header.sort_by_key(|h| !is_id(h));
            let rows: Vec<Vec<String>> = flat
                .iter()
                .map(|row| {
                    header
                        .iter()
                        .map(|h| {
                            row.iter()
                                .find(|(k, _)| k == h)
                                .map_or("-".into(), |(_, v)| cell(v))
                        })
                        .collect()
                })
                .collect();
            columns(&header, &rows)
        }
        Value::Array(items) => items.iter().map(cell).collect::<Vec<_>>().join("\n"),
        Value::Object(m) => {
            let mut f = Vec::new();
            flatten("", m, &mut f);
            let rows: Vec<Vec<String>> = f.iter().map(|(k, v)| vec![k.clone(), cell(v)]).collect();
            columns(&["field".into(), "value".into()], &rows)
        }
        other => cell(other),
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use serde_json::json;

    #[test]
    fn lists_are_rows_and_objects_are_fields() {
        let list = json!([
            {"tenantId": "acme", "limits": {"tenantConnections": 10}},
            {"tenantId": "globex", "limits": {"tenantConnections": 1000}, "note": null}
        ]);
        assert_eq!(
            table(&list),
            "tenantId  limits.tenantConnections  note\n\
             --------  ------------------------  ----\n\
             acme      10                        -\n\
             globex    1000                      -"
        );
        let one = json!({"granted": false, "retryAfter": 1.5, "ids": ["a", "b"]});
        assert_eq!(
            table(&one),
            "field       value\n----------  -----\ngranted     false\nids         a, b\nretryAfter  1.5"
        );
        assert_eq!(table(&json!([])), "(none)");
    }
}
