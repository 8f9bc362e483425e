//! `[workspace]`: the agent's workspace (files, a shell, git) and the sandbox its commands run
//! in; `[sessions.NAME] workspace = "PATH"` binds one session to a project directory. Off
//! when the table is absent.

use std::path::PathBuf;
use std::time::Duration;

use serde::Deserialize;
use toml::Spanned;

use crate::report::Collector;
use crate::validate::{bounded, env_name};

#[derive(Debug, Deserialize)]
#[serde(deny_unknown_fields)]
pub(crate) struct RawWorkspace {
    pub root: Spanned<String>,
    #[serde(default = "default_max_output_bytes")]
    pub max_output_bytes: Spanned<u64>,
    #[serde(default = "default_max_output_lines")]
    pub max_output_lines: Spanned<u64>,
    #[serde(default = "default_timeout_s")]
    pub timeout_s: Spanned<u64>,
    #[serde(default = "default_max_timeout_s")]
    pub max_timeout_s: Spanned<u64>,
    #[serde(default = "default_max_processes")]
    pub max_processes: Spanned<u64>,
    #[serde(default)]
    pub network: bool,
    #[serde(default)]
    pub env_passthrough: Vec<Spanned<String>>,
    #[serde(default = "default_memory_mb")]
    pub memory_mb: Spanned<u64>,
    #[serde(default = "default_cpu_s")]
    pub cpu_s: Spanned<u64>,
    #[serde(default = "default_processes")]
    pub processes: Spanned<u64>,
    #[serde(default = "default_file_mb")]
    pub file_mb: Spanned<u64>,
}

fn spanned(value: u64) -> Spanned<u64> {
    Spanned::new(0..0, value)
}
fn default_max_output_bytes() -> Spanned<u64> {
    spanned(51_200)
}
fn default_max_output_lines() -> Spanned<u64> {
    spanned(2_000)
}
fn default_timeout_s() -> Spanned<u64> {
    spanned(120)
}
fn default_max_timeout_s() -> Spanned<u64> {
    spanned(600)
}
fn default_max_processes() -> Spanned<u64> {
    spanned(4)
}
fn default_memory_mb() -> Spanned<u64> {
    spanned(2_048)
}
fn default_cpu_s() -> Spanned<u64> {
    spanned(600)
}
fn default_processes() -> Spanned<u64> {
    spanned(256)
}
fn default_file_mb() -> Spanned<u64> {
    spanned(1_024)
}

/// `[workspace]`, checked.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct WorkspaceConfig {
    /// `workspace.root`: each session works in `ROOT/<session id>` (a thread in its parent
    /// channel's), created on first use; the checkpoints live under `ROOT/.checkpoints/`.
    /// Relative paths are taken from switchboard's working directory.
    pub root: PathBuf,
    /// `workspace.max_output_bytes` (default 51,200): at most this many bytes of each output
    /// field an answer carries (`shell.run` keeps the tail, `fs.read` the head).
    pub max_output_bytes: usize,
    /// `workspace.max_output_lines` (default 2,000): the same, in lines.
    pub max_output_lines: usize,
    /// `workspace.timeout_s` (default 120): a command's timeout when the call gives none.
    pub timeout: Duration,
    /// `workspace.max_timeout_s` (default 600): the longest `timeoutS` a call may ask for.
    pub max_timeout: Duration,
    /// `workspace.max_processes` (default 4): background commands per session at once.
    pub max_processes: usize,
    /// `workspace.network` (default false): whether commands reach the network.
    pub network: bool,
    /// `workspace.env_passthrough`: environment variables commands see; everything else is
    /// cleared.
    pub env_passthrough: Vec<String>,
    /// `workspace.memory_mb` (default 2,048): writable memory per process.
    pub memory_bytes: u64,
    /// `workspace.cpu_s` (default 600): CPU seconds per process.
    pub cpu_seconds: u64,
    /// `workspace.processes` (default 256): processes of one command at once.
    pub processes: u64,
    /// `workspace.file_mb` (default 1,024): the largest file a command may write.
    pub file_bytes: u64,
}

const MIB: u64 = 1024 * 1024;

pub(crate) fn workspace(raw: &RawWorkspace, c: &mut Collector) -> WorkspaceConfig {
    let root = raw.root.get_ref().trim();
    if root.is_empty() || root == "/" {
        c.add(
            Some(raw.root.span()),
            "workspace.root",
            format!("'{root}' cannot hold the sessions' workspaces"),
            "name a directory of its own, such as \"/srv/switchboard/workspaces\" (created when missing); remove [workspace] to turn the workspace off",
        );
    }
    let timeout = bounded(&raw.timeout_s, "workspace.timeout_s", 1..=86_400, c);
    let max_timeout = bounded(&raw.max_timeout_s, "workspace.max_timeout_s", 1..=86_400, c);
    if timeout > max_timeout {
        c.add(
            Some(raw.timeout_s.span()),
            "workspace.timeout_s",
            format!("the default timeout {timeout} s is longer than workspace.max_timeout_s ({max_timeout} s)"),
            "make workspace.timeout_s at most workspace.max_timeout_s",
        );
    }
    let env_passthrough = raw
        .env_passthrough
        .iter()
        .enumerate()
        .map(|(index, name)| env_name(name, &format!("workspace.env_passthrough[{index}]"), c))
        .collect();
    WorkspaceConfig {
        root: PathBuf::from(root),
        max_output_bytes: bounded(
            &raw.max_output_bytes,
            "workspace.max_output_bytes",
            1_024..=16 * MIB,
            c,
        ) as usize,
        max_output_lines: bounded(
            &raw.max_output_lines,
            "workspace.max_output_lines",
            10..=1_000_000,
            c,
        ) as usize,
        timeout: Duration::from_secs(timeout),
        max_timeout: Duration::from_secs(max_timeout),
        max_processes: bounded(&raw.max_processes, "workspace.max_processes", 0..=64, c) as usize,
        network: raw.network,
        env_passthrough,
        memory_bytes: bounded(&raw.memory_mb, "workspace.memory_mb", 16..=1_048_576, c) * MIB,
        cpu_seconds: bounded(&raw.cpu_s, "workspace.cpu_s", 1..=86_400, c),
        processes: bounded(&raw.processes, "workspace.processes", 1..=65_536, c),
        file_bytes: bounded(&raw.file_mb, "workspace.file_mb", 1..=1_048_576, c) * MIB,
    }
}

/// `[sessions.NAME] workspace = "PATH"`: an absolute path to an existing project directory.
pub(crate) fn session_workspace(
    value: &Spanned<String>,
    key: &str,
    enabled: bool,
    c: &mut Collector,
) -> Option<PathBuf> {
    let written = value.get_ref().trim();
    let path = PathBuf::from(written);
    if !path.is_absolute() {
        c.add(
            Some(value.span()),
            key,
            format!("'{written}' is not an absolute path"),
            "bind the session to a project directory by its absolute path, such as \"/srv/projects/website\"",
        );
        return None;
    }
    if path.parent().is_none() {
        c.add(
            Some(value.span()),
            key,
            "the root directory cannot be a workspace",
            "name the project's directory",
        );
        return None;
    }
    if !enabled {
        c.add(
            Some(value.span()),
            key,
            "a session is bound to a workspace, but the workspace is off",
            "add [workspace] with root = \"PATH\" (the sandbox's settings and the checkpoints live there)",
        );
    }
    Some(path)
}
