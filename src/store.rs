//! The one place a storage backend is named: `store.url` picks SQLite, the memory backend or
//! PostgreSQL, and the rest of the service holds the read cache ([`Store`]) in front of it, or
//! the backend as `Arc<dyn Backend>` (upcast per trait).

use std::sync::Arc;

use switchboard_config::{Config, SqliteLocation, StoreUrl};
use switchboard_store::{
    Backend, CacheOptions, MemoryBackend, MemoryOptions, Retention, Store, StoreError,
};
use switchboard_store_postgres::{PgBackend, PgOptions};
use switchboard_store_sqlite::{SqliteBackend, SqliteOptions};

/// Opens the backend `url` names (blocking: run it where a blocking call is allowed).
pub fn open_backend(url: &StoreUrl, retention: Retention) -> Result<Arc<dyn Backend>, StoreError> {
    Ok(match url {
        StoreUrl::Sqlite(location) => {
            let path = match location {
                SqliteLocation::File(path) => path.to_string_lossy().into_owned(),
                SqliteLocation::Memory => ":memory:".to_owned(),
            };
            Arc::new(SqliteBackend::open(
                &path,
                SqliteOptions {
                    retention,
                    ..SqliteOptions::default()
                },
            )?)
        }
        StoreUrl::Memory => Arc::new(MemoryBackend::new(MemoryOptions {
            retention,
            ..MemoryOptions::default()
        })),
        StoreUrl::Postgres(url) => Arc::new(PgBackend::open(
            url,
            PgOptions {
                retention,
                ..PgOptions::default()
            },
        )?),
    })
}

/// The backend `config` names and the read cache in front of it, opened off the runtime's
/// threads (SQLite reads its file, PostgreSQL connects and migrates).
pub async fn open(config: &Config) -> Result<Store, OpenError> {
    let url = config.store.url.clone();
    let keep = config.store.messages_per_channel;
    let retention = Retention {
        messages_per_channel: keep,
        audit_retention: config.audit.retention,
    };
    tokio::task::spawn_blocking(move || {
        let backend = open_backend(&url, retention)?;
        Store::open(
            backend,
            CacheOptions {
                messages_per_channel: keep,
            },
        )
    })
    .await
    .map_err(|join| OpenError::Task(join.to_string()))?
    .map_err(OpenError::Store)
}

/// Why the store did not open.
#[derive(Debug, thiserror::Error)]
pub enum OpenError {
    /// The backend refused (locked, corrupt, unreachable, ...).
    #[error("{0}")]
    Store(StoreError),
    /// The task opening it failed.
    #[error("the task opening it failed: {0}")]
    Task(String),
}
