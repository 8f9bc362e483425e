//! `fs.grep` over a 100,000-file tree against the `rg` program on the same tree, in the same
//! run: ROUNDS rounds, each timing one search of each in turn (alternating, after a warm-up
//! that fills the page cache); the figures are the medians.
//!
//! `cargo bench -p switchboard-workspace --bench grep` (needs `rg`: apt-get install ripgrep)

use std::io::Write;
use std::time::{Duration, Instant};

use switchboard_workspace::{GrepRequest, SandboxState, Workspace, WorkspaceOptions};

const DIRS: usize = 100;
const FILES_PER_DIR: usize = 1000;
const ROUNDS: usize = 9;
const NEEDLE: &str = "NEEDLE_4242";

fn median(mut values: Vec<Duration>) -> Duration {
    values.sort();
    values[values.len() / 2]
}

fn ms(d: Duration) -> f64 {
    d.as_secs_f64() * 1000.0
}

#[tokio::main]
async fn main() {
    let dir = tempfile::tempdir().unwrap();
    let root = dir.path();
    let started = Instant::now();
    let mut needles = 0;
    for d in 0..DIRS {
        let sub = root.join(format!("module_{d:03}"));
        std::fs::create_dir(&sub).unwrap();
        for f in 0..FILES_PER_DIR {
            let mut file = std::io::BufWriter::new(
                std::fs::File::create(sub.join(format!("file_{f:04}.rs"))).unwrap(),
            );
            for line in 0..6 {
                writeln!(
                    file,
                    "fn function_{d}_{f}_{line}(value: u64) -> u64 {{ value * {line} + {f} }}"
                )
                .unwrap();
            }
            if (d * FILES_PER_DIR + f) % 1000 == 7 {
                writeln!(file, "// {NEEDLE} marks this file").unwrap();
                needles += 1;
            }
        }
    }
    eprintln!(
        "tree: {} files in {:.1} s",
        DIRS * FILES_PER_DIR,
        started.elapsed().as_secs_f64()
    );
    let unavailable = SandboxState::Unavailable {
        reason: "not needed".into(),
        install: String::new(),
    };
    let workspace = Workspace::open(root, WorkspaceOptions::default(), unavailable).unwrap();
    let request = GrepRequest {
        pattern: NEEDLE.into(),
        glob: None,
        limit: Some(1000),
    };
    let rg = || {
        let t = Instant::now();
        let output = std::process::Command::new("rg")
            .args(["-n", "--no-messages", NEEDLE])
            .arg(root)
            .output()
            .expect("rg (apt-get install ripgrep)");
        let elapsed = t.elapsed();
        assert_eq!(
            output.stdout.iter().filter(|&&b| b == b'\n').count(),
            needles
        );
        elapsed
    };
    let (mut ours, mut theirs) = (Vec::new(), Vec::new());
    for round in 0..=ROUNDS {
        let t = Instant::now();
        let answer = workspace.grep(request.clone()).await.unwrap();
        let elapsed = t.elapsed();
        assert_eq!(answer.matches.len(), needles);
        let rg_elapsed = rg();
        if round > 0 {
            ours.push(elapsed);
            theirs.push(rg_elapsed);
        }
    }
    let (ours, theirs) = (median(ours), median(theirs));
    println!(
        "grep over {} files ({needles} matching lines), median of {ROUNDS} rounds:",
        DIRS * FILES_PER_DIR
    );
    println!("  rg program        {:8.1} ms", ms(theirs));
    println!(
        "  fs.grep           {:8.1} ms  ({:.2}× rg)",
        ms(ours),
        ours.as_secs_f64() / theirs.as_secs_f64()
    );
}
