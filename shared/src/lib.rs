//! Turnstile's shared library: the table logic every Lambda function and the CLI call.
//!
//! Organised by concept, each module holding its table's attribute names next to its logic:
//! [`tenant`], [`session`] and [`counter`] (WebSocket admission, seed 003), [`token`], [`limit`] and
//! [`reservation`] (fungible and non-fungible tokens, seeds 001/000), [`kv`] (GCRA limits, seed 004).
//! Plumbing: [`clock`] (injected time), [`config`] (env vars), [`table`] (table shapes), [`catalog`]
//! (the one definition of every table), [`dynamo`] (clients, the call counter, the item codec,
//! transactions, retries, pagination), [`cache`] (the one in-process cache), [`capacity`]
//! (write/read units by DynamoDB's rules), [`ids`] (validated identifiers), [`interleave`] (points
//! where tests force an order between two writes), [`ticket`] (connect
//! tickets: who may join a session).

pub mod admission;
pub mod cache;
pub mod caller;
pub mod capacity;
pub mod catalog;
pub mod clock;
pub mod config;
pub mod counter;
pub mod deps;
pub mod dynamo;
pub mod error;
pub mod function;
/// Property-test input generators (tests and the `fuzz` feature only).
#[cfg(any(test, feature = "fuzz"))]
pub mod fuzz;
/// The Management API client (the `gateway` feature).
#[cfg(feature = "gateway")]
pub mod gateway;
pub mod gcra;
pub mod ids;
pub mod interleave;
pub mod isolation;
pub mod kv;
pub mod limit;
pub mod mutation;
/// The `$connect` JWT verifier (the `oidc` feature).
#[cfg(feature = "oidc")]
pub mod oidc;
pub mod refusal;
pub mod reservation;
pub mod session;
pub mod shard;
pub mod state;
pub mod table;
pub mod telemetry;
pub mod tenant;
pub mod ticket;
pub mod token;

/// The Rust examples of the README and of `docs/`, compiled (and run, unless `no_run`) as doc tests
/// by `cargo test --workspace --doc`, so the documentation cannot drift from the API. One hidden
/// item per file; a file whose examples move elsewhere loses its line here.
#[cfg(doctest)]
mod doc_examples {
    #[doc = include_str!("../../README.md")]
    struct Readme;
    #[doc = include_str!("../../docs/tokens.md")]
    struct Tokens;
    #[doc = include_str!("../../docs/leases.md")]
    struct Leases;
}

pub use deps::Deps;
pub use error::{Error, Result};
