//! What the bot's benchmarks share.

// Not every bench that shares this module uses all of it.
#![allow(dead_code)]

use switchboard_store::Store;

/// The allocator the service runs on (`src/main.rs`), so the benchmarks measure what runs.
#[global_allocator]
static ALLOCATOR: mimalloc::MiMalloc = mimalloc::MiMalloc;

/// A store over a SQLite file keeping `messages_per_channel` per channel.
pub fn sqlite_store(path: &str, messages_per_channel: usize) -> Store {
    let backend = switchboard_store_sqlite::SqliteBackend::open(
        path,
        switchboard_store_sqlite::SqliteOptions {
            retention: switchboard_store::Retention {
                messages_per_channel,
                ..Default::default()
            },
            ..Default::default()
        },
    )
    .expect("store opens");
    Store::open(
        std::sync::Arc::new(backend),
        switchboard_store::CacheOptions {
            messages_per_channel,
        },
    )
    .expect("the cache loads")
}

/// This process's CPU time so far (user + system, every thread: the server's, the store
/// writer's and the in-process clients'), from `/proc/self/stat`.
pub fn cpu_time() -> std::time::Duration {
    let stat = std::fs::read_to_string("/proc/self/stat").expect("/proc/self/stat");
    // After the command name in parentheses: fields 14 (utime) and 15 (stime), in clock ticks
    // (USER_HZ, 100 on Linux).
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
    std::time::Duration::from_millis((ticks(11) + ticks(12)) * 10)
}
