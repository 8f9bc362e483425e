//! Inside a session's sandbox: the zygote that starts each command, and the supervisor that
//! watches one command's whole process tree. Runs in the helper (`switchboard-sandbox-exec
//! --zygote`), after bubblewrap built the walls and the helper put itself under Landlock.
//!
//! The zygote is the sandbox's PID 1 (`bwrap --as-pid-1`): the kernel does not deliver a
//! signal to it from inside its namespace unless it handles that signal, so a command's
//! `kill -9 -1` cannot take the session's sandbox down; it reaps whatever is orphaned to it.
//! It is single-threaded, so forking it is safe. For each request it forks a supervisor:
//!
//! - the supervisor leads its own process group, is a child subreaper (every process the
//!   command starts stays its descendant, `setsid` and double forks included), and dies with
//!   the zygote;
//! - it reports [`wire::STARTED`] (the service reads its process id from the message's
//!   credentials and moves it into the command's `pids` cgroup) and waits for [`wire::GO`];
//! - it forks the command, which takes its descriptors, working directory, resource limits and
//!   a Landlock layer of its own (a nested domain: with Landlock ABI 6+ it cannot signal the
//!   supervisor, the zygote or another command, and at any ABI it cannot trace them), then
//!   executes the program;
//! - when the command's first process ends, or the service shuts the socket (a timeout, a kill,
//!   a dropped call), it kills every descendant left, reaps them, reports how the command
//!   ended and exits. A command's leftovers never outlive it, as when each command had its own
//!   bubblewrap.

use std::ffi::OsStr;
use std::io::IoSliceMut;
use std::mem::MaybeUninit;
use std::os::fd::{AsFd, AsRawFd, BorrowedFd, FromRawFd, OwnedFd, RawFd};
use std::os::unix::ffi::OsStrExt;
use std::os::unix::process::CommandExt;
use std::time::Duration;

use landlock::RulesetCreated;
use rustix::event::{poll, PollFd, PollFlags};
use rustix::io::Errno;
use rustix::net::{
    recvmsg, RecvAncillaryBuffer, RecvAncillaryMessage, RecvFlags, ReturnFlags, SendFlags,
};
use rustix::process::{Pid, Signal, WaitOptions};

use crate::helper::{HelperArgs, LandlockReport, HELPER_FAILED};
use crate::wire::{self, Exit, FdRole, Request};

/// The descriptor the zygote's control socket is given on.
pub const CONTROL_FD: RawFd = 3;

/// Rounds of "reap, then kill every descendant" before a supervisor gives up on a tree that
/// keeps changing (about two seconds; a `pids` limit makes a tree converge long before).
const KILL_ROUNDS: usize = 4000;

/// What every command of the zygote gets: its limits and its Landlock layer.
struct Walls<'a> {
    args: &'a HelperArgs,
    ruleset: &'a RulesetCreated,
}

/// Runs the zygote on [`CONTROL_FD`] until the service closes its end. Returns the exit code.
pub fn serve(args: &HelperArgs, ruleset: RulesetCreated, report: &LandlockReport) -> i32 {
    match serve_inner(args, &ruleset, report) {
        Ok(()) => 0,
        Err(error) => {
            eprintln!("switchboard-sandbox-exec: the zygote stopped: {error}");
            HELPER_FAILED
        }
    }
}

#[allow(unsafe_code)] // taking ownership of an inherited descriptor, see SAFETY below
fn serve_inner(
    args: &HelperArgs,
    ruleset: &RulesetCreated,
    report: &LandlockReport,
) -> std::io::Result<()> {
    // SAFETY: the service put the control socket on this descriptor before bubblewrap ran us,
    // and nothing else in this process uses it.
    let control = unsafe { OwnedFd::from_raw_fd(CONTROL_FD) };
    rustix::io::fcntl_setfd(&control, rustix::io::FdFlags::CLOEXEC)?;
    // A command cannot attach a debugger to the zygote (Landlock forbids it too).
    rustix::process::set_dumpable_behavior(rustix::process::DumpableBehavior::NotDumpable)?;
    let signals = ChildSignals::new()?;
    send(
        control.as_fd(),
        &format!(
            "{} landlock={} abi={}",
            wire::READY,
            report.status,
            report.abi
        ),
    )?;
    let walls = Walls { args, ruleset };
    let mut buffer = vec![0u8; wire::REQUEST_MAX + 1];
    loop {
        let (control_ready, children_ready) = wait_for_either(&control, &signals.fd)?;
        if !children_ready.is_empty() {
            signals.drain();
            reap_all();
        }
        if control_ready.is_empty() {
            continue;
        }
        let mut space = [MaybeUninit::uninit(); rustix::cmsg_space!(ScmRights(4))];
        let mut ancillary = RecvAncillaryBuffer::new(&mut space);
        let received = recvmsg(
            &control,
            &mut [IoSliceMut::new(&mut buffer)],
            &mut ancillary,
            RecvFlags::CMSG_CLOEXEC | RecvFlags::DONTWAIT,
        );
        let received = match received {
            Ok(received) => received,
            Err(Errno::INTR | Errno::AGAIN) => continue,
            Err(error) => return Err(error.into()),
        };
        let fds: Vec<OwnedFd> = ancillary
            .drain()
            .flat_map(|message| match message {
                RecvAncillaryMessage::ScmRights(fds) => fds.collect(),
                _ => Vec::new(),
            })
            .collect();
        if received.bytes == 0 && fds.is_empty() {
            return Ok(()); // the service closed its end: the session is over
        }
        let truncated = received
            .flags
            .intersects(ReturnFlags::TRUNC | ReturnFlags::CTRUNC)
            || received.bytes > wire::REQUEST_MAX;
        let bytes = &buffer[..received.bytes.min(wire::REQUEST_MAX)];
        start(
            bytes,
            fds,
            truncated,
            &walls,
            [control.as_raw_fd(), signals.fd.as_raw_fd()],
        );
    }
}

/// The descriptors of one command, by role.
struct Fds {
    socket: OwnedFd,
    stdout: OwnedFd,
    stderr: Option<OwnedFd>,
    cwd: Option<OwnedFd>,
}

impl Fds {
    fn sort(request: &Request, fds: Vec<OwnedFd>) -> Result<Self, String> {
        if fds.len() != request.fds.len() {
            return Err(format!(
                "{} descriptors attached, {} named",
                fds.len(),
                request.fds.len()
            ));
        }
        let (mut socket, mut stdout, mut stderr, mut cwd) = (None, None, None, None);
        for (role, fd) in request.fds.iter().zip(fds) {
            match role {
                FdRole::Socket => socket = Some(fd),
                FdRole::Stdout => stdout = Some(fd),
                FdRole::Stderr => stderr = Some(fd),
                FdRole::Cwd => cwd = Some(fd),
            }
        }
        match (socket, stdout) {
            (Some(socket), Some(stdout)) => Ok(Self {
                socket,
                stdout,
                stderr,
                cwd,
            }),
            _ => Err("no socket or no standard output".into()),
        }
    }
}

/// Starts one command: forks its supervisor, or answers on its socket why not. The socket is
/// always the first descriptor, so even a request that cannot be read gets its answer.
#[allow(unsafe_code)] // borrowing the socket to answer, see SAFETY below
fn start(bytes: &[u8], fds: Vec<OwnedFd>, truncated: bool, walls: &Walls, zygote_fds: [RawFd; 2]) {
    let parsed = if truncated {
        Err("the request was cut in transit".to_owned())
    } else {
        Request::parse(bytes).map_err(|e| e.to_string())
    };
    let first = fds.first().map(AsRawFd::as_raw_fd);
    let refuse = |why: &str| {
        if let Some(fd) = first {
            // SAFETY: `fds` still owns this descriptor for the duration of the call.
            let socket = unsafe { BorrowedFd::borrow_raw(fd) };
            let _ = send(socket, &format!("{} {why}", wire::ERROR));
        }
    };
    let request = match parsed {
        Ok(request) if request.fds.first() == Some(&FdRole::Socket) => request,
        Ok(_) => return refuse("the socket must be the first descriptor"),
        Err(why) => return refuse(&why),
    };
    if fds.len() != request.fds.len() {
        return refuse(&format!(
            "{} descriptors attached, {} named",
            fds.len(),
            request.fds.len()
        ));
    }
    let fds = match Fds::sort(&request, fds) {
        Ok(fds) => fds,
        Err(why) => {
            eprintln!("switchboard-sandbox-exec: refused a request: {why}");
            return;
        }
    };
    let socket = fds.socket.as_raw_fd();
    fork_running(socket, move || supervise(&request, fds, walls, zygote_fds));
    // The parent's copies of the descriptors are closed by now (moved into the closure, which
    // only the child runs; the parent drops it).
}

/// Forks; the child runs `child` and exits with its code, never returning here. The parent
/// gets the child's id, or `None` when the fork failed (said on `socket`).
#[allow(unsafe_code)] // fork and _exit, see SAFETY below
fn fork_running(socket: RawFd, child: impl FnOnce() -> i32) -> Option<i32> {
    // SAFETY: the zygote and the supervisors are single-threaded, so the child may do anything
    // the parent could; it ends with `_exit`, without running the parent's destructors a
    // second time.
    match unsafe { libc::fork() } {
        0 => {
            let code = child();
            unsafe { libc::_exit(code) }
        }
        -1 => {
            let error = std::io::Error::last_os_error();
            // SAFETY: the caller owns `socket` until after this call.
            let socket = unsafe { BorrowedFd::borrow_raw(socket) };
            let _ = send(
                socket,
                &format!("{} cannot start the command: {error}", wire::ERROR),
            );
            None
        }
        pid => Some(pid),
    }
}

/// The supervisor of one command (a child of the zygote). Returns its exit code.
#[allow(unsafe_code)] // close, see SAFETY below
fn supervise(request: &Request, fds: Fds, walls: &Walls, zygote_fds: [RawFd; 2]) -> i32 {
    for fd in zygote_fds {
        // SAFETY: the zygote's own descriptors, copied by fork; this process never uses them
        // and nothing here owns these copies.
        unsafe {
            libc::close(fd);
        }
    }
    let setup = || -> std::io::Result<ChildSignals> {
        rustix::process::setpgid(None, None)?;
        rustix::process::set_child_subreaper(Some(rustix::process::getpid()))?;
        rustix::process::set_parent_process_death_signal(Some(Signal::KILL))?;
        ChildSignals::new()
    };
    let signals = match setup() {
        Ok(signals) => signals,
        Err(error) => {
            let _ = send(
                fds.socket.as_fd(),
                &format!("{} cannot supervise the command: {error}", wire::ERROR),
            );
            return HELPER_FAILED;
        }
    };
    if send(fds.socket.as_fd(), wire::STARTED).is_err() {
        return 0; // the service is gone
    }
    if request.wait_for_go {
        let mut answer = [0u8; 16];
        match rustix::net::recv(&fds.socket, &mut answer, RecvFlags::empty()) {
            Ok((_, n)) if &answer[..n.min(16)] == wire::GO.as_bytes() => {}
            _ => return 0, // no go: the call was dropped before the command started
        }
    }
    let Some(command) = fork_running(fds.socket.as_raw_fd(), || {
        exec_command(request, &fds, walls)
    }) else {
        return HELPER_FAILED;
    };
    let Fds {
        socket,
        stdout,
        stderr,
        cwd,
    } = fds;
    // Only the command holds its output pipes now: their end is the service's end of output.
    drop((stdout, stderr, cwd));
    let me = rustix::process::getpid();
    loop {
        let Ok((asked, children)) = wait_for_either(&socket, &signals.fd) else {
            kill_tree(me);
            return HELPER_FAILED;
        };
        if !children.is_empty() {
            signals.drain();
            if let Some(exit) = reap_until(command) {
                kill_tree(me);
                let _ = send(socket.as_fd(), &exit.message());
                return 0;
            }
        }
        if !asked.is_empty() {
            // The service shut its end (a timeout, a kill, a dropped call) or said something
            // after GO, which it never does: either way the command goes.
            kill_tree(me);
            return 0;
        }
    }
}

/// The command itself (a child of its supervisor): descriptors, directory, limits, Landlock,
/// then the program. Returns only on failure, with the exit code.
fn exec_command(request: &Request, fds: &Fds, walls: &Walls) -> i32 {
    let fail = |what: &str, error: &dyn std::fmt::Display| {
        eprintln!("switchboard-sandbox-exec: {what}: {error}");
        HELPER_FAILED
    };
    if let Err(error) = arrange_descriptors(fds) {
        return fail("cannot set up the command's descriptors", &error);
    }
    if let Err(error) = rustix::process::chdir(&request.cwd) {
        return fail(
            &format!("cannot enter {}", request.cwd.display()),
            &std::io::Error::from(error),
        );
    }
    if let Err(error) = crate::helper::apply_limits(walls.args) {
        return fail("cannot set the limits", &error);
    }
    let layer = walls
        .ruleset
        .try_clone()
        .map_err(|e| e.to_string())
        .and_then(|r| r.restrict_self().map_err(|e| e.to_string()));
    if let Err(error) = layer {
        return fail("cannot apply Landlock", &error);
    }
    let (program, rest) = request.argv.split_first().expect("parse checks it");
    let env = request.env.iter().filter_map(|entry| {
        let bytes = entry.as_bytes();
        let at = bytes.iter().position(|&b| b == b'=')?;
        Some((
            OsStr::from_bytes(&bytes[..at]),
            OsStr::from_bytes(&bytes[at + 1..]),
        ))
    });
    let error = std::process::Command::new(program)
        .args(rest)
        .env_clear()
        .envs(env)
        .exec();
    eprintln!(
        "switchboard-sandbox-exec: cannot run {}: {error}",
        program.to_string_lossy()
    );
    127
}

/// Standard input from `/dev/null`, output to the command's pipes, the working-directory pipe
/// on descriptor 3; every other descriptor closes at exec.
#[allow(unsafe_code)] // dup2 and close_range, see SAFETY below
fn arrange_descriptors(fds: &Fds) -> std::io::Result<()> {
    let null = rustix::fs::open(
        "/dev/null",
        rustix::fs::OFlags::RDONLY | rustix::fs::OFlags::CLOEXEC,
        rustix::fs::Mode::empty(),
    )?;
    // Copies above the targets first, so that no dup2 below overwrites a source.
    let high = |fd: BorrowedFd| rustix::io::fcntl_dupfd_cloexec(fd, 10);
    let stdout = high(fds.stdout.as_fd())?;
    let stderr = match &fds.stderr {
        Some(fd) => high(fd.as_fd())?,
        None => high(fds.stdout.as_fd())?,
    };
    let cwd = fds.cwd.as_ref().map(|fd| high(fd.as_fd())).transpose()?;
    let null = high(null.as_fd())?;
    let mut pairs = vec![
        (null.as_raw_fd(), 0),
        (stdout.as_raw_fd(), 1),
        (stderr.as_raw_fd(), 2),
    ];
    if let Some(cwd) = &cwd {
        pairs.push((cwd.as_raw_fd(), crate::process::CWD_FD));
    }
    for (from, to) in pairs {
        // SAFETY: dup2 on descriptors this process owns; the targets are replaced on purpose.
        if unsafe { libc::dup2(from, to) } < 0 {
            return Err(std::io::Error::last_os_error());
        }
    }
    let first_closed = if cwd.is_some() { 4 } else { 3 };
    // SAFETY: marks descriptors close-on-exec; no memory is touched. Everything this process
    // opens is close-on-exec already: this is a second line for anything inherited.
    unsafe {
        libc::syscall(
            libc::SYS_close_range,
            first_closed as libc::c_uint,
            libc::c_uint::MAX,
            libc::CLOSE_RANGE_CLOEXEC,
        );
    }
    Ok(())
}

/// Reaps every child that has ended; answers how `command` ended once it has.
fn reap_until(command: i32) -> Option<Exit> {
    let mut exit = None;
    loop {
        match rustix::process::waitpid(None, WaitOptions::NOHANG) {
            Ok(Some((pid, status))) => {
                if pid.as_raw_nonzero().get() == command {
                    exit = Some(Exit {
                        code: status.exit_status(),
                        signal: status.terminating_signal(),
                    });
                }
            }
            Err(Errno::INTR) => {}
            Ok(None) | Err(_) => return exit,
        }
    }
}

/// Reaps every child that has ended (the zygote's loop).
fn reap_all() {
    let _ = reap_until(0);
}

/// Kills every descendant of `me` and reaps them, until none is left. As a child subreaper,
/// `me` inherits every orphan of the tree, so "no child left" means "no descendant left".
fn kill_tree(me: Pid) {
    for round in 0..KILL_ROUNDS {
        loop {
            match rustix::process::waitpid(None, WaitOptions::NOHANG) {
                Ok(Some(_)) | Err(Errno::INTR) => continue,
                Ok(None) => break,
                Err(_) => return, // ECHILD: nothing left
            }
        }
        for pid in descendants(me) {
            let _ = rustix::process::kill_process(pid, Signal::KILL);
        }
        if round > 0 {
            std::thread::sleep(Duration::from_micros(500));
        }
    }
}

/// The descendants of `me`, from `/proc` (the sandbox's own: only the session's processes).
fn descendants(me: Pid) -> Vec<Pid> {
    let Ok(entries) = std::fs::read_dir("/proc") else {
        return Vec::new();
    };
    let mut parents = Vec::new();
    for entry in entries.flatten() {
        let Some(pid) = entry
            .file_name()
            .to_str()
            .and_then(|n| n.parse::<i32>().ok())
        else {
            continue;
        };
        let Ok(stat) = std::fs::read(entry.path().join("stat")) else {
            continue;
        };
        if let Some(ppid) = parent_of(&stat) {
            parents.push((pid, ppid));
        }
    }
    let mut found = vec![me.as_raw_nonzero().get()];
    let mut next = 0;
    while next < found.len() {
        let parent = found[next];
        next += 1;
        for &(pid, ppid) in &parents {
            if ppid == parent && !found.contains(&pid) {
                found.push(pid);
            }
        }
    }
    found
        .into_iter()
        .skip(1)
        .filter_map(Pid::from_raw)
        .collect()
}

/// The parent's id from a `/proc/<pid>/stat` line (`pid (comm) state ppid …`; the command
/// name may hold spaces and parentheses, so the fields are read after the last `)`).
fn parent_of(stat: &[u8]) -> Option<i32> {
    let end = stat.iter().rposition(|&b| b == b')')?;
    let rest = std::str::from_utf8(&stat[end + 1..]).ok()?;
    rest.split_whitespace().nth(1)?.parse().ok()
}

/// Blocks until `a` or `b` is readable (or hung up); answers what each has.
fn wait_for_either(a: &OwnedFd, b: &OwnedFd) -> std::io::Result<(PollFlags, PollFlags)> {
    loop {
        let mut fds = [PollFd::new(a, PollFlags::IN), PollFd::new(b, PollFlags::IN)];
        match poll(&mut fds, None) {
            Ok(_) => return Ok((fds[0].revents(), fds[1].revents())),
            Err(Errno::INTR) => {}
            Err(error) => return Err(error.into()),
        }
    }
}

fn send(socket: BorrowedFd, message: &str) -> std::io::Result<()> {
    rustix::net::send(socket, message.as_bytes(), SendFlags::NOSIGNAL)?;
    Ok(())
}

/// `SIGCHLD` as a readable descriptor (the signal is blocked, so it is only ever read here).
struct ChildSignals {
    fd: OwnedFd,
}

impl ChildSignals {
    #[allow(unsafe_code)] // sigprocmask and signalfd, see SAFETY below
    fn new() -> std::io::Result<Self> {
        // SAFETY: the mask is a local sigset_t initialised by sigemptyset before use;
        // signalfd returns a new descriptor that is owned from here on.
        unsafe {
            let mut mask: libc::sigset_t = std::mem::zeroed();
            libc::sigemptyset(&mut mask);
            libc::sigaddset(&mut mask, libc::SIGCHLD);
            if libc::sigprocmask(libc::SIG_BLOCK, &mask, std::ptr::null_mut()) != 0 {
                return Err(std::io::Error::last_os_error());
            }
            let fd = libc::signalfd(-1, &mask, libc::SFD_CLOEXEC | libc::SFD_NONBLOCK);
            if fd < 0 {
                return Err(std::io::Error::last_os_error());
            }
            Ok(Self {
                fd: OwnedFd::from_raw_fd(fd),
            })
        }
    }

    /// Reads every pending notification (they only say "look": `waitpid` finds the children).
    fn drain(&self) {
        let mut buffer = [0u8; 128 * 8];
        while matches!(rustix::io::read(&self.fd, &mut buffer), Ok(n) if n > 0) {}
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn the_parent_is_read_after_the_command_name() {
        assert_eq!(parent_of(b"42 (bash) S 7 42 42 0"), Some(7));
        assert_eq!(parent_of(b"42 (a) b) (c) R 9 1"), Some(9));
        assert_eq!(parent_of(b"garbage"), None);
        assert_eq!(parent_of(b"1 (x)"), None);
    }
}
