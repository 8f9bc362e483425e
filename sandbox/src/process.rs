//! Building the bubblewrap command line, spawning it in its own process group, and running
//! a command to its end or its timeout with bounded output.

use std::ffi::OsString;
use std::os::fd::AsRawFd;
use std::path::{Path, PathBuf};
use std::process::Stdio;
use std::time::{Duration, Instant};

use tokio::io::{AsyncRead, AsyncReadExt};

use crate::capture::{Capture, Cut, Keep};
use crate::cgroup::{PidsHierarchy, RunGroup};
use crate::error::SandboxError;
use crate::helper::{HelperArgs, LandlockReport};
use crate::options::{OutputLimits, SandboxOptions};
use crate::wire::Exit;

/// Where the helper is bound inside the sandbox (the host path may be hidden there).
pub(crate) const HELPER_INSIDE: &str = "/run/switchboard-sandbox-exec";
/// How long a killed command's supervisor gets to report that its tree is gone.
const KILL_WAIT: Duration = Duration::from_secs(5);
/// The descriptor the shell wrapper writes its final working directory to.
pub(crate) const CWD_FD: i32 = 3;

/// Files under `/etc` that hold credentials; covered by an empty file inside.
const CREDENTIAL_FILES: &[&str] = &[
    "/etc/shadow",
    "/etc/gshadow",
    "/etc/shadow-",
    "/etc/gshadow-",
    "/etc/sudoers",
    "/etc/security/opasswd",
];
/// Directories never covered as a workspace's parent: the system itself lives there.
const SYSTEM_DIRS: &[&str] = &[
    "/usr", "/bin", "/sbin", "/lib", "/lib32", "/lib64", "/etc", "/var", "/opt", "/nix", "/proc",
    "/sys", "/dev", "/boot",
];

/// Directories holding credentials or other users' data; covered by an empty tmpfs inside.
const HIDDEN_DIRS: &[&str] = &[
    "/home",
    "/root",
    "/run",
    "/var/run",
    "/var/tmp",
    "/tmp",
    "/etc/ssh",
    "/etc/sudoers.d",
    "/etc/ssl/private",
    "/var/lib/sss",
    "/var/mail",
    "/var/spool",
    "/var/log",
    "/var/backups",
    "/srv",
    "/mnt",
    "/media",
];

/// What the probe found: each wall and how it is built on this machine.
#[derive(Debug, Clone, PartialEq, Eq, serde::Serialize)]
#[serde(rename_all = "camelCase")]
pub struct ProbeReport {
    pub bwrap: String,
    pub bwrap_version: String,
    /// `fully`, `partially` or `not` enforced.
    pub landlock: String,
    pub landlock_abi: u32,
    /// `rlimit` or `cgroup <path>`.
    pub process_limit: String,
    pub network: bool,
}

/// The sandbox, probed and ready: every command of every session runs through it.
#[derive(Debug)]
pub struct Sandbox {
    options: SandboxOptions,
    bwrap: PathBuf,
    pids: Option<PidsHierarchy>,
    report: ProbeReport,
}

/// What to run in one sandboxed process.
#[derive(Debug, Clone)]
pub struct RunSpec {
    /// The workspace: the only writable place (besides a fresh `/tmp`).
    pub root: PathBuf,
    /// Where the command starts (inside `root`).
    pub cwd: PathBuf,
    /// The program and its arguments.
    pub argv: Vec<OsString>,
    /// Extra environment on top of the allowlist.
    pub env: Vec<(String, String)>,
    /// More writable directories (a checkpoint's shadow repository).
    pub extra_writable: Vec<PathBuf>,
    pub timeout: Duration,
    pub output: OutputLimits,
    /// Which end of each stream the answer keeps.
    pub keep: Keep,
    /// Where cut streams are saved: `(path, shown)` for stdout and stderr.
    pub spill: Option<[(PathBuf, String); 2]>,
    /// Whether the wrapper reports its final working directory on descriptor 3.
    pub report_cwd: bool,
    /// Standard error goes into standard output (one stream).
    pub merge_stderr: bool,
}

/// A finished (or killed) command.
#[derive(Debug, Clone)]
pub struct RunOutput {
    /// The exit code; `None` when a signal ended it.
    pub exit_code: Option<i32>,
    pub signal: Option<i32>,
    pub stdout: String,
    pub stderr: String,
    pub stdout_cut: Option<Cut>,
    pub stderr_cut: Option<Cut>,
    pub timed_out: bool,
    pub duration: Duration,
    /// Bytes the command printed (both streams).
    pub bytes: u64,
    /// The final working directory the wrapper reported (unchecked).
    pub final_cwd: Option<PathBuf>,
}

/// One stream of a command's output, as the service reads it.
pub(crate) type Output = Box<dyn AsyncRead + Send + Unpin>;

/// A started command: its process, its cgroup and its output. Dropping it kills the whole
/// tree.
pub(crate) struct Running {
    pub process: Process,
    pub group: Option<RunGroup>,
    pub cwd_reader: Option<std::io::PipeReader>,
    pub stdout: Option<Output>,
    pub stderr: Option<Output>,
}

/// How the command runs.
pub(crate) enum Process {
    /// A bubblewrap of its own (the leader of its own process group): SIGKILL to the group
    /// kills bubblewrap, whose death kills the sandbox's PID namespace (`--die-with-parent`).
    OneShot(tokio::process::Child),
    /// In a session's zygote: its supervisor kills the tree when told.
    Zygote(crate::zygote::Command),
}

impl Running {
    /// SIGKILL to the whole command, unless it was already reaped (its pid could be reused).
    pub fn kill_tree(&mut self) {
        match &mut self.process {
            Process::OneShot(child) => {
                if let Some(pid) = child.id() {
                    kill_group(pid as i32);
                }
            }
            Process::Zygote(command) => command.kill(),
        }
        if let Some(group) = &self.group {
            group.kill_all();
        }
    }

    /// Waits until the command (and, in a zygote, everything it started) has ended.
    pub async fn wait(&mut self) -> std::io::Result<Exit> {
        use std::os::unix::process::ExitStatusExt;
        match &mut self.process {
            Process::OneShot(child) => {
                let status = child.wait().await?;
                Ok(Exit {
                    code: status.code(),
                    signal: status.signal(),
                })
            }
            Process::Zygote(command) => command.wait().await,
        }
    }
}

impl Drop for Running {
    fn drop(&mut self) {
        self.kill_tree();
    }
}

#[allow(unsafe_code)] // one FFI call, see SAFETY below
pub(crate) fn kill_group(pgid: i32) {
    if pgid > 1 {
        // SAFETY: killpg takes two integers; a group that is gone gives ESRCH, which is fine.
        unsafe {
            libc::killpg(pgid, libc::SIGKILL);
        }
    }
}

#[allow(unsafe_code)] // one FFI call, see SAFETY below
pub(crate) fn kill(pid: i32) {
    if pid > 1 {
        // SAFETY: kill takes two integers; a process that is gone gives ESRCH, which is fine.
        unsafe {
            libc::kill(pid, libc::SIGKILL);
        }
    }
}

/// The effective user id: `/proc/self` belongs to it.
fn geteuid() -> u32 {
    use std::os::unix::fs::MetadataExt;
    std::fs::metadata("/proc/self").map_or(0, |m| m.uid())
}

/// A path that may be covered: never `/` itself.
fn coverable(path: &Path) -> bool {
    path.is_absolute() && path.components().count() > 1
}

fn find_program(name: &Path) -> Option<PathBuf> {
    if name.components().count() > 1 {
        return name.is_file().then(|| name.to_path_buf());
    }
    std::env::var_os("PATH")
        .map(|p| std::env::split_paths(&p).collect::<Vec<_>>())
        .unwrap_or_else(|| vec!["/usr/bin".into(), "/bin".into()])
        .into_iter()
        .map(|dir| dir.join(name))
        .find(|p| p.is_file())
}

pub(crate) const INSTALL_BWRAP: &str = "Install bubblewrap (Debian/Ubuntu: apt-get install bubblewrap; Fedora: dnf install bubblewrap) so that `bwrap` is on PATH, or set its path.";

impl Sandbox {
    /// Checks that every wall can be built here by running `true` through all of them. Never
    /// falls back: anything missing is [`SandboxError::Unavailable`] with what to install.
    pub async fn probe(options: SandboxOptions) -> Result<Self, SandboxError> {
        let bwrap = find_program(&options.bwrap).ok_or_else(|| {
            SandboxError::unavailable(
                format!("{} was not found", options.bwrap.display()),
                INSTALL_BWRAP,
            )
        })?;
        if !options.helper.program.is_file() {
            return Err(SandboxError::unavailable(
                format!(
                    "the sandbox helper {} was not found",
                    options.helper.program.display()
                ),
                "Install switchboard's binaries together (the helper applies the limits and Landlock inside the sandbox), or set SWITCHBOARD_SANDBOX_EXEC to its path.",
            ));
        }
        let version = tokio::process::Command::new(&bwrap)
            .arg("--version")
            .output()
            .await
            .map_err(|e| {
                SandboxError::unavailable(
                    format!("{} cannot run: {e}", bwrap.display()),
                    INSTALL_BWRAP,
                )
            })?;
        let bwrap_version = String::from_utf8_lossy(&version.stdout).trim().to_owned();
        let pids = if geteuid() == 0 {
            Some(PidsHierarchy::find().map_err(|reason| {
                SandboxError::unavailable(
                    format!("switchboard runs as root, which RLIMIT_NPROC never limits, and no pids cgroup can be used ({reason})"),
                    "Run switchboard as an unprivileged user, or give it a writable cgroup hierarchy with the pids controller.",
                )
            })?)
        } else {
            None
        };
        let mut sandbox = Self {
            report: ProbeReport {
                bwrap: bwrap.display().to_string(),
                bwrap_version,
                landlock: String::new(),
                landlock_abi: 0,
                process_limit: match &pids {
                    Some(p) => format!("cgroup {}", p.base.display()),
                    None => "rlimit".into(),
                },
                network: options.network,
            },
            options,
            bwrap,
            pids,
        };
        static PROBES: std::sync::atomic::AtomicU64 = std::sync::atomic::AtomicU64::new(0);
        let n = PROBES.fetch_add(1, std::sync::atomic::Ordering::Relaxed);
        let dir = std::env::temp_dir().join(format!(
            "switchboard-sandbox-probe-{}-{n}",
            std::process::id()
        ));
        std::fs::create_dir_all(&dir)
            .map_err(SandboxError::io("cannot make the probe's directory"))?;
        let dir = dir
            .canonicalize()
            .map_err(SandboxError::io("cannot resolve the probe's directory"))?;
        let spec = RunSpec {
            root: dir.clone(),
            cwd: dir.clone(),
            argv: vec!["true".into()],
            env: Vec::new(),
            extra_writable: Vec::new(),
            timeout: Duration::from_secs(20),
            output: OutputLimits::default(),
            keep: Keep::Tail,
            spill: None,
            report_cwd: false,
            merge_stderr: false,
        };
        let output = sandbox.run_with(&spec, true).await;
        // A session's sandbox too (bubblewrap as the zygote's init, the command through it).
        let session = match &output {
            Ok(o) if o.exit_code == Some(0) => crate::zygote::probe(&sandbox, &spec).await,
            _ => Ok(()),
        };
        let _ = std::fs::remove_dir_all(&dir);
        session?;
        let output = output.map_err(|e| {
            SandboxError::unavailable(
                format!("bubblewrap could not start a sandbox: {e}"),
                INSTALL_BWRAP,
            )
        })?;
        let report = output.stderr.lines().find_map(LandlockReport::parse);
        match (output.exit_code, report) {
            (Some(0), Some(report)) => {
                sandbox.report.landlock = report.status;
                sandbox.report.landlock_abi = report.abi;
                Ok(sandbox)
            }
            _ => Err(SandboxError::unavailable(
                format!(
                    "the probe command failed under bubblewrap (exit {:?}): {}",
                    output.exit_code,
                    output.stderr.trim()
                ),
                "bubblewrap needs user namespaces (sysctl kernel.unprivileged_userns_clone=1 where that exists, or run as root); check that `bwrap --ro-bind / / --unshare-all --unshare-user true` works.",
            )),
        }
    }

    /// What the probe found.
    pub fn report(&self) -> &ProbeReport {
        &self.report
    }

    pub fn options(&self) -> &SandboxOptions {
        &self.options
    }

    /// The `bwrap` program found by the probe.
    pub(crate) fn bwrap(&self) -> &Path {
        &self.bwrap
    }

    /// The bubblewrap arguments for one run (everything before the helper).
    /// The bubblewrap arguments for a sandbox with these walls (everything before `--`).
    pub(crate) fn bwrap_args(&self, walls: &Walls) -> Vec<OsString> {
        let mut args: Vec<OsString> = Vec::new();
        let mut push = |items: &[&dyn AsRef<std::ffi::OsStr>]| {
            args.extend(items.iter().map(|i| i.as_ref().to_owned()));
        };
        push(&[
            &"--ro-bind",
            &"/",
            &"/",
            &"--dev",
            &"/dev",
            &"--proc",
            &"/proc",
        ]);
        for dir in HIDDEN_DIRS {
            let path = Path::new(dir);
            if path.is_symlink() || !path.is_dir() {
                continue;
            }
            if *dir == "/tmp" {
                push(&[&"--size", &self.options.tmp_bytes.to_string()]);
            }
            push(&[&"--tmpfs", dir]);
        }
        let home = std::env::var_os("HOME").map(PathBuf::from);
        for path in home.iter().chain(self.options.hidden.iter()) {
            if !coverable(path) {
                continue;
            }
            if path.is_dir() {
                push(&[&"--tmpfs", path]);
            } else if path.exists() {
                push(&[&"--ro-bind", &"/dev/null", path]);
            }
        }
        for file in CREDENTIAL_FILES {
            if Path::new(file).is_file() {
                push(&[&"--ro-bind", &"/dev/null", file]);
            }
        }
        // The workspace's siblings (other sessions' workspaces under the same root, other
        // projects beside a bound repository) are not the command's to read.
        if let Some(parent) = walls.root.parent() {
            if coverable(parent) && !SYSTEM_DIRS.contains(&parent.to_str().unwrap_or("/")) {
                push(&[&"--tmpfs", &parent]);
            }
        }
        for path in &self.options.read_only {
            if coverable(path) && path.exists() {
                push(&[&"--ro-bind", path, path]);
            }
        }
        push(&[&"--ro-bind", &self.options.helper.program, &HELPER_INSIDE]);
        // After the hiding: a workspace under a hidden directory is still bound.
        push(&[&"--bind", &walls.root, &walls.root]);
        for path in walls.extra_writable {
            push(&[&"--bind", path, path]);
        }
        push(&[&"--chdir", &walls.cwd]);
        push(&[&"--unshare-all", &"--unshare-user", &"--disable-userns"]);
        if walls.network {
            push(&[&"--share-net"]);
        }
        push(&[
            &"--cap-drop",
            &"ALL",
            &"--die-with-parent",
            &"--new-session",
            &"--hostname",
            &"sandbox",
            &"--clearenv",
        ]);
        for (name, value) in self.environment(walls.root, &[]) {
            push(&[&"--setenv", &name, &value]);
        }
        args
    }

    /// A command's whole environment: the sandbox's own, the allowlisted variables of the
    /// service, then `extra`.
    pub(crate) fn environment(
        &self,
        root: &Path,
        extra: &[(String, String)],
    ) -> Vec<(String, String)> {
        let mut env: Vec<(String, String)> = vec![
            (
                "PATH".into(),
                "/usr/local/sbin:/usr/local/bin:/usr/sbin:/usr/bin:/sbin:/bin".into(),
            ),
            ("HOME".into(), "/tmp".into()),
            ("TMPDIR".into(), "/tmp".into()),
            ("LANG".into(), "C.UTF-8".into()),
            ("TERM".into(), "dumb".into()),
            ("PAGER".into(), "cat".into()),
            ("GIT_PAGER".into(), "cat".into()),
            ("GIT_TERMINAL_PROMPT".into(), "0".into()),
            ("EMAIL".into(), "switchboard@localhost".into()),
            ("SHELL".into(), self.options.shell.display().to_string()),
            // git stops looking for a repository at the workspace: one around it is not the
            // agent's.
            (
                "GIT_CEILING_DIRECTORIES".into(),
                root.parent().unwrap_or(root).display().to_string(),
            ),
        ];
        for name in &self.options.env_passthrough {
            if let Ok(value) = std::env::var(name) {
                env.retain(|(n, _)| n != name);
                env.push((name.clone(), value));
            }
        }
        for (name, value) in extra {
            env.retain(|(n, _)| n != name);
            env.push((name.clone(), value.clone()));
        }
        env
    }

    /// The helper's limits and Landlock walls (without its command or mode).
    pub(crate) fn helper_args(&self, walls: &Walls) -> HelperArgs {
        let limits = &self.options.limits;
        let mut write = vec![walls.root.to_path_buf(), PathBuf::from("/tmp")];
        write.extend(walls.extra_writable.iter().cloned());
        HelperArgs {
            data: Some(limits.memory_bytes),
            cpu: Some(limits.cpu_seconds),
            nproc: self.pids.is_none().then_some(limits.processes),
            fsize: Some(limits.file_bytes),
            nofile: Some(limits.open_files),
            write,
            no_tcp: !walls.network,
            ..HelperArgs::default()
        }
    }

    /// A `pids` cgroup for one command, when the process limit needs one (the service runs as
    /// root).
    pub(crate) fn command_group(&self) -> Result<Option<RunGroup>, SandboxError> {
        match &self.pids {
            Some(pids) => Ok(Some(
                pids.group(self.options.limits.processes)
                    .map_err(SandboxError::io("cannot make the command's cgroup"))?,
            )),
            None => Ok(None),
        }
    }

    /// Spawns the command in a bubblewrap of its own; it runs until it ends or the returned
    /// handle is dropped.
    pub(crate) fn spawn(&self, spec: &RunSpec, report: bool) -> Result<Running, SandboxError> {
        if spec.argv.is_empty() {
            return Err(SandboxError::BadRequest("nothing to run".into()));
        }
        let group = self.command_group()?;
        let walls = Walls::of(spec, self.options.network);
        let mut command = tokio::process::Command::new(&self.bwrap);
        command.args(self.bwrap_args(&walls));
        for (name, value) in &spec.env {
            command.arg("--setenv").arg(name).arg(value);
        }
        command.arg("--").arg(HELPER_INSIDE);
        command.args(&self.options.helper.args);
        let helper = HelperArgs {
            report,
            command: spec.argv.clone(),
            ..self.helper_args(&walls)
        };
        command.args(helper.to_args());
        command
            .stdin(Stdio::null())
            .stdout(Stdio::piped())
            .kill_on_drop(true)
            .process_group(0);
        if !spec.merge_stderr {
            command.stderr(Stdio::piped());
        }
        let (cwd_reader, cwd_writer) = if spec.report_cwd {
            let (r, w) = std::io::pipe().map_err(SandboxError::io("cannot make a pipe"))?;
            (Some(r), Some(w))
        } else {
            (None, None)
        };
        let cwd_fd = cwd_writer.as_ref().map(AsRawFd::as_raw_fd);
        let joiner = group.as_ref().map(RunGroup::joiner);
        let merge = spec.merge_stderr;
        // SAFETY: the closure only makes async-signal-safe calls (dup2, fcntl, open, write,
        // close, dup) on descriptors and a C string prepared before the fork.
        #[allow(unsafe_code)]
        unsafe {
            command.pre_exec(move || {
                if let Some(joiner) = &joiner {
                    joiner.join_self()?;
                }
                if let Some(fd) = cwd_fd {
                    dup_to(fd, CWD_FD)?;
                }
                if merge {
                    // One stream: stderr becomes a copy of the stdout pipe.
                    dup_to(1, 2)?;
                }
                Ok(())
            });
        }
        let mut child = command.spawn().map_err(|e| {
            SandboxError::unavailable(
                format!("cannot start {}: {e}", self.bwrap.display()),
                INSTALL_BWRAP,
            )
        })?;
        drop(cwd_writer);
        let stdout = child.stdout.take().map(|s| Box::new(s) as Output);
        let stderr = child.stderr.take().map(|s| Box::new(s) as Output);
        Ok(Running {
            process: Process::OneShot(child),
            group,
            cwd_reader,
            stdout,
            stderr,
        })
    }

    /// Runs a command to its end or its timeout, in a bubblewrap of its own (the one-shot
    /// path; a session's commands go through its [`crate::SessionSandbox`]).
    pub async fn run(&self, spec: &RunSpec) -> Result<RunOutput, SandboxError> {
        self.run_with(spec, false).await
    }

    async fn run_with(&self, spec: &RunSpec, report: bool) -> Result<RunOutput, SandboxError> {
        let started = Instant::now();
        let running = self.spawn(spec, report)?;
        finish(running, spec, started).await
    }
}

/// The walls of one sandbox: the only writable places, where it starts, and the network.
#[derive(Debug, Clone, Copy)]
pub(crate) struct Walls<'a> {
    pub root: &'a Path,
    pub cwd: &'a Path,
    pub extra_writable: &'a [PathBuf],
    pub network: bool,
}

impl<'a> Walls<'a> {
    pub fn of(spec: &'a RunSpec, network: bool) -> Self {
        Self {
            root: &spec.root,
            cwd: &spec.cwd,
            extra_writable: &spec.extra_writable,
            network,
        }
    }
}

/// Reads a started command to its end or its timeout, with bounded output.
pub(crate) async fn finish(
    mut running: Running,
    spec: &RunSpec,
    started: Instant,
) -> Result<RunOutput, SandboxError> {
    let (out_spill, err_spill) = match &spec.spill {
        Some([a, b]) => (Some(a.clone()), Some(b.clone())),
        None => (None, None),
    };
    let mut out = Capture::new(spec.keep, spec.output, out_spill);
    let mut err = Capture::new(spec.keep, spec.output, err_spill);
    let mut stdout = running.stdout.take();
    let mut stderr = running.stderr.take();
    let finished = tokio::time::timeout(spec.timeout, async {
        let (_, _, status) = tokio::join!(
            drain(stdout.as_mut(), &mut out),
            drain(stderr.as_mut(), &mut err),
            running.wait()
        );
        status
    })
    .await;
    let (status, timed_out) = match finished {
        Ok(status) => (
            Some(status.map_err(SandboxError::io("cannot wait for the command"))?),
            false,
        ),
        Err(_elapsed) => {
            running.kill_tree();
            let status = tokio::time::timeout(KILL_WAIT, running.wait())
                .await
                .ok()
                .and_then(Result::ok);
            // What was already in the pipes, with a bound: nothing writes any more.
            let _ = tokio::time::timeout(Duration::from_secs(1), async {
                tokio::join!(
                    drain(stdout.as_mut(), &mut out),
                    drain(stderr.as_mut(), &mut err)
                )
            })
            .await;
            (status, true)
        }
    };
    if let Some(group) = &running.group {
        group.kill_all();
    }
    let final_cwd = running.cwd_reader.take().and_then(read_cwd);
    let bytes = out.total_bytes() + err.total_bytes();
    let (stdout, stdout_cut) = out.finish();
    let (stderr, stderr_cut) = err.finish();
    Ok(RunOutput {
        exit_code: status.and_then(|s| s.code),
        signal: status.and_then(|s| s.signal),
        stdout,
        stderr,
        stdout_cut,
        stderr_cut,
        timed_out,
        duration: started.elapsed(),
        bytes,
        final_cwd,
    })
}

/// Reads a stream to its end into a capture (whose memory is bounded).
pub(crate) async fn drain<R: AsyncRead + Unpin>(reader: Option<&mut R>, capture: &mut Capture) {
    let Some(reader) = reader else {
        return;
    };
    let mut buffer = vec![0u8; 64 * 1024];
    loop {
        match reader.read(&mut buffer).await {
            Ok(0) | Err(_) => return,
            Ok(n) => capture.push(&buffer[..n]),
        }
    }
}

/// The wrapper's last line on descriptor 3 (at most 4 KiB read; the command could write
/// there too, which is why the path is checked before it is used). Only what is already in
/// the pipe: the wrapper wrote it before it exited, and a process that kept the descriptor
/// (one a kill missed) must not hold the answer.
fn read_cwd(mut reader: std::io::PipeReader) -> Option<PathBuf> {
    use std::io::Read;
    rustix::io::ioctl_fionbio(&reader, true).ok()?;
    let mut bytes = Vec::new();
    let mut buffer = [0u8; 4096];
    while bytes.len() < 4096 {
        match reader.read(&mut buffer) {
            Ok(0) | Err(_) => break,
            Ok(n) => bytes.extend_from_slice(&buffer[..n.min(4096 - bytes.len())]),
        }
    }
    let text = String::from_utf8(bytes).ok()?;
    let line = text.lines().rev().find(|l| !l.is_empty())?;
    Some(PathBuf::from(line))
}

#[allow(unsafe_code)] // FFI calls, see SAFETY below
pub(crate) fn dup_to(fd: i32, target: i32) -> std::io::Result<()> {
    // SAFETY: dup2 and fcntl take integers and are async-signal-safe.
    let rc = unsafe {
        if fd == target {
            libc::fcntl(fd, libc::F_SETFD, 0)
        } else {
            libc::dup2(fd, target)
        }
    };
    if rc < 0 {
        Err(std::io::Error::last_os_error())
    } else {
        Ok(())
    }
}
