//! `/v1/call` of `surface.messages.list` (50 cached messages, in-memory surface) over loopback,
//! beside a bare axum handler answering the same bytes: same client, same run.
//!
//! Run: `cargo bench -p toolserver --bench call`
//!
//! A bounded load harness: a fixed number of keep-alive connections each send a fixed number of
//! requests; throughput is requests / wall time. Loopback only.

use std::sync::Arc;
use std::time::{Duration, Instant};

use axum::routing::post;
use axum::Router;
use serde_json::json;
use tokio::io::{AsyncReadExt, AsyncWriteExt};
use tokio::net::TcpStream;
use toolserver::memory::{demo, MemorySurface};
use toolserver::testing::{TestServer, DEMO_CONFIG};

const CONNECTIONS: usize = 4;
const REQUESTS_PER_CONNECTION: usize = 5_000;
/// Rounds of each server, alternating; the best of each is reported (`CALL_BENCH_ROUNDS`).
fn rounds() -> usize {
    std::env::var("CALL_BENCH_ROUNDS")
        .ok()
        .and_then(|r| r.parse().ok())
        .unwrap_or(3)
}

/// Sends `request` `count` times on one keep-alive connection; returns the bytes of the last body.
async fn hammer(addr: std::net::SocketAddr, request: Arc<Vec<u8>>, count: usize) -> Vec<u8> {
    let mut stream = TcpStream::connect(addr).await.expect("connect");
    stream.set_nodelay(true).expect("nodelay");
    let mut buffer = Vec::with_capacity(64 * 1024);
    let mut body = Vec::new();
    for _ in 0..count {
        stream.write_all(&request).await.expect("write");
        buffer.clear();
        let (header_end, length) = loop {
            let mut chunk = [0u8; 16 * 1024];
            let n = stream.read(&mut chunk).await.expect("read");
            assert!(n > 0, "server closed the connection");
            buffer.extend_from_slice(&chunk[..n]);
            if let Some(end) = buffer.windows(4).position(|w| w == b"\r\n\r\n") {
                let head = String::from_utf8_lossy(&buffer[..end]).to_ascii_lowercase();
                assert!(head.starts_with("http/1.1 200"), "{head}");
                let length = head
                    .lines()
                    .find_map(|l| l.strip_prefix("content-length:"))
                    .and_then(|v| v.trim().parse::<usize>().ok())
                    .expect("content-length");
                break (end + 4, length);
            }
        };
        while buffer.len() < header_end + length {
            let mut chunk = [0u8; 16 * 1024];
            let n = stream.read(&mut chunk).await.expect("read body");
            assert!(n > 0, "server closed mid-body");
            buffer.extend_from_slice(&chunk[..n]);
        }
        body.clear();
        body.extend_from_slice(&buffer[header_end..header_end + length]);
    }
    body
}

async fn throughput(addr: std::net::SocketAddr, request: Arc<Vec<u8>>) -> (f64, Vec<u8>) {
    let started = Instant::now();
    let tasks: Vec<_> = (0..CONNECTIONS)
        .map(|_| tokio::spawn(hammer(addr, Arc::clone(&request), REQUESTS_PER_CONNECTION)))
        .collect();
    let mut body = Vec::new();
    for task in tasks {
        body = task.await.expect("client task");
    }
    let total = (CONNECTIONS * REQUESTS_PER_CONNECTION) as f64;
    (total / started.elapsed().as_secs_f64(), body)
}

fn http_post(path: &str, token: Option<&str>, body: &[u8]) -> Arc<Vec<u8>> {
    let mut request = format!(
        "POST {path} HTTP/1.1\r\nhost: 127.0.0.1\r\ncontent-type: application/json\r\ncontent-length: {}\r\n",
        body.len()
    );
    if let Some(token) = token {
        request.push_str(&format!("authorization: Bearer {token}\r\n"));
    }
    request.push_str("\r\n");
    let mut bytes = request.into_bytes();
    bytes.extend_from_slice(body);
    Arc::new(bytes)
}

fn main() {
    let runtime = tokio::runtime::Builder::new_multi_thread()
        .enable_all()
        .build()
        .expect("runtime");
    runtime.block_on(async {
        let surface = Arc::new(MemorySurface::demo());
        for i in 0..60 {
            surface.post(
                demo::OPS.into(),
                if i % 2 == 0 { demo::STANLEY } else { demo::TOMAS }.into(),
                &format!("message {i}: deploy step {i} done, <@{}> please check <#{}>", demo::STANLEY, demo::RELEASE_ROOM),
            );
        }
        let config = format!(
            "{DEMO_CONFIG}\nmax_concurrent_calls = 1024\n[toolserver.rate_limits]\nper_caller_per_minute = 100000000\nper_caller_burst = 10000000\n"
        );
        // The pipeline alone: the audit log's own cost is measured with the store that keeps it.
        let server = TestServer::start_with_ledger(
            &config,
            surface,
            Arc::new(toolserver::governance::NoLedger),
        )
        .await
        .expect("tool server");
        let call_body = serde_json::to_vec(&json!({"tool": "surface.messages.list", "input": {"sessionId": "#ops", "limit": 50}})).unwrap();
        let call_request = http_post("/v1/call", Some(server.operator_token()), &call_body);

        // The exact bytes the tool server answers, served by a bare handler.
        let (_, answer) = throughput_once(server.addr(), Arc::clone(&call_request)).await;
        let answer = Arc::new(answer);
        let bare_answer = Arc::clone(&answer);
        let bare = Router::new().route(
            "/v1/call",
            post(move || {
                let body = Arc::clone(&bare_answer);
                async move { ([("content-type", "application/json")], body.as_ref().clone()) }
            }),
        );
        let listener = tokio::net::TcpListener::bind("127.0.0.1:0").await.expect("bind");
        let bare_addr = listener.local_addr().expect("addr");
        tokio::spawn(async move { axum::serve(listener, bare).await });
        let bare_request = http_post("/v1/call", None, &call_body);

        println!(
            "answer: {} bytes ({} messages); {CONNECTIONS} connections x {REQUESTS_PER_CONNECTION} requests, best of {}",
            answer.len(),
            serde_json::from_slice::<serde_json::Value>(&answer).map(|v| v["value"]["messages"].as_array().map_or(0, Vec::len)).unwrap_or(0),
            rounds()
        );
        let mut best_call: f64 = 0.0;
        let mut best_bare: f64 = 0.0;
        // This machine's speed drifts from minute to minute: each round measures both servers
        // back to back, and the median of the rounds' ratios is the figure to compare.
        let mut ratios = Vec::new();
        for _ in 0..rounds() {
            let (bare_rps, bare_body) = throughput(bare_addr, Arc::clone(&bare_request)).await;
            assert_eq!(bare_body, *answer);
            let (call_rps, call_body) = throughput(server.addr(), Arc::clone(&call_request)).await;
            assert_eq!(call_body, *answer, "the tool server answers the same bytes every time");
            best_bare = best_bare.max(bare_rps);
            best_call = best_call.max(call_rps);
            ratios.push(call_rps / bare_rps);
        }
        ratios.sort_by(f64::total_cmp);
        let median = ratios[ratios.len() / 2];
        println!("bare axum handler (same bytes): {best_bare:>10.0} req/s (best round)");
        println!("tool server /v1/call:           {best_call:>10.0} req/s (best round)");
        println!(
            "ratio: median {median:.2} of {} rounds (min {:.2}, max {:.2}); best/best {:.2}",
            ratios.len(),
            ratios[0],
            ratios[ratios.len() - 1],
            best_call / best_bare
        );
        tokio::time::sleep(Duration::from_millis(10)).await;
    });
}

async fn throughput_once(addr: std::net::SocketAddr, request: Arc<Vec<u8>>) -> (f64, Vec<u8>) {
    let started = Instant::now();
    let body = hammer(addr, request, 1).await;
    (1.0 / started.elapsed().as_secs_f64(), body)
}
