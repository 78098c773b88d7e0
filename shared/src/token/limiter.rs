//! The fungible limiter: one conditional write per decision, no read on the warm path.

mod guard;
mod shard_vars;
mod sharded;
pub use guard::{account_at, Guarded};
pub use shard_vars::shards_from_vars;
mod fungible;

pub use fungible::*;
