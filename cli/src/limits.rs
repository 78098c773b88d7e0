//! `turnstile limits load|list`: a service's limits from rate-limiter-py's JSON file, diffed
//! against the limit table's `serviceName` index.

use clap::Subcommand;
use shared::limit::{load, LimitStore};
use shared::{Deps, Error, Result};

#[derive(Debug, clap::Args)]
pub struct Args {
    #[command(subcommand)]
    command: Cmd,
}

#[derive(Debug, Subcommand)]
enum Cmd {
    /// Load FILE ({"limits":[{"accountId","resourceName","limit","windowSec"}]}) for --service:
    /// puts new and changed rows, deletes the service's rows the file no longer lists, prints the diff.
    Load {
        file: std::path::PathBuf,
        #[arg(long)]
        service: String,
        /// Print the diff without writing.
        #[arg(long)]
        dry_run: bool,
    },
    /// List limit rows (of one service, by the serviceName index, or all).
    List {
        #[arg(long)]
        service: Option<String>,
    },
}

pub async fn run(args: Args) -> Result<()> {
    let deps = Deps::from_env().await?;
    let store = LimitStore::from_deps(&deps)?;
    match args.command {
        Cmd::Load {
            file,
            service,
            dry_run,
        } => {
            let text = std::fs::read_to_string(&file)
                .map_err(|e| Error::Other(format!("reading {}: {e}", file.display())))?;
            let specs = load::parse_file(&text)?;
            let diff = load::load(&store, &service, &specs, dry_run).await?;
            crate::print_json(&diff)
        }
        Cmd::List { service } => crate::print_json(&store.list(service.as_deref()).await?),
    }
}
