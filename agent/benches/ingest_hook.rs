//! What the token-count warmer adds to the agent's ingest hook (`Runs::arrived`, called on the
//! gateway's thread for every stored message): a bridge with an `openai` agent (each message
//! offered to the warmer, whose thread counts it meanwhile) against one with a command agent
//! (no warmer), in the same run, alternating.
//!
//! `cargo bench -p agent --bench ingest_hook`: 21 rounds of 20,000 plain messages (none
//! triggers a run) handed to each bridge in turn; the median per message of each, their ratio,
//! and what the warmer did (queued, dropped when its queue was full, done).

use std::sync::Arc;
use std::time::{Duration, Instant};

use agent::Bridge;
use entity::Snowflake;
use switchboard_engine::runs::{Arrival, Runs};
use switchboard_testkit::platform::demo;
use switchboard_testkit::testing::{TestServer, DEMO_CONFIG};

const ROUNDS: usize = 21;
const PER_ROUND: usize = 20_000;
/// Distinct stored messages the arrivals name (the warmer reads and counts them).
const STORED: usize = 2_000;

async fn bridge(server: &TestServer, agent: &str) -> Bridge {
    let text = format!("{DEMO_CONFIG}\n[agent]\n{agent}\nstream = \"off\"\n");
    let config = switchboard_config::Config::parse(&text, "bench.toml").expect("config");
    Bridge::new(
        config.agent.clone().expect("[agent]"),
        Arc::clone(server.core()),
        server.url(),
    )
}

fn median(mut samples: Vec<Duration>) -> Duration {
    samples.sort_unstable();
    samples[samples.len() / 2]
}

fn main() {
    let runtime = tokio::runtime::Builder::new_multi_thread()
        .worker_threads(2)
        .enable_all()
        .build()
        .expect("runtime");
    runtime.block_on(async {
        let server = TestServer::start(&DEMO_CONFIG).await.expect("server");
        let texts: Vec<String> = (0..STORED)
            .map(|i| {
                format!(
                    "deploy step {i}: can you check the canary? p95 is {} ms, rolling on",
                    100 + i % 50
                )
            })
            .collect();
        let ids: Vec<Snowflake> = texts
            .iter()
            .map(|text| {
                server
                    .surface()
                    .post(demo::OPS.into(), demo::TOMAS.into(), text)
            })
            .collect();
        let with_warmer = bridge(
            &server,
            "runner = \"openai\"\nbase_url = \"http://127.0.0.1:9/v1\"\nmodel = \"gpt-4o\"",
        )
        .await;
        let without = bridge(&server, "runner = \"command\"\ncommand = [\"true\"]").await;
        let hand = |bridge: &Bridge| {
            let started = Instant::now();
            for i in 0..PER_ROUND {
                let text = &texts[i % STORED];
                bridge.arrived(&Arrival {
                    channel_id: demo::OPS.into(),
                    message_id: ids[i % STORED],
                    author_id: demo::TOMAS.into(),
                    author_name: "Tomas",
                    author_roles: &[],
                    author_is_bot: false,
                    in_guild: true,
                    parent_id: None,
                    content: text,
                    text,
                    replies_to_bot: false,
                    missed: false,
                });
            }
            started.elapsed() / PER_ROUND as u32
        };
        let (mut on, mut off) = (Vec::new(), Vec::new());
        for _ in 0..ROUNDS {
            off.push(hand(&without));
            on.push(hand(&with_warmer));
            // Let the warmer catch up between rounds, as it would between bursts.
            tokio::time::sleep(Duration::from_millis(50)).await;
        }
        let (on, off) = (median(on), median(off));
        println!("Runs::arrived per message, {ROUNDS} rounds of {PER_ROUND}, median:");
        println!(
            "  command agent (no warmer)  {:>8.0} ns",
            off.as_secs_f64() * 1e9
        );
        println!(
            "  openai agent (warmer)      {:>8.0} ns  ×{:.2}",
            on.as_secs_f64() * 1e9,
            on.as_secs_f64() / off.as_secs_f64()
        );
        println!("  warmer: {:?}", with_warmer.warm_stats());
        println!(
            "load average: {}",
            std::fs::read_to_string("/proc/loadavg")
                .unwrap_or_default()
                .trim()
        );
    });
}
