//! The durable side of the store: opening the SQLite file, its schema and migrations, loading
//! the hot maps at start, applying changes, pruning and checkpointing.
//!
//! Ids are Discord snowflakes stored as SQLite integers (the `u64` bit pattern as `i64`; every
//! snowflake issued before 2084 is below `i64::MAX`, so the order of ids is kept).

use std::collections::HashMap;
use std::time::Duration;

use entity::Snowflake;
use rusqlite::{params, Connection, OptionalExtension, Row};
use tracing::{debug, warn};

use super::error::StoreError;
use super::hot::{Hot, UserEntry};
use super::model::{SessionKind, StoredMessage, StoredSession, ThreadState};

/// The schema version this code writes (`PRAGMA user_version`).
pub const SCHEMA_VERSION: i64 = 7;

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
        let refs = super::search::refs_of(&content);
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
    let mut reactions: Vec<super::model::StoredReaction> = serde_json::from_str(json).ok()?;
    let mut changed = false;
    for reaction in &mut reactions {
        if let std::borrow::Cow::Owned(decoded) = super::search::decode_emoji(&reaction.emoji) {
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

/// Finished workflows are kept this long for `workflow.list`, then pruned at open.
const FINISHED_WORKFLOWS_KEPT_MS: i64 = 7 * 24 * 3600 * 1000;

fn to_sql(id: Snowflake) -> i64 {
    id.0 as i64
}

fn from_sql(id: i64) -> Snowflake {
    Snowflake(id as u64)
}

/// Whether `path` names SQLite's private in-memory database rather than a file.
pub(crate) fn is_memory(path: &str) -> bool {
    path == ":memory:" || path.is_empty()
}

/// Opens (creating if needed) and migrates the database at `path`, and takes its lock: with
/// `locking_mode=EXCLUSIVE` a second switchboard on the same file fails to open instead of
/// interleaving writes.
pub(crate) fn open(path: &str) -> Result<Connection, StoreError> {
    let conn = Connection::open(path).map_err(|source| StoreError::Open {
        path: path.to_owned(),
        source,
    })?;
    let fail = |what| move |source| StoreError::from_open(path, what, source);
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
    conn.query_row(
        "SELECT 1 FROM pragma_table_info(?1) WHERE name = ?2",
        [table, column],
        |_| Ok(()),
    )
    .is_ok()
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
    let fail = |what| move |source| StoreError::from_open(path, what, source);
    // An immediate transaction takes the write lock now, so a store already in use by another
    // process is reported here, at open, rather than on the first write.
    conn.execute_batch("BEGIN IMMEDIATE")
        .map_err(fail("lock the database"))?;
    let result = (|| {
        let version: i64 = conn
            .query_row("PRAGMA user_version", [], |row| row.get(0))
            .map_err(fail("read the schema version"))?;
        if version > SCHEMA_VERSION {
            return Err(StoreError::NewerSchema {
                path: path.to_owned(),
                found: version,
                supported: SCHEMA_VERSION,
            });
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
            conn.execute_batch(super::ledger::SCHEMA_V3)
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
        // (A column is added when missing, whatever the version says.)
        if !has_column(conn, "audit", "count") {
            conn.execute_batch(super::ledger::SCHEMA_V7)
                .map_err(fail("let audit rows count bursts of refusals"))?;
        }
        // Later versions: `if version < 8 || !has_table(..) { ... }`, each step in this same
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

/// Fills the hot maps: sessions, users, roles, the newest `messages_per_channel` live
/// messages of each channel, and the ids of deleted messages not yet pruned.
/// Every stored session of a known kind; rows of an unknown kind are logged and skipped.
fn read_sessions(conn: &Connection, path: &str) -> rusqlite::Result<Vec<StoredSession>> {
    let mut stmt = conn.prepare("SELECT id, guild_id, parent_id, kind, name FROM sessions")?;
    let rows = stmt.query_map([], |row| {
        Ok((
            from_sql(row.get(0)?),
            row.get::<_, Option<i64>>(1)?.map(from_sql),
            row.get::<_, Option<i64>>(2)?.map(from_sql),
            row.get::<_, i64>(3)?,
            row.get::<_, String>(4)?,
        ))
    })?;
    let mut sessions = Vec::new();
    for row in rows {
        let (id, guild_id, parent_id, kind, name) = row?;
        let Some(kind) = SessionKind::from_code(kind) else {
            warn!(path, session = %id, kind, "skipping a stored session of unknown kind");
            continue;
        };
        sessions.push(StoredSession {
            id,
            guild_id,
            parent_id,
            kind,
            name,
        });
    }
    Ok(sessions)
}

/// The sessions of a store file, read without taking its lock or changing it (for
/// `check-config`). Fails when the file is missing, locked by a running switchboard, or not a
/// store.
pub(crate) fn peek_sessions(path: &str) -> Result<Vec<StoredSession>, StoreError> {
    use rusqlite::OpenFlags;
    let conn = Connection::open_with_flags(
        path,
        OpenFlags::SQLITE_OPEN_READ_ONLY | OpenFlags::SQLITE_OPEN_NO_MUTEX,
    )
    .map_err(|source| StoreError::Open {
        path: path.to_owned(),
        source,
    })?;
    read_sessions(&conn, path)
        .map_err(|source| StoreError::from_open(path, "read the sessions", source))
}

pub(crate) fn load(conn: &Connection, hot: &Hot, path: &str) -> Result<(), StoreError> {
    let fail = |source| StoreError::Load {
        path: path.to_owned(),
        source,
    };
    for session in read_sessions(conn, path).map_err(fail)? {
        hot.upsert_session(session, |_| {});
    }

    let mut stmt = conn
        .prepare("SELECT id, username, global_name, is_bot FROM users")
        .map_err(fail)?;
    let rows = stmt
        .query_map([], |row| {
            Ok((
                from_sql(row.get(0)?),
                UserEntry {
                    username: row.get::<_, String>(1)?.into(),
                    global_name: row.get::<_, Option<String>>(2)?.map(Into::into),
                    is_bot: row.get(3)?,
                },
            ))
        })
        .map_err(fail)?;
    for row in rows {
        let (id, user) = row.map_err(fail)?;
        hot.upsert_user(id, user, |_| {});
    }

    let mut stmt = conn.prepare("SELECT id, name FROM roles").map_err(fail)?;
    let rows = stmt
        .query_map([], |row| {
            Ok((from_sql(row.get(0)?), row.get::<_, String>(1)?))
        })
        .map_err(fail)?;
    for row in rows {
        let (id, name) = row.map_err(fail)?;
        hot.upsert_role(id, &name, || {});
    }

    let mut stmt = conn
        .prepare("SELECT id, archived, locked, auto_archive_minutes FROM threads")
        .map_err(fail)?;
    let rows = stmt
        .query_map([], |row| {
            Ok((
                from_sql(row.get(0)?),
                ThreadState {
                    archived: row.get(1)?,
                    locked: row.get(2)?,
                    auto_archive_minutes: row.get(3)?,
                    owner_id: None,
                },
            ))
        })
        .map_err(fail)?;
    for row in rows {
        let (id, state) = row.map_err(fail)?;
        hot.threads.insert(id, state);
    }

    let mut stmt = conn
        .prepare(
            "SELECT id, channel_id, author_id, author_is_bot, content, text, timestamp,
                    edited_timestamp, reply_to, attachments, reactions
             FROM (SELECT *, ROW_NUMBER() OVER (PARTITION BY channel_id ORDER BY id DESC) AS rn
                   FROM messages WHERE deleted = 0)
             WHERE rn <= ?1",
        )
        .map_err(fail)?;
    let limit = i64::try_from(hot.messages_per_channel).unwrap_or(i64::MAX);
    let rows = stmt.query_map([limit], message_from_row).map_err(fail)?;
    let mut loaded = 0usize;
    for row in rows {
        hot.load_message(&row.map_err(fail)?);
        loaded += 1;
    }

    let mut stmt = conn
        .prepare("SELECT channel_id, id FROM messages WHERE deleted = 1")
        .map_err(fail)?;
    let rows = stmt
        .query_map([], |row| Ok((from_sql(row.get(0)?), from_sql(row.get(1)?))))
        .map_err(fail)?;
    for row in rows {
        let (channel_id, id) = row.map_err(fail)?;
        hot.load_deleted(channel_id, id);
    }
    debug!(
        path,
        sessions = hot.sessions.len(),
        users = hot.users.len(),
        roles = hot.roles.len(),
        messages = loaded,
        "store loaded"
    );
    Ok(())
}

/// A message from a row whose first eleven columns are those `load` selects, in its order.
pub(crate) fn message_from_row(row: &Row<'_>) -> rusqlite::Result<StoredMessage> {
    let id = from_sql(row.get(0)?);
    let attachments: String = row.get(9)?;
    let reactions: String = row.get(10)?;
    Ok(StoredMessage {
        id,
        channel_id: from_sql(row.get(1)?),
        author_id: from_sql(row.get(2)?),
        author_is_bot: row.get(3)?,
        content: row.get(4)?,
        text: row.get(5)?,
        timestamp: row.get(6)?,
        edited_timestamp: row.get(7)?,
        reply_to: row.get::<_, Option<i64>>(8)?.map(from_sql),
        attachments: parse_json_list(&attachments, id, "attachments"),
        reactions: parse_json_list(&reactions, id, "reactions"),
    })
}

fn parse_json_list<T: serde::de::DeserializeOwned>(
    json: &str,
    id: Snowflake,
    what: &str,
) -> Vec<T> {
    serde_json::from_str(json).unwrap_or_else(|err| {
        warn!(message = %id, what, %err, "ignoring unreadable stored {what}");
        Vec::new()
    })
}

/// One durable change, queued by a write method after it changed the hot maps. Message
/// changes carry only ids: the writer reads the message's current state from the hot maps when
/// it commits, so a burst of ingest doesn't hold a second copy of every message in the queue.
#[derive(Debug)]
pub(crate) enum Change {
    UpsertSession(Box<StoredSession>),
    RemoveSession(Snowflake),
    UpsertUser(Box<(Snowflake, UserEntry)>),
    UpsertRole(Snowflake, Box<str>),
    RemoveRole(Snowflake),
    /// Write the message as the hot maps now hold it (inserted, edited or reactions changed);
    /// nothing when it has left them since (deleted, or beyond retention).
    SaveMessage {
        channel_id: Snowflake,
        id: Snowflake,
    },
    DeleteMessages {
        channel_id: Snowflake,
        ids: Box<[u64]>,
    },
    /// Remove every row of a channel's messages (the allowlist no longer allows it).
    ForgetChannel(Snowflake),
    /// Keep a thread's state (replacing what was kept).
    SaveThread(Snowflake, ThreadState),
    SaveWorkflow(Box<WorkflowRow>),
    /// The agent took this message to answer.
    TakeAnswer {
        channel_id: Snowflake,
        message_id: Snowflake,
        taken_ms: u64,
    },
    /// Forget answered triggers whose message id is below this (older than the record keeps).
    PruneAnswered(Snowflake),
    /// Messages of this channel after `after` may be missing (kept when an older row exists).
    OpenGap {
        channel_id: Snowflake,
        after: Snowflake,
    },
    /// The channel's backfill caught up.
    CloseGap(Snowflake),
    /// An audit row, a `/tools` override or an approval request.
    Ledger(Box<super::ledger::LedgerChange>),
}

/// A workflow as the store keeps it: an opaque JSON body, plus what pruning needs.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct WorkflowRow {
    /// The workflow's id; saving a row with the same id replaces it.
    pub id: String,
    /// Its state: `waiting`, `answered`, `timed_out` or `cancelled`.
    pub state: String,
    /// When it finished, in milliseconds since the Unix epoch; `None` while it waits. Rows finished
    /// more than a week before an open are pruned at that open.
    pub finished_ms: Option<u64>,
    /// The whole workflow as JSON, kept as is: the store does not read it.
    pub body: String,
}

impl Change {
    /// What the change does, for error logs.
    pub(crate) fn describe(&self) -> String {
        match self {
            Change::UpsertSession(s) => format!("store session {}", s.id),
            Change::RemoveSession(id) => format!("remove session {id}"),
            Change::UpsertUser(user) => format!("store user {}", user.0),
            Change::UpsertRole(id, _) => format!("store role {id}"),
            Change::RemoveRole(id) => format!("remove role {id}"),
            Change::SaveMessage { channel_id, id } => {
                format!("store message {id} in channel {channel_id}")
            }
            Change::SaveWorkflow(row) => format!("store workflow {}", row.id),
            Change::TakeAnswer { message_id, .. } => {
                format!("record message {message_id} as answered")
            }
            Change::PruneAnswered(below) => {
                format!("forget answered triggers older than message {below}")
            }
            Change::OpenGap { channel_id, after } => {
                format!("record a backfill gap after {after} in channel {channel_id}")
            }
            Change::CloseGap(channel_id) => {
                format!("close the backfill gap of channel {channel_id}")
            }
            Change::Ledger(change) => change.describe(),
            Change::ForgetChannel(id) => format!("forget the messages of channel {id}"),
            Change::SaveThread(id, _) => format!("store the state of thread {id}"),
            Change::DeleteMessages { channel_id, ids } => {
                format!(
                    "mark {} message(s) deleted in channel {channel_id}",
                    ids.len()
                )
            }
        }
    }

    /// The channel whose retention this change may affect.
    pub(crate) fn channel(&self) -> Option<Snowflake> {
        match self {
            Change::SaveMessage { channel_id, .. } | Change::DeleteMessages { channel_id, .. } => {
                Some(*channel_id)
            }
            _ => None,
        }
    }
}

fn json<T: serde::Serialize>(value: &T) -> rusqlite::Result<String> {
    serde_json::to_string(value)
        .map_err(|err| rusqlite::Error::ToSqlConversionFailure(Box::new(err)))
}

/// What the search index holds, or should hold, for one message: its `text` and `refs`.
type Indexed = Option<(String, String)>;

/// One message's index entry within a batch: what the index has held for it since before the
/// batch, and what it should hold once the batch is applied.
#[derive(Debug)]
struct IndexEntry {
    held: Indexed,
    wanted: Indexed,
}

/// The changes a writer batch owes `messages_fts`, applied together at the batch's end (inside
/// its transaction, after every other statement of it).
///
/// Why not per row: FTS5 keeps pending terms in memory and writes them out as a new segment
/// whenever a statement savepoint opens or a rowid arrives out of order, so a write per message
/// between other statements made a segment per message. Here each message the batch touched
/// gets at most one removal (of what the index held before the batch: the external-content
/// `delete` command needs those exact values) and one insertion, all removals first and each
/// kind in rowid order.
#[derive(Debug, Default)]
pub(crate) struct IndexBatch {
    entries: HashMap<i64, IndexEntry>,
}

impl IndexBatch {
    /// Notes `id` before a statement may change its row: on its first touch in this batch,
    /// what the index holds for it (the stored `text` and `refs` when the row is live).
    fn touch(&mut self, conn: &Connection, id: i64) -> rusqlite::Result<()> {
        if self.entries.contains_key(&id) {
            return Ok(());
        }
        let held: Indexed = conn
            .prepare_cached("SELECT text, refs FROM messages WHERE id = ?1 AND deleted = 0")?
            .query_row([id], |row| Ok((row.get(0)?, row.get(1)?)))
            .optional()?;
        self.entries.insert(
            id,
            IndexEntry {
                wanted: held.clone(),
                held,
            },
        );
        Ok(())
    }

    /// After a statement changed the row of `id`: what the index should now hold. An `id` not
    /// touched before had no row, so the index held nothing for it.
    fn want(&mut self, id: i64, wanted: Indexed) {
        self.entries
            .entry(id)
            .and_modify(|entry| entry.wanted.clone_from(&wanted))
            .or_insert(IndexEntry { held: None, wanted });
    }

    /// Brings the index in step with every row touched since the last call.
    pub(crate) fn apply(&mut self, conn: &Connection) -> rusqlite::Result<()> {
        if self.entries.is_empty() {
            return Ok(());
        }
        let mut entries: Vec<(i64, IndexEntry)> = self
            .entries
            .drain()
            .filter(|(_, entry)| entry.held != entry.wanted)
            .collect();
        entries.sort_unstable_by_key(|(id, _)| *id);
        let mut remove = conn.prepare_cached(
            "INSERT INTO messages_fts (messages_fts, rowid, text, refs)
             VALUES ('delete', ?1, ?2, ?3)",
        )?;
        for (id, entry) in &entries {
            if let Some((text, refs)) = &entry.held {
                remove.execute(params![id, text, refs])?;
            }
        }
        let mut insert = conn
            .prepare_cached("INSERT INTO messages_fts (rowid, text, refs) VALUES (?1, ?2, ?3)")?;
        for (id, entry) in &entries {
            if let Some((text, refs)) = &entry.wanted {
                insert.execute(params![id, text, refs])?;
            }
        }
        Ok(())
    }

    /// Forgets what was noted (the batch's transaction was rolled back).
    pub(crate) fn clear(&mut self) {
        self.entries.clear();
    }
}

/// Removes from the index the live rows of `channel_id` with an id below `below` (all of them
/// when `None`), before they are deleted. Pending batch entries must be applied first.
fn unindex_channel(
    conn: &Connection,
    channel_id: i64,
    below: Option<i64>,
) -> rusqlite::Result<usize> {
    const REMOVE: &str = "INSERT INTO messages_fts (messages_fts, rowid, text, refs)
         SELECT 'delete', id, text, refs FROM messages WHERE channel_id = ?1 AND deleted = 0";
    match below {
        None => conn.prepare_cached(REMOVE)?.execute([channel_id]),
        Some(below) => conn
            .prepare_cached(&format!("{REMOVE} AND id < ?2"))?
            .execute(params![channel_id, below]),
    }
}

/// Applies one change inside the writer's open transaction; what it owes the search index is
/// noted in `index`, which the writer applies at the batch's end.
pub(crate) fn apply(
    conn: &Connection,
    hot: &Hot,
    index: &mut IndexBatch,
    change: &Change,
) -> rusqlite::Result<()> {
    match change {
        Change::TakeAnswer {
            channel_id,
            message_id,
            taken_ms,
        } => {
            conn.prepare_cached(
                "INSERT INTO answered_triggers (message_id, channel_id, taken_ms)
                 VALUES (?1, ?2, ?3) ON CONFLICT (message_id) DO NOTHING",
            )?
            .execute(params![
                to_sql(*message_id),
                to_sql(*channel_id),
                *taken_ms as i64
            ])?;
        }
        Change::PruneAnswered(below) => {
            conn.prepare_cached("DELETE FROM answered_triggers WHERE message_id < ?1")?
                .execute([to_sql(*below)])?;
        }
        Change::OpenGap { channel_id, after } => {
            // An older gap still open stays: the messages after it are still unfetched.
            conn.prepare_cached(
                "INSERT INTO backfill_gaps (channel_id, after_id) VALUES (?1, ?2)
                 ON CONFLICT (channel_id) DO UPDATE SET after_id = MIN(after_id, excluded.after_id)",
            )?
            .execute(params![to_sql(*channel_id), to_sql(*after)])?;
        }
        Change::CloseGap(channel_id) => {
            conn.prepare_cached("DELETE FROM backfill_gaps WHERE channel_id = ?1")?
                .execute([to_sql(*channel_id)])?;
        }
        Change::Ledger(change) => super::ledger::apply(conn, change)?,
        Change::SaveWorkflow(row) => {
            conn.prepare_cached(
                "INSERT INTO workflows (id, state, finished_ms, body) VALUES (?1, ?2, ?3, ?4)
                 ON CONFLICT(id) DO UPDATE SET state = excluded.state,
                     finished_ms = excluded.finished_ms, body = excluded.body",
            )?
            .execute(params![
                row.id,
                row.state,
                row.finished_ms.map(|ms| ms as i64),
                row.body
            ])?;
        }
        Change::UpsertSession(s) => {
            conn.prepare_cached(
                "INSERT INTO sessions (id, guild_id, parent_id, kind, name) VALUES (?1, ?2, ?3, ?4, ?5)
                 ON CONFLICT (id) DO UPDATE SET guild_id = excluded.guild_id,
                     parent_id = excluded.parent_id, kind = excluded.kind, name = excluded.name",
            )?
            .execute(params![
                to_sql(s.id),
                s.guild_id.map(to_sql),
                s.parent_id.map(to_sql),
                i64::from(s.kind.code()),
                s.name
            ])?;
        }
        Change::RemoveSession(id) => {
            conn.prepare_cached("DELETE FROM sessions WHERE id = ?1")?
                .execute([to_sql(*id)])?;
            conn.prepare_cached("DELETE FROM threads WHERE id = ?1")?
                .execute([to_sql(*id)])?;
        }
        Change::SaveThread(id, state) => {
            conn.prepare_cached(
                "INSERT INTO threads (id, archived, locked, auto_archive_minutes)
                 VALUES (?1, ?2, ?3, ?4)
                 ON CONFLICT (id) DO UPDATE SET archived = excluded.archived,
                     locked = excluded.locked,
                     auto_archive_minutes = excluded.auto_archive_minutes",
            )?
            .execute(params![
                to_sql(*id),
                state.archived,
                state.locked,
                state.auto_archive_minutes
            ])?;
        }
        Change::ForgetChannel(id) => {
            index.apply(conn)?;
            unindex_channel(conn, to_sql(*id), None)?;
            conn.prepare_cached("DELETE FROM messages WHERE channel_id = ?1")?
                .execute([to_sql(*id)])?;
        }
        Change::UpsertUser(user) => {
            let (
                id,
                UserEntry {
                    username,
                    global_name,
                    is_bot,
                },
            ) = &**user;
            conn.prepare_cached(
                "INSERT INTO users (id, username, global_name, is_bot) VALUES (?1, ?2, ?3, ?4)
                 ON CONFLICT (id) DO UPDATE SET username = excluded.username,
                     global_name = excluded.global_name, is_bot = excluded.is_bot",
            )?
            .execute(params![
                to_sql(*id),
                &**username,
                global_name.as_deref(),
                is_bot
            ])?;
        }
        Change::UpsertRole(id, name) => {
            conn.prepare_cached(
                "INSERT INTO roles (id, name) VALUES (?1, ?2)
                 ON CONFLICT (id) DO UPDATE SET name = excluded.name",
            )?
            .execute(params![to_sql(*id), &**name])?;
        }
        Change::RemoveRole(id) => {
            conn.prepare_cached("DELETE FROM roles WHERE id = ?1")?
                .execute([to_sql(*id)])?;
        }
        Change::SaveMessage { channel_id, id } => {
            // The hot maps are the truth; mirror them, even over an old row.
            let Some(m) = hot.message(*channel_id, *id) else {
                return Ok(());
            };
            let row = to_sql(m.id);
            let refs = super::search::refs_of(&m.content);
            let attachments = json(&m.attachments)?;
            let reactions = json(&m.reactions)?;
            let values = params![
                row,
                to_sql(m.channel_id),
                to_sql(m.author_id),
                m.author_is_bot,
                m.content,
                m.text,
                m.timestamp,
                m.edited_timestamp,
                m.reply_to.map(to_sql),
                attachments,
                reactions,
                refs,
            ];
            // A new message (nearly every save) is one insert; only a row already there is
            // read first, for what the index holds of it, and then replaced.
            let inserted = conn
                .prepare_cached(
                    "INSERT INTO messages (id, channel_id, author_id, author_is_bot, content,
                         text, timestamp, edited_timestamp, reply_to, attachments, reactions,
                         deleted, refs)
                     VALUES (?1, ?2, ?3, ?4, ?5, ?6, ?7, ?8, ?9, ?10, ?11, 0, ?12)
                     ON CONFLICT (id) DO NOTHING",
                )?
                .execute(values)?;
            if inserted == 0 {
                index.touch(conn, row)?;
                conn.prepare_cached(
                    "UPDATE messages SET channel_id = ?2, author_id = ?3, author_is_bot = ?4,
                         content = ?5, text = ?6, timestamp = ?7, edited_timestamp = ?8,
                         reply_to = ?9, attachments = ?10, reactions = ?11, deleted = 0,
                         refs = ?12
                     WHERE id = ?1",
                )?
                .execute(values)?;
            }
            index.want(row, Some((m.text, refs)));
        }
        Change::DeleteMessages { ids, .. } => {
            let mut stmt = conn.prepare_cached("UPDATE messages SET deleted = 1 WHERE id = ?1")?;
            for id in ids {
                let row = *id as i64;
                index.touch(conn, row)?;
                if stmt.execute([row])? > 0 {
                    index.want(row, None);
                }
            }
        }
    }
    Ok(())
}

/// Deletes one channel's rows marked deleted and its live rows beyond the newest `keep`, taking
/// those live rows out of the search index first. Returns how many rows went.
pub(crate) fn prune_channel(
    conn: &Connection,
    channel_id: Snowflake,
    keep: usize,
) -> rusqlite::Result<usize> {
    let channel = to_sql(channel_id);
    if keep == 0 {
        unindex_channel(conn, channel, None)?;
        return conn
            .prepare_cached("DELETE FROM messages WHERE channel_id = ?1")?
            .execute([channel]);
    }
    let offset = i64::try_from(keep - 1).unwrap_or(i64::MAX);
    // The oldest live row kept: every live row below it goes.
    let oldest_kept: Option<i64> = conn
        .prepare_cached(
            "SELECT id FROM messages WHERE channel_id = ?1 AND deleted = 0
             ORDER BY id DESC LIMIT 1 OFFSET ?2",
        )?
        .query_row(params![channel, offset], |row| row.get(0))
        .optional()?;
    if let Some(below) = oldest_kept {
        unindex_channel(conn, channel, Some(below))?;
    }
    conn.prepare_cached("DELETE FROM messages WHERE channel_id = ?1 AND (deleted = 1 OR id < ?2)")?
        .execute(params![channel, oldest_kept.unwrap_or(i64::MIN)])
}

/// Prunes every channel (at open, so a smaller `messages_per_channel` takes effect at once).
pub(crate) fn prune_all(conn: &Connection, keep: usize) -> rusqlite::Result<usize> {
    let channels: Vec<i64> = conn
        .prepare("SELECT DISTINCT channel_id FROM messages")?
        .query_map([], |row| row.get(0))?
        .collect::<rusqlite::Result<_>>()?;
    let mut pruned = 0;
    conn.execute_batch("BEGIN")?;
    for channel in channels {
        match prune_channel(conn, from_sql(channel), keep) {
            Ok(n) => pruned += n,
            Err(err) => {
                let _ = conn.execute_batch("ROLLBACK");
                return Err(err);
            }
        }
    }
    conn.execute_batch("COMMIT")?;
    Ok(pruned)
}

/// Moves the WAL's content into the database file and truncates the WAL.
pub(crate) fn checkpoint(conn: &Connection) -> rusqlite::Result<()> {
    conn.query_row("PRAGMA wal_checkpoint(TRUNCATE)", [], |_| Ok(()))
        .optional()
        .map(|_| ())
}

/// Drops workflows finished more than a week before `now_ms`, then reads the rest.
pub(crate) fn load_workflows(
    conn: &Connection,
    now_ms: u64,
    path: &str,
) -> Result<Vec<WorkflowRow>, StoreError> {
    let fail = |source| StoreError::Load {
        path: path.to_owned(),
        source,
    };
    let cutoff = (now_ms as i64).saturating_sub(FINISHED_WORKFLOWS_KEPT_MS);
    conn.execute(
        "DELETE FROM workflows WHERE finished_ms IS NOT NULL AND finished_ms < ?1",
        params![cutoff],
    )
    .map_err(fail)?;
    let mut stmt = conn
        .prepare("SELECT id, state, finished_ms, body FROM workflows ORDER BY id")
        .map_err(fail)?;
    let rows = stmt
        .query_map([], |row| {
            Ok(WorkflowRow {
                id: row.get(0)?,
                state: row.get(1)?,
                finished_ms: row.get::<_, Option<i64>>(2)?.map(|ms| ms as u64),
                body: row.get(3)?,
            })
        })
        .map_err(fail)?;
    rows.collect::<rusqlite::Result<_>>().map_err(fail)
}

/// Drops answered triggers whose message id is below `below`, then reads the rest's ids.
pub(crate) fn load_answered(
    conn: &Connection,
    below: Snowflake,
    path: &str,
) -> Result<std::collections::HashSet<u64>, StoreError> {
    let fail = |source| StoreError::Load {
        path: path.to_owned(),
        source,
    };
    conn.execute(
        "DELETE FROM answered_triggers WHERE message_id < ?1",
        [to_sql(below)],
    )
    .map_err(fail)?;
    let mut stmt = conn
        .prepare("SELECT message_id FROM answered_triggers")
        .map_err(fail)?;
    let rows = stmt
        .query_map([], |row| row.get::<_, i64>(0))
        .map_err(fail)?;
    rows.map(|row| row.map(|id| from_sql(id).0))
        .collect::<rusqlite::Result<_>>()
        .map_err(fail)
}

/// The open backfill gaps: channel → the id after which messages may be missing.
pub(crate) fn load_gaps(
    conn: &Connection,
    path: &str,
) -> Result<std::collections::HashMap<Snowflake, Snowflake>, StoreError> {
    let fail = |source| StoreError::Load {
        path: path.to_owned(),
        source,
    };
    let mut stmt = conn
        .prepare("SELECT channel_id, after_id FROM backfill_gaps")
        .map_err(fail)?;
    let rows = stmt
        .query_map([], |row| Ok((from_sql(row.get(0)?), from_sql(row.get(1)?))))
        .map_err(fail)?;
    rows.collect::<rusqlite::Result<_>>().map_err(fail)
}
