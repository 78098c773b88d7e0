//! The limits file (Boulder's layout): declared names, defaults keyed by name, overrides keyed
//! `Name:id`.
//!
//! ```yaml
//! names:
//!   NewRegistrationsPerIPAddress: { id: 2, format: ipAddress }
//!   NewOrdersPerAccount: { id: 3, format: regId, shadow: true }   # deny nothing, meter would-denies
//! defaults:
//!   NewRegistrationsPerIPAddress: { burst: 20, count: 20, period: 1s }
//! overrides:
//!   NewRegistrationsPerIPAddress:10.0.0.2: { burst: 20, count: 40, period: 1s }
//! ```
//!
//! The whole file is validated before anything is used, and every problem is reported with its line
//! (see [`LoadError`]); a file with any problem is refused whole. [`Limits`] holds the current set and
//! swaps a fully built new one in on reload, so readers never see a half-loaded set.
//!
//! Parsing (the file's shape with positions) is in [`file`], validation (every problem with its
//! line) in [`build`].

mod build;
mod file;
pub use file::parse_period;
#[cfg(test)]
mod fuzz_tests;
mod global;
mod set;
#[cfg(test)]
mod tests;

pub use set::*;
