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

/// The kind of a failure PostgreSQL answered, by SQLSTATE class, so that callers retry only
/// what may go away by itself ([`StoreErrorKind::Unavailable`]: the agent waits out an
/// outage for minutes) and turn down at once what never will.
///
/// - `57014` (a statement stopped by its timeout): [`StoreErrorKind::TimedOut`].
/// - Transient ([`is_transient`]: `08` connection, `53` resources, `57P` shutdown, `40001`
///   serialization, `40P01` deadlock, `55P03` lock not available; no SQLSTATE and an I/O
///   error): [`StoreErrorKind::Unavailable`].
/// - `23` integrity (a unique key or a reference refused) and `22` data (a value PostgreSQL
///   will not take: too long, out of range, badly encoded), `54` program limits (a statement
///   too large): [`StoreErrorKind::Conflict`] — the change itself is refused, as the store's
///   other refusals of garbage are; retrying it would be refused again.
/// - `42` (an undefined table or column, a privilege missing), `XX` internal (data
///   corrupted, an index damaged), no SQLSTATE and not transient (a value that does not
///   decode): [`StoreErrorKind::Corrupt`] — the database is not what this build can use.
/// - Any other class: [`StoreErrorKind::Unavailable`], as before (retried within its bound).
pub(crate) fn kind_of(err: &tokio_postgres::Error) -> StoreErrorKind {
    if err.code() == Some(&SqlState::QUERY_CANCELED) {
        return StoreErrorKind::TimedOut;
    }
    if is_transient(err) {
        return StoreErrorKind::Unavailable;
    }
    let Some(code) = err.code() else {
        return StoreErrorKind::Corrupt;
    };
    match code.code().get(..2) {
        Some("22" | "23" | "54") => StoreErrorKind::Conflict,
        Some("42" | "XX") => StoreErrorKind::Corrupt,
        _ => StoreErrorKind::Unavailable,
    }
}

/// A failed read or decision, as the store's error.
pub(crate) fn from_pg(location: &str, what: &str, err: tokio_postgres::Error) -> StoreError {
    let kind = kind_of(&err);
    let code = err.code().map_or("none", SqlState::code);
    let message = match kind {
        StoreErrorKind::TimedOut => {
            format!("reading {what} from PostgreSQL at {location} took too long and was stopped")
        }
        StoreErrorKind::Conflict => format!(
            "PostgreSQL at {location} refused {what} (SQLSTATE {code}: {}); the change is not kept — change it rather than retry it",
            brief(&err)
        ),
        StoreErrorKind::Corrupt if code == SqlState::INSUFFICIENT_PRIVILEGE.code() => format!(
            "PostgreSQL at {location} does not let switchboard's role use {what}; grant the role the rights on switchboard's database (or point store.url at a role that owns it)"
        ),
        StoreErrorKind::Corrupt => format!(
            "the database at {location} does not hold switchboard's schema as this build knows it (reading {what}, SQLSTATE {code}); point store.url at switchboard's own database"
        ),
        _ if is_transient(&err) => format!(
            "cannot reach PostgreSQL at {location} to read {what}; switchboard reconnects by itself — check that the server is up and reachable"
        ),
        _ => format!("PostgreSQL at {location} refused to read {what} (SQLSTATE {code})"),
    };
    StoreError::new(kind, message).with_source(err)
}

/// The server's own message of a refusal (without its detail lines).
fn brief(err: &tokio_postgres::Error) -> String {
    err.as_db_error()
        .map_or_else(|| err.to_string(), |db| db.message().to_owned())
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

#[cfg(test)]
mod tests {
    use super::*;
    use crate::testing::PgCluster;

    async fn connect(
        url: &str,
    ) -> (
        tokio_postgres::Client,
        tokio_postgres::Connection<tokio_postgres::Socket, tokio_postgres::tls::NoTlsStream>,
    ) {
        tokio_postgres::connect(url, tokio_postgres::NoTls)
            .await
            .expect("connect")
    }

    /// Each SQL's failure on a real PostgreSQL, as the kind callers branch on.
    #[test]
    fn sqlstate_classes_map_to_the_kinds_callers_branch_on() {
        let cluster = PgCluster::shared();
        let url = cluster.url(&cluster.database().expect("a test database"));
        let runtime = tokio::runtime::Builder::new_current_thread()
            .enable_all()
            .build()
            .unwrap();
        runtime.block_on(async {
            let (client, connection) = connect(&url).await;
            tokio::spawn(connection);
            client
                .batch_execute("CREATE TABLE t (id int PRIMARY KEY, name varchar(3))")
                .await
                .unwrap();
            client
                .execute("INSERT INTO t VALUES (1, 'a')", &[])
                .await
                .unwrap();
            let cases = [
                (
                    "INSERT INTO t VALUES (1, 'b')",
                    StoreErrorKind::Conflict,
                    "23505",
                ),
                (
                    "INSERT INTO t VALUES (NULL, 'b')",
                    StoreErrorKind::Conflict,
                    "23502",
                ),
                (
                    "INSERT INTO t VALUES (2, 'toolong')",
                    StoreErrorKind::Conflict,
                    "22001",
                ),
                ("SELECT 1 / 0", StoreErrorKind::Conflict, "22012"),
                ("SELECT * FROM nowhere", StoreErrorKind::Corrupt, "42P01"),
                ("SELECT nothing FROM t", StoreErrorKind::Corrupt, "42703"),
                ("SELEKT 1", StoreErrorKind::Corrupt, "42601"),
                (
                    "SET statement_timeout = 50; SELECT pg_sleep(5)",
                    StoreErrorKind::TimedOut,
                    "57014",
                ),
            ];
            for (sql, kind, code) in cases {
                let err = client.batch_execute(sql).await.expect_err(sql);
                assert_eq!(err.code().map(SqlState::code), Some(code), "{sql}");
                let mapped = from_pg("postgres://test", "a row", err);
                assert_eq!(mapped.kind(), kind, "{sql}: {mapped}");
                assert!(mapped.to_string().contains(code) || kind == StoreErrorKind::TimedOut);
            }
            client
                .batch_execute("SET statement_timeout = 0")
                .await
                .unwrap();
            // A deadlock lost, a serialization race lost, a server going away: retried.
            for code in ["40P01", "40001", "57P01", "08006", "53300"] {
                let sql = format!(
                    "DO $$ BEGIN RAISE EXCEPTION 'raised' USING ERRCODE = '{code}'; END $$"
                );
                let err = client.batch_execute(&sql).await.expect_err(&sql);
                assert_eq!(err.code().map(SqlState::code), Some(code));
                assert_eq!(
                    from_pg("postgres://test", "a row", err).kind(),
                    StoreErrorKind::Unavailable,
                    "{code}"
                );
            }
            // The connection gone: retried too.
            drop(client);
        });
        runtime.block_on(async {
            let (client, connection) = connect(&url).await;
            let driver = tokio::spawn(connection);
            driver.abort();
            let _ = driver.await;
            let err = client.batch_execute("SELECT 1").await.expect_err("closed");
            assert_eq!(
                from_pg("postgres://test", "a row", err).kind(),
                StoreErrorKind::Unavailable
            );
        });
    }
}
