//! `/v1/call` of `surface.messages.list` (50 cached messages, recording platform over a memory
//! store) over loopback, beside a bare axum handler answering the same bytes: same client, same run.
//!
//! Run: `cargo bench -p switchboard-testkit --bench call`
//!
//! A bounded load harness: a fixed number of keep-alive connections each send a fixed number of
//! requests; throughput is requests / wall time. Loopback only.

use std::sync::Arc;
use std::time::{Duration, Instant};

use axum::routing::post;
use axum::Router;
use serde_json::json;

use switchboard_testkit::testing::load::{
    bench_config, busy_ops_surface, hammer, http_post, median_min_max, rounds, throughput,
};
use switchboard_testkit::testing::TestServer;

/// The allocator the service runs on (`src/main.rs`), so the bench measures what runs; the
/// bare handler runs on it too.
#[global_allocator]
static ALLOCATOR: mimalloc::MiMalloc = mimalloc::MiMalloc;

const CONNECTIONS: usize = 4;
const REQUESTS_PER_CONNECTION: usize = 5_000;
fn main() {
    let runtime = tokio::runtime::Builder::new_multi_thread()
        .enable_all()
        .build()
        .expect("runtime");
    runtime.block_on(async {
        let surface = busy_ops_surface();
        let config = bench_config();
        // The pipeline alone: the audit log's own cost is measured with the store that keeps it.
        let server = TestServer::start_with_audit(
            &config,
            surface,
            Arc::new(switchboard_testkit::testing::NoAudit),
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
            let (bare_rps, bare_body) = throughput(bare_addr, Arc::clone(&bare_request), CONNECTIONS, REQUESTS_PER_CONNECTION).await;
            assert_eq!(bare_body, *answer);
            let (call_rps, call_body) = throughput(server.addr(), Arc::clone(&call_request), CONNECTIONS, REQUESTS_PER_CONNECTION).await;
            assert_eq!(call_body, *answer, "the tool server answers the same bytes every time");
            best_bare = best_bare.max(bare_rps);
            best_call = best_call.max(call_rps);
            ratios.push(call_rps / bare_rps);
        }
        let rounds_run = ratios.len();
        let (median, min, max) = median_min_max(ratios);
        println!("bare axum handler (same bytes): {best_bare:>10.0} req/s (best round)");
        println!("tool server /v1/call:           {best_call:>10.0} req/s (best round)");
        println!(
            "ratio: median {median:.2} of {} rounds (min {:.2}, max {:.2}); best/best {:.2}",
            rounds_run,
            min,
            max,
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
