//! The integration suite: every test runs against DynamoDB Local (started by `make test`).

mod foundation;
mod reservations;
mod token_remover;
mod tokens;
mod tokens_limits;
