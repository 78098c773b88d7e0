//! `turnstile tables create|show`: the tables of `shared::table`, under the names the environment gives.

use clap::Subcommand;
use shared::catalog;
use shared::table::{self, TableKind};
use shared::{Error, Result};

pub(crate) type Args = crate::Nested<Cmd>;

#[derive(Debug, Subcommand)]
pub(crate) enum Cmd {
    /// Create the tables (idempotent), wait until active, and turn on TTL.
    Create {
        /// Only these tables (repeatable): tenants, sessions, counters, buckets, fungible-tokens,
        /// limits, non-fungible-tokens. Default: all.
        #[arg(long = "only", value_name = "TABLE")]
        only: Vec<String>,
    },
    /// Print every table's definition (name, keys, indexes, TTL, stream) as JSON, without calling AWS.
    Show,
}

fn selected(only: &[String]) -> Result<Vec<TableKind>> {
    if only.is_empty() {
        return Ok(TableKind::ALL.to_vec());
    }
    only.iter()
        .map(|s| {
            TableKind::parse(s).ok_or_else(|| {
                let known: Vec<_> = TableKind::ALL.iter().map(|k| k.as_str()).collect();
                Error::Other(format!("unknown table {s:?}; known: {}", known.join(", ")))
            })
        })
        .collect()
}

pub async fn run(args: Args) -> Result<()> {
    match args.command {
        Cmd::Show => {
            let vars = shared::config::Vars::process();
            let names = table::TableNames::from_vars(&vars)?;
            let style = table::AttributeStyle::from_vars(&vars)?;
            crate::print_json(&catalog::catalog(&names, style))
        }
        Cmd::Create { only } => {
            let kinds = selected(&only)?;
            let deps = crate::aws::deps().await?;
            let defs: Vec<_> = kinds
                .into_iter()
                .map(|k| catalog::definition(k, &deps.tables, deps.style))
                .collect();
            let done = catalog::ensure_all(&deps.dynamo, &defs).await?;
            let report: Vec<_> = done
                .into_iter()
                .map(|(name, e)| serde_json::json!({"table": name, "result": e}))
                .collect();
            crate::print_json(&report)
        }
    }
}
