//! Non-fungible tokens (rate-limiter-py's): one row per reservation or resource token.
//!
//! [`NonFungibleLimiter::get_reservation`] holds a unit of capacity; [`Reservation::create_token`]
//! binds it to a resource; [`Reservation::delete`] and [`NonFungibleLimiter::remove_by_resource_id`]
//! release it. Design: `docs/decisions/0101-non-fungible-tokens.md`.

pub mod coordinate;
pub mod ended;
mod ledger;
mod limiter;
mod queries;
mod reserve;
pub mod shard;
mod tokens;
mod view;
pub use coordinate::CoordinateError;
pub use ledger::{LEDGER_ID, LEDGER_MAP};
pub use limiter::{
    NonFungibleLimiter, Reservation, ReservationError, Token, TokenRow, DEFAULT_RESERVATION_TTL,
    DEFAULT_TOKEN_TTL,
};
mod schema;

pub use schema::*;
