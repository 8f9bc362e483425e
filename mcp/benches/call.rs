//! `tools/call` over MCP (`POST /mcp`) against the same call on `POST /v1/call`: the same
//! server (the API and `/mcp` on one listener, as `switchboard run` serves them), the same
//! client, the same call (`surface.messages.list` of 50 cached messages, recording platform
//! over a memory store).
//!
//! Run: `cargo bench -p switchboard-mcp --bench call` (`MCP_BENCH_ROUNDS`, default 5)
//!
//! A bounded load harness on loopback: a fixed number of keep-alive connections each send a
//! fixed number of requests; throughput is requests / wall time. This machine's speed drifts
//! from minute to minute, so each round measures both endpoints back to back and the median of
//! the rounds' ratios is the figure to compare. The target: MCP within 1.5× of HTTP, i.e.
//! MCP's time per call at most 1.5 times `/v1/call`'s.

use std::net::SocketAddr;
use std::sync::Arc;
use std::time::Duration;

use serde_json::{json, Value};
use switchboard_testkit::platform::{demo, RecordingPlatform};
use switchboard_testkit::testing::{load, TestServer, DEMO_CONFIG};

const CONNECTIONS: usize = 4;
const REQUESTS_PER_CONNECTION: usize = 3_000;

fn rounds() -> usize {
    std::env::var("MCP_BENCH_ROUNDS")
        .ok()
        .and_then(|r| r.parse().ok())
        .filter(|r| *r > 0)
        .unwrap_or(5)
}

/// This process's CPU time so far (user + system), from `/proc/self/stat`; zero where there is
/// none. The client runs in this process too, so it counts the client's share as well.
fn cpu_time() -> Duration {
    let Ok(stat) = std::fs::read_to_string("/proc/self/stat") else {
        return Duration::ZERO;
    };
    // After the command name in parentheses: field 14 (utime) and 15 (stime), in clock ticks.
    let fields: Vec<&str> = stat
        .rsplit_once(')')
        .map_or("", |(_, rest)| rest)
        .split_whitespace()
        .collect();
    let ticks = |i: usize| {
        fields
            .get(i)
            .and_then(|f| f.parse::<u64>().ok())
            .unwrap_or(0)
    };
    // Linux's USER_HZ is 100 on every architecture this runs on.
    Duration::from_millis((ticks(11) + ticks(12)) * 10)
}

/// Requests per second, the CPU time per request (µs), and the last body.
async fn throughput(addr: SocketAddr, request: &Arc<Vec<u8>>) -> (f64, f64, Vec<u8>) {
    let cpu = cpu_time();
    let (rps, body) = load::throughput(
        addr,
        Arc::clone(request),
        CONNECTIONS,
        REQUESTS_PER_CONNECTION,
    )
    .await;
    let total = (CONNECTIONS * REQUESTS_PER_CONNECTION) as f64;
    let cpu_us = (cpu_time() - cpu).as_secs_f64() * 1e6 / total;
    (rps, cpu_us, body)
}

fn http_post(path: &str, token: &str, extra_headers: &str, body: &[u8]) -> Arc<Vec<u8>> {
    let mut bytes = format!(
        "POST {path} HTTP/1.1\r\nhost: 127.0.0.1\r\ncontent-type: application/json\r\nauthorization: Bearer {token}\r\n{extra_headers}content-length: {}\r\n\r\n",
        body.len()
    )
    .into_bytes();
    bytes.extend_from_slice(body);
    Arc::new(bytes)
}

fn main() {
    let runtime = tokio::runtime::Builder::new_multi_thread()
        .enable_all()
        .build()
        .expect("runtime");
    runtime.block_on(async {
        let surface = Arc::new(RecordingPlatform::demo());
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
        // The pipeline alone, as in toolserver's call bench.
        let server = TestServer::start_with_audit(&config, surface, Arc::new(switchboard_testkit::testing::NoAudit))
            .await
            .expect("tool server");
        // The API and /mcp on one listener over the test server's core, as `switchboard run` does.
        let core = Arc::clone(server.core());
        let listener = tokio::net::TcpListener::bind("127.0.0.1:0").await.expect("bind");
        let addr = listener.local_addr().expect("addr");
        let mcp = switchboard_mcp::http::router(
            Arc::clone(&core),
            switchboard_mcp::http::Options { idle_timeout: Duration::from_secs(60) },
        );
        tokio::spawn(switchboard_http::serve_with(core, mcp, listener, std::future::pending()));

        let token = server.operator_token();
        let input = json!({"sessionId": "#ops", "limit": 50});
        let call_request = http_post(
            "/v1/call",
            token,
            "",
            &serde_json::to_vec(&json!({"tool": "surface.messages.list", "input": input})).unwrap(),
        );
        let mcp_request = http_post(
            "/mcp",
            token,
            "accept: application/json, text/event-stream\r\nmcp-protocol-version: 2025-06-18\r\n",
            &serde_json::to_vec(&json!({
                "jsonrpc": "2.0", "id": 1, "method": "tools/call",
                "params": {"name": "surface.messages.list", "arguments": input},
            }))
            .unwrap(),
        );

        // Both answer the same value.
        let http_answer: Value = serde_json::from_slice(&load::hammer(addr, Arc::clone(&call_request), 1).await).unwrap();
        let mcp_answer: Value = serde_json::from_slice(&load::hammer(addr, Arc::clone(&mcp_request), 1).await).unwrap();
        assert_eq!(mcp_answer["result"]["isError"], false, "{mcp_answer}");
        assert_eq!(mcp_answer["result"]["structuredContent"], http_answer["value"], "the same answer");
        let messages = http_answer["value"]["messages"].as_array().map_or(0, Vec::len);
        println!(
            "{messages} messages; {CONNECTIONS} connections x {REQUESTS_PER_CONNECTION} requests, {} alternating rounds",
            rounds()
        );

        let mut http_best: f64 = 0.0;
        let mut mcp_best: f64 = 0.0;
        let mut slowdowns = Vec::new();
        let mut cpu_ratios = Vec::new();
        let mut sizes = (0, 0);
        for _ in 0..rounds() {
            let (http_rps, http_cpu, http_body) = throughput(addr, &call_request).await;
            let (mcp_rps, mcp_cpu, mcp_body) = throughput(addr, &mcp_request).await;
            sizes = (http_body.len(), mcp_body.len());
            http_best = http_best.max(http_rps);
            mcp_best = mcp_best.max(mcp_rps);
            // Time per MCP call over time per HTTP call.
            slowdowns.push(http_rps / mcp_rps);
            cpu_ratios.push(mcp_cpu / http_cpu);
            println!(
                "  round: /v1/call {http_rps:>8.0} req/s {http_cpu:>6.0} µs CPU/call, /mcp {mcp_rps:>8.0} req/s {mcp_cpu:>6.0} µs CPU/call; MCP/HTTP time {:.2}, CPU {:.2}",
                http_rps / mcp_rps,
                mcp_cpu / http_cpu
            );
        }
        slowdowns.sort_by(f64::total_cmp);
        cpu_ratios.sort_by(f64::total_cmp);
        let median = slowdowns[slowdowns.len() / 2];
        println!("answer sizes: /v1/call {} bytes, /mcp {} bytes", sizes.0, sizes.1);
        println!("POST /v1/call:       {http_best:>10.0} req/s (best round)");
        println!("POST /mcp tools/call: {mcp_best:>10.0} req/s (best round)");
        println!(
            "MCP time per call / HTTP time per call: median {median:.2} of {} rounds (min {:.2}, max {:.2}); target <= 1.5",
            slowdowns.len(),
            slowdowns[0],
            slowdowns[slowdowns.len() - 1],
        );
        println!(
            "MCP CPU per call / HTTP CPU per call (client included): median {:.2} (min {:.2}, max {:.2})",
            cpu_ratios[cpu_ratios.len() / 2],
            cpu_ratios[0],
            cpu_ratios[cpu_ratios.len() - 1],
        );
    });
}
