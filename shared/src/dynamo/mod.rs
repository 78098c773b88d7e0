//! The ground floor every concept builds on to talk to DynamoDB: [`client`] (clients, timeouts, the
//! call counter, the dummy-credential local SDK config, `BatchGetItem`), [`item`] (reading and
//! writing attribute values), [`txn`] (TransactWriteItems and its cancellation reasons) and
//! [`retry`] (pacing retries). Nothing here knows a table or a concept.

pub mod client;
pub mod item;
pub mod retry;
pub mod txn;

pub use client::{
    batch_get, client, env_timeout, local_client, local_sdk_config, timeouts, CallCounter, Usage,
    DEFAULT_ATTEMPT_TIMEOUT, LOCAL_ATTEMPT_TIMEOUT, SDK_ATTEMPTS, TIMEOUT_VAR,
};
