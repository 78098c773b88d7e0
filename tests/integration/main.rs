//! The integration suite: every test runs against DynamoDB Local (started by `make test`).

mod dashboard;
mod faults;
mod foundation;
mod fuzz;
mod isolation;
mod kv;
mod kv_leases;
mod kv_shards;
mod local_stack;
mod local_stream_bridge;
mod reservations;
mod state;
mod template;
mod token_remover;
mod tokens;
mod tokens_limits;
mod tokens_shards;
mod ws_admission;
mod ws_authorizer;
mod ws_gcra;
mod ws_message;
mod ws_reconcile;
mod ws_session_api;
mod ws_support;
mod ws_sweeper;
mod ws_tenant;
