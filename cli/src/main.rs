//! `turnstile`: the operator CLI. Each subcommand lives in its own module and only translates
//! arguments into calls to `shared`, printing results as JSON on stdout and errors on stderr.

mod tables;
mod tenant;

use std::process::ExitCode;

use clap::{Parser, Subcommand};

#[derive(Debug, Parser)]
#[command(
    name = "turnstile",
    version,
    about = "Turnstile: multi-tenant rate limiting on DynamoDB"
)]
struct Cli {
    /// Log as JSON lines instead of text (also TURNSTILE_LOG_FORMAT=json).
    #[arg(long, global = true)]
    json_logs: bool,
    #[command(subcommand)]
    command: Command,
}

#[derive(Debug, Subcommand)]
enum Command {
    /// Create or describe Turnstile's DynamoDB tables.
    Tables(tables::Args),
    /// Create, show, list or delete tenants and their WebSocket limits (seed 003).
    Tenant(tenant::Args),
}

#[tokio::main]
async fn main() -> ExitCode {
    let cli = Cli::parse();
    shared::telemetry::init_cli(cli.json_logs);
    let result = match cli.command {
        Command::Tables(args) => tables::run(args).await,
        Command::Tenant(args) => tenant::run(args).await,
    };
    match result {
        Ok(()) => ExitCode::SUCCESS,
        Err(e) => {
            eprintln!("error: {e}");
            ExitCode::FAILURE
        }
    }
}

/// Prints a value as pretty JSON on stdout.
pub(crate) fn print_json<T: serde::Serialize>(value: &T) -> shared::Result<()> {
    let s = serde_json::to_string_pretty(value)
        .map_err(|e| shared::Error::Other(format!("formatting output: {e}")))?;
    println!("{s}");
    Ok(())
}
