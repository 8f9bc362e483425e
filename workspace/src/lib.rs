//! An agent's workspace: one directory per session, its files read, written, edited, globbed
//! and grepped by the service (with every path confined to it), its shell and git run in the
//! sandbox (`switchboard-sandbox`), its changes checkpointed and undone.
//!
//! [`Workspace`] is what the `fs.*`, `shell.*`, `git.*` and `workspace.undo` callables call:
//! each request and answer is a serde struct in the callables' camelCase field names.
//!
//! ```no_run
//! # async fn demo(sandbox: std::sync::Arc<switchboard_sandbox::Sandbox>) -> Result<(), switchboard_workspace::WorkspaceError> {
//! use switchboard_workspace::{Workspace, WorkspaceOptions, ReadRequest, EditRequest};
//!
//! let workspace = Workspace::open("/srv/agent/1234".as_ref(), WorkspaceOptions::default(), sandbox.into())?;
//! let read = workspace.read(ReadRequest { path: "src/main.rs".into(), ..Default::default() }).await?;
//! let edit = workspace
//!     .edit(EditRequest { path: "src/main.rs".into(), old: "a()".into(), new: "b()".into(), replace_all: false })
//!     .await?;
//! println!("{}", edit.diff);
//! # Ok(()) }
//! ```
//!
//! Files are read and written by the service itself, not in the sandbox: the path rules of
//! [`paths`] are the wall there (the same rule as the attachment sandbox, plus descriptor
//! checks that a symlink swapped in after the check cannot get around). Everything that runs
//! a program — the shell, git, the checkpoints — runs in the sandbox: the shell and git in the
//! session's own long-lived one (`switchboard_sandbox::SessionSandbox`, started at the first
//! command, stopped when idle or when the workspace is dropped), the checkpoints in one of
//! their own (they write the shadow repository, which the session's commands must not reach).
//! When the sandbox is unavailable, those answer `unavailable` and the file operations still
//! work.
//!
//! Why a crate of its own beside `switchboard-sandbox`: the sandbox runs programs and knows
//! nothing of reading or editing files; the rule engine and the callables that only read need
//! no bubblewrap.

mod edit;
mod error;
mod fs;
pub mod paths;
mod search;

use std::path::{Path, PathBuf};
use std::sync::Arc;
use std::time::Duration;

pub use edit::{
    apply as apply_edit, unified_diff, EditAnswer, EditRequest, Strategy, BLOCK_SIMILARITY,
    MAX_EDIT_BYTES,
};
pub use error::{Location, WorkspaceError, WorkspaceErrorKind};
pub use fs::{
    Binary, ChangeKind, Entry, ListAnswer, ListRequest, ReadAnswer, ReadRequest, WriteAnswer,
    WriteRequest, MAX_LIST,
};
pub use paths::{Resolved, Root};
pub use search::{GlobAnswer, GlobRequest, GrepAnswer, GrepMatch, GrepRequest, MAX_GLOB, MAX_GREP};
use switchboard_sandbox::{
    BranchAnswer, Checkpoints, CommitAnswer, DiffAnswer, Git, LogAnswer, OutputLimits, Sandbox,
    SandboxError, ShellEvents, ShellOptions, ShellSession, StatusAnswer, UndoAnswer,
};

/// The workspace settings (`[workspace]`).
#[derive(Debug, Clone)]
pub struct WorkspaceOptions {
    /// Output bounds of `fs.read` (head) and of commands (tail).
    pub output: OutputLimits,
    pub shell: ShellOptions,
    /// Where the checkpoints' shadow repository lives (outside the workspace); `None` turns
    /// checkpoints off.
    pub checkpoints: Option<PathBuf>,
    /// How long a glob or grep may walk before it answers with what it found.
    pub search_deadline: Duration,
}

impl Default for WorkspaceOptions {
    fn default() -> Self {
        Self {
            output: OutputLimits::default(),
            shell: ShellOptions::default(),
            checkpoints: None,
            search_deadline: Duration::from_secs(30),
        }
    }
}

/// The sandbox as the probe left it: ready, or why not and what to install.
#[derive(Debug, Clone)]
pub enum SandboxState {
    Ready(Arc<Sandbox>),
    Unavailable { reason: String, install: String },
}

impl From<Arc<Sandbox>> for SandboxState {
    fn from(sandbox: Arc<Sandbox>) -> Self {
        Self::Ready(sandbox)
    }
}

impl From<&SandboxError> for SandboxState {
    fn from(error: &SandboxError) -> Self {
        match error {
            SandboxError::Unavailable { reason, install } => Self::Unavailable {
                reason: reason.clone(),
                install: install.clone(),
            },
            other => Self::Unavailable {
                reason: other.to_string(),
                install: "See the sandbox probe's message at start.".into(),
            },
        }
    }
}

/// One session's workspace.
pub struct Workspace {
    root: Root,
    options: WorkspaceOptions,
    state: SandboxState,
    shell: Option<ShellSession>,
    git: Option<Git>,
    checkpoints: Option<Checkpoints>,
}

impl std::fmt::Debug for Workspace {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("Workspace")
            .field("root", &self.root)
            .finish_non_exhaustive()
    }
}

/// Runs blocking file work off the async threads.
async fn blocking<T: Send + 'static>(
    work: impl FnOnce() -> Result<T, WorkspaceError> + Send + 'static,
) -> Result<T, WorkspaceError> {
    tokio::task::spawn_blocking(work)
        .await
        .map_err(|e| WorkspaceError::Io {
            what: "a file operation stopped".into(),
            source: std::io::Error::other(e),
        })?
}

impl Workspace {
    /// Opens the workspace at `root` (made when missing).
    pub fn open(
        root: &Path,
        options: WorkspaceOptions,
        sandbox: SandboxState,
    ) -> Result<Self, WorkspaceError> {
        Self::open_with_events(root, options, sandbox, None)
    }

    /// [`Workspace::open`], telling `events` when each of its shell commands starts and ends
    /// (the service publishes them as `shell.started` / `shell.exited`).
    pub fn open_with_events(
        root: &Path,
        options: WorkspaceOptions,
        sandbox: SandboxState,
        events: Option<Arc<dyn ShellEvents>>,
    ) -> Result<Self, WorkspaceError> {
        std::fs::create_dir_all(root).map_err(WorkspaceError::io(format!(
            "cannot make {}",
            root.display()
        )))?;
        let root = Root::new(root)?;
        let (shell, git, checkpoints) = match &sandbox {
            SandboxState::Ready(sandbox) => {
                let mut shell = ShellSession::new(Arc::clone(sandbox), root.path(), options.shell)?;
                if let Some(events) = events {
                    shell = shell.with_events(events);
                }
                // git runs in the session's sandbox, beside the shell's commands.
                let git = Git::in_session(Arc::clone(shell.session()), options.output);
                let checkpoints = options
                    .checkpoints
                    .as_deref()
                    .map(|dir| Checkpoints::new(Arc::clone(sandbox), root.path(), dir))
                    .transpose()?;
                (Some(shell), Some(git), checkpoints)
            }
            SandboxState::Unavailable { .. } => (None, None, None),
        };
        Ok(Self {
            root,
            options,
            state: sandbox,
            shell,
            git,
            checkpoints,
        })
    }

    pub fn root(&self) -> &Root {
        &self.root
    }

    fn unavailable(&self) -> WorkspaceError {
        match &self.state {
            SandboxState::Unavailable { reason, install } => SandboxError::Unavailable {
                reason: reason.clone(),
                install: install.clone(),
            }
            .into(),
            SandboxState::Ready(_) => {
                WorkspaceError::BadRequest("checkpoints are off for this workspace".into())
            }
        }
    }

    /// `fs.read`.
    pub async fn read(&self, request: ReadRequest) -> Result<ReadAnswer, WorkspaceError> {
        let (root, limits) = (self.root.clone(), self.options.output);
        blocking(move || fs::read(&root, &limits, &request)).await
    }

    /// `fs.write`.
    pub async fn write(&self, request: WriteRequest) -> Result<WriteAnswer, WorkspaceError> {
        let root = self.root.clone();
        blocking(move || fs::write(&root, &request)).await
    }

    /// `fs.edit`.
    pub async fn edit(&self, request: EditRequest) -> Result<EditAnswer, WorkspaceError> {
        let root = self.root.clone();
        blocking(move || edit::edit(&root, &request)).await
    }

    /// `fs.list`.
    pub async fn list(&self, request: ListRequest) -> Result<ListAnswer, WorkspaceError> {
        let root = self.root.clone();
        blocking(move || fs::list(&root, &request)).await
    }

    /// `fs.glob`.
    pub async fn glob(&self, request: GlobRequest) -> Result<GlobAnswer, WorkspaceError> {
        let (root, deadline) = (self.root.clone(), self.options.search_deadline);
        blocking(move || search::glob(&root, &request, deadline)).await
    }

    /// `fs.grep`.
    pub async fn grep(&self, request: GrepRequest) -> Result<GrepAnswer, WorkspaceError> {
        let (root, deadline) = (self.root.clone(), self.options.search_deadline);
        blocking(move || search::grep(&root, &request, deadline)).await
    }

    /// The session's shell (`shell.run`, `shell.output`, `shell.list`, `shell.kill`).
    pub fn shell(&self) -> Result<&ShellSession, WorkspaceError> {
        self.shell.as_ref().ok_or_else(|| self.unavailable())
    }

    fn git(&self) -> Result<&Git, WorkspaceError> {
        self.git.as_ref().ok_or_else(|| self.unavailable())
    }

    /// `git.status`.
    pub async fn git_status(&self) -> Result<StatusAnswer, WorkspaceError> {
        Ok(self.git()?.status().await?)
    }

    /// `git.diff {staged?, path?}` (`path` resolved inside the workspace first).
    pub async fn git_diff(
        &self,
        staged: bool,
        path: Option<&str>,
    ) -> Result<DiffAnswer, WorkspaceError> {
        let path = path.map(|p| self.root.resolve(p)).transpose()?;
        Ok(self
            .git()?
            .diff(staged, path.as_ref().map(|p| p.relative.as_str()))
            .await?)
    }

    /// `git.log {limit?}`.
    pub async fn git_log(&self, limit: Option<usize>) -> Result<LogAnswer, WorkspaceError> {
        Ok(self.git()?.log(limit).await?)
    }

    /// `git.commit {message, all?}`.
    pub async fn git_commit(
        &self,
        message: &str,
        all: bool,
    ) -> Result<CommitAnswer, WorkspaceError> {
        Ok(self.git()?.commit(message, all).await?)
    }

    /// `git.branch {name?, switch?}`.
    pub async fn git_branch(
        &self,
        name: Option<&str>,
        switch: bool,
    ) -> Result<BranchAnswer, WorkspaceError> {
        Ok(self.git()?.branch(name, switch).await?)
    }

    fn checkpoints(&self) -> Result<&Checkpoints, WorkspaceError> {
        self.checkpoints.as_ref().ok_or_else(|| self.unavailable())
    }

    /// Call before a run's first change (an `fs.write`, `fs.edit`, `shell.run`, `git.*` that
    /// writes): takes the run's checkpoint once. Answers whether one was taken now.
    pub async fn before_change(&self, run: &str) -> Result<bool, WorkspaceError> {
        Ok(self.checkpoints()?.before_change(run).await?)
    }

    /// Call when a run ends, so that an undo touches only what the run changed.
    pub async fn after_run(&self, run: &str) -> Result<(), WorkspaceError> {
        Ok(self.checkpoints()?.after_run(run).await?)
    }

    /// `workspace.undo {run?}`.
    pub async fn undo(&self, run: Option<&str>) -> Result<UndoAnswer, WorkspaceError> {
        Ok(self.checkpoints()?.undo(run).await?)
    }
}
