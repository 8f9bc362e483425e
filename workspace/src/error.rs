//! The workspace's typed error: a kind callers branch on, a message that says what to do next.

use serde::Serialize;
use switchboard_sandbox::SandboxError;

/// What went wrong, for callers that branch on it.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
#[non_exhaustive]
pub enum WorkspaceErrorKind {
    /// The path is outside the workspace (absolute elsewhere, `..` past the root, a symlink
    /// leading out).
    OutsideWorkspace,
    NotFound,
    /// `fs.edit`'s text matches in more than one place.
    NotUnique,
    /// `fs.edit`'s text matches nowhere, even with the fallbacks.
    NoMatch,
    /// A directory where a file was needed, or the other way round.
    WrongType,
    /// A file too large for the operation, or not text where text is needed.
    Unsupported,
    /// A request that cannot be carried out as given.
    BadRequest,
    /// The sandbox cannot run commands here.
    Unavailable,
    /// A command ran past its timeout.
    Timeout,
    /// The session runs its maximum of background commands.
    TooManyProcesses,
    /// Anything else the sandbox refused (git, a missing background command, no checkpoint).
    Sandbox,
    Io,
}

/// Where a non-unique edit matched.
#[derive(Debug, Clone, PartialEq, Eq, Serialize)]
#[serde(rename_all = "camelCase")]
#[cfg_attr(feature = "schema", derive(schemars::JsonSchema))]
pub struct Location {
    /// 1-based line where the match starts.
    pub line: usize,
    /// The matched text's first line, trimmed (at most 120 characters).
    pub preview: String,
}

/// An error of the workspace.
#[derive(Debug, thiserror::Error)]
#[non_exhaustive]
pub enum WorkspaceError {
    #[error("{path} is outside the workspace; use a path inside it (relative to its root)")]
    OutsideWorkspace { path: String },
    #[error("{path} does not exist")]
    NotFound { path: String },
    #[error("the text to replace occurs {} times in {path} (lines {}); give more surrounding lines so it occurs once, or set replaceAll", locations.len(), locations.iter().map(|l| l.line.to_string()).collect::<Vec<_>>().join(", "))]
    NotUnique {
        path: String,
        locations: Vec<Location>,
    },
    #[error("the text to replace was not found in {path}, not even ignoring whitespace and indentation; read the file again and copy the exact lines")]
    NoMatch { path: String },
    #[error("{path} is {what}")]
    WrongType { path: String, what: &'static str },
    #[error("{0}")]
    Unsupported(String),
    #[error("{0}")]
    BadRequest(String),
    #[error(transparent)]
    Sandbox(#[from] SandboxError),
    #[error("{what}: {source}")]
    Io {
        what: String,
        #[source]
        source: std::io::Error,
    },
}

impl WorkspaceError {
    pub fn kind(&self) -> WorkspaceErrorKind {
        use switchboard_sandbox::SandboxErrorKind as S;
        match self {
            Self::OutsideWorkspace { .. } => WorkspaceErrorKind::OutsideWorkspace,
            Self::NotFound { .. } => WorkspaceErrorKind::NotFound,
            Self::NotUnique { .. } => WorkspaceErrorKind::NotUnique,
            Self::NoMatch { .. } => WorkspaceErrorKind::NoMatch,
            Self::WrongType { .. } => WorkspaceErrorKind::WrongType,
            Self::Unsupported(_) => WorkspaceErrorKind::Unsupported,
            Self::BadRequest(_) => WorkspaceErrorKind::BadRequest,
            Self::Sandbox(error) => match error.kind() {
                S::Unavailable => WorkspaceErrorKind::Unavailable,
                S::Timeout => WorkspaceErrorKind::Timeout,
                S::TooManyProcesses => WorkspaceErrorKind::TooManyProcesses,
                S::OutsideWorkspace => WorkspaceErrorKind::OutsideWorkspace,
                S::BadRequest => WorkspaceErrorKind::BadRequest,
                _ => WorkspaceErrorKind::Sandbox,
            },
            Self::Io { .. } => WorkspaceErrorKind::Io,
        }
    }

    pub(crate) fn io(what: impl Into<String>) -> impl FnOnce(std::io::Error) -> Self {
        let what = what.into();
        move |source| Self::Io { what, source }
    }
}
