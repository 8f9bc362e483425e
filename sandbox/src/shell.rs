//! A session's shell: commands run in the session's sandbox ([`SessionSandbox`]) from a
//! working directory that persists between runs (a `cd` holds), in the foreground with a
//! timeout or in the background with their output read later.
//!
//! The working directory is carried by a wrapper: the command runs through `eval` in a shell
//! whose exit trap prints `pwd -P` on descriptor 3, a pipe only the service reads. The path it
//! reports is used only when it resolves to a directory inside the workspace; a command that
//! writes something else there changes nothing.

use std::collections::{BTreeMap, VecDeque};
use std::ffi::OsString;
use std::path::{Path, PathBuf};
use std::sync::atomic::{AtomicU64, AtomicUsize, Ordering};
use std::sync::{Arc, Mutex};
use std::time::{Duration, Instant};

use serde::Serialize;
use tokio::io::AsyncReadExt;

use crate::capture::{spill_path, Cut, Keep};
use crate::error::SandboxError;
use crate::options::ShellOptions;
use crate::process::{Output, RunSpec, Sandbox};
use crate::zygote::SessionSandbox;

/// The wrapper a foreground command runs in. `$1` is the command.
const FOREGROUND: &str = "trap '__switchboard_status=$?; pwd -P >&3 2>/dev/null; exit $__switchboard_status' EXIT\n__switchboard_command=$1; shift; eval \"$__switchboard_command\"";
/// The wrapper of a background command: one output stream, no working directory to report.
const BACKGROUND: &str = "__switchboard_command=$1; shift; eval \"$__switchboard_command\"";

/// How long a killed background command gets to be reported gone.
const KILL_WAIT: Duration = Duration::from_secs(5);

/// Most finished background commands kept per session for `shell.output`, beyond the running
/// ones; the oldest finished one goes first.
const MAX_FINISHED: usize = 16;

/// `shell.run`'s request.
#[derive(Debug, Clone, Default, PartialEq, Eq, serde::Deserialize)]
#[serde(rename_all = "camelCase")]
pub struct RunRequest {
    pub command: String,
    #[serde(default)]
    pub timeout_s: Option<u64>,
    #[serde(default)]
    pub background: bool,
}

/// `shell.run`'s answer. A command that exits non-zero is an ordinary answer: its code is
/// information for the agent.
#[derive(Debug, Clone, PartialEq, Eq, Serialize)]
#[serde(rename_all = "camelCase")]
#[cfg_attr(feature = "schema", derive(schemars::JsonSchema))]
pub struct ShellAnswer {
    pub id: String,
    /// `None` while a background command runs, or when a signal ended the command.
    pub exit_code: Option<i32>,
    #[serde(skip_serializing_if = "Option::is_none")]
    pub signal: Option<i32>,
    pub stdout: String,
    pub stderr: String,
    /// The working directory after the command, relative to the workspace (`.` at its root).
    pub cwd: String,
    pub duration_ms: u64,
    pub background: bool,
    #[serde(skip_serializing_if = "Option::is_none")]
    pub stdout_cut: Option<Cut>,
    #[serde(skip_serializing_if = "Option::is_none")]
    pub stderr_cut: Option<Cut>,
}

/// `shell.output`'s answer: the background command's output from byte `since` on.
#[derive(Debug, Clone, PartialEq, Eq, Serialize)]
#[serde(rename_all = "camelCase")]
#[cfg_attr(feature = "schema", derive(schemars::JsonSchema))]
pub struct OutputAnswer {
    pub id: String,
    pub running: bool,
    pub exit_code: Option<i32>,
    /// Standard output and error, interleaved as written.
    pub output: String,
    /// Where `output` starts in the stream (later than asked when older output was dropped).
    pub since: u64,
    /// Pass this as `since` to read on.
    pub next: u64,
    /// Bytes between the asked `since` and `since` that are no longer kept.
    pub dropped: u64,
}

/// One background command in `shell.list`.
#[derive(Debug, Clone, PartialEq, Eq, Serialize)]
#[serde(rename_all = "camelCase")]
#[cfg_attr(feature = "schema", derive(schemars::JsonSchema))]
pub struct ProcessInfo {
    pub id: String,
    pub command: String,
    pub running: bool,
    pub exit_code: Option<i32>,
    pub bytes: u64,
    pub age_ms: u64,
}

/// `shell.kill`'s answer.
#[derive(Debug, Clone, PartialEq, Eq, Serialize)]
#[serde(rename_all = "camelCase")]
#[cfg_attr(feature = "schema", derive(schemars::JsonSchema))]
pub struct KillAnswer {
    pub id: String,
    /// Whether it was still running (and so was killed).
    pub killed: bool,
}

/// `shell.started`, for the event stream.
#[derive(Debug, Clone, PartialEq, Eq, Serialize)]
#[serde(rename_all = "camelCase")]
pub struct ShellStarted {
    pub id: String,
    pub argv: Vec<String>,
    pub cwd: String,
    pub background: bool,
}

/// `shell.exited`, for the event stream.
#[derive(Debug, Clone, PartialEq, Eq, Serialize)]
#[serde(rename_all = "camelCase")]
pub struct ShellExited {
    pub id: String,
    pub code: Option<i32>,
    pub ms: u64,
    pub bytes: u64,
}

/// Where a session's shell events go (the wiring publishes them on `/v1/events`).
pub trait ShellEvents: Send + Sync {
    fn started(&self, event: ShellStarted);
    fn exited(&self, event: ShellExited);
}

struct Background {
    command: String,
    started: Instant,
    shared: Arc<Mutex<BackgroundState>>,
    kill: Arc<tokio::sync::Notify>,
    task: tokio::task::JoinHandle<()>,
}

struct BackgroundState {
    /// The newest output, at most `background_keep_bytes`.
    kept: VecDeque<u8>,
    total: u64,
    running: bool,
    exit_code: Option<i32>,
}

/// A session's shell: its working directory, its background commands and their bounds.
/// Dropping it stops the session's sandbox, and every background command in it.
pub struct ShellSession {
    session: Arc<SessionSandbox>,
    root: PathBuf,
    cwd: Mutex<PathBuf>,
    options: ShellOptions,
    extra_writable: Vec<PathBuf>,
    next: AtomicU64,
    background: Mutex<BTreeMap<u64, Background>>,
    /// Background commands between the check of the bound and their entry in the table.
    background_starting: AtomicUsize,
    events: Option<Arc<dyn ShellEvents>>,
}

impl std::fmt::Debug for ShellSession {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("ShellSession")
            .field("root", &self.root)
            .finish_non_exhaustive()
    }
}

impl ShellSession {
    /// A shell for the workspace at `root` (which must exist), starting at its root, with a
    /// session sandbox of its own.
    pub fn new(
        sandbox: Arc<Sandbox>,
        root: &Path,
        options: ShellOptions,
    ) -> Result<Self, SandboxError> {
        let session = SessionSandbox::new(sandbox, root, options.sandbox_idle)?;
        Ok(Self::in_session(session, options))
    }

    /// A shell in an existing session sandbox (shared with the session's git, say).
    pub fn in_session(session: Arc<SessionSandbox>, options: ShellOptions) -> Self {
        let root = session.root().to_path_buf();
        Self {
            session,
            cwd: Mutex::new(root.clone()),
            root,
            options,
            extra_writable: Vec::new(),
            next: AtomicU64::new(1),
            background: Mutex::new(BTreeMap::new()),
            background_starting: AtomicUsize::new(0),
            events: None,
        }
    }

    /// The session's sandbox.
    pub fn session(&self) -> &Arc<SessionSandbox> {
        &self.session
    }

    fn sandbox(&self) -> &Sandbox {
        self.session.sandbox()
    }

    /// Sends `shell.started` and `shell.exited` to `events`.
    pub fn with_events(mut self, events: Arc<dyn ShellEvents>) -> Self {
        self.events = Some(events);
        self
    }

    /// The workspace root (canonical).
    pub fn root(&self) -> &Path {
        &self.root
    }

    /// The current working directory (canonical, inside the workspace).
    pub fn cwd(&self) -> PathBuf {
        lock(&self.cwd).clone()
    }

    fn relative(&self, path: &Path) -> String {
        match path.strip_prefix(&self.root) {
            Ok(rel) if rel.as_os_str().is_empty() => ".".into(),
            Ok(rel) => rel.display().to_string(),
            Err(_) => ".".into(),
        }
    }

    /// The timeout a call gets: its own up to the maximum, else the default.
    fn timeout(&self, asked: Option<u64>) -> Result<Duration, SandboxError> {
        match asked {
            Some(0) => Err(SandboxError::BadRequest(
                "timeoutS must be at least 1 second".into(),
            )),
            Some(seconds) => Ok(Duration::from_secs(seconds).min(self.options.max_timeout)),
            None => Ok(self.options.default_timeout),
        }
    }

    /// The directory to start in: the persisted one if it still exists inside the workspace,
    /// else the root.
    fn start_dir(&self) -> PathBuf {
        let cwd = self.cwd();
        match cwd.canonicalize() {
            Ok(real) if real.starts_with(&self.root) && real.is_dir() => real,
            _ => self.root.clone(),
        }
    }

    fn spec(&self, id: &str, command: &str, timeout: Duration, background: bool) -> RunSpec {
        let shell = self.sandbox().options().shell.clone();
        let wrapper = if background { BACKGROUND } else { FOREGROUND };
        RunSpec {
            root: self.root.clone(),
            cwd: self.start_dir(),
            argv: vec![
                shell.into_os_string(),
                "-c".into(),
                wrapper.into(),
                "switchboard".into(),
                OsString::from(command),
            ],
            env: Vec::new(),
            extra_writable: self.extra_writable.clone(),
            timeout,
            output: self.options.output,
            keep: Keep::Tail,
            spill: Some([
                spill_path(&self.root, &format!("{id}.stdout")),
                spill_path(&self.root, &format!("{id}.stderr")),
            ]),
            report_cwd: !background,
            merge_stderr: background,
        }
    }

    fn started(&self, id: &str, command: &str, cwd: &Path, background: bool) {
        if let Some(events) = &self.events {
            events.started(ShellStarted {
                id: id.to_owned(),
                argv: vec![
                    self.sandbox().options().shell.display().to_string(),
                    "-c".into(),
                    command.to_owned(),
                ],
                cwd: self.relative(cwd),
                background,
            });
        }
    }

    /// `shell.run`. A command past its timeout is killed with its whole process tree and
    /// answers [`SandboxError::Timeout`] with its output so far. Dropping the returned future
    /// (a cancelled call, an `/abort`) kills it the same way.
    pub async fn run(&self, request: RunRequest) -> Result<ShellAnswer, SandboxError> {
        if request.command.trim().is_empty() {
            return Err(SandboxError::BadRequest(
                "command is empty; give the shell command to run".into(),
            ));
        }
        if request.command.contains('\0') {
            return Err(SandboxError::BadRequest(
                "command contains a NUL byte, which no shell command can".into(),
            ));
        }
        let timeout = self.timeout(request.timeout_s)?;
        let id = format!("sh-{}", self.next.fetch_add(1, Ordering::Relaxed));
        if request.background {
            return self.start_background(id, request.command).await;
        }
        let spec = self.spec(&id, &request.command, timeout, false);
        self.started(&id, &request.command, &spec.cwd, false);
        let output = self.session.run(&spec).await;
        let output = match output {
            Ok(output) => output,
            Err(error) => {
                if let Some(events) = &self.events {
                    events.exited(ShellExited {
                        id: id.clone(),
                        code: None,
                        ms: 0,
                        bytes: 0,
                    });
                }
                return Err(error);
            }
        };
        if let Some(reported) = &output.final_cwd {
            if let Ok(real) = reported.canonicalize() {
                if real.starts_with(&self.root) && real.is_dir() && !output.timed_out {
                    *lock(&self.cwd) = real;
                }
            }
        }
        if let Some(events) = &self.events {
            events.exited(ShellExited {
                id: id.clone(),
                code: output.exit_code,
                ms: output.duration.as_millis() as u64,
                bytes: output.bytes,
            });
        }
        let answer = ShellAnswer {
            id,
            exit_code: output.exit_code,
            signal: output.signal,
            stdout: output.stdout,
            stderr: output.stderr,
            cwd: self.relative(&self.cwd()),
            duration_ms: output.duration.as_millis() as u64,
            background: false,
            stdout_cut: output.stdout_cut,
            stderr_cut: output.stderr_cut,
        };
        if output.timed_out {
            return Err(SandboxError::Timeout {
                seconds: timeout.as_secs(),
                output: Box::new(answer),
            });
        }
        Ok(answer)
    }

    async fn start_background(
        &self,
        id: String,
        command: String,
    ) -> Result<ShellAnswer, SandboxError> {
        let starting = {
            let table = lock(&self.background);
            let running = table
                .values()
                .filter(|b| b.shared.lock().is_ok_and(|s| s.running))
                .count();
            if running + self.background_starting.load(Ordering::Relaxed)
                >= self.options.max_processes
            {
                return Err(SandboxError::TooManyProcesses {
                    max: self.options.max_processes,
                });
            }
            Starting::new(&self.background_starting)
        };
        // A background command is not bound by the call's timeout: it runs until it ends, is
        // killed, or the session goes.
        let spec = self.spec(&id, &command, Duration::MAX, true);
        let cwd = spec.cwd.clone();
        let mut running = self.session.spawn(&spec).await?;
        let shared = Arc::new(Mutex::new(BackgroundState {
            kept: VecDeque::new(),
            total: 0,
            running: true,
            exit_code: None,
        }));
        let kill = Arc::new(tokio::sync::Notify::new());
        let keep = self.options.background_keep_bytes;
        let events = self.events.clone();
        let started = Instant::now();
        let task = {
            let shared = Arc::clone(&shared);
            let kill = Arc::clone(&kill);
            let id = id.clone();
            tokio::spawn(async move {
                let stdout = running.stdout.take();
                let killed = tokio::select! {
                    () = read_into(stdout, &shared, keep) => false,
                    () = kill.notified() => true,
                };
                if killed {
                    running.kill_tree();
                }
                // After a kill, a bounded wait: the handle's drop finishes the job regardless.
                let status = if killed {
                    tokio::time::timeout(KILL_WAIT, running.wait())
                        .await
                        .ok()
                        .and_then(Result::ok)
                } else {
                    running.wait().await.ok()
                };
                drop(running);
                let bytes = {
                    let mut state = lock(&shared);
                    state.running = false;
                    state.exit_code = status.and_then(|s| s.code);
                    state.total
                };
                if let Some(events) = events {
                    events.exited(ShellExited {
                        id,
                        code: status.and_then(|s| s.code),
                        ms: started.elapsed().as_millis() as u64,
                        bytes,
                    });
                }
            })
        };
        self.started(&id, &command, &cwd, true);
        let number: u64 = id[3..].parse().unwrap_or(0);
        let mut table = lock(&self.background);
        drop(starting);
        table.insert(
            number,
            Background {
                command,
                started,
                shared,
                kill,
                task,
            },
        );
        // Keep the table bounded: the oldest finished commands go.
        let finished: Vec<u64> = table
            .iter()
            .filter(|(_, b)| b.shared.lock().is_ok_and(|s| !s.running))
            .map(|(n, _)| *n)
            .collect();
        for number in finished
            .iter()
            .take(finished.len().saturating_sub(MAX_FINISHED))
        {
            table.remove(number);
        }
        Ok(ShellAnswer {
            id,
            exit_code: None,
            signal: None,
            stdout: String::new(),
            stderr: String::new(),
            cwd: self.relative(&cwd),
            duration_ms: 0,
            background: true,
            stdout_cut: None,
            stderr_cut: None,
        })
    }

    fn find<T>(&self, id: &str, f: impl FnOnce(&Background) -> T) -> Result<T, SandboxError> {
        let table = lock(&self.background);
        id.strip_prefix("sh-")
            .and_then(|n| n.parse::<u64>().ok())
            .and_then(|n| table.get(&n))
            .map(f)
            .ok_or_else(|| SandboxError::NoSuchProcess { id: id.to_owned() })
    }

    /// `shell.output`: at most `max_output_bytes` of the background command's output from
    /// byte `since` (0 when absent).
    pub fn output(&self, id: &str, since: Option<u64>) -> Result<OutputAnswer, SandboxError> {
        let max = self.options.output.max_bytes;
        self.find(id, |b| {
            let state = lock(&b.shared);
            let oldest = state.total - state.kept.len() as u64;
            let asked = since.unwrap_or(0).min(state.total);
            let start = asked.max(oldest);
            let skip = (start - oldest) as usize;
            let take = (state.kept.len() - skip).min(max);
            let bytes: Vec<u8> = state.kept.iter().skip(skip).take(take).copied().collect();
            let text = String::from_utf8_lossy(&bytes).into_owned();
            OutputAnswer {
                id: id.to_owned(),
                running: state.running,
                exit_code: state.exit_code,
                output: text,
                since: start,
                next: start + take as u64,
                dropped: start - asked,
            }
        })
    }

    /// `shell.list`: the session's background commands, oldest first.
    pub fn list(&self) -> Vec<ProcessInfo> {
        let table = lock(&self.background);
        table
            .iter()
            .map(|(n, b)| {
                let state = lock(&b.shared);
                ProcessInfo {
                    id: format!("sh-{n}"),
                    command: b.command.clone(),
                    running: state.running,
                    exit_code: state.exit_code,
                    bytes: state.total,
                    age_ms: b.started.elapsed().as_millis() as u64,
                }
            })
            .collect()
    }

    /// `shell.kill`: kills the background command's whole process tree and waits (briefly)
    /// until it is reaped.
    pub async fn kill(&self, id: &str) -> Result<KillAnswer, SandboxError> {
        let (was_running, kill, shared) = self.find(id, |b| {
            let running = b.shared.lock().is_ok_and(|s| s.running);
            (running, Arc::clone(&b.kill), Arc::clone(&b.shared))
        })?;
        if was_running {
            kill.notify_one();
            for _ in 0..500 {
                if shared.lock().is_ok_and(|s| !s.running) {
                    break;
                }
                tokio::time::sleep(Duration::from_millis(10)).await;
            }
        }
        Ok(KillAnswer {
            id: id.to_owned(),
            killed: was_running,
        })
    }

    /// Kills every background command (an `/abort` of the session's run).
    pub async fn kill_all(&self) {
        let ids: Vec<String> = self
            .list()
            .into_iter()
            .filter(|p| p.running)
            .map(|p| p.id)
            .collect();
        for id in ids {
            let _ = self.kill(&id).await;
        }
    }
}

impl Drop for ShellSession {
    fn drop(&mut self) {
        // Everything of the session runs in its sandbox: stopping it kills every background
        // command at once, whatever its tasks are doing.
        self.session.shutdown();
        let table = self
            .background
            .get_mut()
            .unwrap_or_else(std::sync::PoisonError::into_inner);
        for background in table.values() {
            // The task owns the process handle: aborting it drops the handle (which empties
            // the command's cgroup, if it has one).
            background.task.abort();
        }
    }
}

/// A background command being started: counted against the bound until it is in the table
/// (or its start failed or was dropped).
struct Starting<'a>(&'a AtomicUsize);

impl<'a> Starting<'a> {
    fn new(counter: &'a AtomicUsize) -> Self {
        counter.fetch_add(1, Ordering::Relaxed);
        Self(counter)
    }
}

impl Drop for Starting<'_> {
    fn drop(&mut self) {
        self.0.fetch_sub(1, Ordering::Relaxed);
    }
}

/// A poisoned lock still holds consistent data here (every critical section is a few field
/// updates), so it is used rather than propagated.
fn lock<T>(mutex: &Mutex<T>) -> std::sync::MutexGuard<'_, T> {
    mutex
        .lock()
        .unwrap_or_else(std::sync::PoisonError::into_inner)
}

async fn read_into(stdout: Option<Output>, shared: &Mutex<BackgroundState>, keep: usize) {
    let Some(mut stdout) = stdout else {
        return;
    };
    let mut buffer = vec![0u8; 64 * 1024];
    loop {
        match stdout.read(&mut buffer).await {
            Ok(0) | Err(_) => return,
            Ok(n) => {
                let mut state = lock(shared);
                state.total += n as u64;
                let chunk = &buffer[n.saturating_sub(keep)..n];
                state.kept.extend(chunk);
                let excess = state.kept.len().saturating_sub(keep);
                state.kept.drain(..excess);
            }
        }
    }
}
