//! Store benchmarks, printed as plain figures:
//!
//! 1. Resident memory per cached message: RSS (VmRSS from /proc/self/status) before and after
//!    inserting 100,000 messages over 100 channels into a file store that keeps them all, then
//!    flushing. "Text" is every byte of `content` plus every byte of `text` (content and
//!    canonical text differ in every message here, as when a message mentions someone, so the
//!    store can't keep them once); the figure is (RSS delta − text bytes) / messages.
//! 2. Store-level ingest: `insert_message` of the same kind of messages into a fresh file store,
//!    timed to the end of `flush()` (so the writer's commits are included), in messages/s.
//!
//! Run: `cargo bench -p bot --bench store` (`STORE_BENCH_MESSAGES=n` to change the count).

use std::path::PathBuf;
use std::time::{Duration, Instant};

use bot::store::{Snowflake, Store, StoreOptions, StoredMessage};

const CHANNELS: u64 = 100;
const BASE_ID: u64 = 1_300_000_000_000_000_000;
const AUTHOR: u64 = 1_200_000_000_000_000_001;

fn main() {
    // `cargo bench` passes `--bench`; any other argument is a filter we don't use.
    let count: u64 = std::env::var("STORE_BENCH_MESSAGES")
        .ok()
        .and_then(|n| n.parse().ok())
        .unwrap_or(100_000);
    let dir = TempDir::new();
    println!(
        "store bench: {count} messages over {CHANNELS} channels, file stores in {}",
        dir.0.display()
    );

    memory(&dir, count);
    ingest(&dir, count);
}

/// A realistic ~80-byte message: raw content with a mention, canonical text with the name.
fn message(n: u64) -> StoredMessage {
    let channel = 1_100_000_000_000_000_000 + n % CHANNELS;
    let content =
        format!("<@{AUTHOR}> deploy {n:07} finished on staging; logs are in the usual place ok");
    let text =
        format!("@tomas-novak deploy {n:07} finished on staging; logs are in the usual place ok");
    StoredMessage {
        id: Snowflake(BASE_ID + n),
        channel_id: Snowflake(channel),
        author_id: Snowflake(AUTHOR + n % 50),
        author_is_bot: false,
        content,
        text,
        timestamp: format!(
            "2026-11-22T12:{:02}:{:02}.000000+00:00",
            (n / 60) % 60,
            n % 60
        ),
        edited_timestamp: None,
        reply_to: n.is_multiple_of(10).then(|| Snowflake(BASE_ID + n - 1)),
        attachments: Vec::new(),
        reactions: Vec::new(),
    }
}

fn memory(dir: &TempDir, count: u64) {
    let per_channel = usize::try_from(count / CHANNELS + 1).unwrap_or(usize::MAX);
    let store = open(&dir.0.join("memory.db"), per_channel);
    store.flush().ok();
    let before = rss_bytes();
    let mut text_bytes = 0u64;
    for n in 0..count {
        let message = message(n);
        text_bytes += (message.content.len() + message.text.len()) as u64;
        store.insert_message(message);
    }
    if let Err(err) = store.flush() {
        eprintln!("flush failed: {err}");
    }
    let after = rss_bytes();
    let cached = store.message_count() as u64;
    let delta = after.saturating_sub(before);
    println!("memory: {cached} messages cached");
    println!(
        "memory: RSS {:.1} MiB -> {:.1} MiB, delta {:.1} MiB; text (content + text) {:.1} MiB, {:.1} bytes/message",
        mib(before),
        mib(after),
        mib(delta),
        mib(text_bytes),
        text_bytes as f64 / cached.max(1) as f64
    );
    println!(
        "memory: {:.0} bytes per message beyond its text (target <= 400); {:.0} bytes per message in all",
        (delta as f64 - text_bytes as f64) / cached.max(1) as f64,
        delta as f64 / cached.max(1) as f64
    );
    // Keep the store (and its memory) alive until measured.
    if let Err(err) = store.close() {
        eprintln!("close failed: {err}");
    }
}

fn ingest(dir: &TempDir, count: u64) {
    let messages: Vec<StoredMessage> = (0..count).map(message).collect();
    let store = open(&dir.0.join("ingest.db"), 1_000);
    let started = Instant::now();
    for message in messages {
        store.insert_message(message);
    }
    let queued = started.elapsed();
    if let Err(err) = store.flush() {
        eprintln!("flush failed: {err}");
    }
    let committed = started.elapsed();
    println!(
        "ingest: {count} inserts in {} (hot maps, queued: {:.0} msg/s); committed after {} ({:.0} msg/s incl. SQLite)",
        ms(queued),
        count as f64 / queued.as_secs_f64(),
        ms(committed),
        count as f64 / committed.as_secs_f64()
    );
    let started = Instant::now();
    if let Err(err) = store.close() {
        eprintln!("close failed: {err}");
    }
    println!(
        "ingest: close (prune + checkpoint) took {}",
        ms(started.elapsed())
    );
}

fn open(path: &std::path::Path, messages_per_channel: usize) -> Store {
    match Store::open(
        &path.to_string_lossy(),
        StoreOptions {
            messages_per_channel,
            ..StoreOptions::default()
        },
    ) {
        Ok(store) => store,
        Err(err) => {
            eprintln!("cannot open the bench store: {err}");
            std::process::exit(1);
        }
    }
}

fn rss_bytes() -> u64 {
    let status = std::fs::read_to_string("/proc/self/status").unwrap_or_default();
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
        .map_or(0, |kb| kb * 1024)
}

fn mib(bytes: u64) -> f64 {
    bytes as f64 / (1024.0 * 1024.0)
}

fn ms(duration: Duration) -> String {
    format!("{:.1} ms", duration.as_secs_f64() * 1_000.0)
}

struct TempDir(PathBuf);

impl TempDir {
    fn new() -> TempDir {
        let dir =
            std::env::temp_dir().join(format!("switchboard-store-bench-{}", std::process::id()));
        let _ = std::fs::remove_dir_all(&dir);
        if let Err(err) = std::fs::create_dir_all(&dir) {
            eprintln!("cannot create {}: {err}", dir.display());
            std::process::exit(1);
        }
        TempDir(dir)
    }
}

impl Drop for TempDir {
    fn drop(&mut self) {
        let _ = std::fs::remove_dir_all(&self.0);
    }
}
