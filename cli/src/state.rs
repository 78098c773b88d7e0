//! `turnstile state <bucket>`: the RateLimitState of a bucket, read from DynamoDB (so it
//! survives restarts). Buckets: `{nameId}:{id}` or `Name:id` (the latter needs the limits file);
//! a `table:` prefix picks another store once it registers a reader.

use std::sync::Arc;

use shared::clock::{Clock, SystemClock, Timestamp};
use shared::kv::config::LIMITS_FILE_VAR;
use shared::kv::instant::parse_instant;
use shared::kv::LimitSet;
use shared::state::{GcraReader, Registry};
use shared::{Error, Result};

#[derive(Debug, clap::Args)]
pub struct Args {
    /// `{nameId}:{id}` (as stored), `Name:id`, or `buckets:...`.
    bucket: String,
    /// The limits YAML file, to resolve `Name:id` and to supply the rate of a bucket with no item.
    #[arg(long, env = LIMITS_FILE_VAR, value_name = "FILE")]
    config: Option<String>,
    /// View the state as of this instant: epoch milliseconds or RFC 3339.
    #[arg(long, value_parser = parse_instant)]
    now: Option<Timestamp>,
}

pub async fn run(args: Args) -> Result<()> {
    let limits = match args.config.as_deref() {
        Some(path) => Some(Arc::new(
            LimitSet::from_path(path).map_err(|e| Error::Other(format!("{path}: {e}")))?,
        )),
        None => None,
    };
    let deps = crate::aws::deps().await?;
    let registry = Registry::default().with(GcraReader {
        client: deps.dynamo.clone(),
        table: deps.tables.buckets.clone(),
        limits,
    });
    let now = args.now.unwrap_or_else(|| SystemClock.now());
    let state = registry
        .read(&args.bucket, now)
        .await
        .map_err(|e| Error::Other(e.to_string()))?;
    crate::print_json(&state)
}
