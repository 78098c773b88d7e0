//! The global limits a ledger holds, declared on the ledger itself: one item per limit in the
//! partition [`PARTITION`], written once when the limit's regions are first given their
//! allotments (`turnstile region init`). The scheduled rebalancer reads them with one `Query`,
//! so each region rebalances exactly the limits its ledger holds, with their period and mode.

use std::collections::HashMap;
use std::time::Duration;

use aws_sdk_dynamodb::types::AttributeValue;

use super::allotment::{Declared, Mode};
use super::error::RegionError;
use super::ledger::{attr as ledger_attr, Change, LedgerKey, LedgerStore, Write, Written};
use crate::dynamo::item::{n, s, Item};
use crate::gcra::Rate;

/// The partition of declarations. A bucket key starts with a name's number (`{nameId}:{id}`, or
/// a tenant's id, which has no `#`), so no limit's partition is this one.
pub const PARTITION: &str = "#limits";

pub mod attr {
    pub const TOTAL: &str = "total";
    pub const PERIOD_NS: &str = "periodNs";
    pub const REGIONS: &str = "regions";
    /// `exact` or `bounded`.
    pub const MODE: &str = "mode";
    pub const OVERDRAW_PERMILLE: &str = "overdrawPermille";
    pub const OVERDRAW_FOR_NS: &str = "overdrawForNs";
}

fn key(bucket: &str) -> LedgerKey {
    LedgerKey {
        limit: PARTITION.to_string(),
        item: bucket.to_string(),
    }
}

fn nanos(d: Duration) -> u64 {
    u64::try_from(d.as_nanos()).unwrap_or(u64::MAX)
}

/// The declaration's item.
pub fn to_item(d: &Declared) -> Item {
    let mut it = key(&d.bucket).to_item();
    it.insert(attr::TOTAL.into(), n(d.total));
    it.insert(attr::PERIOD_NS.into(), n(nanos(d.period)));
    it.insert(
        attr::REGIONS.into(),
        AttributeValue::L(d.regions.iter().map(s).collect()),
    );
    match d.mode {
        Mode::Exact => {
            it.insert(attr::MODE.into(), s("exact"));
        }
        Mode::Bounded {
            overdraw_permille,
            overdraw_for,
        } => {
            it.insert(attr::MODE.into(), s("bounded"));
            it.insert(attr::OVERDRAW_PERMILLE.into(), n(overdraw_permille));
            it.insert(attr::OVERDRAW_FOR_NS.into(), n(nanos(overdraw_for)));
        }
    }
    it
}

/// A declaration read back, checked as [`Declared::new`] checks one.
pub fn from_item(it: &Item) -> Result<Declared, RegionError> {
    let bucket = it
        .get(ledger_attr::ITEM)
        .and_then(|v| v.as_s().ok())
        .cloned()
        .unwrap_or_default();
    let bad = |reason: String| RegionError::Malformed {
        item: format!("{PARTITION}/{bucket}"),
        reason,
    };
    let number = |name: &str| {
        it.get(name)
            .and_then(|v| v.as_n().ok())
            .and_then(|x| x.parse::<u64>().ok())
            .ok_or_else(|| bad(format!("{name} missing or not a whole number")))
    };
    let total = number(attr::TOTAL)?;
    let period = Duration::from_nanos(number(attr::PERIOD_NS)?);
    let regions = it
        .get(attr::REGIONS)
        .and_then(|v| v.as_l().ok())
        .ok_or_else(|| bad(format!("{} missing", attr::REGIONS)))?
        .iter()
        .map(|r| {
            r.as_s()
                .cloned()
                .map_err(|_| bad("a region is not a string".into()))
        })
        .collect::<Result<Vec<String>, RegionError>>()?;
    let mode = match it
        .get(attr::MODE)
        .and_then(|v| v.as_s().ok())
        .map(String::as_str)
    {
        Some("exact") => Mode::Exact,
        Some("bounded") => Mode::Bounded {
            overdraw_permille: u32::try_from(number(attr::OVERDRAW_PERMILLE)?)
                .map_err(|_| bad("overdrawPermille too large".into()))?,
            overdraw_for: Duration::from_nanos(number(attr::OVERDRAW_FOR_NS)?),
        },
        other => return Err(bad(format!("mode {other:?} is neither exact nor bounded"))),
    };
    let rate = Rate::new(total, total, period).map_err(|e| bad(e.to_string()))?;
    Declared::new(&bucket, rate, regions, mode)
}

/// Declares `d` on the ledger. Idempotent: a declaration already there and equal is kept; one
/// that differs is refused (changing a limit's total moves no allotment, so it is not done by
/// declaring again). 1 `PutItem`.
pub async fn declare<S: LedgerStore>(store: &S, d: &Declared) -> Result<(), RegionError> {
    let w = Write {
        key: key(&d.bucket),
        change: Change::Put(to_item(d)),
        condition: "attribute_not_exists(#i)".into(),
        names: HashMap::from([("#i".to_string(), ledger_attr::ITEM.to_string())]),
        values: HashMap::new(),
    };
    match store.write(w).await? {
        Written::Applied | Written::Refused(None) => Ok(()),
        Written::Refused(Some(it)) if from_item(&it).ok().as_ref() == Some(d) => Ok(()),
        Written::Refused(Some(_)) => Err(RegionError::BadDeclaration {
            limit: d.bucket.clone(),
            reason: "declared already, with another total, period, regions or mode".into(),
        }),
    }
}

/// Every global limit the ledger declares, and the items that do not parse (each is reported
/// rather than stopping the others). 1 `Query` (strongly consistent).
pub async fn declared<S: LedgerStore>(
    store: &S,
) -> Result<(Vec<Declared>, Vec<RegionError>), RegionError> {
    let mut good = Vec::new();
    let mut bad = Vec::new();
    for it in store.items(PARTITION).await? {
        match from_item(&it) {
            Ok(d) => good.push(d),
            Err(e) => bad.push(e),
        }
    }
    Ok((good, bad))
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_declaration_reads_back_as_written() {
        let rate = Rate::new(300, 300, Duration::from_secs(60)).expect("rate");
        let regions = vec!["us-east-1".to_string(), "us-west-2".to_string()];
        for mode in [
            Mode::Exact,
            Mode::Bounded {
                overdraw_permille: 100,
                overdraw_for: Duration::from_secs(30),
            },
        ] {
            let d = Declared::new("1:tenant-a", rate, regions.clone(), mode).expect("declared");
            assert_eq!(from_item(&to_item(&d)).expect("parses"), d);
        }
    }

    #[test]
    fn a_malformed_declaration_is_an_error_naming_it() {
        let rate = Rate::new(30, 30, Duration::from_secs(6)).expect("rate");
        let d = Declared::new("1:t", rate, vec!["a".into()], Mode::Exact).expect("declared");
        let mut it = to_item(&d);
        it.insert(attr::MODE.into(), s("loose"));
        let e = from_item(&it).expect_err("unknown mode");
        assert!(e.to_string().contains("#limits/1:t"), "{e}");
        it.remove(attr::TOTAL);
        assert!(from_item(&it).is_err());
    }
}
