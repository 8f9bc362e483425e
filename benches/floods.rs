//! The two floods an outside red team ran against the release binaries (issue 21), re-run
//! against the real service: `switchboard::build` and `switchboard::serve` with the SQLite
//! store, the fake Discord in-process, loopback only, default limits.
//!
//! * **Refused calls**: client threads post `/v1/batch` bodies of 50 calls of unknown
//!   callables with the operator token for `FLOOD_SECONDS` (default 20). Reported: calls made,
//!   answers by code, the audit rows the store holds afterwards (and the calls their counts
//!   add up to: none may be lost), and how much the store's files grew. The red team's run:
//!   600,000 refused calls in 29 s, no `rate_limited`, 600,001 rows, +84 MB.
//! * **Slowloris**: 20 `GET /health` and 20 operator calls (`surface.sessions.list`), each on
//!   a fresh connection and counted as answered when they answer 200 within 2 s — first with no
//!   attack (the baseline, in the same run), then beside 680 connections that each sent half a
//!   request head, then while the attacker also reopens every connection the server closes.
//!   The red team's run: `/health` failed 8 of 20 times, calls 6 of 20.
//!
//! `cargo bench -p switchboard --bench floods` (a bounded harness, not criterion).

mod support;

use std::io::{Read, Write};
use std::net::{SocketAddr, TcpStream};
use std::sync::atomic::{AtomicBool, AtomicUsize, Ordering};
use std::sync::{Arc, Mutex};
use std::time::{Duration, Instant};

use fake_discord::demo;
use serde_json::{json, Value};
use support::{Running, OPERATOR_TOKEN};
use switchboard_config::Config;

const BATCH: usize = 50;
const CLIENTS: usize = 4;
const HALF_SENT: usize = 680;
const PROBES: usize = 20;
const PROBE_WITHIN: Duration = Duration::from_secs(2);

fn config(fake: &fake_discord::FakeDiscord, store: &std::path::Path) -> Config {
    let text = format!(
        r#"[discord]
allowed_channel_ids = ["{ops}"]
api_base_url = "{base}"

[entity.sessions]
ops = "{ops}"

[toolserver]
bind = "127.0.0.1:0"

[store]
path = "{store}"
"#,
        ops = demo::OPS,
        base = fake.base_url(),
        store = store.display(),
    );
    Config::parse(&text, "floods.toml").expect("the bench config")
}

/// The size of the store's files (the database and its write-ahead log).
fn store_bytes(store: &std::path::Path) -> u64 {
    ["", "-wal", "-shm"]
        .iter()
        .filter_map(|suffix| std::fs::metadata(format!("{}{suffix}", store.display())).ok())
        .map(|meta| meta.len())
        .sum()
}

fn refused_calls(runtime: &tokio::runtime::Runtime, dir: &std::path::Path) {
    let seconds: u64 = std::env::var("FLOOD_SECONDS")
        .ok()
        .and_then(|v| v.parse().ok())
        .unwrap_or(20);
    let fake = support::start_fake(runtime);
    let store = dir.join("floods.db");
    let running = Running::start(runtime, config(&fake, &store), &fake);
    let url = format!("http://{}/v1/batch", running.addr);
    let before = store_bytes(&store);
    let body = json!({
        "calls": (0..BATCH)
            .map(|i| json!({ "tool": format!("no.such.callable.{i}"), "input": {} }))
            .collect::<Vec<_>>(),
        "maxConcurrency": BATCH,
    })
    .to_string();
    let codes: Arc<Mutex<std::collections::BTreeMap<String, u64>>> = Arc::default();
    let started = Instant::now();
    let until = started + Duration::from_secs(seconds);
    let clients: Vec<_> = (0..CLIENTS)
        .map(|_| {
            let (url, body, codes) = (url.clone(), body.clone(), Arc::clone(&codes));
            std::thread::spawn(move || {
                let agent: ureq::Agent = ureq::Agent::config_builder()
                    .http_status_as_error(false)
                    .timeout_global(Some(Duration::from_secs(30)))
                    .build()
                    .into();
                let mut mine = std::collections::BTreeMap::<String, u64>::new();
                while Instant::now() < until {
                    let Ok(mut response) = agent
                        .post(&url)
                        .header("authorization", format!("Bearer {OPERATOR_TOKEN}"))
                        .header("content-type", "application/json")
                        .send(body.as_bytes())
                    else {
                        *mine.entry("transport error".into()).or_default() += 1;
                        continue;
                    };
                    let text = response.body_mut().read_to_string().unwrap_or_default();
                    let value: Value = serde_json::from_str(&text).unwrap_or_default();
                    match value["value"]["results"].as_array() {
                        Some(results) => {
                            for result in results {
                                let code = result["error"]["code"].as_str().unwrap_or("ok");
                                *mine.entry(code.to_owned()).or_default() += 1;
                            }
                        }
                        None => *mine.entry("batch refused".into()).or_default() += 1,
                    }
                }
                let mut all = codes.lock().unwrap();
                for (code, n) in mine {
                    *all.entry(code).or_default() += n;
                }
            })
        })
        .collect();
    for client in clients {
        let _ = client.join();
    }
    let took = started.elapsed();
    // Stopping writes every pending count and commits.
    running.stop(runtime);
    let after = store_bytes(&store);
    // The audit log the service wrote, read back through the store's API.
    let (rows, counted) = refusal_rows(&store);
    let codes = codes.lock().unwrap();
    let calls: u64 = codes.values().sum();
    println!(
        "refused-call flood: {calls} calls of unknown callables in {:.1} s through /v1/batch ({CLIENTS} clients, {BATCH} per batch): {:.0} calls/s",
        took.as_secs_f64(),
        calls as f64 / took.as_secs_f64()
    );
    println!("  answers: {codes:?}");
    println!(
        "  audit rows: {rows} holding {counted} calls ({:.4} rows per refused call); store files {} KiB -> {} KiB (+{} KiB)",
        rows as f64 / calls.max(1) as f64,
        before / 1024,
        after / 1024,
        after.saturating_sub(before) / 1024
    );
    assert_eq!(counted, calls, "every refused call is counted in some row");
}

/// A fresh connection's request, answered 200 within [`PROBE_WITHIN`]: its latency.
fn probe(addr: SocketAddr, request: &[u8]) -> Option<Duration> {
    let started = Instant::now();
    let mut stream = TcpStream::connect_timeout(&addr, PROBE_WITHIN).ok()?;
    stream.set_read_timeout(Some(PROBE_WITHIN)).ok()?;
    stream.write_all(request).ok()?;
    let mut answer = Vec::new();
    let mut chunk = [0u8; 4096];
    while !answer.windows(4).any(|w| w == b"\r\n\r\n") {
        let n = stream.read(&mut chunk).ok()?;
        if n == 0 || started.elapsed() > PROBE_WITHIN {
            return None;
        }
        answer.extend_from_slice(&chunk[..n]);
    }
    let took = started.elapsed();
    (answer.starts_with(b"HTTP/1.1 200") && took <= PROBE_WITHIN).then_some(took)
}

/// `/health` and operator calls, [`PROBES`] of each: (answered, median ms) per kind.
fn probes(addr: SocketAddr) -> [(usize, f64); 2] {
    let health = format!("GET /health HTTP/1.1\r\nHost: {addr}\r\nConnection: close\r\n\r\n");
    let body = r#"{"tool": "surface.sessions.list", "input": {}}"#;
    let call = format!(
        "POST /v1/call HTTP/1.1\r\nHost: {addr}\r\nAuthorization: Bearer {OPERATOR_TOKEN}\r\nContent-Type: application/json\r\nContent-Length: {}\r\nConnection: close\r\n\r\n{body}",
        body.len()
    );
    let mut latencies = [Vec::new(), Vec::new()];
    for _ in 0..PROBES {
        for (i, request) in [&health, &call].iter().enumerate() {
            if let Some(took) = probe(addr, request.as_bytes()) {
                latencies[i].push(took);
            }
        }
    }
    latencies.map(|mut l| {
        l.sort_unstable();
        let median = l
            .get(l.len() / 2)
            .map_or(f64::NAN, |d| d.as_secs_f64() * 1000.0);
        (l.len(), median)
    })
}

fn half_sent(addr: SocketAddr) -> Option<TcpStream> {
    let mut stream = TcpStream::connect_timeout(&addr, Duration::from_secs(2)).ok()?;
    stream
        .write_all(b"POST /v1/call HTTP/1.1\r\nHost: 127.0.0.1\r\nContent-Type: appli")
        .ok()?;
    Some(stream)
}

fn slowloris(runtime: &tokio::runtime::Runtime, dir: &std::path::Path) {
    let fake = support::start_fake(runtime);
    let running = Running::start(runtime, config(&fake, &dir.join("slowloris.db")), &fake);
    let addr = running.addr;
    let report = |what: &str, [(health, health_ms), (calls, calls_ms)]: [(usize, f64); 2]| {
        println!(
            "  {what:<44} /health {health}/{PROBES} (median {health_ms:.1} ms), operator calls {calls}/{PROBES} (median {calls_ms:.1} ms)"
        );
    };
    println!("slowloris: {HALF_SENT} half-sent request heads, default limits (512 connections, 10 s header timeout)");
    report("no attack (baseline)", probes(addr));
    let held: Vec<TcpStream> = (0..HALF_SENT).filter_map(|_| half_sent(addr)).collect();
    let opened = held.len();
    report(&format!("beside {opened} half-sent heads"), probes(addr));
    // The attacker now reopens what the server closes, as fast as it notices.
    let stop = Arc::new(AtomicBool::new(false));
    let reopened = Arc::new(AtomicUsize::new(0));
    let attacker = {
        let (stop, reopened) = (Arc::clone(&stop), Arc::clone(&reopened));
        std::thread::spawn(move || {
            let mut held = held;
            let mut byte = [0u8; 1];
            // Closed by the server: end of file, a reset, or an answer it sent before closing.
            let gone = |stream: &TcpStream, byte: &mut [u8; 1]| match stream.peek(byte) {
                Ok(_) => true,
                Err(error) => error.kind() != std::io::ErrorKind::WouldBlock,
            };
            for stream in &held {
                let _ = stream.set_nonblocking(true);
            }
            while !stop.load(Ordering::Relaxed) {
                for slot in &mut held {
                    if gone(slot, &mut byte) {
                        if let Some(stream) = half_sent(addr) {
                            let _ = stream.set_nonblocking(true);
                            *slot = stream;
                            reopened.fetch_add(1, Ordering::Relaxed);
                        }
                    }
                }
                std::thread::sleep(Duration::from_millis(2));
            }
            held
        })
    };
    std::thread::sleep(Duration::from_millis(500));
    report(
        &format!("beside {opened} heads, reopened as they close"),
        probes(addr),
    );
    stop.store(true, Ordering::Relaxed);
    let held = attacker.join().expect("the attacker");
    println!(
        "  (the attacker reopened {} connections the server had closed)",
        reopened.load(Ordering::Relaxed)
    );
    drop(held);
    running.stop(runtime);
}

fn main() {
    let runtime = tokio::runtime::Builder::new_multi_thread()
        .worker_threads(2)
        .enable_all()
        .build()
        .expect("runtime");
    let dir = std::env::temp_dir().join(format!("switchboard-floods-bench-{}", std::process::id()));
    std::fs::create_dir_all(&dir).expect("temp dir");
    refused_calls(&runtime, &dir);
    slowloris(&runtime, &dir);
    let _ = std::fs::remove_dir_all(&dir);
}

/// How many audit rows the operator's refused calls of unknown callables (tool `-`) left, and
/// how many calls they count.
fn refusal_rows(store: &std::path::Path) -> (u64, u64) {
    use switchboard_store::{AuditStore as _, Backend as _};
    let backend = switchboard_store_sqlite::SqliteBackend::open(
        &store.to_string_lossy(),
        switchboard_store_sqlite::SqliteOptions::default(),
    )
    .expect("open the store");
    let mut filter = switchboard_records::AuditFilter {
        caller: Some("operator".into()),
        tool: Some("-".into()),
        limit: switchboard_records::AuditFilter::MAX_PAGE,
        ..Default::default()
    };
    let (mut rows, mut counted) = (0, 0);
    loop {
        let page = futures_executor::block_on(backend.audit_page(filter.clone()))
            .expect("read the audit log");
        for entry in &page.rows {
            rows += 1;
            counted += entry.row.count;
        }
        match page.next_cursor {
            Some(cursor) => filter.before_id = Some(cursor),
            None => break,
        }
    }
    futures_executor::block_on(backend.close()).expect("close the store");
    (rows, counted)
}
