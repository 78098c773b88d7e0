//! Turnstile's shared library: the table logic every Lambda function and the CLI call.
//!
//! Organised by concept, each module holding its table's attribute names next to its logic;
//! imports only run down the layers below, and no two modules (nor two parts of one folder)
//! import each other: `scripts/module-graph.py`, in `make test`, checks it and docs/layout.md
//! draws it. From the top:
//!
//! - Function wiring: [`function`] (what every function's `main` and `init` share, the WebSocket
//!   opening) and [`edge`] (the API Gateway edge: the authorizer context, the responses).
//! - [`catalog`]: the one definition of every table.
//! - Repairs: `reconcile` (the reconciler, feature `gateway`), above what it repairs.
//! - Composing paths: [`admission`] (`$connect`, messages, releases, sessions, the authorizer's
//!   pre-check, verdicts).
//! - WebSocket concepts: [`tenant`] (tenant rows, their cache and policies), [`session`] (sessions
//!   and their connection ids), [`counter`] (per-tenant counters and minute windows).
//! - Tokens, as rate-limiter-py keeps them: [`token`] (fungible token buckets), [`limit`]
//!   (per-account limits) and [`reservation`] (non-fungible reservations and tokens).
//! - Key-value GCRA limits: [`kv`] (the limits file, its limiter and leases), [`state`] (the
//!   `RateLimitState` view of any bucket), [`shard`] (exact shares of one limit spread over
//!   several items).
//! - One limit across regions: [`region`] (regional allotments of a global limit on a strongly
//!   consistent ledger, the saga that moves them, leases, the rebalancing policy).
//! - Who may connect or call: [`ticket`] (connect tickets: who may join a session), `oidc` (the
//!   `$connect` verifier of an identity provider's JWTs, feature `oidc`), [`caller`] (whose tenant
//!   an HTTP API caller acts for).
//! - The GCRA write: [`gcra_write`] (one spend or refund as one conditional write, on any table).
//! - Answers: [`refusal`] (HTTP 429 bodies and headers), [`gcra`] (the arithmetic).
//! - Test hooks: [`interleave`] (named points where tests force an order between two writes;
//!   production holds none), [`mutation`] (deliberate defects for the fault-schedule simulation's
//!   mutation tests, active only with the `mutations` feature).
//! - Ground floor: [`dynamo`] (clients, the call counter, the item codec, transactions, retries,
//!   pagination), [`cache`] (the one in-process cache), [`table`] (table shapes), [`capacity`]
//!   (write/read units by DynamoDB's rules), [`deps`] (what a handler is given), `gateway` (the
//!   Management API client, feature `gateway`), [`isolation`] (the tenant key guard and
//!   tenant-scoped credentials), [`telemetry`] (logs and metrics), [`error`] (typed errors),
//!   [`config`] (env vars), [`clock`] (injected time), [`ids`] (validated identifiers).
//! - Tests only: `fuzz` (property-test input generators).

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
pub mod edge;
pub mod error;
pub mod function;
/// Property-test input generators (tests and the `fuzz` feature only).
#[cfg(any(test, feature = "fuzz"))]
pub mod fuzz;
/// The Management API client (the `gateway` feature).
#[cfg(feature = "gateway")]
pub mod gateway;
pub mod gcra;
pub mod gcra_write;
pub mod ids;
pub mod interleave;
pub mod isolation;
pub mod kv;
pub mod limit;
pub mod mutation;
/// The `$connect` JWT verifier (the `oidc` feature).
#[cfg(feature = "oidc")]
pub mod oidc;
/// The reconciler (the `gateway` feature: it asks the Management API which sockets are gone).
#[cfg(feature = "gateway")]
pub mod reconcile;
pub mod refusal;
pub mod region;
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
    #[doc = include_str!("../../docs/multi-region.md")]
    struct MultiRegion;
}

pub use deps::Deps;
pub use error::{Error, Result};
