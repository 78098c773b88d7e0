//! The AWS options every command takes, named as the AWS CLI names them (`--endpoint-url`,
//! `--region`, `--profile`), and the [`Deps`] commands build from them. Without a DynamoDB Local
//! endpoint, the credentials are resolved before the first call, so a missing account says in one
//! line what to set instead of failing deep inside the SDK.

use std::time::Duration;

use aws_config::BehaviorVersion;
use aws_credential_types::provider::ProvideCredentials;
use shared::config::Vars;
use shared::deps::ENDPOINT_VAR;
use shared::{Deps, Error, Result};

/// The SDK's own variable for every service's endpoint; the CLI reads it as DynamoDB's.
const ANY_ENDPOINT_VAR: &str = "AWS_ENDPOINT_URL";

/// How long the credential chain may take (a profile's SSO or role, the instance metadata).
const CREDENTIALS_WAIT: Duration = Duration::from_secs(10);

const NOTHING_TO_CALL: &str = "no DynamoDB to call: pass --endpoint-url http://127.0.0.1:8000 (or \
     set AWS_ENDPOINT_URL) for DynamoDB Local, or set AWS credentials/AWS_PROFILE and a region \
     (--region, AWS_REGION) for an AWS account";

#[derive(Debug, Clone, Default, clap::Args)]
pub struct Options {
    /// The DynamoDB endpoint, e.g. http://127.0.0.1:8000 for DynamoDB Local (default
    /// AWS_ENDPOINT_URL_DYNAMODB, then AWS_ENDPOINT_URL). A loopback endpoint needs no credentials.
    #[arg(long, global = true, value_name = "URL")]
    pub endpoint_url: Option<String>,
    /// The AWS region (default AWS_REGION, then the profile's).
    #[arg(long, global = true)]
    pub region: Option<String>,
    /// A named profile of ~/.aws/config; it wins over credentials in the environment (default
    /// AWS_PROFILE).
    #[arg(long, global = true)]
    pub profile: Option<String>,
}

impl Options {
    /// Hands the options to the SDK as the variables it reads, so every client the commands build
    /// (DynamoDB, the Management API) sees them. Call it before any other thread starts.
    pub fn export(&self) {
        let endpoint = self
            .endpoint_url
            .clone()
            .or_else(|| std::env::var(ENDPOINT_VAR).ok())
            .or_else(|| std::env::var(ANY_ENDPOINT_VAR).ok());
        if let Some(url) = endpoint {
            std::env::set_var(ENDPOINT_VAR, url);
        }
        if let Some(region) = &self.region {
            std::env::set_var("AWS_REGION", region);
        }
        if let Some(profile) = &self.profile {
            std::env::set_var("AWS_PROFILE", profile);
            for var in [
                "AWS_ACCESS_KEY_ID",
                "AWS_SECRET_ACCESS_KEY",
                "AWS_SESSION_TOKEN",
            ] {
                std::env::remove_var(var);
            }
        }
    }
}

/// The commands' `Deps`: DynamoDB Local's dummy credentials for a loopback endpoint, otherwise
/// the SDK's chain, resolved here once so that nothing configured is one clear error.
pub async fn deps() -> Result<Deps> {
    let vars = Vars::process();
    if let Some(url) = vars.get(ENDPOINT_VAR) {
        if shared::dynamo::wants_local_credentials(&url, &vars) {
            return Deps::from_env().await;
        }
    }
    let sdk = aws_config::defaults(BehaviorVersion::latest()).load().await;
    let provider = sdk
        .credentials_provider()
        .ok_or_else(|| Error::Other(NOTHING_TO_CALL.into()))?;
    match tokio::time::timeout(CREDENTIALS_WAIT, provider.provide_credentials()).await {
        Ok(Ok(_)) => {}
        Ok(Err(_)) if vars.get("AWS_PROFILE").is_some() => {
            return Err(Error::Other(format!(
                "profile {:?} gave no credentials: is it in ~/.aws/config (or \
                 ~/.aws/credentials), and signed in?",
                vars.get("AWS_PROFILE").unwrap_or_default()
            )))
        }
        Ok(Err(_)) | Err(_) => return Err(Error::Other(NOTHING_TO_CALL.into())),
    }
    if sdk.region().is_none() {
        return Err(Error::Other(
            "no AWS region: pass --region or set AWS_REGION".into(),
        ));
    }
    Deps::from_sdk(&sdk, vars)
}
