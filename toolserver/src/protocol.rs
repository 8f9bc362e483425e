//! The wire protocol shared by the HTTP front and the `tools` CLI.
//!
//! * `GET /health` (no auth) → [`Health`].
//! * `GET /v1/tools` → `{"tools":[ToolEntry...]}`, only what the caller may call.
//! * `GET /v1/tools/{id}` → [`ToolDetail`].
//! * `POST /v1/call` with [`CallRequest`] → `{"ok":true,"value":...}` or [`ErrorBody`].
//!
//! Every route but `/health` takes `Authorization: Bearer <token>` and the context headers below.

use serde::{Deserialize, Serialize};
use serde_json::{Map, Value};

pub const HEADER_REQUEST_ID: &str = "x-switchboard-request-id";
pub const HEADER_SESSION_ID: &str = "x-switchboard-session-id";
pub const HEADER_CLIENT: &str = "x-switchboard-client";
pub const HEADER_CWD: &str = "x-switchboard-cwd";
pub const HEADER_TOOL_CALL_ID: &str = "x-switchboard-tool-call-id";
/// The message that started the run (what `attachment.download` reads by default).
pub const HEADER_MESSAGE_ID: &str = "x-switchboard-message-id";

/// Environment variables the CLI reads, and the headers they become.
pub const CONTEXT_ENV_HEADERS: [(&str, &str); 6] = [
    ("SWITCHBOARD_REQUEST_ID", HEADER_REQUEST_ID),
    ("SWITCHBOARD_SESSION_ID", HEADER_SESSION_ID),
    ("SWITCHBOARD_CLIENT", HEADER_CLIENT),
    ("SWITCHBOARD_CWD", HEADER_CWD),
    ("SWITCHBOARD_TOOL_CALL_ID", HEADER_TOOL_CALL_ID),
    ("SWITCHBOARD_MESSAGE_ID", HEADER_MESSAGE_ID),
];
pub const ENV_URL: &str = "SWITCHBOARD_URL";
pub const ENV_TOKEN: &str = "SWITCHBOARD_TOKEN";
pub const DEFAULT_URL: &str = "http://127.0.0.1:7311";

/// The body of `POST /v1/call`.
///
/// `input` is typed JSON. `args` holds command-line values as strings (`{"limit":"5"}`) and
/// `positional` the bare words; the server converts both using the callable's schema (the
/// primary field takes the positional words), so the CLI needs no schema and one round trip.
/// A field given in both `input` and `args` is a usage error.
#[derive(Debug, Clone, Default, Serialize, Deserialize, PartialEq)]
#[serde(deny_unknown_fields)]
pub struct CallRequest {
    pub tool: String,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub input: Option<Map<String, Value>>,
    #[serde(default, skip_serializing_if = "Map::is_empty")]
    pub args: Map<String, Value>,
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    pub positional: Vec<String>,
}

/// The kinds of failure, each with its HTTP status and CLI exit code.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash, Serialize, Deserialize)]
#[serde(rename_all = "snake_case")]
pub enum ErrorKind {
    Usage,
    Denied,
    NotFound,
    Conflict,
    Unavailable,
    Timeout,
    Cancelled,
    Internal,
}

impl ErrorKind {
    pub fn as_str(self) -> &'static str {
        match self {
            ErrorKind::Usage => "usage",
            ErrorKind::Denied => "denied",
            ErrorKind::NotFound => "not_found",
            ErrorKind::Conflict => "conflict",
            ErrorKind::Unavailable => "unavailable",
            ErrorKind::Timeout => "timeout",
            ErrorKind::Cancelled => "cancelled",
            ErrorKind::Internal => "internal",
        }
    }

    /// The CLI's exit code for this kind.
    pub fn exit_code(self) -> u8 {
        match self {
            ErrorKind::Internal => 1,
            ErrorKind::Usage => 2,
            ErrorKind::Denied => 3,
            ErrorKind::NotFound => 4,
            ErrorKind::Conflict => 5,
            ErrorKind::Unavailable => 6,
            ErrorKind::Timeout => 7,
            ErrorKind::Cancelled => 8,
        }
    }
}

/// `{"kind","code","message","retryable","details"}`.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct ErrorInfo {
    pub kind: ErrorKind,
    pub code: String,
    pub message: String,
    pub retryable: bool,
    #[serde(default)]
    pub details: Value,
}

/// `{"ok":false,"error":{...}}`.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct ErrorBody {
    pub ok: bool,
    pub error: ErrorInfo,
}

/// `GET /health`.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct Health {
    /// `ok` or `degraded`.
    pub status: String,
    /// `ready`, `connecting`, `down`, or `none` (no Discord behind this server).
    pub discord: String,
    pub version: String,
}

/// One callable as `GET /v1/tools` lists it.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
#[serde(rename_all = "camelCase")]
pub struct ToolEntry {
    pub id: String,
    pub description: String,
    pub input_schema: Value,
    pub mutating: bool,
    /// The field that bare command-line words fill (`text` for send), if any.
    #[serde(default)]
    pub primary: Option<String>,
}

/// An example invocation, as CLI words and as JSON input.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct Example {
    pub description: String,
    pub cli: String,
    pub input: Value,
}

/// `GET /v1/tools/{id}`.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
#[serde(rename_all = "camelCase")]
pub struct ToolDetail {
    #[serde(flatten)]
    pub entry: ToolEntry,
    pub help: String,
    pub examples: Vec<Example>,
}
