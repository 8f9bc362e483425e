//! Governance kept in the file: the audit log, `/tools` scope overrides and approval requests
//! (schema version 3), each audit row's `count` (version 7) and `events` (version 14),
//! idempotency keys (version 8) and the reads of workflows. Rows are written through the
//! batched writer like every other change; reads and the atomic decisions run on the writer's
//! connection too (it owns the only one), after what was queued before them is committed — one
//! thread, so each decision is atomic.

use std::borrow::Cow;

use entity::Snowflake;
use rusqlite::{params, Connection, OptionalExtension, Row};
use serde_json::Value;
use switchboard_records::approval::SETTLED_APPROVALS_KEPT_MS;
use switchboard_records::audit::Pager;
use switchboard_records::workflow::FINISHED_WORKFLOWS_KEPT_MS;
use switchboard_records::{
    Approval, ApprovalCard, AuditEntry, AuditFilter, AuditPage, AuditRow, IdempotencyKey,
    IdempotencyRequest, KeptKey, SessionScope, Settlement, StoredAnswer, Workflow,
};
use switchboard_store::{Decided, Reserved};
use tracing::warn;

use crate::rows::{from_sql, ms_to_sql, to_sql};
use crate::writer::Write;

/// Version 3: the audit log, `/tools` overrides and approval requests.
pub(crate) const SCHEMA_V3: &str = "
CREATE TABLE audit (
    id INTEGER PRIMARY KEY,
    time_ms INTEGER NOT NULL,
    caller TEXT NOT NULL,
    run TEXT,
    requested_by INTEGER,
    tool TEXT NOT NULL,
    sessions TEXT NOT NULL,
    input TEXT NOT NULL,
    decision TEXT NOT NULL,
    decided_by TEXT,
    outcome TEXT NOT NULL,
    code TEXT,
    duration_ms INTEGER NOT NULL
);
CREATE INDEX audit_by_time ON audit (time_ms);
CREATE TABLE session_scopes (
    session_id INTEGER PRIMARY KEY,
    scope TEXT NOT NULL
);
CREATE TABLE approvals (
    id TEXT PRIMARY KEY,
    channel_id INTEGER NOT NULL,
    message_id INTEGER,
    pending INTEGER NOT NULL,
    card TEXT NOT NULL,
    updated_ms INTEGER NOT NULL
);
";

/// Version 7: a row can stand for a counted burst of refusals (as `bot::store`'s version 7).
pub(crate) const SCHEMA_V7: &str = "ALTER TABLE audit ADD COLUMN count INTEGER NOT NULL DEFAULT 1;";

/// Version 14: what a call caused in a workspace (issue 24), a JSON array; `NULL` when nothing.
pub(crate) const SCHEMA_V14: &str = "ALTER TABLE audit ADD COLUMN events TEXT;";

/// Most rows one query reads before answering with a cursor to continue from, so a filter
/// that matches little (a rare tool glob over a large log) cannot hold the writer long.
const MAX_ROWS_SCANNED: usize = 50_000;

/// `sessions` as stored: `,1,2,` so one session is found with `instr`.
fn push_sessions(text: &mut Vec<u8>, sessions: &[Snowflake]) {
    use std::io::Write as _;
    text.push(b',');
    for session in sessions {
        // Writing into a `Vec` cannot fail.
        let _ = write!(text, "{},", session.0);
    }
}

fn sessions_from_sql(text: &str) -> Vec<Snowflake> {
    text.split(',')
        .filter_map(|part| part.parse::<u64>().ok())
        .map(Snowflake)
        .collect()
}

/// An audit row as it waits in the writer's queue: its columns ready to bind. Made on the
/// caller's thread ([`AuditStore::record`](switchboard_store::AuditStore::record) runs on the
/// call's), so the writer thread only binds: the input's JSON tree is written out and freed
/// where it was built, and the row crosses threads as two allocations (this and `text`) instead
/// of a tree of them.
#[derive(Debug)]
pub(crate) struct QueuedAudit {
    time_ms: i64,
    caller: Cow<'static, str>,
    run: Option<String>,
    requested_by: Option<i64>,
    tool: Cow<'static, str>,
    decision: Cow<'static, str>,
    decided_by: Option<Cow<'static, str>>,
    outcome: Cow<'static, str>,
    code: Option<Cow<'static, str>>,
    duration_ms: i64,
    count: i64,
    /// The `sessions`, `input` and `events` columns back to back.
    text: String,
    sessions_end: usize,
    input_end: usize,
}

impl QueuedAudit {
    pub(crate) fn new(row: AuditRow) -> QueuedAudit {
        let mut text = Vec::with_capacity(128 + 21 * row.sessions.len());
        push_sessions(&mut text, &row.sessions);
        let sessions_end = text.len();
        // A `Value` always serializes, and into a `Vec` nothing fails.
        let _ = serde_json::to_writer(&mut text, &row.input);
        let input_end = text.len();
        if !row.events.is_empty() {
            let _ = serde_json::to_writer(&mut text, &row.events);
        }
        // serde_json writes UTF-8 only; were it ever not, the row is kept readable, not lost.
        let text = String::from_utf8(text)
            .unwrap_or_else(|err| String::from_utf8_lossy(err.as_bytes()).into_owned());
        QueuedAudit {
            time_ms: ms_to_sql(row.time_ms),
            caller: row.caller,
            run: row.run,
            requested_by: row.requested_by.map(to_sql),
            tool: row.tool,
            decision: row.decision,
            decided_by: row.decided_by,
            outcome: row.outcome,
            code: row.code,
            duration_ms: ms_to_sql(row.duration_ms),
            count: ms_to_sql(row.count),
            sessions_end,
            input_end: input_end.min(text.len()),
            text,
        }
    }

    fn sessions(&self) -> &str {
        self.text.get(..self.sessions_end).unwrap_or_default()
    }

    fn input(&self) -> &str {
        self.text
            .get(self.sessions_end..self.input_end)
            .unwrap_or_default()
    }

    fn events(&self) -> Option<&str> {
        self.text
            .get(self.input_end..)
            .filter(|events| !events.is_empty())
    }
}

impl switchboard_store::write::QueuedAudit for Box<QueuedAudit> {
    fn tool(&self) -> &str {
        &self.tool
    }
}

fn insert_audit(conn: &Connection, id: Option<u64>, row: &QueuedAudit) -> rusqlite::Result<()> {
    conn.prepare_cached(
        "INSERT OR IGNORE INTO audit (id, time_ms, caller, run, requested_by, tool, sessions,
                                      input, decision, decided_by, outcome, code, duration_ms,
                                      count, events)
         VALUES (?13, ?1, ?2, ?3, ?4, ?5, ?6, ?7, ?8, ?9, ?10, ?11, ?12, ?14, ?15)",
    )?
    .execute(params![
        row.time_ms,
        &*row.caller,
        row.run.as_deref(),
        row.requested_by,
        &*row.tool,
        row.sessions(),
        row.input(),
        &*row.decision,
        row.decided_by.as_deref(),
        &*row.outcome,
        row.code.as_deref(),
        row.duration_ms,
        id.map(ms_to_sql),
        row.count,
        row.events(),
    ])?;
    Ok(())
}

pub(crate) fn apply(conn: &Connection, write: &Write) -> rusqlite::Result<()> {
    match write {
        Write::Audit(row) => insert_audit(conn, None, row)?,
        Write::ImportAudit(entries) => {
            for entry in entries {
                insert_audit(conn, Some(entry.id), &QueuedAudit::new(entry.row.clone()))?;
            }
        }
        Write::SessionScope(session, Some(scope)) => {
            let scope = serde_json::to_string(scope).unwrap_or_else(|_| "[]".to_owned());
            conn.prepare_cached(
                "INSERT INTO session_scopes (session_id, scope) VALUES (?1, ?2)
                 ON CONFLICT (session_id) DO UPDATE SET scope = excluded.scope",
            )?
            .execute(params![to_sql(*session), scope])?;
        }
        Write::SessionScope(session, None) => {
            conn.prepare_cached("DELETE FROM session_scopes WHERE session_id = ?1")?
                .execute([to_sql(*session)])?;
        }
        Write::SaveApproval(approval) => {
            // Only while pending: a settled approval changes only through a decision.
            conn.prepare_cached(
                "INSERT INTO approvals (id, channel_id, message_id, pending, card, updated_ms, binding)
                 VALUES (?1, ?2, ?3, ?4, ?5, ?6, ?7)
                 ON CONFLICT (id) DO UPDATE SET channel_id = excluded.channel_id,
                     message_id = excluded.message_id, pending = excluded.pending,
                     card = excluded.card, updated_ms = excluded.updated_ms,
                     binding = excluded.binding
                 WHERE approvals.pending = 1",
            )?
            .execute(params![
                approval.card.id,
                to_sql(approval.channel_id),
                approval.message_id.map(to_sql),
                approval.is_pending(),
                crate::rows::json(&approval.card)?,
                ms_to_sql(now_ms()),
                approval.binding,
            ])?;
        }
        _ => {}
    }
    Ok(())
}

pub(crate) fn now_ms() -> u64 {
    std::time::SystemTime::now()
        .duration_since(std::time::UNIX_EPOCH)
        .map_or(0, |d| u64::try_from(d.as_millis()).unwrap_or(u64::MAX))
}

/// Prunes at open: audit rows past `retention_ms`, approvals settled long ago, finished
/// workflows past their week, expired idempotency keys.
pub(crate) fn prune_at_open(
    conn: &Connection,
    now_ms: u64,
    retention_ms: u64,
    path: &str,
) -> rusqlite::Result<()> {
    let pruned = prune_audit(conn, now_ms.saturating_sub(retention_ms))?;
    if pruned > 0 {
        tracing::info!(path, pruned, "pruned audit rows past audit.retention_days");
    }
    conn.prepare("DELETE FROM approvals WHERE pending = 0 AND updated_ms < ?1")?
        .execute([ms_to_sql(now_ms.saturating_sub(SETTLED_APPROVALS_KEPT_MS))])?;
    conn.execute(
        "DELETE FROM workflows WHERE finished_ms IS NOT NULL AND finished_ms < ?1",
        params![ms_to_sql(now_ms.saturating_sub(FINISHED_WORKFLOWS_KEPT_MS))],
    )?;
    conn.execute(
        "DELETE FROM idempotency WHERE expires_ms <= ?1",
        params![ms_to_sql(now_ms)],
    )?;
    crate::agents::prune(conn, now_ms)
}

pub(crate) fn session_scopes(conn: &Connection, path: &str) -> rusqlite::Result<Vec<SessionScope>> {
    let mut stmt =
        conn.prepare("SELECT session_id, scope FROM session_scopes ORDER BY session_id")?;
    let rows = stmt.query_map([], |row| {
        Ok((from_sql(row.get(0)?), row.get::<_, String>(1)?))
    })?;
    let mut out = Vec::new();
    for row in rows {
        let (session_id, scope) = row?;
        match serde_json::from_str::<Vec<String>>(&scope) {
            Ok(scope) => out.push(SessionScope { session_id, scope }),
            Err(err) => {
                warn!(path, session = %session_id, %err, "skipping an unreadable /tools override");
            }
        }
    }
    Ok(out)
}

/// An approval from its row: the card's JSON parsed; `None` (logged) when it does not read.
fn approval_from_row(row: &Row<'_>, path: &str) -> rusqlite::Result<Option<Approval>> {
    let id: String = row.get(0)?;
    let card: String = row.get(3)?;
    let card = match serde_json::from_str::<ApprovalCard>(&card) {
        Ok(card) => card,
        Err(err) => {
            warn!(path, approval = %id, %err, "skipping an approval whose card does not read");
            return Ok(None);
        }
    };
    let binding: Option<String> = row.get(4)?;
    Ok(Some(Approval {
        binding: binding.unwrap_or_else(|| card.binding.clone()),
        card,
        channel_id: from_sql(row.get(1)?),
        message_id: row.get::<_, Option<i64>>(2)?.map(from_sql),
    }))
}

const APPROVAL_COLUMNS: &str = "id, channel_id, message_id, card, binding";

pub(crate) fn approval(
    conn: &Connection,
    id: &str,
    path: &str,
) -> rusqlite::Result<Option<Approval>> {
    conn.prepare_cached(&format!(
        "SELECT {APPROVAL_COLUMNS} FROM approvals WHERE id = ?1"
    ))?
    .query_row([id], |row| approval_from_row(row, path))
    .optional()
    .map(Option::flatten)
}

pub(crate) fn pending_approvals(conn: &Connection, path: &str) -> rusqlite::Result<Vec<Approval>> {
    let mut stmt = conn.prepare(&format!(
        "SELECT {APPROVAL_COLUMNS} FROM approvals WHERE pending = 1 ORDER BY id"
    ))?;
    let rows = stmt.query_map([], |row| approval_from_row(row, path))?;
    rows.filter_map(Result::transpose).collect()
}

/// Every kept approval, by id.
pub(crate) fn approvals(conn: &Connection, path: &str) -> rusqlite::Result<Vec<Approval>> {
    let mut stmt = conn.prepare(&format!(
        "SELECT {APPROVAL_COLUMNS} FROM approvals ORDER BY id"
    ))?;
    let rows = stmt.query_map([], |row| approval_from_row(row, path))?;
    rows.filter_map(Result::transpose).collect()
}

/// Unexpired idempotency keys after `after`, in (caller, key) order.
pub(crate) fn keys_after(
    conn: &Connection,
    after: Option<&IdempotencyKey>,
    limit: usize,
    now_ms: u64,
) -> rusqlite::Result<Vec<KeptKey>> {
    let mut stmt = conn.prepare_cached(
        "SELECT caller, key, input_hash, status, body, expires_ms FROM idempotency
         WHERE expires_ms > ?4 AND (?1 IS NULL OR caller > ?1 OR (caller = ?1 AND key > ?2))
         ORDER BY caller, key LIMIT ?3",
    )?;
    let rows = stmt.query_map(
        params![
            after.map(|k| k.caller.as_str()),
            after.map_or("", |k| k.key.as_str()),
            i64::try_from(limit).unwrap_or(i64::MAX),
            ms_to_sql(now_ms)
        ],
        |row| {
            let status: Option<i64> = row.get(3)?;
            let body: Option<String> = row.get(4)?;
            Ok(KeptKey {
                key: IdempotencyKey {
                    caller: row.get(0)?,
                    key: row.get(1)?,
                },
                input_hash: row.get(2)?,
                answer: match (status, body) {
                    (Some(status), Some(body)) => Some(StoredAnswer {
                        status: u16::try_from(status).unwrap_or(500),
                        body,
                    }),
                    _ => None,
                },
                expires_ms: u64::try_from(row.get::<_, i64>(5)?).unwrap_or(0),
            })
        },
    )?;
    rows.collect()
}

/// Settles a pending approval (the writer's thread runs one at a time: atomic). `None`: no
/// approval with that id reads.
pub(crate) fn decide(
    conn: &Connection,
    id: &str,
    settlement: &Settlement,
    at_ms: u64,
    path: &str,
) -> rusqlite::Result<Option<(bool, Decided)>> {
    let Some(mut kept) = approval(conn, id, path)? else {
        return Ok(None);
    };
    let was_pending = kept.is_pending();
    let took = switchboard_store::settle(&mut kept, settlement, at_ms);
    if was_pending {
        conn.prepare_cached(
            "UPDATE approvals SET pending = 0, card = ?2, updated_ms = ?3 WHERE id = ?1 AND pending = 1",
        )?
        .execute(params![id, crate::rows::json(&kept.card)?, ms_to_sql(now_ms())])?;
    }
    Ok(Some((
        was_pending,
        if took {
            Decided::Decided(kept)
        } else {
            Decided::AlreadyDecided(kept)
        },
    )))
}

pub(crate) fn workflows(
    conn: &Connection,
    only: Option<&str>,
    path: &str,
) -> rusqlite::Result<Vec<Workflow>> {
    let mut stmt = conn
        .prepare_cached("SELECT id, body FROM workflows WHERE ?1 IS NULL OR id = ?1 ORDER BY id")?;
    let rows = stmt.query_map([only], |row| {
        Ok((row.get::<_, String>(0)?, row.get::<_, String>(1)?))
    })?;
    let mut out = Vec::new();
    for row in rows {
        let (id, body) = row?;
        match serde_json::from_str::<Workflow>(&body) {
            Ok(workflow) => out.push(workflow),
            Err(err) => {
                warn!(path, workflow = %id, "skipping a stored workflow that does not parse: {err}");
            }
        }
    }
    Ok(out)
}

pub(crate) fn reserve(
    conn: &Connection,
    request: &IdempotencyRequest,
) -> rusqlite::Result<Reserved> {
    let key = &request.key;
    conn.prepare_cached(
        "DELETE FROM idempotency WHERE caller = ?1 AND key = ?2 AND expires_ms <= ?3",
    )?
    .execute(params![key.caller, key.key, ms_to_sql(request.now_ms)])?;
    let kept: Option<(String, Option<i64>, Option<String>)> = conn
        .prepare_cached(
            "SELECT input_hash, status, body FROM idempotency WHERE caller = ?1 AND key = ?2",
        )?
        .query_row(params![key.caller, key.key], |row| {
            Ok((row.get(0)?, row.get(1)?, row.get(2)?))
        })
        .optional()?;
    Ok(match kept {
        Some((hash, _, _)) if hash != request.input_hash => Reserved::Mismatch,
        Some((_, Some(status), Some(body))) => Reserved::Replay(StoredAnswer {
            status: u16::try_from(status).unwrap_or(500),
            body,
        }),
        Some(_) => Reserved::Running,
        None => {
            conn.prepare_cached(
                "INSERT INTO idempotency (caller, key, input_hash, expires_ms) VALUES (?1, ?2, ?3, ?4)",
            )?
            .execute(params![
                key.caller,
                key.key,
                request.input_hash,
                ms_to_sql(request.now_ms.saturating_add(request.ttl_ms))
            ])?;
            Reserved::Fresh
        }
    })
}

/// Keeps a reserved key's answer; false when the key is not reserved.
pub(crate) fn complete(
    conn: &Connection,
    key: &IdempotencyKey,
    answer: &StoredAnswer,
) -> rusqlite::Result<bool> {
    Ok(conn
        .prepare_cached(
            "UPDATE idempotency SET status = ?3, body = ?4 WHERE caller = ?1 AND key = ?2",
        )?
        .execute(params![
            key.caller,
            key.key,
            i64::from(answer.status),
            answer.body
        ])?
        > 0)
}

pub(crate) fn release(conn: &Connection, key: &IdempotencyKey) -> rusqlite::Result<()> {
    conn.prepare_cached(
        "DELETE FROM idempotency WHERE caller = ?1 AND key = ?2 AND status IS NULL",
    )?
    .execute(params![key.caller, key.key])?;
    Ok(())
}

/// Audit rows with an id above `after_id`, oldest first.
pub(crate) fn audit_after(
    conn: &Connection,
    after_id: u64,
    limit: usize,
) -> rusqlite::Result<Vec<AuditEntry>> {
    conn.prepare_cached(
        "SELECT id, time_ms, caller, run, requested_by, tool, sessions, input, decision,
                decided_by, outcome, code, duration_ms, count, events
         FROM audit WHERE id > ?1 ORDER BY id LIMIT ?2",
    )?
    .query_map(
        params![
            i64::try_from(after_id).unwrap_or(i64::MAX),
            i64::try_from(limit).unwrap_or(i64::MAX)
        ],
        entry_from_row,
    )?
    .collect()
}

/// Deletes audit rows older than `oldest_ms`; how many went.
pub(crate) fn prune_audit(conn: &Connection, oldest_ms: u64) -> rusqlite::Result<usize> {
    conn.prepare_cached("DELETE FROM audit WHERE time_ms < ?1")?
        .execute([ms_to_sql(oldest_ms)])
}

fn entry_from_row(row: &Row<'_>) -> rusqlite::Result<AuditEntry> {
    let input: String = row.get(7)?;
    Ok(AuditEntry {
        id: row.get::<_, i64>(0)? as u64,
        row: AuditRow {
            time_ms: row.get::<_, i64>(1)?.max(0) as u64,
            caller: Cow::Owned(row.get(2)?),
            run: row.get(3)?,
            requested_by: row.get::<_, Option<i64>>(4)?.map(from_sql),
            tool: Cow::Owned(row.get(5)?),
            sessions: sessions_from_sql(&row.get::<_, String>(6)?),
            input: serde_json::from_str(&input).unwrap_or(Value::String(input)),
            decision: Cow::Owned(row.get(8)?),
            decided_by: row.get::<_, Option<String>>(9)?.map(Cow::Owned),
            outcome: Cow::Owned(row.get(10)?),
            code: row.get::<_, Option<String>>(11)?.map(Cow::Owned),
            duration_ms: row.get::<_, i64>(12)?.max(0) as u64,
            count: row.get::<_, i64>(13)?.max(1) as u64,
            events: switchboard_records::audit::events_from_column(
                row.get::<_, Option<String>>(14)?,
            ),
        },
    })
}

/// One page of the audit log, newest first. Every condition but the tool glob is SQL; the
/// glob is matched here with the same function the rules use, over at most
/// [`MAX_ROWS_SCANNED`] rows (past that the page ends early, with a cursor to go on from).
pub(crate) fn query(conn: &Connection, filter: &AuditFilter) -> rusqlite::Result<AuditPage> {
    let mut sql = String::from(
        "SELECT id, time_ms, caller, run, requested_by, tool, sessions, input, decision,
                decided_by, outcome, code, duration_ms, count, events
         FROM audit WHERE 1 = 1",
    );
    let mut values: Vec<rusqlite::types::Value> = Vec::new();
    let mut bind = |sql: &mut String, clause: &str, value: rusqlite::types::Value| {
        values.push(value);
        sql.push_str(&clause.replace('?', &format!("?{}", values.len())));
    };
    if let Some(since) = filter.since_ms {
        bind(&mut sql, " AND time_ms >= ?", ms_to_sql(since).into());
    }
    if let Some(until) = filter.until_ms {
        bind(&mut sql, " AND time_ms < ?", ms_to_sql(until).into());
    }
    if let Some(session) = filter.session {
        bind(
            &mut sql,
            " AND instr(sessions, ?) > 0",
            format!(",{},", session.0).into(),
        );
    }
    if let Some(caller) = &filter.caller {
        bind(&mut sql, " AND caller = ?", caller.clone().into());
    }
    if let Some(decision) = &filter.decision {
        bind(&mut sql, " AND decision = ?", decision.clone().into());
    }
    if let Some(before) = filter.before_id {
        bind(
            &mut sql,
            " AND id < ?",
            i64::try_from(before).unwrap_or(i64::MAX).into(),
        );
    }
    sql.push_str(" ORDER BY id DESC");
    let mut stmt = conn.prepare(&sql)?;
    let mut rows = stmt.query(rusqlite::params_from_iter(values))?;
    let mut pager = Pager::new(filter, MAX_ROWS_SCANNED);
    while let Some(row) = rows.next()? {
        if let Some(page) = pager.push(entry_from_row(row)?) {
            return Ok(page);
        }
    }
    Ok(pager.finish())
}

#[cfg(test)]
mod tests {
    use super::*;

    fn row(sessions: Vec<Snowflake>, events: Vec<Value>) -> AuditRow {
        AuditRow {
            time_ms: 1_700_000_000_000,
            caller: "operator".into(),
            run: None,
            requested_by: None,
            tool: "surface.messages.list".into(),
            sessions,
            input: serde_json::json!({"sessionId": "#ops", "text": "ünï \"q\"", "limit": 50}),
            decision: "allow".into(),
            decided_by: None,
            outcome: "ok".into(),
            code: None,
            duration_ms: 3,
            count: 1,
            events,
        }
    }

    /// The columns a queued row binds are the ones rows have always been stored with: sessions
    /// as `,a,b,` (found with `instr`), the input and events as compact JSON, no events NULL.
    #[test]
    fn queued_audit_columns_keep_the_stored_format() {
        let event = serde_json::json!({"type": "fs.changed", "path": "a.rs", "kind": "created"});
        let with = row(vec![Snowflake(11), Snowflake(222)], vec![event.clone()]);
        let queued = QueuedAudit::new(with.clone());
        assert_eq!(queued.sessions(), ",11,222,");
        assert_eq!(queued.input(), with.input.to_string());
        assert_eq!(
            queued.events().map(str::to_owned),
            switchboard_records::audit::events_to_column(&with.events)
        );

        let bare = QueuedAudit::new(row(Vec::new(), Vec::new()));
        assert_eq!(bare.sessions(), ",");
        assert_eq!(bare.events(), None, "no events: NULL, as before");
        assert_eq!(sessions_from_sql(queued.sessions()), with.sessions);
    }
}
