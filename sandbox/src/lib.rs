//! Runs the commands an agent asks for inside a sandbox it cannot talk its way out of.
//!
//! Every command (the agent's shell commands, its `git` operations, the checkpoints taken
//! before a run changes anything) runs under bubblewrap (`bwrap`):
//!
//! - the host's file system read-only, the session's workspace the only writable place, a
//!   fresh `/tmp` (size-capped), its own `/proc` and `/dev`;
//! - the home directories, `/root`, `/run` (SSH agent and D-Bus sockets), `/etc/shadow` and
//!   the other credential files, `/etc/ssh` (host keys), the workspace's parent directory
//!   (other sessions' workspaces, other projects beside a bound repository) and the service's
//!   own files ([`SandboxOptions::hidden`]: its config, its store, the checkpoints) covered by
//!   empty ones;
//! - new user, PID, IPC, UTS, cgroup and (unless [`SandboxOptions::network`]) network
//!   namespaces; no capabilities; no further user namespaces; `--die-with-parent`; a new
//!   session (no terminal to inject keystrokes into);
//! - an environment cleared to an allowlist ([`SandboxOptions::env_passthrough`]);
//! - limits on writable memory, CPU seconds, file size and open files per process, and on
//!   the processes of one command (`RLIMIT_NPROC` in the sandbox's own user namespace, or a
//!   `pids` cgroup when the service runs as root, which `RLIMIT_NPROC` never binds);
//! - Landlock as a second wall, applied inside by [`helper`] after bubblewrap built the
//!   mounts: writes only beneath the workspace, `/tmp` and a few devices even if a mount were
//!   writable; TCP connect and bind refused when the network is off (ABI 4+); no connecting
//!   to abstract Unix sockets or signalling processes outside the sandbox (ABI 6+).
//!   [`Sandbox::probe`] reports what the kernel enforced.
//!
//! A session's commands run in the session's own sandbox ([`SessionSandbox`]): bubblewrap is
//! started once, on the session's first command, with the helper staying inside as a zygote
//! that starts each command (bubblewrap alone costs more than the 10 ms a command may add;
//! see `BENCHMARKS.md`). Each command still gets the limits, a Landlock layer of its own, its
//! own process group and `pids` cgroup, and a supervisor that is the parent of its whole tree.
//! The session's commands share the sandbox's `/tmp`, its PID, IPC, UTS and network
//! namespaces ([`SessionSandbox`] says what that means and why it is acceptable); sessions
//! share nothing. [`Sandbox::run`] still gives a command a bubblewrap of its own (checkpoints
//! use it: they need the shadow repository writable, which a session's commands must not).
//!
//! A timeout, a kill, a cancelled call or dropping its owner kills a command's whole tree
//! (its supervisor kills every descendant, `setsid` and double forks included, and the
//! `pids` cgroup is emptied; a one-shot command's bubblewrap takes its PID namespace with
//! it). Output is captured within bounds while it is read ([`capture`]); a cut stream is saved
//! under the workspace's `.switchboard/`.
//!
//! There is no fallback: when `bwrap` is missing or the probe fails, [`Sandbox::probe`]
//! answers [`SandboxError::Unavailable`] with what to install, and nothing runs.
//!
//! # What the sandbox does not protect against
//!
//! - **Kernel exploits.** bubblewrap and Landlock are kernel features; a kernel bug can undo
//!   them. No seccomp filter narrows the system calls a command can make.
//! - **The network, when it is on.** With `network = true` a command reaches whatever the
//!   host reaches, loopback services included (a database without a password, the service's
//!   own API); it can send the workspace anywhere.
//! - **What the workspace holds.** The command can read and change everything in it,
//!   including `.git` (hooks included) and secrets someone put there; checkpoints make
//!   changes reversible, not impossible.
//! - **Reading the host.** The host file system is readable except what is hidden: world-
//!   readable files elsewhere (other projects under `/srv` are hidden, `/opt` and `/usr` are
//!   not) can be read and printed into the conversation.
//! - **Resource use within the limits.** A command may use its CPU time, memory, processes,
//!   `/tmp` and disk space in the workspace up to the limits, for as long as its timeout (a
//!   background command: until it is killed); the disk of the workspace is not capped beyond
//!   the per-file size limit.
//! - **Programs the operator passes through.** Environment variables in `env_passthrough`
//!   (tokens, say) are visible to every command.
//! - **A session's commands from each other.** They share the session's sandbox: `/tmp`,
//!   the processes in `/proc`, System V IPC, and (network on) loopback ports. With Landlock
//!   ABI 6+ a command cannot signal or trace another command, its supervisor or the zygote;
//!   on older kernels it can signal the session's other commands and its own supervisor
//!   (the zygote, the sandbox's PID 1, stays out of reach; a killed supervisor's leftovers are
//!   still killed through the `pids` cgroup when the service runs as root, and otherwise
//!   when the session's sandbox stops). When the service does not run as root, the process
//!   limit bounds the session's processes together, not each command's.

pub mod capture;
pub mod cgroup;
pub mod checkpoint;
mod error;
pub mod git;
pub mod helper;
mod options;
mod process;
pub mod shell;
mod supervisor;
mod wire;
mod zygote;

pub use capture::{Cut, Keep};
pub use checkpoint::{Checkpoints, Restored, UndoAnswer};
pub use error::{SandboxError, SandboxErrorKind};
pub use git::{
    BranchAnswer, Commit, CommitAnswer, DiffAnswer, Git, LogAnswer, StatusAnswer, StatusEntry,
};
pub use options::{
    CommandLimits, HelperCommand, OutputLimits, SandboxOptions, ShellOptions, HELPER_NAME,
};
pub use process::{ProbeReport, RunOutput, RunSpec, Sandbox};
pub use shell::{
    KillAnswer, OutputAnswer, ProcessInfo, RunRequest, ShellAnswer, ShellEvents, ShellExited,
    ShellSession, ShellStarted,
};
pub use zygote::SessionSandbox;
