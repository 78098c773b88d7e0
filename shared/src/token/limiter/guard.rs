//! The Lambda handler wrapper of [`FungibleLimiter::guard`] and the JSON account-id reader.

use super::fungible::{FungibleLimiter, TokenError};
use crate::limit::Quota;
use std::future::Future;

/// A Lambda handler that runs only when the event's account gets a token; see
/// [`FungibleLimiter::guard`].
#[derive(Debug, Clone)]
pub struct Guarded<A, H> {
    pub(super) limiter: FungibleLimiter,
    pub(super) resource: String,
    pub(super) default: Quota,
    pub(super) account_of: A,
    pub(super) handler: H,
}

impl FungibleLimiter {
    /// Wraps a Lambda handler: each event's account id comes from `account_of` (see
    /// [`account_at`] for JSON events) and the handler runs only when that account gets a token.
    pub fn guard<A, H>(
        self,
        resource: &str,
        default: Quota,
        account_of: A,
        handler: H,
    ) -> Guarded<A, H> {
        Guarded {
            limiter: self,
            resource: resource.to_string(),
            default,
            account_of,
            handler,
        }
    }
}

impl<A, H> Guarded<A, H> {
    /// Takes a token for the event's account, then runs the handler. A denial or a missing account
    /// id is an error the handler's error type absorbs (e.g. `lambda_runtime::Error`).
    pub async fn call<E, Fut, R, Err>(&self, event: E) -> std::result::Result<R, Err>
    where
        A: Fn(&E) -> Option<String>,
        H: Fn(E) -> Fut,
        Fut: Future<Output = std::result::Result<R, Err>>,
        Err: From<TokenError>,
    {
        let account = (self.account_of)(&event)
            .filter(|a| !a.is_empty())
            .ok_or_else(|| TokenError::MissingAccount(self.resource.clone()))?;
        let d = self
            .limiter
            .get_token(&self.resource, &account, self.default)
            .await
            .map_err(TokenError::Store)?;
        if !d.granted {
            return Err(TokenError::Limited(Box::new(d)).into());
        }
        (self.handler)(event).await
    }
}

/// Reads the account id at a dotted path (`requestContext.accountId`) of a JSON event; strings and
/// numbers are accepted.
pub fn account_at(
    path: &str,
) -> impl Fn(&serde_json::Value) -> Option<String> + Clone + Send + Sync {
    let path = path.to_string();
    move |event| match crate::token::json_path(event, &path)? {
        serde_json::Value::String(s) => Some(s.clone()),
        serde_json::Value::Number(n) => Some(n.to_string()),
        _ => None,
    }
}
