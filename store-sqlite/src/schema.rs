//! The file: opening it (WAL, the exclusive lock that keeps a second switchboard out), its
//! schema, and the upgrade ladder (`PRAGMA user_version`) every older file climbs at open.
//!
//! Why a ladder of our own rather than a migration crate (`refinery`): steps 4 and 8 are not
//! SQL alone (step 4 computes each stored message's mention tokens and decodes old emoji in
//! Rust), steps from 4 on also repair files that reached a later version without them
//! (branches landed out of order), and files written before today have no migration-history
//! table a crate would trust: adopting one would mean guessing their history. PostgreSQL needs
//! its own SQL anyway (a `tsvector` index, not FTS5), so one migration set cannot serve both
//! backends; each backend keeps its ladder, and the PostgreSQL one runs under an advisory lock.

use std::time::Duration;

use rusqlite::{params, Connection};
use switchboard_store::StoreError;
use tracing::{debug, warn};

/// The schema version this code writes (`PRAGMA user_version`).
pub const SCHEMA_VERSION: i64 = 20;

/// How long opening waits for a lock held by another connection (e.g. a switchboard that is
/// still shutting down) before reporting the store as locked.
const BUSY_TIMEOUT: Duration = Duration::from_secs(1);

const SCHEMA_V1: &str = "
CREATE TABLE sessions (
    id INTEGER PRIMARY KEY,
    guild_id INTEGER,
    parent_id INTEGER,
    kind INTEGER NOT NULL,
    name TEXT NOT NULL
);
CREATE TABLE users (
    id INTEGER PRIMARY KEY,
    username TEXT NOT NULL,
    global_name TEXT,
    is_bot INTEGER NOT NULL
);
CREATE TABLE roles (
    id INTEGER PRIMARY KEY,
    name TEXT NOT NULL
);
CREATE TABLE messages (
    id INTEGER PRIMARY KEY,
    channel_id INTEGER NOT NULL,
    author_id INTEGER NOT NULL,
    author_is_bot INTEGER NOT NULL,
    content TEXT NOT NULL,
    text TEXT NOT NULL,
    timestamp TEXT NOT NULL,
    edited_timestamp TEXT,
    reply_to INTEGER,
    attachments TEXT NOT NULL DEFAULT '[]',
    reactions TEXT NOT NULL DEFAULT '[]',
    deleted INTEGER NOT NULL DEFAULT 0
);
CREATE INDEX messages_by_channel ON messages (channel_id, id);
";

/// Version 2: workflows, kept as JSON documents the store does not interpret.
const SCHEMA_V2: &str = "
CREATE TABLE workflows (
    id TEXT PRIMARY KEY,
    state TEXT NOT NULL,
    finished_ms INTEGER,
    body TEXT NOT NULL
);
";

/// Version 4: full-text search and thread state.
///
/// `messages.refs` holds the mention tokens of each message (see `search.rs`); `messages_fts`
/// indexes `text` and `refs` of live rows (kept by the writer: [`IndexBatch`]); `threads`
/// keeps what is known of each thread beyond its session.
const SCHEMA_V4: &str = "
ALTER TABLE messages ADD COLUMN refs TEXT NOT NULL DEFAULT '';
CREATE TABLE threads (
    id INTEGER PRIMARY KEY,
    archived INTEGER NOT NULL,
    locked INTEGER NOT NULL,
    auto_archive_minutes INTEGER NOT NULL
);
CREATE VIRTUAL TABLE messages_fts USING fts5(
    text, refs,
    content = 'messages', content_rowid = 'id',
    tokenize = 'unicode61 remove_diacritics 2'
);
";

/// Version 4, after existing rows got their refs: index the live rows.
const SCHEMA_V4_INDEX: &str = "
INSERT INTO messages_fts (rowid, text, refs) SELECT id, text, refs FROM messages WHERE deleted = 0;
";

/// Version 6: the index is kept by the writer a batch at a time ([`IndexBatch`]) instead of by
/// the per-row triggers version 4 created. Inside a transaction every statement that fired such
/// a trigger opened a statement savepoint, and FTS5 writes its pending terms out as a new
/// segment at each savepoint: a segment per message, merged over and over, which halved
/// gateway ingest.
const SCHEMA_V6: &str = "
DROP TRIGGER IF EXISTS messages_fts_insert;
DROP TRIGGER IF EXISTS messages_fts_delete;
DROP TRIGGER IF EXISTS messages_fts_update;
";

/// The per-row index triggers version 6 drops.
const FTS_TRIGGERS: [&str; 3] = [
    "messages_fts_insert",
    "messages_fts_delete",
    "messages_fts_update",
];

/// Fills `refs` of the rows a store before version 4 holds, and decodes the reaction emoji it
/// kept percent-encoded (`%F0%9F%91%8D` → 👍).
fn upgrade_rows_to_v4(conn: &Connection) -> rusqlite::Result<()> {
    let rows: Vec<(i64, String, String)> = conn
        .prepare("SELECT id, content, reactions FROM messages")?
        .query_map([], |row| Ok((row.get(0)?, row.get(1)?, row.get(2)?)))?
        .collect::<rusqlite::Result<_>>()?;
    let mut update = conn.prepare("UPDATE messages SET refs = ?2, reactions = ?3 WHERE id = ?1")?;
    for (id, content, reactions) in rows {
        let refs = crate::search::refs_of(&content);
        let reactions = decode_reaction_emoji(&reactions).unwrap_or(reactions);
        update.execute(params![id, refs, reactions])?;
    }
    Ok(())
}

/// The reactions JSON with its emoji decoded; `None` when nothing changes (or it is unreadable,
/// which loading reports).
fn decode_reaction_emoji(json: &str) -> Option<String> {
    if !json.contains('%') {
        return None;
    }
    let mut reactions: Vec<switchboard_records::Reaction> = serde_json::from_str(json).ok()?;
    let mut changed = false;
    for reaction in &mut reactions {
        if let std::borrow::Cow::Owned(decoded) = crate::search::decode_emoji(&reaction.emoji) {
            reaction.emoji = decoded;
            changed = true;
        }
    }
    changed
        .then(|| serde_json::to_string(&reactions).ok())
        .flatten()
}

/// Version 5: never miss a message, never answer twice. `answered_triggers`: the messages the
/// agent took to answer (at most once, across restarts). `backfill_gaps`: per channel, the id
/// after which messages may be missing because the gateway identified afresh; a row goes when
/// that channel's backfill caught up.
const SCHEMA_V5: &str = "
CREATE TABLE IF NOT EXISTS answered_triggers (
    message_id INTEGER PRIMARY KEY,
    channel_id INTEGER NOT NULL,
    taken_ms INTEGER NOT NULL
);
CREATE TABLE IF NOT EXISTS backfill_gaps (
    channel_id INTEGER PRIMARY KEY,
    after_id INTEGER NOT NULL
);
";

/// Version 8: idempotency keys (a retried call runs once), and the whole hash an approval is
/// bound to (the card keeps only its first digits).
const SCHEMA_V8: &str = "
CREATE TABLE IF NOT EXISTS idempotency (
    caller TEXT NOT NULL,
    key TEXT NOT NULL,
    input_hash TEXT NOT NULL,
    status INTEGER,
    body TEXT,
    expires_ms INTEGER NOT NULL,
    PRIMARY KEY (caller, key)
);
";

/// Whether `path` names SQLite's private in-memory database rather than a file.
pub(crate) fn is_memory(path: &str) -> bool {
    path == ":memory:" || path.is_empty()
}

/// Opens (creating if needed) and migrates the database at `path`, and takes its lock: with
/// `locking_mode=EXCLUSIVE` a second switchboard on the same file fails to open instead of
/// interleaving writes.
pub(crate) fn open(path: &str) -> Result<Connection, StoreError> {
    let conn = Connection::open(path).map_err(|source| crate::error::cannot_open(path, source))?;
    let fail = |what| move |source| crate::error::from_open(path, what, source);
    conn.busy_timeout(BUSY_TIMEOUT)
        .map_err(fail("set the busy timeout"))?;
    if !is_memory(path) {
        // Before the first access, so WAL runs without shared memory and the lock is held
        // for the connection's lifetime.
        conn.pragma_update(None, "locking_mode", "EXCLUSIVE")
            .map_err(fail("set the locking mode"))?;
    }
    let mode: String = conn
        .query_row("PRAGMA journal_mode = WAL", [], |row| row.get(0))
        .map_err(fail("switch to WAL"))?;
    if !is_memory(path) && !mode.eq_ignore_ascii_case("wal") {
        warn!(
            path,
            mode, "the store could not switch to WAL; writes will be slower"
        );
    }
    conn.pragma_update(None, "synchronous", "NORMAL")
        .map_err(fail("set synchronous"))?;
    migrate(&conn, path)?;
    Ok(conn)
}

/// Whether the schema holds a table named `name` (errors read as "no": the step then runs, and
/// its `IF NOT EXISTS` keeps it harmless).
fn has_table(conn: &Connection, name: &str) -> bool {
    conn.query_row(
        "SELECT 1 FROM sqlite_master WHERE type = 'table' AND name = ?1",
        [name],
        |_| Ok(()),
    )
    .is_ok()
}

/// Whether `table` has a column named `column` (errors read as "no", as for tables).
fn has_column(conn: &Connection, table: &str, column: &str) -> bool {
    conn.prepare(&format!("SELECT * FROM {table} LIMIT 0"))
        .map(|stmt| stmt.column_names().contains(&column))
        .unwrap_or(false)
}

/// Whether the schema holds a trigger named `name` (errors read as "no", as for tables).
fn has_trigger(conn: &Connection, name: &str) -> bool {
    conn.query_row(
        "SELECT 1 FROM sqlite_master WHERE type = 'trigger' AND name = ?1",
        [name],
        |_| Ok(()),
    )
    .is_ok()
}

fn migrate(conn: &Connection, path: &str) -> Result<(), StoreError> {
    let fail = |what| move |source| crate::error::from_open(path, what, source);
    // An immediate transaction takes the write lock now, so a store already in use by another
    // process is reported here, at open, rather than on the first write.
    conn.execute_batch("BEGIN IMMEDIATE")
        .map_err(fail("lock the database"))?;
    let result = (|| {
        let version: i64 = conn
            .query_row("PRAGMA user_version", [], |row| row.get(0))
            .map_err(fail("read the schema version"))?;
        if version > SCHEMA_VERSION {
            return Err(crate::error::newer_schema(path, version, SCHEMA_VERSION));
        }
        if version < 1 {
            debug!(path, "creating the store's schema");
            conn.execute_batch(SCHEMA_V1)
                .map_err(fail("create the schema"))?;
        }
        if version < 2 {
            conn.execute_batch(SCHEMA_V2)
                .map_err(fail("add the workflows table"))?;
        }
        if version < 3 {
            conn.execute_batch(crate::ledger::SCHEMA_V3)
                .map_err(fail("add the audit log, /tools overrides and approvals"))?;
        }
        // Steps from 4 on also run when their tables are missing, so a store that reached a
        // later version without a step (branches landing out of order) still gains it.
        if version < 4 || !has_table(conn, "messages_fts") {
            conn.execute_batch(SCHEMA_V4)
                .map_err(fail("add the search index and thread state"))?;
            upgrade_rows_to_v4(conn).map_err(fail("index the stored messages"))?;
            conn.execute_batch(SCHEMA_V4_INDEX)
                .map_err(fail("index the stored messages"))?;
        }
        if version < 5 || !has_table(conn, "answered_triggers") {
            conn.execute_batch(SCHEMA_V5)
                .map_err(fail("add the answered-trigger and backfill tables"))?;
        }
        if version < 6 || FTS_TRIGGERS.iter().any(|name| has_trigger(conn, name)) {
            conn.execute_batch(SCHEMA_V6)
                .map_err(fail("drop the per-row search index triggers"))?;
        }
        // (A column is added when missing, whatever the version says: `bot::store` wrote
        // version 7 with it.)
        if !has_column(conn, "audit", "count") {
            conn.execute_batch(crate::ledger::SCHEMA_V7)
                .map_err(fail("let audit rows count bursts of refusals"))?;
        }
        if version < 8
            || !has_table(conn, "idempotency")
            || !has_column(conn, "approvals", "binding")
        {
            conn.execute_batch(SCHEMA_V8)
                .map_err(fail("add the idempotency keys"))?;
            if !has_column(conn, "approvals", "binding") {
                conn.execute_batch("ALTER TABLE approvals ADD COLUMN binding TEXT")
                    .map_err(fail("keep the whole hash approvals are bound to"))?;
            }
        }
        // The agent aggregates (issues 23, 25, 26), one step each; each also runs when its
        // tables are missing, so numbering them after other branches' steps changes nothing.
        add_memory(conn).map_err(fail("add the agent's summaries and notes"))?;
        add_runs(conn).map_err(fail("add the run queue"))?;
        add_schedules(conn).map_err(fail("add the schedules and their receipts"))?;
        add_usage(conn).map_err(fail("add the model usage rows"))?;
        add_cluster(conn).map_err(fail("add the cluster tables"))?;
        // Step 14: each audit row's workspace events (issue 24); added when missing, as `count`.
        if !has_column(conn, "audit", "events") {
            conn.execute_batch(crate::ledger::SCHEMA_V14)
                .map_err(fail("let audit rows keep what the call caused"))?;
        }
        // Step 15: `/agent set` bindings (issue 26); added when missing, as the agent steps.
        if !has_table(conn, "agent_bindings") {
            conn.execute_batch(crate::agents::SCHEMA_AGENT_BINDINGS)
                .map_err(fail("add the /agent set bindings"))?;
        }
        // Step 16: run capabilities by digest (issue 23); added when missing, as the agent steps.
        if !has_table(conn, "capabilities") {
            conn.execute_batch(crate::capabilities::SCHEMA_CAPABILITIES)
                .map_err(fail("add the run capabilities"))?;
        }
        // Step 17: the live feed's events (issue 23); added when missing, as the agent steps.
        if !has_table(conn, "events") {
            conn.execute_batch(crate::events::SCHEMA_EVENTS)
                .map_err(fail("add the events"))?;
        }
        // Step 18: each run's usage (issue 23 §4); added when missing, as `count`.
        if !has_column(conn, "runs", "usage") {
            conn.execute_batch(crate::agents::SCHEMA_RUN_USAGE)
                .map_err(fail("keep each run's usage"))?;
        }
        // Step 19: the cluster's agreed shard count (issue 23); added when missing.
        if !has_table(conn, "cluster_shard_count") {
            conn.execute_batch(crate::agents::SCHEMA_SHARD_COUNT)
                .map_err(fail("add the cluster's shard count"))?;
        }
        // Step 20: the loop guard's counts of bot turns (issue 23 §3); added when missing.
        if !has_table(conn, "bot_turns") {
            conn.execute_batch(crate::bot_turns::SCHEMA_BOT_TURNS)
                .map_err(fail("add the loop guard's counts"))?;
        }
        // Later versions: `if version < 21 || !has_table(..) { ... }`, each step in this same
        // transaction.
        if version != SCHEMA_VERSION {
            conn.pragma_update(None, "user_version", SCHEMA_VERSION)
                .map_err(fail("record the schema version"))?;
        }
        Ok(())
    })();
    match result {
        Ok(()) => conn
            .execute_batch("COMMIT")
            .map_err(fail("commit the schema")),
        Err(err) => {
            let _ = conn.execute_batch("ROLLBACK");
            Err(err)
        }
    }
}

/// Step 8 (renumbered at merge): the agent's summaries and notes (issue 25).
fn add_memory(conn: &Connection) -> rusqlite::Result<()> {
    if has_table(conn, "summaries") && has_table(conn, "notes") {
        return Ok(());
    }
    conn.execute_batch(crate::agents::SCHEMA_MEMORY)
}

/// Step 9 (renumbered at merge): the runs and their per-session queue (issues 23, 26).
fn add_runs(conn: &Connection) -> rusqlite::Result<()> {
    if has_table(conn, "runs") {
        return Ok(());
    }
    conn.execute_batch(crate::agents::SCHEMA_RUNS)
}

/// Step 10 (renumbered at merge): schedules and their receipts (issue 26).
fn add_schedules(conn: &Connection) -> rusqlite::Result<()> {
    if has_table(conn, "schedules") && has_table(conn, "schedule_receipts") {
        return Ok(());
    }
    conn.execute_batch(crate::agents::SCHEMA_SCHEDULES)
}

/// Step 11 (renumbered at merge): model usage rows (issue 26).
fn add_usage(conn: &Connection) -> rusqlite::Result<()> {
    if has_table(conn, "usage") {
        return Ok(());
    }
    conn.execute_batch(crate::agents::SCHEMA_USAGE)
}

/// Step 12 (renumbered at merge): nodes, shard leases, IDENTIFY slots, once keys (issue 23).
fn add_cluster(conn: &Connection) -> rusqlite::Result<()> {
    if has_table(conn, "once_keys") {
        return Ok(());
    }
    conn.execute_batch(crate::agents::SCHEMA_CLUSTER)
}
