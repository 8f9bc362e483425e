//! Several nodes on one PostgreSQL (issue 23), the real `switchboard` binary as child processes
//! against an in-process fake Discord, a throwaway PostgreSQL cluster (Debian's binaries, the
//! test harness's, syncing to disk as a production one does), loopback and Unix sockets only:
//!
//! * **`/v1/call` throughput, two nodes against one**: nodes A and B run on one database
//!   (`cluster.shards = "lease"`); client threads call `surface.messages.list` (each call
//!   audited into PostgreSQL) with keep-alive connections for `CLUSTER_CALL_SECONDS` (default
//!   5) per round — all of them at A ("one node"), then half at A and half at B ("two nodes"),
//!   alternating for `CLUSTER_ROUNDS` rounds (default 5). Reported: calls/s per side, median of
//!   rounds, and the ratio. Both nodes run in every round, so the one-node side carries B's
//!   idle heartbeats too; on this 2-core machine the clients and both nodes share the cores.
//! * **Failover**: fake Discord with 2 shards and a guild on each, two lease nodes (the
//!   default 20 s lease, or `CLUSTER_LEASE_S`), SIGKILL the node holding the `#ops` shard, post
//!   into `#ops` right after; reported: kill → the survivor runs both shards (`/health`), and
//!   kill → the message posted into the gap is listed on the survivor (the backfill).
//!   `CLUSTER_FAILOVER_ROUNDS` rounds (default 1), each with a fresh database. With
//!   `CLUSTER_BASELINE_BIN` naming an older build's `switchboard`, each round runs it first
//!   ("before") and this build second ("after"), and both medians are reported.
//!
//! * **The global limit split**: Discord's 50 requests/s per bot shared by two lease nodes:
//!   `surface.pins.list` calls (one Discord request each) at one node, then at both; the fake
//!   reports the busiest second's requests and the global 429s (see [`bench_split`]).
//!
//! `cargo bench -p switchboard --bench cluster` (a bounded harness, not criterion); `-- call`,
//! `-- failover` or `-- split` runs one part.

#[path = "../tests/support/mod.rs"]
mod e2e;

use std::process::{Command, Stdio};
use std::sync::atomic::{AtomicBool, AtomicU64, Ordering};
use std::sync::Arc;
use std::time::{Duration, Instant};

use e2e::shards::{two_shard_world, ANNEX_GENERAL};
use e2e::{http_get, Allow, Fake, Sections, Switchboard, TempDir};
use fake_discord::{demo, FakeOptions, RateLimits};
use serde_json::Value;
use switchboard_store_postgres::testing::PgCluster;

const CLIENTS: usize = 4;
/// Every wait in the harness ends by itself.
const WAIT: Duration = Duration::from_secs(90);

fn env_number(name: &str, default: u64) -> u64 {
    std::env::var(name)
        .ok()
        .and_then(|v| v.parse().ok())
        .unwrap_or(default)
}

/// The `tools` CLI the e2e support drives: in a bench build it must sit beside the release
/// `switchboard`, so it is built the same way first (a `--profile dev` run finds or builds the
/// debug one itself).
fn build_release_tools() {
    if cfg!(debug_assertions) {
        return;
    }
    let cargo = std::env::var("CARGO").unwrap_or_else(|_| "cargo".to_owned());
    let status = Command::new(cargo)
        .args(["build", "-q", "--release", "-p", "tools"])
        .current_dir(env!("CARGO_MANIFEST_DIR"))
        .stdin(Stdio::null())
        .status()
        .expect("run cargo build for the tools binary");
    assert!(status.success(), "building the release tools binary failed");
}

/// A lease node on `url` named `node`; `lease_s` unset means the default lease.
fn lease_node(
    fake: &Fake,
    dir: &TempDir,
    url: &str,
    node: &str,
    lease_s: Option<u64>,
) -> Switchboard {
    let lease = lease_s.map_or(String::new(), |s| format!("lease_s = {s}\n"));
    let extra = format!(
        "[cluster]\nnode_id = \"{node}\"\nshards = \"lease\"\n{lease}\n\
         [toolserver.rate_limits]\nper_caller_per_minute = 100000000\nper_caller_burst = 10000000\n"
    );
    Switchboard::start_sections(
        fake,
        dir.path(),
        &Allow {
            channels: vec![demo::OPS, ANNEX_GENERAL],
            dms: true,
        },
        Sections {
            extra: &extra,
            store_url: Some(url),
            ..Sections::default()
        },
    )
}

fn health(sb: &Switchboard) -> Option<Value> {
    let (_, body) = http_get(&sb.url, "/health").ok()?;
    serde_json::from_str(&body).ok()
}

/// The ids of the shards `sb` runs and reports `ready`.
fn ready_shards(sb: &Switchboard) -> Vec<u64> {
    health(sb)
        .and_then(|h| h["shards"].as_array().cloned())
        .unwrap_or_default()
        .iter()
        .filter(|s| s["state"] == "ready")
        .filter_map(|s| s["id"].as_u64())
        .collect()
}

fn wait_until(what: &str, mut done: impl FnMut() -> bool) {
    let deadline = Instant::now() + WAIT;
    while !done() {
        assert!(Instant::now() < deadline, "{what}: not within {WAIT:?}");
        std::thread::sleep(Duration::from_millis(50));
    }
}

/// Calls per second of `CLIENTS` threads spread over `targets` (base URL, token) for `for_s`.
fn call_rate(targets: &[(String, String)], for_s: u64) -> f64 {
    let body = r##"{"tool":"surface.messages.list","input":{"sessionId":"#ops","limit":50}}"##;
    call_rate_of(targets, for_s, CLIENTS, |_| body.to_owned())
}

/// Calls per second of `clients` threads spread over `targets` (base URL, token) for `for_s`,
/// client `i` sending `body(i)`.
fn call_rate_of(
    targets: &[(String, String)],
    for_s: u64,
    clients: usize,
    body: impl Fn(usize) -> String,
) -> f64 {
    let stop = Arc::new(AtomicBool::new(false));
    let answered = Arc::new(AtomicU64::new(0));
    let failed = Arc::new(AtomicU64::new(0));
    let started = Instant::now();
    let threads: Vec<_> = (0..clients)
        .map(|i| {
            let (base, token) = targets[i % targets.len()].clone();
            let body = body(i);
            let (stop, answered, failed) = (stop.clone(), answered.clone(), failed.clone());
            std::thread::spawn(move || {
                let agent: ureq::Agent = ureq::Agent::config_builder()
                    .timeout_global(Some(Duration::from_secs(10)))
                    .http_status_as_error(false)
                    .build()
                    .into();
                let url = format!("{base}/v1/call");
                while !stop.load(Ordering::Relaxed) {
                    let ok = agent
                        .post(&url)
                        .header("authorization", &format!("Bearer {token}"))
                        .header("content-type", "application/json")
                        .send(&body)
                        .map(|mut r| {
                            let status = r.status().as_u16();
                            let _ = r.body_mut().read_to_vec();
                            status == 200
                        })
                        .unwrap_or(false);
                    if ok { &answered } else { &failed }.fetch_add(1, Ordering::Relaxed);
                }
            })
        })
        .collect();
    std::thread::sleep(Duration::from_secs(for_s));
    stop.store(true, Ordering::Relaxed);
    for t in threads {
        let _ = t.join();
    }
    let failures = failed.load(Ordering::Relaxed);
    assert_eq!(failures, 0, "{failures} calls were not answered 200");
    answered.load(Ordering::Relaxed) as f64 / started.elapsed().as_secs_f64()
}

fn median(values: &mut [f64]) -> f64 {
    values.sort_by(f64::total_cmp);
    values[values.len() / 2]
}

fn bench_calls(pg: &PgCluster) {
    let rounds = env_number("CLUSTER_ROUNDS", 5).max(1);
    let seconds = env_number("CLUSTER_CALL_SECONDS", 5).max(1);
    let url = pg.url(&pg.database().expect("a database"));
    // Two shards, so the second node gets one (a lease node without a shard has no gateway).
    let fake = Fake::start_with(
        two_shard_world(),
        FakeOptions {
            shards: 2,
            rate_limits: RateLimits::unthrottled(),
            ..FakeOptions::default()
        },
    );
    let (dir_a, dir_b) = (TempDir::new("bench-call-a"), TempDir::new("bench-call-b"));
    let a = lease_node(&fake, &dir_a, &url, "node-a", Some(6));
    let b = lease_node(&fake, &dir_b, &url, "node-b", Some(6));
    // Fifty messages in #ops for every call to list.
    let ids: Vec<String> = (0..50)
        .map(|n| fake.post(demo::OPS, demo::STANLEY, &format!("history {n}")))
        .collect();
    a.wait_listed("#ops", &ids[ids.len() - 1..], WAIT);
    b.wait_listed("#ops", &ids[ids.len() - 1..], WAIT);
    let one = [(a.url.clone(), a.token.clone())];
    let two = [
        (a.url.clone(), a.token.clone()),
        (b.url.clone(), b.token.clone()),
    ];
    let (mut one_rates, mut two_rates, mut ratios) = (Vec::new(), Vec::new(), Vec::new());
    for round in 1..=rounds {
        let single = call_rate(&one, seconds);
        let pair = call_rate(&two, seconds);
        println!("round {round}: one node {single:8.0} calls/s, two nodes {pair:8.0} calls/s, ratio {:.2}", pair / single);
        one_rates.push(single);
        two_rates.push(pair);
        ratios.push(pair / single);
    }
    println!(
        "/v1/call surface.messages.list (50 messages, audited into PostgreSQL), {CLIENTS} clients, {rounds} rounds of {seconds} s each side: \
         one node {:.0} calls/s, two nodes {:.0} calls/s, ratio {:.2} (median of rounds)",
        median(&mut one_rates),
        median(&mut two_rates),
        median(&mut ratios)
    );
}

fn bench_failover(pg: &PgCluster) {
    let rounds = env_number("CLUSTER_FAILOVER_ROUNDS", 1).max(1);
    let lease_s = std::env::var("CLUSTER_LEASE_S")
        .ok()
        .and_then(|v| v.parse().ok());
    let baseline = std::env::var_os("CLUSTER_BASELINE_BIN");
    /// One side of the comparison: its name, its binary (`None`: this build's), its figures.
    struct Side {
        name: &'static str,
        binary: Option<std::ffi::OsString>,
        to_ready: Vec<f64>,
        to_backfilled: Vec<f64>,
    }
    let side = |name, binary| Side {
        name,
        binary,
        to_ready: Vec::new(),
        to_backfilled: Vec::new(),
    };
    let mut sides: Vec<Side> = baseline
        .map(|baseline| side("before", Some(baseline)))
        .into_iter()
        .chain([side("after", None)])
        .collect();
    for round in 1..=rounds {
        for Side {
            name: side,
            binary,
            to_ready,
            to_backfilled,
        } in &mut sides
        {
            // Set between rounds only, while no node is starting.
            match binary {
                Some(binary) => std::env::set_var("SWITCHBOARD_BASELINE_BIN", binary),
                None => std::env::remove_var("SWITCHBOARD_BASELINE_BIN"),
            }
            let (ready, backfilled) = failover_once(pg, lease_s);
            println!(
                "round {round} ({side}): kill → survivor runs both shards {ready:.1} s, → the gap's message listed {backfilled:.1} s"
            );
            to_ready.push(ready);
            to_backfilled.push(backfilled);
        }
    }
    std::env::remove_var("SWITCHBOARD_BASELINE_BIN");
    for Side {
        name: side,
        to_ready,
        to_backfilled,
        ..
    } in &mut sides
    {
        println!(
            "failover ({side}, lease {}), median of {rounds}: kill → both shards ready {:.1} s, → gap backfilled {:.1} s",
            lease_s.map_or("20 s, the default".to_owned(), |s| format!("{s} s")),
            median(to_ready),
            median(to_backfilled)
        );
    }
}

/// One failover on a fresh database: (kill → both shards ready, kill → the gap backfilled) in
/// seconds.
fn failover_once(pg: &PgCluster, lease_s: Option<u64>) -> (f64, f64) {
    let url = pg.url(&pg.database().expect("a database"));
    let fake = Fake::two_shards();
    let (dir_a, dir_b) = (
        TempDir::new("bench-failover-a"),
        TempDir::new("bench-failover-b"),
    );
    let a = lease_node(&fake, &dir_a, &url, "node-a", lease_s);
    wait_until("node-a runs both shards", || ready_shards(&a) == [0, 1]);
    let b = lease_node(&fake, &dir_b, &url, "node-b", lease_s);
    wait_until("node-a gives shard 1 to node-b", || {
        ready_shards(&a) == [0] && ready_shards(&b) == [1]
    });
    let killed = Instant::now();
    b.kill();
    let in_gap = fake.post(
        demo::OPS,
        demo::STANLEY,
        "posted while shard 1 has no owner",
    );
    wait_until("node-a runs both shards again", || {
        ready_shards(&a) == [0, 1]
    });
    let ready = killed.elapsed();
    a.wait_listed("#ops", &[in_gap], WAIT);
    (ready.as_secs_f64(), killed.elapsed().as_secs_f64())
}

/// Discord's global limit (50 requests/s per bot) split between two lease nodes: client
/// threads call `surface.pins.list` (one Discord request each, on routes whose own buckets
/// allow 50/s per channel, so only the global limit binds) at node A only ("one node busy")
/// and at both ("both busy"), alternating; the fake, with Discord's limits, reports the
/// busiest second's requests (refused ones included) and the global 429s of each side.
fn bench_split() {
    let rounds = env_number("CLUSTER_ROUNDS", 3).max(1);
    let seconds = env_number("CLUSTER_CALL_SECONDS", 5).max(1);
    let pg = PgCluster::start().expect("a PostgreSQL");
    let url = pg.url(&pg.database().expect("a database"));
    let fake = Fake::two_shards();
    let (dir_a, dir_b) = (TempDir::new("bench-split-a"), TempDir::new("bench-split-b"));
    let a = lease_node(&fake, &dir_a, &url, "node-a", Some(6));
    let b = lease_node(&fake, &dir_b, &url, "node-b", Some(6));
    wait_until("the nodes run one shard each", || {
        ready_shards(&a) == [0] && ready_shards(&b) == [1]
    });
    let clients = 16;
    let body = |i: usize| {
        let session = [demo::OPS, ANNEX_GENERAL][i % 2];
        format!(r#"{{"tool":"surface.pins.list","input":{{"sessionId":"{session}"}}}}"#)
    };
    let one = [(a.url.clone(), a.token.clone())];
    let two = [
        (a.url.clone(), a.token.clone()),
        (b.url.clone(), b.token.clone()),
    ];
    let side = |targets: &[(String, String)]| {
        fake.fake.reset_rate_tally();
        let rate = call_rate_of(targets, seconds, clients, body);
        (rate, fake.fake.rate_tally())
    };
    let (mut one_rates, mut two_rates) = (Vec::new(), Vec::new());
    let (mut peak, mut global_429s) = (0, 0);
    for round in 1..=rounds {
        let (single, single_tally) = side(&one);
        let (pair, pair_tally) = side(&two);
        println!(
            "round {round}: one node busy {single:5.1} requests/s (busiest second {}, global 429s {}), \
             both busy {pair:5.1} requests/s (busiest second {}, global 429s {})",
            single_tally.peak_per_second,
            single_tally.global_429s,
            pair_tally.peak_per_second,
            pair_tally.global_429s
        );
        one_rates.push(single);
        two_rates.push(pair);
        peak = peak.max(single_tally.peak_per_second.max(pair_tally.peak_per_second));
        global_429s += single_tally.global_429s + pair_tally.global_429s;
    }
    println!(
        "global limit split between 2 lease nodes, {clients} clients calling surface.pins.list, {rounds} rounds of {seconds} s each side: \
         one node busy {:.1} requests/s, both busy {:.1} requests/s (median of rounds); busiest second {peak} requests, {global_429s} global 429s",
        median(&mut one_rates),
        median(&mut two_rates)
    );
}

fn main() {
    let filter: Vec<String> = std::env::args()
        .skip(1)
        .filter(|a| !a.starts_with("--"))
        .collect();
    let wants = |part: &str| filter.is_empty() || filter.iter().any(|f| part.contains(f.as_str()));
    build_release_tools();
    if wants("split") {
        bench_split();
    }
    // Syncing to disk as a production PostgreSQL does: the calls' audit rows are durable.
    let pg = PgCluster::start_durable().expect("start a PostgreSQL for the bench");
    if wants("call") {
        bench_calls(&pg);
    }
    if wants("failover") {
        bench_failover(&pg);
    }
}
