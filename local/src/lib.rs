//! The local stack: the parts of AWS that Turnstile's functions meet in production (API Gateway's
//! WebSocket and HTTP APIs, the `@connections` Management API, DynamoDB Streams → Lambda, EventBridge
//! rules), reproduced on loopback so the real handlers run unchanged against DynamoDB Local.

pub mod eventbridge;
pub mod http_api;
pub mod lambda;
pub mod management;
pub mod stack;
pub mod stream_bridge;
pub mod websocket;
