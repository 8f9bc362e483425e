//! A bounded HTTP/1.1 load harness on loopback for the benchmarks: a fixed number of keep-alive
//! connections each send a fixed number of pre-built requests; throughput is requests / wall
//! time. Hand-written on raw sockets because a client library's own cost would be part of the
//! figure it is meant to exclude.

use std::net::SocketAddr;
use std::sync::Arc;
use std::time::Instant;

use tokio::io::{AsyncReadExt, AsyncWriteExt};

use crate::platform::{demo, RecordingPlatform};
use tokio::net::TcpStream;

/// Rounds of each compared server, alternating (`CALL_BENCH_ROUNDS`, default 3).
pub fn rounds() -> usize {
    std::env::var("CALL_BENCH_ROUNDS")
        .ok()
        .and_then(|r| r.parse().ok())
        .unwrap_or(3)
}

/// A complete `POST` request (head and body), with a Bearer token when given.
pub fn http_post(path: &str, token: Option<&str>, body: &[u8]) -> Arc<Vec<u8>> {
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

/// Sends `request` `count` times on one keep-alive connection, asserting each answer is a 200;
/// returns the last body.
pub async fn hammer(addr: SocketAddr, request: Arc<Vec<u8>>, count: usize) -> Vec<u8> {
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

/// `connections` keep-alive connections each sending `requests_each` requests at once: requests
/// per second over the whole, and the last body one of them saw.
pub async fn throughput(
    addr: SocketAddr,
    request: Arc<Vec<u8>>,
    connections: usize,
    requests_each: usize,
) -> (f64, Vec<u8>) {
    let started = Instant::now();
    let tasks: Vec<_> = (0..connections)
        .map(|_| tokio::spawn(hammer(addr, Arc::clone(&request), requests_each)))
        .collect();
    let mut body = Vec::new();
    for task in tasks {
        body = task.await.expect("client task");
    }
    let total = (connections * requests_each) as f64;
    (total / started.elapsed().as_secs_f64(), body)
}

/// The median of the ratios, with the smallest and largest (ratios must not be empty).
pub fn median_min_max(mut ratios: Vec<f64>) -> (f64, f64, f64) {
    ratios.sort_by(f64::total_cmp);
    (
        ratios[ratios.len() / 2],
        ratios[0],
        ratios[ratios.len() - 1],
    )
}

/// The demo platform with 60 messages in #ops (each with a user and a channel mention): what the
/// `/v1/call` benchmarks list.
pub fn busy_ops_surface() -> Arc<RecordingPlatform> {
    let surface = Arc::new(RecordingPlatform::demo());
    for i in 0..60 {
        surface.post(
            demo::OPS.into(),
            if i % 2 == 0 {
                demo::STANLEY
            } else {
                demo::TOMAS
            }
            .into(),
            &format!(
                "message {i}: deploy step {i} done, <@{}> please check <#{}>",
                demo::STANLEY,
                demo::RELEASE_ROOM
            ),
        );
    }
    surface
}

/// [`DEMO_CONFIG`](super::DEMO_CONFIG) with the concurrency cap and the per-caller quota out of
/// the benchmarks' way.
pub fn bench_config() -> String {
    format!(
        "{}\nmax_concurrent_calls = 1024\n[toolserver.rate_limits]\nper_caller_per_minute = 100000000\nper_caller_burst = 10000000\n",
        super::DEMO_CONFIG
    )
}
