//! Tenants: each tenant's WebSocket limits, their store and an in-memory read cache.

pub mod cache;
pub mod policy;
pub mod store;
mod window;
pub use cache::TenantCache;
pub use policy::{ConnectAuth, Enforcement, OnFailure};
pub use window::WindowAlgorithm;
mod limits;

pub use limits::*;
