//! The agent's workspaces as the callables see them: which directory a session works in, the
//! sandbox the service probed at start, each session's open [`Workspace`] (its shell, git and
//! checkpoints), and the runs that changed it.
//!
//! A session works in `ROOT/<session id>` (`[workspace] root`; a thread in its parent
//! channel's), or in the directory `[sessions.NAME] workspace` binds it to. The checkpoints of
//! every workspace live under `ROOT/.checkpoints/<session id>`, outside the workspace (the
//! sandbox hides the root from commands). The sandbox is probed once, by the composition root
//! ([`probe`], installed with [`crate::Core::install_sandbox`]); until then, and when the probe
//! failed, `shell.*`, `git.*` and `workspace.undo` answer `unavailable` with what to install —
//! never unsandboxed — while the `fs.*` callables, which the service runs itself with every
//! path confined, still work.

use std::collections::{HashMap, VecDeque};
use std::path::{Path, PathBuf};
use std::sync::{Arc, Mutex, OnceLock};
use std::time::Instant;

use entity::Snowflake;
use protocol::{ErrorCode, ErrorKind};
use serde_json::json;
use switchboard_config::WorkspaceConfig;
use switchboard_sandbox::{
    CommandLimits, HelperCommand, OutputLimits, Sandbox, SandboxError, SandboxOptions, ShellEvents,
    ShellExited, ShellOptions, ShellStarted,
};
use switchboard_workspace::{Workspace, WorkspaceError, WorkspaceErrorKind, WorkspaceOptions};

pub use switchboard_sandbox::helper::exec_main as sandbox_exec_main;
pub use switchboard_sandbox::HelperCommand as SandboxHelper;
pub use switchboard_workspace::SandboxState;

use crate::auth::Caller;
use crate::auth::{Capability, TokenEnd};
use crate::error::ToolError;
use crate::events::EventHub;
use crate::live::Settings;
use crate::surface::SessionKind;
use crate::surface::Target;

/// Workspaces open at once; past it the least recently used idle one is closed (its sandbox
/// stopped; its files stay).
const MAX_OPEN: usize = 256;
/// Runs remembered per workspace for `/undo`'s "who started it" check.
const MAX_RUNS: usize = 100;
/// Background commands remembered per run, to kill at its `/abort`.
const MAX_BACKGROUND: usize = 64;
/// Where the checkpoints live under the root.
const CHECKPOINTS: &str = ".checkpoints";

/// Probes the sandbox with the `[workspace]` settings: ready, or why not and what to install.
/// `hidden`: the service's own files (config, store) that commands must not see. Never falls
/// back to running unsandboxed.
pub async fn probe(
    config: &WorkspaceConfig,
    helper: Option<HelperCommand>,
    hidden: Vec<PathBuf>,
) -> SandboxState {
    let Some(helper) = helper.or_else(HelperCommand::discover) else {
        return SandboxState::Unavailable {
            reason: "the sandbox helper was not found".into(),
            install: "Install switchboard's binaries together, or set SWITCHBOARD_SANDBOX_EXEC to the switchboard-sandbox-exec program.".into(),
        };
    };
    let mut options = SandboxOptions::new(helper);
    options.network = config.network;
    options.env_passthrough.clone_from(&config.env_passthrough);
    options.hidden = hidden;
    // Every session's workspace and the checkpoints live under the root: a command sees its
    // own workspace only (it is bound after the hiding).
    if let Ok(root) = std::path::absolute(&config.root) {
        options.hidden.push(root);
    }
    options.limits = CommandLimits {
        memory_bytes: config.memory_bytes,
        cpu_seconds: config.cpu_seconds,
        processes: config.processes,
        file_bytes: config.file_bytes,
        ..CommandLimits::default()
    };
    match Sandbox::probe(options).await {
        Ok(sandbox) => {
            let report = sandbox.report();
            tracing::info!(
                bwrap = %report.bwrap_version,
                landlock = %report.landlock,
                landlock_abi = report.landlock_abi,
                process_limit = %report.process_limit,
                network = report.network,
                "workspace sandbox ready"
            );
            SandboxState::Ready(Arc::new(sandbox))
        }
        Err(error) => {
            tracing::warn!(%error, "workspace sandbox unavailable: shell.*, git.* and workspace.undo will answer unavailable");
            SandboxState::from(&error)
        }
    }
}

/// One session's workspace, open.
pub struct SessionWorkspace {
    /// The files, shell, git and checkpoints.
    pub workspace: Workspace,
    /// The session it belongs to (a thread's parent channel).
    pub session: Snowflake,
    /// Runs that changed it, oldest first, with who started each.
    runs: Mutex<VecDeque<RunRecord>>,
    last_used: Mutex<Instant>,
}

#[derive(Debug, Clone)]
struct RunRecord {
    run: String,
    requested_by: Option<Snowflake>,
    /// Its background commands, killed if it is aborted.
    background: Vec<String>,
}

impl SessionWorkspace {
    /// Who started `run` (the last run when `None`), if this workspace remembers it.
    pub fn started_by(&self, run: Option<&str>) -> Option<Option<Snowflake>> {
        let runs = lock(&self.runs);
        match run {
            Some(run) => runs.iter().rev().find(|r| r.run == run),
            None => runs.back(),
        }
        .map(|r| r.requested_by)
    }

    fn remember(&self, run: &str, requested_by: Option<Snowflake>) -> bool {
        let mut runs = lock(&self.runs);
        if runs.iter().any(|r| r.run == run) {
            return false;
        }
        if runs.len() >= MAX_RUNS {
            runs.pop_front();
        }
        runs.push_back(RunRecord {
            run: run.to_owned(),
            requested_by,
            background: Vec::new(),
        });
        true
    }

    /// Notes background command `id` as `run`'s (at most [`MAX_BACKGROUND`] per run are
    /// remembered; the session never runs more than `workspace.max_processes` at once).
    fn note_background(&self, run: &str, id: String) {
        if let Some(record) = lock(&self.runs).iter_mut().rev().find(|r| r.run == run) {
            if record.background.len() >= MAX_BACKGROUND {
                record.background.remove(0);
            }
            record.background.push(id);
        }
    }

    fn take_background(&self, run: &str) -> Vec<String> {
        lock(&self.runs)
            .iter_mut()
            .rev()
            .find(|r| r.run == run)
            .map(|r| std::mem::take(&mut r.background))
            .unwrap_or_default()
    }

    fn forget(&self, run: &str) {
        lock(&self.runs).retain(|r| r.run != run);
    }

    fn idle(&self) -> bool {
        self.workspace
            .shell()
            .map_or(true, |shell| shell.list().iter().all(|p| !p.running))
    }
}

fn lock<T>(mutex: &Mutex<T>) -> std::sync::MutexGuard<'_, T> {
    mutex
        .lock()
        .unwrap_or_else(std::sync::PoisonError::into_inner)
}

/// Publishes a session's shell events on `/v1/events` and notes them in the running call's audit
/// row.
struct Publisher {
    events: Arc<EventHub>,
    session: Snowflake,
}

impl ShellEvents for Publisher {
    fn started(&self, event: ShellStarted) {
        self.publish(
            "shell.started",
            serde_json::to_value(event).unwrap_or_default(),
        );
    }

    fn exited(&self, event: ShellExited) {
        self.publish(
            "shell.exited",
            serde_json::to_value(event).unwrap_or_default(),
        );
    }
}

impl Publisher {
    /// On `/v1/events`, and in the audit row of the call whose task runs the command (a
    /// foreground command's start and exit, a background one's start).
    fn publish(&self, kind: &'static str, fields: serde_json::Value) {
        crate::call_events::note_call_event(kind, &fields);
        self.events.publish(kind, Some(self.session), fields);
    }
}

/// Every open workspace, and the sandbox they run commands in.
pub struct Workspaces {
    sandbox: OnceLock<SandboxState>,
    open: Mutex<HashMap<PathBuf, Arc<SessionWorkspace>>>,
    events: Arc<EventHub>,
}

impl Workspaces {
    pub(crate) fn new(events: Arc<EventHub>) -> Self {
        Workspaces {
            sandbox: OnceLock::new(),
            open: Mutex::new(HashMap::new()),
            events,
        }
    }

    /// Installs the probed sandbox (once; later calls are ignored).
    pub(crate) fn install(&self, state: SandboxState) {
        let _ = self.sandbox.set(state);
    }

    fn state(&self) -> SandboxState {
        self.sandbox
            .get()
            .cloned()
            .unwrap_or_else(|| SandboxState::Unavailable {
                reason: "the sandbox was not probed at start".into(),
                install: "Start switchboard with [workspace] in its config (the service probes bubblewrap at start).".into(),
            })
    }

    /// What `/health` says of the sandbox: `None` when the workspace is off.
    pub fn health(&self, settings: &Settings) -> Option<String> {
        settings.config().workspace.as_ref()?;
        Some(match self.state() {
            SandboxState::Ready(_) => "ready".to_owned(),
            SandboxState::Unavailable { reason, install } => {
                format!("unavailable: {reason}. {install}")
            }
        })
    }

    /// Whether the sandbox is ready (commands can run).
    pub fn sandbox_ready(&self) -> bool {
        matches!(self.sandbox.get(), Some(SandboxState::Ready(_)))
    }

    /// The directory `target`'s session works in; `None` when the workspace is off.
    pub fn dir_for(settings: &Settings, target: &Target) -> Option<PathBuf> {
        let config = settings.config().workspace.as_ref()?;
        let session = session_of(target);
        if let Some(bound) =
            switchboard_config::session_settings(&settings.config().sessions, session)
                .and_then(|s| s.workspace.clone())
        {
            return Some(bound);
        }
        Some(absolute(&config.root).join(session.to_string()))
    }

    /// The open workspace of `target`'s session, opened (and its directory made) on first use.
    pub fn for_target(
        &self,
        settings: &Settings,
        target: &Target,
    ) -> Result<Arc<SessionWorkspace>, ToolError> {
        let Some(config) = settings.config().workspace.as_ref() else {
            return Err(workspace_off());
        };
        let dir = Self::dir_for(settings, target).ok_or_else(workspace_off)?;
        let session = session_of(target);
        let mut open = lock(&self.open);
        if let Some(found) = open.get(&dir) {
            *lock(&found.last_used) = Instant::now();
            return Ok(Arc::clone(found));
        }
        if open.len() >= MAX_OPEN {
            // Close the least recently used workspace nobody holds and nothing runs in.
            let victim = open
                .iter()
                .filter(|(_, ws)| Arc::strong_count(ws) == 1 && ws.idle())
                .min_by_key(|(_, ws)| *lock(&ws.last_used))
                .map(|(dir, _)| dir.clone());
            match victim {
                Some(dir) => {
                    open.remove(&dir);
                }
                None => {
                    return Err(ToolError::new(
                        ErrorKind::Unavailable,
                        ErrorCode::Busy,
                        format!(
                            "{MAX_OPEN} workspaces are busy at once; try again when a command ends"
                        ),
                    ))
                }
            }
        }
        let checkpoints = absolute(&config.root)
            .join(CHECKPOINTS)
            .join(session.to_string());
        let options = WorkspaceOptions {
            output: output_limits(config),
            shell: ShellOptions {
                output: output_limits(config),
                default_timeout: config.timeout,
                max_timeout: config.max_timeout,
                max_processes: config.max_processes,
                ..ShellOptions::default()
            },
            checkpoints: Some(checkpoints),
            ..WorkspaceOptions::default()
        };
        let publisher: Arc<dyn ShellEvents> = Arc::new(Publisher {
            events: Arc::clone(&self.events),
            session,
        });
        let workspace = Workspace::open_with_events(&dir, options, self.state(), Some(publisher))
            .map_err(tool_error)?;
        let opened = Arc::new(SessionWorkspace {
            workspace,
            session,
            runs: Mutex::new(VecDeque::new()),
            last_used: Mutex::new(Instant::now()),
        });
        open.insert(dir, Arc::clone(&opened));
        Ok(opened)
    }

    /// Before a change by `caller`'s call (a write, an edit, a command, a commit): a run's
    /// first change takes its checkpoint, and the run's end takes the "after" snapshot. Calls
    /// outside a run (the operator, a token) take none. A checkpoint that cannot be taken
    /// refuses the change: the undo the run's starter counts on would not exist.
    pub async fn before_change(
        &self,
        caller: &Caller,
        ws: &Arc<SessionWorkspace>,
    ) -> Result<(), ToolError> {
        let Some(capability) = caller.capability() else {
            return Ok(());
        };
        let run = capability.grant.request_id.clone();
        if !ws.remember(&run, capability.grant.requested_by) {
            return Ok(());
        }
        if !self.sandbox_ready() {
            // No sandbox, no shadow repository: the files are still the service's to
            // write, but there is nothing to undo to. Say so in the log; fs.* goes on.
            tracing::warn!(run, "no checkpoint: the sandbox is unavailable");
            return Ok(());
        }
        if let Err(error) = ws.workspace.before_change(&run).await {
            ws.forget(&run);
            return Err(tool_error(error));
        }
        // One watcher per run and workspace: at the run's end, an abort kills its background
        // commands, then the "after" snapshot is taken.
        let (ws, capability) = (Arc::clone(ws), capability.clone());
        tokio::spawn(async move {
            if capability.ended().await == TokenEnd::Aborted {
                if let Ok(shell) = ws.workspace.shell() {
                    for id in ws.take_background(&run) {
                        let _ = shell.kill(&id).await;
                    }
                }
            }
            if let Err(error) = ws.workspace.after_run(&run).await {
                tracing::warn!(run, %error, "the run's after-snapshot failed; an undo compares with the workspace as it is");
            }
        });
        Ok(())
    }

    /// Remembers background command `id` as the run's, so that an `/abort` of the run kills
    /// it (the watcher [`Workspaces::before_change`] started does).
    pub fn kill_on_abort(ws: &SessionWorkspace, capability: &Capability, id: String) {
        ws.note_background(&capability.grant.request_id, id);
    }
}

/// The session a target's workspace belongs to: a thread works in its parent channel's.
fn session_of(target: &Target) -> Snowflake {
    match target.location.kind {
        SessionKind::Thread => target
            .location
            .parent_channel_id
            .unwrap_or_else(|| target.channel_id()),
        _ => target.channel_id(),
    }
}

fn absolute(path: &Path) -> PathBuf {
    std::path::absolute(path).unwrap_or_else(|_| path.to_path_buf())
}

fn output_limits(config: &WorkspaceConfig) -> OutputLimits {
    OutputLimits {
        max_bytes: config.max_output_bytes,
        max_lines: config.max_output_lines,
        ..OutputLimits::default()
    }
}

pub(crate) fn workspace_off() -> ToolError {
    ToolError::new(
        ErrorKind::Unavailable,
        ErrorCode::WorkspaceOff,
        "The workspace is off: the operator turns it on with [workspace] root = \"PATH\" in the config",
    )
}

/// A workspace error as the call answers it.
pub fn tool_error(error: WorkspaceError) -> ToolError {
    use switchboard_sandbox::SandboxErrorKind as S;
    let message = error.to_string();
    let (kind, code) = match &error {
        WorkspaceError::NotUnique { locations, path } => {
            return ToolError::new(ErrorKind::Conflict, ErrorCode::NotUnique, message)
                .with_details(json!({ "path": path, "locations": locations }));
        }
        WorkspaceError::Sandbox(SandboxError::Timeout { seconds, output }) => {
            return ToolError::new(ErrorKind::Timeout, ErrorCode::Timeout, message)
                .with_details(json!({ "seconds": seconds, "output": output }));
        }
        WorkspaceError::Sandbox(sandbox) => match sandbox.kind() {
            S::Unavailable => (ErrorKind::Unavailable, ErrorCode::SandboxUnavailable),
            S::TooManyProcesses => (ErrorKind::Unavailable, ErrorCode::TooManyProcesses),
            S::NoSuchProcess => (ErrorKind::NotFound, ErrorCode::NoSuchProcess),
            S::OutsideWorkspace => (ErrorKind::Denied, ErrorCode::OutsideWorkspace),
            S::BadRequest => (ErrorKind::Usage, ErrorCode::InvalidInput),
            S::Git => (ErrorKind::Conflict, ErrorCode::GitFailed),
            S::NoCheckpoint => (ErrorKind::NotFound, ErrorCode::NoCheckpoint),
            S::Timeout => (ErrorKind::Timeout, ErrorCode::Timeout),
            _ => (ErrorKind::Internal, ErrorCode::Internal),
        },
        other => match other.kind() {
            WorkspaceErrorKind::OutsideWorkspace => {
                (ErrorKind::Denied, ErrorCode::OutsideWorkspace)
            }
            WorkspaceErrorKind::NotFound => (ErrorKind::NotFound, ErrorCode::NoSuchPath),
            WorkspaceErrorKind::NoMatch => (ErrorKind::NotFound, ErrorCode::NoMatch),
            WorkspaceErrorKind::WrongType => (ErrorKind::Usage, ErrorCode::WrongType),
            WorkspaceErrorKind::Unsupported | WorkspaceErrorKind::BadRequest => {
                (ErrorKind::Usage, ErrorCode::InvalidInput)
            }
            _ => (ErrorKind::Internal, ErrorCode::Internal),
        },
    };
    ToolError::new(kind, code, message)
}
