//! Store errors for what SQLite reports, each saying what to do about it.

use rusqlite::ErrorCode;
use switchboard_store::{StoreError, StoreErrorKind};

/// SQLite could not open the file: its directory is missing, or it is not writable.
pub(crate) fn cannot_open(path: &str, source: rusqlite::Error) -> StoreError {
    StoreError::new(
        StoreErrorKind::Unavailable,
        format!(
            "cannot open the store at {path}: {source}; check that the directory exists and is \
             writable, or set store.url to another file"
        ),
    )
    .with_source(source)
}

/// Classifies an error from opening or first touching the file; `what` names the step.
pub(crate) fn from_open(path: &str, what: &'static str, source: rusqlite::Error) -> StoreError {
    match source.sqlite_error_code() {
        Some(ErrorCode::NotADatabase | ErrorCode::DatabaseCorrupt) => StoreError::new(
            StoreErrorKind::Corrupt,
            format!(
                "{path} is not a switchboard store (it is not an SQLite database, or it is \
                 damaged); move it away or set store.url to another file"
            ),
        )
        .with_source(source),
        Some(ErrorCode::DatabaseBusy | ErrorCode::DatabaseLocked) => StoreError::new(
            StoreErrorKind::Locked,
            format!(
                "the store at {path} is locked: another switchboard is using it, and the store \
                 is SQLite: one node only; for several nodes use store.url = postgres://… (or \
                 stop the other process, or set store.url to another file)"
            ),
        )
        .with_source(source),
        Some(ErrorCode::CannotOpen | ErrorCode::PermissionDenied | ErrorCode::ReadOnly) => {
            cannot_open(path, source)
        }
        _ => StoreError::new(
            StoreErrorKind::Unavailable,
            format!("cannot prepare the store at {path} ({what}): {source}"),
        )
        .with_source(source),
    }
}

/// The file's schema is newer than this build's.
pub(crate) fn newer_schema(path: &str, found: i64, supported: i64) -> StoreError {
    StoreError::new(
        StoreErrorKind::Corrupt,
        format!(
            "the store at {path} has schema version {found}, newer than this switchboard \
             understands ({supported}); run a newer switchboard or set store.url to another file"
        ),
    )
}

/// Reading rows at open failed.
pub(crate) fn cannot_load(path: &str, source: rusqlite::Error) -> StoreError {
    StoreError::new(
        StoreErrorKind::Corrupt,
        format!("cannot load the store at {path}: {source}; the file may be damaged"),
    )
    .with_source(source)
}

/// A read on the writer's connection failed.
pub(crate) fn cannot_read(path: &str, what: &str, source: rusqlite::Error) -> StoreError {
    StoreError::new(
        StoreErrorKind::Unavailable,
        format!("cannot read {what} from the store at {path}: {source}"),
    )
    .with_source(source)
}

/// Durable writes failed since the last flush.
pub(crate) fn write_failed(path: &str, message: &str) -> StoreError {
    StoreError::new(
        StoreErrorKind::Unavailable,
        format!(
            "writes to the store at {path} failed ({message}); recent changes may not be \
             durable. Check free disk space and the file's permissions"
        ),
    )
}
