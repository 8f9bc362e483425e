//! Runs a program as a child process, safely: switchboard's command agents
//! (`runner = "command"`) and its hooks (`[[hooks.before]]`, `[[hooks.after]]`).
//!
//! The program gets its input on stdin and answers on stdout. It starts from an **empty**
//! environment plus exactly [`CommandSpec::env`], so nothing of switchboard's own environment (the
//! Discord token least of all) leaks into it. Note that without `PATH` in that environment a bare
//! program name is looked up in the C library's default path (`/bin:/usr/bin`) only.
//!
//! # Why a process group
//!
//! A program is rarely one process: a wrapper script, a `node` runtime, the shell commands an
//! agent runs, the `sleep` a hook left in the background. Killing only the direct child on
//! timeout would leave those running as orphans, still holding our pipes open and still acting. So the child is started as the leader
//! of a new process group (`process_group(0)`: group id = child pid), and on timeout or abort the
//! *whole group* gets `SIGKILL`. The group is killed before the leader is reaped, so the group id
//! cannot have been reused by then.
//!
//! # Grandchildren left behind after a normal exit
//!
//! If the program exits by itself but a background grandchild still holds stdout or stderr, reading
//! to end-of-file would hang until that grandchild exits. Choice made here: after the child has
//! exited, the remaining output is read for at most [`EXIT_DRAIN_GRACE`]; then the group is
//! killed **unconditionally** (a run leaves nothing behind, even a grandchild that redirected its
//! output elsewhere), and output is read for at most [`KILL_DRAIN_GRACE`] more. Whatever was not
//! read by then is dropped. (After a normal exit the leader is already reaped when the group is
//! killed; the group id can only be reused once every member is gone and the pid counter has
//! wrapped around, so the kill at worst finds nothing — `ESRCH`, ignored.)
//!
//! If the future returned by [`run_command`] is dropped mid-run, a guard kills the group too.
//! A process that left the group on purpose (`setsid`) is out of reach; we only stop waiting for
//! its output.
//!
//! Captured output is capped at [`MAX_OUTPUT`] bytes per stream. Past the cap, stdout is either
//! read and discarded so the child never blocks on a full pipe ([`Overflow::Truncate`]), or
//! ends the run at once, its group killed ([`Overflow::Fail`]: an answer that large is wrong, and
//! waiting for the timeout would only hold a caller). Non-UTF-8 bytes are replaced with U+FFFD.

use std::future::Future;
use std::io;
use std::path::PathBuf;
use std::process::Stdio;
use std::sync::{Arc, Mutex, PoisonError};
use std::time::Duration;

use tokio::io::{AsyncRead, AsyncReadExt, AsyncWriteExt};
use tokio::process::Command;
use tokio::task::JoinHandle;
use tokio::time::Instant;

/// At most this many bytes of stdout, and as many of stderr, are kept.
pub const MAX_OUTPUT: usize = 1024 * 1024;

/// How long output is still read after the child exited by itself, before the group is killed.
pub const EXIT_DRAIN_GRACE: Duration = Duration::from_millis(500);

/// How long output is still read after the group was killed.
pub const KILL_DRAIN_GRACE: Duration = Duration::from_secs(1);

/// How long we wait to reap the leader after `SIGKILL` before giving up (tokio reaps it later).
const REAP_BOUND: Duration = Duration::from_secs(5);

/// What happens when stdout passes [`MAX_OUTPUT`] bytes.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Default)]
pub enum Overflow {
    /// Keep the first [`MAX_OUTPUT`] bytes; read and drop the rest (an agent's long answer).
    #[default]
    Truncate,
    /// End the run at once, killing its group: [`RunOutcome::Overflowed`] (a hook's answer).
    Fail,
}

/// Called with each line of stderr (without its line break; lines over [`MAX_LINE`] bytes are
/// skipped whole), while the program runs.
#[derive(Clone)]
pub struct LineSink(pub Arc<dyn Fn(&str) + Send + Sync>);

impl std::fmt::Debug for LineSink {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.write_str("LineSink(..)")
    }
}

/// What to run, where, for how long, and with which environment.
#[derive(Debug, Clone)]
pub struct CommandSpec {
    /// The program: a path, or a bare name looked up in the `PATH` of [`CommandSpec::env`]
    /// (without one, in `/bin:/usr/bin` only).
    pub program: String,
    /// Its arguments, passed as they are (no shell).
    pub args: Vec<String>,
    /// The directory it runs in; `None`: switchboard's own.
    pub cwd: Option<PathBuf>,
    /// How long it may run before its whole process group is killed.
    pub timeout: Duration,
    /// Its whole environment: the process starts from an EMPTY environment plus these.
    pub env: Vec<(String, String)>,
    /// What stdout past [`MAX_OUTPUT`] bytes does.
    pub overflow: Overflow,
    /// Where each stderr line goes while it runs, besides the capture.
    pub stderr_lines: Option<LineSink>,
    /// Set to `true` once the process is spawned: what a run shows meanwhile (the ⏳
    /// reaction, typing) waits for it, so it never competes with the spawn.
    pub started: Option<tokio::sync::watch::Sender<bool>>,
}

impl CommandSpec {
    /// `program` with `args`, `timeout`, an empty environment, switchboard's directory, long
    /// stdout truncated.
    pub fn new(program: impl Into<String>, args: Vec<String>, timeout: Duration) -> CommandSpec {
        CommandSpec {
            program: program.into(),
            args,
            cwd: None,
            timeout,
            env: Vec::new(),
            overflow: Overflow::Truncate,
            stderr_lines: None,
            started: None,
        }
    }
}

/// How a run ended, with what was captured.
#[derive(Debug)]
pub enum RunOutcome {
    /// The process exited by itself.
    Exited {
        /// Its exit status; `None` when a signal ended it.
        code: Option<i32>,
        /// What it wrote to stdout (at most [`MAX_OUTPUT`] bytes): its answer.
        stdout: String,
        /// What it wrote to stderr (at most [`MAX_OUTPUT`] bytes).
        stderr: String,
    },
    /// `timeout` passed; the whole process group was killed.
    TimedOut {
        /// What it wrote to stdout before it was killed (at most [`MAX_OUTPUT`] bytes).
        stdout: String,
        /// What it wrote to stderr before it was killed (at most [`MAX_OUTPUT`] bytes).
        stderr: String,
    },
    /// `abort` fired; the whole process group was killed.
    Aborted {
        /// What it wrote to stdout before it was killed (at most [`MAX_OUTPUT`] bytes).
        stdout: String,
        /// What it wrote to stderr before it was killed (at most [`MAX_OUTPUT`] bytes).
        stderr: String,
    },
    /// With [`Overflow::Fail`], stdout passed [`MAX_OUTPUT`] bytes; the whole process group
    /// was killed at once.
    Overflowed {
        /// The first [`MAX_OUTPUT`] bytes of stdout.
        stdout: String,
        /// What it wrote to stderr before it was killed (at most [`MAX_OUTPUT`] bytes).
        stderr: String,
    },
}

/// Why a command could not be run to an outcome.
#[derive(Debug, thiserror::Error)]
pub enum RunnerError {
    /// The process could not be started: no such program, not executable, or no such `cwd`.
    #[error("cannot start '{program}': {source}")]
    Spawn {
        /// The program that was to run.
        program: String,
        /// The operating system's error.
        source: std::io::Error,
    },
    /// Waiting for the process, or reading its stdout or stderr, failed; the process group
    /// was killed.
    #[error("i/o error while running the command: {0}")]
    Io(std::io::Error),
}

/// Runs the command with `stdin` written to its standard input (then closed), capturing stdout
/// and stderr (each capped at [`MAX_OUTPUT`] bytes; past it, stderr and a truncating stdout are
/// drained so the child never blocks, a failing stdout ends the run; non-UTF-8 bytes replaced),
/// until it exits, `spec.timeout` passes, or `abort` resolves. In every case the child's process
/// group is killed before this returns.
pub async fn run_command(
    spec: &CommandSpec,
    stdin: &str,
    abort: impl Future<Output = ()>,
) -> Result<RunOutcome, RunnerError> {
    run_command_with(spec, || stdin.to_owned(), abort).await
}

/// [`run_command`], with the standard input made by `prompt` just after the spawn, while the
/// process starts (an agent's prompt costs tens of microseconds to build; its start should not
/// wait for it).
pub async fn run_command_with(
    spec: &CommandSpec,
    prompt: impl FnOnce() -> String,
    abort: impl Future<Output = ()>,
) -> Result<RunOutcome, RunnerError> {
    let mut cmd = Command::new(&spec.program);
    cmd.args(&spec.args)
        .env_clear()
        .envs(spec.env.iter().map(|(k, v)| (k, v)));
    if let Some(cwd) = &spec.cwd {
        cmd.current_dir(cwd);
    }
    cmd.kill_on_drop(true)
        .stdin(Stdio::piped())
        .stdout(Stdio::piped())
        .stderr(Stdio::piped());
    #[cfg(unix)]
    cmd.process_group(0);

    tracing::trace!(program = %spec.program, "spawning");
    let mut child = cmd.spawn().map_err(|source| RunnerError::Spawn {
        program: spec.program.clone(),
        source,
    })?;
    let pid = child.id();
    if let Some(started) = &spec.started {
        started.send_replace(true);
    }
    tracing::debug!(program = %spec.program, pid, "command started");

    // Declared after `child`, so it is dropped first: the group dies before the leader is reaped.
    let mut group = GroupGuard::new(pid);

    let input = prompt();
    let stdin_task = child.stdin.take().map(|mut pipe| {
        tokio::spawn(async move {
            let result = match pipe.write_all(input.as_bytes()).await {
                Ok(()) => pipe.shutdown().await,
                Err(e) => Err(e),
            };
            match result {
                Ok(()) => {}
                // It exited or closed stdin without reading it all: not our problem.
                Err(e) if e.kind() == io::ErrorKind::BrokenPipe => {}
                Err(e) => tracing::debug!(error = %e, "writing the command's input failed"),
            }
        })
    });
    let overflow = Arc::new(OverflowSignal::default());
    let fail_over = (spec.overflow == Overflow::Fail).then(|| Arc::clone(&overflow));
    let mut out = Capture::start(child.stdout.take(), None, fail_over);
    let mut err = Capture::start(child.stderr.take(), spec.stderr_lines.clone(), None);

    let ended = {
        let abort = std::pin::pin!(abort);
        tokio::select! {
            biased;
            () = overflow.notify.notified() => End::Overflowed,
            status = child.wait() => match status {
                Ok(status) => End::Exited(status),
                Err(e) => End::WaitFailed(e),
            },
            () = abort => End::Aborted,
            () = tokio::time::sleep(spec.timeout) => End::TimedOut,
        }
    };

    match &ended {
        End::Exited(status) => {
            tracing::debug!(pid, %status, "command exited");
            let deadline = Instant::now() + EXIT_DRAIN_GRACE;
            let out_done = out.settle(deadline).await;
            let err_done = err.settle(deadline).await;
            if !(out_done && err_done) {
                tracing::debug!(pid, "output still open after exit; killing the group");
            }
            group.kill();
        }
        End::WaitFailed(_) => group.kill(),
        End::TimedOut | End::Aborted | End::Overflowed => {
            group.kill();
            match tokio::time::timeout(REAP_BOUND, child.wait()).await {
                Ok(Ok(_)) => {}
                Ok(Err(e)) => tracing::warn!(pid, error = %e, "reaping the killed command failed"),
                Err(_) => tracing::warn!(pid, "the killed command was not reaped in time"),
            }
        }
    }

    let deadline = Instant::now() + KILL_DRAIN_GRACE;
    out.settle(deadline).await;
    err.settle(deadline).await;
    if let Some(task) = stdin_task {
        task.abort();
    }
    // Past the cap as it exited (read while draining): the answer is still too large.
    let ended = match ended {
        End::Exited(_) if overflow.hit.load(std::sync::atomic::Ordering::Acquire) => {
            End::Overflowed
        }
        other => other,
    };
    let (stdout, out_err) = out.finish();
    let (stderr, err_err) = err.finish();
    if let Some(e) = out_err.or(err_err) {
        return Err(RunnerError::Io(e));
    }

    Ok(match ended {
        End::WaitFailed(e) => return Err(RunnerError::Io(e)),
        End::Exited(status) => RunOutcome::Exited {
            code: status.code(),
            stdout,
            stderr,
        },
        End::TimedOut => RunOutcome::TimedOut { stdout, stderr },
        End::Aborted => RunOutcome::Aborted { stdout, stderr },
        End::Overflowed => RunOutcome::Overflowed { stdout, stderr },
    })
}

/// Raised by the stdout reader when it passes the cap under [`Overflow::Fail`].
#[derive(Default)]
struct OverflowSignal {
    hit: std::sync::atomic::AtomicBool,
    notify: tokio::sync::Notify,
}

/// Why the wait for the child ended.
enum End {
    Exited(std::process::ExitStatus),
    WaitFailed(io::Error),
    TimedOut,
    Aborted,
    Overflowed,
}

/// Kills the child's process group once: explicitly via [`GroupGuard::kill`], or on drop.
struct GroupGuard {
    #[cfg(unix)]
    pgid: Option<libc::pid_t>,
}

impl GroupGuard {
    fn new(pid: Option<u32>) -> Self {
        GroupGuard {
            #[cfg(unix)]
            pgid: pid.and_then(|p| libc::pid_t::try_from(p).ok()),
        }
    }

    #[cfg(unix)]
    #[allow(unsafe_code)] // one FFI call, see SAFETY below
    fn kill(&mut self) {
        let Some(pgid) = self.pgid.take() else {
            return;
        };
        // SAFETY: killpg only sends a signal; it has no memory-safety preconditions.
        let rc = unsafe { libc::killpg(pgid, libc::SIGKILL) };
        if rc == -1 {
            let e = io::Error::last_os_error();
            // ESRCH: the group is already empty, the normal case after a clean exit.
            if e.raw_os_error() != Some(libc::ESRCH) {
                tracing::warn!(pgid, error = %e, "killing the command's process group failed");
            }
        }
    }

    #[cfg(not(unix))]
    fn kill(&mut self) {}
}

impl Drop for GroupGuard {
    fn drop(&mut self) {
        self.kill();
    }
}

/// One output pipe read by a background task into a capped buffer.
struct Capture {
    buf: Arc<Mutex<Vec<u8>>>,
    task: Option<JoinHandle<io::Result<()>>>,
    error: Option<io::Error>,
}

impl Capture {
    fn start(
        pipe: Option<impl AsyncRead + Unpin + Send + 'static>,
        lines: Option<LineSink>,
        fail_over: Option<Arc<OverflowSignal>>,
    ) -> Self {
        let buf = Arc::new(Mutex::new(Vec::new()));
        let task =
            pipe.map(|pipe| tokio::spawn(read_capped(pipe, Arc::clone(&buf), lines, fail_over)));
        Capture {
            buf,
            task,
            error: None,
        }
    }

    /// Waits until the pipe reaches end-of-file or `deadline` passes; true if it finished.
    async fn settle(&mut self, deadline: Instant) -> bool {
        let Some(task) = self.task.as_mut() else {
            return true;
        };
        match tokio::time::timeout_at(deadline, task).await {
            Err(_) => false,
            Ok(joined) => {
                self.task = None;
                match joined {
                    Ok(Ok(())) => {}
                    Ok(Err(e)) => self.error = Some(e),
                    Err(e) => self.error = Some(io::Error::other(e)),
                }
                true
            }
        }
    }

    /// Stops reading and returns what was captured, plus any read error.
    fn finish(mut self) -> (String, Option<io::Error>) {
        if let Some(task) = self.task.take() {
            task.abort();
        }
        let bytes = std::mem::take(&mut *self.buf.lock().unwrap_or_else(PoisonError::into_inner));
        (String::from_utf8_lossy(&bytes).into_owned(), self.error)
    }
}

/// The longest stderr line handed to a [`LineSink`]; longer lines are skipped whole.
pub const MAX_LINE: usize = 4 * 1024;

/// Splits a byte stream into lines for a [`LineSink`], holding at most [`MAX_LINE`] bytes of an
/// unfinished line.
#[derive(Default)]
struct Lines {
    line: Vec<u8>,
    /// In a line too long to look at, until its newline.
    skipping: bool,
}

impl Lines {
    /// Feeds `bytes`; hands each complete line (without `\n` or a trailing `\r`) to `sink`.
    fn feed(&mut self, bytes: &[u8], sink: &LineSink) {
        for piece in bytes.split_inclusive(|b| *b == b'\n') {
            let complete = piece.last() == Some(&b'\n');
            let piece = piece.strip_suffix(b"\n").unwrap_or(piece);
            if !self.skipping {
                if self.line.len() + piece.len() > MAX_LINE {
                    self.line.clear();
                    self.skipping = true;
                } else {
                    self.line.extend_from_slice(piece);
                }
            }
            if complete {
                if !self.skipping {
                    let line = String::from_utf8_lossy(&self.line);
                    (sink.0)(line.trim_end_matches('\r'));
                }
                self.line.clear();
                self.skipping = false;
            }
        }
    }
}

async fn read_capped(
    mut pipe: impl AsyncRead + Unpin,
    buf: Arc<Mutex<Vec<u8>>>,
    sink: Option<LineSink>,
    fail_over: Option<Arc<OverflowSignal>>,
) -> io::Result<()> {
    let mut chunk = vec![0u8; 64 * 1024];
    let mut lines = Lines::default();
    loop {
        let n = match pipe.read(&mut chunk).await {
            Ok(0) => return Ok(()),
            Ok(n) => n,
            Err(e) if e.kind() == io::ErrorKind::Interrupted => continue,
            Err(e) => return Err(e),
        };
        if let Some(sink) = &sink {
            lines.feed(&chunk[..n], sink);
        }
        let mut kept = buf.lock().unwrap_or_else(PoisonError::into_inner);
        let room = MAX_OUTPUT.saturating_sub(kept.len());
        kept.extend_from_slice(&chunk[..n.min(room)]);
        if n > room {
            if let Some(signal) = &fail_over {
                signal.hit.store(true, std::sync::atomic::Ordering::Release);
                signal.notify.notify_one();
                return Ok(());
            }
        }
    }
}

#[cfg(all(test, unix))]
mod tests {
    use super::*;
    use std::path::Path;
    use std::sync::atomic::{AtomicU32, Ordering};
    use std::time::Instant as StdInstant;

    /// A fresh directory under the system temp dir, removed on drop.
    struct TempDir(PathBuf);

    impl TempDir {
        fn new() -> TempDir {
            static NEXT: AtomicU32 = AtomicU32::new(0);
            let nanos = std::time::SystemTime::now()
                .duration_since(std::time::UNIX_EPOCH)
                .map(|d| d.subsec_nanos())
                .unwrap_or(0);
            let path = std::env::temp_dir().join(format!(
                "switchboard-runner-test-{}-{}-{nanos}",
                std::process::id(),
                NEXT.fetch_add(1, Ordering::Relaxed),
            ));
            std::fs::create_dir_all(&path).expect("create temp dir");
            TempDir(path)
        }
    }

    impl Drop for TempDir {
        fn drop(&mut self) {
            let _ = std::fs::remove_dir_all(&self.0);
        }
    }

    fn sh(script: &str, cwd: &Path, timeout: Duration) -> CommandSpec {
        CommandSpec {
            cwd: Some(cwd.to_path_buf()),
            ..CommandSpec::new("/bin/sh", vec!["-c".into(), script.into()], timeout)
        }
    }

    /// Never resolves: no abort.
    fn never() -> std::future::Pending<()> {
        std::future::pending()
    }

    /// Reads a pid the script wrote to `file`, waiting for it briefly.
    async fn read_pid(file: &Path) -> libc::pid_t {
        for _ in 0..100 {
            if let Ok(text) = std::fs::read_to_string(file) {
                if let Ok(pid) = text.trim().parse() {
                    return pid;
                }
            }
            tokio::time::sleep(Duration::from_millis(20)).await;
        }
        panic!("no pid in {}", file.display());
    }

    /// False once the process is gone (or a zombie no one has reaped yet: it is dead all the same).
    #[allow(unsafe_code)] // one FFI call, see SAFETY below
    fn alive(pid: libc::pid_t) -> bool {
        // SAFETY: signal 0 only checks for existence.
        if unsafe { libc::kill(pid, 0) } == -1 {
            return io::Error::last_os_error().raw_os_error() != Some(libc::ESRCH);
        }
        match std::fs::read_to_string(format!("/proc/{pid}/stat")) {
            // The state is the first field after the parenthesised command name.
            Ok(stat) => !matches!(
                stat.rsplit(')').next().map(str::trim_start),
                Some(s) if s.starts_with('Z') || s.starts_with('X')
            ),
            Err(_) => false,
        }
    }

    /// Polls for at most 2 s until `pid` is dead.
    async fn assert_dies(pid: libc::pid_t) {
        let start = StdInstant::now();
        while alive(pid) {
            assert!(
                start.elapsed() < Duration::from_secs(2),
                "process {pid} survived: an orphan was left behind"
            );
            tokio::time::sleep(Duration::from_millis(20)).await;
        }
    }

    #[tokio::test]
    async fn stdout_stdin_and_exit_code() {
        let dir = TempDir::new();
        let spec = sh(
            "echo start; cat; echo oops >&2; exit 3",
            &dir.0,
            Duration::from_secs(10),
        );
        let outcome = run_command(&spec, "the prompt\nline two", never())
            .await
            .expect("runs");
        match outcome {
            RunOutcome::Exited {
                code,
                stdout,
                stderr,
            } => {
                assert_eq!(code, Some(3));
                assert_eq!(stdout, "start\nthe prompt\nline two");
                assert_eq!(stderr, "oops\n");
            }
            other => panic!("unexpected {other:?}"),
        }
    }

    #[tokio::test]
    async fn environment_is_exactly_spec_env() {
        // The test process surely has PATH; the agent must not see it unless passed.
        assert!(std::env::var_os("PATH").is_some());
        let dir = TempDir::new();
        let spec = CommandSpec {
            cwd: Some(dir.0.clone()),
            env: vec![
                ("SWITCHBOARD_URL".into(), "http://127.0.0.1:1/".into()),
                ("SWITCHBOARD_TOKEN".into(), "tok".into()),
            ],
            ..CommandSpec::new("/usr/bin/env", Vec::new(), Duration::from_secs(10))
        };
        match run_command(&spec, "", never()).await.expect("runs") {
            RunOutcome::Exited {
                code: Some(0),
                stdout,
                ..
            } => {
                let mut lines: Vec<&str> = stdout.lines().collect();
                lines.sort_unstable();
                assert_eq!(
                    lines,
                    [
                        "SWITCHBOARD_TOKEN=tok",
                        "SWITCHBOARD_URL=http://127.0.0.1:1/"
                    ],
                    "HOME, PATH or another inherited variable leaked"
                );
            }
            other => panic!("unexpected {other:?}"),
        }
    }

    #[tokio::test]
    async fn cwd_is_honoured() {
        let dir = TempDir::new();
        std::fs::write(dir.0.join("marker.txt"), "here").expect("write marker");
        let spec = sh("cat marker.txt", &dir.0, Duration::from_secs(10));
        match run_command(&spec, "", never()).await.expect("runs") {
            RunOutcome::Exited {
                code: Some(0),
                stdout,
                ..
            } => assert_eq!(stdout, "here"),
            other => panic!("unexpected {other:?}"),
        }
    }

    #[tokio::test]
    async fn timeout_kills_the_whole_group() {
        let dir = TempDir::new();
        let spec = sh(
            "sleep 30 & echo $! > gc.pid; echo partial; sleep 30",
            &dir.0,
            Duration::from_millis(500),
        );
        let start = StdInstant::now();
        let outcome = run_command(&spec, "", never()).await.expect("runs");
        assert!(start.elapsed() < Duration::from_secs(4), "took too long");
        match outcome {
            RunOutcome::TimedOut { stdout, .. } => assert_eq!(stdout, "partial\n"),
            other => panic!("unexpected {other:?}"),
        }
        assert_dies(read_pid(&dir.0.join("gc.pid")).await).await;
    }

    #[tokio::test]
    async fn abort_kills_the_whole_group() {
        let dir = TempDir::new();
        let spec = sh(
            "sleep 30 & echo $! > gc.pid; sleep 30",
            &dir.0,
            Duration::from_secs(20),
        );
        let start = StdInstant::now();
        let abort = tokio::time::sleep(Duration::from_millis(200));
        let outcome = run_command(&spec, "", abort).await.expect("runs");
        assert!(start.elapsed() < Duration::from_secs(4), "took too long");
        assert!(matches!(outcome, RunOutcome::Aborted { .. }), "{outcome:?}");
        assert_dies(read_pid(&dir.0.join("gc.pid")).await).await;
    }

    #[tokio::test]
    async fn grandchild_holding_stdout_does_not_hang_and_is_killed() {
        let dir = TempDir::new();
        // The background sleep inherits stdout and stderr, so they never reach EOF on their own.
        let spec = sh(
            "sleep 30 & echo $! > gc.pid; echo done",
            &dir.0,
            Duration::from_secs(20),
        );
        let start = StdInstant::now();
        let outcome = run_command(&spec, "", never()).await.expect("runs");
        assert!(
            start.elapsed() < Duration::from_secs(3),
            "took {:?}",
            start.elapsed()
        );
        match outcome {
            RunOutcome::Exited {
                code: Some(0),
                stdout,
                ..
            } => assert_eq!(stdout, "done\n"),
            other => panic!("unexpected {other:?}"),
        }
        assert_dies(read_pid(&dir.0.join("gc.pid")).await).await;
    }

    #[tokio::test]
    async fn quiet_grandchild_is_killed_after_exit() {
        let dir = TempDir::new();
        // Not holding our pipes, so nothing would make us wait; it must still not outlive the run.
        let spec = sh(
            "sleep 30 </dev/null >/dev/null 2>&1 & echo $! > gc.pid",
            &dir.0,
            Duration::from_secs(20),
        );
        let outcome = run_command(&spec, "", never()).await.expect("runs");
        assert!(
            matches!(outcome, RunOutcome::Exited { code: Some(0), .. }),
            "{outcome:?}"
        );
        assert_dies(read_pid(&dir.0.join("gc.pid")).await).await;
    }

    #[tokio::test]
    async fn dropping_the_run_kills_the_group() {
        let dir = TempDir::new();
        let spec = sh(
            "sleep 30 & echo $! > gc.pid; sleep 30",
            &dir.0,
            Duration::from_secs(20),
        );
        let run = run_command(&spec, "", never());
        let cut = tokio::time::timeout(Duration::from_millis(300), run).await;
        assert!(cut.is_err(), "the run should still have been going");
        assert_dies(read_pid(&dir.0.join("gc.pid")).await).await;
    }

    #[tokio::test]
    async fn missing_program_is_a_spawn_error() {
        let dir = TempDir::new();
        let spec = CommandSpec {
            cwd: Some(dir.0.clone()),
            ..CommandSpec::new(
                "/nonexistent/no-such-agent",
                Vec::new(),
                Duration::from_secs(5),
            )
        };
        let err = run_command(&spec, "", never()).await.expect_err("fails");
        assert!(matches!(err, RunnerError::Spawn { .. }), "{err:?}");
        let message = err.to_string();
        assert!(message.contains("/nonexistent/no-such-agent"), "{message}");
    }

    #[tokio::test]
    async fn missing_cwd_is_a_spawn_error() {
        let dir = TempDir::new();
        let spec = sh("true", &dir.0.join("absent"), Duration::from_secs(5));
        let err = run_command(&spec, "", never()).await.expect_err("fails");
        assert!(matches!(err, RunnerError::Spawn { .. }), "{err:?}");
    }

    #[tokio::test]
    async fn huge_output_is_capped_without_hanging() {
        let dir = TempDir::new();
        let spec = sh(
            "yes | head -c 3000000; yes | head -c 3000000 >&2",
            &dir.0,
            Duration::from_secs(20),
        );
        match run_command(&spec, "", never()).await.expect("runs") {
            RunOutcome::Exited {
                code: Some(0),
                stdout,
                stderr,
            } => {
                assert_eq!(stdout.len(), MAX_OUTPUT);
                assert_eq!(stderr.len(), MAX_OUTPUT);
                assert!(stdout.starts_with("y\ny\n"));
            }
            other => panic!("unexpected {other:?}"),
        }
    }

    #[tokio::test]
    async fn unread_stdin_does_not_deadlock() {
        let dir = TempDir::new();
        let spec = sh("echo ignored; exit 0", &dir.0, Duration::from_secs(10));
        let prompt = "x".repeat(4 * 1024 * 1024);
        match run_command(&spec, &prompt, never()).await.expect("runs") {
            RunOutcome::Exited {
                code: Some(0),
                stdout,
                ..
            } => assert_eq!(stdout, "ignored\n"),
            other => panic!("unexpected {other:?}"),
        }
    }

    #[tokio::test]
    async fn non_utf8_output_is_replaced() {
        let dir = TempDir::new();
        let spec = sh("printf '\\377ok'", &dir.0, Duration::from_secs(10));
        match run_command(&spec, "", never()).await.expect("runs") {
            RunOutcome::Exited { stdout, .. } => assert_eq!(stdout, "\u{FFFD}ok"),
            other => panic!("unexpected {other:?}"),
        }
    }

    #[tokio::test]
    async fn killed_by_signal_has_no_code() {
        let dir = TempDir::new();
        let spec = sh("kill -9 $$", &dir.0, Duration::from_secs(10));
        match run_command(&spec, "", never()).await.expect("runs") {
            RunOutcome::Exited { code, .. } => assert_eq!(code, None),
            other => panic!("unexpected {other:?}"),
        }
    }

    /// A sink that keeps every line it is handed.
    fn collecting() -> (LineSink, Arc<Mutex<Vec<String>>>) {
        let seen = Arc::new(Mutex::new(Vec::new()));
        let kept = Arc::clone(&seen);
        let sink = LineSink(Arc::new(move |line: &str| {
            kept.lock().unwrap().push(line.to_owned());
        }));
        (sink, seen)
    }

    #[test]
    fn lines_are_found_across_chunks_and_overlong_lines_skipped() {
        let (sink, seen) = collecting();
        let mut lines = Lines::default();
        lines.feed(b"noise\nprogress: rea", &sink);
        assert_eq!(*seen.lock().unwrap(), ["noise"]);
        lines.feed(b"ding #ops\r\n", &sink);
        assert_eq!(*seen.lock().unwrap(), ["noise", "progress: reading #ops"]);
        let long = format!("{}\nnext\n", "x".repeat(MAX_LINE + 1));
        lines.feed(long.as_bytes(), &sink);
        assert_eq!(
            *seen.lock().unwrap(),
            ["noise", "progress: reading #ops", "next"]
        );
        assert!(lines.line.is_empty());
    }

    #[tokio::test]
    async fn stderr_lines_reach_the_sink_while_it_runs() {
        let dir = TempDir::new();
        let (sender, mut receiver) = tokio::sync::watch::channel(String::new());
        let mut spec = sh(
            "echo 'step one' >&2; read line; echo done",
            &dir.0,
            Duration::from_secs(10),
        );
        spec.stderr_lines = Some(LineSink(Arc::new(move |line: &str| {
            sender.send_replace(line.to_owned());
        })));
        let run = tokio::spawn(async move { run_command(&spec, "go\n", never()).await });
        tokio::time::timeout(Duration::from_secs(10), receiver.changed())
            .await
            .expect("a line in time")
            .expect("sender alive");
        assert_eq!(*receiver.borrow(), "step one");
        let outcome = run.await.expect("joins");
        assert!(matches!(
            outcome,
            Ok(RunOutcome::Exited { code: Some(0), .. })
        ));
    }

    #[tokio::test]
    async fn failing_overflow_ends_the_run_at_once_and_kills_the_group() {
        let dir = TempDir::new();
        let mut spec = sh(
            "sleep 30 & echo $! > gc.pid; yes | head -c 3000000; sleep 30",
            &dir.0,
            Duration::from_secs(60),
        );
        spec.overflow = Overflow::Fail;
        let start = StdInstant::now();
        let outcome = run_command(&spec, "", never()).await.expect("runs");
        // Generous: the point is that it does not wait for the 60 s timeout.
        assert!(
            start.elapsed() < Duration::from_secs(20),
            "took {:?}",
            start.elapsed()
        );
        match outcome {
            RunOutcome::Overflowed { stdout, .. } => assert_eq!(stdout.len(), MAX_OUTPUT),
            _ => panic!("not overflowed"),
        }
        assert_dies(read_pid(&dir.0.join("gc.pid")).await).await;
    }

    #[tokio::test]
    async fn an_answer_over_the_cap_fails_even_when_it_exits_at_once() {
        let dir = TempDir::new();
        let mut spec = sh("yes | head -c 1048577", &dir.0, Duration::from_secs(60));
        spec.overflow = Overflow::Fail;
        let outcome = run_command(&spec, "", never()).await.expect("runs");
        assert!(
            matches!(outcome, RunOutcome::Overflowed { .. }),
            "not overflowed"
        );
        // Exactly the cap is still an answer.
        let mut spec = sh("yes | head -c 1048576", &dir.0, Duration::from_secs(60));
        spec.overflow = Overflow::Fail;
        match run_command(&spec, "", never()).await.expect("runs") {
            RunOutcome::Exited { stdout, .. } => assert_eq!(stdout.len(), MAX_OUTPUT),
            _ => panic!("the cap itself is an answer"),
        }
    }
}
