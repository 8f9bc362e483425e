//! PostgreSQL's errors as the store's: which kind, what to do, and whether retrying may work.

use switchboard_store::{StoreError, StoreErrorKind};
use tokio_postgres::error::SqlState;

/// Whether an error may go away by itself: the server is unreachable, restarting or out of
/// resources, the connection broke, or the transaction lost a race (deadlock, serialization).
/// A write that failed so is kept and retried; any other failure is the write's own.
pub(crate) fn is_transient(err: &tokio_postgres::Error) -> bool {
    let Some(code) = err.code() else {
        // No SQLSTATE: an I/O error, a closed connection, a timeout are transient; a value
        // that would not encode or decode is not.
        use std::error::Error as _;
        let text = err.to_string();
        return err.is_closed()
            || err
                .source()
                .is_some_and(|source| source.downcast_ref::<std::io::Error>().is_some())
            || text.contains("timeout")
            || text.contains("timed out")
            || text.contains("connect");
    };
    let text = code.code();
    text.starts_with("08")
        || text.starts_with("53")
        || text.starts_with("57P")
        || [
            SqlState::T_R_SERIALIZATION_FAILURE,
            SqlState::T_R_DEADLOCK_DETECTED,
            SqlState::LOCK_NOT_AVAILABLE,
        ]
        .contains(code)
}

/// A failed read or decision, as the store's error.
pub(crate) fn from_pg(location: &str, what: &str, err: tokio_postgres::Error) -> StoreError {
    let code = err.code().cloned();
    let (kind, message) = match code {
        Some(SqlState::QUERY_CANCELED) => (
            StoreErrorKind::TimedOut,
            format!("reading {what} from PostgreSQL at {location} took too long and was stopped"),
        ),
        Some(SqlState::UNDEFINED_TABLE | SqlState::UNDEFINED_COLUMN | SqlState::UNDEFINED_FUNCTION) => (
            StoreErrorKind::Corrupt,
            format!(
                "the database at {location} does not hold switchboard's schema as this build knows it (reading {what}); point store.url at switchboard's own database"
            ),
        ),
        _ if is_transient(&err) => (
            StoreErrorKind::Unavailable,
            format!(
                "cannot reach PostgreSQL at {location} to read {what}; switchboard reconnects by itself — check that the server is up and reachable"
            ),
        ),
        _ => (
            StoreErrorKind::Unavailable,
            format!("PostgreSQL at {location} refused to read {what}"),
        ),
    };
    StoreError::new(kind, message).with_source(err)
}

/// No connection could be had from the pool.
pub(crate) fn from_pool(
    location: &str,
    what: &str,
    err: deadpool_postgres::PoolError,
) -> StoreError {
    StoreError::new(
        StoreErrorKind::Unavailable,
        format!(
            "cannot reach PostgreSQL at {location} to {what}; switchboard reconnects by itself — check that the server is up and reachable"
        ),
    )
    .with_source(err)
}

/// An operation ran past the backend's bound on any one operation.
pub(crate) fn too_slow(location: &str, what: &str) -> StoreError {
    StoreError::new(
        StoreErrorKind::Unavailable,
        format!(
            "PostgreSQL at {location} did not answer in time to {what}; it may be down or overloaded (switchboard keeps trying)"
        ),
    )
}

/// Writes queued but not yet written because the server cannot be reached.
pub(crate) fn unreachable(location: &str, queued: usize) -> StoreError {
    StoreError::new(
        StoreErrorKind::Unavailable,
        format!(
            "PostgreSQL at {location} cannot be reached; {queued} write(s) wait in memory and are written once it is back"
        ),
    )
}

/// A write failed for good (the batch's other writes were committed).
pub(crate) fn write_failed(location: &str, message: &str) -> StoreError {
    StoreError::new(
        StoreErrorKind::Unavailable,
        format!("a write to PostgreSQL at {location} failed: {message}"),
    )
}
