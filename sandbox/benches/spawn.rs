//! The sandbox's cost per command, against a bare spawn of `true`, in the same run:
//!
//! - `true` in a session's sandbox (`SessionSandbox::run`: the zygote forks a supervisor,
//!   which forks the command with its limits, Landlock layer and, when root, `pids` cgroup);
//! - `shell.run("true")` (the same, plus the bash wrapper that reports the working directory);
//! - the one-shot path (`Sandbox::run`: a bubblewrap of its own per command) and bubblewrap
//!   alone with the same namespaces, for comparison.
//!
//! A bounded harness: ROUNDS rounds, each running RUNS of every case in turn (alternating, so
//! drift hits all alike); the figures are the medians of the per-round medians.
//!
//! `cargo bench -p switchboard-sandbox --bench spawn`

use std::sync::Arc;
use std::time::{Duration, Instant};

use switchboard_sandbox::{
    HelperCommand, Keep, OutputLimits, RunRequest, RunSpec, Sandbox, SandboxOptions,
    SessionSandbox, ShellOptions, ShellSession,
};

const ROUNDS: usize = 15;
const RUNS: usize = 20;

fn median(mut values: Vec<Duration>) -> Duration {
    values.sort();
    values[values.len() / 2]
}

async fn bare_spawn() -> Duration {
    let t = Instant::now();
    let status = tokio::process::Command::new("true").status().await.unwrap();
    assert!(status.success());
    t.elapsed()
}

fn ms(d: Duration) -> f64 {
    d.as_secs_f64() * 1000.0
}

#[tokio::main]
async fn main() {
    let options = SandboxOptions::new(HelperCommand::new(env!(
        "CARGO_BIN_EXE_switchboard-sandbox-exec"
    )));
    let sandbox = Arc::new(
        Sandbox::probe(options)
            .await
            .expect("the sandbox (install bubblewrap)"),
    );
    let dir = tempfile::tempdir().unwrap();
    let root = dir.path().canonicalize().unwrap();
    let spec = RunSpec {
        root: root.clone(),
        cwd: root.clone(),
        argv: vec!["true".into()],
        env: Vec::new(),
        extra_writable: Vec::new(),
        timeout: Duration::from_secs(30),
        output: OutputLimits::default(),
        keep: Keep::Tail,
        spill: None,
        report_cwd: false,
        merge_stderr: false,
    };
    let session =
        SessionSandbox::new(Arc::clone(&sandbox), &root, Duration::from_secs(600)).unwrap();
    let shell_dir = tempfile::tempdir().unwrap();
    let shell = ShellSession::new(
        Arc::clone(&sandbox),
        shell_dir.path(),
        ShellOptions::default(),
    )
    .unwrap();
    let request = RunRequest {
        command: "true".into(),
        timeout_s: Some(30),
        background: false,
    };
    // bubblewrap alone with the same namespaces and nothing else: the floor this machine puts
    // under any bwrap-per-command design.
    let bwrap_only = [
        "--ro-bind",
        "/",
        "/",
        "--unshare-all",
        "--unshare-user",
        "--disable-userns",
        "--cap-drop",
        "ALL",
        "--die-with-parent",
        "--new-session",
        "--",
        "true",
    ];
    let (mut bare, mut sandboxed, mut shelled, mut floor, mut zygote, mut one_shot_bare) = (
        Vec::new(),
        Vec::new(),
        Vec::new(),
        Vec::new(),
        Vec::new(),
        Vec::new(),
    );
    for round in 0..=ROUNDS {
        let (mut b, mut s, mut sh, mut f, mut z, mut ob) = (
            Vec::new(),
            Vec::new(),
            Vec::new(),
            Vec::new(),
            Vec::new(),
            Vec::new(),
        );
        // Two phases per round. The one-shot path's sandboxes are torn down by the kernel after
        // they exit (their mount and network namespaces go asynchronously), which slows
        // whatever runs next on 2 cores; in its own phase that lands on its own cases.
        for _ in 0..RUNS {
            // Each sandboxed case right after a bare spawn: drift hits both alike.
            b.push(bare_spawn().await);
            let t = Instant::now();
            let out = session.run(&spec).await.unwrap();
            assert_eq!(out.exit_code, Some(0), "{out:?}");
            z.push(t.elapsed());
            b.push(bare_spawn().await);
            let t = Instant::now();
            let out = shell.run(request.clone()).await.unwrap();
            assert_eq!(out.exit_code, Some(0));
            sh.push(t.elapsed());
        }
        for _ in 0..RUNS {
            ob.push(bare_spawn().await);
            let t = Instant::now();
            let status = tokio::process::Command::new("bwrap")
                .args(bwrap_only)
                .status()
                .await
                .unwrap();
            assert!(status.success());
            f.push(t.elapsed());
            let t = Instant::now();
            let out = sandbox.run(&spec).await.unwrap();
            assert_eq!(out.exit_code, Some(0), "{out:?}");
            s.push(t.elapsed());
        }
        if round == 0 {
            continue; // warm-up
        }
        bare.push(median(b));
        floor.push(median(f));
        sandboxed.push(median(s));
        shelled.push(median(sh));
        zygote.push(median(z));
        one_shot_bare.push(median(ob));
    }
    let one_shot_bare = median(one_shot_bare);
    let (bare, sandboxed, shelled, floor, zygote) = (
        median(bare),
        median(sandboxed),
        median(shelled),
        median(floor),
        median(zygote),
    );
    let load = std::fs::read_to_string("/proc/loadavg").unwrap_or_default();
    let report = sandbox.report();
    println!(
        "sandbox: {} · landlock {} (ABI {}) · process limit {}",
        report.bwrap_version, report.landlock, report.landlock_abi, report.process_limit
    );
    println!(
        "load average (1, 5, 15 min) at the end: {}",
        load.split_whitespace()
            .take(3)
            .collect::<Vec<_>>()
            .join(" ")
    );
    println!("p50 over {ROUNDS} rounds × {RUNS} runs (median of the per-round medians):");
    println!("  bare spawn of true          {:7.2} ms", ms(bare));
    println!(
        "  SessionSandbox::run(true)   {:7.2} ms  (+{:.2} ms)",
        ms(zygote),
        ms(zygote) - ms(bare)
    );
    println!(
        "  shell.run(\"true\")           {:7.2} ms  (+{:.2} ms)",
        ms(shelled),
        ms(shelled) - ms(bare)
    );
    println!("one-shot path, for comparison (its own phase of each round):");
    println!("  bare spawn of true          {:7.2} ms", ms(one_shot_bare));
    println!(
        "  bwrap (namespaces only)     {:7.2} ms  (+{:.2} ms)",
        ms(floor),
        ms(floor) - ms(one_shot_bare)
    );
    println!(
        "  Sandbox::run(true)          {:7.2} ms  (+{:.2} ms)",
        ms(sandboxed),
        ms(sandboxed) - ms(one_shot_bare)
    );
}
