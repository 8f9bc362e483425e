//! The context a call carries: `x-switchboard-*` headers, filled by the `tools` CLI from the
//! `SWITCHBOARD_*` environment an agent run gets.

/// The request (agent run) a call belongs to.
pub const HEADER_REQUEST_ID: &str = "x-switchboard-request-id";
/// The default session for calls that don't name one.
pub const HEADER_SESSION_ID: &str = "x-switchboard-session-id";
/// Who is calling (`discord`, an agent host's name, ...), for logs and audit.
pub const HEADER_CLIENT: &str = "x-switchboard-client";
/// The directory files are read from and saved to.
pub const HEADER_CWD: &str = "x-switchboard-cwd";
/// The model's id for this tool call, for audit.
pub const HEADER_TOOL_CALL_ID: &str = "x-switchboard-tool-call-id";
/// The message that started the run (what `attachment.download` reads by default).
pub const HEADER_MESSAGE_ID: &str = "x-switchboard-message-id";
/// `POST /v1/call`: a client's key for one call, so a retry with it runs the call once
/// (the same key and input within 24 h answers the first answer again).
pub const HEADER_IDEMPOTENCY_KEY: &str = "idempotency-key";
/// On an answer replayed for a repeated idempotency key: `true`.
pub const HEADER_IDEMPOTENT_REPLAYED: &str = "idempotent-replayed";

/// Environment variables the CLI reads, and the headers they become.
pub const CONTEXT_ENV_HEADERS: [(&str, &str); 6] = [
    ("SWITCHBOARD_REQUEST_ID", HEADER_REQUEST_ID),
    ("SWITCHBOARD_SESSION_ID", HEADER_SESSION_ID),
    ("SWITCHBOARD_CLIENT", HEADER_CLIENT),
    ("SWITCHBOARD_CWD", HEADER_CWD),
    ("SWITCHBOARD_TOOL_CALL_ID", HEADER_TOOL_CALL_ID),
    ("SWITCHBOARD_MESSAGE_ID", HEADER_MESSAGE_ID),
];
/// The tool server's base URL.
pub const ENV_URL: &str = "SWITCHBOARD_URL";
/// The bearer token.
pub const ENV_TOKEN: &str = "SWITCHBOARD_TOKEN";
/// Where the CLI looks when `SWITCHBOARD_URL` is unset.
pub const DEFAULT_URL: &str = "http://127.0.0.1:7311";
