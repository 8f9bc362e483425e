//! The sandbox's cost per command: `true` through the sandbox (bubblewrap, the helper's limits
//! and Landlock, the process-limit cgroup when root) and through a session's shell (plus the
//! wrapper's working-directory report), against a bare spawn of `true`, in the same run.
//!
//! A bounded harness: ROUNDS rounds, each running RUNS of every case in turn (alternating, so
//! drift hits all alike); the figures are the medians of the per-round medians.
//!
//! `cargo bench -p switchboard-sandbox --bench spawn`

use std::sync::Arc;
use std::time::{Duration, Instant};

use switchboard_sandbox::{
    HelperCommand, Keep, OutputLimits, RunRequest, RunSpec, Sandbox, SandboxOptions, ShellOptions,
    ShellSession,
};

const ROUNDS: usize = 15;
const RUNS: usize = 20;

fn median(mut values: Vec<Duration>) -> Duration {
    values.sort();
    values[values.len() / 2]
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
    let shell = ShellSession::new(Arc::clone(&sandbox), &root, ShellOptions::default()).unwrap();
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
    let (mut bare, mut sandboxed, mut shelled, mut floor) =
        (Vec::new(), Vec::new(), Vec::new(), Vec::new());
    for round in 0..=ROUNDS {
        let (mut b, mut s, mut sh, mut f) = (Vec::new(), Vec::new(), Vec::new(), Vec::new());
        for _ in 0..RUNS {
            let t = Instant::now();
            let status = tokio::process::Command::new("true").status().await.unwrap();
            assert!(status.success());
            b.push(t.elapsed());
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
            let t = Instant::now();
            let out = shell.run(request.clone()).await.unwrap();
            assert_eq!(out.exit_code, Some(0));
            sh.push(t.elapsed());
        }
        if round == 0 {
            continue; // warm-up
        }
        bare.push(median(b));
        floor.push(median(f));
        sandboxed.push(median(s));
        shelled.push(median(sh));
    }
    let (bare, sandboxed, shelled, floor) = (
        median(bare),
        median(sandboxed),
        median(shelled),
        median(floor),
    );
    let report = sandbox.report();
    println!(
        "sandbox: {} · landlock {} (ABI {}) · process limit {}",
        report.bwrap_version, report.landlock, report.landlock_abi, report.process_limit
    );
    println!("p50 over {ROUNDS} rounds × {RUNS} runs:");
    println!("  bare spawn of true          {:7.2} ms", ms(bare));
    println!(
        "  bwrap (namespaces only)     {:7.2} ms  (+{:.2} ms)",
        ms(floor),
        ms(floor) - ms(bare)
    );
    println!(
        "  Sandbox::run(true)          {:7.2} ms  (+{:.2} ms)",
        ms(sandboxed),
        ms(sandboxed) - ms(bare)
    );
    println!(
        "  shell.run(\"true\")           {:7.2} ms  (+{:.2} ms)",
        ms(shelled),
        ms(shelled) - ms(bare)
    );
}
