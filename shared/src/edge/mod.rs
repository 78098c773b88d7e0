//! The API Gateway edge: what a WebSocket or HTTP event's authorizer context says (tenant,
//! session, connection, limits, ticket), and how an answer becomes API Gateway's response.
//! Imports only concepts below it; the handlers and `crate::function` use it.

pub mod context;
pub mod respond;
