//! Turnstile's local stack pieces. Today: [`management`], a local API Gateway Management API
//! (`POST/GET/DELETE /@connections/{id}`) that the real `aws-sdk-apigatewaymanagement` client talks
//! to. The local WebSocket server (`turnstile dev`) plugs its live sockets in through
//! [`management::Connections`]; tests use the recording [`management::Recorder`].

pub mod management;

pub use management::{Connections, ManagementApi, Received, Recorder};
