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
    /// The function this process serves, by crate name (`function::serve` sets it): its tenant
    /// credentials' session policy is looked up by it (`isolation::policy`). `None` for the CLI, the
    /// benchmarks and most tests.
    pub function: Option<&'static str>,
}

impl Deps {
    /// From the process environment and the SDK's default credential chain. When
    /// `AWS_ENDPOINT_URL_DYNAMODB` points at a loopback address (DynamoDB Local) and no credentials
    /// are configured, dummy credentials are used so local runs need no AWS account.
    pub async fn from_env() -> Result<Self> {
        let vars = Vars::process();
        match vars.get(ENDPOINT_VAR) {
            Some(url) if dynamo::wants_local_credentials(&url, &vars) => {
                let dynamo = dynamo::local_client(&url, None);
                Self::with_client(dynamo, vars)
            }
            _ => {
                let sdk = aws_config::defaults(BehaviorVersion::latest()).load().await;
                Self::from_sdk(&sdk, vars)
            }
        }
    }

    /// From an SDK configuration the caller loaded (and may have checked: the CLI resolves its
    /// credentials first, to say in one line what is missing) and the variables naming the tables.
    pub fn from_sdk(sdk: &aws_config::SdkConfig, vars: Vars) -> Result<Self> {
        Self::with_client(dynamo::client(sdk, None), vars)
    }

    fn with_client(dynamo: Client, vars: Vars) -> Result<Self> {
        Ok(Deps {
            dynamo,
            tables: TableNames::from_vars(&vars)?,
            style: AttributeStyle::from_vars(&vars)?,
            clock: clock::system(),
            vars,
            function: None,
        })
    }

    /// These `Deps` as function `name`'s (its crate name, as in `template.yaml`'s `Binary`).
    pub fn for_function(self, name: &'static str) -> Self {
        Deps {
            function: Some(name),
            ..self
        }
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
            function: None,
        }
    }
}
