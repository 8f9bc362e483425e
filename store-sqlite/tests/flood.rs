//! An ingest flood against a slow disk: the writer's queue stays within its bound (writers wait
//! for room instead of the queue growing), memory stays bounded, and every message is stored.

use std::sync::Arc;
use std::time::Duration;

use switchboard_records::{Message, Snowflake};
use switchboard_store::{Backend, CacheOptions, Store};
use switchboard_store_sqlite::{SqliteBackend, SqliteOptions};

mod support;
use support::{rss_bytes, TempDir};

const MESSAGES: u64 = 100_000;
const CHANNELS: u64 = 100;
const CAPACITY: usize = 2_000;

fn message(n: u64) -> Message {
    Message {
        id: Snowflake(1_300_000_000_000_000_000 + n),
        channel_id: Snowflake(1_100_000_000_000_000_000 + n % CHANNELS),
        author_id: Snowflake(1_200_000_000_000_000_001),
        author_is_bot: false,
        content: format!("flood message {n:06} with a few words to index"),
        text: format!("flood message {n:06} with a few words to index"),
        timestamp: "2026-11-22T12:00:00.000000+00:00".into(),
        edited_timestamp: None,
        reply_to: None,
        attachments: Vec::new(),
        reactions: Vec::new(),
    }
}

#[test]
fn a_flood_against_a_slow_disk_waits_for_room_and_stores_everything() {
    let dir = TempDir::new("flood");
    let backend: Arc<dyn Backend> = Arc::new(
        SqliteBackend::open(
            &dir.db(),
            SqliteOptions {
                retention: switchboard_store::Retention {
                    messages_per_channel: 1_000,
                    ..Default::default()
                },
                queue_capacity: CAPACITY,
                // A disk that takes 5 ms for every batch on top of its work.
                commit_delay: Some(Duration::from_millis(5)),
            },
        )
        .unwrap(),
    );
    let store = Store::open(
        Arc::clone(&backend),
        CacheOptions {
            messages_per_channel: 1_000,
        },
    )
    .unwrap();
    let before = rss_bytes();
    let mut peak_rss = before;
    for n in 0..MESSAGES {
        assert!(store.insert_message(message(n)));
        if n % 5_000 == 0 {
            peak_rss = peak_rss.max(rss_bytes());
        }
    }
    store.flush_blocking().unwrap();
    peak_rss = peak_rss.max(rss_bytes());
    let stats = backend.queue_stats();
    assert!(
        stats.waits > 0,
        "the flood outran the slowed writer, so writers waited: {stats:?}"
    );
    assert!(
        stats.high_water <= CAPACITY + 8,
        "the queue never held more than its bound: {stats:?}"
    );
    // The cache holds all 100,000 (1,000 per channel); the queue at most 2,000 more. Without a
    // bound the queue alone would hold every message the disk had not reached.
    let grown = peak_rss.saturating_sub(before);
    assert!(
        grown < 200 * 1024 * 1024,
        "RSS grew {} MiB",
        grown / (1024 * 1024)
    );
    store.close().unwrap();

    let conn = rusqlite::Connection::open(dir.db()).unwrap();
    let stored: i64 = conn
        .query_row(
            "SELECT COUNT(*) FROM messages WHERE deleted = 0",
            [],
            |row| row.get(0),
        )
        .unwrap();
    assert_eq!(stored, MESSAGES as i64, "nothing was dropped");
    let indexed: i64 = conn
        .query_row(
            "SELECT COUNT(*) FROM messages_fts WHERE messages_fts MATCH 'flood'",
            [],
            |row| row.get(0),
        )
        .unwrap();
    assert_eq!(indexed, MESSAGES as i64, "and every one is searchable");
    eprintln!(
        "flood: {MESSAGES} messages, queue high water {} of {CAPACITY}, {} waits ({:?} waited), RSS +{} MiB",
        stats.high_water,
        stats.waits,
        stats.waited,
        grown / (1024 * 1024)
    );
}
