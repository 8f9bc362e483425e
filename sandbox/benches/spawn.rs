//! The sandbox's cost per command, against a bare spawn of `true`, in the same run:
//!
//! - `true` in a session's sandbox (`SessionSandbox::run`: the zygote forks a supervisor,
//!   which forks the command with its limits, Landlock layer and, when root, `pids` cgroup);
//! - `shell.run("true")` (the same, plus the bash wrapper that reports the working directory);
//! - the one-shot path (`Sandbox::run`: a bubblewrap of its own per command) and bubblewrap
//!   alone with the same namespaces, for comparison;
//! - a new session's first command, which starts the session's sandbox.
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

// The cases, by their index in the sample arrays.
const BARE: usize = 0;
const SESSION: usize = 1;
const SHELL: usize = 2;
const ONE_SHOT_BARE: usize = 3;
const FLOOR: usize = 4;
const ONE_SHOT: usize = 5;
/// A new session's first command: its sandbox is built first.
const FIRST: usize = 6;
const CASES: usize = 7;

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

fn load_average() -> String {
    std::fs::read_to_string("/proc/loadavg")
        .unwrap_or_default()
        .split_whitespace()
        .take(3)
        .collect::<Vec<_>>()
        .join(" ")
}

fn ms(d: Duration) -> f64 {
    d.as_secs_f64() * 1000.0
}

/// One line of the report: the case's p50 and what it adds to the bare spawn beside it.
fn row(case: &str, p50: Duration, bare: Option<Duration>) {
    match bare {
        Some(bare) => println!(
            "  {case:<27} {:7.2} ms  (+{:.2} ms)",
            ms(p50),
            ms(p50) - ms(bare)
        ),
        None => println!("  {case:<27} {:7.2} ms", ms(p50)),
    }
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
    let load_at_start = load_average();
    // Per case: the median of each round.
    let mut medians: [Vec<Duration>; CASES] = Default::default();
    for round in 0..=ROUNDS {
        let mut samples: [Vec<Duration>; CASES] = Default::default();
        // Two phases per round. The one-shot path's sandboxes are torn down by the kernel after
        // they exit (their mount and network namespaces go asynchronously), which slows
        // whatever runs next on 2 cores; in its own phase that lands on its own cases.
        for _ in 0..RUNS {
            // Each sandboxed case right after a bare spawn: drift hits both alike.
            samples[BARE].push(bare_spawn().await);
            let t = Instant::now();
            let out = session.run(&spec).await.unwrap();
            assert_eq!(out.exit_code, Some(0), "{out:?}");
            samples[SESSION].push(t.elapsed());
            samples[BARE].push(bare_spawn().await);
            let t = Instant::now();
            let out = shell.run(request.clone()).await.unwrap();
            assert_eq!(out.exit_code, Some(0));
            samples[SHELL].push(t.elapsed());
        }
        for _ in 0..RUNS {
            samples[ONE_SHOT_BARE].push(bare_spawn().await);
            let t = Instant::now();
            let status = tokio::process::Command::new("bwrap")
                .args(bwrap_only)
                .status()
                .await
                .unwrap();
            assert!(status.success());
            samples[FLOOR].push(t.elapsed());
            let t = Instant::now();
            let out = sandbox.run(&spec).await.unwrap();
            assert_eq!(out.exit_code, Some(0), "{out:?}");
            samples[ONE_SHOT].push(t.elapsed());
        }
        // Once per round: a fresh session's first command (the sandbox is started for it).
        let fresh =
            SessionSandbox::new(Arc::clone(&sandbox), &root, Duration::from_secs(600)).unwrap();
        let t = Instant::now();
        let out = fresh.run(&spec).await.unwrap();
        assert_eq!(out.exit_code, Some(0), "{out:?}");
        samples[FIRST].push(t.elapsed());
        drop(fresh);
        if round == 0 {
            continue; // warm-up
        }
        for (case, samples) in samples.into_iter().enumerate() {
            medians[case].push(median(samples));
        }
    }
    let p50 = medians.map(median);
    let report = sandbox.report();
    println!(
        "sandbox: {} · landlock {} (ABI {}) · process limit {}",
        report.bwrap_version, report.landlock, report.landlock_abi, report.process_limit
    );
    println!(
        "load average (1, 5, 15 min): {load_at_start} at the start, {} at the end, on {} cores",
        load_average(),
        std::thread::available_parallelism().map_or(0, usize::from)
    );
    println!("p50 over {ROUNDS} rounds × {RUNS} runs (median of the per-round medians):");
    row("bare spawn of true", p50[BARE], None);
    row("SessionSandbox::run(true)", p50[SESSION], Some(p50[BARE]));
    row("shell.run(\"true\")", p50[SHELL], Some(p50[BARE]));
    println!("one-shot path, for comparison (its own phase of each round):");
    row("bare spawn of true", p50[ONE_SHOT_BARE], None);
    row(
        "bwrap (namespaces only)",
        p50[FLOOR],
        Some(p50[ONE_SHOT_BARE]),
    );
    row(
        "Sandbox::run(true)",
        p50[ONE_SHOT],
        Some(p50[ONE_SHOT_BARE]),
    );
    println!("a new session's first command (its sandbox started first), once per round:");
    row(
        "first SessionSandbox::run",
        p50[FIRST],
        Some(p50[ONE_SHOT_BARE]),
    );
}
