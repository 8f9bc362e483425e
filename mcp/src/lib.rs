//! The Model Context Protocol fronts of the switchboard tool server, on the `rmcp` crate
//! (3.11: MCP revisions 2024-11-05 through 2026-07-28; the `initialize` handshake up to
//! 2025-11-25, `server/discover` from 2026-07-28).
//!
//! * [`http`]: streamable HTTP at `/mcp`, mounted by the composition root beside the tool
//!   server's API ([`switchboard_http::serve_with`]): the same connection loop, the same
//!   bearer tokens checked from the request head before any body is read, and every
//!   `tools/call` through the one pipeline ([`switchboard_engine::Core::call_observed`] in rmcp's
//!   handler; [`switchboard_engine::Core::call`] on the direct path `direct.rs` takes for a plain
//!   `tools/call`, which writes the same answer without rmcp's per-request machinery). `tools/list`
//!   is the caller's scope, generated from the registry. Stateless: no session is kept
//!   between requests, so a flood of `initialize` requests grows nothing.
//! * [`stdio`]: `switchboard mcp`, an MCP stdio server that forwards to a running switchboard
//!   over its HTTP API (`GET /v1/tools`, `POST /v1/call`) with `SWITCHBOARD_URL` and
//!   `SWITCHBOARD_TOKEN`: its `tools/list` is the remote caller's scope.
//!
//! Both describe a callable the same way ([`tool`]) and answer the same way: a success is
//! structured content (the callable's answer) plus the same JSON as text; a refusal or failure
//! is a tool result with `isError` and the typed error (`kind`, `code`, `message`,
//! `retryable`, `details`) as structured content ([`error_result`]). Only requests MCP itself
//! cannot route (an unknown method, a malformed `tools/call`) are JSON-RPC errors.
//!
//! The arrows point one way: this crate depends on the engine (`switchboard-engine`), the
//! HTTP front's request checks (`switchboard-http`, `switchboard-front`) and `protocol`; none
//! of them knows anything of MCP.

#![warn(missing_docs)]

mod convert;
mod direct;
pub mod http;
pub mod stdio;

pub use convert::{error_result, server_config, success_result, tool};

/// A tool-call id for a call whose client named none: `mcp-` and 128 random bits, so nobody
/// finds the call (or the approval it waits on) by guessing. `None` only when the system has
/// no randomness to give; the call then goes without one.
pub(crate) fn server_call_id() -> Option<String> {
    switchboard_engine::auth::random_hex(16)
        .map(|hex| format!("mcp-{hex}"))
        .ok()
}
