//! What every handler needs, built once per process (in `main.rs`, or by the local stack and tests)
//! and borrowed by each invocation: the DynamoDB client, table names, the clock, and the variables.

use aws_config::BehaviorVersion;
use aws_sdk_dynamodb::Client;

use crate::clock::{self, SharedClock};
use crate::config::Vars;
use crate::dynamo::{self, CallCounter};
use crate::error::Result;
use crate::table::{AttributeStyle, TableNames};

/// Env var of the DynamoDB endpoint override honoured by the AWS SDK itself.
pub const ENDPOINT_VAR: &str = "AWS_ENDPOINT_URL_DYNAMODB";

#[derive(Debug, Clone)]
pub struct Deps {
    pub dynamo: Client,
    pub tables: TableNames,
    pub style: AttributeStyle,
    pub clock: SharedClock,
    pub vars: Vars,
}

impl Deps {
    /// From the process environment and the SDK's default credential chain. When
    /// `AWS_ENDPOINT_URL_DYNAMODB` points at a loopback address (DynamoDB Local) and no credentials
    /// are configured, dummy credentials are used so local runs need no AWS account.
    pub async fn from_env() -> Result<Self> {
        let vars = Vars::process();
        let tables = TableNames::from_vars(&vars)?;
        let style = AttributeStyle::from_vars(&vars)?;
        let dynamo = match vars.get(ENDPOINT_VAR) {
            Some(url) if is_loopback(&url) && vars.get("AWS_ACCESS_KEY_ID").is_none() => {
                dynamo::local_client(&url, None)
            }
            _ => {
                let sdk = aws_config::defaults(BehaviorVersion::latest()).load().await;
                dynamo::client(&sdk, None)
            }
        };
        Ok(Deps {
            dynamo,
            tables,
            style,
            clock: clock::system(),
            vars,
        })
    }

    /// Against a DynamoDB Local endpoint with explicit names and clock (tests, local stack, benchmarks).
    pub fn local(
        endpoint: &str,
        tables: TableNames,
        clock: SharedClock,
        counter: Option<&CallCounter>,
    ) -> Self {
        Deps {
            dynamo: dynamo::local_client(endpoint, counter),
            tables,
            style: AttributeStyle::default(),
            clock,
            vars: Vars::from_pairs::<&str, &str>([]),
        }
    }
}

/// True for `http://127.0.0.1:8000`, `http://localhost:8000`, `http://[::1]:8000` and the like.
pub fn is_loopback(url: &str) -> bool {
    let rest = url.split("://").nth(1).unwrap_or(url);
    let host = rest.split('/').next().unwrap_or("");
    let host = if let Some(h) = host.strip_prefix('[') {
        h.split(']').next().unwrap_or("")
    } else {
        host.rsplit_once(':').map(|(h, _)| h).unwrap_or(host)
    };
    host == "localhost" || host == "::1" || host.starts_with("127.")
}

#[cfg(test)]
mod tests {
    use super::is_loopback;

    #[test]
    fn loopback_endpoints_are_recognised() {
        assert!(is_loopback("http://127.0.0.1:8000"));
        assert!(is_loopback("http://localhost:8000/"));
        assert!(is_loopback("http://[::1]:8000"));
        assert!(!is_loopback("https://dynamodb.eu-west-1.amazonaws.com"));
        assert!(!is_loopback("http://10.0.0.1:8000"));
    }
}
