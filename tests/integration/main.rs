//! The integration suite: every test runs against DynamoDB Local (started by `make test`).

mod artifacts;
mod faults;
mod foundation;
mod fuzz;
mod isolation;
mod kv;
mod local_stack;
mod local_stream_bridge;
mod reservations;
mod state;
mod template;
mod token_remover;
mod tokens;
mod tokens_limits;
mod ws_admission;
mod ws_authorizer;
mod ws_gcra;
mod ws_message;
mod ws_reconcile;
mod ws_session_api;
mod ws_support;
mod ws_sweeper;
mod ws_tenant;
