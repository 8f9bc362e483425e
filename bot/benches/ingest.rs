//! Gateway ingest: MESSAGE_CREATE dispatches from fake-discord through serenity's gateway client
//! into the store (canonicalized and durable), beside serde alone parsing the same payloads.
//!
//! Run: `cargo bench -p bot --bench ingest`
//!
//! Bounded: a fixed number of messages, injected in windows so the fake's per-connection queue
//! never overflows (a slow client would be dropped, as Discord does), loopback only.

use std::sync::atomic::AtomicU64;
use std::sync::Arc;
use std::time::{Duration, Instant};

use bot::gateway::Ingest;
use bot::service::intents;
use bot::surface::Connection;
use entity::{AliasKind, Aliases, Snowflake};
use fake_discord::{demo, FakeDiscord, UserMessage, World};
use serenity::all::{ClientBuilder, HttpBuilder};
mod support;
use support::sqlite_store;
use switchboard_engine::surface::ConnectionState;

const MESSAGES: usize = 50_000;
/// Injected messages not yet stored, at most.
const WINDOW: usize = 2_000;

fn content(i: usize) -> String {
    format!(
        "deploy step {i}: <@{}> can you check the canary in <#{}>? p95 is {} ms, rolling on",
        demo::STANLEY,
        demo::RELEASE_ROOM,
        100 + i % 50
    )
}

fn main() {
    let runtime = tokio::runtime::Builder::new_multi_thread()
        .enable_all()
        .build()
        .expect("runtime");
    runtime.block_on(async {
        let fake = FakeDiscord::start(World::demo()).await.expect("fake starts");
        let dir = std::env::temp_dir().join(format!("switchboard-ingest-bench-{}", std::process::id()));
        std::fs::create_dir_all(&dir).expect("temp dir");
        let path = dir.join("bench.db");
        let store = sqlite_store(path.to_str().expect("utf-8 path"), MESSAGES);
        let aliases = Aliases::new()
            .with(AliasKind::User, "Stanley", demo::STANLEY)
            .and_then(|a| a.with(AliasKind::Session, "release-room", demo::RELEASE_ROOM))
            .expect("aliases");
        let connection = Arc::new(Connection::default());
        let http = HttpBuilder::new("bench-token")
            .proxy(fake.base_url())
            .ratelimiter_disabled(true)
            .build();
        // On its own thread and runtime, exactly as `switchboard run` runs it.
        let allowlist = switchboard_config::Config::parse(
            "[discord]\nallowed_guild_ids = [\"1000000000000000200\"]\n",
            "bench.toml",
        )
        .map(|config| Arc::new(switchboard_engine::allowlist::Allowlist::new(&config.discord)))
        .expect("bench config");
        let builder = ClientBuilder::new_with_http(http, intents()).raw_event_handler(Ingest::new(
            store.clone(),
            aliases,
            allowlist,
            Arc::clone(&connection),
            Arc::new(AtomicU64::new(0)),
        ));
        let (shards, _ended) = bot::service::start_gateway(builder).await.expect("client builds");
        let deadline = Instant::now() + Duration::from_secs(10);
        while connection.get() != ConnectionState::Ready {
            assert!(Instant::now() < deadline, "gateway never became ready");
            tokio::time::sleep(Duration::from_millis(10)).await;
        }
        tokio::time::sleep(Duration::from_millis(200)).await;

        let channels = [demo::OPS, demo::RELEASE_ROOM, demo::INCIDENT_THREAD];
        let mut frames = Vec::with_capacity(MESSAGES);
        let started = Instant::now();
        for i in 0..MESSAGES {
            while i >= store.message_count() + WINDOW {
                tokio::time::sleep(Duration::from_micros(200)).await;
            }
            let message = fake
                .post_message(UserMessage {
                    channel_id: channels[i % channels.len()].into(),
                    author_id: demo::STANLEY.into(),
                    content: content(i),
                    reply_to: None,
                    attachments: Vec::new(),
                })
                .expect("fake accepts the message");
            frames.push(format!(
                r#"{{"op":0,"s":{},"t":"MESSAGE_CREATE","d":{message}}}"#,
                i + 1
            ));
        }
        let deadline = Instant::now() + Duration::from_secs(120);
        while store.message_count() < MESSAGES {
            assert!(Instant::now() < deadline, "only {} of {MESSAGES} stored", store.message_count());
            tokio::time::sleep(Duration::from_millis(1)).await;
        }
        let flush_store = store.clone();
        tokio::task::spawn_blocking(move || flush_store.flush_blocking())
            .await
            .expect("flush task")
            .expect("flush");
        let ingest = started.elapsed();
        let stored = store
            .message(Snowflake(demo::OPS), store.messages(Snowflake(demo::OPS), 1, None, None)[0].id)
            .expect("a stored message");
        assert!(stored.text.contains("@Stanley") && stored.text.contains("#release-room"), "canonical text: {}", stored.text);

        // The ceiling: serde parsing the same gateway frames into serenity's event type.
        let parse_started = Instant::now();
        for frame in &frames {
            let event: serenity::model::event::GatewayEvent =
                serde_json::from_str(frame).expect("frame parses");
            std::hint::black_box(event);
        }
        let parse = parse_started.elapsed();

        let ingest_rate = MESSAGES as f64 / ingest.as_secs_f64();
        let parse_rate = MESSAGES as f64 / parse.as_secs_f64();
        println!("messages: {MESSAGES}, avg frame {} bytes", frames.iter().map(String::len).sum::<usize>() / frames.len());
        println!("gateway -> store (canonical, flushed to SQLite): {ingest_rate:>10.0} events/s ({:.2} s)", ingest.as_secs_f64());
        println!("serde_json -> serenity GatewayEvent only:        {parse_rate:>10.0} events/s");
        println!("ratio: {:.2} of the parse-only ceiling (target: >= 20,000 events/s)", ingest_rate / parse_rate);
        shards.shutdown_all().await;
        let _ = store.close();
        fake.shutdown().await;
        let _ = std::fs::remove_dir_all(&dir);
    });
}
