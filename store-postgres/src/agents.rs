//! The agent aggregates on PostgreSQL: memory (summaries, notes), runs, schedules, usage and
//! the cluster tables. Each call is one transaction on a pooled connection; a decision that
//! reads before it writes first takes a transaction-level advisory lock on what it decides
//! about (a note scope, the run queue, a schedule...), so concurrent callers on any node queue
//! there and each sees the one before it. Nothing here goes through the batched writer: these
//! are acknowledged changes, committed when their future resolves.

use deadpool_postgres::Transaction;
use switchboard_records::notes::SUMMARIES_KEPT_PER_SESSION;
use switchboard_records::{Note, NoteLimits, NoteScope, Summary};
use switchboard_store::{MemoryStore, NotePut, StoreError, StoreFuture};
use tokio_postgres::Row;

use crate::error::from_pg;
use crate::rows::{clean, from_sql, ms, ms_from, to_sql};
use crate::PgBackend;

/// The memory tables (issue 25).
pub(crate) const SCHEMA_MEMORY: &str = "
CREATE TABLE summaries (
    seq bigserial PRIMARY KEY,
    session_id bigint NOT NULL,
    text text NOT NULL,
    covers_to bigint NOT NULL,
    tokens integer NOT NULL,
    created_ms bigint NOT NULL
);
CREATE INDEX summaries_by_session ON summaries (session_id, created_ms, seq);
CREATE TABLE notes (
    scope text COLLATE \"C\" NOT NULL,
    key text COLLATE \"C\" NOT NULL,
    text text NOT NULL,
    untrusted boolean NOT NULL,
    updated_ms bigint NOT NULL,
    PRIMARY KEY (scope, key)
);
";

/// The first key of the advisory locks decisions take (the second names what is decided).
#[derive(Clone, Copy)]
#[repr(i32)]
enum Lock {
    NoteScope = 0x5342_0001,
}

async fn lock(tx: &Transaction<'_>, what: Lock, name: &str) -> Result<(), tokio_postgres::Error> {
    tx.execute(
        "SELECT pg_advisory_xact_lock($1, hashtext($2))",
        &[&(what as i32), &name],
    )
    .await
    .map(drop)
}

fn limit(n: usize) -> i64 {
    i64::try_from(n).unwrap_or(i64::MAX)
}

fn count(n: i64) -> usize {
    usize::try_from(n).unwrap_or(0)
}

/// A row that does not read (something else wrote the table): said, not a panic.
fn unreadable(location: &str, what: &str, detail: impl std::fmt::Display) -> StoreError {
    StoreError::new(
        switchboard_store::StoreErrorKind::Corrupt,
        format!("a stored {what} in the database at {location} does not read ({detail}); was the table changed by hand?"),
    )
}

/// Runs `$body` (an async block using `$tx`) in a transaction on a pooled connection; errors of
/// PostgreSQL are named by `$what`. The block answers `Result<T, StoreError>`.
macro_rules! in_transaction {
    ($self:expr, $what:expr, |$shared:ident, $tx:ident| $body:expr) => {{
        let what: &'static str = $what;
        $self.run(what, false, move |$shared, mut client| async move {
            let pg = |err| from_pg(&$shared.location, what, err);
            let $tx = client.transaction().await.map_err(pg)?;
            let answer = {
                let $tx = &$tx;
                let answer: Result<_, StoreError> = $body.await;
                answer
            }?;
            $tx.commit().await.map_err(pg)?;
            Ok(answer)
        })
    }};
}

fn summary_from_row(row: &Row) -> Summary {
    Summary {
        session_id: from_sql(row.get(0)),
        text: row.get(1),
        covers_to: from_sql(row.get(2)),
        tokens: u32::try_from(row.get::<_, i32>(3)).unwrap_or(0),
        created_ms: ms_from(row.get(4)),
    }
}

fn note_from_row(location: &str, row: &Row) -> Result<Note, StoreError> {
    let scope: String = row.get(0);
    Ok(Note {
        scope: scope
            .parse()
            .map_err(|err| unreadable(location, "note", err))?,
        key: row.get(1),
        text: row.get(2),
        untrusted: row.get(3),
        updated_ms: ms_from(row.get(4)),
    })
}

fn notes_from_rows(location: &str, rows: &[Row]) -> Result<Vec<Note>, StoreError> {
    rows.iter()
        .map(|row| note_from_row(location, row))
        .collect()
}

impl MemoryStore for PgBackend {
    fn save_summary(&self, summary: Summary) -> StoreFuture<'_, ()> {
        in_transaction!(self, "a summary", |shared, tx| async {
            let pg = |err| from_pg(&shared.location, "a summary", err);
            let session = to_sql(summary.session_id);
            tx.execute(
                "INSERT INTO summaries (session_id, text, covers_to, tokens, created_ms)
                 VALUES ($1, $2, $3, $4, $5)",
                &[
                    &session,
                    &clean(&summary.text),
                    &to_sql(summary.covers_to),
                    &i32::try_from(summary.tokens).unwrap_or(i32::MAX),
                    &ms(summary.created_ms),
                ],
            )
            .await
            .map_err(pg)?;
            tx.execute(
                "DELETE FROM summaries WHERE session_id = $1 AND seq NOT IN (
                     SELECT seq FROM summaries WHERE session_id = $1
                     ORDER BY created_ms DESC, seq DESC LIMIT $2)",
                &[&session, &limit(SUMMARIES_KEPT_PER_SESSION)],
            )
            .await
            .map_err(pg)?;
            Ok(())
        })
    }

    fn summary(&self, session_id: entity::Snowflake) -> StoreFuture<'_, Option<Summary>> {
        in_transaction!(self, "a summary", |shared, tx| async {
            let row = tx
                .query_opt(
                    "SELECT session_id, text, covers_to, tokens, created_ms FROM summaries
                     WHERE session_id = $1 ORDER BY created_ms DESC, seq DESC LIMIT 1",
                    &[&to_sql(session_id)],
                )
                .await
                .map_err(|err| from_pg(&shared.location, "a summary", err))?;
            Ok(row.as_ref().map(summary_from_row))
        })
    }

    fn summaries(
        &self,
        session_id: entity::Snowflake,
        count: usize,
    ) -> StoreFuture<'_, Vec<Summary>> {
        in_transaction!(self, "summaries", |shared, tx| async {
            let rows = tx
                .query(
                    "SELECT session_id, text, covers_to, tokens, created_ms FROM summaries
                     WHERE session_id = $1 ORDER BY created_ms DESC, seq DESC LIMIT $2",
                    &[&to_sql(session_id), &limit(count)],
                )
                .await
                .map_err(|err| from_pg(&shared.location, "summaries", err))?;
            Ok(rows.iter().map(summary_from_row).collect())
        })
    }

    fn put_note(&self, note: Note, limits: NoteLimits) -> StoreFuture<'_, NotePut> {
        in_transaction!(self, "a note", |shared, tx| async {
            let pg = |err| from_pg(&shared.location, "a note", err);
            let scope = note.scope.to_string();
            let (key, text) = (clean(&note.key), clean(&note.text));
            lock(tx, Lock::NoteScope, &scope).await.map_err(pg)?;
            let row = tx
                .query_one(
                    "SELECT count(*) FILTER (WHERE key <> $2),
                            coalesce(sum(char_length(text)) FILTER (WHERE key <> $2), 0)::bigint,
                            count(*), coalesce(sum(char_length(text)), 0)::bigint
                     FROM notes WHERE scope = $1",
                    &[&scope, &key],
                )
                .await
                .map_err(pg)?;
            let (others, other_chars) = (count(row.get(0)), count(row.get(1)));
            if others + 1 > limits.max_notes
                || other_chars + text.chars().count() > limits.max_chars
            {
                return Ok(NotePut::Full {
                    notes: count(row.get(2)),
                    chars: count(row.get(3)),
                });
            }
            tx.execute(
                "INSERT INTO notes (scope, key, text, untrusted, updated_ms)
                 VALUES ($1, $2, $3, $4, $5)
                 ON CONFLICT (scope, key) DO UPDATE SET text = excluded.text,
                     untrusted = excluded.untrusted, updated_ms = excluded.updated_ms",
                &[&scope, &key, &text, &note.untrusted, &ms(note.updated_ms)],
            )
            .await
            .map_err(pg)?;
            Ok(NotePut::Saved)
        })
    }

    fn note(&self, scope: NoteScope, key: &str) -> StoreFuture<'_, Option<Note>> {
        let key = clean(key);
        in_transaction!(self, "a note", |shared, tx| async {
            let row = tx
                .query_opt(
                    "SELECT scope, key, text, untrusted, updated_ms FROM notes
                     WHERE scope = $1 AND key = $2",
                    &[&scope.to_string(), &key],
                )
                .await
                .map_err(|err| from_pg(&shared.location, "a note", err))?;
            row.map(|row| note_from_row(&shared.location, &row))
                .transpose()
        })
    }

    fn notes(&self, scope: NoteScope, count: usize) -> StoreFuture<'_, Vec<Note>> {
        in_transaction!(self, "notes", |shared, tx| async {
            let rows = tx
                .query(
                    "SELECT scope, key, text, untrusted, updated_ms FROM notes
                     WHERE scope = $1 ORDER BY key LIMIT $2",
                    &[&scope.to_string(), &limit(count)],
                )
                .await
                .map_err(|err| from_pg(&shared.location, "notes", err))?;
            notes_from_rows(&shared.location, &rows)
        })
    }

    fn forget_note(&self, scope: NoteScope, key: &str) -> StoreFuture<'_, bool> {
        let key = clean(key);
        in_transaction!(self, "a note", |shared, tx| async {
            let gone = tx
                .execute(
                    "DELETE FROM notes WHERE scope = $1 AND key = $2",
                    &[&scope.to_string(), &key],
                )
                .await
                .map_err(|err| from_pg(&shared.location, "a note", err))?;
            Ok(gone > 0)
        })
    }

    fn notes_after(
        &self,
        after: Option<(NoteScope, String)>,
        count: usize,
    ) -> StoreFuture<'_, Vec<Note>> {
        let (scope, key) = after.map_or((None, String::new()), |(s, k)| {
            (Some(s.to_string()), clean(&k))
        });
        in_transaction!(self, "notes", |shared, tx| async {
            let rows = tx
                .query(
                    "SELECT scope, key, text, untrusted, updated_ms FROM notes
                     WHERE $1::text IS NULL OR scope > $1 OR (scope = $1 AND key > $2)
                     ORDER BY scope, key LIMIT $3",
                    &[&scope, &key, &limit(count)],
                )
                .await
                .map_err(|err| from_pg(&shared.location, "notes", err))?;
            notes_from_rows(&shared.location, &rows)
        })
    }
}
