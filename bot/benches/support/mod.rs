//! What the bot's benchmarks share.

use switchboard_store::Store;

/// A store over a SQLite file keeping `messages_per_channel` per channel.
pub fn sqlite_store(path: &str, messages_per_channel: usize) -> Store {
    let backend = switchboard_store_sqlite::SqliteBackend::open(
        path,
        switchboard_store_sqlite::SqliteOptions {
            messages_per_channel,
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
