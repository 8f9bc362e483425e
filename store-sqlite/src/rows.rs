//! Rows: the message aggregate in SQL — reading a snapshot and single rows back, applying
//! queued writes inside the writer's transaction (keeping the search index exact a batch at a
//! time), and pruning by retention.
//!
//! Ids are Discord snowflakes stored as SQLite integers (the `u64` bit pattern as `i64`; every
//! snowflake issued before 2084 is below `i64::MAX`, so the order of ids is kept).

use std::collections::HashMap;

use entity::Snowflake;
use rusqlite::{params, Connection, OptionalExtension, Row};
use serde::{Deserialize, Serialize};
use switchboard_records::{
    Attachment, Gap, Message, MessageQuery, Reaction, Role, Session, SessionKind, ThreadState, User,
};
use switchboard_store::Snapshot;
use tracing::warn;

pub(crate) fn to_sql(id: Snowflake) -> i64 {
    id.0 as i64
}

pub(crate) fn from_sql(id: i64) -> Snowflake {
    Snowflake(id as u64)
}

pub(crate) fn ms_to_sql(ms: u64) -> i64 {
    i64::try_from(ms).unwrap_or(i64::MAX)
}

/// An attachment as the `attachments` JSON column holds it (snake_case, as files have always
/// been written; the wire shape is the record's camelCase).
#[derive(Serialize, Deserialize)]
struct AttachmentColumn {
    filename: String,
    url: String,
    size: u64,
    content_type: Option<String>,
}

pub(crate) fn attachments_json(attachments: &[Attachment]) -> rusqlite::Result<String> {
    if attachments.is_empty() {
        return Ok("[]".to_owned());
    }
    let columns: Vec<AttachmentColumn> = attachments
        .iter()
        .map(|a| AttachmentColumn {
            filename: a.filename.clone(),
            url: a.url.clone(),
            size: a.size,
            content_type: a.content_type.clone(),
        })
        .collect();
    json(&columns)
}

pub(crate) fn reactions_json(reactions: &[Reaction]) -> rusqlite::Result<String> {
    if reactions.is_empty() {
        return Ok("[]".to_owned());
    }
    json(&reactions)
}

pub(crate) fn json<T: serde::Serialize>(value: &T) -> rusqlite::Result<String> {
    serde_json::to_string(value)
        .map_err(|err| rusqlite::Error::ToSqlConversionFailure(Box::new(err)))
}

/// The columns a message is read back with, in [`message_from_row`]'s order.
pub(crate) const MESSAGE_COLUMNS: &str =
    "id, channel_id, author_id, author_is_bot, content, text, timestamp,
                    edited_timestamp, reply_to, attachments, reactions";

/// A message from a row whose first eleven columns are [`MESSAGE_COLUMNS`].
pub(crate) fn message_from_row(row: &Row<'_>) -> rusqlite::Result<Message> {
    let id = from_sql(row.get(0)?);
    let attachments: String = row.get(9)?;
    let reactions: String = row.get(10)?;
    Ok(Message {
        id,
        channel_id: from_sql(row.get(1)?),
        author_id: from_sql(row.get(2)?),
        author_is_bot: row.get(3)?,
        content: row.get(4)?,
        text: row.get(5)?,
        timestamp: row.get(6)?,
        edited_timestamp: row.get(7)?,
        reply_to: row.get::<_, Option<i64>>(8)?.map(from_sql),
        attachments: parse_json_list::<AttachmentColumn>(&attachments, id, "attachments")
            .into_iter()
            .map(|a| Attachment {
                filename: a.filename,
                url: a.url,
                size: a.size,
                content_type: a.content_type,
            })
            .collect(),
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

/// Every stored session of a known kind; rows of an unknown kind are logged and skipped.
pub(crate) fn read_sessions(conn: &Connection, path: &str) -> rusqlite::Result<Vec<Session>> {
    let mut stmt =
        conn.prepare("SELECT id, guild_id, parent_id, kind, name FROM sessions ORDER BY id")?;
    let rows = stmt.query_map([], session_row)?;
    let mut sessions = Vec::new();
    for row in rows {
        let (id, guild_id, parent_id, kind, name) = row?;
        let Some(kind) = SessionKind::from_code(kind) else {
            warn!(path, session = %id, kind, "skipping a stored session of unknown kind");
            continue;
        };
        sessions.push(Session {
            id,
            guild_id,
            parent_id,
            kind,
            name,
        });
    }
    Ok(sessions)
}

type SessionRow = (Snowflake, Option<Snowflake>, Option<Snowflake>, i64, String);

fn session_row(row: &Row<'_>) -> rusqlite::Result<SessionRow> {
    Ok((
        from_sql(row.get(0)?),
        row.get::<_, Option<i64>>(1)?.map(from_sql),
        row.get::<_, Option<i64>>(2)?.map(from_sql),
        row.get::<_, i64>(3)?,
        row.get::<_, String>(4)?,
    ))
}

pub(crate) fn session(conn: &Connection, id: Snowflake) -> rusqlite::Result<Option<Session>> {
    let row = conn
        .prepare_cached("SELECT id, guild_id, parent_id, kind, name FROM sessions WHERE id = ?1")?
        .query_row([to_sql(id)], session_row)
        .optional()?;
    Ok(row.and_then(|(id, guild_id, parent_id, kind, name)| {
        SessionKind::from_code(kind).map(|kind| Session {
            id,
            guild_id,
            parent_id,
            kind,
            name,
        })
    }))
}

fn user_row(row: &Row<'_>) -> rusqlite::Result<User> {
    Ok(User {
        id: from_sql(row.get(0)?),
        username: row.get(1)?,
        global_name: row.get(2)?,
        is_bot: row.get(3)?,
    })
}

pub(crate) fn user(conn: &Connection, id: Snowflake) -> rusqlite::Result<Option<User>> {
    conn.prepare_cached("SELECT id, username, global_name, is_bot FROM users WHERE id = ?1")?
        .query_row([to_sql(id)], user_row)
        .optional()
}

pub(crate) fn role(conn: &Connection, id: Snowflake) -> rusqlite::Result<Option<Role>> {
    conn.prepare_cached("SELECT id, name FROM roles WHERE id = ?1")?
        .query_row([to_sql(id)], |row| {
            Ok(Role {
                id: from_sql(row.get(0)?),
                name: row.get(1)?,
            })
        })
        .optional()
}

fn thread_row(row: &Row<'_>) -> rusqlite::Result<(Snowflake, ThreadState)> {
    Ok((
        from_sql(row.get(0)?),
        ThreadState {
            archived: row.get(1)?,
            locked: row.get(2)?,
            auto_archive_minutes: row.get(3)?,
            owner_id: None,
        },
    ))
}

pub(crate) fn thread_state(
    conn: &Connection,
    id: Snowflake,
) -> rusqlite::Result<Option<ThreadState>> {
    Ok(conn
        .prepare_cached(
            "SELECT id, archived, locked, auto_archive_minutes FROM threads WHERE id = ?1",
        )?
        .query_row([to_sql(id)], thread_row)
        .optional()?
        .map(|(_, state)| state))
}

pub(crate) fn gap(conn: &Connection, channel_id: Snowflake) -> rusqlite::Result<Option<Gap>> {
    conn.prepare_cached("SELECT channel_id, after_id FROM backfill_gaps WHERE channel_id = ?1")?
        .query_row([to_sql(channel_id)], |row| {
            Ok(Gap {
                channel_id: from_sql(row.get(0)?),
                after: from_sql(row.get(1)?),
            })
        })
        .optional()
}

pub(crate) fn message(
    conn: &Connection,
    channel_id: Snowflake,
    id: Snowflake,
) -> rusqlite::Result<Option<Message>> {
    conn.prepare_cached(&format!(
        "SELECT {MESSAGE_COLUMNS} FROM messages WHERE id = ?1 AND channel_id = ?2 AND deleted = 0"
    ))?
    .query_row(params![to_sql(id), to_sql(channel_id)], message_from_row)
    .optional()
}

pub(crate) fn messages(
    conn: &Connection,
    channel_id: Snowflake,
    query: MessageQuery,
) -> rusqlite::Result<Vec<Message>> {
    let lower = query.after.map_or(i64::MIN, to_sql);
    let upper = query.before.map_or(i64::MAX, to_sql);
    let limit = i64::try_from(query.limit).unwrap_or(i64::MAX);
    let mut out: Vec<Message> = conn
        .prepare_cached(&format!(
            "SELECT {MESSAGE_COLUMNS} FROM messages
             WHERE channel_id = ?1 AND deleted = 0 AND id > ?2 AND id < ?3
             ORDER BY id DESC LIMIT ?4"
        ))?
        .query_map(
            params![to_sql(channel_id), lower, upper, limit],
            message_from_row,
        )?
        .collect::<rusqlite::Result<_>>()?;
    out.reverse();
    Ok(out)
}

/// Live messages of every channel with an id above `after`, oldest first.
pub(crate) fn messages_after(
    conn: &Connection,
    after: Option<Snowflake>,
    limit: usize,
) -> rusqlite::Result<Vec<Message>> {
    conn.prepare_cached(&format!(
        "SELECT {MESSAGE_COLUMNS} FROM messages WHERE id > ?1 AND deleted = 0 ORDER BY id LIMIT ?2"
    ))?
    .query_map(
        params![
            after.map_or(i64::MIN, to_sql),
            i64::try_from(limit).unwrap_or(i64::MAX)
        ],
        message_from_row,
    )?
    .collect()
}

/// Kept claims with a message id above `after`, by message id.
pub(crate) fn claims_after(
    conn: &Connection,
    after: Option<Snowflake>,
    limit: usize,
) -> rusqlite::Result<Vec<switchboard_records::TriggerClaim>> {
    conn.prepare_cached(
        "SELECT message_id, channel_id, taken_ms FROM answered_triggers
         WHERE message_id > ?1 ORDER BY message_id LIMIT ?2",
    )?
    .query_map(
        params![
            after.map_or(i64::MIN, to_sql),
            i64::try_from(limit).unwrap_or(i64::MAX)
        ],
        |row| {
            Ok(switchboard_records::TriggerClaim {
                message_id: from_sql(row.get(0)?),
                channel_id: from_sql(row.get(1)?),
                claimed_ms: u64::try_from(row.get::<_, i64>(2)?).unwrap_or(0),
            })
        },
    )?
    .collect()
}

/// How many of each kind the file keeps.
pub(crate) fn census(
    conn: &Connection,
    now_ms: u64,
) -> rusqlite::Result<switchboard_store::Census> {
    conn.query_row(
        "SELECT (SELECT count(*) FROM messages WHERE deleted = 0),
                (SELECT count(*) FROM sessions), (SELECT count(*) FROM users),
                (SELECT count(*) FROM roles), (SELECT count(*) FROM threads),
                (SELECT count(*) FROM backfill_gaps), (SELECT count(*) FROM answered_triggers),
                (SELECT count(*) FROM workflows), (SELECT count(*) FROM approvals),
                (SELECT count(*) FROM audit), (SELECT count(*) FROM session_scopes),
                (SELECT count(*) FROM idempotency WHERE expires_ms > ?1)",
        [ms_to_sql(now_ms)],
        |row| {
            let n = |i: usize| row.get::<_, i64>(i).map(|n| u64::try_from(n).unwrap_or(0));
            Ok(switchboard_store::Census {
                messages: n(0)?,
                sessions: n(1)?,
                users: n(2)?,
                roles: n(3)?,
                threads: n(4)?,
                gaps: n(5)?,
                claims: n(6)?,
                workflows: n(7)?,
                approvals: n(8)?,
                audit: n(9)?,
                scopes: n(10)?,
                idempotency_keys: n(11)?,
                // The agent kinds are counted by `agents::census`.
                ..switchboard_store::Census::default()
            })
        },
    )
}

/// Deleted messages not yet pruned, as (channel, message).
pub(crate) fn tombstones(conn: &Connection) -> rusqlite::Result<Vec<(Snowflake, Snowflake)>> {
    conn.prepare("SELECT channel_id, id FROM messages WHERE deleted = 1")?
        .query_map([], |row| Ok((from_sql(row.get(0)?), from_sql(row.get(1)?))))?
        .collect()
}

/// The message aggregate, with the newest `limit` live messages of each channel.
pub(crate) fn snapshot(conn: &Connection, limit: usize, path: &str) -> rusqlite::Result<Snapshot> {
    let sessions = read_sessions(conn, path)?;
    let users = conn
        .prepare("SELECT id, username, global_name, is_bot FROM users ORDER BY id")?
        .query_map([], user_row)?
        .collect::<rusqlite::Result<_>>()?;
    let roles = conn
        .prepare("SELECT id, name FROM roles ORDER BY id")?
        .query_map([], |row| {
            Ok(Role {
                id: from_sql(row.get(0)?),
                name: row.get(1)?,
            })
        })?
        .collect::<rusqlite::Result<_>>()?;
    let threads = conn
        .prepare("SELECT id, archived, locked, auto_archive_minutes FROM threads ORDER BY id")?
        .query_map([], thread_row)?
        .collect::<rusqlite::Result<_>>()?;
    let limit = i64::try_from(limit).unwrap_or(i64::MAX);
    let messages = conn
        .prepare(&format!(
            "SELECT {MESSAGE_COLUMNS}
             FROM (SELECT *, ROW_NUMBER() OVER (PARTITION BY channel_id ORDER BY id DESC) AS rn
                   FROM messages WHERE deleted = 0)
             WHERE rn <= ?1"
        ))?
        .query_map([limit], message_from_row)?
        .collect::<rusqlite::Result<_>>()?;
    let deleted = tombstones(conn)?;
    let gaps = conn
        .prepare("SELECT channel_id, after_id FROM backfill_gaps ORDER BY channel_id")?
        .query_map([], |row| {
            Ok(Gap {
                channel_id: from_sql(row.get(0)?),
                after: from_sql(row.get(1)?),
            })
        })?
        .collect::<rusqlite::Result<_>>()?;
    Ok(Snapshot {
        sessions,
        users,
        roles,
        threads,
        messages,
        deleted,
        gaps,
    })
}

/// Applies one message-aggregate write inside the writer's open transaction; what it owes the
/// search index is noted in `index`, which the writer applies at the batch's end.
pub(crate) fn apply(
    conn: &Connection,
    index: &mut IndexBatch,
    write: &crate::writer::Write,
) -> rusqlite::Result<()> {
    use crate::writer::Write;
    match write {
        Write::UpsertSession(s) => {
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
        Write::RemoveSession(id) => {
            conn.prepare_cached("DELETE FROM sessions WHERE id = ?1")?
                .execute([to_sql(*id)])?;
            conn.prepare_cached("DELETE FROM threads WHERE id = ?1")?
                .execute([to_sql(*id)])?;
        }
        Write::SaveThread(id, state) => {
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
        Write::ForgetChannel(id) => {
            index.apply(conn)?;
            unindex_channel(conn, to_sql(*id), None)?;
            conn.prepare_cached("DELETE FROM messages WHERE channel_id = ?1")?
                .execute([to_sql(*id)])?;
        }
        Write::UpsertUser(user) => {
            conn.prepare_cached(
                "INSERT INTO users (id, username, global_name, is_bot) VALUES (?1, ?2, ?3, ?4)
                 ON CONFLICT (id) DO UPDATE SET username = excluded.username,
                     global_name = excluded.global_name, is_bot = excluded.is_bot",
            )?
            .execute(params![
                to_sql(user.id),
                user.username,
                user.global_name,
                user.is_bot
            ])?;
        }
        Write::UpsertRole(role) => {
            conn.prepare_cached(
                "INSERT INTO roles (id, name) VALUES (?1, ?2)
                 ON CONFLICT (id) DO UPDATE SET name = excluded.name",
            )?
            .execute(params![to_sql(role.id), role.name])?;
        }
        Write::RemoveRole(id) => {
            conn.prepare_cached("DELETE FROM roles WHERE id = ?1")?
                .execute([to_sql(*id)])?;
        }
        Write::SaveMessage(m) => {
            let row = to_sql(m.id);
            let refs = crate::search::refs_of(m.content());
            let values = params![
                row,
                to_sql(m.channel_id),
                to_sql(m.author_id),
                m.author_is_bot,
                m.content(),
                m.text(),
                m.timestamp(),
                m.edited_timestamp(),
                m.reply_to.map(to_sql),
                m.attachments.as_deref().unwrap_or("[]"),
                m.reactions.as_deref().unwrap_or("[]"),
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
            index.want(row, Some((m.text().to_owned(), refs)));
        }
        Write::DeleteMessages { ids, .. } => {
            let mut stmt = conn.prepare_cached("UPDATE messages SET deleted = 1 WHERE id = ?1")?;
            for id in ids {
                let row = to_sql(*id);
                index.touch(conn, row)?;
                if stmt.execute([row])? > 0 {
                    index.want(row, None);
                }
            }
        }
        Write::OpenGap(gap) => {
            // An older gap still open stays: the messages after it are still unfetched.
            conn.prepare_cached(
                "INSERT INTO backfill_gaps (channel_id, after_id) VALUES (?1, ?2)
                 ON CONFLICT (channel_id) DO UPDATE SET after_id = MIN(after_id, excluded.after_id)",
            )?
            .execute(params![to_sql(gap.channel_id), to_sql(gap.after)])?;
        }
        Write::CloseGap(channel_id) => {
            conn.prepare_cached("DELETE FROM backfill_gaps WHERE channel_id = ?1")?
                .execute([to_sql(*channel_id)])?;
        }
        Write::ClaimTrigger(claim) => {
            conn.prepare_cached(
                "INSERT INTO answered_triggers (message_id, channel_id, taken_ms)
                 VALUES (?1, ?2, ?3) ON CONFLICT (message_id) DO NOTHING",
            )?
            .execute(params![
                to_sql(claim.message_id),
                to_sql(claim.channel_id),
                ms_to_sql(claim.claimed_ms)
            ])?;
        }
        Write::PruneClaims(below) => {
            conn.prepare_cached("DELETE FROM answered_triggers WHERE message_id < ?1")?
                .execute([to_sql(*below)])?;
        }
        Write::SaveWorkflow(workflow) => {
            let body = json(&**workflow)?;
            conn.prepare_cached(
                "INSERT INTO workflows (id, state, finished_ms, body) VALUES (?1, ?2, ?3, ?4)
                 ON CONFLICT(id) DO UPDATE SET state = excluded.state,
                     finished_ms = excluded.finished_ms, body = excluded.body",
            )?
            .execute(params![
                workflow.workflow_id,
                workflow.state.as_str(),
                workflow.finished_ms.map(ms_to_sql),
                body
            ])?;
        }
        Write::Audit(_)
        | Write::ImportAudit(_)
        | Write::SessionScope(..)
        | Write::SaveApproval(_) => {
            crate::ledger::apply(conn, write)?;
        }
    }
    Ok(())
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
