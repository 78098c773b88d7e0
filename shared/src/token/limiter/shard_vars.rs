//! Which resources keep sharded buckets (decision 1500), from the function's environment.

use std::collections::HashMap;

use crate::config::{ConfigError, Vars};
use crate::shard::MAX_SHARDS;

/// Env var: resources whose buckets are sharded, `resource=N` pairs separated by commas
/// (`api=8,search=4`). Resources not listed keep one row per account.
pub const TOKEN_SHARDS_VAR: &str = "TURNSTILE_TOKEN_SHARDS";

/// Parses [`TOKEN_SHARDS_VAR`]: `resource=N,...` with `N` in `1..=4096`.
pub fn shards_from_vars(vars: &Vars) -> Result<HashMap<String, u32>, ConfigError> {
    let Some(raw) = vars.get(TOKEN_SHARDS_VAR) else {
        return Ok(HashMap::new());
    };
    let bad = |reason: String| ConfigError::Invalid {
        var: TOKEN_SHARDS_VAR.into(),
        value: raw.clone(),
        reason,
    };
    let mut out = HashMap::new();
    for pair in raw.split(',').map(str::trim).filter(|p| !p.is_empty()) {
        let (resource, n) = pair
            .split_once('=')
            .ok_or_else(|| bad(format!("{pair:?} is not resource=N")))?;
        let n: u32 = n
            .trim()
            .parse()
            .ok()
            .filter(|n| (1..=MAX_SHARDS).contains(n))
            .ok_or_else(|| bad(format!("{pair:?}: N must be 1..={MAX_SHARDS}")))?;
        if resource.trim().is_empty() {
            return Err(bad(format!("{pair:?} names no resource")));
        }
        out.insert(resource.trim().to_string(), n);
    }
    Ok(out)
}
