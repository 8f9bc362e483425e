//! Shared setup for the sandbox's tests: a probed sandbox on the real `bwrap`, workspaces
//! under Cargo's per-target temporary directory (not under `/tmp`, which the sandbox covers,
//! so that "the host was not changed" is checked on a path the sandbox really shows
//! read-only).

#![allow(dead_code)]

use std::path::{Path, PathBuf};
use std::sync::Arc;
use std::time::{Duration, Instant};

use switchboard_sandbox::{
    HelperCommand, RunRequest, Sandbox, SandboxOptions, ShellOptions, ShellSession,
};

pub fn helper() -> HelperCommand {
    HelperCommand::new(env!("CARGO_BIN_EXE_switchboard-sandbox-exec"))
}

pub fn options() -> SandboxOptions {
    SandboxOptions::new(helper())
}

/// `bwrap` must be there in CI; elsewhere a missing `bwrap` is reported and the test ends.
pub fn bwrap_present() -> bool {
    let present = std::process::Command::new("bwrap")
        .arg("--version")
        .output()
        .is_ok_and(|o| o.status.success());
    if !present {
        assert!(
            std::env::var_os("CI").is_none(),
            "bwrap is missing: install bubblewrap (apt-get install bubblewrap); CI must run these tests"
        );
        eprintln!("bwrap is missing: install bubblewrap to run this test");
    }
    present
}

pub async fn sandbox_with(options: SandboxOptions) -> Option<Arc<Sandbox>> {
    if !bwrap_present() {
        return None;
    }
    Some(Arc::new(
        Sandbox::probe(options).await.expect("the sandbox probe"),
    ))
}

pub async fn sandbox() -> Option<Arc<Sandbox>> {
    sandbox_with(options()).await
}

/// A fresh directory under Cargo's target temporary directory, removed on drop.
pub struct TempDir(pub PathBuf);

impl TempDir {
    pub fn new(name: &str) -> Self {
        static NEXT: std::sync::atomic::AtomicU64 = std::sync::atomic::AtomicU64::new(0);
        let n = NEXT.fetch_add(1, std::sync::atomic::Ordering::Relaxed);
        let path = Path::new(env!("CARGO_TARGET_TMPDIR"))
            .join(format!("sandbox-{name}-{}-{n}", std::process::id()));
        let _ = std::fs::remove_dir_all(&path);
        std::fs::create_dir_all(&path).unwrap();
        Self(path.canonicalize().unwrap())
    }

    pub fn path(&self) -> &Path {
        &self.0
    }
}

impl Drop for TempDir {
    fn drop(&mut self) {
        let _ = std::fs::remove_dir_all(&self.0);
    }
}

pub fn shell(sandbox: &Arc<Sandbox>, root: &Path, options: ShellOptions) -> ShellSession {
    ShellSession::new(Arc::clone(sandbox), root, options).unwrap()
}

/// Processes on this machine whose command line contains `marker`.
pub fn processes_with(marker: &str) -> Vec<i32> {
    let mut found = Vec::new();
    for entry in std::fs::read_dir("/proc").unwrap().flatten() {
        let Ok(pid) = entry.file_name().to_string_lossy().parse::<i32>() else {
            continue;
        };
        if pid == std::process::id() as i32 {
            continue;
        }
        if let Ok(cmdline) = std::fs::read(entry.path().join("cmdline")) {
            let cmdline = String::from_utf8_lossy(&cmdline).replace('\0', " ");
            if cmdline.contains(marker) {
                found.push(pid);
            }
        }
    }
    found
}

/// Waits (up to 5 s) until no process carries `marker`; returns the ones left.
pub async fn gone(marker: &str) -> Vec<i32> {
    let deadline = Instant::now() + Duration::from_secs(5);
    loop {
        let left = processes_with(marker);
        if left.is_empty() || Instant::now() > deadline {
            return left;
        }
        tokio::time::sleep(Duration::from_millis(20)).await;
    }
}

/// Waits (up to 10 s) until a process carries `marker`.
pub async fn appears(marker: &str) -> bool {
    let deadline = Instant::now() + Duration::from_secs(10);
    while Instant::now() < deadline {
        if !processes_with(marker).is_empty() {
            return true;
        }
        tokio::time::sleep(Duration::from_millis(20)).await;
    }
    false
}

/// A foreground `shell.run` with a timeout the tests never reach unless they mean to.
pub fn run(command: &str) -> RunRequest {
    RunRequest {
        command: command.into(),
        timeout_s: Some(60),
        background: false,
    }
}

/// A background `shell.run`.
pub fn background(command: &str) -> RunRequest {
    RunRequest {
        command: command.into(),
        timeout_s: None,
        background: true,
    }
}
