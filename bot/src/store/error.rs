//! What can go wrong opening or writing the store, each saying what to do about it.

/// A store failure. Reads never fail (they come from memory); opening, migrating and durable
/// writes can.
#[derive(Debug, thiserror::Error)]
pub enum StoreError {
    /// SQLite could not open the file: its directory is missing, or the file or the directory is
    /// not writable (for [`peek_sessions`](super::peek_sessions): also when the file does not
    /// exist). Create the directory or fix its permissions, or set `store.path` to another file.
    #[error(
        "cannot open the store at {path}: {source}; check that the directory exists and is \
         writable, or set store.path to another file"
    )]
    Open {
        /// The path the store was opened with.
        path: String,
        /// SQLite's error.
        #[source]
        source: rusqlite::Error,
    },
    /// The file is not an SQLite database, or it is damaged. Move it away, or set `store.path` to
    /// another file.
    #[error(
        "{path} is not a switchboard store (it is not an SQLite database, or it is damaged); \
         move it away or set store.path to another file"
    )]
    NotADatabase {
        /// The path the store was opened with.
        path: String,
    },
    /// Another process holds the file's lock, most likely another switchboard using the same store.
    /// Stop it, or set `store.path` to another file.
    #[error(
        "the store at {path} is locked: is another switchboard using it? Stop the other \
         process or set store.path to another file"
    )]
    Locked {
        /// The path the store was opened with.
        path: String,
    },
    /// The file was written by a newer switchboard, with a schema this one cannot read. Run a newer
    /// switchboard, or set `store.path` to another file.
    #[error(
        "the store at {path} has schema version {found}, newer than this switchboard \
         understands ({supported}); run a newer switchboard or set store.path to another file"
    )]
    NewerSchema {
        /// The path the store was opened with.
        path: String,
        /// The file's schema version (`PRAGMA user_version`).
        found: i64,
        /// The newest schema version this build understands:
        /// [`SCHEMA_VERSION`](super::SCHEMA_VERSION).
        supported: i64,
    },
    /// A step of preparing the file at open (a pragma, taking the lock, creating or upgrading the
    /// schema) failed for a reason the variants above don't cover; `what` names the step and
    /// `source` says why.
    #[error("cannot prepare the store at {path} ({what}): {source}")]
    Migrate {
        /// The path the store was opened with.
        path: String,
        /// The step that failed, such as `switch to WAL` or `add the workflows table`.
        what: &'static str,
        /// SQLite's error.
        #[source]
        source: rusqlite::Error,
    },
    /// Reading the file's rows into memory at open failed; the file may be damaged.
    #[error("cannot load the store at {path}: {source}; the file may be damaged")]
    Load {
        /// The path the store was opened with.
        path: String,
        /// SQLite's error.
        #[source]
        source: rusqlite::Error,
    },
    /// A durable write failed since the last [`Store::flush`](super::Store::flush) or
    /// [`Store::close`](super::Store::close), which report it: memory has the change, the file may
    /// not. Check free disk space and the file's permissions.
    #[error(
        "writes to the store at {path} failed ({message}); recent changes may not be durable. \
         Check free disk space and the file's permissions"
    )]
    Write {
        /// The path the store was opened with.
        path: String,
        /// The first failure since then (`could not commit 3 change(s): ...`); every failure is
        /// also logged.
        message: String,
    },
    /// The operating system would not start the writer thread (a limit on threads or memory,
    /// usually).
    #[error("cannot start the store's writer thread: {0}")]
    Spawn(#[source] std::io::Error),
    /// The writer thread has stopped, so [`Store::flush`](super::Store::flush) could not reach it:
    /// the store was closed, or the thread died. Changes made since stay in memory only.
    #[error("the store at {path} is closed")]
    Closed {
        /// The path the store was opened with.
        path: String,
    },
}

impl StoreError {
    /// Classifies an error from opening or first touching the file.
    pub(crate) fn from_open(path: &str, what: &'static str, source: rusqlite::Error) -> StoreError {
        use rusqlite::ErrorCode;
        let path = path.to_owned();
        match source.sqlite_error_code() {
            Some(ErrorCode::NotADatabase | ErrorCode::DatabaseCorrupt) => {
                StoreError::NotADatabase { path }
            }
            Some(ErrorCode::DatabaseBusy | ErrorCode::DatabaseLocked) => {
                StoreError::Locked { path }
            }
            Some(ErrorCode::CannotOpen | ErrorCode::PermissionDenied | ErrorCode::ReadOnly) => {
                StoreError::Open { path, source }
            }
            _ => StoreError::Migrate { path, what, source },
        }
    }
}
