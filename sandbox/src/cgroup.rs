//! The process limit when the service runs as root.
//!
//! The kernel never applies `RLIMIT_NPROC` to processes of user id 0 (root's own user struct is
//! exempt, capabilities or not), so a fork bomb run by a root service would not be stopped by
//! it. There the limit comes from a `pids` cgroup made for each command instead: the command's
//! bubblewrap joins it before it starts (one-shot), or the service moves the command's
//! supervisor into it before the supervisor starts the command (in a session's zygote), and
//! every process it makes counts.

use std::ffi::CString;
use std::os::unix::ffi::OsStrExt;
use std::path::{Path, PathBuf};
use std::sync::atomic::{AtomicU64, Ordering};

/// Where the per-command `pids` cgroups are made.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct PidsHierarchy {
    /// `<pids hierarchy>/switchboard-sandbox`
    pub base: PathBuf,
}

const BASE: &str = "switchboard-sandbox";

impl PidsHierarchy {
    /// Finds a writable `pids` controller (cgroup v1 `pids` or a v2 hierarchy with `pids`
    /// enabled) and makes the base directory in it.
    pub fn find() -> Result<Self, String> {
        let mountinfo = std::fs::read_to_string("/proc/self/mountinfo")
            .map_err(|e| format!("cannot read /proc/self/mountinfo: {e}"))?;
        let mut tried = Vec::new();
        for line in mountinfo.lines() {
            let Some((left, right)) = line.split_once(" - ") else {
                continue;
            };
            let Some(mount) = left.split(' ').nth(4) else {
                continue;
            };
            let mut right = right.split(' ');
            let fstype = right.next().unwrap_or("");
            let options = right.nth(1).unwrap_or("");
            let mount = Path::new(mount);
            let v1 = fstype == "cgroup" && options.split(',').any(|o| o == "pids");
            let v2 = fstype == "cgroup2"
                && std::fs::read_to_string(mount.join("cgroup.controllers"))
                    .is_ok_and(|c| c.split_whitespace().any(|c| c == "pids"));
            if !(v1 || v2) {
                continue;
            }
            match Self::prepare(mount, v2) {
                Ok(found) => return Ok(found),
                Err(error) => tried.push(format!("{}: {error}", mount.display())),
            }
        }
        if tried.is_empty() {
            Err("no cgroup hierarchy with the pids controller is mounted".into())
        } else {
            Err(tried.join("; "))
        }
    }

    fn prepare(mount: &Path, v2: bool) -> std::io::Result<Self> {
        let base = mount.join(BASE);
        if v2 {
            std::fs::write(mount.join("cgroup.subtree_control"), "+pids")?;
        }
        match std::fs::create_dir(&base) {
            Ok(()) => {}
            Err(e) if e.kind() == std::io::ErrorKind::AlreadyExists => {}
            Err(e) => return Err(e),
        }
        if v2 {
            std::fs::write(base.join("cgroup.subtree_control"), "+pids")?;
        }
        // Groups left by a service that was killed go (`<pid>-<n>`, whose pid is gone); busy
        // ones stay, harmlessly. A live process's groups are its own to remove.
        if let Ok(entries) = std::fs::read_dir(&base) {
            for entry in entries.flatten() {
                let name = entry.file_name();
                let owner = name.to_str().and_then(|n| n.split('-').next());
                let alive = owner.is_some_and(|pid| Path::new("/proc").join(pid).exists());
                if !alive && entry.file_type().is_ok_and(|t| t.is_dir()) {
                    let _ = std::fs::remove_dir(entry.path());
                }
            }
        }
        Ok(Self { base })
    }

    /// A group for one command, at most `max` processes.
    pub fn group(&self, max: u64) -> std::io::Result<RunGroup> {
        static NEXT: AtomicU64 = AtomicU64::new(0);
        let name = format!(
            "{}-{}",
            std::process::id(),
            NEXT.fetch_add(1, Ordering::Relaxed)
        );
        let path = self.base.join(name);
        std::fs::create_dir(&path)?;
        let group = RunGroup {
            procs: CString::new(path.join("cgroup.procs").as_os_str().as_bytes())
                .map_err(std::io::Error::other)?,
            path,
        };
        std::fs::write(group.path.join("pids.max"), max.to_string())?;
        Ok(group)
    }
}

/// One command's cgroup; dropping it kills what is left in it and removes it.
#[derive(Debug)]
pub struct RunGroup {
    path: PathBuf,
    procs: CString,
}

/// What the child needs to join a group, prepared before the fork.
#[derive(Debug, Clone)]
pub struct Joiner {
    procs: CString,
}

impl RunGroup {
    pub fn joiner(&self) -> Joiner {
        Joiner {
            procs: self.procs.clone(),
        }
    }
}

impl Joiner {
    /// Moves the calling process into the group. Only async-signal-safe calls: it runs between
    /// `fork` and `exec`.
    #[allow(unsafe_code)] // three FFI calls, see SAFETY below
    pub fn join_self(&self) -> std::io::Result<()> {
        // SAFETY: open, write and close on a C string and a 1-byte buffer that live for the
        // call; all three are async-signal-safe, as required after fork.
        unsafe {
            let fd = libc::open(self.procs.as_ptr(), libc::O_WRONLY | libc::O_CLOEXEC);
            if fd < 0 {
                return Err(std::io::Error::last_os_error());
            }
            let written = libc::write(fd, b"0".as_ptr().cast(), 1);
            libc::close(fd);
            if written != 1 {
                return Err(std::io::Error::last_os_error());
            }
        }
        Ok(())
    }
}

impl RunGroup {
    /// Moves a process (by its id as the service sees it) into the group. Used for a command
    /// started in a session's zygote, whose supervisor waits until it is in.
    pub fn add(&self, pid: u32) -> std::io::Result<()> {
        std::fs::write(self.path.join("cgroup.procs"), pid.to_string())
    }

    /// Process ids in the group now.
    pub fn pids(&self) -> Vec<i32> {
        pids_in(&self.path)
    }

    /// SIGKILL to every process in the group.
    pub fn kill_all(&self) {
        for pid in self.pids() {
            crate::process::kill(pid);
        }
    }
}

impl Drop for RunGroup {
    fn drop(&mut self) {
        self.kill_all();
        if std::fs::remove_dir(&self.path).is_ok() {
            return;
        }
        // Killed processes leave the group as the kernel reaps them: the removal is retried
        // off the caller's path (a command's answer does not wait for it).
        let path = std::mem::take(&mut self.path);
        let retry = move || {
            for _ in 0..100 {
                for pid in pids_in(&path) {
                    crate::process::kill(pid);
                }
                if std::fs::remove_dir(&path).is_ok() {
                    return;
                }
                std::thread::sleep(std::time::Duration::from_millis(5));
            }
            tracing::warn!(path = %path.display(), "a command's cgroup is still busy; it is removed at the next start");
        };
        if std::thread::Builder::new()
            .name("cgroup-cleanup".into())
            .spawn(retry)
            .is_err()
        {
            tracing::warn!(
                "cannot start the cgroup clean-up; the group is removed at the next start"
            );
        }
    }
}

fn pids_in(path: &Path) -> Vec<i32> {
    std::fs::read_to_string(path.join("cgroup.procs"))
        .unwrap_or_default()
        .lines()
        .filter_map(|l| l.trim().parse().ok())
        .collect()
}
