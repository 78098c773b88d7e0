//! The limits file as parsed, before validation: every key and value keeps its position, so each
//! problem [`super::build`] finds can name its line; and the Go-style period syntax.

use std::fmt;
use std::time::Duration;

use serde::de::{MapAccess, Visitor};
use serde::{Deserialize, Deserializer};
use serde_saphyr::Spanned;

use crate::shard::Shards;

pub(super) fn first_line(s: &str) -> String {
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

#[derive(Deserialize)]
#[serde(deny_unknown_fields)]
pub(super) struct FileModel {
    #[serde(default)]
    pub(super) names: Entries<NameSpec>,
    #[serde(default)]
    pub(super) defaults: Entries<LimitSpec>,
    #[serde(default)]
    pub(super) overrides: Entries<LimitSpec>,
}

#[derive(Deserialize)]
#[serde(deny_unknown_fields)]
pub(super) struct NameSpec {
    pub(super) id: Spanned<u16>,
    pub(super) format: Spanned<String>,
    #[serde(default)]
    pub(super) shadow: bool,
}

#[derive(Deserialize)]
#[serde(deny_unknown_fields)]
pub(super) struct LimitSpec {
    pub(super) burst: Spanned<u64>,
    pub(super) count: Spanned<u64>,
    pub(super) period: Spanned<String>,
    /// A number (1..=4096) or `auto` (decision 1500).
    #[serde(default)]
    pub(super) shards: Option<Spanned<Shards>>,
    /// One limit across regions (decision 4200): overrides only.
    #[serde(default)]
    pub(super) global: Option<Spanned<GlobalSpec>>,
}

/// `global: { regions: [...], bounded: { overdraw: 0.1, for: 30s } }`: the override's `count` is
/// the total `L` shared by the regions listed; `bounded` (optional) lets a region that cannot
/// refresh overdraw that fraction of `L` for that long.
#[derive(Deserialize)]
#[serde(deny_unknown_fields)]
pub(super) struct GlobalSpec {
    pub(super) regions: Vec<Spanned<String>>,
    #[serde(default)]
    pub(super) bounded: Option<BoundedSpec>,
}

#[derive(Deserialize)]
#[serde(deny_unknown_fields)]
pub(super) struct BoundedSpec {
    pub(super) overdraw: Spanned<f64>,
    #[serde(rename = "for")]
    pub(super) overdraw_for: Spanned<String>,
}

/// A mapping kept as a list in file order, so every key keeps its position and duplicates (which a
/// map would silently collapse) can be reported.
pub(super) struct Entries<T>(Vec<(Spanned<String>, T)>);

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

impl<'a, T> IntoIterator for &'a Entries<T> {
    type Item = &'a (Spanned<String>, T);
    type IntoIter = std::slice::Iter<'a, (Spanned<String>, T)>;
    fn into_iter(self) -> Self::IntoIter {
        self.0.iter()
    }
}
