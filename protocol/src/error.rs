//! Failures on the wire: the kind (which picks the HTTP status and the CLI's exit code), the
//! machine-readable code, and the `{"ok":false,"error":{...}}` body.

use std::fmt;

use serde::{Deserialize, Deserializer, Serialize, Serializer};
use serde_json::Value;

/// The kinds of failure, each with its HTTP status and CLI exit code.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash, Serialize, Deserialize)]
#[serde(rename_all = "snake_case")]
pub enum ErrorKind {
    /// The request is wrong; fix it before retrying (HTTP 400, exit 2).
    Usage,
    /// Not allowed (HTTP 401/403, exit 3).
    Denied,
    /// Nothing by that name (HTTP 404, exit 4).
    NotFound,
    /// The state forbids it, such as a finished workflow (HTTP 409, exit 5).
    Conflict,
    /// Try again later: rate limits, Discord or a dependency down (HTTP 429/503, exit 6).
    Unavailable,
    /// It took too long; it may still complete (HTTP 504, exit 7).
    Timeout,
    /// Someone stopped it (HTTP 499, exit 8).
    Cancelled,
    /// A bug or an unexpected failure (HTTP 500, exit 1).
    Internal,
}

impl ErrorKind {
    /// The snake_case name, as on the wire.
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

    /// Whether retrying the same request can help.
    pub fn retryable(self) -> bool {
        matches!(self, ErrorKind::Unavailable | ErrorKind::Timeout)
    }
}

macro_rules! error_codes {
    ($($(#[$doc:meta])* $variant:ident = $text:literal,)*) => {
        /// A stable, machine-readable name for a failure (`unknown_session`), serialized as its
        /// snake_case string. Codes this build does not know (from a newer server) are kept as
        /// [`ErrorCode::Other`].
        #[derive(Debug, Clone, PartialEq, Eq, Hash)]
        #[non_exhaustive]
        pub enum ErrorCode {
            $($(#[$doc])* $variant,)*
            /// A code this build does not know.
            Other(String),
        }

        impl ErrorCode {
            /// The code as on the wire.
            pub fn as_str(&self) -> &str {
                match self {
                    $(ErrorCode::$variant => $text,)*
                    ErrorCode::Other(text) => text,
                }
            }

            /// The code for a wire string.
            pub fn parse(text: &str) -> ErrorCode {
                match text {
                    $($text => ErrorCode::$variant,)*
                    other => ErrorCode::Other(other.to_owned()),
                }
            }

            /// Every code this build knows (not [`ErrorCode::Other`]).
            pub const KNOWN: &'static [ErrorCode] = &[$(ErrorCode::$variant,)*];
        }
    };
}

error_codes! {
    // Authentication and scope.
    /// No token was sent.
    MissingToken = "missing_token",
    /// The token is not valid here (revoked, never issued, another server's).
    InvalidToken = "invalid_token",
    /// The capability token's run is over.
    TokenExpired = "token_expired",
    /// The callable exists but is outside the caller's scope.
    OutOfScope = "out_of_scope",
    /// A header tried to change what a capability token is bound to.
    ContextOverride = "context_override",
    /// A permission rule (or `permissions.default`) denies the call.
    PermissionDenied = "permission_denied",
    /// An approver denied the call.
    ApprovalDenied = "approval_denied",
    /// Nobody approved the call in time.
    ApprovalExpired = "approval_expired",
    /// A before-hook refused the call.
    HookDenied = "hook_denied",
    /// A hook failed (with `hooks.on_error = "deny"`).
    HookFailed = "hook_failed",
    /// Only the operator may do this.
    OperatorOnly = "operator_only",
    /// Nobody decides an ask their own call or run waits on (`permissions.allow_self_approval`).
    SelfApproval = "self_approval",
    /// Only the approvers in `permissions.approvers` decide asks in Discord.
    NotApprover = "not_approver",
    /// Only `discord.admins` change a session's tools in Discord.
    NotAdmin = "not_admin",
    /// No pending approval has that id (never asked, decided already, or expired).
    UnknownApproval = "unknown_approval",
    /// The request's `Host` is not this server's (DNS rebinding protection).
    HostNotAllowed = "host_not_allowed",
    /// A web page of another origin sent the request (its `Origin` or `Sec-Fetch-Site`).
    CrossOrigin = "cross_origin",
    // Runs.
    /// The call's agent run was aborted (`/abort`, the console) or stopped: nothing was done.
    RunAborted = "run_aborted",
    /// The call's agent run ended while the call waited (for an approval): nothing was done.
    RunEnded = "run_ended",
    /// No agent is configured, so there are no runs to list or stop.
    NoAgent = "no_agent",
    /// No run is running there (or none has that id): nothing was stopped.
    NothingRunning = "nothing_running",
    /// The running run is another person's: only they or an admin (`discord.admins`) stop it.
    NotYourRun = "not_your_run",
    // The request itself.
    /// The body is not the call envelope.
    BadRequest = "bad_request",
    /// The body cannot be read.
    BadBody = "bad_body",
    /// The body is over the size limit.
    BodyTooLarge = "body_too_large",
    /// The `Idempotency-Key` header is not 1 to 255 visible ASCII characters.
    BadIdempotencyKey = "bad_idempotency_key",
    /// The idempotency key was used (within 24 h) for a call with another tool or input.
    IdempotencyKeyReused = "idempotency_key_reused",
    /// A call with this idempotency key is still running (or its server stopped while it
    /// ran): it is not run again.
    IdempotencyKeyInFlight = "idempotency_key_in_flight",
    /// The body is not declared as JSON (`Content-Type: application/json`).
    UnsupportedMediaType = "unsupported_media_type",
    /// The body did not arrive in time.
    BodyTimeout = "body_timeout",
    /// No such route.
    UnknownRoute = "unknown_route",
    /// A batch holds more calls than the server takes at once.
    TooManyCalls = "too_many_calls",
    /// No callable with that id.
    UnknownTool = "unknown_tool",
    /// The input does not match the callable's schema or rules.
    InvalidInput = "invalid_input",
    /// A field was given twice (input and flags).
    DuplicateField = "duplicate_field",
    /// `text` is empty.
    EmptyText = "empty_text",
    /// The edited text is over Discord's limit.
    TextTooLong = "text_too_long",
    /// The send would need more messages than `toolserver.max_parts_per_send`.
    TooManyParts = "too_many_parts",
    /// Not a usable emoji.
    InvalidEmoji = "invalid_emoji",
    // Sessions, messages, users.
    /// No session given and none in the context.
    NoSession = "no_session",
    /// The session reference names nothing.
    UnknownSession = "unknown_session",
    /// Discord has no such channel, or the bot cannot see it.
    UnknownChannel = "unknown_channel",
    /// The message is not cached in that session.
    UnknownMessage = "unknown_message",
    /// No such user.
    UnknownUser = "unknown_user",
    /// No trigger message in this call's context.
    NoMessage = "no_message",
    /// The allowlist refuses the channel.
    ChannelNotAllowed = "channel_not_allowed",
    /// The allowlist is empty: everything is refused.
    AllowlistEmpty = "allowlist_empty",
    /// Only the bot's own messages can be edited.
    NotOwnMessage = "not_own_message",
    /// The thread is archived and locked: only a moderator can reopen it.
    ThreadLocked = "thread_locked",
    // Rate limits and capacity.
    /// Too many calls from this caller.
    RateLimited = "rate_limited",
    /// Too many changes to this channel.
    ChannelRateLimited = "channel_rate_limited",
    /// More messages than the channel's burst allows at once.
    OverChannelBurst = "over_channel_burst",
    /// The server is at its concurrent call limit.
    Busy = "busy",
    /// The call took too long.
    Timeout = "timeout",
    // Files.
    /// This call has no working directory.
    NoCwd = "no_cwd",
    /// The working directory cannot be used.
    BadCwd = "bad_cwd",
    /// A path cannot be read or created.
    BadPath = "bad_path",
    /// A path leaves the run's working directory.
    PathOutsideCwd = "path_outside_cwd",
    /// A path is not a regular file.
    NotAFile = "not_a_file",
    /// More files than one message carries.
    TooManyFiles = "too_many_files",
    /// One file is over the per-file limit.
    FileTooLarge = "file_too_large",
    /// The files are over the per-send limit together.
    FilesTooLarge = "files_too_large",
    /// A downloaded file could not be saved.
    SaveFailed = "save_failed",
    // Workflows.
    /// No agent bridge, so no workflows.
    WorkflowsUnavailable = "workflows_unavailable",
    /// No such workflow.
    UnknownWorkflow = "unknown_workflow",
    /// The workflow already finished.
    WorkflowFinished = "workflow_finished",
    /// Too many workflows are waiting.
    TooManyWorkflows = "too_many_workflows",
    /// The store refused a write.
    StoreUnavailable = "store_unavailable",
    // The operator console.
    /// No console login (never logged in, logged out, or expired): log in again. (The wire
    /// name predates "session" meaning a Discord channel only; clients branch on it.)
    ConsoleSession = "console_session",
    /// A console change without the session's CSRF token or from another origin.
    CsrfRefused = "csrf_refused",
    /// The console may not decide approvals (`permissions.console_approves = false`): an
    /// approver answers in Discord.
    ConsoleApprovalsOff = "console_approvals_off",
    // Discord.
    /// Discord has no such thing.
    NotFound = "not_found",
    /// Discord refused (missing permission, ...).
    DiscordDenied = "discord_denied",
    /// Discord is rate limiting this action.
    DiscordRateLimited = "discord_rate_limited",
    /// Discord refused the input.
    DiscordRejected = "discord_rejected",
    /// Discord is unreachable or failing.
    DiscordUnavailable = "discord_unavailable",
    /// The action conflicts with Discord's state.
    Conflict = "conflict",
    // The `tools` CLI's own failures.
    /// A flag the CLI does not take, or a malformed one.
    BadOption = "bad_option",
    /// A `--field` flag that is malformed.
    BadFlag = "bad_flag",
    /// A flag without its value.
    MissingValue = "missing_value",
    /// `--input` is not usable.
    BadInput = "bad_input",
    /// Text that should be JSON is not.
    BadJson = "bad_json",
    /// No callable id given.
    MissingTool = "missing_tool",
    /// The server URL is not usable.
    BadUrl = "bad_url",
    /// A `SWITCHBOARD_*` variable is not usable.
    BadEnvironment = "bad_environment",
    /// The server's answer is not the protocol's.
    BadResponse = "bad_response",
    /// Nothing listens at the server URL.
    Unreachable = "unreachable",
    /// The connection broke mid-answer.
    ConnectionLost = "connection_lost",
    /// The CLI gave up waiting.
    ClientTimeout = "client_timeout",
    /// Bare words for a callable without a primary field.
    UnexpectedPositional = "unexpected_positional",
    /// A value for a flag that takes none.
    UnexpectedValue = "unexpected_value",
    /// A word the CLI does not understand.
    UnexpectedArgument = "unexpected_argument",
    /// An option the CLI does not know.
    UnknownOption = "unknown_option",
    /// A field the callable does not take.
    UnknownField = "unknown_field",
    // Operating the service.
    /// The config file has problems (each listed in `details.problems`); the config in force
    /// did not change.
    InvalidConfig = "invalid_config",
    /// This server cannot reload its config (it was not started from a config file).
    ReloadUnavailable = "reload_unavailable",
    // The agent's workspace.
    /// The workspace is off (no `[workspace]` in the config).
    WorkspaceOff = "workspace_off",
    /// The sandbox cannot run commands here (no `bwrap`, its probe failed); nothing runs
    /// unsandboxed. The message says what to install.
    SandboxUnavailable = "sandbox_unavailable",
    /// A path leaves the workspace (absolute elsewhere, `..` past its root, a symlink out).
    OutsideWorkspace = "outside_workspace",
    /// The path does not exist in the workspace.
    NoSuchPath = "no_such_path",
    /// A directory where a file was needed, or the other way round.
    WrongType = "wrong_type",
    /// `fs.edit`'s text was not found, not even ignoring whitespace and indentation.
    NoMatch = "no_match",
    /// `fs.edit`'s text occurs more than once (`details.locations` lists where).
    NotUnique = "not_unique",
    /// The session runs its maximum of background commands (`workspace.max_processes`).
    TooManyProcesses = "too_many_processes",
    /// No background command has this id.
    NoSuchProcess = "no_such_process",
    /// `git` refused (not a repository, nothing to commit, a branch that exists).
    GitFailed = "git_failed",
    /// No checkpoint to undo to.
    NoCheckpoint = "no_checkpoint",
    // Agents.
    /// A model's tool call arguments are not JSON.
    InvalidArguments = "invalid_arguments",
    /// Anything unexpected: a bug, or a failure nothing else names.
    Internal = "internal",
}

impl fmt::Display for ErrorCode {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(self.as_str())
    }
}

impl PartialEq<&str> for ErrorCode {
    fn eq(&self, other: &&str) -> bool {
        self.as_str() == *other
    }
}

impl PartialEq<str> for ErrorCode {
    fn eq(&self, other: &str) -> bool {
        self.as_str() == other
    }
}

impl Serialize for ErrorCode {
    fn serialize<S: Serializer>(&self, serializer: S) -> Result<S::Ok, S::Error> {
        serializer.serialize_str(self.as_str())
    }
}

impl<'de> Deserialize<'de> for ErrorCode {
    fn deserialize<D: Deserializer<'de>>(deserializer: D) -> Result<Self, D::Error> {
        let text = std::borrow::Cow::<str>::deserialize(deserializer)?;
        Ok(ErrorCode::parse(&text))
    }
}

/// `{"kind","code","message","retryable","details"}`.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct ErrorInfo {
    /// Which kind of failure.
    pub kind: ErrorKind,
    /// Its stable name.
    pub code: ErrorCode,
    /// One sentence saying what went wrong and what to do.
    pub message: String,
    /// True only when retrying can help.
    pub retryable: bool,
    /// Structured facts (the field, the suggestion, `retryAfterMs`, ...).
    #[serde(default)]
    pub details: Value,
}

/// `{"ok":false,"error":{...}}`.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct ErrorBody {
    /// Always false.
    pub ok: bool,
    /// What went wrong.
    pub error: ErrorInfo,
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn codes_round_trip_as_their_snake_case_strings() {
        for code in ErrorCode::KNOWN {
            let json = serde_json::to_string(code).unwrap();
            assert_eq!(json, format!("\"{}\"", code.as_str()));
            assert_eq!(&serde_json::from_str::<ErrorCode>(&json).unwrap(), code);
            assert!(
                code.as_str()
                    .bytes()
                    .all(|b| b.is_ascii_lowercase() || b == b'_'),
                "{code}"
            );
        }
    }

    #[test]
    fn codes_are_unique() {
        let mut seen = std::collections::HashSet::new();
        for code in ErrorCode::KNOWN {
            assert!(seen.insert(code.as_str()), "{code} twice");
        }
    }

    #[test]
    fn an_unknown_code_is_kept() {
        let code: ErrorCode = serde_json::from_str("\"from_the_future\"").unwrap();
        assert_eq!(code, ErrorCode::Other("from_the_future".into()));
        assert_eq!(serde_json::to_string(&code).unwrap(), "\"from_the_future\"");
    }
}
