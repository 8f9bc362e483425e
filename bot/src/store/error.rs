//! What can go wrong opening or writing the store, each saying what to do about it.

/// A store failure. Reads never fail (they come from memory); opening, migrating and durable
/// writes can.
#[derive(Debug, thiserror::Error)]
pub enum StoreError {
    #[error(
        "cannot open the store at {path}: {source}; check that the directory exists and is \
         writable, or set store.path to another file"
    )]
    Open {
        path: String,
        #[source]
        source: rusqlite::Error,
    },
    #[error(
        "{path} is not a switchboard store (it is not an SQLite database, or it is damaged); \
         move it away or set store.path to another file"
    )]
    NotADatabase { path: String },
    #[error(
        "the store at {path} is locked: is another switchboard using it? Stop the other \
         process or set store.path to another file"
    )]
    Locked { path: String },
    #[error(
        "the store at {path} has schema version {found}, newer than this switchboard \
         understands ({supported}); run a newer switchboard or set store.path to another file"
    )]
    NewerSchema {
        path: String,
        found: i64,
        supported: i64,
    },
    #[error("cannot prepare the store at {path} ({what}): {source}")]
    Migrate {
        path: String,
        what: &'static str,
        #[source]
        source: rusqlite::Error,
    },
    #[error("cannot load the store at {path}: {source}; the file may be damaged")]
    Load {
        path: String,
        #[source]
        source: rusqlite::Error,
    },
    #[error(
        "writes to the store at {path} failed ({message}); recent changes may not be durable. \
         Check free disk space and the file's permissions"
    )]
    Write { path: String, message: String },
    #[error("cannot start the store's writer thread: {0}")]
    Spawn(#[source] std::io::Error),
    #[error("the store at {path} is closed")]
    Closed { path: String },
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
