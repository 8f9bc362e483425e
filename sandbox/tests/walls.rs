//! Escape attempts: each test fails if its wall is removed.

mod common;

use std::time::{Duration, Instant};

use common::*;
use switchboard_sandbox::{
    CommandLimits, OutputLimits, RunRequest, SandboxError, SandboxErrorKind, SandboxOptions,
    ShellOptions,
};

#[tokio::test]
async fn writes_outside_the_workspace_do_not_reach_the_host() {
    let Some(sandbox) = sandbox().await else {
        return;
    };
    let base = TempDir::new("writes");
    let ws = base.path().join("ws");
    let outside = base.path().join("outside");
    std::fs::create_dir_all(&ws).unwrap();
    std::fs::create_dir_all(&outside).unwrap();
    std::os::unix::fs::symlink(&outside, ws.join("link")).unwrap();
    let shell = shell(&sandbox, &ws, ShellOptions::default());
    let target = format!("{}/abs.txt", outside.display());
    let answer = shell
        .run(run(&format!(
            "echo in > inside.txt; echo x > /etc/switchboard-escape; echo x > ../outside/dotdot.txt; echo x > {target}; echo x > link/linked.txt; echo done"
        )))
        .await
        .unwrap();
    assert!(answer.stdout.contains("done"), "{answer:?}");
    assert!(
        answer.stderr.contains("Read-only file system"),
        "{answer:?}"
    );
    assert_eq!(
        std::fs::read_to_string(ws.join("inside.txt")).unwrap(),
        "in\n"
    );
    assert!(!std::path::Path::new("/etc/switchboard-escape").exists());
    for name in ["dotdot.txt", "abs.txt", "linked.txt"] {
        assert!(
            !outside.join(name).exists(),
            "{name} was written outside the workspace"
        );
    }
}

#[tokio::test]
async fn a_secret_in_the_home_directory_cannot_be_read() {
    let Some(sandbox) = sandbox().await else {
        return;
    };
    let home = std::env::var("HOME").unwrap_or_else(|_| "/root".into());
    let secret = std::path::Path::new(&home).join(format!(
        ".switchboard-sandbox-secret-{}",
        std::process::id()
    ));
    std::fs::write(&secret, "hunter2").unwrap();
    let ws = TempDir::new("secret");
    let shell = shell(&sandbox, ws.path(), ShellOptions::default());
    let answer = shell
        .run(run(&format!(
            "cat {}; ls -a {home}; cat /etc/shadow; echo end",
            secret.display()
        )))
        .await
        .unwrap();
    let _ = std::fs::remove_file(&secret);
    assert!(answer.stdout.contains("end"), "{answer:?}");
    assert!(!answer.stdout.contains("hunter2"), "{answer:?}");
    assert!(
        !answer.stdout.contains(".switchboard-sandbox-secret"),
        "{answer:?}"
    );
    assert!(
        !answer.stdout.contains("root:"),
        "/etc/shadow was readable: {answer:?}"
    );
}

#[tokio::test]
async fn other_workspaces_beside_this_one_are_hidden() {
    let Some(sandbox) = sandbox().await else {
        return;
    };
    let base = TempDir::new("siblings");
    let mine = base.path().join("session-1");
    let theirs = base.path().join("session-2");
    std::fs::create_dir_all(&mine).unwrap();
    std::fs::create_dir_all(&theirs).unwrap();
    std::fs::write(theirs.join("notes.txt"), "their secret").unwrap();
    let shell = shell(&sandbox, &mine, ShellOptions::default());
    let answer = shell
        .run(run(&format!(
            "cat {}/notes.txt; ls ..; echo end",
            theirs.display()
        )))
        .await
        .unwrap();
    assert!(answer.stdout.contains("end"), "{answer:?}");
    assert!(!answer.stdout.contains("their secret"), "{answer:?}");
    assert!(!answer.stdout.contains("session-2"), "{answer:?}");
}

#[tokio::test]
async fn the_environment_is_cleared_to_the_allowlist() {
    let mut options = options();
    options.env_passthrough = vec!["CARGO_PKG_NAME".into()];
    let Some(sandbox) = sandbox_with(options).await else {
        return;
    };
    let ws = TempDir::new("env");
    let shell = shell(&sandbox, ws.path(), ShellOptions::default());
    let answer = shell.run(run("env")).await.unwrap();
    assert!(
        answer.stdout.contains("CARGO_PKG_NAME=switchboard-sandbox"),
        "{answer:?}"
    );
    assert!(!answer.stdout.contains("CARGO_MANIFEST_DIR"), "{answer:?}");
    assert!(answer.stdout.contains("HOME=/tmp"), "{answer:?}");
}

async fn connects(network: bool) -> (bool, bool) {
    let listener = std::net::TcpListener::bind("127.0.0.1:0").unwrap();
    listener.set_nonblocking(true).unwrap();
    let port = listener.local_addr().unwrap().port();
    let mut options = options();
    options.network = network;
    let sandbox = sandbox_with(options).await.unwrap();
    let ws = TempDir::new("net");
    let shell = shell(&sandbox, ws.path(), ShellOptions::default());
    let answer = shell
        .run(run(&format!(
            "echo hi > /dev/tcp/127.0.0.1/{port} && echo connected"
        )))
        .await
        .unwrap();
    let accepted = listener.accept().is_ok();
    (answer.stdout.contains("connected"), accepted)
}

#[tokio::test]
async fn a_listener_on_loopback_is_unreachable_with_the_network_off() {
    if !bwrap_present() {
        return;
    }
    assert_eq!(connects(false).await, (false, false));
    // The same command reaches it when the network is on: the test can see a connection.
    assert_eq!(connects(true).await, (true, true));
}

#[tokio::test]
async fn the_process_limit_bounds_how_many_processes_a_command_has() {
    let mut options = options();
    options.limits = CommandLimits {
        processes: 24,
        ..CommandLimits::default()
    };
    let Some(sandbox) = sandbox_with(options).await else {
        return;
    };
    let ws = TempDir::new("nproc");
    let shell = shell(&sandbox, ws.path(), ShellOptions::default());
    let answer = shell
        .run(run(
            // perl (Debian's essential perl-base) because a shell dies or retries when a
            // fork fails; this counts the forks that succeeded.
            "perl -e 'my $n = 0; for (1..100) { my $p = fork(); last unless defined $p; if ($p == 0) { exec(\"sleep\", \"30.2417\") } $n++ } print \"$n\\n\"'",
        ))
        .await
        .unwrap();
    let count: usize = answer
        .stdout
        .trim()
        .parse()
        .unwrap_or_else(|_| panic!("{answer:?}"));
    assert!(count < 24, "{count} processes started with a limit of 24");
    assert!(count >= 5, "the loop should have started some: {answer:?}");
    assert_eq!(gone("30.2417").await, Vec::<i32>::new());
}

#[tokio::test]
async fn a_fork_bomb_is_bounded_and_cleaned_up() {
    let mut options = options();
    options.limits = CommandLimits {
        processes: 64,
        ..CommandLimits::default()
    };
    let Some(sandbox) = sandbox_with(options).await else {
        return;
    };
    let ws = TempDir::new("bomb");
    let shell = shell(&sandbox, ws.path(), ShellOptions::default());
    let started = Instant::now();
    let result = shell
        .run(RunRequest {
            command: "bomb_4242() { bomb_4242 | bomb_4242 & }; bomb_4242; sleep 3".into(),
            timeout_s: Some(4),
            background: false,
        })
        .await;
    assert!(
        started.elapsed() < Duration::from_secs(30),
        "the bomb held the call"
    );
    if let Err(error) = &result {
        assert_eq!(error.kind(), SandboxErrorKind::Timeout, "{error}");
    }
    // The machine still spawns processes, and nothing of the bomb is left.
    assert!(std::process::Command::new("true")
        .status()
        .unwrap()
        .success());
    assert_eq!(gone("bomb_4242").await, Vec::<i32>::new());
}

fn vm_hwm_kib() -> u64 {
    std::fs::read_to_string("/proc/self/status")
        .unwrap()
        .lines()
        .find_map(|l| l.strip_prefix("VmHWM:"))
        .and_then(|v| v.split_whitespace().next()?.parse().ok())
        .unwrap()
}

#[tokio::test]
async fn a_gigabyte_of_output_keeps_the_tail_in_bounded_memory() {
    let Some(sandbox) = sandbox().await else {
        return;
    };
    let ws = TempDir::new("gigabyte");
    let options = ShellOptions {
        output: OutputLimits {
            max_bytes: 51_200,
            max_lines: 2_000,
            max_saved_bytes: 4 << 20,
        },
        ..ShellOptions::default()
    };
    let shell = shell(&sandbox, ws.path(), options);
    let before = vm_hwm_kib();
    let answer = shell
        .run(RunRequest {
            command: "yes 0123456789abcdef | head -c 1073741824; echo; echo the-end".into(),
            timeout_s: Some(120),
            background: false,
        })
        .await
        .unwrap();
    let grown_mib = (vm_hwm_kib() - before) / 1024;
    assert!(
        grown_mib < 200,
        "reading 1 GiB grew the peak memory by {grown_mib} MiB"
    );
    assert!(
        answer.stdout.ends_with("the-end\n"),
        "the tail was not kept"
    );
    assert!(answer.stdout.len() <= 51_200);
    assert!(answer.stdout.lines().count() <= 2_000);
    let cut = answer.stdout_cut.expect("the output was cut");
    assert_eq!(cut.total_bytes, (1 << 30) + 1 + 8);
    assert_eq!(cut.saved_bytes, 4 << 20);
    let saved = ws.path().join(cut.saved_to.unwrap());
    assert_eq!(std::fs::metadata(&saved).unwrap().len(), 4 << 20);
    assert!(std::fs::read_to_string(&saved)
        .unwrap()
        .starts_with("0123456789abcdef\n"));
}

#[tokio::test]
async fn a_command_past_its_timeout_is_killed_with_everything_it_started() {
    let Some(sandbox) = sandbox().await else {
        return;
    };
    let ws = TempDir::new("timeout");
    let shell = shell(&sandbox, ws.path(), ShellOptions::default());
    let started = Instant::now();
    let error = shell
        .run(RunRequest {
            command: "echo before; (setsid sleep 9876.51 &); sleep 9876.52".into(),
            timeout_s: Some(1),
            background: false,
        })
        .await
        .unwrap_err();
    assert!(started.elapsed() < Duration::from_secs(10));
    let SandboxError::Timeout { seconds, output } = error else {
        panic!("{error}")
    };
    assert_eq!(seconds, 1);
    assert_eq!(
        output.stdout, "before\n",
        "the output so far is in the error"
    );
    assert_eq!(gone("9876.5").await, Vec::<i32>::new());
}

#[tokio::test]
async fn a_cancelled_call_kills_its_command() {
    let Some(sandbox) = sandbox().await else {
        return;
    };
    let ws = TempDir::new("cancel");
    let shell = shell(&sandbox, ws.path(), ShellOptions::default());
    let call = shell.run(run("sleep 9876.61"));
    // The call is dropped (as a cancelled request or an /abort drops it) while it runs.
    let _ = tokio::time::timeout(Duration::from_millis(1500), call).await;
    assert_eq!(gone("9876.61").await, Vec::<i32>::new());
}

#[tokio::test]
async fn a_background_command_is_killed_by_shell_kill_and_when_its_session_goes() {
    let Some(sandbox) = sandbox().await else {
        return;
    };
    let ws = TempDir::new("background");
    let shell = shell(&sandbox, ws.path(), ShellOptions::default());
    let started = shell
        .run(background("echo one; echo two >&2; sleep 9876.71"))
        .await
        .unwrap();
    assert!(started.background);
    assert!(appears("9876.71").await);
    // Output is read as it comes: wait for both lines (bounded).
    for _ in 0..500 {
        if shell
            .output(&started.id, None)
            .unwrap()
            .output
            .contains("two")
        {
            break;
        }
        tokio::time::sleep(Duration::from_millis(10)).await;
    }
    let partial = shell.output(&started.id, Some(4)).unwrap();
    assert_eq!(
        (partial.output.as_str(), partial.since, partial.next),
        ("two\n", 4, 8)
    );
    let listed = shell.list();
    assert_eq!(listed.len(), 1);
    assert!(listed[0].running);
    let killed = shell.kill(&started.id).await.unwrap();
    assert!(killed.killed);
    assert_eq!(gone("9876.71").await, Vec::<i32>::new());
    let output = shell.output(&started.id, None).unwrap();
    assert!(!output.running);
    assert_eq!(output.output, "one\ntwo\n");

    shell.run(background("sleep 9876.72")).await.unwrap();
    assert!(appears("9876.72").await);
    drop(shell);
    assert_eq!(gone("9876.72").await, Vec::<i32>::new());
}

#[tokio::test]
async fn sandbox_helper_alone_refuses_writes_outside_its_directories() {
    // Landlock on its own, without bubblewrap: the second wall holds by itself.
    if switchboard_sandbox::helper::kernel_abi() == 0 {
        assert!(
            std::env::var_os("CI").is_none()
                || std::env::var_os("SWITCHBOARD_NO_LANDLOCK").is_some(),
            "the CI kernel has no Landlock"
        );
        return;
    }
    let allowed = TempDir::new("landlock-allowed");
    let denied = TempDir::new("landlock-denied");
    let output = std::process::Command::new(env!("CARGO_BIN_EXE_switchboard-sandbox-exec"))
        .arg("--write")
        .arg(allowed.path())
        .args(["--", "sh", "-c"])
        .arg(format!(
            "echo ok > {}/a && echo no > {}/b",
            allowed.path().display(),
            denied.path().display()
        ))
        .output()
        .unwrap();
    assert!(allowed.path().join("a").exists());
    assert!(
        !denied.path().join("b").exists(),
        "Landlock let a write through"
    );
    assert!(!output.status.success());
}

#[tokio::test]
async fn landlock_keeps_commands_from_filling_memory_through_dev_shm() {
    // bubblewrap's /dev is a tmpfs without a size cap; only Landlock stands between a command
    // and it.
    let Some(sandbox) = sandbox().await else {
        return;
    };
    if switchboard_sandbox::helper::kernel_abi() == 0 {
        return;
    }
    let ws = TempDir::new("shm");
    let shell = shell(&sandbox, ws.path(), ShellOptions::default());
    let answer = shell
        .run(run("echo x > /dev/shm/fill && echo wrote; echo x > /tmp/scratch && echo tmp-ok; echo x > /dev/null && echo null-ok"))
        .await
        .unwrap();
    assert!(!answer.stdout.contains("wrote"), "{answer:?}");
    assert!(
        answer.stdout.contains("tmp-ok") && answer.stdout.contains("null-ok"),
        "{answer:?}"
    );
}

#[tokio::test]
async fn the_probe_reports_each_wall_and_refuses_without_bwrap() {
    let Some(sandbox) = sandbox().await else {
        return;
    };
    let report = sandbox.report();
    assert!(report.bwrap_version.starts_with("bubblewrap"), "{report:?}");
    if switchboard_sandbox::helper::kernel_abi() > 0 {
        assert_ne!(report.landlock, "not", "{report:?}");
    }
    let mut missing = SandboxOptions::new(helper());
    missing.bwrap = "/nonexistent/bwrap".into();
    let error = switchboard_sandbox::Sandbox::probe(missing)
        .await
        .unwrap_err();
    assert_eq!(error.kind(), SandboxErrorKind::Unavailable);
    assert!(
        error.to_string().contains("apt-get install bubblewrap"),
        "{error}"
    );
    let mut no_helper = SandboxOptions::new(switchboard_sandbox::HelperCommand::new(
        "/nonexistent/helper",
    ));
    no_helper.bwrap = "bwrap".into();
    let error = switchboard_sandbox::Sandbox::probe(no_helper)
        .await
        .unwrap_err();
    assert_eq!(error.kind(), SandboxErrorKind::Unavailable);
}
