//! The ground floor every concept builds on to talk to DynamoDB: [`client`] (clients, timeouts, the
//! dummy-credential local SDK config, `BatchGetItem`, a consistent `GetItem`, a plain `PutItem`), [`meter`] (the interceptor on every client:
//! metrics, the [`user_agent`] and the [`counter`] tests use), [`item`] (reading and writing attribute values),
//! [`txn`] (TransactWriteItems and its cancellation reasons), [`retry`] (pacing retries) and
//! [`pages`] (paginated Query and Scan).
//! Nothing here knows a table or a concept.

pub mod client;
pub mod counter;
pub mod item;
pub mod meter;
pub mod pages;
pub mod retry;
pub mod txn;
pub mod user_agent;

pub use client::{
    batch_get, client, env_timeout, get_consistent, is_loopback, local_client, local_sdk_config,
    put, timeouts, wants_local_credentials, DEFAULT_ATTEMPT_TIMEOUT, LOCAL_ATTEMPT_TIMEOUT,
    SDK_ATTEMPTS, TIMEOUT_VAR,
};
pub use counter::{CallCounter, Usage};
