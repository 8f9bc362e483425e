//! A session's long-lived sandbox: one bubblewrap per session instead of one per command.
//!
//! Creating namespaces and mounts is most of what a sandboxed command costs (bubblewrap alone
//! takes longer than the command `true`). A [`SessionSandbox`] builds the walls once, on the
//! session's first command: bubblewrap with the same walls as a one-shot command, running the
//! helper as a zygote ([`crate::supervisor`]) that stays inside and starts each command on
//! request. Each command still gets its own process group, resource limits, Landlock layer,
//! `pids` cgroup (when the service runs as root) and a supervisor that kills its whole tree
//! on a timeout, a kill or a dropped call; its output pipes are made by the service and handed
//! in (`SCM_RIGHTS`), so the service reads them as it reads a one-shot command's.
//!
//! What the session's commands share, and the one-shot path does not: the sandbox's `/tmp`
//! (size-capped, fresh per sandbox, gone when the sandbox stops: a scratch place, the
//! workspace is where files stay), its PID, IPC, UTS and network namespaces (a command sees
//! the session's other processes in `/proc`; Landlock keeps it from signalling or tracing
//! them and the zygote), and, when the service does not run as root, the process limit
//! (`RLIMIT_NPROC` counts the processes of the sandbox's user, so it bounds the session as a
//! whole). None of it is shared across sessions: each session has its own sandbox.
//!
//! A `/tmp` per session rather than per command is acceptable: every command of a session is
//! the same agent's, which can already read and change everything in its workspace, so what
//! one command leaves in `/tmp` tells the next nothing it could not have put in the
//! workspace; it is what a shell user expects between commands, and it is still never another
//! session's. A `/tmp` per command would need a mount namespace per command, which the zygote
//! cannot make: it has no capabilities, and Landlock forbids mounting once applied.
//!
//! The zygote is started lazily, replaced transparently when it died (the command that finds
//! it dead is retried once in a new one), stopped when the session has been idle for
//! [`crate::ShellOptions::sandbox_idle`] with nothing running, when its options change
//! (network on or off: commands still running keep the old one until they end), and when
//! the [`SessionSandbox`] is dropped. It dies with the service: bubblewrap is started from a
//! thread that lives as long as the process, with `--die-with-parent`, so a killed service
//! takes every session's sandbox with it.

use std::ffi::OsString;
use std::io::{IoSlice, IoSliceMut};
use std::mem::MaybeUninit;
use std::os::fd::{AsFd, AsRawFd, BorrowedFd, OwnedFd};
use std::os::unix::process::CommandExt;
use std::path::{Path, PathBuf};
use std::process::Stdio;
use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::{Arc, Mutex, Weak};
use std::time::{Duration, Instant};

use rustix::net::{
    recvmsg, sendmsg, AddressFamily, RecvAncillaryBuffer, RecvAncillaryMessage, RecvFlags,
    SendAncillaryBuffer, SendAncillaryMessage, SendFlags, Shutdown, SocketFlags, SocketType,
};
use tokio::io::unix::AsyncFd;
use tokio::io::AsyncReadExt;

use crate::error::SandboxError;
use crate::helper::HelperArgs;
use crate::process::{finish, Output, Process, RunOutput, RunSpec, Running, Sandbox, Walls};
use crate::supervisor::CONTROL_FD;
use crate::wire::{self, Exit, FdRole, Request};

/// How long a new zygote may take to report that its walls are up.
const READY_WAIT: Duration = Duration::from_secs(30);
/// How long a zygote may take to start a command's supervisor before it is taken for dead.
const STARTED_WAIT: Duration = Duration::from_secs(10);

/// A session's sandbox, started on first use. Cheap to share (`Arc`); the shell, git and the
/// workspace of one session use the same one.
pub struct SessionSandbox {
    sandbox: Arc<Sandbox>,
    root: PathBuf,
    idle: Duration,
    me: Weak<SessionSandbox>,
    slot: Mutex<Slot>,
    /// One start at a time: two first commands arriving together share one zygote.
    starting: tokio::sync::Mutex<()>,
}

struct Slot {
    zygote: Option<Arc<Zygote>>,
    network: bool,
    last_used: Instant,
    /// Bumped at each start, so that an idle watch only stops the zygote it was started for.
    generation: u64,
}

impl std::fmt::Debug for SessionSandbox {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("SessionSandbox")
            .field("root", &self.root)
            .field("zygote", &self.zygote_pid())
            .finish_non_exhaustive()
    }
}

/// Why a command did not start in a zygote.
enum StartError {
    /// The zygote is gone (or stopped answering): start a new one and try again.
    Gone,
    Failed(SandboxError),
}

impl From<SandboxError> for StartError {
    fn from(error: SandboxError) -> Self {
        Self::Failed(error)
    }
}

impl SessionSandbox {
    /// The sandbox of the session whose workspace is `root` (which must exist). Nothing starts
    /// until the first command; an idle sandbox stops after `idle`.
    pub fn new(
        sandbox: Arc<Sandbox>,
        root: &Path,
        idle: Duration,
    ) -> Result<Arc<Self>, SandboxError> {
        let root = root.canonicalize().map_err(SandboxError::io(format!(
            "cannot open the workspace {}",
            root.display()
        )))?;
        let network = sandbox.options().network;
        Ok(Arc::new_cyclic(|me| Self {
            sandbox,
            root,
            idle,
            me: me.clone(),
            slot: Mutex::new(Slot {
                zygote: None,
                network,
                last_used: Instant::now(),
                generation: 0,
            }),
            starting: tokio::sync::Mutex::new(()),
        }))
    }

    /// The workspace root (canonical).
    pub fn root(&self) -> &Path {
        &self.root
    }

    pub fn sandbox(&self) -> &Arc<Sandbox> {
        &self.sandbox
    }

    /// Whether this session's commands reach the network.
    pub fn network(&self) -> bool {
        lock(&self.slot).network
    }

    /// Turns the network on or off for this session's next commands. A change stops using the
    /// current sandbox (its running commands keep it until they end) and the next command
    /// starts one with the new walls.
    pub fn set_network(&self, on: bool) {
        let mut slot = lock(&self.slot);
        if slot.network != on {
            slot.network = on;
            slot.zygote = None;
        }
    }

    /// The process id (as the service sees it) of the running sandbox's bubblewrap, if one
    /// runs.
    pub fn zygote_pid(&self) -> Option<u32> {
        lock(&self.slot)
            .zygote
            .as_ref()
            .filter(|z| z.alive())
            .map(|z| z.pid)
    }

    /// Stops the sandbox now, with every command running in it.
    pub fn shutdown(&self) {
        if let Some(zygote) = lock(&self.slot).zygote.take() {
            zygote.kill();
        }
    }

    /// Runs a command to its end or its timeout. A command whose walls differ from the
    /// session's (more writable places, another workspace) runs in a bubblewrap of its own.
    pub async fn run(&self, spec: &RunSpec) -> Result<RunOutput, SandboxError> {
        let started = Instant::now();
        let running = self.spawn(spec).await?;
        let output = finish(running, spec, started).await;
        lock(&self.slot).last_used = Instant::now();
        output
    }

    /// Starts a command; it runs until it ends or the returned handle is dropped.
    pub(crate) async fn spawn(&self, spec: &RunSpec) -> Result<Running, SandboxError> {
        if spec.argv.is_empty() {
            return Err(SandboxError::BadRequest("nothing to run".into()));
        }
        if spec.root != self.root || !spec.extra_writable.is_empty() {
            return self.sandbox.spawn(spec, false);
        }
        for attempt in 0..2 {
            let zygote = self.zygote().await?;
            match zygote.command(&self.sandbox, spec).await {
                Ok(running) => return Ok(running),
                Err(StartError::Failed(error)) => return Err(error),
                Err(StartError::Gone) => {
                    tracing::warn!(
                        root = %self.root.display(),
                        attempt,
                        "the session's sandbox stopped; starting a new one"
                    );
                    zygote.kill();
                    let mut slot = lock(&self.slot);
                    if slot
                        .zygote
                        .as_ref()
                        .is_some_and(|z| Arc::ptr_eq(z, &zygote))
                    {
                        slot.zygote = None;
                    }
                }
            }
        }
        Err(SandboxError::unavailable(
            "the session's sandbox stopped twice while starting a command",
            "Check the service's log for the sandbox's own messages (a failing mount, a missing program).",
        ))
    }

    /// The running zygote, started (or restarted) when there is none.
    async fn zygote(&self) -> Result<Arc<Zygote>, SandboxError> {
        let _one_start = self.starting.lock().await;
        let network = {
            let mut slot = lock(&self.slot);
            if let Some(zygote) = &slot.zygote {
                if zygote.alive() {
                    let zygote = Arc::clone(zygote);
                    slot.last_used = Instant::now();
                    return Ok(zygote);
                }
            }
            slot.zygote = None;
            slot.network
        };
        let zygote = Zygote::start(&self.sandbox, &self.root, network).await?;
        let generation = {
            let mut slot = lock(&self.slot);
            slot.generation += 1;
            slot.last_used = Instant::now();
            if slot.network == network {
                slot.zygote = Some(Arc::clone(&zygote));
            }
            slot.generation
        };
        self.watch_idle(generation);
        Ok(zygote)
    }

    /// Stops the zygote of `generation` once the session has been idle for `idle` with
    /// nothing running in it.
    fn watch_idle(&self, generation: u64) {
        let me = self.me.clone();
        let idle = self.idle;
        tokio::spawn(async move {
            let mut wait = idle;
            loop {
                tokio::time::sleep(wait).await;
                let Some(session) = me.upgrade() else {
                    return;
                };
                let mut slot = lock(&session.slot);
                if slot.generation != generation {
                    return;
                }
                let Some(zygote) = &slot.zygote else {
                    return;
                };
                let quiet = slot.last_used.elapsed();
                // Running commands hold the zygote too: only the slot's hold means none runs.
                if quiet >= idle && Arc::strong_count(zygote) == 1 {
                    tracing::debug!(root = %session.root.display(), "stopping an idle session sandbox");
                    slot.zygote = None;
                    return;
                }
                wait = idle.saturating_sub(quiet).max(Duration::from_millis(50));
            }
        });
    }
}

impl Drop for SessionSandbox {
    fn drop(&mut self) {
        self.shutdown();
    }
}

/// One running zygote: its bubblewrap (leader of its own process group) and the control
/// socket. Dropping the last handle kills it, and with it every command inside.
pub(crate) struct Zygote {
    pid: u32,
    control: Packet,
    child: Mutex<Option<std::process::Child>>,
    gone: AtomicBool,
}

impl Zygote {
    async fn start(
        sandbox: &Sandbox,
        root: &Path,
        network: bool,
    ) -> Result<Arc<Self>, SandboxError> {
        let (ours, theirs) =
            Packet::pair().map_err(SandboxError::io("cannot make the sandbox's socket"))?;
        let walls = Walls {
            root,
            cwd: root,
            extra_writable: &[],
            network,
        };
        let mut command = std::process::Command::new(sandbox.bwrap());
        command
            .args(sandbox.bwrap_args(&walls))
            // The zygote is the namespace's init: out of reach of its commands' signals.
            .arg("--as-pid-1")
            .arg("--")
            .arg(crate::process::HELPER_INSIDE)
            .args(&sandbox.options().helper.args)
            .args(
                HelperArgs {
                    zygote: true,
                    ..sandbox.helper_args(&walls)
                }
                .to_args(),
            )
            .stdin(Stdio::null())
            .stdout(Stdio::null())
            .stderr(Stdio::piped())
            .process_group(0);
        let control_fd = theirs.as_raw_fd();
        // SAFETY: the closure only calls dup2/fcntl (async-signal-safe) on a descriptor that
        // stays open in the parent until the spawn returned.
        #[allow(unsafe_code)]
        unsafe {
            command.pre_exec(move || crate::process::dup_to(control_fd, CONTROL_FD));
        }
        let mut child = keeper::spawn(command).await.map_err(|e| {
            SandboxError::unavailable(
                format!("cannot start {}: {e}", sandbox.bwrap().display()),
                crate::process::INSTALL_BWRAP,
            )
        })?;
        drop(theirs);
        let pid = child.id();
        let stderr = child
            .stderr
            .take()
            .and_then(|s| tokio::net::unix::pipe::Receiver::from_owned_fd(OwnedFd::from(s)).ok());
        let control =
            Packet::new(ours).map_err(SandboxError::io("cannot watch the sandbox's socket"))?;
        let zygote = Arc::new(Self {
            pid,
            control,
            child: Mutex::new(Some(child)),
            gone: AtomicBool::new(false),
        });
        let mut buffer = [0u8; 256];
        let ready = tokio::time::timeout(READY_WAIT, zygote.control.recv(&mut buffer)).await;
        match ready {
            Ok(Ok((n, _))) if buffer[..n].starts_with(wire::READY.as_bytes()) => {
                if let Some(stderr) = stderr {
                    tokio::spawn(log_lines(stderr, pid));
                }
                Ok(zygote)
            }
            other => {
                zygote.kill();
                let said = match other {
                    Ok(Ok((n, _))) => String::from_utf8_lossy(&buffer[..n]).into_owned(),
                    Ok(Err(error)) => error.to_string(),
                    Err(_) => format!("no answer in {} s", READY_WAIT.as_secs()),
                };
                let stderr = match stderr {
                    Some(stderr) => read_some(stderr).await,
                    None => String::new(),
                };
                Err(SandboxError::unavailable(
                    format!(
                        "the session's sandbox did not start: {} {}",
                        said.trim(),
                        stderr.trim()
                    ),
                    "bubblewrap needs user namespaces (sysctl kernel.unprivileged_userns_clone=1 where that exists, or run as root); check that `bwrap --ro-bind / / --unshare-all --unshare-user --as-pid-1 true` works.",
                ))
            }
        }
    }

    /// Whether bubblewrap still runs (and no send found the zygote gone).
    fn alive(&self) -> bool {
        if self.gone.load(Ordering::Relaxed) {
            return false;
        }
        let mut child = lock(&self.child);
        matches!(
            child.as_mut().map(std::process::Child::try_wait),
            Some(Ok(None))
        )
    }

    /// SIGKILL to bubblewrap (unless it was already reaped: its pid could be reused); the
    /// sandbox's PID namespace dies with it.
    fn kill(&self) {
        self.gone.store(true, Ordering::Relaxed);
        let mut child = lock(&self.child);
        if let Some(child) = child.as_mut() {
            if matches!(child.try_wait(), Ok(None)) {
                crate::process::kill_group(self.pid as i32);
            }
        }
    }

    /// Starts one command.
    async fn command(
        self: &Arc<Self>,
        sandbox: &Sandbox,
        spec: &RunSpec,
    ) -> Result<Running, StartError> {
        let group = sandbox.command_group()?;
        let pipe = || std::io::pipe().map_err(SandboxError::io("cannot make a pipe"));
        let (ours, theirs) =
            Packet::pair().map_err(SandboxError::io("cannot make the command's socket"))?;
        rustix::net::sockopt::set_socket_passcred(&ours, true)
            .map_err(|e| SandboxError::io("cannot set up the command's socket")(e.into()))?;
        let (out_r, out_w) = pipe()?;
        let err = if spec.merge_stderr {
            None
        } else {
            Some(pipe()?)
        };
        let cwd = if spec.report_cwd { Some(pipe()?) } else { None };
        let mut roles = vec![FdRole::Socket, FdRole::Stdout];
        let mut fds: Vec<BorrowedFd> = vec![theirs.as_fd(), out_w.as_fd()];
        if let Some((_, w)) = &err {
            roles.push(FdRole::Stderr);
            fds.push(w.as_fd());
        }
        if let Some((_, w)) = &cwd {
            roles.push(FdRole::Cwd);
            fds.push(w.as_fd());
        }
        let env = sandbox
            .environment(&spec.root, &spec.env)
            .into_iter()
            .map(|(name, value)| OsString::from(format!("{name}={value}")))
            .collect();
        let request = Request {
            cwd: spec.cwd.clone(),
            argv: spec.argv.clone(),
            env,
            wait_for_go: group.is_some(),
            fds: roles,
        }
        .encode()
        .map_err(|e| SandboxError::BadRequest(e.to_string()))?;
        if self.control.send(&request, &fds).await.is_err() {
            return Err(StartError::Gone);
        }
        drop(fds);
        drop((theirs, out_w));
        let err_r = err.map(|(r, _)| r);
        let cwd_reader = cwd.map(|(r, _)| r);
        let socket =
            Packet::new(ours).map_err(SandboxError::io("cannot watch the command's socket"))?;
        let mut buffer = [0u8; 512];
        let (n, pid) = match tokio::time::timeout(STARTED_WAIT, socket.recv(&mut buffer)).await {
            Ok(Ok((n, pid))) if n > 0 => (n, pid),
            _ => return Err(StartError::Gone),
        };
        let message = &buffer[..n];
        if let Some(why) = message.strip_prefix(wire::ERROR.as_bytes()) {
            return Err(StartError::Failed(SandboxError::Io {
                what: "the session's sandbox could not start the command".into(),
                source: std::io::Error::other(String::from_utf8_lossy(why).trim().to_owned()),
            }));
        }
        if message != wire::STARTED.as_bytes() {
            return Err(StartError::Gone);
        }
        if let Some(group) = &group {
            let pid = pid.ok_or_else(|| SandboxError::Io {
                what: "the command's supervisor sent no credentials".into(),
                source: std::io::Error::other("no SCM_CREDENTIALS"),
            })?;
            group
                .add(pid)
                .map_err(SandboxError::io("cannot put the command in its cgroup"))?;
            if socket.send(wire::GO.as_bytes(), &[]).await.is_err() {
                return Err(StartError::Gone);
            }
        }
        let reader = |r: std::io::PipeReader| -> Result<Output, SandboxError> {
            let receiver = tokio::net::unix::pipe::Receiver::from_owned_fd(OwnedFd::from(r))
                .map_err(SandboxError::io("cannot read the command's output"))?;
            Ok(Box::new(receiver))
        };
        Ok(Running {
            process: Process::Zygote(Command {
                socket,
                exit: None,
                ended: false,
                _zygote: Arc::clone(self),
            }),
            group,
            cwd_reader,
            stdout: Some(reader(out_r)?),
            stderr: err_r.map(reader).transpose()?,
        })
    }
}

impl Drop for Zygote {
    fn drop(&mut self) {
        self.kill();
        if let Some(child) = lock(&self.child).take() {
            keeper::reap(child);
        }
    }
}

/// A command running in a zygote, as the service holds it: its supervisor's socket.
pub(crate) struct Command {
    socket: Packet,
    exit: Option<Exit>,
    ended: bool,
    /// The zygote lives while one of its commands runs.
    _zygote: Arc<Zygote>,
}

impl Command {
    /// Tells the supervisor to kill the command's whole tree (it does, then exits).
    pub fn kill(&mut self) {
        self.socket.shutdown();
    }

    /// How the command ended, once its supervisor is gone (and so is everything it watched).
    /// Ending without a report means it was killed.
    pub async fn wait(&mut self) -> std::io::Result<Exit> {
        let mut buffer = [0u8; 512];
        while !self.ended {
            let (n, _) = self.socket.recv(&mut buffer).await?;
            if n == 0 {
                self.ended = true;
            } else if let Some(exit) = Exit::parse(&buffer[..n]) {
                self.exit = Some(exit);
            } else {
                tracing::warn!(
                    message = %String::from_utf8_lossy(&buffer[..n]),
                    "a command's supervisor said something unexpected"
                );
            }
        }
        Ok(self.exit.unwrap_or(Exit::KILLED))
    }
}

/// A `SOCK_SEQPACKET` socket read and written without blocking a thread.
struct Packet {
    fd: AsyncFd<OwnedFd>,
}

impl Packet {
    fn pair() -> std::io::Result<(OwnedFd, OwnedFd)> {
        Ok(rustix::net::socketpair(
            AddressFamily::UNIX,
            SocketType::SEQPACKET,
            SocketFlags::CLOEXEC,
            None,
        )?)
    }

    #[allow(unsafe_code)] // AsyncFd::register, see SAFETY below
    fn new(fd: OwnedFd) -> std::io::Result<Self> {
        rustix::io::ioctl_fionbio(&fd, true)?;
        // SAFETY: an OwnedFd keeps its one descriptor open, unchanged, until it is dropped,
        // which happens only with the AsyncFd.
        let fd = unsafe { AsyncFd::register(fd) }.map_err(std::io::Error::from)?;
        Ok(Self { fd })
    }

    /// One message, with `fds` attached.
    async fn send(&self, bytes: &[u8], fds: &[BorrowedFd<'_>]) -> std::io::Result<()> {
        loop {
            let mut guard = self.fd.writable().await?;
            let sent = guard.try_io(|inner| {
                let mut space =
                    vec![MaybeUninit::uninit(); rustix::cmsg_space!(ScmRights(fds.len().max(1)))];
                let mut ancillary = SendAncillaryBuffer::new(&mut space);
                if !fds.is_empty() && !ancillary.push(SendAncillaryMessage::ScmRights(fds)) {
                    return Err(std::io::Error::other("too many descriptors"));
                }
                Ok(sendmsg(
                    inner.get_ref(),
                    &[IoSlice::new(bytes)],
                    &mut ancillary,
                    SendFlags::NOSIGNAL | SendFlags::DONTWAIT,
                )?)
            });
            if let Ok(sent) = sent {
                return sent.map(drop);
            }
        }
    }

    /// The next message (0 bytes: the other end is gone) and its sender's process id, as the
    /// service sees it, when the socket passes credentials on.
    async fn recv(&self, buffer: &mut [u8]) -> std::io::Result<(usize, Option<u32>)> {
        loop {
            let mut guard = self.fd.readable().await?;
            let received = guard.try_io(|inner| {
                let mut space = [MaybeUninit::uninit(); rustix::cmsg_space!(ScmCredentials(1))];
                let mut ancillary = RecvAncillaryBuffer::new(&mut space);
                let message = recvmsg(
                    inner.get_ref(),
                    &mut [IoSliceMut::new(buffer)],
                    &mut ancillary,
                    RecvFlags::DONTWAIT | RecvFlags::CMSG_CLOEXEC,
                )?;
                let pid = ancillary.drain().find_map(|m| match m {
                    RecvAncillaryMessage::ScmCredentials(c) => {
                        u32::try_from(c.pid.as_raw_nonzero().get()).ok()
                    }
                    _ => None,
                });
                Ok((message.bytes, pid))
            });
            if let Ok(received) = received {
                return received;
            }
        }
    }

    /// No more messages from this end: the other end reads its end of the stream.
    fn shutdown(&self) {
        let _ = rustix::net::shutdown(self.fd.get_ref(), Shutdown::Write);
    }
}

/// A zygote's own messages (bubblewrap's and the helper's), line by line into the log, each
/// line cut at 4 KiB.
async fn log_lines(mut stderr: tokio::net::unix::pipe::Receiver, pid: u32) {
    let mut buffer = vec![0u8; 4096];
    let mut line = Vec::new();
    loop {
        let n = match stderr.read(&mut buffer).await {
            Ok(0) | Err(_) => break,
            Ok(n) => n,
        };
        for &byte in &buffer[..n] {
            if byte == b'\n' || line.len() >= 4096 {
                tracing::warn!(zygote = pid, "{}", String::from_utf8_lossy(&line));
                line.clear();
            }
            if byte != b'\n' {
                line.push(byte);
            }
        }
    }
    if !line.is_empty() {
        tracing::warn!(zygote = pid, "{}", String::from_utf8_lossy(&line));
    }
}

/// What a failed zygote said, at most 4 KiB and 2 s.
async fn read_some(mut stderr: tokio::net::unix::pipe::Receiver) -> String {
    let mut text = Vec::new();
    let mut buffer = [0u8; 1024];
    let _ = tokio::time::timeout(Duration::from_secs(2), async {
        while text.len() < 4096 {
            match stderr.read(&mut buffer).await {
                Ok(0) | Err(_) => break,
                Ok(n) => text.extend_from_slice(&buffer[..n]),
            }
        }
    })
    .await;
    String::from_utf8_lossy(&text).into_owned()
}

/// Runs `spec` (`true` in the probe's directory) in a zygote of its own: a session's sandbox
/// can be built here, or [`SandboxError::Unavailable`] says why not.
pub(crate) async fn probe(sandbox: &Sandbox, spec: &RunSpec) -> Result<(), SandboxError> {
    let zygote = Zygote::start(sandbox, &spec.root, sandbox.options().network).await?;
    let running = match zygote.command(sandbox, spec).await {
        Ok(running) => running,
        Err(StartError::Failed(error)) => return Err(error),
        Err(StartError::Gone) => {
            return Err(SandboxError::unavailable(
                "the session's sandbox stopped before it ran the probe",
                crate::process::INSTALL_BWRAP,
            ))
        }
    };
    let output = finish(running, spec, Instant::now()).await?;
    if output.exit_code == Some(0) {
        Ok(())
    } else {
        Err(SandboxError::unavailable(
            format!(
                "the probe command failed in a session's sandbox (exit {:?}): {}",
                output.exit_code,
                output.stderr.trim()
            ),
            crate::process::INSTALL_BWRAP,
        ))
    }
}

/// A poisoned lock still holds consistent data here (every critical section is a few field
/// updates), so it is used rather than propagated.
fn lock<T>(mutex: &Mutex<T>) -> std::sync::MutexGuard<'_, T> {
    mutex
        .lock()
        .unwrap_or_else(std::sync::PoisonError::into_inner)
}

/// The thread that starts every zygote's bubblewrap and reaps it at the end.
///
/// `--die-with-parent` ties bubblewrap to the thread that forked it, not to the process: a
/// zygote spawned from a runtime thread that later exits (a blocking-pool thread, say) would
/// die with that thread. This thread lives as long as the process, so a zygote lives until
/// the service stops or drops it.
mod keeper {
    use std::sync::mpsc;
    use std::sync::{Mutex, OnceLock};

    enum Job {
        Spawn(
            Box<std::process::Command>,
            tokio::sync::oneshot::Sender<std::io::Result<std::process::Child>>,
        ),
        Reap(std::process::Child),
    }

    fn jobs() -> Option<&'static Mutex<mpsc::Sender<Job>>> {
        static JOBS: OnceLock<Option<Mutex<mpsc::Sender<Job>>>> = OnceLock::new();
        JOBS.get_or_init(|| {
            let (send, receive) = mpsc::channel::<Job>();
            std::thread::Builder::new()
                .name("sandbox-keeper".into())
                .spawn(move || {
                    for job in receive {
                        match job {
                            Job::Spawn(mut command, reply) => {
                                let _ = reply.send(command.spawn());
                            }
                            Job::Reap(mut child) => {
                                let _ = child.wait();
                            }
                        }
                    }
                })
                .ok()
                .map(|_| Mutex::new(send))
        })
        .as_ref()
    }

    fn submit(job: Job) -> std::io::Result<()> {
        let jobs = jobs()
            .ok_or_else(|| std::io::Error::other("cannot start the sandbox keeper thread"))?;
        jobs.lock()
            .unwrap_or_else(std::sync::PoisonError::into_inner)
            .send(job)
            .map_err(|_| std::io::Error::other("the sandbox keeper thread is gone"))
    }

    pub async fn spawn(command: std::process::Command) -> std::io::Result<std::process::Child> {
        let (reply, answer) = tokio::sync::oneshot::channel();
        submit(Job::Spawn(Box::new(command), reply))?;
        answer
            .await
            .map_err(|_| std::io::Error::other("the sandbox keeper thread is gone"))?
    }

    /// Waits for an ended (or killed) bubblewrap off the caller's path.
    pub fn reap(child: std::process::Child) {
        let _ = submit(Job::Reap(child));
    }
}
