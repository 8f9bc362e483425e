//! An ingest flood through the fake Discord against a slow disk: 100,000 MESSAGE_CREATEs over
//! the loopback websocket into serenity, the ingest and the store, whose SQLite writer takes
//! 40 ms more for every batch than its work. The writer's queue stays within its bound (the
//! gateway thread waits for room instead of the queue growing), memory stays bounded, and every
//! message is stored.

use std::sync::atomic::AtomicU64;
use std::sync::Arc;
use std::time::{Duration, Instant};

use bot::gateway::Ingest;
use bot::service::intents;
use bot::surface::Connection;
use entity::Aliases;
use fake_discord::{demo, FakeDiscord, FakeOptions, RateLimits, SizeLimits, UserMessage, World};
use serenity::all::{ClientBuilder, HttpBuilder};
use switchboard_engine::surface::ConnectionState;
use switchboard_store::{Backend, CacheOptions, Store};
use switchboard_store_sqlite::{SqliteBackend, SqliteOptions};

const MESSAGES: usize = 100_000;
/// Injected messages not yet stored, at most (the fake drops a client that falls further
/// behind, as Discord does).
const WINDOW: usize = 2_000;
/// The writer's queue: small, and the disk slow (below), so that the writer can take at most
/// 128 writes per 40 ms (3,200 a second), less than the gateway delivers even in a debug build.
const CAPACITY: usize = 128;
const DISK_DELAY: Duration = Duration::from_millis(40);
const CHANNELS: [u64; 3] = [demo::OPS, demo::RELEASE_ROOM, demo::INCIDENT_THREAD];
/// Every message is kept (three channels share the 100,000).
const PER_CHANNEL: usize = 40_000;

/// This process's resident memory (VmRSS), in bytes.
fn rss_bytes() -> u64 {
    let status = std::fs::read_to_string("/proc/self/status").expect("/proc/self/status");
    status
        .lines()
        .find_map(|line| line.strip_prefix("VmRSS:"))
        .and_then(|rest| {
            rest.trim()
                .trim_end_matches("kB")
                .trim()
                .parse::<u64>()
                .ok()
        })
        .map(|kb| kb * 1024)
        .expect("VmRSS in /proc/self/status")
}

struct TempDir(std::path::PathBuf);

impl Drop for TempDir {
    fn drop(&mut self) {
        let _ = std::fs::remove_dir_all(&self.0);
    }
}

#[test]
fn a_gateway_flood_against_a_slow_disk_waits_for_room_and_stores_everything() {
    let dir = TempDir(std::env::temp_dir().join(format!("bot-flood-{}", std::process::id())));
    std::fs::create_dir_all(&dir.0).expect("temp dir");
    let path = dir.0.join("flood.db");
    let path = path.to_str().expect("utf-8 temp path").to_owned();
    let backend: Arc<dyn Backend> = Arc::new(
        SqliteBackend::open(
            &path,
            SqliteOptions {
                retention: switchboard_store::Retention {
                    messages_per_channel: PER_CHANNEL,
                    ..Default::default()
                },
                queue_capacity: CAPACITY,
                // A disk that takes 40 ms for every batch on top of its work.
                commit_delay: Some(DISK_DELAY),
            },
        )
        .expect("store opens"),
    );
    let store = Store::open(
        Arc::clone(&backend),
        CacheOptions {
            messages_per_channel: PER_CHANNEL,
        },
    )
    .expect("the cache loads");

    let runtime = tokio::runtime::Builder::new_multi_thread()
        .worker_threads(2)
        .enable_all()
        .build()
        .expect("runtime");
    let (grown, took) = runtime.block_on(async {
        let fake = FakeDiscord::start_with(
            World::demo(),
            "127.0.0.1:0".parse().expect("loopback"),
            FakeOptions {
                // The fake itself keeps little, so what grows is the ingest's side.
                limits: SizeLimits {
                    messages_per_channel: 1_000,
                    ..SizeLimits::default()
                },
                rate_limits: RateLimits::unthrottled(),
                ..FakeOptions::default()
            },
        )
        .await
        .expect("fake starts");
        let connection = Arc::new(Connection::default());
        let http = HttpBuilder::new("flood-token")
            .proxy(fake.base_url())
            .ratelimiter_disabled(true)
            .build();
        let allowlist = switchboard_config::Config::parse(
            "[discord]\nallowed_guild_ids = [\"1000000000000000200\"]\n",
            "flood.toml",
        )
        .map(|config| {
            Arc::new(switchboard_engine::allowlist::Allowlist::new(
                &config.discord,
            ))
        })
        .expect("config");
        let builder = ClientBuilder::new_with_http(http, intents()).raw_event_handler(Ingest::new(
            store.clone(),
            Aliases::new(),
            allowlist,
            Arc::clone(&connection),
            Arc::new(AtomicU64::new(0)),
        ));
        // On its own thread and runtime, as `switchboard run` runs it.
        let (shards, _ended) = bot::service::start_gateway(builder)
            .await
            .expect("client builds");
        let deadline = Instant::now() + Duration::from_secs(30);
        while connection.get() != ConnectionState::Ready {
            assert!(Instant::now() < deadline, "the gateway never became ready");
            tokio::time::sleep(Duration::from_millis(10)).await;
        }

        let before = rss_bytes();
        let mut peak = before;
        let started = Instant::now();
        let deadline = started + Duration::from_secs(600);
        for i in 0..MESSAGES {
            while i >= store.message_count() + WINDOW {
                assert!(
                    Instant::now() < deadline,
                    "only {} of {MESSAGES} stored in time",
                    store.message_count()
                );
                tokio::time::sleep(Duration::from_micros(500)).await;
            }
            fake.post_message(UserMessage {
                channel_id: CHANNELS[i % CHANNELS.len()].into(),
                author_id: demo::STANLEY.into(),
                content: format!("flood message {i:06} with a few words to index"),
                reply_to: None,
                attachments: Vec::new(),
            })
            .expect("the fake takes the message");
            if i % 5_000 == 0 {
                peak = peak.max(rss_bytes());
            }
        }
        while store.message_count() < MESSAGES {
            assert!(
                Instant::now() < deadline,
                "only {} of {MESSAGES} stored in time",
                store.message_count()
            );
            tokio::time::sleep(Duration::from_millis(5)).await;
        }
        let flushing = store.clone();
        tokio::task::spawn_blocking(move || flushing.flush_blocking())
            .await
            .expect("flush task")
            .expect("everything flushes");
        peak = peak.max(rss_bytes());
        let took = started.elapsed();
        shards.shutdown_all().await;
        fake.shutdown().await;
        (peak.saturating_sub(before), took)
    });

    let stats = backend.queue_stats();
    assert!(
        stats.waits > 0,
        "the flood outran the slowed writer, so the gateway thread waited: {stats:?}"
    );
    assert!(
        stats.high_water <= CAPACITY + 8,
        "the queue never held more than its bound: {stats:?}"
    );
    // The cache holds all 100,000 (about 370 bytes each with their text); the queue at most
    // 128 more. Without the bound, the queue alone would hold every message the disk had not
    // reached.
    assert!(
        grown < 250 * 1024 * 1024,
        "RSS grew {} MiB",
        grown / (1024 * 1024)
    );
    store.close().expect("the store closes");
    drop(store);
    drop(backend);
    let reopened = SqliteBackend::open(
        &path,
        SqliteOptions {
            retention: switchboard_store::Retention {
                messages_per_channel: PER_CHANNEL,
                ..Default::default()
            },
            ..SqliteOptions::default()
        },
    )
    .expect("reopens");
    let stored = futures_executor::block_on(reopened.census())
        .expect("counts")
        .messages;
    futures_executor::block_on(reopened.close()).expect("closes");
    assert_eq!(
        stored, MESSAGES as u64,
        "every message is stored, none dropped"
    );
    eprintln!(
        "flood through the fake: {MESSAGES} messages in {took:?}, queue high water {} of {CAPACITY}, {} waits ({:?} waited), RSS +{} MiB",
        stats.high_water,
        stats.waits,
        stats.waited,
        grown / (1024 * 1024)
    );
}
