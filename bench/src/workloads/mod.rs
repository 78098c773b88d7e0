//! One module per measured Turnstile path. See [`crate::workload`] for how to add one.

pub mod cached_rejection;
pub mod conflicts;
pub mod decide_api;
pub mod decide_handler;
pub mod floor;
pub mod fungible;
pub mod gcra;
pub mod local_stack;
pub mod reservation;
pub mod websocket;

use shared::catalog;
use shared::config::Vars;
use shared::table::{AttributeStyle, TableKind};
use shared::Deps;

use crate::error::BenchError;
use crate::workload::BenchCtx;

/// The `Deps` a workload hands to `shared`: the run's counted client (so every call the library
/// makes is counted), the run's table names, the system clock, the default attribute style and
/// **no variables**, so every cache time is the shipped default (limit rows and tenants 60 s).
pub fn deps(ctx: &BenchCtx) -> Deps {
    Deps {
        dynamo: ctx.client.clone(),
        tables: ctx.tables.clone(),
        style: AttributeStyle::default(),
        clock: shared::clock::system(),
        vars: Vars::from_pairs::<&str, &str>([]),
        function: None,
    }
}

/// Creates the tables of `kinds` under the run's prefix (no-op when they exist).
pub async fn ensure_tables(ctx: &BenchCtx, kinds: &[TableKind]) -> Result<(), BenchError> {
    for kind in kinds {
        let def = catalog::definition(*kind, &ctx.tables, AttributeStyle::default());
        catalog::ensure(&ctx.client, &def).await?;
    }
    Ok(())
}
