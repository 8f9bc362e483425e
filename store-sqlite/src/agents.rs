//! The agent aggregates on SQLite: memory (summaries, notes), runs, schedules, usage and the
//! cluster tables. Every call runs on the writer's thread between batches, in a transaction of
//! its own, so each decision is atomic (this process is the only one on the file) and sees
//! every write queued before it.

use entity::Snowflake;
use rusqlite::{params, Connection, OptionalExtension, Row, Transaction};
use switchboard_records::cluster::NODES_KEPT_MS;
use switchboard_records::notes::SUMMARIES_KEPT_PER_SESSION;
use switchboard_records::run::FINISHED_RUNS_KEPT_MS;
use switchboard_records::schedule::RECEIPTS_KEPT_PER_SCHEDULE;
use switchboard_records::usage::USAGE_KEPT_MS;
use switchboard_records::{
    AfterFiring, AgentBinding, FiringClaim, FiringOutcome, KeptUsage, Lease, NewRun, Node,
    NodeBeat, Note, NoteLimits, NoteScope, Receipt, Run, RunEnd, RunFilter, RunJoin, RunState,
    RunUsage, Schedule, ScheduleStatus, ShardLease, Summary, UsageBy, UsageCharge, UsageGroup,
    UsageQuery, UsageRow, UsageSubject, UsageTotals,
};
use switchboard_store::{
    check_end, count_firing, duplicate_run, set_status, unknown_schedule, AgentBindingStore,
    Census, ClusterStore, Enqueued, Firing, Heartbeat, MemoryStore, NotePut, RunStore,
    ScheduleStore, ShardGrant, StoreError, StoreErrorKind, StoreFuture, UsageStore,
};

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

/// `/agent set` bindings (issue 26).
pub(crate) const SCHEMA_AGENT_BINDINGS: &str = "
CREATE TABLE IF NOT EXISTS agent_bindings (
    session_id INTEGER PRIMARY KEY,
    agent TEXT NOT NULL
);
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

/// Forgets what is past its lifetime: ended runs after [`FINISHED_RUNS_KEPT_MS`], usage rows
/// after [`USAGE_KEPT_MS`], expired once keys and capabilities, nodes silent for
/// [`NODES_KEPT_MS`] (at open and hourly, as the audit log is pruned).
pub(crate) fn prune(conn: &Connection, now_ms: u64) -> rusqlite::Result<()> {
    for (delete, before) in [
        (
            DELETE_ENDED_RUNS,
            now_ms.saturating_sub(FINISHED_RUNS_KEPT_MS),
        ),
        (DELETE_OLD_USAGE, now_ms.saturating_sub(USAGE_KEPT_MS)),
        (DELETE_EXPIRED_ONCE_KEYS, now_ms),
        (DELETE_SILENT_NODES, now_ms.saturating_sub(NODES_KEPT_MS)),
        (crate::capabilities::DELETE_EXPIRED_CAPABILITIES, now_ms),
    ] {
        conn.prepare_cached(delete)?.execute([ms_to_sql(before)])?;
    }
    Ok(())
}

const DELETE_ENDED_RUNS: &str =
    "DELETE FROM runs WHERE state NOT IN ('queued', 'running') AND finished_ms < ?1";
const DELETE_OLD_USAGE: &str = "DELETE FROM usage WHERE at_ms < ?1";
const DELETE_EXPIRED_ONCE_KEYS: &str = "DELETE FROM once_keys WHERE until_ms <= ?1";
const DELETE_SILENT_NODES: &str = "DELETE FROM cluster_nodes WHERE last_seen_ms < ?1";

/// Adds the agent kinds to a census.
pub(crate) fn census(conn: &Connection, census: Census) -> rusqlite::Result<Census> {
    conn.query_row(
        "SELECT (SELECT count(*) FROM notes), (SELECT count(*) FROM summaries),
                (SELECT count(*) FROM runs), (SELECT count(*) FROM schedules),
                (SELECT count(*) FROM usage), (SELECT count(*) FROM agent_bindings)",
        [],
        |row| {
            Ok(Census {
                notes: ms(row.get(0)?),
                summaries: ms(row.get(1)?),
                runs: ms(row.get(2)?),
                schedules: ms(row.get(3)?),
                usage: ms(row.get(4)?),
                agent_bindings: ms(row.get(5)?),
                ..census
            })
        },
    )
}

impl SqliteBackend {
    /// Runs a `DELETE … < ?1` with `before_ms` (what it does: `what`): how many rows went.
    fn delete_before(
        &self,
        what: &'static str,
        statement: &'static str,
        before_ms: u64,
    ) -> StoreFuture<'static, usize> {
        self.decide(what, move |tx| {
            Ok(Ok(tx
                .prepare_cached(statement)?
                .execute([ms_to_sql(before_ms)])?))
        })
    }

    /// Runs `work` in a transaction of its own on the writer's thread: committed when it
    /// answers `Ok(Ok(_))`, rolled back otherwise.
    pub(crate) fn decide<T: Send + 'static>(
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
    fn summaries_after(
        &self,
        after: Option<entity::Snowflake>,
        sessions: usize,
    ) -> StoreFuture<'_, Vec<Summary>> {
        self.read("summaries", move |conn, _| {
            conn.prepare_cached(&format!(
                "SELECT {SUMMARY_COLUMNS} FROM summaries WHERE session_id IN (
                     SELECT DISTINCT session_id FROM summaries
                     WHERE ?1 IS NULL OR session_id > ?1 ORDER BY session_id LIMIT ?2)
                 ORDER BY session_id, created_ms, seq"
            ))?
            .query_map(
                params![after.map(to_sql), limit(sessions)],
                summary_from_row,
            )?
            .collect()
        })
    }

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

/// The runs table (issues 23, 26): `seq` is the queue place (AUTOINCREMENT: never reused).
pub(crate) const SCHEMA_RUNS: &str = "
CREATE TABLE IF NOT EXISTS runs (
    seq INTEGER PRIMARY KEY AUTOINCREMENT,
    id TEXT NOT NULL UNIQUE,
    session_key TEXT NOT NULL,
    agent TEXT NOT NULL,
    trigger_ref TEXT NOT NULL,
    requested_by TEXT,
    parent_run TEXT,
    state TEXT NOT NULL,
    node TEXT,
    lease_until_ms INTEGER,
    abort_requested INTEGER NOT NULL DEFAULT 0,
    enqueued_ms INTEGER NOT NULL,
    started_ms INTEGER,
    finished_ms INTEGER,
    final_text TEXT,
    usage TEXT
);
CREATE INDEX IF NOT EXISTS runs_open ON runs (session_key, seq)
    WHERE state IN ('queued', 'running');
CREATE INDEX IF NOT EXISTS runs_by_session ON runs (session_key, seq);
CREATE INDEX IF NOT EXISTS runs_ended ON runs (finished_ms)
    WHERE state NOT IN ('queued', 'running');
";

const RUN_COLUMNS: &str = "seq, id, session_key, agent, trigger_ref, requested_by, parent_run, \
    state, node, lease_until_ms, abort_requested, enqueued_ms, started_ms, finished_ms, final_text, \
    usage";

/// Step 17: each run's usage (issue 23 §4), one JSON column; added when missing.
pub(crate) const SCHEMA_RUN_USAGE: &str = "ALTER TABLE runs ADD COLUMN usage TEXT;";

fn opt_ms(value: Option<i64>) -> Option<u64> {
    value.map(ms)
}

fn run_from_row(row: &Row<'_>) -> rusqlite::Result<Run> {
    let state: String = row.get(7)?;
    Ok(Run {
        seq: ms(row.get(0)?),
        id: row.get(1)?,
        session: row.get(2)?,
        agent: row.get(3)?,
        trigger: row.get(4)?,
        requested_by: row.get(5)?,
        parent_run: row.get(6)?,
        state: state.parse().map_err(|err| bad_row("run state", err))?,
        node: row.get(8)?,
        lease_until_ms: opt_ms(row.get(9)?),
        abort_requested: row.get(10)?,
        enqueued_ms: ms(row.get(11)?),
        started_ms: opt_ms(row.get(12)?),
        finished_ms: opt_ms(row.get(13)?),
        final_text: row.get(14)?,
        usage: row
            .get::<_, Option<String>>(15)?
            .as_deref()
            .and_then(RunUsage::from_text),
    })
}

fn run_by(
    conn: &Connection,
    column: &str,
    value: &dyn rusqlite::ToSql,
) -> rusqlite::Result<Option<Run>> {
    conn.prepare_cached(&format!(
        "SELECT {RUN_COLUMNS} FROM runs WHERE {column} = ?1"
    ))?
    .query_row([value], run_from_row)
    .optional()
}

/// Keeps a run as it stands, at its own place (an import) or at the next one (`seq` left
/// out); a run whose id or place is kept already is skipped. The place it took, if kept.
fn insert_run(tx: &Transaction<'_>, seq: Option<u64>, run: &Run) -> rusqlite::Result<Option<u64>> {
    let inserted = tx
        .prepare_cached(
            "INSERT OR IGNORE INTO runs (seq, id, session_key, agent, trigger_ref, requested_by,
                 parent_run, state, node, lease_until_ms, abort_requested, enqueued_ms,
                 started_ms, finished_ms, final_text, usage)
             VALUES (?1, ?2, ?3, ?4, ?5, ?6, ?7, ?8, ?9, ?10, ?11, ?12, ?13, ?14, ?15, ?16)",
        )?
        .execute(params![
            seq.map(ms_to_sql),
            run.id,
            run.session,
            run.agent,
            run.trigger,
            run.requested_by,
            run.parent_run,
            run.state.as_str(),
            run.node,
            run.lease_until_ms.map(ms_to_sql),
            run.abort_requested,
            ms_to_sql(run.enqueued_ms),
            run.started_ms.map(ms_to_sql),
            run.finished_ms.map(ms_to_sql),
            run.final_text,
            run.usage.map(|usage| usage.to_text())
        ])?;
    Ok((inserted > 0).then(|| ms(tx.last_insert_rowid())))
}

/// Keeps a run found new (no run of its id is kept) at the queue's next place; the run as
/// kept.
fn insert_new_run(tx: &Transaction<'_>, mut run: Run) -> rusqlite::Result<Result<Run, StoreError>> {
    Ok(match insert_run(tx, None, &run)? {
        Some(seq) => {
            run.seq = seq;
            Ok(run)
        }
        None => Err(duplicate_run(&run.id)),
    })
}

impl RunStore for SqliteBackend {
    fn import_runs(&self, runs: Vec<Run>) -> StoreFuture<'_, ()> {
        self.decide("import runs", move |tx| {
            for run in &runs {
                insert_run(tx, Some(run.seq), run)?;
            }
            Ok(Ok(()))
        })
    }

    fn enqueue_run(&self, run: NewRun, max_queued_per_session: usize) -> StoreFuture<'_, Enqueued> {
        self.decide("queue a run", move |tx| {
            if run_by(tx, "id", &run.id)?.is_some() {
                return Ok(Err(duplicate_run(&run.id)));
            }
            let (queued, running): (i64, i64) = tx
                .prepare_cached(
                    "SELECT coalesce(sum(state = 'queued'), 0), coalesce(sum(state = 'running'), 0)
                     FROM runs WHERE session_key = ?1 AND state IN ('queued', 'running')",
                )?
                .query_row([&run.session], |row| Ok((row.get(0)?, row.get(1)?)))?;
            let waiting =
                switchboard_store::waiting_runs(ms(queued) as usize, ms(running) as usize);
            if waiting >= max_queued_per_session {
                return Ok(Ok(Enqueued::Full { queued: waiting }));
            }
            let run = insert_new_run(tx, Run::queued(run, 0))?;
            Ok(run.map(|run| Enqueued::Queued(Box::new(run))))
        })
    }

    fn claim_next_run(&self, lease: Lease) -> StoreFuture<'_, Option<Run>> {
        self.decide("claim a run", move |tx| {
            let head: Option<i64> = tx
                .prepare_cached(
                    "SELECT seq FROM runs r WHERE state = 'queued' AND NOT EXISTS (
                         SELECT 1 FROM runs o WHERE o.session_key = r.session_key
                           AND o.state IN ('queued', 'running') AND o.seq < r.seq)
                     ORDER BY seq LIMIT 1",
                )?
                .query_row([], |row| row.get(0))
                .optional()?;
            let Some(seq) = head else {
                return Ok(Ok(None));
            };
            tx.prepare_cached(
                "UPDATE runs SET state = 'running', node = ?2, lease_until_ms = ?3, started_ms = ?4
                 WHERE seq = ?1",
            )?
            .execute(params![
                seq,
                lease.node,
                ms_to_sql(lease.until_ms()),
                ms_to_sql(lease.now_ms)
            ])?;
            Ok(Ok(run_by(tx, "seq", &seq)?))
        })
    }

    fn start_run(&self, run: NewRun, lease: Lease) -> StoreFuture<'_, Run> {
        self.decide("start a run", move |tx| {
            if run_by(tx, "id", &run.id)?.is_some() {
                return Ok(Err(duplicate_run(&run.id)));
            }
            insert_new_run(tx, Run::started(run, 0, lease))
        })
    }

    fn join_runs(&self, join: RunJoin) -> StoreFuture<'_, Vec<Run>> {
        let (held, node, run_ids, now_ms) = (join.held, join.node, join.run_ids, join.now_ms);
        self.decide("join runs", move |tx| {
            let head: Option<(String, Option<i64>)> = tx
                .prepare_cached(
                    "SELECT session_key, lease_until_ms FROM runs
                     WHERE id = ?1 AND node = ?2 AND state = 'running'",
                )?
                .query_row(params![held, node], |row| Ok((row.get(0)?, row.get(1)?)))
                .optional()?;
            let Some((session, lease)) = head else {
                return Ok(Ok(Vec::new()));
            };
            let mut joined = Vec::new();
            for id in &run_ids {
                let changed = tx
                    .prepare_cached(
                        "UPDATE runs SET state = 'running', node = ?2, lease_until_ms = ?3,
                             started_ms = ?4
                         WHERE id = ?1 AND session_key = ?5 AND state = 'queued'",
                    )?
                    .execute(params![id, node, lease, ms_to_sql(now_ms), session])?;
                if changed > 0 {
                    joined.extend(run_by(tx, "id", id)?);
                }
            }
            joined.sort_by_key(|r| r.seq);
            Ok(Ok(joined))
        })
    }

    fn heartbeat_run(&self, run_id: &str, lease: Lease) -> StoreFuture<'_, Heartbeat> {
        let run_id = run_id.to_owned();
        self.decide("renew a run's lease", move |tx| {
            let until_ms = lease.until_ms();
            let held: Option<bool> = tx
                .prepare_cached(
                    "UPDATE runs SET lease_until_ms = ?3
                     WHERE id = ?1 AND node = ?2 AND state = 'running'
                     RETURNING abort_requested",
                )?
                .query_row(params![run_id, lease.node, ms_to_sql(until_ms)], |row| {
                    row.get(0)
                })
                .optional()?;
            Ok(Ok(held.map_or(Heartbeat::Lost, |abort_requested| {
                Heartbeat::Held {
                    until_ms,
                    abort_requested,
                }
            })))
        })
    }

    fn finish_run(&self, run_id: &str, node: &str, end: RunEnd) -> StoreFuture<'_, Option<Run>> {
        let (run_id, node) = (run_id.to_owned(), node.to_owned());
        self.decide("end a run", move |tx| {
            if let Err(refused) = check_end(&end) {
                return Ok(Err(refused));
            }
            let changed = tx
                .prepare_cached(
                    "UPDATE runs SET state = ?3, final_text = ?4, finished_ms = ?5,
                         lease_until_ms = NULL, usage = ?6
                     WHERE id = ?1 AND node = ?2 AND state = 'running'",
                )?
                .execute(params![
                    run_id,
                    node,
                    end.state.as_str(),
                    end.final_text,
                    ms_to_sql(end.at_ms),
                    end.usage.map(|usage| usage.to_text())
                ])?;
            if changed == 0 {
                return Ok(Ok(None));
            }
            Ok(Ok(run_by(tx, "id", &run_id)?))
        })
    }

    fn request_abort(&self, run_id: &str, at_ms: u64) -> StoreFuture<'_, Option<Run>> {
        let run_id = run_id.to_owned();
        self.decide("abort a run", move |tx| {
            tx.prepare_cached(
                "UPDATE runs SET
                     abort_requested = abort_requested OR state IN ('queued', 'running'),
                     finished_ms = CASE WHEN state = 'queued' THEN ?2 ELSE finished_ms END,
                     state = CASE WHEN state = 'queued' THEN 'aborted' ELSE state END
                 WHERE id = ?1",
            )?
            .execute(params![run_id, ms_to_sql(at_ms)])?;
            Ok(Ok(run_by(tx, "id", &run_id)?))
        })
    }

    fn interrupt_expired_runs(&self, now_ms: u64, count: usize) -> StoreFuture<'_, Vec<Run>> {
        self.decide("interrupt runs", move |tx| {
            let runs: Vec<Run> = tx
                .prepare_cached(&format!(
                    "UPDATE runs SET state = 'interrupted', finished_ms = ?1, lease_until_ms = NULL
                     WHERE seq IN (SELECT seq FROM runs WHERE state = 'running'
                                   AND lease_until_ms < ?1 ORDER BY seq LIMIT ?2)
                       AND state = 'running' AND lease_until_ms < ?1
                     RETURNING {RUN_COLUMNS}"
                ))?
                .query_map(params![ms_to_sql(now_ms), limit(count)], run_from_row)?
                .collect::<rusqlite::Result<_>>()?;
            let mut runs = runs;
            runs.sort_by_key(|r| r.seq);
            Ok(Ok(runs))
        })
    }

    fn rerun_run(&self, run_id: &str, trigger: String) -> StoreFuture<'_, Option<Run>> {
        let run_id = run_id.to_owned();
        self.decide("rerun a run", move |tx| {
            let changed = tx
                .prepare_cached(
                    "UPDATE runs SET state = 'queued', trigger_ref = ?2, node = NULL,
                         lease_until_ms = NULL, abort_requested = 0, started_ms = NULL,
                         finished_ms = NULL, final_text = NULL, usage = NULL
                     WHERE id = ?1 AND state = 'interrupted' AND NOT EXISTS (
                         SELECT 1 FROM runs o WHERE o.session_key = runs.session_key
                           AND o.seq > runs.seq AND o.started_ms >= runs.finished_ms)",
                )?
                .execute(params![run_id, trigger])?;
            if changed == 0 {
                return Ok(Ok(None));
            }
            Ok(Ok(run_by(tx, "id", &run_id)?))
        })
    }

    fn run(&self, run_id: &str) -> StoreFuture<'_, Option<Run>> {
        let run_id = run_id.to_owned();
        self.read("a run", move |conn, _| run_by(conn, "id", &run_id))
    }

    fn runs(&self, filter: RunFilter) -> StoreFuture<'_, Vec<Run>> {
        self.read("runs", move |conn, _| {
            conn.prepare_cached(&format!(
                "SELECT {RUN_COLUMNS} FROM runs
                 WHERE (?1 IS NULL OR session_key = ?1) AND (?2 IS NULL OR agent = ?2)
                   AND (?3 IS NULL OR state = ?3) AND (?4 IS NULL OR parent_run = ?4)
                   AND (?5 IS NULL OR seq < ?5)
                 ORDER BY seq DESC LIMIT ?6"
            ))?
            .query_map(
                params![
                    filter.session,
                    filter.agent,
                    filter.state.map(RunState::as_str),
                    filter.parent_run,
                    filter.before_seq.map(ms_to_sql),
                    limit(filter.capped_limit())
                ],
                run_from_row,
            )?
            .collect()
        })
    }

    fn prune_runs(&self, before_ms: u64) -> StoreFuture<'_, usize> {
        self.delete_before("forget old runs", DELETE_ENDED_RUNS, before_ms)
    }
}

/// The schedules and their receipts (issue 26).
pub(crate) const SCHEMA_SCHEDULES: &str = "
CREATE TABLE IF NOT EXISTS schedules (
    id TEXT PRIMARY KEY,
    session_id INTEGER NOT NULL,
    agent TEXT,
    prompt TEXT NOT NULL,
    spec TEXT NOT NULL,
    created_by TEXT NOT NULL,
    created_ms INTEGER NOT NULL,
    next_due_ms INTEGER,
    last_fired_ms INTEGER,
    status TEXT NOT NULL,
    consecutive_failures INTEGER NOT NULL
) WITHOUT ROWID;
CREATE TABLE IF NOT EXISTS schedule_receipts (
    seq INTEGER PRIMARY KEY AUTOINCREMENT,
    schedule_id TEXT NOT NULL,
    due_ms INTEGER NOT NULL,
    run_id TEXT,
    outcome TEXT NOT NULL,
    message_ids TEXT NOT NULL,
    error TEXT,
    at_ms INTEGER NOT NULL,
    detail TEXT
);
CREATE INDEX IF NOT EXISTS receipts_by_schedule ON schedule_receipts (schedule_id, seq);
";

const SCHEDULE_COLUMNS: &str = "id, session_id, agent, prompt, spec, created_by, created_ms, \
    next_due_ms, last_fired_ms, status, consecutive_failures";

fn schedule_from_row(row: &Row<'_>) -> rusqlite::Result<Schedule> {
    let spec: String = row.get(4)?;
    Ok(Schedule {
        id: row.get(0)?,
        session_id: from_sql(row.get(1)?),
        agent: row.get(2)?,
        prompt: row.get(3)?,
        spec: serde_json::from_str(&spec).map_err(|err| bad_row("schedule", err))?,
        created_by: row.get(5)?,
        created_ms: ms(row.get(6)?),
        next_due_ms: opt_ms(row.get(7)?),
        last_fired_ms: opt_ms(row.get(8)?),
        status: {
            let status: String = row.get(9)?;
            ScheduleStatus::parse(&status)
                .ok_or_else(|| bad_row("schedule", format!("status {status}")))?
        },
        consecutive_failures: u32::try_from(row.get::<_, i64>(10)?).unwrap_or(u32::MAX),
    })
}

fn schedule_by_id(conn: &Connection, id: &str) -> rusqlite::Result<Option<Schedule>> {
    conn.prepare_cached(&format!(
        "SELECT {SCHEDULE_COLUMNS} FROM schedules WHERE id = ?1"
    ))?
    .query_row([id], schedule_from_row)
    .optional()
}

fn receipt_from_row(row: &Row<'_>) -> rusqlite::Result<Receipt> {
    let outcome: String = row.get(3)?;
    let message_ids: String = row.get(4)?;
    Ok(Receipt {
        schedule_id: row.get(0)?,
        due_ms: ms(row.get(1)?),
        run_id: row.get(2)?,
        outcome: FiringOutcome::parse(&outcome)
            .ok_or_else(|| bad_row("receipt", format!("outcome {outcome}")))?,
        message_ids: serde_json::from_str(&message_ids).map_err(|err| bad_row("receipt", err))?,
        error: row.get(5)?,
        at_ms: ms(row.get(6)?),
        detail: row.get(7)?,
    })
}

fn to_json<T: serde::Serialize>(value: &T) -> rusqlite::Result<String> {
    serde_json::to_string(value).map_err(|err| rusqlite::Error::ToSqlConversionFailure(err.into()))
}

/// Writes a schedule's status and failures in a row.
fn save_health(tx: &Transaction<'_>, schedule: &Schedule) -> rusqlite::Result<()> {
    tx.prepare_cached("UPDATE schedules SET status = ?2, consecutive_failures = ?3 WHERE id = ?1")?
        .execute(params![
            schedule.id,
            schedule.status.as_str(),
            i64::from(schedule.consecutive_failures)
        ])?;
    Ok(())
}

impl AgentBindingStore for SqliteBackend {
    fn bind_agent(&self, session_id: Snowflake, agent: Option<String>) -> StoreFuture<'_, ()> {
        self.decide("keep a session's agent", move |tx| {
            match agent {
                Some(agent) => tx
                    .prepare_cached(
                        "INSERT INTO agent_bindings (session_id, agent) VALUES (?1, ?2)
                         ON CONFLICT (session_id) DO UPDATE SET agent = excluded.agent",
                    )?
                    .execute(params![to_sql(session_id), agent])?,
                None => tx
                    .prepare_cached("DELETE FROM agent_bindings WHERE session_id = ?1")?
                    .execute([to_sql(session_id)])?,
            };
            Ok(Ok(()))
        })
    }

    fn bound_agent(&self, session_id: Snowflake) -> StoreFuture<'_, Option<String>> {
        self.read("a session's agent", move |conn, _| {
            conn.prepare_cached("SELECT agent FROM agent_bindings WHERE session_id = ?1")?
                .query_row([to_sql(session_id)], |row| row.get(0))
                .optional()
        })
    }

    fn agent_bindings(&self) -> StoreFuture<'_, Vec<AgentBinding>> {
        self.read("the agent bindings", |conn, _| {
            conn.prepare_cached("SELECT session_id, agent FROM agent_bindings ORDER BY session_id")?
                .query_map([], |row| {
                    Ok(AgentBinding {
                        session_id: from_sql(row.get(0)?),
                        agent: row.get(1)?,
                    })
                })?
                .collect()
        })
    }
}

impl ScheduleStore for SqliteBackend {
    fn save_schedule(&self, schedule: Schedule) -> StoreFuture<'_, ()> {
        self.decide("keep a schedule", move |tx| {
            tx.prepare_cached(
                "INSERT INTO schedules (id, session_id, agent, prompt, spec, created_by, created_ms,
                     next_due_ms, last_fired_ms, status, consecutive_failures)
                 VALUES (?1, ?2, ?3, ?4, ?5, ?6, ?7, ?8, ?9, ?10, ?11)
                 ON CONFLICT (id) DO UPDATE SET session_id = excluded.session_id,
                     agent = excluded.agent, prompt = excluded.prompt, spec = excluded.spec,
                     created_by = excluded.created_by, created_ms = excluded.created_ms,
                     next_due_ms = excluded.next_due_ms, status = excluded.status,
                     consecutive_failures = excluded.consecutive_failures,
                     last_fired_ms = CASE
                         WHEN schedules.last_fired_ms IS NULL THEN excluded.last_fired_ms
                         WHEN excluded.last_fired_ms IS NULL THEN schedules.last_fired_ms
                         ELSE max(schedules.last_fired_ms, excluded.last_fired_ms) END",
            )?
            .execute(params![
                schedule.id,
                to_sql(schedule.session_id),
                schedule.agent,
                schedule.prompt,
                to_json(&schedule.spec)?,
                schedule.created_by,
                ms_to_sql(schedule.created_ms),
                schedule.next_due_ms.map(ms_to_sql),
                schedule.last_fired_ms.map(ms_to_sql),
                schedule.status.as_str(),
                i64::from(schedule.consecutive_failures)
            ])?;
            Ok(Ok(()))
        })
    }

    fn schedule(&self, id: &str) -> StoreFuture<'_, Option<Schedule>> {
        let id = id.to_owned();
        self.read("a schedule", move |conn, _| schedule_by_id(conn, &id))
    }

    fn schedules(&self, after: Option<String>, count: usize) -> StoreFuture<'_, Vec<Schedule>> {
        self.read("schedules", move |conn, _| {
            conn.prepare_cached(&format!(
                "SELECT {SCHEDULE_COLUMNS} FROM schedules WHERE ?1 IS NULL OR id > ?1
                 ORDER BY id LIMIT ?2"
            ))?
            .query_map(params![after, limit(count)], schedule_from_row)?
            .collect()
        })
    }

    fn delete_schedule(&self, id: &str) -> StoreFuture<'_, bool> {
        let id = id.to_owned();
        self.decide("remove a schedule", move |tx| {
            tx.prepare_cached("DELETE FROM schedule_receipts WHERE schedule_id = ?1")?
                .execute([&id])?;
            let gone = tx
                .prepare_cached("DELETE FROM schedules WHERE id = ?1")?
                .execute([&id])?;
            Ok(Ok(gone > 0))
        })
    }

    fn claim_firing(&self, claim: FiringClaim) -> StoreFuture<'_, Firing> {
        self.decide("claim a firing", move |tx| {
            let won = tx
                .prepare_cached(
                    "UPDATE schedules SET last_fired_ms = ?2, next_due_ms = ?3
                     WHERE id = ?1 AND status = 'active'
                       AND (last_fired_ms IS NULL OR last_fired_ms < ?2)",
                )?
                .execute(params![
                    claim.schedule_id,
                    ms_to_sql(claim.due_ms),
                    claim.next_due_ms.map(ms_to_sql)
                ])?;
            Ok(match schedule_by_id(tx, &claim.schedule_id)? {
                Some(schedule) if won > 0 => Ok(Firing::Won(schedule)),
                now => switchboard_store::lost_firing(&claim.schedule_id, now),
            })
        })
    }

    fn record_receipt(&self, receipt: Receipt, after: AfterFiring) -> StoreFuture<'_, Schedule> {
        self.decide("keep a receipt", move |tx| {
            let Some(mut schedule) = schedule_by_id(tx, &receipt.schedule_id)? else {
                return Ok(Err(unknown_schedule(&receipt.schedule_id)));
            };
            count_firing(&mut schedule, &receipt, after);
            save_health(tx, &schedule)?;
            tx.prepare_cached(
                "INSERT INTO schedule_receipts (schedule_id, due_ms, run_id, outcome, message_ids,
                     error, at_ms, detail)
                 VALUES (?1, ?2, ?3, ?4, ?5, ?6, ?7, ?8)",
            )?
            .execute(params![
                receipt.schedule_id,
                ms_to_sql(receipt.due_ms),
                receipt.run_id,
                receipt.outcome.as_str(),
                to_json(&receipt.message_ids)?,
                receipt.error,
                ms_to_sql(receipt.at_ms),
                receipt.detail
            ])?;
            tx.prepare_cached(
                "DELETE FROM schedule_receipts WHERE schedule_id = ?1 AND seq NOT IN (
                     SELECT seq FROM schedule_receipts WHERE schedule_id = ?1
                     ORDER BY seq DESC LIMIT ?2)",
            )?
            .execute(params![
                receipt.schedule_id,
                limit(RECEIPTS_KEPT_PER_SCHEDULE)
            ])?;
            Ok(Ok(schedule))
        })
    }

    fn receipts(&self, schedule_id: &str, count: usize) -> StoreFuture<'_, Vec<Receipt>> {
        let id = schedule_id.to_owned();
        self.read("receipts", move |conn, _| {
            conn.prepare_cached(
                "SELECT schedule_id, due_ms, run_id, outcome, message_ids, error, at_ms, detail
                 FROM schedule_receipts WHERE schedule_id = ?1 ORDER BY seq DESC LIMIT ?2",
            )?
            .query_map(params![id, limit(count)], receipt_from_row)?
            .collect()
        })
    }

    fn set_schedule_status(
        &self,
        id: &str,
        status: ScheduleStatus,
    ) -> StoreFuture<'_, Option<Schedule>> {
        let id = id.to_owned();
        self.decide("set a schedule's status", move |tx| {
            let Some(mut schedule) = schedule_by_id(tx, &id)? else {
                return Ok(Ok(None));
            };
            set_status(&mut schedule, status);
            save_health(tx, &schedule)?;
            Ok(Ok(Some(schedule)))
        })
    }
}

/// Model usage rows (issue 26).
pub(crate) const SCHEMA_USAGE: &str = "
CREATE TABLE IF NOT EXISTS usage (
    seq INTEGER PRIMARY KEY AUTOINCREMENT,
    run_id TEXT NOT NULL,
    agent TEXT NOT NULL,
    user_key TEXT,
    session_key TEXT,
    guild_key TEXT,
    model TEXT NOT NULL,
    tokens_in INTEGER NOT NULL,
    tokens_out INTEGER NOT NULL,
    micro_usd INTEGER NOT NULL,
    estimated INTEGER NOT NULL,
    at_ms INTEGER NOT NULL
);
CREATE INDEX IF NOT EXISTS usage_by_time ON usage (at_ms);
CREATE INDEX IF NOT EXISTS usage_by_user ON usage (user_key, at_ms);
CREATE INDEX IF NOT EXISTS usage_by_session ON usage (session_key, at_ms);
CREATE INDEX IF NOT EXISTS usage_by_guild ON usage (guild_key, at_ms);
CREATE INDEX IF NOT EXISTS usage_by_agent ON usage (agent, at_ms);
";

fn totals_from_row(row: &Row<'_>, from: usize) -> rusqlite::Result<UsageTotals> {
    Ok(UsageTotals {
        calls: ms(row.get(from)?),
        tokens_in: ms(row.get(from + 1)?),
        tokens_out: ms(row.get(from + 2)?),
        micro_usd: ms(row.get(from + 3)?),
        estimated: row.get(from + 4)?,
    })
}

const SUMS: &str = "count(*), coalesce(sum(tokens_in), 0), coalesce(sum(tokens_out), 0), \
    coalesce(sum(micro_usd), 0), coalesce(max(estimated), 0)";

fn usage_from_row(row: &Row<'_>) -> rusqlite::Result<KeptUsage> {
    Ok(KeptUsage {
        id: ms(row.get(0)?),
        row: UsageRow {
            charge: UsageCharge {
                run_id: row.get(1)?,
                agent: row.get(2)?,
                user: row.get(3)?,
                session: row.get(4)?,
                guild: row.get(5)?,
                model: row.get(6)?,
            },
            tokens_in: ms(row.get(7)?),
            tokens_out: ms(row.get(8)?),
            micro_usd: ms(row.get(9)?),
            estimated: row.get(10)?,
            at_ms: ms(row.get(11)?),
        },
    })
}

const INSERT_USAGE: &str = "INSERT OR IGNORE INTO usage (seq, run_id, agent, user_key, \
    session_key, guild_key, model, tokens_in, tokens_out, micro_usd, estimated, at_ms)
    VALUES (?1, ?2, ?3, ?4, ?5, ?6, ?7, ?8, ?9, ?10, ?11, ?12)";

fn insert_usage(tx: &Transaction<'_>, id: Option<u64>, row: &UsageRow) -> rusqlite::Result<()> {
    let row = row.clone().capped();
    tx.prepare_cached(INSERT_USAGE)?.execute(params![
        id.map(ms_to_sql),
        row.charge.run_id,
        row.charge.agent,
        row.charge.user,
        row.charge.session,
        row.charge.guild,
        row.charge.model,
        ms_to_sql(row.tokens_in),
        ms_to_sql(row.tokens_out),
        ms_to_sql(row.micro_usd),
        row.estimated,
        ms_to_sql(row.at_ms)
    ])?;
    Ok(())
}

impl UsageStore for SqliteBackend {
    fn usage_after(&self, after_id: u64, count: usize) -> StoreFuture<'_, Vec<KeptUsage>> {
        self.read("usage", move |conn, _| {
            conn.prepare_cached(
                "SELECT seq, run_id, agent, user_key, session_key, guild_key, model, tokens_in,
                     tokens_out, micro_usd, estimated, at_ms
                 FROM usage WHERE seq > ?1 ORDER BY seq LIMIT ?2",
            )?
            .query_map(params![ms_to_sql(after_id), limit(count)], usage_from_row)?
            .collect()
        })
    }

    fn import_usage(&self, rows: Vec<KeptUsage>) -> StoreFuture<'_, ()> {
        self.decide("import usage", move |tx| {
            for kept in &rows {
                insert_usage(tx, Some(kept.id), &kept.row)?;
            }
            Ok(Ok(()))
        })
    }

    fn record_usage(&self, row: UsageRow) -> StoreFuture<'_, ()> {
        self.decide("keep usage", move |tx| {
            insert_usage(tx, None, &row)?;
            Ok(Ok(()))
        })
    }

    fn usage_sum(
        &self,
        subject: UsageSubject,
        since_ms: u64,
        until_ms: u64,
    ) -> StoreFuture<'_, UsageTotals> {
        self.read("usage", move |conn, _| {
            let (column, value) = match subject {
                UsageSubject::User(key) => ("user_key", key),
                UsageSubject::Session(key) => ("session_key", key),
                UsageSubject::Guild(key) => ("guild_key", key),
                UsageSubject::Agent(name) => ("agent", name),
            };
            conn.prepare_cached(&format!(
                "SELECT {SUMS} FROM usage WHERE {column} = ?1 AND at_ms >= ?2 AND at_ms < ?3"
            ))?
            .query_row(
                params![value, ms_to_sql(since_ms), ms_to_sql(until_ms)],
                |row| totals_from_row(row, 0),
            )
        })
    }

    fn usage_report(&self, query: UsageQuery) -> StoreFuture<'_, Vec<UsageGroup>> {
        self.read("usage", move |conn, _| {
            let key = match query.by {
                UsageBy::User => "user_key",
                UsageBy::Session => "session_key",
                UsageBy::Guild => "guild_key",
                UsageBy::Agent => "agent",
                UsageBy::Day => "strftime('%Y-%m-%d', at_ms / 1000, 'unixepoch')",
            };
            // NULL keys sort first, as `None` does.
            conn.prepare_cached(&format!(
                "SELECT {key} AS k, {SUMS} FROM usage WHERE at_ms >= ?1 AND at_ms < ?2
                 GROUP BY k
                 ORDER BY coalesce(sum(tokens_in), 0) + coalesce(sum(tokens_out), 0) DESC, k
                 LIMIT ?3"
            ))?
            .query_map(
                params![
                    ms_to_sql(query.since_ms),
                    ms_to_sql(query.until_ms),
                    limit(query.limit.min(UsageQuery::MAX_LIMIT))
                ],
                |row| {
                    Ok(UsageGroup {
                        key: row.get(0)?,
                        totals: totals_from_row(row, 1)?,
                    })
                },
            )?
            .collect()
        })
    }

    fn prune_usage(&self, before_ms: u64) -> StoreFuture<'_, usize> {
        self.delete_before("forget old usage", DELETE_OLD_USAGE, before_ms)
    }
}

/// The cluster tables (issue 23). One SQLite file is one node's, but the timers that fire
/// "once cluster-wide" and the shard bookkeeping work the same on it.
pub(crate) const SCHEMA_CLUSTER: &str = "
CREATE TABLE IF NOT EXISTS cluster_nodes (
    node_id TEXT PRIMARY KEY,
    started_ms INTEGER NOT NULL,
    address TEXT,
    last_seen_ms INTEGER NOT NULL
) WITHOUT ROWID;
CREATE TABLE IF NOT EXISTS shard_leases (
    shard INTEGER PRIMARY KEY,
    node_id TEXT NOT NULL,
    until_ms INTEGER NOT NULL
);
CREATE TABLE IF NOT EXISTS identify_slots (
    bucket INTEGER PRIMARY KEY,
    next_ms INTEGER NOT NULL
);
CREATE TABLE IF NOT EXISTS once_keys (
    key TEXT PRIMARY KEY,
    until_ms INTEGER NOT NULL
) WITHOUT ROWID;
CREATE INDEX IF NOT EXISTS once_keys_by_expiry ON once_keys (until_ms);
";

fn lease_from_row(row: &Row<'_>) -> rusqlite::Result<ShardLease> {
    Ok(ShardLease {
        shard: u32::try_from(row.get::<_, i64>(0)?).unwrap_or(u32::MAX),
        node_id: row.get(1)?,
        until_ms: ms(row.get(2)?),
    })
}

impl ClusterStore for SqliteBackend {
    fn node_heartbeat(&self, beat: NodeBeat) -> StoreFuture<'_, ()> {
        self.decide("record a heartbeat", move |tx| {
            tx.prepare_cached(DELETE_SILENT_NODES)?
                .execute([ms_to_sql(beat.at_ms.saturating_sub(NODES_KEPT_MS))])?;
            tx.prepare_cached(
                "INSERT INTO cluster_nodes (node_id, started_ms, address, last_seen_ms)
                 VALUES (?1, ?2, ?3, ?4)
                 ON CONFLICT (node_id) DO UPDATE SET started_ms = excluded.started_ms,
                     address = excluded.address, last_seen_ms = excluded.last_seen_ms",
            )?
            .execute(params![
                beat.node_id,
                ms_to_sql(beat.started_ms),
                beat.address,
                ms_to_sql(beat.at_ms)
            ])?;
            Ok(Ok(()))
        })
    }

    fn nodes(&self, seen_since_ms: u64, count: usize) -> StoreFuture<'_, Vec<Node>> {
        self.read("nodes", move |conn, _| {
            conn.prepare_cached(
                "SELECT node_id, started_ms, address, last_seen_ms FROM cluster_nodes
                 WHERE last_seen_ms >= ?1 ORDER BY node_id LIMIT ?2",
            )?
            .query_map(params![ms_to_sql(seen_since_ms), limit(count)], |row| {
                Ok(Node {
                    node_id: row.get(0)?,
                    started_ms: ms(row.get(1)?),
                    address: row.get(2)?,
                    last_seen_ms: ms(row.get(3)?),
                })
            })?
            .collect()
        })
    }

    fn acquire_shard(&self, shard: u32, lease: Lease) -> StoreFuture<'_, ShardGrant> {
        let (now_ms, until_ms, node) = (lease.now_ms, lease.until_ms(), lease.node);
        self.decide("lease a shard", move |tx| {
            tx.prepare_cached(
                "INSERT INTO shard_leases (shard, node_id, until_ms) VALUES (?1, ?2, ?3)
                 ON CONFLICT (shard) DO UPDATE SET node_id = excluded.node_id,
                     until_ms = excluded.until_ms
                 WHERE shard_leases.node_id = excluded.node_id OR shard_leases.until_ms <= ?4",
            )?
            .execute(params![
                i64::from(shard),
                node,
                ms_to_sql(until_ms),
                ms_to_sql(now_ms)
            ])?;
            let lease = tx
                .prepare_cached(
                    "SELECT shard, node_id, until_ms FROM shard_leases WHERE shard = ?1",
                )?
                .query_row([i64::from(shard)], lease_from_row)?;
            Ok(Ok(if lease.node_id == node && lease.until_ms == until_ms {
                ShardGrant::Held { until_ms }
            } else {
                ShardGrant::Taken(lease)
            }))
        })
    }

    fn release_shard(&self, shard: u32, node: &str) -> StoreFuture<'_, bool> {
        let node = node.to_owned();
        self.decide("release a shard", move |tx| {
            let gone = tx
                .prepare_cached("DELETE FROM shard_leases WHERE shard = ?1 AND node_id = ?2")?
                .execute(params![i64::from(shard), node])?;
            Ok(Ok(gone > 0))
        })
    }

    fn shard_leases(&self) -> StoreFuture<'_, Vec<ShardLease>> {
        self.read("shard leases", |conn, _| {
            conn.prepare_cached("SELECT shard, node_id, until_ms FROM shard_leases ORDER BY shard")?
                .query_map([], lease_from_row)?
                .collect()
        })
    }

    fn take_identify_slot(
        &self,
        bucket: u32,
        now_ms: u64,
        spacing_ms: u64,
    ) -> StoreFuture<'_, u64> {
        self.decide("reserve an IDENTIFY", move |tx| {
            let next: i64 = tx
                .prepare_cached(
                    // Saturating at the largest time an integer column holds.
                    "INSERT INTO identify_slots (bucket, next_ms)
                     VALUES (?1, min(?2, 9223372036854775807 - ?3) + ?3)
                     ON CONFLICT (bucket) DO UPDATE SET
                         next_ms = min(max(identify_slots.next_ms, ?2), 9223372036854775807 - ?3)
                                   + ?3
                     RETURNING next_ms",
                )?
                .query_row(
                    params![i64::from(bucket), ms_to_sql(now_ms), ms_to_sql(spacing_ms)],
                    |row| row.get(0),
                )?;
            Ok(Ok(ms(next).saturating_sub(spacing_ms)))
        })
    }

    fn once(&self, key: &str, now_ms: u64, ttl_ms: u64) -> StoreFuture<'_, bool> {
        let key = key.to_owned();
        self.decide("take a once key", move |tx| {
            tx.prepare_cached(DELETE_EXPIRED_ONCE_KEYS)?
                .execute([ms_to_sql(now_ms)])?;
            let taken = tx
                .prepare_cached(
                    "INSERT INTO once_keys (key, until_ms) VALUES (?1, ?2)
                     ON CONFLICT (key) DO NOTHING",
                )?
                .execute(params![key, ms_to_sql(now_ms.saturating_add(ttl_ms))])?;
            Ok(Ok(taken > 0))
        })
    }

    fn shard_count(&self) -> StoreFuture<'_, Option<u32>> {
        self.read("the shard count", |conn, _| {
            conn.prepare_cached("SELECT total FROM cluster_shard_count WHERE id = 0")?
                .query_row([], |row| row.get::<_, i64>(0))
                .optional()
                .map(|total| total.map(shard_total))
        })
    }

    fn raise_shard_count(&self, total: u32) -> StoreFuture<'_, u32> {
        self.decide("raise the shard count", move |tx| {
            let agreed: i64 = tx
                .prepare_cached(
                    "INSERT INTO cluster_shard_count (id, total) VALUES (0, ?1)
                     ON CONFLICT (id) DO UPDATE SET
                         total = max(cluster_shard_count.total, excluded.total)
                     RETURNING total",
                )?
                .query_row([i64::from(total)], |row| row.get(0))?;
            Ok(Ok(shard_total(agreed)))
        })
    }

    fn once_held(&self, key: &str, now_ms: u64) -> StoreFuture<'_, bool> {
        let key = key.to_owned();
        self.read("a once key", move |conn, _| {
            conn.prepare_cached("SELECT 1 FROM once_keys WHERE key = ?1 AND until_ms > ?2")?
                .query_row(params![key, ms_to_sql(now_ms)], |_| Ok(()))
                .optional()
                .map(|held| held.is_some())
        })
    }
}

/// A shard count as a column holds it (written from a `u32`; anything else reads as the
/// largest count).
fn shard_total(total: i64) -> u32 {
    u32::try_from(total).unwrap_or(u32::MAX)
}

/// The cluster's agreed shard count, one row (issue 23).
pub(crate) const SCHEMA_SHARD_COUNT: &str = "
CREATE TABLE IF NOT EXISTS cluster_shard_count (
    id INTEGER PRIMARY KEY CHECK (id = 0),
    total INTEGER NOT NULL
);
";
