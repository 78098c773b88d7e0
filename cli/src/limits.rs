//! `turnstile limits load|list`: a service's limits from rate-limiter-py's JSON file, diffed
//! against the limit table's `serviceName` index.

use clap::Subcommand;
use shared::limit::load::{self, LimitDiff, LoadOptions};
use shared::limit::LimitStore;
use shared::{Error, Result};

pub(crate) type Args = crate::Nested<Cmd>;

#[derive(Debug, Subcommand)]
pub(crate) enum Cmd {
    /// Load FILE ({"limits":[{"accountId","resourceName","limit","windowSec"}]}) for --service:
    /// puts new and changed rows, deletes the service's rows the file no longer lists, prints the diff.
    /// If the file lists rows another service owns, nothing is written: the conflicts (resource,
    /// account, owner) are printed and the exit status is 1 (also with --dry-run).
    Load {
        file: std::path::PathBuf,
        #[arg(long)]
        service: String,
        /// Print the diff (and any conflicts) without writing.
        #[arg(long)]
        dry_run: bool,
        /// Re-own rows of other services that the file lists (reported in "takenOver").
        #[arg(long)]
        take_over: bool,
    },
    /// List limit rows (of one service, by the serviceName index, or all).
    List {
        #[arg(long)]
        service: Option<String>,
    },
}

pub async fn run(args: Args) -> Result<()> {
    let deps = crate::aws::deps().await?;
    let store = LimitStore::from_deps(&deps)?;
    match args.command {
        Cmd::Load {
            file,
            service,
            dry_run,
            take_over,
        } => {
            let text = std::fs::read_to_string(&file)
                .map_err(|e| Error::Other(format!("reading {}: {e}", file.display())))?;
            let specs = load::parse_file(&text)?;
            let opts = LoadOptions { dry_run, take_over };
            let diff = load::load(&store, &service, &specs, opts).await?;
            crate::print_json(&diff)?;
            conflicts(&diff, dry_run)
        }
        Cmd::List { service } => crate::print_json(&store.list(service.as_deref()).await?),
    }
}

/// An error (exit status 1) naming each row another service owns, after the diff is printed.
fn conflicts(diff: &LimitDiff, dry_run: bool) -> Result<()> {
    if diff.conflicts.is_empty() {
        return Ok(());
    }
    let rows: Vec<String> = diff
        .conflicts
        .iter()
        .map(|c| {
            let owner = c.owner.as_deref().unwrap_or("(no service)");
            format!("{}/{} (owned by {owner})", c.resource_name, c.account_id)
        })
        .collect();
    let what = if diff.applied {
        "were left alone (another service took them during the load)"
    } else if dry_run {
        "would refuse the load (--take-over re-owns them)"
    } else {
        "refused the load: nothing was written (--take-over re-owns them)"
    };
    Err(Error::Other(format!(
        "{} row(s) of service {:?}'s file belong to other services and {what}: {}",
        rows.len(),
        diff.service,
        rows.join(", ")
    )))
}

#[cfg(test)]
mod tests {
    use super::*;
    use shared::limit::load::Conflict;
    use shared::limit::LimitRow;

    #[test]
    fn conflicts_fail_the_command_naming_row_and_owner() {
        let row = |svc: Option<&str>| LimitRow {
            resource_name: "api".into(),
            account_id: "a".into(),
            limit: 1,
            window_sec: Some(60),
            service_name: svc.map(String::from),
        };
        let mut diff = LimitDiff::new("orders");
        assert!(conflicts(&diff, true).is_ok());
        diff.conflicts.push(Conflict {
            resource_name: "api".into(),
            account_id: "a".into(),
            owner: Some("billing".into()),
            current: row(Some("billing")),
            wanted: Some(row(Some("orders"))),
        });
        let err = conflicts(&diff, false).unwrap_err().to_string();
        assert!(err.contains("api/a (owned by billing)"), "{err}");
        assert!(err.contains("nothing was written"), "{err}");
        let err = conflicts(&diff, true).unwrap_err().to_string();
        assert!(err.contains("would refuse the load"), "{err}");
    }
}
