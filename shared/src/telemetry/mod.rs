//! Telemetry: structured logs for the CLI and the local stack (Lambda binaries use the runtime's
//! own `init_default_subscriber`, which honours `AWS_LAMBDA_LOG_FORMAT` and `AWS_LAMBDA_LOG_LEVEL`),
//! and metrics in CloudWatch Embedded Metric Format: the recorder ([`metrics`]) and the one list of
//! metric names and dimensions ([`catalogue`]); the DynamoDB client's meter that feeds it is
//! `crate::dynamo::meter`.
//! Ground floor: it imports nothing else from this crate but `config`.

pub mod catalogue;
pub mod metrics;
mod recorder;

use tracing_subscriber::EnvFilter;

/// `TURNSTILE_LOG_FORMAT=json` gives one JSON object per line; the default is human-readable text.
/// The level comes from `RUST_LOG` (default `info`, with the SDK's configuration loader at `error`:
/// each credential provider and instance-metadata probe that finds nothing warns, pages of it on a
/// machine without AWS, while the CLI says in one line what is missing). Calling it twice is
/// harmless. Colours only when stderr is a terminal (and `NO_COLOR` is unset): logs sent to a file
/// or a pipe stay plain text.
pub fn init_cli(json: bool) {
    let json = json
        || std::env::var("TURNSTILE_LOG_FORMAT")
            .map(|v| v.eq_ignore_ascii_case("json"))
            .unwrap_or(false);
    let filter = EnvFilter::try_from_default_env()
        .unwrap_or_else(|_| EnvFilter::new("info,aws_config=error"));
    let ansi = std::io::IsTerminal::is_terminal(&std::io::stderr())
        && std::env::var_os("NO_COLOR").is_none_or(|v| v.is_empty());
    let builder = tracing_subscriber::fmt()
        .with_env_filter(filter)
        .with_ansi(ansi)
        .with_writer(std::io::stderr);
    let _ = if json {
        builder.json().flatten_event(true).try_init()
    } else {
        builder.compact().try_init()
    };
}
