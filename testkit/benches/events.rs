//! SSE fan-out: 100 subscribers on `GET /v1/events` over loopback while `message.created`
//! events are published at 1,000 a second for a few seconds. Reports what each subscriber
//! received, the delivery latency (publish to read, from the event's own time), the process's
//! CPU time over the round, and its resident memory before, during and after — which must stay
//! bounded whatever the subscribers do.
//!
//! Two kinds of subscriber, alternating round by round in one run: the operator (who sees
//! everything: no per-event check) and 100 run capabilities of #ops (each event checked against
//! what the run may read: scope, allowlist, rules — `visibility.rs`, answered from a per-stream
//! cache after the first event of a session). The ratio of their CPU times is the cost of that
//! check.
//!
//! `cargo bench -p switchboard-testkit --bench events` (`EVENTS_BENCH_ROUNDS`, default 3 of each; a
//! bounded harness, not criterion: it measures a rate over time, not one operation).

use std::io::{BufRead, BufReader};
use std::sync::atomic::{AtomicUsize, Ordering};
use std::sync::{Arc, Mutex};
use std::time::{Duration, Instant};

use entity::Snowflake;
use serde_json::json;
use switchboard_testkit::platform::demo;
use switchboard_testkit::testing::{TestServer, DEMO_CONFIG};

const SUBSCRIBERS: usize = 100;
const RATE: u64 = 1_000;
const SECONDS: u64 = 5;

fn rss_kib() -> u64 {
    std::fs::read_to_string("/proc/self/status")
        .ok()
        .and_then(|s| {
            s.lines()
                .find(|l| l.starts_with("VmRSS:"))
                .and_then(|l| l.split_whitespace().nth(1))
                .and_then(|v| v.parse().ok())
        })
        .unwrap_or(0)
}

/// This process's user + system CPU time, in seconds (`/proc/self/stat`, clock ticks of 1/100 s).
fn cpu_s() -> f64 {
    let stat = std::fs::read_to_string("/proc/self/stat").unwrap_or_default();
    let after = stat.rsplit_once(')').map_or("", |(_, rest)| rest);
    let fields: Vec<u64> = after
        .split_whitespace()
        .map(|f| f.parse().unwrap_or(0))
        .collect();
    // utime and stime are fields 14 and 15 of the whole line: 12 and 13 after the name.
    (fields.get(11).copied().unwrap_or(0) + fields.get(12).copied().unwrap_or(0)) as f64 / 100.0
}

fn now_ms() -> u64 {
    std::time::SystemTime::now()
        .duration_since(std::time::UNIX_EPOCH)
        .map_or(0, |d| d.as_millis() as u64)
}

#[derive(Clone, Copy, PartialEq)]
enum Who {
    Operator,
    Capabilities,
}

impl Who {
    fn name(self) -> &'static str {
        match self {
            Who::Operator => "operator",
            Who::Capabilities => "capabilities",
        }
    }
}

struct Round {
    delivered: usize,
    expected: usize,
    dropped: usize,
    p50: u64,
    p99: u64,
    max: u64,
    cpu_s: f64,
    rss: [u64; 4],
}

fn round(runtime: &tokio::runtime::Runtime, who: Who) -> Round {
    let server = runtime
        .block_on(TestServer::start(&DEMO_CONFIG))
        .expect("server");
    let url = format!("{}/v1/events", server.url());
    let tokens: Vec<String> = (0..SUBSCRIBERS)
        .map(|i| match who {
            Who::Operator => server.operator_token().to_owned(),
            Who::Capabilities => server.mint(
                demo::OPS,
                &format!("run-{i}"),
                &["surface.*"],
                Duration::from_secs(600),
            ),
        })
        .collect();
    let latencies = Arc::new(Mutex::new(Vec::with_capacity(
        SUBSCRIBERS * (RATE * SECONDS) as usize,
    )));
    let received = Arc::new(AtomicUsize::new(0));
    let dropped = Arc::new(AtomicUsize::new(0));
    let rss_start = rss_kib();
    let mut readers = Vec::new();
    for token in tokens {
        let url = url.clone();
        let (latencies, received, dropped) = (
            Arc::clone(&latencies),
            Arc::clone(&received),
            Arc::clone(&dropped),
        );
        readers.push(std::thread::spawn(move || {
            let agent: ureq::Agent = ureq::Agent::config_builder()
                .timeout_global(Some(Duration::from_secs(SECONDS + 30)))
                .build()
                .into();
            let response = agent
                .get(&url)
                .header("authorization", format!("Bearer {token}"))
                .call()
                .expect("subscribe");
            let mut mine = Vec::new();
            for line in BufReader::new(response.into_body().into_reader()).lines() {
                let Ok(line) = line else { break };
                if let Some(data) = line.strip_prefix("data:") {
                    let value: serde_json::Value =
                        serde_json::from_str(data.trim()).unwrap_or_default();
                    if let Some(sent) = value["sentMs"].as_u64() {
                        mine.push(now_ms().saturating_sub(sent));
                        received.fetch_add(1, Ordering::Relaxed);
                    }
                } else if line.starts_with("event: stream.dropped") {
                    dropped.fetch_add(1, Ordering::Relaxed);
                } else if line.starts_with("event: stream.closed") {
                    break;
                }
            }
            latencies.lock().unwrap().extend(mine);
        }));
    }
    while server.core().events().subscribers() < SUBSCRIBERS {
        std::thread::sleep(Duration::from_millis(10));
    }
    let rss_subscribed = rss_kib();
    let hub = Arc::clone(server.core().events());
    let cpu_before = cpu_s();
    let started = Instant::now();
    let total = RATE * SECONDS;
    let mut rss_peak = rss_subscribed;
    for n in 0..total {
        let due = started + Duration::from_micros(n * 1_000_000 / RATE);
        if let Some(wait) = due.checked_duration_since(Instant::now()) {
            std::thread::sleep(wait);
        }
        hub.publish(
            "message.created",
            Some(Snowflake(demo::OPS)),
            json!({ "messageId": n.to_string(), "text": "x".repeat(200), "sentMs": now_ms() }),
        );
        if n % 500 == 0 {
            rss_peak = rss_peak.max(rss_kib());
        }
    }
    // Let the readers catch up, then end every stream.
    let expected = SUBSCRIBERS * total as usize;
    let deadline = Instant::now() + Duration::from_secs(20);
    let done = || {
        let dropped_share = dropped.load(Ordering::Relaxed) * (total as usize);
        received.load(Ordering::Relaxed) + dropped_share >= expected
    };
    while !done() && Instant::now() < deadline {
        std::thread::sleep(Duration::from_millis(50));
    }
    let cpu = cpu_s() - cpu_before;
    hub.close();
    for reader in readers {
        let _ = reader.join();
    }
    let rss_end = rss_kib();
    let mut latencies = std::mem::take(&mut *latencies.lock().unwrap());
    latencies.sort_unstable();
    let pct = |p: f64| {
        latencies
            .get(((latencies.len() as f64 * p) as usize).min(latencies.len().saturating_sub(1)))
            .copied()
            .unwrap_or(0)
    };
    let result = Round {
        delivered: latencies.len(),
        expected,
        dropped: dropped.load(Ordering::Relaxed),
        p50: pct(0.50),
        p99: pct(0.99),
        max: latencies.last().copied().unwrap_or(0),
        cpu_s: cpu,
        rss: [rss_start, rss_subscribed, rss_peak, rss_end].map(|kib| kib / 1024),
    };
    drop(server);
    result
}

fn main() {
    let rounds: usize = std::env::var("EVENTS_BENCH_ROUNDS")
        .ok()
        .and_then(|v| v.parse().ok())
        .unwrap_or(3);
    let runtime = tokio::runtime::Builder::new_multi_thread()
        .worker_threads(2)
        .enable_all()
        .build()
        .expect("runtime");
    println!(
        "sse fan-out: {SUBSCRIBERS} subscribers, {} message.created events at {RATE}/s per round",
        RATE * SECONDS
    );
    let mut ratios = Vec::new();
    for r in 0..rounds {
        let mut cpu = [0.0; 2];
        for (i, who) in [Who::Operator, Who::Capabilities].into_iter().enumerate() {
            let round = round(&runtime, who);
            cpu[i] = round.cpu_s;
            println!(
                "  round {} {:<12} delivered {} of {} ({:.2}%), dropped as slow {}, latency p50 {} ms p99 {} ms max {} ms, CPU {:.2} s, RSS start/subscribed/peak/end {}/{}/{}/{} MiB",
                r + 1,
                who.name(),
                round.delivered,
                round.expected,
                round.delivered as f64 * 100.0 / round.expected as f64,
                round.dropped,
                round.p50,
                round.p99,
                round.max,
                round.cpu_s,
                round.rss[0],
                round.rss[1],
                round.rss[2],
                round.rss[3],
            );
        }
        ratios.push(cpu[1] / cpu[0].max(0.01));
    }
    ratios.sort_by(f64::total_cmp);
    println!(
        "  CPU capabilities / operator: median {:.2} (min {:.2}, max {:.2})",
        ratios[ratios.len() / 2],
        ratios[0],
        ratios[ratios.len() - 1]
    );
}
