//! The agent aggregates on SQLite: memory (summaries, notes), runs, schedules, usage and the
//! cluster tables. Every call runs on the writer's thread between batches, in a transaction of
//! its own, so each decision is atomic (this process is the only one on the file) and sees
//! every write queued before it.

use rusqlite::{params, Connection, OptionalExtension, Row, Transaction};
use switchboard_records::notes::SUMMARIES_KEPT_PER_SESSION;
use switchboard_records::{Note, NoteLimits, NoteScope, Summary};
use switchboard_store::{MemoryStore, NotePut, StoreError, StoreErrorKind, StoreFuture};

use crate::rows::{from_sql, ms_to_sql, to_sql};
use crate::SqliteBackend;

/// The memory tables (issue 25).
pub(crate) const SCHEMA_MEMORY: &str = "
CREATE TABLE IF NOT EXISTS summaries (
    seq INTEGER PRIMARY KEY AUTOINCREMENT,
    session_id INTEGER NOT NULL,
    text TEXT NOT NULL,
    covers_to INTEGER NOT NULL,
    tokens INTEGER NOT NULL,
    created_ms INTEGER NOT NULL
);
CREATE INDEX IF NOT EXISTS summaries_by_session ON summaries (session_id, created_ms, seq);
CREATE TABLE IF NOT EXISTS notes (
    scope TEXT NOT NULL,
    key TEXT NOT NULL,
    text TEXT NOT NULL,
    untrusted INTEGER NOT NULL,
    updated_ms INTEGER NOT NULL,
    PRIMARY KEY (scope, key)
) WITHOUT ROWID;
";

fn ms(value: i64) -> u64 {
    u64::try_from(value).unwrap_or(0)
}

fn limit(n: usize) -> i64 {
    i64::try_from(n).unwrap_or(i64::MAX)
}

/// A stored row that does not read: the file was changed by something else.
fn bad_row(what: &str, detail: impl std::fmt::Display) -> rusqlite::Error {
    rusqlite::Error::FromSqlConversionFailure(
        0,
        rusqlite::types::Type::Text,
        format!("a stored {what} does not read: {detail}").into(),
    )
}

impl SqliteBackend {
    /// Runs `work` in a transaction of its own on the writer's thread: committed when it
    /// answers `Ok(Ok(_))`, rolled back otherwise.
    fn decide<T: Send + 'static>(
        &self,
        what: &'static str,
        work: impl FnOnce(&Transaction<'_>) -> rusqlite::Result<Result<T, StoreError>> + Send + 'static,
    ) -> StoreFuture<'static, T> {
        self.ask(move |conn: &Connection, path: &str| {
            let fail = |err: rusqlite::Error| {
                StoreError::new(
                    StoreErrorKind::Unavailable,
                    format!("the store at {path} could not {what}: {err}"),
                )
                .with_source(err)
            };
            let tx = conn.unchecked_transaction().map_err(fail)?;
            match work(&tx).map_err(fail)? {
                Ok(answer) => {
                    tx.commit().map_err(fail)?;
                    Ok(answer)
                }
                Err(refused) => Err(refused),
            }
        })
    }
}

fn summary_from_row(row: &Row<'_>) -> rusqlite::Result<Summary> {
    Ok(Summary {
        session_id: from_sql(row.get(0)?),
        text: row.get(1)?,
        covers_to: from_sql(row.get(2)?),
        tokens: u32::try_from(row.get::<_, i64>(3)?).unwrap_or(u32::MAX),
        created_ms: ms(row.get(4)?),
    })
}

const SUMMARY_COLUMNS: &str = "session_id, text, covers_to, tokens, created_ms";

fn note_from_row(row: &Row<'_>) -> rusqlite::Result<Note> {
    let scope: String = row.get(0)?;
    Ok(Note {
        scope: scope.parse().map_err(|err| bad_row("note scope", err))?,
        key: row.get(1)?,
        text: row.get(2)?,
        untrusted: row.get(3)?,
        updated_ms: ms(row.get(4)?),
    })
}

const NOTE_COLUMNS: &str = "scope, key, text, untrusted, updated_ms";

impl MemoryStore for SqliteBackend {
    fn save_summary(&self, summary: Summary) -> StoreFuture<'_, ()> {
        self.decide("keep a summary", move |tx| {
            tx.prepare_cached(
                "INSERT INTO summaries (session_id, text, covers_to, tokens, created_ms)
                 VALUES (?1, ?2, ?3, ?4, ?5)",
            )?
            .execute(params![
                to_sql(summary.session_id),
                summary.text,
                to_sql(summary.covers_to),
                i64::from(summary.tokens),
                ms_to_sql(summary.created_ms)
            ])?;
            tx.prepare_cached(
                "DELETE FROM summaries WHERE session_id = ?1 AND seq NOT IN (
                     SELECT seq FROM summaries WHERE session_id = ?1
                     ORDER BY created_ms DESC, seq DESC LIMIT ?2)",
            )?
            .execute(params![
                to_sql(summary.session_id),
                limit(SUMMARIES_KEPT_PER_SESSION)
            ])?;
            Ok(Ok(()))
        })
    }

    fn summary(&self, session_id: entity::Snowflake) -> StoreFuture<'_, Option<Summary>> {
        self.read("a summary", move |conn, _| {
            conn.prepare_cached(&format!(
                "SELECT {SUMMARY_COLUMNS} FROM summaries WHERE session_id = ?1
                 ORDER BY created_ms DESC, seq DESC LIMIT 1"
            ))?
            .query_row([to_sql(session_id)], summary_from_row)
            .optional()
        })
    }

    fn summaries(
        &self,
        session_id: entity::Snowflake,
        count: usize,
    ) -> StoreFuture<'_, Vec<Summary>> {
        self.read("summaries", move |conn, _| {
            conn.prepare_cached(&format!(
                "SELECT {SUMMARY_COLUMNS} FROM summaries WHERE session_id = ?1
                 ORDER BY created_ms DESC, seq DESC LIMIT ?2"
            ))?
            .query_map(params![to_sql(session_id), limit(count)], summary_from_row)?
            .collect()
        })
    }

    fn put_note(&self, note: Note, limits: NoteLimits) -> StoreFuture<'_, NotePut> {
        self.decide("keep a note", move |tx| {
            let scope = note.scope.to_string();
            let (others, other_chars): (i64, i64) = tx
                .prepare_cached(
                    "SELECT count(*), coalesce(sum(length(text)), 0) FROM notes
                     WHERE scope = ?1 AND key <> ?2",
                )?
                .query_row(params![scope, note.key], |row| {
                    Ok((row.get(0)?, row.get(1)?))
                })?;
            let (others, other_chars) = (ms(others) as usize, ms(other_chars) as usize);
            if others + 1 > limits.max_notes
                || other_chars + note.text.chars().count() > limits.max_chars
            {
                let (notes, chars): (i64, i64) = tx
                    .prepare_cached(
                        "SELECT count(*), coalesce(sum(length(text)), 0) FROM notes
                         WHERE scope = ?1",
                    )?
                    .query_row([&scope], |row| Ok((row.get(0)?, row.get(1)?)))?;
                return Ok(Ok(NotePut::Full {
                    notes: ms(notes) as usize,
                    chars: ms(chars) as usize,
                }));
            }
            tx.prepare_cached(
                "INSERT INTO notes (scope, key, text, untrusted, updated_ms)
                 VALUES (?1, ?2, ?3, ?4, ?5)
                 ON CONFLICT (scope, key) DO UPDATE SET text = excluded.text,
                     untrusted = excluded.untrusted, updated_ms = excluded.updated_ms",
            )?
            .execute(params![
                scope,
                note.key,
                note.text,
                note.untrusted,
                ms_to_sql(note.updated_ms)
            ])?;
            Ok(Ok(NotePut::Saved))
        })
    }

    fn note(&self, scope: NoteScope, key: &str) -> StoreFuture<'_, Option<Note>> {
        let key = key.to_owned();
        self.read("a note", move |conn, _| {
            conn.prepare_cached(&format!(
                "SELECT {NOTE_COLUMNS} FROM notes WHERE scope = ?1 AND key = ?2"
            ))?
            .query_row(params![scope.to_string(), key], note_from_row)
            .optional()
        })
    }

    fn notes(&self, scope: NoteScope, count: usize) -> StoreFuture<'_, Vec<Note>> {
        self.read("notes", move |conn, _| {
            conn.prepare_cached(&format!(
                "SELECT {NOTE_COLUMNS} FROM notes WHERE scope = ?1 ORDER BY key LIMIT ?2"
            ))?
            .query_map(params![scope.to_string(), limit(count)], note_from_row)?
            .collect()
        })
    }

    fn forget_note(&self, scope: NoteScope, key: &str) -> StoreFuture<'_, bool> {
        let key = key.to_owned();
        self.decide("forget a note", move |tx| {
            let gone = tx
                .prepare_cached("DELETE FROM notes WHERE scope = ?1 AND key = ?2")?
                .execute(params![scope.to_string(), key])?;
            Ok(Ok(gone > 0))
        })
    }

    fn notes_after(
        &self,
        after: Option<(NoteScope, String)>,
        count: usize,
    ) -> StoreFuture<'_, Vec<Note>> {
        let (scope, key) = after.map_or((None, String::new()), |(s, k)| (Some(s.to_string()), k));
        self.read("notes", move |conn, _| {
            conn.prepare_cached(&format!(
                "SELECT {NOTE_COLUMNS} FROM notes
                 WHERE ?1 IS NULL OR scope > ?1 OR (scope = ?1 AND key > ?2)
                 ORDER BY scope, key LIMIT ?3"
            ))?
            .query_map(params![scope, key, limit(count)], note_from_row)?
            .collect()
        })
    }
}
