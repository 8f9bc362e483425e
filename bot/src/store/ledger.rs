//! Governance kept in the store: the audit log, `/tools` scope overrides and approval requests
//! (schema version 3; version 7 adds each row's `count`). Rows are written through the batched writer like every other change, so
//! recording a call never waits for SQLite; queries run on the writer thread too (it owns the
//! only connection) after what was queued before them is committed.

use std::borrow::Cow;
use std::time::Duration;

use entity::Snowflake;
use rusqlite::{params, Connection, Row};
use serde_json::Value;
use switchboard_config::glob_matches;
use toolserver::governance::{AuditEntry, AuditFilter, AuditPage, AuditRow};
use tracing::warn;

/// An approval request as this file keeps it (the card as JSON).
#[derive(Debug, Clone, PartialEq, Eq)]
pub(crate) struct ApprovalRecord {
    /// The approval's id (`apr_...`).
    pub(crate) id: String,
    /// Where its message is.
    pub(crate) channel_id: Snowflake,
    /// Its message, once posted.
    pub(crate) message_id: Option<Snowflake>,
    /// Whether it still waits for a decision.
    pub(crate) pending: bool,
    /// The card's JSON.
    pub(crate) card: Value,
}

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

/// Version 7: a row can stand for a counted burst of refusals.
pub(crate) const SCHEMA_V7: &str = "ALTER TABLE audit ADD COLUMN count INTEGER NOT NULL DEFAULT 1;";

/// Settled approval requests are kept this long (for the record), then pruned at open.
const SETTLED_APPROVALS_KEPT_MS: u64 = 7 * 24 * 3600 * 1000;

/// Most rows one query reads before answering with a cursor to continue from, so a filter
/// that matches little (a rare tool glob over a large log) cannot hold the writer long.
const MAX_ROWS_SCANNED: usize = 50_000;

/// Most rows a page holds.
const MAX_PAGE: usize = 1_000;

/// A governance change queued for the writer.
#[derive(Debug)]
pub(crate) enum LedgerChange {
    Audit(AuditRow),
    SessionScope(Snowflake, Option<Vec<String>>),
    Approval(ApprovalRecord),
}

impl LedgerChange {
    pub(crate) fn describe(&self) -> String {
        match self {
            LedgerChange::Audit(row) => format!("record an audit row for {}", row.tool),
            LedgerChange::SessionScope(session, _) => {
                format!("keep the /tools scope of session {session}")
            }
            LedgerChange::Approval(record) => format!("keep approval {}", record.id),
        }
    }
}

fn to_sql(id: Snowflake) -> i64 {
    id.0 as i64
}

fn from_sql(id: i64) -> Snowflake {
    Snowflake(id as u64)
}

fn ms_to_sql(ms: u64) -> i64 {
    i64::try_from(ms).unwrap_or(i64::MAX)
}

/// `sessions` as stored: `,1,2,` so one session is found with `instr`.
fn sessions_to_sql(sessions: &[Snowflake]) -> String {
    let mut text = String::from(",");
    for session in sessions {
        text.push_str(&session.0.to_string());
        text.push(',');
    }
    text
}

fn sessions_from_sql(text: &str) -> Vec<Snowflake> {
    text.split(',')
        .filter_map(|part| part.parse::<u64>().ok())
        .map(Snowflake)
        .collect()
}

pub(crate) fn apply(conn: &Connection, change: &LedgerChange) -> rusqlite::Result<()> {
    match change {
        LedgerChange::Audit(row) => {
            conn.prepare_cached(
                "INSERT INTO audit (time_ms, caller, run, requested_by, tool, sessions, input,
                                    decision, decided_by, outcome, code, duration_ms, count)
                 VALUES (?1, ?2, ?3, ?4, ?5, ?6, ?7, ?8, ?9, ?10, ?11, ?12, ?13)",
            )?
            .execute(params![
                ms_to_sql(row.time_ms),
                &*row.caller,
                row.run.as_deref(),
                row.requested_by.map(to_sql),
                &*row.tool,
                sessions_to_sql(&row.sessions),
                row.input.to_string(),
                &*row.decision,
                row.decided_by.as_deref(),
                &*row.outcome,
                row.code.as_deref(),
                ms_to_sql(row.duration_ms),
                ms_to_sql(row.count),
            ])?;
        }
        LedgerChange::SessionScope(session, Some(scope)) => {
            let scope = serde_json::to_string(scope).unwrap_or_else(|_| "[]".to_owned());
            conn.prepare_cached(
                "INSERT INTO session_scopes (session_id, scope) VALUES (?1, ?2)
                 ON CONFLICT (session_id) DO UPDATE SET scope = excluded.scope",
            )?
            .execute(params![to_sql(*session), scope])?;
        }
        LedgerChange::SessionScope(session, None) => {
            conn.prepare_cached("DELETE FROM session_scopes WHERE session_id = ?1")?
                .execute([to_sql(*session)])?;
        }
        LedgerChange::Approval(record) => {
            conn.prepare_cached(
                "INSERT INTO approvals (id, channel_id, message_id, pending, card, updated_ms)
                 VALUES (?1, ?2, ?3, ?4, ?5, ?6)
                 ON CONFLICT (id) DO UPDATE SET channel_id = excluded.channel_id,
                     message_id = excluded.message_id, pending = excluded.pending,
                     card = excluded.card, updated_ms = excluded.updated_ms",
            )?
            .execute(params![
                record.id,
                to_sql(record.channel_id),
                record.message_id.map(to_sql),
                record.pending,
                record.card.to_string(),
                ms_to_sql(toolserver::clock::now_ms()),
            ])?;
        }
    }
    Ok(())
}

/// What the file held at open: the `/tools` overrides and the approvals still pending.
#[derive(Debug, Default, Clone)]
pub(crate) struct LedgerAtOpen {
    pub(crate) overrides: Vec<(Snowflake, Vec<String>)>,
    pub(crate) pending_approvals: Vec<ApprovalRecord>,
}

/// Reads what governance needs at start, and prunes audit rows older than `retention` and
/// approvals settled long ago.
pub(crate) fn load(
    conn: &Connection,
    now_ms: u64,
    retention: Duration,
    path: &str,
) -> rusqlite::Result<LedgerAtOpen> {
    let oldest = now_ms.saturating_sub(u64::try_from(retention.as_millis()).unwrap_or(u64::MAX));
    let pruned = prune_audit(conn, oldest)?;
    if pruned > 0 {
        tracing::info!(path, pruned, "pruned audit rows past audit.retention_days");
    }
    conn.prepare("DELETE FROM approvals WHERE pending = 0 AND updated_ms < ?1")?
        .execute([ms_to_sql(now_ms.saturating_sub(SETTLED_APPROVALS_KEPT_MS))])?;

    let mut at_open = LedgerAtOpen::default();
    let mut stmt = conn.prepare("SELECT session_id, scope FROM session_scopes")?;
    let rows = stmt.query_map([], |row| {
        Ok((from_sql(row.get(0)?), row.get::<_, String>(1)?))
    })?;
    for row in rows {
        let (session, scope) = row?;
        match serde_json::from_str::<Vec<String>>(&scope) {
            Ok(scope) => at_open.overrides.push((session, scope)),
            Err(err) => warn!(path, %session, %err, "skipping an unreadable /tools override"),
        }
    }
    let mut stmt =
        conn.prepare("SELECT id, channel_id, message_id, card FROM approvals WHERE pending = 1")?;
    let rows = stmt.query_map([], |row| {
        Ok((
            row.get::<_, String>(0)?,
            from_sql(row.get(1)?),
            row.get::<_, Option<i64>>(2)?.map(from_sql),
            row.get::<_, String>(3)?,
        ))
    })?;
    for row in rows {
        let (id, channel_id, message_id, card) = row?;
        let card = serde_json::from_str(&card).unwrap_or(Value::Null);
        at_open.pending_approvals.push(ApprovalRecord {
            id,
            channel_id,
            message_id,
            pending: true,
            card,
        });
    }
    Ok(at_open)
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
        },
    })
}

/// One page of the audit log, newest first. Every condition but the tool glob is SQL; the
/// glob is matched here with the same function the rules use, over at most
/// [`MAX_ROWS_SCANNED`] rows (past that the page ends early, with a cursor to go on from).
pub(crate) fn query(conn: &Connection, filter: &AuditFilter) -> rusqlite::Result<AuditPage> {
    let limit = filter.limit.clamp(1, MAX_PAGE);
    let mut sql = String::from(
        "SELECT id, time_ms, caller, run, requested_by, tool, sessions, input, decision,
                decided_by, outcome, code, duration_ms, count
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
    let mut page = Vec::new();
    let mut scanned = 0;
    while let Some(row) = rows.next()? {
        scanned += 1;
        let entry = entry_from_row(row)?;
        let entry_id = entry.id;
        let tool_matches = filter
            .tool
            .as_deref()
            .is_none_or(|glob| glob_matches(glob, &entry.row.tool));
        if tool_matches {
            if page.len() == limit {
                // One more match exists: the page is full and continues after its last row.
                let next_cursor = page.last().map(|entry: &AuditEntry| entry.id);
                return Ok(AuditPage {
                    rows: page,
                    next_cursor,
                });
            }
            page.push(entry);
        }
        if scanned >= MAX_ROWS_SCANNED {
            return Ok(AuditPage {
                rows: page,
                next_cursor: Some(entry_id),
            });
        }
    }
    Ok(AuditPage {
        rows: page,
        next_cursor: None,
    })
}

#[cfg(test)]
mod tests {
    use super::*;

    fn conn() -> Connection {
        let conn = Connection::open_in_memory().unwrap();
        conn.execute_batch(SCHEMA_V3).unwrap();
        conn.execute_batch(SCHEMA_V7).unwrap();
        conn
    }

    fn row(time_ms: u64, tool: &'static str, sessions: &[u64], decision: &'static str) -> AuditRow {
        AuditRow {
            time_ms,
            caller: Cow::Borrowed("operator"),
            run: None,
            requested_by: None,
            tool: Cow::Borrowed(tool),
            sessions: sessions.iter().copied().map(Snowflake).collect(),
            input: serde_json::json!({"text": "hi"}),
            decision: Cow::Borrowed(decision),
            decided_by: None,
            outcome: Cow::Borrowed("ok"),
            code: None,
            duration_ms: 3,
            count: 1,
        }
    }

    #[test]
    fn a_query_pages_newest_first_and_filters_like_the_memory_ledger() {
        let conn = conn();
        let mut rows = Vec::new();
        for i in 0..57u64 {
            let tool = if i % 3 == 0 {
                "surface.messages.send"
            } else {
                "surface.messages.list"
            };
            let decision = if i % 5 == 0 { "deny" } else { "allow" };
            let mut r = row(1_000 + i, tool, &[10 + i % 2, 12], decision);
            // Some rows count a burst of refusals; the count is kept.
            r.count = 1 + i % 4;
            apply(&conn, &LedgerChange::Audit(r.clone())).unwrap();
            rows.push(r);
        }
        let filters = [
            AuditFilter {
                limit: 10,
                ..AuditFilter::default()
            },
            AuditFilter {
                tool: Some("surface.*.send".into()),
                limit: 4,
                ..AuditFilter::default()
            },
            AuditFilter {
                session: Some(Snowflake(11)),
                decision: Some("deny".into()),
                limit: 100,
                ..AuditFilter::default()
            },
            AuditFilter {
                since_ms: Some(1_010),
                until_ms: Some(1_020),
                limit: 3,
                ..AuditFilter::default()
            },
        ];
        for filter in filters {
            // Walk every page with both and compare: same rows, same cursors.
            let mut sql_filter = filter.clone();
            let mut memory_filter = filter.clone();
            loop {
                let from_sql = query(&conn, &sql_filter).unwrap();
                let from_memory = switchboard_records::audit::page(
                    rows.iter().enumerate().map(|(i, row)| (i as u64 + 1, row)),
                    &memory_filter,
                );
                assert_eq!(from_sql, from_memory, "{filter:?}");
                match from_sql.next_cursor {
                    Some(cursor) => {
                        sql_filter.before_id = Some(cursor);
                        memory_filter.before_id = Some(cursor);
                    }
                    None => break,
                }
            }
        }
    }

    #[test]
    fn retention_prunes_old_rows_and_overrides_come_back() {
        let conn = conn();
        apply(&conn, &LedgerChange::Audit(row(5, "a", &[], "allow"))).unwrap();
        apply(&conn, &LedgerChange::Audit(row(50_000, "b", &[], "allow"))).unwrap();
        apply(
            &conn,
            &LedgerChange::SessionScope(Snowflake(7), Some(vec!["surface.messages.list".into()])),
        )
        .unwrap();
        apply(
            &conn,
            &LedgerChange::SessionScope(Snowflake(8), Some(vec![])),
        )
        .unwrap();
        apply(&conn, &LedgerChange::SessionScope(Snowflake(8), None)).unwrap();
        let at_open = load(&conn, 60_000, Duration::from_secs(30), ":memory:").unwrap();
        assert_eq!(
            at_open.overrides,
            vec![(Snowflake(7), vec!["surface.messages.list".to_owned()])]
        );
        let page = query(
            &conn,
            &AuditFilter {
                limit: 10,
                ..AuditFilter::default()
            },
        )
        .unwrap();
        assert_eq!(page.rows.len(), 1);
        assert_eq!(page.rows[0].row.tool, "b");
    }
}
