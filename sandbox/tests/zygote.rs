//! A session's long-lived sandbox (the zygote): it serves command after command, survives
//! what its commands do to it, is replaced when it dies, stops when idle or when its owner
//! goes, and sessions never see each other.

mod common;

use std::time::{Duration, Instant};

use common::*;
use switchboard_sandbox::{RunRequest, SandboxError, ShellOptions};

/// Whether a process runs (a zombie, or no entry at all, does not).
fn running(pid: u32) -> bool {
    std::fs::read_to_string(format!("/proc/{pid}/stat"))
        .ok()
        .and_then(|stat| {
            let state = stat
                .rsplit(')')
                .next()?
                .split_whitespace()
                .next()?
                .to_owned();
            Some(state != "Z" && state != "X")
        })
        .unwrap_or(false)
}

/// Waits (up to 5 s) until `pid` no longer runs.
async fn ended(pid: u32) -> bool {
    let deadline = Instant::now() + Duration::from_secs(5);
    while Instant::now() < deadline {
        if !running(pid) {
            return true;
        }
        tokio::time::sleep(Duration::from_millis(20)).await;
    }
    false
}

/// The zygote itself: bubblewrap's child running the helper with `--zygote`.
fn zygote_inside(bwrap: u32) -> Option<i32> {
    processes_with("--zygote").into_iter().find(|pid| {
        std::fs::read_to_string(format!("/proc/{pid}/stat"))
            .ok()
            .and_then(|stat| {
                stat.rsplit(')')
                    .next()?
                    .split_whitespace()
                    .nth(1)?
                    .parse()
                    .ok()
            })
            == Some(bwrap)
    })
}

fn sigkill(pid: i32) {
    let status = std::process::Command::new("kill")
        .args(["-9", &pid.to_string()])
        .status()
        .unwrap();
    assert!(status.success());
}

#[tokio::test]
async fn commands_of_a_session_share_one_sandbox_and_its_tmp() {
    let Some(sandbox) = sandbox().await else {
        return;
    };
    let ws = TempDir::new("shared");
    let shell = shell(&sandbox, ws.path(), ShellOptions::default());
    assert_eq!(shell.session().zygote_pid(), None, "started before use");
    shell.run(run("echo kept > /tmp/note")).await.unwrap();
    let zygote = shell.session().zygote_pid().expect("a zygote runs");
    let answer = shell.run(run("cat /tmp/note")).await.unwrap();
    assert_eq!(answer.stdout, "kept\n");
    assert_eq!(shell.session().zygote_pid(), Some(zygote));
}

#[tokio::test]
async fn a_command_killed_at_its_timeout_leaves_the_sandbox_serving() {
    let Some(sandbox) = sandbox().await else {
        return;
    };
    let ws = TempDir::new("timeout-serves");
    let shell = shell(&sandbox, ws.path(), ShellOptions::default());
    let neighbour = shell.run(background("sleep 9876.43")).await.unwrap();
    assert!(appears("9876.43").await);
    let zygote = shell.session().zygote_pid().unwrap();
    let error = shell
        .run(RunRequest {
            command: "(setsid sleep 9876.41 &); sleep 9876.42".into(),
            timeout_s: Some(1),
            background: false,
        })
        .await
        .unwrap_err();
    assert!(matches!(error, SandboxError::Timeout { .. }), "{error}");
    assert_eq!(gone("9876.41").await, Vec::<i32>::new());
    assert_eq!(gone("9876.42").await, Vec::<i32>::new());
    // Nothing else of the session went with it.
    assert!(
        !processes_with("9876.43").is_empty(),
        "the kill reached another command"
    );
    assert!(shell
        .list()
        .iter()
        .any(|p| p.id == neighbour.id && p.running));
    let answer = shell.run(run("echo still here")).await.unwrap();
    assert_eq!(answer.stdout, "still here\n");
    assert_eq!(
        shell.session().zygote_pid(),
        Some(zygote),
        "the timeout took the sandbox down"
    );
    shell.kill_all().await;
    assert_eq!(gone("9876.43").await, Vec::<i32>::new());
}

#[tokio::test]
async fn a_killed_sandbox_is_replaced_by_the_next_command() {
    let Some(sandbox) = sandbox().await else {
        return;
    };
    let ws = TempDir::new("replaced");
    let shell = shell(&sandbox, ws.path(), ShellOptions::default());
    for round in 0..2 {
        shell.run(run("true")).await.unwrap();
        let bwrap = shell.session().zygote_pid().unwrap();
        // Round 0 kills the zygote inside, round 1 its bubblewrap outside (the service still
        // holds the zygote's socket: only --die-with-parent takes the zygote down then).
        let inside = zygote_inside(bwrap).expect("the zygote under bubblewrap");
        sigkill(if round == 0 { inside } else { bwrap as i32 });
        assert!(ended(bwrap).await, "bubblewrap outlived its zygote");
        assert!(ended(inside as u32).await, "the zygote outlived bubblewrap");
        let answer = shell.run(run("echo again")).await.unwrap();
        assert_eq!(answer.stdout, "again\n");
        let replacement = shell.session().zygote_pid().unwrap();
        assert_ne!(replacement, bwrap);
    }
}

#[tokio::test]
async fn a_command_cannot_take_its_sandbox_or_its_neighbours_down() {
    let Some(sandbox) = sandbox().await else {
        return;
    };
    let ws = TempDir::new("signals");
    let shell = shell(&sandbox, ws.path(), ShellOptions::default());
    let neighbour = shell.run(background("sleep 9876.51")).await.unwrap();
    assert!(appears("9876.51").await);
    let zygote = shell.session().zygote_pid().unwrap();
    let answer = shell
        .run(run("kill -9 -1; kill -9 1; kill -9 2; echo survived"))
        .await
        .unwrap();
    assert_eq!(shell.session().zygote_pid(), Some(zygote));
    assert_eq!(shell.run(run("echo next")).await.unwrap().stdout, "next\n");
    if switchboard_sandbox::helper::kernel_abi() >= 6 {
        // Landlock's signal scope: each command is its own domain, nested in the zygote's.
        assert_eq!(answer.stdout, "survived\n", "{answer:?}");
        assert!(
            shell
                .list()
                .iter()
                .any(|p| p.id == neighbour.id && p.running),
            "another command's kill -1 reached a background command"
        );
        assert!(!processes_with("9876.51").is_empty());
    }
    shell.kill_all().await;
    assert_eq!(gone("9876.51").await, Vec::<i32>::new());
}

#[tokio::test]
async fn a_command_gets_only_its_own_descriptors() {
    let Some(sandbox) = sandbox().await else {
        return;
    };
    let ws = TempDir::new("fds");
    let shell = shell(&sandbox, ws.path(), ShellOptions::default());
    let answer = shell.run(run("ls -l /proc/self/fd")).await.unwrap();
    // `N -> target` for each descriptor of `ls`, but the one it reads the listing through.
    let fds: Vec<&str> = answer
        .stdout
        .lines()
        .filter_map(|l| l.split_once(" -> "))
        .filter(|(_, target)| !target.starts_with("/proc/"))
        .filter_map(|(left, _)| left.rsplit(' ').next())
        .collect();
    assert_eq!(fds, ["0", "1", "2", "3"], "{}", answer.stdout);
    assert!(!answer.stdout.contains("socket:"), "{}", answer.stdout);
}

#[tokio::test]
async fn sessions_cannot_see_each_others_workspaces_processes_or_tmp() {
    let Some(sandbox) = sandbox().await else {
        return;
    };
    let base = TempDir::new("two-sessions");
    let (one, two) = (base.path().join("one"), base.path().join("two"));
    std::fs::create_dir_all(&one).unwrap();
    std::fs::create_dir_all(&two).unwrap();
    std::fs::write(one.join("secret.txt"), "session one's").unwrap();
    let first = shell(&sandbox, &one, ShellOptions::default());
    let second = shell(&sandbox, &two, ShellOptions::default());
    first.run(run("echo one > /tmp/mine")).await.unwrap();
    first.run(background("sleep 9876.61")).await.unwrap();
    assert!(appears("9876.61").await);
    let answer = second
        .run(run(&format!(
            "cat {}/secret.txt; ls {}; cat /tmp/mine; cat /proc/[0-9]*/cmdline | tr '\\0' ' '; echo end",
            one.display(),
            base.path().display()
        )))
        .await
        .unwrap();
    assert!(answer.stdout.ends_with("end\n"), "{answer:?}");
    assert!(!answer.stdout.contains("session one's"), "{answer:?}");
    assert!(!answer.stdout.contains("one\n"), "{answer:?}");
    assert!(!answer.stdout.contains("9876.61"), "{answer:?}");
    assert!(
        answer.stdout.contains("--zygote"),
        "its own zygote shows: {answer:?}"
    );
    assert_ne!(first.session().zygote_pid(), second.session().zygote_pid());
    drop(first);
    assert_eq!(gone("9876.61").await, Vec::<i32>::new());
}

#[tokio::test]
async fn an_idle_sandbox_stops_but_not_while_a_command_runs() {
    let Some(sandbox) = sandbox().await else {
        return;
    };
    let ws = TempDir::new("idle");
    let options = ShellOptions {
        sandbox_idle: Duration::from_millis(300),
        ..ShellOptions::default()
    };
    let shell = shell(&sandbox, ws.path(), options);
    let background = shell.run(background("sleep 1.5; echo woke")).await.unwrap();
    let zygote = shell.session().zygote_pid().unwrap();
    tokio::time::sleep(Duration::from_millis(900)).await;
    assert!(running(zygote), "stopped while a command ran");
    assert_eq!(shell.session().zygote_pid(), Some(zygote));
    assert!(ended(zygote).await, "the idle sandbox did not stop");
    assert_eq!(shell.session().zygote_pid(), None);
    assert_eq!(shell.output(&background.id, None).unwrap().output, "woke\n");
    let answer = shell.run(run("echo back")).await.unwrap();
    assert_eq!(answer.stdout, "back\n");
    assert_ne!(shell.session().zygote_pid(), Some(zygote));
}

#[tokio::test]
async fn turning_the_network_on_restarts_the_sandbox_with_it() {
    let Some(sandbox) = sandbox().await else {
        return;
    };
    let listener = std::net::TcpListener::bind("127.0.0.1:0").unwrap();
    let port = listener.local_addr().unwrap().port();
    let ws = TempDir::new("network");
    let shell = shell(&sandbox, ws.path(), ShellOptions::default());
    let connect = format!("echo hi > /dev/tcp/127.0.0.1/{port} && echo connected");
    assert!(!shell.session().network());
    let answer = shell.run(run(&connect)).await.unwrap();
    assert!(!answer.stdout.contains("connected"), "{answer:?}");
    let offline = shell.session().zygote_pid().unwrap();
    shell.session().set_network(true);
    let answer = shell.run(run(&connect)).await.unwrap();
    assert!(answer.stdout.contains("connected"), "{answer:?}");
    let online = shell.session().zygote_pid().unwrap();
    assert_ne!(online, offline);
    assert!(ended(offline).await, "the old sandbox was left running");
    shell.session().set_network(false);
    let answer = shell.run(run(&connect)).await.unwrap();
    assert!(!answer.stdout.contains("connected"), "{answer:?}");
}

/// Set in the child process of `a_sandbox_dies_when_its_owner_is_killed`: the workspace it
/// opens a session in.
const OWNER_ENV: &str = "SWITCHBOARD_TEST_ZYGOTE_OWNER";

#[tokio::test]
#[ignore = "the owner process of a_sandbox_dies_when_its_owner_is_killed, run by it"]
async fn owner_of_a_session_sandbox() {
    let Some(ws) = std::env::var_os(OWNER_ENV) else {
        return;
    };
    let sandbox = sandbox().await.unwrap();
    let shell = shell(&sandbox, std::path::Path::new(&ws), ShellOptions::default());
    shell.run(background("sleep 9876.71")).await.unwrap();
    println!("READY {}", shell.session().zygote_pid().unwrap());
    tokio::time::sleep(Duration::from_secs(60)).await;
}

#[tokio::test]
async fn a_sandbox_dies_when_its_owner_is_killed() {
    if !bwrap_present() {
        return;
    }
    use std::io::BufRead;
    let ws = TempDir::new("owner");
    let mut owner = std::process::Command::new(std::env::current_exe().unwrap())
        .args([
            "--exact",
            "owner_of_a_session_sandbox",
            "--ignored",
            "--nocapture",
        ])
        .env(OWNER_ENV, ws.path())
        .stdout(std::process::Stdio::piped())
        .spawn()
        .unwrap();
    let stdout = owner.stdout.take().unwrap();
    let ready = std::thread::spawn(move || {
        std::io::BufReader::new(stdout)
            .lines()
            .map_while(Result::ok)
            .find_map(|line| line.strip_prefix("READY ")?.trim().parse::<u32>().ok())
    });
    let deadline = Instant::now() + Duration::from_secs(60);
    while !ready.is_finished() && Instant::now() < deadline {
        tokio::time::sleep(Duration::from_millis(50)).await;
    }
    let bwrap = ready
        .join()
        .unwrap()
        .expect("the owner reports its sandbox");
    let zygote = zygote_inside(bwrap).expect("the zygote runs");
    assert!(!processes_with("9876.71").is_empty());
    owner.kill().unwrap(); // SIGKILL: no destructor runs in the owner
    owner.wait().unwrap();
    assert!(ended(bwrap).await, "bubblewrap outlived its owner");
    assert!(ended(zygote as u32).await, "the zygote outlived its owner");
    assert_eq!(gone("9876.71").await, Vec::<i32>::new());
}

/// The helper in zygote mode, run directly (no bubblewrap) with a control socket on
/// descriptor 3, as bubblewrap would give it.
mod zygote_protocol {
    use std::io::{IoSlice, IoSliceMut};
    use std::mem::MaybeUninit;
    use std::os::fd::{AsFd, AsRawFd, BorrowedFd, OwnedFd};
    use std::os::unix::process::CommandExt;

    use rustix::net::{
        recvmsg, sendmsg, AddressFamily, RecvAncillaryBuffer, RecvFlags, SendAncillaryBuffer,
        SendAncillaryMessage, SendFlags, SocketFlags, SocketType,
    };

    fn pair() -> (OwnedFd, OwnedFd) {
        rustix::net::socketpair(
            AddressFamily::UNIX,
            SocketType::SEQPACKET,
            SocketFlags::CLOEXEC,
            None,
        )
        .unwrap()
    }

    fn send(socket: &OwnedFd, bytes: &[u8], fds: &[BorrowedFd]) {
        let mut space = vec![MaybeUninit::uninit(); rustix::cmsg_space!(ScmRights(4))];
        let mut ancillary = SendAncillaryBuffer::new(&mut space);
        if !fds.is_empty() {
            assert!(ancillary.push(SendAncillaryMessage::ScmRights(fds)));
        }
        sendmsg(
            socket,
            &[IoSlice::new(bytes)],
            &mut ancillary,
            SendFlags::NOSIGNAL,
        )
        .unwrap();
    }

    /// The next packet, or `None` after 10 s.
    fn receive(socket: &OwnedFd) -> Option<String> {
        let mut fds = [rustix::event::PollFd::new(
            socket,
            rustix::event::PollFlags::IN,
        )];
        let timeout = rustix::event::Timespec {
            tv_sec: 10,
            tv_nsec: 0,
        };
        if rustix::event::poll(&mut fds, Some(&timeout)).unwrap() == 0 {
            return None;
        }
        let mut buffer = [0u8; 512];
        let mut space = [MaybeUninit::uninit(); rustix::cmsg_space!(ScmRights(1))];
        let mut ancillary = RecvAncillaryBuffer::new(&mut space);
        let message = recvmsg(
            socket,
            &mut [IoSliceMut::new(&mut buffer)],
            &mut ancillary,
            RecvFlags::empty(),
        )
        .unwrap();
        Some(String::from_utf8_lossy(&buffer[..message.bytes]).into_owned())
    }

    #[test]
    fn the_zygote_answers_garbage_with_an_error_and_keeps_serving() {
        let dir = super::TempDir::new("zygote-garbage");
        let (control, inside) = pair();
        let inside_fd = inside.as_raw_fd();
        let mut command =
            std::process::Command::new(env!("CARGO_BIN_EXE_switchboard-sandbox-exec"));
        command.arg("--write").arg(dir.path()).arg("--zygote");
        // SAFETY: dup2 is async-signal-safe; the descriptor stays open in the parent until the
        // spawn returned.
        #[allow(unsafe_code)]
        unsafe {
            command.pre_exec(move || {
                if libc::dup2(inside_fd, 3) < 0 {
                    return Err(std::io::Error::last_os_error());
                }
                Ok(())
            });
        }
        let mut zygote = command.spawn().unwrap();
        drop(inside);
        assert!(receive(&control).unwrap().starts_with("ready landlock="));

        // Each malformed request, with a command socket attached: an error on that socket.
        let garbage: [&[u8]; 5] = [
            b"\xff\xfe garbage",
            b"cwd\0relative\0arg\0true\0fd\0socket\0fd\0stdout\0",
            b"cwd\0/\0fd\0socket\0fd\0stdout\0",
            b"cwd\0/\0arg\0true\0fd\0stdout\0fd\0socket\0",
            // Two descriptors named, one attached.
            b"cwd\0/\0arg\0true\0fd\0socket\0fd\0stdout\0",
        ];
        for bytes in garbage {
            let (ours, theirs) = pair();
            send(&control, bytes, &[theirs.as_fd()]);
            drop(theirs);
            let answer = receive(&ours).expect("an answer");
            assert!(answer.starts_with("error "), "{answer:?} for {bytes:?}");
        }
        // Nothing attached at all: nobody to answer, and the zygote goes on.
        send(&control, b"\0\0\0", &[]);

        let (ours, theirs) = pair();
        let (out_r, out_w) = std::io::pipe().unwrap();
        let request = format!(
            "cwd\0{}\0arg\0sh\0arg\0-c\0arg\0echo served\0env\0PATH=/usr/bin:/bin\0fd\0socket\0fd\0stdout\0",
            dir.path().display()
        );
        send(
            &control,
            request.as_bytes(),
            &[theirs.as_fd(), out_w.as_fd()],
        );
        drop((theirs, out_w));
        assert_eq!(receive(&ours).as_deref(), Some("started"));
        assert_eq!(receive(&ours).as_deref(), Some("exit 0"));
        assert_eq!(std::io::read_to_string(out_r).unwrap(), "served\n");

        drop(control);
        assert!(
            zygote.wait().unwrap().success(),
            "the zygote did not end with its socket"
        );
    }
}
