//! The integration suite: every test runs against DynamoDB Local (started by `make test`).

mod foundation;
mod local_stream_bridge;
mod kv;
mod reservations;
mod state;
mod token_remover;
mod tokens;
mod tokens_limits;
