//! The switchboard wire contract, shared by the tool server, the `tools` CLI and every other
//! client: nothing here does I/O.
//!
//! * `GET /health` (no auth) → [`Health`].
//! * `GET /v1/tools` → `{"tools":[ToolEntry...]}`, only what the caller may call.
//! * `GET /v1/tools/{id}` → [`ToolDetail`].
//! * `POST /v1/call` with [`CallRequest`] → `{"ok":true,"value":...}` or [`ErrorBody`].
//! * `POST /v1/batch` with [`BatchRequest`] → `{"ok":true,"value":{"results":[...]}}`.
//!
//! Every route but `/health` takes `Authorization: Bearer <token>` and the context headers in
//! [`context`]. Every route, with or without a token, wants a `Host` naming the server (its
//! bind address, `localhost`, `127.0.0.1`, `[::1]`, or `toolserver.allowed_hosts`), no
//! `Origin` of another site, and on a POST `Content-Type: application/json`: else
//! `host_not_allowed` / `cross_origin` (403) or `unsupported_media_type` (415). A failure's [`ErrorKind`] picks the HTTP status and the CLI's exit code; its
//! [`ErrorCode`] is a stable name to match on. Discord ids are [`Snowflake`]s, strings on the
//! wire.
//!
//! ```
//! use protocol::{CallRequest, ErrorBody, ErrorCode, ErrorKind};
//! let request: CallRequest =
//!     serde_json::from_str(r##"{"tool":"surface.messages.list","input":{"sessionId":"#ops"}}"##)
//!         .unwrap();
//! assert_eq!(request.tool, "surface.messages.list");
//! let answer: ErrorBody = serde_json::from_str(
//!     r#"{"ok":false,"error":{"kind":"denied","code":"out_of_scope","message":"no","retryable":false}}"#,
//! )
//! .unwrap();
//! assert_eq!(answer.error.kind, ErrorKind::Denied);
//! assert_eq!(answer.error.code, ErrorCode::OutOfScope);
//! assert_eq!(answer.error.kind.exit_code(), 3);
//! ```

#![warn(missing_docs)]

mod batch;
pub mod context;
mod error;
mod snowflake;
mod wire;

pub use batch::{BatchRequest, DEFAULT_BATCH_CONCURRENCY, MAX_BATCH_CALLS};
pub use error::{ErrorBody, ErrorCode, ErrorInfo, ErrorKind};
pub use snowflake::{parse_digits, Snowflake, SnowflakeError, DISCORD_EPOCH_MS};
pub use wire::{CallRequest, Effects, Example, Health, ShardHealth, ToolDetail, ToolEntry};
