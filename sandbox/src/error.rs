//! The sandbox's typed error: a kind callers branch on, a message that says what to do next.

use crate::shell::ShellAnswer;

/// What went wrong, for callers that branch (the wiring maps these to the call's error codes).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
#[non_exhaustive]
pub enum SandboxErrorKind {
    /// The sandbox cannot run here (no `bwrap`, its probe failed, no process limit): nothing
    /// runs, never unsandboxed.
    Unavailable,
    /// The command ran past its timeout and was killed with its whole process group.
    Timeout,
    /// The session already runs its maximum of background commands.
    TooManyProcesses,
    /// No background command has this id.
    NoSuchProcess,
    /// A path or working directory would leave the workspace.
    OutsideWorkspace,
    /// A request that cannot be run as given (an empty command, a zero timeout, a bad name).
    BadRequest,
    /// `git` refused (not a repository, nothing to commit, a branch that exists).
    Git,
    /// No checkpoint to undo to.
    NoCheckpoint,
    /// The operating system refused something the sandbox needed (a pipe, a spawn, a file).
    Io,
}

/// An error of the sandbox.
#[derive(Debug, thiserror::Error)]
#[non_exhaustive]
pub enum SandboxError {
    #[error("the sandbox is unavailable: {reason}. {install}")]
    Unavailable {
        reason: String,
        /// What to install or change so that it works.
        install: String,
    },
    #[error("the command ran past its {seconds} s timeout and was killed; its output so far is in the details")]
    Timeout {
        seconds: u64,
        /// What the command printed before it was killed.
        output: Box<ShellAnswer>,
    },
    #[error("this session already runs {max} background commands; kill one (shell.kill) or wait for one to finish")]
    TooManyProcesses { max: usize },
    #[error("no background command has the id {id}; shell.list shows the ones this session has")]
    NoSuchProcess { id: String },
    #[error("{path} is outside the workspace {root}")]
    OutsideWorkspace { path: String, root: String },
    #[error("{0}")]
    BadRequest(String),
    #[error("git: {message}")]
    Git { message: String },
    #[error("no checkpoint to undo{}", run.as_ref().map(|r| format!(" for run {r}")).unwrap_or_default())]
    NoCheckpoint { run: Option<String> },
    #[error("{what}: {source}")]
    Io {
        what: String,
        #[source]
        source: std::io::Error,
    },
}

impl SandboxError {
    pub fn kind(&self) -> SandboxErrorKind {
        match self {
            Self::Unavailable { .. } => SandboxErrorKind::Unavailable,
            Self::Timeout { .. } => SandboxErrorKind::Timeout,
            Self::TooManyProcesses { .. } => SandboxErrorKind::TooManyProcesses,
            Self::NoSuchProcess { .. } => SandboxErrorKind::NoSuchProcess,
            Self::OutsideWorkspace { .. } => SandboxErrorKind::OutsideWorkspace,
            Self::BadRequest(_) => SandboxErrorKind::BadRequest,
            Self::Git { .. } => SandboxErrorKind::Git,
            Self::NoCheckpoint { .. } => SandboxErrorKind::NoCheckpoint,
            Self::Io { .. } => SandboxErrorKind::Io,
        }
    }

    pub(crate) fn io(what: impl Into<String>) -> impl FnOnce(std::io::Error) -> Self {
        let what = what.into();
        move |source| Self::Io { what, source }
    }

    pub(crate) fn unavailable(reason: impl Into<String>, install: impl Into<String>) -> Self {
        Self::Unavailable {
            reason: reason.into(),
            install: install.into(),
        }
    }
}
