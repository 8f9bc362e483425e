//! SSE fan-out: 100 subscribers on `GET /v1/events` over loopback while events are published
//! at 1,000 a second for a few seconds. Reports what each subscriber received, the delivery
//! latency (publish to read, from the event's own time), and the process's resident memory
//! before, during and after — which must stay bounded whatever the subscribers do.
//!
//! `cargo bench -p toolserver --bench events` (a bounded harness, not criterion: it measures
//! a rate over time, not one operation).

use std::io::{BufRead, BufReader};
use std::sync::atomic::{AtomicUsize, Ordering};
use std::sync::{Arc, Mutex};
use std::time::{Duration, Instant};

use serde_json::json;
use toolserver::testing::{TestServer, DEMO_CONFIG};

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

fn now_ms() -> u64 {
    std::time::SystemTime::now()
        .duration_since(std::time::UNIX_EPOCH)
        .map_or(0, |d| d.as_millis() as u64)
}

fn main() {
    let runtime = tokio::runtime::Builder::new_multi_thread()
        .worker_threads(2)
        .enable_all()
        .build()
        .expect("runtime");
    let server = runtime
        .block_on(TestServer::start(&DEMO_CONFIG))
        .expect("server");
    let url = format!("{}/v1/events", server.url());
    let token = server.operator_token().to_owned();
    let latencies = Arc::new(Mutex::new(Vec::with_capacity(
        SUBSCRIBERS * (RATE * SECONDS) as usize,
    )));
    let received = Arc::new(AtomicUsize::new(0));
    let dropped = Arc::new(AtomicUsize::new(0));
    let rss_start = rss_kib();
    let mut readers = Vec::new();
    for _ in 0..SUBSCRIBERS {
        let (url, token) = (url.clone(), token.clone());
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
    let started = Instant::now();
    let total = RATE * SECONDS;
    let mut rss_peak = rss_subscribed;
    for n in 0..total {
        let due = started + Duration::from_micros(n * 1_000_000 / RATE);
        if let Some(wait) = due.checked_duration_since(Instant::now()) {
            std::thread::sleep(wait);
        }
        hub.publish(
            "gateway.state",
            None,
            json!({ "state": "ready", "n": n, "sentMs": now_ms(), "pad": "x".repeat(200) }),
        );
        if n % 500 == 0 {
            rss_peak = rss_peak.max(rss_kib());
        }
    }
    let published_in = started.elapsed();
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
    println!(
        "sse fan-out: {SUBSCRIBERS} subscribers, {total} events at {RATE}/s (published in {:.2} s)",
        published_in.as_secs_f64()
    );
    println!(
        "  delivered {} of {expected} ({:.2}%), subscribers dropped as slow: {}",
        latencies.len(),
        latencies.len() as f64 * 100.0 / expected as f64,
        dropped.load(Ordering::Relaxed)
    );
    println!(
        "  latency publish->read: p50 {} ms, p99 {} ms, max {} ms",
        pct(0.50),
        pct(0.99),
        latencies.last().copied().unwrap_or(0)
    );
    println!(
        "  RSS (whole process, readers included): start {} MiB, subscribed {} MiB, peak {} MiB, end {} MiB",
        rss_start / 1024,
        rss_subscribed / 1024,
        rss_peak / 1024,
        rss_end / 1024
    );
    drop(server);
}
