//! Backfill throughput: messages posted while the gateway was away, fetched from fake-discord
//! over loopback REST and stored (canonical, durable), beside what the fake's rate-limit bucket
//! for the listing route allows.
//!
//! Run: `cargo bench -p bot --bench backfill` (`BACKFILL_BENCH_MESSAGES=n` changes the count,
//! split over two channels; `BACKFILL_BENCH_ROUNDS=n` the rounds).
//!
//! Bounded: a fixed number of messages, loopback only; each round is a fresh store and a READY
//! applied to the ingest (the gateway's socket plays no part in a backfill), and the clock
//! stops when `/health` would say ready and the store has flushed.

use std::sync::atomic::AtomicU64;
use std::sync::Arc;
use std::time::{Duration, Instant};

use bot::backfill::BackfillOptions;
use bot::gateway::Ingest;
use bot::rest::DiscordRest;
use bot::surface::Connection;
use entity::Snowflake;
use entity::{AliasKind, Aliases};
use fake_discord::{demo, FakeDiscord, UserMessage, World};
use serde_json::json;
use serenity::model::event::{Event, GatewayEvent};
use switchboard_records::{Session as StoredSession, SessionKind};
mod support;
use support::sqlite_store;
use switchboard_engine::surface::ConnectionState;

fn env_usize(name: &str, default: usize) -> usize {
    std::env::var(name)
        .ok()
        .and_then(|v| v.parse().ok())
        .unwrap_or(default)
}

fn ready() -> Event {
    let frame = json!({"op": 0, "s": 1, "t": "READY", "d": {
        "v": 10, "user": {"id": demo::BOT.to_string(), "username": "switchboard", "discriminator": "0", "avatar": null, "bot": true},
        "guilds": [], "session_id": "bench", "resume_gateway_url": "ws://127.0.0.1:1",
        "application": {"id": demo::BOT.to_string(), "flags": 0}}})
    .to_string();
    match serde_json::from_str::<GatewayEvent>(&frame).expect("READY parses") {
        GatewayEvent::Dispatch(_, event) => event,
        other => panic!("not a dispatch: {other:?}"),
    }
}

fn content(i: usize) -> String {
    format!(
        "deploy step {i}: <@{}> can you check the canary in <#{}>? p95 is {} ms, rolling on",
        demo::STANLEY,
        demo::RELEASE_ROOM,
        100 + i % 50
    )
}

fn main() {
    let messages = env_usize("BACKFILL_BENCH_MESSAGES", 20_000);
    let rounds = env_usize("BACKFILL_BENCH_ROUNDS", 3);
    let runtime = tokio::runtime::Builder::new_multi_thread()
        .enable_all()
        .build()
        .expect("runtime");
    runtime.block_on(async {
        let fake = FakeDiscord::start(World::demo()).await.expect("fake starts");
        let channels = [demo::OPS, demo::RELEASE_ROOM];
        for i in 0..messages {
            fake.post_message(UserMessage {
                channel_id: channels[i % channels.len()].into(),
                author_id: demo::STANLEY.into(),
                content: content(i),
                ..Default::default()
            })
            .expect("fake accepts the message");
        }
        // What the fake's bucket for the listing route allows, from its own headers.
        let probe = reqwest::Client::new()
            .get(format!(
                "{}/api/v10/channels/{}/messages?limit=1",
                fake.base_url(),
                demo::OPS
            ))
            .header("authorization", "Bot bench")
            .send()
            .await
            .expect("probe");
        let limit: f64 = probe
            .headers()
            .get("x-ratelimit-limit")
            .and_then(|v| v.to_str().ok())
            .and_then(|v| v.parse().ok())
            .expect("the fake reports its bucket's limit");
        // fake-discord's buckets refill every second (`rest::ratelimit::WINDOW_MS`).
        let allowed = limit * 100.0;
        println!(
            "{messages} messages over {} channels; the fake's listing bucket: {limit} requests/s = {allowed:.0} messages/s at 100 per page",
            channels.len()
        );
        let mut rates = Vec::new();
        for round in 1..=rounds {
            // Each round's client is new and cannot know the requests made before it (the probe,
            // the last round), which the fake's global limit still counts for a second: start
            // each round as a freshly started process would, with that second behind it.
            tokio::time::sleep(Duration::from_millis(1_100)).await;
            fake.clear_requests();
            let dir = std::env::temp_dir().join(format!(
                "switchboard-backfill-bench-{}-{round}",
                std::process::id()
            ));
            std::fs::create_dir_all(&dir).expect("temp dir");
            let path = dir.join("bench.db");
            let store = sqlite_store(path.to_str().expect("utf-8 path"), messages);
            for (id, name) in [(demo::OPS, "ops"), (demo::RELEASE_ROOM, "release-room")] {
                store.upsert_session(StoredSession {
                    id: Snowflake(id),
                    guild_id: Some(Snowflake(demo::GUILD)),
                    parent_id: None,
                    kind: SessionKind::Channel,
                    name: name.into(),
                });
            }
            let aliases = Aliases::new()
                .with(AliasKind::User, "Stanley", demo::STANLEY)
                .and_then(|a| a.with(AliasKind::Session, "release-room", demo::RELEASE_ROOM))
                .expect("aliases");
            let allowlist = switchboard_config::Config::parse(
                "[discord]\nallowed_guild_ids = [\"1000000000000000200\"]\n",
                "bench.toml",
            )
            .map(|config| Arc::new(switchboard_engine::allowlist::Allowlist::new(&config.discord)))
            .expect("bench config");
            let connection = Arc::new(Connection::default());
            let ingest = Ingest::new(
                store.clone(),
                aliases,
                allowlist,
                Arc::clone(&connection),
                Arc::new(AtomicU64::new(demo::BOT)),
            )
            .with_backfill(
                DiscordRest::new(&fake.base_url(), "bench").expect("rest client"),
                BackfillOptions {
                    max_messages: messages,
                    max_age: Duration::from_secs(3600),
                },
            );
            let started = Instant::now();
            ingest.apply(&ready());
            let deadline = Instant::now() + Duration::from_secs(300);
            while connection.get() != ConnectionState::Ready {
                assert!(Instant::now() < deadline, "the backfill never caught up");
                tokio::time::sleep(Duration::from_millis(1)).await;
            }
            let flushing = store.clone();
            tokio::task::spawn_blocking(move || flushing.flush_blocking())
                .await
                .expect("flush task")
                .expect("flush");
            let elapsed = started.elapsed();
            let report = ingest.last_backfill().expect("a report");
            assert_eq!(report.stored, messages, "{report:?}");
            assert_eq!(store.message_count(), messages);
            let stored = store.messages(Snowflake(demo::OPS), 1, None, None);
            assert!(stored[0].text.contains("@Stanley"), "canonical text: {}", stored[0].text);
            let refused = fake.requests().iter().filter(|r| r.status == 429).count();
            let rate = messages as f64 / elapsed.as_secs_f64();
            println!(
                "round {round}: {rate:>8.0} messages/s ({:.2} s, {} requests, {refused} answered 429): {:.2} of the bucket's {allowed:.0}",
                elapsed.as_secs_f64(),
                report.requests,
                rate / allowed
            );
            assert_eq!(refused, 0, "the backfill ran into the rate limit");
            rates.push(rate);
            let _ = store.close();
            let _ = std::fs::remove_dir_all(&dir);
        }
        rates.sort_by(f64::total_cmp);
        let median = rates[rates.len() / 2];
        println!(
            "median: {median:.0} messages/s = {:.2} of what the bucket allows (target >= 0.80, zero 429s)",
            median / allowed
        );
        fake.shutdown().await;
    });
}
