//! `turnstile`: the operator CLI. Each subcommand lives in its own module and only translates
//! arguments into calls to `shared`, printing results as JSON on stdout and errors on stderr.
//!
//! Exit status: 0 done (or granted), 1 an error (nothing decided; the message is on stderr), 2 a
//! usage error (clap's), 3 refused (a limit said no; the decision is still printed on stdout), 4
//! (`turnstile ws` only) the server closed the socket with a code other than 1000 or 1001.

mod aws;
mod dev;
mod invoke;
mod kv;
mod limits;
mod output;
mod reconcile;
mod region;
mod reservation;
mod state;
mod tables;
mod tenant;
mod tickets;
mod token;
mod ws;

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
    /// What stdout carries: json (the default) or table, the same result in aligned columns.
    #[arg(
        long,
        global = true,
        value_enum,
        default_value_t,
        env = "TURNSTILE_OUTPUT"
    )]
    output: output::Format,
    #[command(flatten)]
    aws: aws::Options,
    #[command(subcommand)]
    command: Command,
}

#[derive(Debug, Subcommand)]
enum Command {
    /// Create or describe Turnstile's DynamoDB tables.
    Tables(tables::Args),
    /// Run the whole suite locally: WebSocket, HTTP, @connections, stream bridge, EventBridge.
    Dev(dev::Args),
    /// Run one function on one event (like `sam local invoke -e`) and print its answer.
    Invoke(invoke::Args),
    /// Take fungible tokens by hand (prints each decision as JSON).
    Token(token::Args),
    /// Reserve, bind, delete and list non-fungible tokens.
    Reservation(reservation::Args),
    /// Load and list per-account limits (rate-limiter-py's JSON format).
    Limits(limits::Args),
    /// Key-value GCRA limits from a limits file: check, spend, refund or reset one bucket; validate a file.
    Kv(kv::Args),
    /// Print a bucket's rate-limit state (remaining, reset, retry hint, last request) as JSON.
    State(state::Args),
    /// Create, show, list or delete tenants and their WebSocket limits.
    Tenant(tenant::Args),
    /// Connect-ticket keys: make a set, or take one rotation step (stdin to stdout).
    Tickets(tickets::Args),
    /// Repair leaked open-connection counts from the sessions' connection ids (prints a report).
    Reconcile(reconcile::Args),
    /// One limit across regions: the ledger of regional allotments, looked at and moved by hand.
    Region(region::Args),
    /// A WebSocket client: send stdin's lines, print the frames received and how the socket closed.
    Ws(ws::Args),
}

// A command whose only argument is its subcommand (`turnstile tenant put`); a plain comment, so
// that clap's help keeps each command's own description.
#[derive(Debug, clap::Args)]
pub(crate) struct Nested<C: Subcommand> {
    #[command(subcommand)]
    pub(crate) command: C,
}

/// How a command ended, when it did not fail: the exit status's meaning is documented in
/// docs/cli.md ("Exit status").
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(crate) enum Exit {
    Done,
    /// A limit said no (the decision is on stdout).
    Refused,
    /// The server closed a WebSocket with a code other than 1000 or 1001 (`turnstile ws`).
    Closed,
}

impl Exit {
    /// `Done` for a granted decision, `Refused` otherwise.
    pub(crate) fn granted(granted: bool) -> Self {
        if granted {
            Exit::Done
        } else {
            Exit::Refused
        }
    }
}

/// A refusal's exit status (0 done, 1 error, 2 usage error).
const REFUSED: u8 = 3;
/// A WebSocket the server closed with an error code.
const CLOSED: u8 = 4;

fn main() -> ExitCode {
    let cli = Cli::parse();
    // Before the runtime's threads exist: the options become the variables the SDK reads.
    cli.aws.export();
    output::set(cli.output);
    shared::telemetry::init_cli(cli.json_logs);
    let runtime = match tokio::runtime::Runtime::new() {
        Ok(r) => r,
        Err(e) => {
            eprintln!("error: starting the async runtime: {e}");
            return ExitCode::FAILURE;
        }
    };
    match runtime.block_on(run(cli.command)) {
        Ok(Exit::Done) => ExitCode::SUCCESS,
        Ok(Exit::Refused) => ExitCode::from(REFUSED),
        Ok(Exit::Closed) => ExitCode::from(CLOSED),
        Err(e) => {
            eprintln!("error: {e}");
            ExitCode::FAILURE
        }
    }
}

async fn run(command: Command) -> shared::Result<Exit> {
    let done = |r: shared::Result<()>| r.map(|()| Exit::Done);
    match command {
        Command::Tables(args) => done(tables::run(args).await),
        Command::Dev(args) => done(dev::run(args).await),
        Command::Invoke(args) => done(invoke::run(args).await),
        Command::Token(args) => token::run(args).await,
        Command::Reservation(args) => reservation::run(args).await,
        Command::Limits(args) => done(limits::run(args).await),
        Command::Kv(args) => kv::run(args).await,
        Command::State(args) => done(state::run(args).await),
        Command::Tenant(args) => done(tenant::run(args).await),
        Command::Tickets(args) => done(tickets::run(args).await),
        Command::Reconcile(args) => done(reconcile::run(args).await),
        Command::Region(args) => done(region::run(args).await),
        Command::Ws(args) => ws::run(args).await,
    }
}

/// Prints a value on stdout as `--output` says: pretty JSON, or a table ([`output::table`]). A
/// closed pipe (`turnstile ... | head`) is not an error.
pub(crate) fn print_json<T: serde::Serialize>(value: &T) -> shared::Result<()> {
    use std::io::Write;
    let formatting = |e: serde_json::Error| shared::Error::Other(format!("formatting output: {e}"));
    let s = match output::format() {
        output::Format::Json => serde_json::to_string_pretty(value).map_err(formatting)?,
        output::Format::Table => output::table(&serde_json::to_value(value).map_err(formatting)?),
    };
    match writeln!(std::io::stdout().lock(), "{s}") {
        Err(e) if e.kind() != std::io::ErrorKind::BrokenPipe => {
            Err(shared::Error::Other(format!("writing output: {e}")))
        }
        _ => Ok(()),
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use clap::CommandFactory;

    /// Every command's long help, the root's first, with its path (`turnstile tenant put`).
    fn long_helps(cmd: &mut clap::Command, path: &str, out: &mut Vec<(String, String)>) {
        out.push((path.to_string(), cmd.render_long_help().to_string()));
        for sub in cmd.get_subcommands_mut() {
            let path = format!("{path} {}", sub.get_name());
            long_helps(sub, &path, out);
        }
    }

    /// Users have no design records: help says the thing itself, never a design seed's, a
    /// decision record's or an issue's number.
    #[test]
    fn help_cites_no_seed_decision_or_issue_number() {
        let mut root = Cli::command();
        root.build();
        let mut helps = Vec::new();
        long_helps(&mut root, "turnstile", &mut helps);
        assert!(helps.len() > 20, "walked only {} commands", helps.len());
        let mut cited = Vec::new();
        for (path, help) in &helps {
            for line in help.lines() {
                let words: Vec<String> = line
                    .split(|c: char| !c.is_alphanumeric())
                    .filter(|w| !w.is_empty())
                    .map(str::to_lowercase)
                    .collect();
                let cites = words.windows(2).any(|w| {
                    matches!(w[0].as_str(), "seed" | "decision" | "issue")
                        && w[1].starts_with(|c: char| c.is_ascii_digit())
                });
                if cites {
                    cited.push(format!("{path}: {}", line.trim()));
                }
            }
        }
        assert!(
            cited.is_empty(),
            "help cites internal records:\n{}",
            cited.join("\n")
        );
    }
}
