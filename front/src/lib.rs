//! What every HTTP front of switchboard shares (the API in `switchboard-http`, the console in
//! `switchboard-console`, MCP over HTTP): a [`ToolError`](switchboard_engine::ToolError) as an
//! HTTP answer ([`ApiError`]), and the engine's events as Server-Sent Events ([`sse`]).

#![warn(missing_docs)]

mod api_error;
pub mod sse;

pub use api_error::{error_response, ApiError};
