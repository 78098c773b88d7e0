//! Turnstile's shared library: the table logic every Lambda function and the CLI call.
//!
//! Organised by concept, each module holding its table's attribute names next to its logic:
//! [`tenant`], [`session`] and [`counter`] (WebSocket admission, seed 003), [`token`], [`limit`] and
//! [`reservation`] (fungible and non-fungible tokens, seeds 001/000), [`kv`] (GCRA limits, seed 004).
//! Plumbing: [`clock`] (injected time), [`config`] (env vars), [`table`] (the one definition of every
//! table), [`dynamo`] (clients, the call counter, the item codec, transactions and retries), [`cache`] (the one in-process cache), [`capacity`] (write/read units by DynamoDB's rules), [`ids`] (validated identifiers).

pub mod admission;
pub mod cache;
pub mod capacity;
pub mod clock;
pub mod config;
pub mod counter;
pub mod deps;
pub mod dynamo;
pub mod error;
/// Property-test input generators (tests and the `fuzz` feature only).
#[cfg(any(test, feature = "fuzz"))]
pub mod fuzz;
/// The Management API client (the `gateway` feature).
#[cfg(feature = "gateway")]
pub mod gateway;
pub mod gcra;
pub mod ids;
pub mod isolation;
pub mod kv;
pub mod limit;
pub mod refusal;
pub mod reservation;
pub mod session;
pub mod shard;
pub mod state;
pub mod table;
pub mod telemetry;
pub mod tenant;
pub mod token;

pub use deps::Deps;
pub use error::{Error, Result};
