//! The integration suite: every test runs against DynamoDB Local (started by `make test`).

mod foundation;
mod isolation;
mod template;
