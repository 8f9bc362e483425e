//! What the operator sets: the walls' parameters, the limits and the output bounds.

use std::path::PathBuf;
use std::time::Duration;

/// How the sandbox runs commands (one per service; the workspace of each run is given per run).
#[derive(Debug, Clone)]
pub struct SandboxOptions {
    /// The `bwrap` program (a bare name is looked up in `PATH`).
    pub bwrap: PathBuf,
    /// The program that applies the limits and Landlock inside the sandbox, then runs the
    /// command ([`crate::helper`]).
    pub helper: HelperCommand,
    /// The shell commands run in (`/bin/bash` when it exists, else `/bin/sh`).
    pub shell: PathBuf,
    /// Whether commands reach the network (`workspace.network`); off by default.
    pub network: bool,
    /// Names of environment variables passed through from the service (`workspace.env_passthrough`).
    /// Everything else is cleared.
    pub env_passthrough: Vec<String>,
    /// Paths hidden inside the sandbox on top of the home directories, `/root`, `/run` and
    /// the credential files: the service's config and data, say. A directory is covered by an
    /// empty one, a file by an empty file.
    pub hidden: Vec<PathBuf>,
    /// Paths shown read-only even when under a hidden directory (a toolchain in the home
    /// directory, say).
    pub read_only: Vec<PathBuf>,
    pub limits: CommandLimits,
    /// Size of the fresh `/tmp` (and the home stand-in in it), in bytes: one per session's
    /// sandbox, shared by its commands; one per one-shot command.
    pub tmp_bytes: u64,
}

/// The program (and leading arguments) that runs as [`crate::helper::exec_main`]: the
/// `switchboard-sandbox-exec` binary of this crate, or the service's own binary with a hidden
/// subcommand.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct HelperCommand {
    pub program: PathBuf,
    pub args: Vec<String>,
}

impl HelperCommand {
    pub fn new(program: impl Into<PathBuf>) -> Self {
        Self {
            program: program.into(),
            args: Vec::new(),
        }
    }

    /// `SWITCHBOARD_SANDBOX_EXEC` when set, else `switchboard-sandbox-exec` beside the running
    /// program (or one directory up, where Cargo puts binaries next to test programs).
    pub fn discover() -> Option<Self> {
        if let Some(path) = std::env::var_os("SWITCHBOARD_SANDBOX_EXEC") {
            return Some(Self::new(path));
        }
        let exe = std::env::current_exe().ok()?;
        let dir = exe.parent()?;
        [dir.join(HELPER_NAME), dir.parent()?.join(HELPER_NAME)]
            .into_iter()
            .find(|p| p.is_file())
            .map(Self::new)
    }
}

/// The name of this crate's helper binary.
pub const HELPER_NAME: &str = "switchboard-sandbox-exec";

/// Per-command resource limits (each process of the command, except `processes`, which
/// bounds the command's whole process tree).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct CommandLimits {
    /// Writable memory per process (`RLIMIT_DATA`: heap and private mappings), bytes.
    pub memory_bytes: u64,
    /// CPU time per process (`RLIMIT_CPU`), seconds.
    pub cpu_seconds: u64,
    /// Processes (threads included) of one command at once.
    pub processes: u64,
    /// Largest file a process may write (`RLIMIT_FSIZE`), bytes.
    pub file_bytes: u64,
    /// Open files per process (`RLIMIT_NOFILE`).
    pub open_files: u64,
}

impl Default for CommandLimits {
    fn default() -> Self {
        Self {
            memory_bytes: 2 << 30,
            cpu_seconds: 600,
            processes: 256,
            file_bytes: 1 << 30,
            open_files: 1024,
        }
    }
}

impl SandboxOptions {
    /// Defaults: network off, no passthrough, the helper found by [`HelperCommand::discover`].
    pub fn new(helper: HelperCommand) -> Self {
        let shell = if std::path::Path::new("/bin/bash").is_file() {
            "/bin/bash"
        } else {
            "/bin/sh"
        };
        Self {
            bwrap: PathBuf::from("bwrap"),
            helper,
            shell: PathBuf::from(shell),
            network: false,
            env_passthrough: Vec::new(),
            hidden: Vec::new(),
            read_only: Vec::new(),
            limits: CommandLimits::default(),
            tmp_bytes: 512 << 20,
        }
    }
}

/// How much of a command's output an answer carries, and how much is saved when it is cut.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct OutputLimits {
    /// At most this many bytes of each output field (`workspace.max_output_bytes`).
    pub max_bytes: usize,
    /// At most this many lines of each output field (`workspace.max_output_lines`).
    pub max_lines: usize,
    /// At most this many bytes of one stream saved under `.switchboard/` when cut; past it the
    /// saved file is cut too (and says so).
    pub max_saved_bytes: u64,
}

impl Default for OutputLimits {
    fn default() -> Self {
        Self {
            max_bytes: 51_200,
            max_lines: 2_000,
            max_saved_bytes: 16 << 20,
        }
    }
}

/// Per-session settings of the shell.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct ShellOptions {
    pub output: OutputLimits,
    /// The timeout when a call gives none (`workspace.timeout_s`).
    pub default_timeout: Duration,
    /// The longest timeout a call may ask for (`workspace.max_timeout_s`).
    pub max_timeout: Duration,
    /// Background commands running at once (`workspace.max_processes`).
    pub max_processes: usize,
    /// The newest output of each background command kept for `shell.output`, bytes.
    pub background_keep_bytes: usize,
    /// How long the session's sandbox stays up with nothing running and no new command
    /// ([`crate::SessionSandbox`]); the next command starts a new one (with a fresh `/tmp`).
    pub sandbox_idle: Duration,
}

impl Default for ShellOptions {
    fn default() -> Self {
        Self {
            output: OutputLimits::default(),
            default_timeout: Duration::from_secs(120),
            max_timeout: Duration::from_secs(600),
            max_processes: 4,
            background_keep_bytes: 1 << 20,
            sandbox_idle: Duration::from_secs(300),
        }
    }
}
