//! The local stack: the parts of AWS that Turnstile's functions meet in production (API Gateway's
//! WebSocket and HTTP APIs, the `@connections` Management API, DynamoDB Streams → Lambda, EventBridge
//! rules), reproduced on loopback so the real handlers run unchanged against DynamoDB Local.
//!
//! [`management`] serves `POST/GET/DELETE /@connections/{id}` for the real
//! `aws-sdk-apigatewaymanagement` client; the WebSocket server ([`websocket`]) plugs its live sockets
//! in through [`management::Connections`], and tests use the recording [`management::Recorder`].

pub mod dashboard;
pub mod decide_api;
pub mod eventbridge;
pub mod functions;
pub mod host_check;
pub mod http_api;
pub mod lambda;
pub mod management;
pub mod secrets;
pub mod stack;
pub mod stream_bridge;
pub mod template;
pub mod websocket;

pub use management::{Connections, ManagementApi, Received, Recorder};
