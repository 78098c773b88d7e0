//! What the dashboard reads of the tables: tenants (typed, through `shared::tenant::store`), and the
//! items of the session, counter, bucket, fungible-token and limit tables, each table bounded to
//! [`ROWS`] items. [`super::view`] turns them into what the page draws.

use std::collections::HashMap;

use aws_sdk_dynamodb::types::AttributeValue;
use shared::catalog;
use shared::dynamo::item::Item;
use shared::limit::{LimitRow, LimitStore};
use shared::table::TableKind;
use shared::tenant::Tenant;
use shared::token::{shards_from_vars, Attrs};
use shared::{Deps, Error, Result};

/// Items read per table at most (the page is for a developer's machine, not for a fleet).
pub const ROWS: usize = 200;

/// One read of every table the dashboard draws.
#[derive(Debug, Default)]
pub struct Snapshot {
    pub tenants: Vec<Tenant>,
    /// Tenant rows that did not parse, with the reason (shown, not hidden).
    pub bad_tenants: Vec<String>,
    pub sessions: Rows,
    pub counters: Rows,
    pub buckets: Rows,
    pub tokens: Rows,
    /// The limit table's rows (the fungible buckets' capacity and window), parsed as the limiter
    /// parses them; `limits` keeps its flags.
    pub limit_rows: Vec<LimitRow>,
    pub limits: Rows,
    /// Items or settings that could not be read, each with why (shown, not hidden).
    pub problems: Vec<String>,
    /// The token table's attribute names (camelCase or snake_case tables).
    pub token_attrs: Option<Attrs>,
    /// `TURNSTILE_TOKEN_SHARDS`: resources whose buckets are spread over rows (decision 1500).
    pub token_shards: HashMap<String, u32>,
}

/// A table's items as stored.
#[derive(Debug, Default)]
pub struct Rows {
    pub items: Vec<Item>,
    /// True when the table holds more than [`ROWS`] items.
    pub truncated: bool,
    /// True when the table does not exist (the stack runs without it).
    pub missing: bool,
}

/// DynamoDB calls: 1 Scan page per table (and the tenant listing's pages).
pub async fn read(deps: &Deps) -> Result<Snapshot> {
    let (mut tenants, bad_tenants) = shared::tenant::store::list(deps).await?;
    tenants.truncate(ROWS);
    let mut problems = Vec::new();
    let limits = scan(deps, TableKind::Limits).await?;
    let mut limit_rows = Vec::new();
    match LimitStore::from_deps(deps) {
        Ok(store) => {
            for item in &limits.items {
                match store.parse(item) {
                    Ok(row) => limit_rows.push(row),
                    Err(e) => problems.push(e.to_string()),
                }
            }
        }
        Err(e) => problems.push(e.to_string()),
    }
    let token_shards = shards_from_vars(&deps.vars).unwrap_or_else(|e| {
        problems.push(e.to_string());
        HashMap::new()
    });
    Ok(Snapshot {
        tenants,
        bad_tenants,
        sessions: scan(deps, TableKind::Sessions).await?,
        counters: scan(deps, TableKind::Counters).await?,
        buckets: scan(deps, TableKind::Buckets).await?,
        tokens: scan(deps, TableKind::FungibleTokens).await?,
        limit_rows,
        limits,
        problems,
        token_attrs: Some(Attrs::of(deps.style)),
        token_shards,
    })
}

async fn scan(deps: &Deps, kind: TableKind) -> Result<Rows> {
    let def = catalog::definition(kind, &deps.tables, deps.style);
    let sent = deps
        .dynamo
        .scan()
        .table_name(&def.name)
        .limit(ROWS as i32)
        .send()
        .await;
    let out = match sent {
        Ok(out) => out,
        Err(e)
            if e.as_service_error()
                .is_some_and(|se| se.is_resource_not_found_exception()) =>
        {
            return Ok(Rows {
                missing: true,
                ..Rows::default()
            })
        }
        Err(e) => return Err(Error::dynamo("Scan", e)),
    };
    Ok(Rows {
        missing: false,
        truncated: out
            .last_evaluated_key()
            .is_some_and(|k: &std::collections::HashMap<String, AttributeValue>| !k.is_empty()),
        items: out.items().to_vec(),
    })
}
