//! The agent aggregates on PostgreSQL: memory (summaries, notes), runs, schedules, usage and
//! the cluster tables. Each call is one transaction on a pooled connection; a decision that
//! reads before it writes first takes a transaction-level advisory lock on what it decides
//! about (a note scope, the run queue, a schedule...), so concurrent callers on any node queue
//! there and each sees the one before it. Nothing here goes through the batched writer: these
//! are acknowledged changes, committed when their future resolves.

use deadpool_postgres::Transaction;
use entity::Snowflake;
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
    ScheduleStore, ShardGrant, StoreError, StoreFuture, UsageStore,
};
use tokio_postgres::Row;

use crate::error::from_pg;
use crate::pipeline::{p, Stmt};
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

/// `/agent set` bindings (issue 26). `IF NOT EXISTS`, so the step may be renumbered at a
/// merge without harm.
pub(crate) const SCHEMA_AGENT_BINDINGS: &str = "
CREATE TABLE IF NOT EXISTS agent_bindings (
    session_id bigint PRIMARY KEY,
    agent text NOT NULL
);
";

const DELETE_ENDED_RUNS: &str =
    "DELETE FROM runs WHERE state NOT IN ('queued', 'running') AND finished_ms < $1";
const DELETE_OLD_USAGE: &str = "DELETE FROM usage WHERE at_ms < $1";
const DELETE_EXPIRED_ONCE_KEYS: &str = "DELETE FROM once_keys WHERE until_ms <= $1";
const DELETE_SILENT_NODES: &str = "DELETE FROM cluster_nodes WHERE last_seen_ms < $1";

/// The first key of the advisory locks decisions take (the second names what is decided).
#[derive(Clone, Copy)]
#[repr(i32)]
enum Lock {
    NoteScope = 0x5342_0001,
    RunQueue = 0x5342_0002,
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

impl PgBackend {
    /// Runs a `DELETE … < $1` of `what` with `before_ms`: how many rows went.
    fn delete_before(
        &self,
        what: &'static str,
        statement: &'static str,
        before_ms: u64,
    ) -> StoreFuture<'_, usize> {
        in_transaction!(self, what, |shared, tx| async {
            let gone = tx
                .execute(statement, &[&ms(before_ms)])
                .await
                .map_err(|err| from_pg(&shared.location, what, err))?;
            Ok(usize::try_from(gone).unwrap_or(usize::MAX))
        })
    }
}

impl MemoryStore for PgBackend {
    fn summaries_after(
        &self,
        after: Option<entity::Snowflake>,
        sessions: usize,
    ) -> StoreFuture<'_, Vec<Summary>> {
        in_transaction!(self, "summaries", |shared, tx| async {
            let rows = tx
                .query(
                    "SELECT session_id, text, covers_to, tokens, created_ms FROM summaries
                     WHERE session_id IN (
                         SELECT DISTINCT session_id FROM summaries
                         WHERE $1::bigint IS NULL OR session_id > $1
                         ORDER BY session_id LIMIT $2)
                     ORDER BY session_id, created_ms, seq",
                    &[&after.map(to_sql), &limit(sessions)],
                )
                .await
                .map_err(|err| from_pg(&shared.location, "summaries", err))?;
            Ok(rows.iter().map(summary_from_row).collect())
        })
    }

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

/// The runs table (issues 23, 26): `seq` is the queue place, given under the queue's lock so
/// places grow in commit order.
pub(crate) const SCHEMA_RUNS: &str = "
CREATE TABLE runs (
    seq bigserial PRIMARY KEY,
    id text NOT NULL UNIQUE,
    session_key text COLLATE \"C\" NOT NULL,
    agent text NOT NULL,
    trigger_ref text NOT NULL,
    requested_by text,
    parent_run text,
    state text NOT NULL,
    node text,
    lease_until_ms bigint,
    abort_requested boolean NOT NULL DEFAULT false,
    enqueued_ms bigint NOT NULL,
    started_ms bigint,
    finished_ms bigint,
    final_text text
);
CREATE INDEX runs_open ON runs (session_key, seq) WHERE state IN ('queued', 'running');
CREATE INDEX runs_by_session ON runs (session_key, seq);
CREATE INDEX runs_ended ON runs (finished_ms) WHERE state NOT IN ('queued', 'running');
";

macro_rules! run_columns {
    () => {
        "seq, id, session_key, agent, trigger_ref, requested_by, parent_run, state, node, \
         lease_until_ms, abort_requested, enqueued_ms, started_ms, finished_ms, final_text, usage"
    };
}

/// Each run's usage (issue 23 §4), one JSON column.
pub(crate) const SCHEMA_RUN_USAGE: &str = "ALTER TABLE runs ADD COLUMN IF NOT EXISTS usage text;";

fn usage_text(usage: Option<RunUsage>) -> Option<String> {
    usage.map(|usage| usage.to_text())
}

fn run_from_row(location: &str, row: &Row) -> Result<Run, StoreError> {
    let state: String = row.get(7);
    let opt = |i: usize| row.get::<_, Option<i64>>(i).map(ms_from);
    Ok(Run {
        seq: ms_from(row.get(0)),
        id: row.get(1),
        session: row.get(2),
        agent: row.get(3),
        trigger: row.get(4),
        requested_by: row.get(5),
        parent_run: row.get(6),
        state: state
            .parse()
            .map_err(|err| unreadable(location, "run", err))?,
        node: row.get(8),
        lease_until_ms: opt(9),
        abort_requested: row.get(10),
        enqueued_ms: ms_from(row.get(11)),
        started_ms: opt(12),
        finished_ms: opt(13),
        final_text: row.get(14),
        usage: row
            .get::<_, Option<String>>(15)
            .as_deref()
            .and_then(RunUsage::from_text),
    })
}

fn runs_from_rows(location: &str, rows: &[Row]) -> Result<Vec<Run>, StoreError> {
    rows.iter().map(|row| run_from_row(location, row)).collect()
}

const RUN_BY_ID: &str = concat!("SELECT ", run_columns!(), " FROM runs WHERE id = $1");

async fn run_by_id(
    tx: &Transaction<'_>,
    location: &str,
    id: &str,
) -> Result<Option<Run>, StoreError> {
    let row = tx
        .query_opt(RUN_BY_ID, &[&id])
        .await
        .map_err(|err| from_pg(location, "a run", err))?;
    row.map(|row| run_from_row(location, &row)).transpose()
}

fn opt_text(text: Option<&String>) -> Option<String> {
    text.map(|t| clean(t))
}

/// Takes the run queue's lock for the rest of `tx`: every change to the queue is made under
/// it, so places grow in commit order and no run starts twice.
async fn lock_queue(tx: &Transaction<'_>, location: &str, what: &str) -> Result<(), StoreError> {
    lock(tx, Lock::RunQueue, "")
        .await
        .map_err(|err| from_pg(location, what, err))
}

/// Under the queue's lock, one `UPDATE runs ... RETURNING run_columns`: the run it changed.
async fn update_queued_run(
    tx: &Transaction<'_>,
    location: &str,
    sql: &str,
    params: &[&(dyn tokio_postgres::types::ToSql + Sync)],
) -> Result<Option<Run>, StoreError> {
    lock_queue(tx, location, "a run").await?;
    let row = tx
        .query_opt(sql, params)
        .await
        .map_err(|err| from_pg(location, "a run", err))?;
    row.map(|row| run_from_row(location, &row)).transpose()
}

/// Under the queue's lock: a conflict when a run of `run`'s id is kept already.
async fn check_new_run(
    tx: &Transaction<'_>,
    location: &str,
    run: &NewRun,
) -> Result<(), StoreError> {
    lock_queue(tx, location, "a run").await?;
    match run_by_id(tx, location, &clean(&run.id)).await? {
        Some(_) => Err(duplicate_run(&run.id)),
        None => Ok(()),
    }
}

/// Keeps a run as it stands, at its own place (an import) or at the next one (`seq` left
/// out); a run whose id or place is kept already is skipped. The place it took, if kept.
async fn insert_run(
    tx: &Transaction<'_>,
    location: &str,
    seq: Option<u64>,
    run: &Run,
) -> Result<Option<u64>, StoreError> {
    let row = tx
        .query_opt(
            "INSERT INTO runs (seq, id, session_key, agent, trigger_ref, requested_by,
                 parent_run, state, node, lease_until_ms, abort_requested, enqueued_ms,
                 started_ms, finished_ms, final_text, usage)
             VALUES (coalesce($1, nextval('runs_seq_seq')), $2, $3, $4, $5, $6, $7, $8, $9, $10,
                     $11, $12, $13, $14, $15, $16)
             ON CONFLICT DO NOTHING RETURNING seq",
            &[
                &seq.map(ms),
                &clean(&run.id),
                &clean(&run.session),
                &clean(&run.agent),
                &clean(&run.trigger),
                &opt_text(run.requested_by.as_ref()),
                &opt_text(run.parent_run.as_ref()),
                &run.state.as_str(),
                &opt_text(run.node.as_ref()),
                &run.lease_until_ms.map(ms),
                &run.abort_requested,
                &ms(run.enqueued_ms),
                &run.started_ms.map(ms),
                &run.finished_ms.map(ms),
                &opt_text(run.final_text.as_ref()),
                &usage_text(run.usage),
            ],
        )
        .await
        .map_err(|err| from_pg(location, "a run", err))?;
    Ok(row.map(|row| ms_from(row.get(0))))
}

/// Keeps a run [`check_new_run`] found new at the queue's next place; the run as kept.
async fn insert_new_run(
    tx: &Transaction<'_>,
    location: &str,
    mut run: Run,
) -> Result<Run, StoreError> {
    run.seq = insert_run(tx, location, None, &run)
        .await?
        .ok_or_else(|| duplicate_run(&run.id))?;
    Ok(run)
}

impl RunStore for PgBackend {
    fn import_runs(&self, runs: Vec<Run>) -> StoreFuture<'_, ()> {
        in_transaction!(self, "runs", |shared, tx| async {
            let pg = |err| from_pg(&shared.location, "runs", err);
            lock_queue(tx, &shared.location, "runs").await?;
            for run in &runs {
                insert_run(tx, &shared.location, Some(run.seq), run).await?;
            }
            // Runs queued from now on go after every imported place.
            tx.execute(
                "SELECT setval('runs_seq_seq', greatest(
                     (SELECT coalesce(max(seq), 1) FROM runs),
                     (SELECT last_value FROM runs_seq_seq)))",
                &[],
            )
            .await
            .map_err(pg)?;
            Ok(())
        })
    }

    fn enqueue_run(&self, run: NewRun, max_queued_per_session: usize) -> StoreFuture<'_, Enqueued> {
        in_transaction!(self, "a run", |shared, tx| async {
            let pg = |err| from_pg(&shared.location, "a run", err);
            check_new_run(tx, &shared.location, &run).await?;
            let counts = tx
                .query_one(
                    "SELECT count(*) FILTER (WHERE state = 'queued'),
                            count(*) FILTER (WHERE state = 'running')
                     FROM runs WHERE session_key = $1 AND state IN ('queued', 'running')",
                    &[&clean(&run.session)],
                )
                .await
                .map_err(pg)?;
            let waiting = switchboard_store::waiting_runs(
                count(counts.get::<_, i64>(0)),
                count(counts.get::<_, i64>(1)),
            );
            if waiting >= max_queued_per_session {
                return Ok(Enqueued::Full { queued: waiting });
            }
            let run = insert_new_run(tx, &shared.location, Run::queued(run, 0)).await?;
            Ok(Enqueued::Queued(Box::new(run)))
        })
    }

    fn start_run(&self, run: NewRun, lease: Lease) -> StoreFuture<'_, Run> {
        in_transaction!(self, "a run", |shared, tx| async {
            check_new_run(tx, &shared.location, &run).await?;
            let run = Run::started(run, 0, lease);
            insert_new_run(tx, &shared.location, run).await
        })
    }

    fn claim_next_run(&self, lease: Lease) -> StoreFuture<'_, Option<Run>> {
        let node = clean(&lease.node);
        in_transaction!(self, "a run", |shared, tx| async {
            update_queued_run(
                tx,
                &shared.location,
                concat!(
                    "UPDATE runs SET state = 'running', node = $1, lease_until_ms = $2,
                         started_ms = $3
                     WHERE seq = (SELECT seq FROM runs r WHERE state = 'queued' AND NOT EXISTS (
                                      SELECT 1 FROM runs o WHERE o.session_key = r.session_key
                                        AND o.state IN ('queued', 'running') AND o.seq < r.seq)
                                  ORDER BY seq LIMIT 1)
                       AND state = 'queued'
                     RETURNING ",
                    run_columns!()
                ),
                &[&node, &ms(lease.until_ms()), &ms(lease.now_ms)],
            )
            .await
        })
    }

    fn join_runs(&self, join: RunJoin) -> StoreFuture<'_, Vec<Run>> {
        let (held, node, now_ms) = (clean(&join.held), clean(&join.node), join.now_ms);
        let run_ids: Vec<String> = join.run_ids.iter().map(|id| clean(id)).collect();
        in_transaction!(self, "runs", |shared, tx| async {
            let pg = |err| from_pg(&shared.location, "runs", err);
            lock_queue(tx, &shared.location, "runs").await?;
            let head = tx
                .query_opt(
                    "SELECT session_key, lease_until_ms FROM runs
                     WHERE id = $1 AND node = $2 AND state = 'running'",
                    &[&held, &node],
                )
                .await
                .map_err(pg)?;
            let Some(head) = head else {
                return Ok(Vec::new());
            };
            let (session, lease): (String, Option<i64>) = (head.get(0), head.get(1));
            let rows = tx
                .query(
                    concat!(
                        "UPDATE runs SET state = 'running', node = $2, lease_until_ms = $3,
                             started_ms = $4
                         WHERE id = ANY($1) AND session_key = $5 AND state = 'queued'
                         RETURNING ",
                        run_columns!()
                    ),
                    &[&run_ids, &node, &lease, &ms(now_ms), &session],
                )
                .await
                .map_err(pg)?;
            let mut joined = rows
                .iter()
                .map(|row| run_from_row(&shared.location, row))
                .collect::<Result<Vec<_>, _>>()?;
            joined.sort_by_key(|r| r.seq);
            Ok(joined)
        })
    }

    fn heartbeat_run(&self, run_id: &str, lease: Lease) -> StoreFuture<'_, Heartbeat> {
        let (run_id, node, until_ms) = (clean(run_id), clean(&lease.node), lease.until_ms());
        in_transaction!(self, "a run's lease", |shared, tx| async {
            let row = tx
                .query_opt(
                    "UPDATE runs SET lease_until_ms = $3
                     WHERE id = $1 AND node = $2 AND state = 'running'
                     RETURNING abort_requested",
                    &[&run_id, &node, &ms(until_ms)],
                )
                .await
                .map_err(|err| from_pg(&shared.location, "a run's lease", err))?;
            Ok(row.map_or(Heartbeat::Lost, |row| Heartbeat::Held {
                until_ms,
                abort_requested: row.get(0),
            }))
        })
    }

    fn finish_run(&self, run_id: &str, node: &str, end: RunEnd) -> StoreFuture<'_, Option<Run>> {
        let (run_id, node) = (clean(run_id), clean(node));
        in_transaction!(self, "a run", |shared, tx| async {
            check_end(&end)?;
            let row = tx
                .query_opt(
                    concat!(
                        "UPDATE runs SET state = $3, final_text = $4, finished_ms = $5,
                             lease_until_ms = NULL, usage = $6
                         WHERE id = $1 AND node = $2 AND state = 'running'
                         RETURNING ",
                        run_columns!()
                    ),
                    &[
                        &run_id,
                        &node,
                        &end.state.as_str(),
                        &opt_text(end.final_text.as_ref()),
                        &ms(end.at_ms),
                        &usage_text(end.usage),
                    ],
                )
                .await
                .map_err(|err| from_pg(&shared.location, "a run", err))?;
            row.map(|row| run_from_row(&shared.location, &row))
                .transpose()
        })
    }

    fn request_abort(&self, run_id: &str, at_ms: u64) -> StoreFuture<'_, Option<Run>> {
        let run_id = clean(run_id);
        in_transaction!(self, "a run", |shared, tx| async {
            update_queued_run(
                tx,
                &shared.location,
                concat!(
                    "UPDATE runs SET
                         abort_requested = abort_requested OR state IN ('queued', 'running'),
                         finished_ms = CASE WHEN state = 'queued' THEN $2 ELSE finished_ms END,
                         state = CASE WHEN state = 'queued' THEN 'aborted' ELSE state END
                     WHERE id = $1 RETURNING ",
                    run_columns!()
                ),
                &[&run_id, &ms(at_ms)],
            )
            .await
        })
    }

    fn interrupt_expired_runs(&self, now_ms: u64, count: usize) -> StoreFuture<'_, Vec<Run>> {
        in_transaction!(self, "runs", |shared, tx| async {
            let pg = |err| from_pg(&shared.location, "runs", err);
            lock_queue(tx, &shared.location, "runs").await?;
            let rows = tx
                .query(
                    concat!(
                        "UPDATE runs SET state = 'interrupted', finished_ms = $1,
                             lease_until_ms = NULL
                         WHERE seq IN (SELECT seq FROM runs WHERE state = 'running'
                                       AND lease_until_ms < $1 ORDER BY seq LIMIT $2)
                           -- Checked again on the row as it stands once its lock is had: a
                           -- heartbeat that renewed the lease meanwhile wins.
                           AND state = 'running' AND lease_until_ms < $1
                         RETURNING ",
                        run_columns!()
                    ),
                    &[&ms(now_ms), &limit(count)],
                )
                .await
                .map_err(pg)?;
            let mut runs = runs_from_rows(&shared.location, &rows)?;
            runs.sort_by_key(|r| r.seq);
            Ok(runs)
        })
    }

    fn rerun_run(&self, run_id: &str, trigger: String) -> StoreFuture<'_, Option<Run>> {
        let run_id = clean(run_id);
        let trigger = clean(&trigger);
        in_transaction!(self, "a run", |shared, tx| async {
            // Under the queue's lock, as claims: none starts a later run meanwhile.
            update_queued_run(
                tx,
                &shared.location,
                concat!(
                    "UPDATE runs r SET state = 'queued', trigger_ref = $2, node = NULL,
                         lease_until_ms = NULL, abort_requested = false, started_ms = NULL,
                         finished_ms = NULL, final_text = NULL, usage = NULL
                     WHERE id = $1 AND state = 'interrupted' AND NOT EXISTS (
                         SELECT 1 FROM runs o WHERE o.session_key = r.session_key
                           AND o.seq > r.seq AND o.started_ms >= r.finished_ms)
                     RETURNING ",
                    run_columns!()
                ),
                &[&run_id, &trigger],
            )
            .await
        })
    }

    fn run(&self, run_id: &str) -> StoreFuture<'_, Option<Run>> {
        let run_id = clean(run_id);
        in_transaction!(self, "a run", |shared, tx| async {
            run_by_id(tx, &shared.location, &run_id).await
        })
    }

    fn runs(&self, filter: RunFilter) -> StoreFuture<'_, Vec<Run>> {
        in_transaction!(self, "runs", |shared, tx| async {
            let rows = tx
                .query(
                    concat!(
                        "SELECT ",
                        run_columns!(),
                        " FROM runs
                         WHERE ($1::text IS NULL OR session_key = $1)
                           AND ($2::text IS NULL OR agent = $2)
                           AND ($3::text IS NULL OR state = $3)
                           AND ($4::text IS NULL OR parent_run = $4)
                           AND ($5::bigint IS NULL OR seq < $5)
                         ORDER BY seq DESC LIMIT $6"
                    ),
                    &[
                        &opt_text(filter.session.as_ref()),
                        &opt_text(filter.agent.as_ref()),
                        &filter.state.map(RunState::as_str),
                        &opt_text(filter.parent_run.as_ref()),
                        &filter.before_seq.map(ms),
                        &limit(filter.capped_limit()),
                    ],
                )
                .await
                .map_err(|err| from_pg(&shared.location, "runs", err))?;
            runs_from_rows(&shared.location, &rows)
        })
    }

    fn prune_runs(&self, before_ms: u64) -> StoreFuture<'_, usize> {
        self.delete_before("runs", DELETE_ENDED_RUNS, before_ms)
    }
}

/// The schedules and their receipts (issue 26).
pub(crate) const SCHEMA_SCHEDULES: &str = "
CREATE TABLE schedules (
    id text COLLATE \"C\" PRIMARY KEY,
    session_id bigint NOT NULL,
    agent text,
    prompt text NOT NULL,
    spec text NOT NULL,
    created_by text NOT NULL,
    created_ms bigint NOT NULL,
    next_due_ms bigint,
    last_fired_ms bigint,
    status text NOT NULL,
    consecutive_failures integer NOT NULL
);
CREATE TABLE schedule_receipts (
    seq bigserial PRIMARY KEY,
    schedule_id text NOT NULL,
    due_ms bigint NOT NULL,
    run_id text,
    outcome text NOT NULL,
    message_ids text NOT NULL,
    error text,
    at_ms bigint NOT NULL,
    detail text
);
CREATE INDEX receipts_by_schedule ON schedule_receipts (schedule_id, seq);
";

macro_rules! schedule_columns {
    () => {
        "id, session_id, agent, prompt, spec, created_by, created_ms, next_due_ms, \
         last_fired_ms, status, consecutive_failures"
    };
}

fn schedule_from_row(location: &str, row: &Row) -> Result<Schedule, StoreError> {
    let spec: String = row.get(4);
    let opt = |i: usize| row.get::<_, Option<i64>>(i).map(ms_from);
    Ok(Schedule {
        id: row.get(0),
        session_id: from_sql(row.get(1)),
        agent: row.get(2),
        prompt: row.get(3),
        spec: serde_json::from_str(&spec).map_err(|err| unreadable(location, "schedule", err))?,
        created_by: row.get(5),
        created_ms: ms_from(row.get(6)),
        next_due_ms: opt(7),
        last_fired_ms: opt(8),
        status: {
            let status: String = row.get(9);
            ScheduleStatus::parse(&status)
                .ok_or_else(|| unreadable(location, "schedule", format!("status {status}")))?
        },
        consecutive_failures: u32::try_from(row.get::<_, i32>(10)).unwrap_or(0),
    })
}

async fn schedule_by_id(
    tx: &Transaction<'_>,
    location: &str,
    id: &str,
    for_update: bool,
) -> Result<Option<Schedule>, StoreError> {
    let sql = if for_update {
        concat!(
            "SELECT ",
            schedule_columns!(),
            " FROM schedules WHERE id = $1 FOR UPDATE"
        )
    } else {
        concat!(
            "SELECT ",
            schedule_columns!(),
            " FROM schedules WHERE id = $1"
        )
    };
    let row = tx
        .query_opt(sql, &[&id])
        .await
        .map_err(|err| from_pg(location, "a schedule", err))?;
    row.map(|row| schedule_from_row(location, &row)).transpose()
}

fn receipt_from_row(location: &str, row: &Row) -> Result<Receipt, StoreError> {
    let outcome: String = row.get(3);
    let message_ids: String = row.get(4);
    Ok(Receipt {
        schedule_id: row.get(0),
        due_ms: ms_from(row.get(1)),
        run_id: row.get(2),
        outcome: FiringOutcome::parse(&outcome)
            .ok_or_else(|| unreadable(location, "receipt", format!("outcome {outcome}")))?,
        message_ids: serde_json::from_str(&message_ids)
            .map_err(|err| unreadable(location, "receipt", err))?,
        error: row.get(5),
        at_ms: ms_from(row.get(6)),
        detail: row.get(7),
    })
}

fn json<T: serde::Serialize>(value: &T) -> String {
    serde_json::to_string(value).unwrap_or_default()
}

/// Writes a schedule's status and failures in a row.
async fn save_health(
    tx: &Transaction<'_>,
    schedule: &Schedule,
) -> Result<(), tokio_postgres::Error> {
    tx.execute(
        "UPDATE schedules SET status = $2, consecutive_failures = $3 WHERE id = $1",
        &[
            &clean(&schedule.id),
            &schedule.status.as_str(),
            &i32::try_from(schedule.consecutive_failures).unwrap_or(i32::MAX),
        ],
    )
    .await
    .map(drop)
}

impl AgentBindingStore for PgBackend {
    fn bind_agent(&self, session_id: Snowflake, agent: Option<String>) -> StoreFuture<'_, ()> {
        let agent = agent.map(|a| clean(&a));
        in_transaction!(self, "a session's agent", |shared, tx| async {
            let session = to_sql(session_id);
            match &agent {
                Some(agent) => {
                    tx.execute(
                        "INSERT INTO agent_bindings (session_id, agent) VALUES ($1, $2)
                         ON CONFLICT (session_id) DO UPDATE SET agent = excluded.agent",
                        &[&session, agent],
                    )
                    .await
                }
                None => {
                    tx.execute(
                        "DELETE FROM agent_bindings WHERE session_id = $1",
                        &[&session],
                    )
                    .await
                }
            }
            .map_err(|err| from_pg(&shared.location, "a session's agent", err))?;
            Ok(())
        })
    }

    fn bound_agent(&self, session_id: Snowflake) -> StoreFuture<'_, Option<String>> {
        in_transaction!(self, "a session's agent", |shared, tx| async {
            let row = tx
                .query_opt(
                    "SELECT agent FROM agent_bindings WHERE session_id = $1",
                    &[&to_sql(session_id)],
                )
                .await
                .map_err(|err| from_pg(&shared.location, "a session's agent", err))?;
            Ok(row.map(|row| row.get(0)))
        })
    }

    fn agent_bindings(&self) -> StoreFuture<'_, Vec<AgentBinding>> {
        in_transaction!(self, "the agent bindings", |shared, tx| async {
            let rows = tx
                .query(
                    "SELECT session_id, agent FROM agent_bindings ORDER BY session_id",
                    &[],
                )
                .await
                .map_err(|err| from_pg(&shared.location, "the agent bindings", err))?;
            Ok(rows
                .iter()
                .map(|row| AgentBinding {
                    session_id: from_sql(row.get(0)),
                    agent: row.get(1),
                })
                .collect())
        })
    }
}

impl ScheduleStore for PgBackend {
    fn save_schedule(&self, schedule: Schedule) -> StoreFuture<'_, ()> {
        in_transaction!(self, "a schedule", |shared, tx| async {
            tx.execute(
                "INSERT INTO schedules (id, session_id, agent, prompt, spec, created_by, created_ms,
                     next_due_ms, last_fired_ms, status, consecutive_failures)
                 VALUES ($1, $2, $3, $4, $5, $6, $7, $8, $9, $10, $11)
                 ON CONFLICT (id) DO UPDATE SET session_id = excluded.session_id,
                     agent = excluded.agent, prompt = excluded.prompt, spec = excluded.spec,
                     created_by = excluded.created_by, created_ms = excluded.created_ms,
                     next_due_ms = excluded.next_due_ms, status = excluded.status,
                     consecutive_failures = excluded.consecutive_failures,
                     last_fired_ms = greatest(schedules.last_fired_ms, excluded.last_fired_ms)",
                &[
                    &clean(&schedule.id),
                    &to_sql(schedule.session_id),
                    &opt_text(schedule.agent.as_ref()),
                    &clean(&schedule.prompt),
                    &clean(&json(&schedule.spec)),
                    &clean(&schedule.created_by),
                    &ms(schedule.created_ms),
                    &schedule.next_due_ms.map(ms),
                    &schedule.last_fired_ms.map(ms),
                    &schedule.status.as_str(),
                    &i32::try_from(schedule.consecutive_failures).unwrap_or(i32::MAX),
                ],
            )
            .await
            .map_err(|err| from_pg(&shared.location, "a schedule", err))?;
            Ok(())
        })
    }

    fn schedule(&self, id: &str) -> StoreFuture<'_, Option<Schedule>> {
        let id = clean(id);
        in_transaction!(self, "a schedule", |shared, tx| async {
            schedule_by_id(tx, &shared.location, &id, false).await
        })
    }

    fn schedules(&self, after: Option<String>, count: usize) -> StoreFuture<'_, Vec<Schedule>> {
        let after = after.map(|a| clean(&a));
        in_transaction!(self, "schedules", |shared, tx| async {
            let rows = tx
                .query(
                    concat!(
                        "SELECT ",
                        schedule_columns!(),
                        " FROM schedules WHERE $1::text IS NULL OR id > $1 ORDER BY id LIMIT $2"
                    ),
                    &[&after, &limit(count)],
                )
                .await
                .map_err(|err| from_pg(&shared.location, "schedules", err))?;
            rows.iter()
                .map(|row| schedule_from_row(&shared.location, row))
                .collect()
        })
    }

    fn delete_schedule(&self, id: &str) -> StoreFuture<'_, bool> {
        let id = clean(id);
        in_transaction!(self, "a schedule", |shared, tx| async {
            let pg = |err| from_pg(&shared.location, "a schedule", err);
            tx.execute(
                "DELETE FROM schedule_receipts WHERE schedule_id = $1",
                &[&id],
            )
            .await
            .map_err(pg)?;
            let gone = tx
                .execute("DELETE FROM schedules WHERE id = $1", &[&id])
                .await
                .map_err(pg)?;
            Ok(gone > 0)
        })
    }

    fn claim_firing(&self, claim: FiringClaim) -> StoreFuture<'_, Firing> {
        let id = clean(&claim.schedule_id);
        in_transaction!(self, "a firing", |shared, tx| async {
            // One statement: a concurrent claimer waits on the row and then finds the due
            // time taken.
            let row = tx
                .query_opt(
                    concat!(
                        "UPDATE schedules SET last_fired_ms = $2, next_due_ms = $3
                         WHERE id = $1 AND status = 'active'
                           AND (last_fired_ms IS NULL OR last_fired_ms < $2)
                         RETURNING ",
                        schedule_columns!()
                    ),
                    &[&id, &ms(claim.due_ms), &claim.next_due_ms.map(ms)],
                )
                .await
                .map_err(|err| from_pg(&shared.location, "a firing", err))?;
            if let Some(row) = row {
                return Ok(Firing::Won(schedule_from_row(&shared.location, &row)?));
            }
            let now = schedule_by_id(tx, &shared.location, &id, false).await?;
            switchboard_store::lost_firing(&claim.schedule_id, now)
        })
    }

    fn record_receipt(&self, receipt: Receipt, after: AfterFiring) -> StoreFuture<'_, Schedule> {
        let id = clean(&receipt.schedule_id);
        in_transaction!(self, "a receipt", |shared, tx| async {
            let pg = |err| from_pg(&shared.location, "a receipt", err);
            let Some(mut schedule) = schedule_by_id(tx, &shared.location, &id, true).await? else {
                return Err(unknown_schedule(&receipt.schedule_id));
            };
            count_firing(&mut schedule, &receipt, after);
            save_health(tx, &schedule).await.map_err(pg)?;
            tx.execute(
                "INSERT INTO schedule_receipts (schedule_id, due_ms, run_id, outcome, message_ids,
                     error, at_ms, detail)
                 VALUES ($1, $2, $3, $4, $5, $6, $7, $8)",
                &[
                    &id,
                    &ms(receipt.due_ms),
                    &opt_text(receipt.run_id.as_ref()),
                    &receipt.outcome.as_str(),
                    &clean(&json(&receipt.message_ids)),
                    &opt_text(receipt.error.as_ref()),
                    &ms(receipt.at_ms),
                    &opt_text(receipt.detail.as_ref()),
                ],
            )
            .await
            .map_err(pg)?;
            tx.execute(
                "DELETE FROM schedule_receipts WHERE schedule_id = $1 AND seq NOT IN (
                     SELECT seq FROM schedule_receipts WHERE schedule_id = $1
                     ORDER BY seq DESC LIMIT $2)",
                &[&id, &limit(RECEIPTS_KEPT_PER_SCHEDULE)],
            )
            .await
            .map_err(pg)?;
            Ok(schedule)
        })
    }

    fn receipts(&self, schedule_id: &str, count: usize) -> StoreFuture<'_, Vec<Receipt>> {
        let id = clean(schedule_id);
        in_transaction!(self, "receipts", |shared, tx| async {
            let rows = tx
                .query(
                    "SELECT schedule_id, due_ms, run_id, outcome, message_ids, error, at_ms, detail
                     FROM schedule_receipts WHERE schedule_id = $1 ORDER BY seq DESC LIMIT $2",
                    &[&id, &limit(count)],
                )
                .await
                .map_err(|err| from_pg(&shared.location, "receipts", err))?;
            rows.iter()
                .map(|row| receipt_from_row(&shared.location, row))
                .collect()
        })
    }

    fn set_schedule_status(
        &self,
        id: &str,
        status: ScheduleStatus,
    ) -> StoreFuture<'_, Option<Schedule>> {
        let id = clean(id);
        in_transaction!(self, "a schedule", |shared, tx| async {
            let Some(mut schedule) = schedule_by_id(tx, &shared.location, &id, true).await? else {
                return Ok(None);
            };
            set_status(&mut schedule, status);
            save_health(tx, &schedule)
                .await
                .map_err(|err| from_pg(&shared.location, "a schedule", err))?;
            Ok(Some(schedule))
        })
    }
}

/// Model usage rows (issue 26).
pub(crate) const SCHEMA_USAGE: &str = "
CREATE TABLE usage (
    seq bigserial PRIMARY KEY,
    run_id text NOT NULL,
    agent text COLLATE \"C\" NOT NULL,
    user_key text COLLATE \"C\",
    session_key text COLLATE \"C\",
    guild_key text COLLATE \"C\",
    model text NOT NULL,
    tokens_in bigint NOT NULL,
    tokens_out bigint NOT NULL,
    micro_usd bigint NOT NULL,
    estimated boolean NOT NULL,
    at_ms bigint NOT NULL
);
CREATE INDEX usage_by_time ON usage (at_ms);
CREATE INDEX usage_by_user ON usage (user_key, at_ms);
CREATE INDEX usage_by_session ON usage (session_key, at_ms);
CREATE INDEX usage_by_guild ON usage (guild_key, at_ms);
CREATE INDEX usage_by_agent ON usage (agent, at_ms);
";

macro_rules! sums {
    () => {
        "count(*), coalesce(sum(tokens_in), 0)::bigint, coalesce(sum(tokens_out), 0)::bigint, \
         coalesce(sum(micro_usd), 0)::bigint, coalesce(bool_or(estimated), false)"
    };
}

fn totals_from_row(row: &Row, from: usize) -> UsageTotals {
    UsageTotals {
        calls: ms_from(row.get(from)),
        tokens_in: ms_from(row.get(from + 1)),
        tokens_out: ms_from(row.get(from + 2)),
        micro_usd: ms_from(row.get(from + 3)),
        estimated: row.get(from + 4),
    }
}

/// A report grouped by `$key` (text; NULL sorts first, as `None` does).
macro_rules! report {
    ($key:expr) => {
        concat!(
            "SELECT (",
            $key,
            ") COLLATE \"C\" AS k, ",
            sums!(),
            " FROM usage WHERE at_ms >= $1 AND at_ms < $2 GROUP BY k
             ORDER BY coalesce(sum(tokens_in), 0) + coalesce(sum(tokens_out), 0) DESC,
                      k NULLS FIRST
             LIMIT $3"
        )
    };
}

fn usage_from_row(row: &Row) -> KeptUsage {
    KeptUsage {
        id: ms_from(row.get(0)),
        row: UsageRow {
            charge: UsageCharge {
                run_id: row.get(1),
                agent: row.get(2),
                user: row.get(3),
                session: row.get(4),
                guild: row.get(5),
                model: row.get(6),
            },
            tokens_in: ms_from(row.get(7)),
            tokens_out: ms_from(row.get(8)),
            micro_usd: ms_from(row.get(9)),
            estimated: row.get(10),
            at_ms: ms_from(row.get(11)),
        },
    }
}

/// Keeps a row (capped), under `id` when given (an import: an id already kept is skipped).
async fn insert_usage(
    tx: &Transaction<'_>,
    id: Option<u64>,
    row: &UsageRow,
) -> Result<(), tokio_postgres::Error> {
    let row = row.clone().capped();
    tx.execute(
        "INSERT INTO usage (seq, run_id, agent, user_key, session_key, guild_key, model, tokens_in,
             tokens_out, micro_usd, estimated, at_ms)
         VALUES (coalesce($1, nextval('usage_seq_seq')), $2, $3, $4, $5, $6, $7, $8, $9, $10,
                 $11, $12)
         ON CONFLICT DO NOTHING",
        &[
            &id.map(ms),
            &clean(&row.charge.run_id),
            &clean(&row.charge.agent),
            &opt_text(row.charge.user.as_ref()),
            &opt_text(row.charge.session.as_ref()),
            &opt_text(row.charge.guild.as_ref()),
            &clean(&row.charge.model),
            &ms(row.tokens_in),
            &ms(row.tokens_out),
            &ms(row.micro_usd),
            &row.estimated,
            &ms(row.at_ms),
        ],
    )
    .await
    .map(drop)
}

impl UsageStore for PgBackend {
    fn usage_after(&self, after_id: u64, count: usize) -> StoreFuture<'_, Vec<KeptUsage>> {
        in_transaction!(self, "usage", |shared, tx| async {
            let rows = tx
                .query(
                    "SELECT seq, run_id, agent, user_key, session_key, guild_key, model, tokens_in,
                         tokens_out, micro_usd, estimated, at_ms
                     FROM usage WHERE seq > $1 ORDER BY seq LIMIT $2",
                    &[&ms(after_id), &limit(count)],
                )
                .await
                .map_err(|err| from_pg(&shared.location, "usage", err))?;
            Ok(rows.iter().map(usage_from_row).collect())
        })
    }

    fn import_usage(&self, rows: Vec<KeptUsage>) -> StoreFuture<'_, ()> {
        in_transaction!(self, "usage", |shared, tx| async {
            let pg = |err| from_pg(&shared.location, "usage", err);
            for KeptUsage { id, row } in &rows {
                insert_usage(tx, Some(*id), row).await.map_err(pg)?;
            }
            // Rows recorded from now on get ids above every imported one.
            tx.execute(
                "SELECT setval('usage_seq_seq', greatest(
                     (SELECT coalesce(max(seq), 1) FROM usage),
                     (SELECT last_value FROM usage_seq_seq)))",
                &[],
            )
            .await
            .map_err(pg)?;
            Ok(())
        })
    }

    fn record_usage(&self, row: UsageRow) -> StoreFuture<'_, ()> {
        in_transaction!(self, "usage", |shared, tx| async {
            insert_usage(tx, None, &row)
                .await
                .map_err(|err| from_pg(&shared.location, "usage", err))
        })
    }

    fn usage_sum(
        &self,
        subject: UsageSubject,
        since_ms: u64,
        until_ms: u64,
    ) -> StoreFuture<'_, UsageTotals> {
        in_transaction!(self, "usage", |shared, tx| async {
            let (sql, key) = match &subject {
                UsageSubject::User(key) => (
                    concat!(
                        "SELECT ",
                        sums!(),
                        " FROM usage WHERE user_key = $1 AND at_ms >= $2 AND at_ms < $3"
                    ),
                    key,
                ),
                UsageSubject::Session(key) => (
                    concat!(
                        "SELECT ",
                        sums!(),
                        " FROM usage WHERE session_key = $1 AND at_ms >= $2 AND at_ms < $3"
                    ),
                    key,
                ),
                UsageSubject::Guild(key) => (
                    concat!(
                        "SELECT ",
                        sums!(),
                        " FROM usage WHERE guild_key = $1 AND at_ms >= $2 AND at_ms < $3"
                    ),
                    key,
                ),
                UsageSubject::Agent(name) => (
                    concat!(
                        "SELECT ",
                        sums!(),
                        " FROM usage WHERE agent = $1 AND at_ms >= $2 AND at_ms < $3"
                    ),
                    name,
                ),
            };
            let row = tx
                .query_one(sql, &[&clean(key), &ms(since_ms), &ms(until_ms)])
                .await
                .map_err(|err| from_pg(&shared.location, "usage", err))?;
            Ok(totals_from_row(&row, 0))
        })
    }

    fn usage_report(&self, query: UsageQuery) -> StoreFuture<'_, Vec<UsageGroup>> {
        in_transaction!(self, "usage", |shared, tx| async {
            let sql = match query.by {
                UsageBy::User => report!("user_key"),
                UsageBy::Session => report!("session_key"),
                UsageBy::Guild => report!("guild_key"),
                UsageBy::Agent => report!("agent"),
                UsageBy::Day => {
                    report!("to_char(to_timestamp(at_ms / 1000) AT TIME ZONE 'UTC', 'YYYY-MM-DD')")
                }
            };
            let rows = tx
                .query(
                    sql,
                    &[
                        &ms(query.since_ms),
                        &ms(query.until_ms),
                        &limit(query.limit.min(UsageQuery::MAX_LIMIT)),
                    ],
                )
                .await
                .map_err(|err| from_pg(&shared.location, "usage", err))?;
            Ok(rows
                .iter()
                .map(|row| UsageGroup {
                    key: row.get(0),
                    totals: totals_from_row(row, 1),
                })
                .collect())
        })
    }

    fn prune_usage(&self, before_ms: u64) -> StoreFuture<'_, usize> {
        self.delete_before("usage", DELETE_OLD_USAGE, before_ms)
    }
}

/// The cluster tables (issue 23).
pub(crate) const SCHEMA_CLUSTER: &str = "
CREATE TABLE cluster_nodes (
    node_id text COLLATE \"C\" PRIMARY KEY,
    started_ms bigint NOT NULL,
    address text,
    last_seen_ms bigint NOT NULL
);
CREATE TABLE shard_leases (
    shard bigint PRIMARY KEY,
    node_id text NOT NULL,
    until_ms bigint NOT NULL
);
CREATE TABLE identify_slots (
    bucket bigint PRIMARY KEY,
    next_ms bigint NOT NULL
);
CREATE TABLE once_keys (
    key text PRIMARY KEY,
    until_ms bigint NOT NULL
);
CREATE INDEX once_keys_by_expiry ON once_keys (until_ms);
";

fn lease_from_row(row: &Row) -> ShardLease {
    ShardLease {
        shard: u32::try_from(row.get::<_, i64>(0)).unwrap_or(u32::MAX),
        node_id: row.get(1),
        until_ms: ms_from(row.get(2)),
    }
}

impl ClusterStore for PgBackend {
    fn node_heartbeat(&self, beat: NodeBeat) -> StoreFuture<'_, ()> {
        in_transaction!(self, "a heartbeat", |shared, tx| async {
            let pg = |err| from_pg(&shared.location, "a heartbeat", err);
            tx.execute(
                DELETE_SILENT_NODES,
                &[&ms(beat.at_ms.saturating_sub(NODES_KEPT_MS))],
            )
            .await
            .map_err(pg)?;
            tx.execute(
                "INSERT INTO cluster_nodes (node_id, started_ms, address, last_seen_ms)
                 VALUES ($1, $2, $3, $4)
                 ON CONFLICT (node_id) DO UPDATE SET started_ms = excluded.started_ms,
                     address = excluded.address, last_seen_ms = excluded.last_seen_ms",
                &[
                    &clean(&beat.node_id),
                    &ms(beat.started_ms),
                    &opt_text(beat.address.as_ref()),
                    &ms(beat.at_ms),
                ],
            )
            .await
            .map_err(pg)?;
            Ok(())
        })
    }

    fn nodes(&self, seen_since_ms: u64, count: usize) -> StoreFuture<'_, Vec<Node>> {
        in_transaction!(self, "nodes", |shared, tx| async {
            let rows = tx
                .query(
                    "SELECT node_id, started_ms, address, last_seen_ms FROM cluster_nodes
                     WHERE last_seen_ms >= $1 ORDER BY node_id LIMIT $2",
                    &[&ms(seen_since_ms), &limit(count)],
                )
                .await
                .map_err(|err| from_pg(&shared.location, "nodes", err))?;
            Ok(rows
                .iter()
                .map(|row| Node {
                    node_id: row.get(0),
                    started_ms: ms_from(row.get(1)),
                    address: row.get(2),
                    last_seen_ms: ms_from(row.get(3)),
                })
                .collect())
        })
    }

    fn acquire_shard(&self, shard: u32, lease: Lease) -> StoreFuture<'_, ShardGrant> {
        let (node, now_ms, until_ms) = (clean(&lease.node), lease.now_ms, lease.until_ms());
        in_transaction!(self, "a shard lease", |shared, tx| async {
            let pg = |err| from_pg(&shared.location, "a shard lease", err);
            // A lease released between the two statements reads as missing: try again (each
            // try either takes the shard or reads its holder).
            for _ in 0..5 {
                let took = tx
                    .query_opt(
                        "INSERT INTO shard_leases (shard, node_id, until_ms) VALUES ($1, $2, $3)
                         ON CONFLICT (shard) DO UPDATE SET node_id = excluded.node_id,
                             until_ms = excluded.until_ms
                         WHERE shard_leases.node_id = excluded.node_id
                            OR shard_leases.until_ms <= $4
                         RETURNING 1",
                        &[&i64::from(shard), &node, &ms(until_ms), &ms(now_ms)],
                    )
                    .await
                    .map_err(pg)?;
                if took.is_some() {
                    return Ok(ShardGrant::Held { until_ms });
                }
                let holder = tx
                    .query_opt(
                        "SELECT shard, node_id, until_ms FROM shard_leases WHERE shard = $1",
                        &[&i64::from(shard)],
                    )
                    .await
                    .map_err(pg)?;
                if let Some(row) = holder {
                    return Ok(ShardGrant::Taken(lease_from_row(&row)));
                }
            }
            Err(StoreError::new(
                switchboard_store::StoreErrorKind::Conflict,
                format!("shard {shard} changed hands too often while it was being leased; retry"),
            ))
        })
    }

    fn release_shard(&self, shard: u32, node: &str) -> StoreFuture<'_, bool> {
        let node = clean(node);
        in_transaction!(self, "a shard lease", |shared, tx| async {
            let gone = tx
                .execute(
                    "DELETE FROM shard_leases WHERE shard = $1 AND node_id = $2",
                    &[&i64::from(shard), &node],
                )
                .await
                .map_err(|err| from_pg(&shared.location, "a shard lease", err))?;
            Ok(gone > 0)
        })
    }

    fn shard_leases(&self) -> StoreFuture<'_, Vec<ShardLease>> {
        in_transaction!(self, "shard leases", |shared, tx| async {
            let rows = tx
                .query(
                    "SELECT shard, node_id, until_ms FROM shard_leases ORDER BY shard",
                    &[],
                )
                .await
                .map_err(|err| from_pg(&shared.location, "shard leases", err))?;
            Ok(rows.iter().map(lease_from_row).collect())
        })
    }

    fn take_identify_slot(
        &self,
        bucket: u32,
        now_ms: u64,
        spacing_ms: u64,
    ) -> StoreFuture<'_, u64> {
        in_transaction!(self, "an IDENTIFY slot", |shared, tx| async {
            let row = tx
                .query_one(
                    // Saturating at the largest time a bigint holds.
                    "INSERT INTO identify_slots (bucket, next_ms)
                     VALUES ($1, least($2::bigint, 9223372036854775807 - $3::bigint) + $3::bigint)
                     ON CONFLICT (bucket) DO UPDATE SET
                         next_ms = least(greatest(identify_slots.next_ms, $2),
                                         9223372036854775807 - $3) + $3
                     RETURNING next_ms",
                    &[&i64::from(bucket), &ms(now_ms), &ms(spacing_ms)],
                )
                .await
                .map_err(|err| from_pg(&shared.location, "an IDENTIFY slot", err))?;
            Ok(ms_from(row.get(0)).saturating_sub(spacing_ms))
        })
    }

    fn once(&self, key: &str, now_ms: u64, ttl_ms: u64) -> StoreFuture<'_, bool> {
        let key = clean(key);
        in_transaction!(self, "a once key", |shared, tx| async {
            let pg = |err| from_pg(&shared.location, "a once key", err);
            tx.execute(DELETE_EXPIRED_ONCE_KEYS, &[&ms(now_ms)])
                .await
                .map_err(pg)?;
            let taken = tx
                .execute(
                    "INSERT INTO once_keys (key, until_ms) VALUES ($1, $2)
                     ON CONFLICT (key) DO NOTHING",
                    &[&key, &ms(now_ms.saturating_add(ttl_ms))],
                )
                .await
                .map_err(pg)?;
            Ok(taken > 0)
        })
    }

    fn shard_count(&self) -> StoreFuture<'_, Option<u32>> {
        in_transaction!(self, "the shard count", |shared, tx| async {
            let row = tx
                .query_opt("SELECT total FROM cluster_shard_count WHERE id = 0", &[])
                .await
                .map_err(|err| from_pg(&shared.location, "the shard count", err))?;
            Ok(row.map(|row| shard_total(row.get(0))))
        })
    }

    fn raise_shard_count(&self, total: u32) -> StoreFuture<'_, u32> {
        in_transaction!(self, "the shard count", |shared, tx| async {
            let row = tx
                .query_one(
                    "INSERT INTO cluster_shard_count (id, total) VALUES (0, $1)
                     ON CONFLICT (id) DO UPDATE SET
                         total = greatest(cluster_shard_count.total, excluded.total)
                     RETURNING total",
                    &[&i64::from(total)],
                )
                .await
                .map_err(|err| from_pg(&shared.location, "the shard count", err))?;
            Ok(shard_total(row.get(0)))
        })
    }

    fn once_held(&self, key: &str, now_ms: u64) -> StoreFuture<'_, bool> {
        let key = clean(key);
        in_transaction!(self, "a once key", |shared, tx| async {
            let held = tx
                .query_opt(
                    "SELECT 1 FROM once_keys WHERE key = $1 AND until_ms > $2",
                    &[&key, &ms(now_ms)],
                )
                .await
                .map_err(|err| from_pg(&shared.location, "a once key", err))?;
            Ok(held.is_some())
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
CREATE TABLE cluster_shard_count (
    id smallint PRIMARY KEY CHECK (id = 0),
    total bigint NOT NULL
);
";

/// The agent kinds' counts, added to `census`.
pub(crate) async fn census(
    client: &deadpool_postgres::Client,
    location: &str,
    census: Census,
) -> Result<Census, StoreError> {
    let row = client
        .query_one(
            "SELECT (SELECT count(*) FROM notes), (SELECT count(*) FROM summaries),
                    (SELECT count(*) FROM runs), (SELECT count(*) FROM schedules),
                    (SELECT count(*) FROM usage), (SELECT count(*) FROM agent_bindings)",
            &[],
        )
        .await
        .map_err(|err| from_pg(location, "counts", err))?;
    let n = |i: usize| ms_from(row.get(i));
    Ok(Census {
        notes: n(0),
        summaries: n(1),
        runs: n(2),
        schedules: n(3),
        usage: n(4),
        agent_bindings: n(5),
        ..census
    })
}

/// What the hourly expiry forgets of the agent kinds: ended runs after
/// [`FINISHED_RUNS_KEPT_MS`], usage rows after [`USAGE_KEPT_MS`], expired once keys and
/// capabilities, nodes silent for [`NODES_KEPT_MS`].
pub(crate) fn expiry(now_ms: u64) -> Vec<Stmt> {
    vec![
        Stmt::new(
            DELETE_ENDED_RUNS,
            vec![p(ms(now_ms.saturating_sub(FINISHED_RUNS_KEPT_MS)))],
        ),
        Stmt::new(
            DELETE_OLD_USAGE,
            vec![p(ms(now_ms.saturating_sub(USAGE_KEPT_MS)))],
        ),
        Stmt::new(DELETE_EXPIRED_ONCE_KEYS, vec![p(ms(now_ms))]),
        Stmt::new(
            crate::capabilities::DELETE_EXPIRED_CAPABILITIES,
            vec![p(ms(now_ms))],
        ),
        Stmt::new(
            DELETE_SILENT_NODES,
            vec![p(ms(now_ms.saturating_sub(NODES_KEPT_MS)))],
        ),
    ]
}

#[cfg(all(test, feature = "testing"))]
mod tests {
    use std::sync::Arc;

    use switchboard_records::{NodeBeat, RunFilter};
    use switchboard_store::{Backend, ClusterStore, RunStore, UsageStore};

    use super::*;
    use crate::testing::PgCluster;

    fn usage(at_ms: u64) -> UsageRow {
        UsageRow {
            charge: UsageCharge {
                run_id: "r".into(),
                agent: "support".into(),
                user: None,
                session: None,
                guild: None,
                model: "m".into(),
            },
            tokens_in: 1,
            tokens_out: 1,
            micro_usd: 1,
            estimated: false,
            at_ms,
        }
    }

    /// The hourly expiry forgets ended runs, usage, once keys and nodes past their lifetimes,
    /// and nothing younger.
    #[test]
    fn the_hourly_expiry_forgets_what_is_past_its_lifetime() {
        let cluster = PgCluster::shared();
        let name = cluster.database().unwrap();
        let backend =
            crate::PgBackend::open(&cluster.url(&name), crate::PgOptions::default()).unwrap();
        let now = crate::now_ms();
        let day = 86_400_000;
        let ended = |id: &str, seq: u64, at: u64| Run {
            state: RunState::Failed,
            finished_ms: Some(at),
            ..Run::queued(
                NewRun {
                    id: id.into(),
                    session: "api:ci".into(),
                    agent: "a".into(),
                    trigger: "api".into(),
                    requested_by: None,
                    parent_run: None,
                    enqueued_ms: at,
                },
                seq,
            )
        };
        futures_executor::block_on(backend.import_runs(vec![
            ended("old", 1, now - FINISHED_RUNS_KEPT_MS - day),
            ended("recent", 2, now - day),
        ]))
        .unwrap();
        for at in [now - USAGE_KEPT_MS - day, now - day] {
            futures_executor::block_on(backend.record_usage(usage(at))).unwrap();
        }
        futures_executor::block_on(backend.once("expired", now - 10_000, 1_000)).unwrap();
        futures_executor::block_on(backend.node_heartbeat(NodeBeat {
            node_id: "silent".into(),
            started_ms: 0,
            address: None,
            at_ms: now - NODES_KEPT_MS - day,
        }))
        .unwrap();
        let shared = Arc::clone(&backend.shared);
        shared.rt.block_on(crate::writer::expire(&shared)).unwrap();
        let runs = futures_executor::block_on(backend.runs(RunFilter {
            limit: 10,
            ..RunFilter::default()
        }))
        .unwrap();
        assert_eq!(runs.len(), 1);
        assert_eq!(runs[0].id, "recent");
        assert_eq!(
            futures_executor::block_on(backend.census()).unwrap().usage,
            1
        );
        let count = |table: &str| {
            cluster
                .psql(&name, &format!("SELECT count(*) FROM {table}"))
                .unwrap()
        };
        assert_eq!(count("once_keys"), "0");
        assert_eq!(count("cluster_nodes"), "0");
        futures_executor::block_on(Backend::close(&backend)).unwrap();
    }
}
