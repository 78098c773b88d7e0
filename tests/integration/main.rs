//! The integration suite: every test runs against DynamoDB Local (started by `make test`).

mod foundation;
mod kv;
mod state;
