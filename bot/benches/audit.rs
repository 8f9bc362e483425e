//! The audit log's cost on `/v1/call`: the same tool server and call (`surface.messages.list`,
//! 50 cached messages, recording platform over a memory store) with no ledger, and with the
//! SQLite store keeping an audit row per call, alternating rounds on loopback. Target: with the audit log ≥ 0.9× of
//! without.
//!
//! Run: `CALL_BENCH_ROUNDS=9 cargo bench -p bot --bench audit`

use std::sync::Arc;

use serde_json::json;
use switchboard_store::Backend as _;
use switchboard_testkit::testing::load::{
    bench_config, busy_ops_surface, http_post, median_min_max, rounds, throughput,
};
use switchboard_testkit::testing::NoAudit;
use switchboard_testkit::testing::TestServer;
mod support;
use support::cpu_time;

const CONNECTIONS: usize = 4;
const REQUESTS_PER_CONNECTION: usize = 5_000;

fn main() {
    let dir = std::env::temp_dir().join(format!("switchboard-audit-bench-{}", std::process::id()));
    std::fs::create_dir_all(&dir).expect("temp dir");
    let db = dir.join("store.db");
    let db = db.to_str().expect("utf-8 temp path").to_owned();
    let store: Arc<dyn switchboard_store::Backend> = Arc::new(
        switchboard_store_sqlite::SqliteBackend::open(&db, Default::default()).expect("store"),
    );

    let runtime = tokio::runtime::Builder::new_multi_thread()
        .enable_all()
        .build()
        .expect("runtime");
    let calls = runtime.block_on(async {
        let config = bench_config();
        let without = TestServer::start_with_audit(&config, busy_ops_surface(), Arc::new(NoAudit))
            .await
            .expect("tool server without a ledger");
        let with = TestServer::start_with_audit(&config, busy_ops_surface(), store.clone())
            .await
            .expect("tool server with the store's ledger");
        let body = serde_json::to_vec(
            &json!({"tool": "surface.messages.list", "input": {"sessionId": "#ops", "limit": 50}}),
        )
        .unwrap();
        let request_without = http_post("/v1/call", Some(without.operator_token()), &body);
        let request_with = http_post("/v1/call", Some(with.operator_token()), &body);

        println!(
            "{CONNECTIONS} connections x {REQUESTS_PER_CONNECTION} requests, {} alternating rounds",
            rounds()
        );
        let mut ratios = Vec::new();
        let mut cpu_ratios = Vec::new();
        let (mut best_without, mut best_with) = (0f64, 0f64);
        let calls_per_round = (CONNECTIONS * REQUESTS_PER_CONNECTION) as f64;
        for _ in 0..rounds() {
            let cpu_started = cpu_time();
            let (rps_without, answer_without) = throughput(
                without.addr(),
                Arc::clone(&request_without),
                CONNECTIONS,
                REQUESTS_PER_CONNECTION,
            )
            .await;
            let cpu_without = cpu_time() - cpu_started;
            let cpu_started = cpu_time();
            let (rps_with, answer_with) = throughput(
                with.addr(),
                Arc::clone(&request_with),
                CONNECTIONS,
                REQUESTS_PER_CONNECTION,
            )
            .await;
            // The writer commits what the round queued before the next round starts: its CPU
            // is the round's.
            futures_executor::block_on(store.flush()).expect("the round's rows flush");
            let cpu_with = cpu_time() - cpu_started;
            println!(
                "round: {rps_without:>8.0} / {rps_with:>8.0} req/s; CPU per call {:.1} / {:.1} µs",
                cpu_without.as_secs_f64() * 1e6 / calls_per_round,
                cpu_with.as_secs_f64() * 1e6 / calls_per_round
            );
            cpu_ratios.push(cpu_without.as_secs_f64() / cpu_with.as_secs_f64());
            assert_eq!(answer_with, answer_without, "both servers answer the same bytes");
            best_without = best_without.max(rps_without);
            best_with = best_with.max(rps_with);
            ratios.push(rps_with / rps_without);
        }
        let rounds_run = ratios.len();
        let (median, min, max) = median_min_max(ratios);
        let (cpu_median, cpu_min, cpu_max) = median_min_max(cpu_ratios);
        println!("/v1/call, no audit log:        {best_without:>10.0} req/s (best round)");
        println!("/v1/call, audit log in SQLite: {best_with:>10.0} req/s (best round)");
        println!(
            "ratio with/without: median {median:.2} of {rounds_run} rounds (min {min:.2}, max {max:.2})"
        );
        println!(
            "CPU per call, without/with: median {cpu_median:.2} (min {cpu_min:.2}, max {cpu_max:.2}): the throughput ratio a machine with nothing else to run would show"
        );
        rounds_run * CONNECTIONS * REQUESTS_PER_CONNECTION
    });
    futures_executor::block_on(store.close()).expect("store flushes and closes");
    drop(store);
    let reopened =
        switchboard_store_sqlite::SqliteBackend::open(&db, Default::default()).expect("reopen");
    let rows = futures_executor::block_on(reopened.census())
        .expect("count audit rows")
        .audit;
    futures_executor::block_on(reopened.close()).expect("close");
    assert!(
        rows as usize >= calls,
        "every call has its audit row: {rows} rows for {calls} calls"
    );
    println!("audit rows written: {rows} (for {calls} measured calls)");
    let _ = std::fs::remove_dir_all(&dir);
}
