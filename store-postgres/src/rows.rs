//! Rows: records to parameters and back, and a writer batch as statements.
//!
//! A batch becomes one statement per run of writes of one kind (an ingest batch is one
//! multi-row `INSERT … SELECT FROM unnest(…) ON CONFLICT DO UPDATE`), in the batch's order, so
//! a save, a delete and a save of one message end as they would one by one. Within a run the
//! last write of each key wins (a statement may not touch a row twice) and rows go in key
//! order, so two nodes' batches lock rows in the same order.

use std::borrow::Cow;
use std::collections::HashMap;
use std::hash::Hash;

use entity::Snowflake;
use switchboard_records::{
    Approval, ApprovalCard, Attachment, AuditEntry, AuditRow, Message, Reaction, Session,
    SessionKind, Workflow,
};
use tokio_postgres::Row;
use tracing::warn;

use crate::pipeline::{p, Param, Stmt};
use crate::writer::Write;

pub(crate) fn to_sql(id: Snowflake) -> i64 {
    id.0 as i64
}

pub(crate) fn from_sql(id: i64) -> Snowflake {
    Snowflake(id as u64)
}

pub(crate) fn ms(ms: u64) -> i64 {
    i64::try_from(ms).unwrap_or(i64::MAX)
}

pub(crate) fn ms_from(ms: i64) -> u64 {
    u64::try_from(ms).unwrap_or(0)
}

/// Text as PostgreSQL can hold it: it refuses the NUL character, which becomes U+FFFD.
pub(crate) fn clean(text: &str) -> String {
    if text.contains('\0') {
        text.replace('\0', "\u{FFFD}")
    } else {
        text.to_owned()
    }
}

/// The columns a message is read with, in [`message_from_row`]'s order (a macro, so that
/// statements stay `&'static str` with `concat!`).
macro_rules! message_columns {
    () => {
        "id, channel_id, author_id, author_is_bot, content, text, timestamp, edited_timestamp, reply_to, attachments, reactions"
    };
}
pub(crate) use message_columns;

fn json_list<T: serde::de::DeserializeOwned>(json: &str, id: Snowflake, what: &str) -> Vec<T> {
    serde_json::from_str(json).unwrap_or_else(|err| {
        warn!(message = %id, what, %err, "ignoring unreadable stored {what}");
        Vec::new()
    })
}

/// A message from a row whose first columns are [`MESSAGE_COLUMNS`].
pub(crate) fn message_from_row(row: &Row) -> Message {
    let id = from_sql(row.get(0));
    Message {
        id,
        channel_id: from_sql(row.get(1)),
        author_id: from_sql(row.get(2)),
        author_is_bot: row.get(3),
        content: row.get(4),
        text: row.get(5),
        timestamp: row.get(6),
        edited_timestamp: row.get(7),
        reply_to: row.get::<_, Option<i64>>(8).map(from_sql),
        attachments: json_list::<Attachment>(row.get(9), id, "attachments"),
        reactions: json_list::<Reaction>(row.get(10), id, "reactions"),
    }
}

/// A session from `id, guild_id, parent_id, kind, name`; `None` (logged) for an unknown kind.
pub(crate) fn session_from_row(row: &Row) -> Option<Session> {
    let id = from_sql(row.get(0));
    let code: i16 = row.get(3);
    let Some(kind) = SessionKind::from_code(i64::from(code)) else {
        warn!(session = %id, kind = code, "skipping a stored session of unknown kind");
        return None;
    };
    Some(Session {
        id,
        guild_id: row.get::<_, Option<i64>>(1).map(from_sql),
        parent_id: row.get::<_, Option<i64>>(2).map(from_sql),
        kind,
        name: row.get(4),
    })
}

/// The columns an approval is read with, in [`approval_from_row`]'s order.
macro_rules! approval_columns {
    () => {
        "id, channel_id, message_id, card, binding"
    };
}
pub(crate) use approval_columns;

/// An approval from its row; `None` (logged) when its card does not read.
pub(crate) fn approval_from_row(row: &Row) -> Option<Approval> {
    let id: &str = row.get(0);
    let card = match serde_json::from_str::<ApprovalCard>(row.get(3)) {
        Ok(card) => card,
        Err(err) => {
            warn!(approval = %id, %err, "skipping an approval whose card does not read");
            return None;
        }
    };
    Some(Approval {
        card,
        channel_id: from_sql(row.get(1)),
        message_id: row.get::<_, Option<i64>>(2).map(from_sql),
        binding: row.get(4),
    })
}

/// A workflow from its body; `None` (logged) when it does not read.
pub(crate) fn workflow_from_body(id: &str, body: &str) -> Option<Workflow> {
    match serde_json::from_str::<Workflow>(body) {
        Ok(workflow) => Some(workflow),
        Err(err) => {
            warn!(workflow = %id, "skipping a stored workflow that does not parse: {err}");
            None
        }
    }
}

/// The columns an audit row is read with, in [`audit_from_row`]'s order.
macro_rules! audit_columns {
    () => {
        "id, time_ms, caller, run, requested_by, tool, sessions, input, decision, decided_by, outcome, code, duration_ms, count, events"
    };
}
pub(crate) use audit_columns;

pub(crate) fn audit_from_row(row: &Row) -> AuditEntry {
    let input: String = row.get(7);
    AuditEntry {
        id: ms_from(row.get(0)),
        row: AuditRow {
            time_ms: ms_from(row.get(1)),
            caller: Cow::Owned(row.get(2)),
            run: row.get(3),
            requested_by: row.get::<_, Option<i64>>(4).map(from_sql),
            tool: Cow::Owned(row.get(5)),
            sessions: row
                .get::<_, Vec<i64>>(6)
                .into_iter()
                .map(from_sql)
                .collect(),
            input: serde_json::from_str(&input).unwrap_or(serde_json::Value::String(input)),
            decision: Cow::Owned(row.get(8)),
            decided_by: row.get::<_, Option<String>>(9).map(Cow::Owned),
            outcome: Cow::Owned(row.get(10)),
            code: row.get::<_, Option<String>>(11).map(Cow::Owned),
            duration_ms: ms_from(row.get(12)),
            count: ms_from(row.get(13)).max(1),
            events: switchboard_records::audit::events_from_column(row.get(14)),
        },
    }
}

/// The pending expiry of an approval (what a decision compares with), `None` once settled.
pub(crate) fn expires_ms(approval: &Approval) -> Option<i64> {
    match approval.card.state {
        switchboard_records::ApprovalState::Pending { expires_at_ms } => Some(ms(expires_at_ms)),
        _ => None,
    }
}

fn json<T: serde::Serialize>(value: &T) -> String {
    // Records serialize infallibly (no maps with non-string keys, no failing impls).
    clean(&serde_json::to_string(value).unwrap_or_else(|_| "null".to_owned()))
}

/// The last write of each key, in key order.
fn last_by_key<T, K: Hash + Eq + Ord + Clone>(
    items: impl Iterator<Item = T>,
    key: impl Fn(&T) -> K,
) -> Vec<T> {
    let mut last: HashMap<K, T> = HashMap::new();
    for item in items {
        last.insert(key(&item), item);
    }
    let mut out: Vec<(K, T)> = last.into_iter().collect();
    out.sort_by(|a, b| a.0.cmp(&b.0));
    out.into_iter().map(|(_, item)| item).collect()
}

/// Which statement a write belongs to: consecutive writes of one kind share one.
fn kind(write: &Write) -> u8 {
    match write {
        Write::UpsertSession(_) => 0,
        Write::RemoveSession(_) => 1,
        Write::SaveThread(..) => 2,
        Write::UpsertUser(_) => 3,
        Write::UpsertRole(_) => 4,
        Write::RemoveRole(_) => 5,
        Write::SaveMessage(_) => 6,
        Write::DeleteMessages { .. } => 7,
        Write::ForgetChannel(_) => 8,
        Write::OpenGap(_) => 9,
        Write::CloseGap(_) => 10,
        Write::SaveWorkflow(_) => 11,
        Write::Audit(_) => 12,
        Write::ImportAudit(_) => 13,
        Write::SessionScope(..) => 14,
        Write::SaveApproval(_) => 15,
        Write::ClaimTrigger(_) | Write::PruneClaims(_) => 16,
    }
}

/// The statements of a batch, in its order.
pub(crate) fn statements(batch: &[Write]) -> Vec<Stmt> {
    let mut out = Vec::new();
    let mut start = 0;
    while start < batch.len() {
        let k = kind(&batch[start]);
        let end = batch[start..]
            .iter()
            .position(|w| kind(w) != k)
            .map_or(batch.len(), |n| start + n);
        run(&batch[start..end], &mut out);
        start = end;
    }
    out
}

macro_rules! each {
    ($run:expr, $pat:pat => $value:expr) => {
        $run.iter().filter_map(|w| match w {
            $pat => Some($value),
            _ => None,
        })
    };
}

const UPSERT_SESSIONS: &str = "INSERT INTO sessions (id, guild_id, parent_id, kind, name)
    SELECT * FROM unnest($1::bigint[], $2::bigint[], $3::bigint[], $4::smallint[], $5::text[])
    ON CONFLICT (id) DO UPDATE SET guild_id = excluded.guild_id, parent_id = excluded.parent_id,
        kind = excluded.kind, name = excluded.name";
const REMOVE_SESSIONS: &str = "WITH t AS (DELETE FROM threads WHERE id = ANY($1::bigint[]))
    DELETE FROM sessions WHERE id = ANY($1::bigint[])";
const SAVE_THREADS: &str = "INSERT INTO threads (id, archived, locked, auto_archive_minutes)
    SELECT * FROM unnest($1::bigint[], $2::boolean[], $3::boolean[], $4::integer[])
    ON CONFLICT (id) DO UPDATE SET archived = excluded.archived, locked = excluded.locked,
        auto_archive_minutes = excluded.auto_archive_minutes";
const UPSERT_USERS: &str = "INSERT INTO users (id, username, global_name, is_bot)
    SELECT * FROM unnest($1::bigint[], $2::text[], $3::text[], $4::boolean[])
    ON CONFLICT (id) DO UPDATE SET username = excluded.username,
        global_name = excluded.global_name, is_bot = excluded.is_bot";
const UPSERT_ROLES: &str = "INSERT INTO roles (id, name)
    SELECT * FROM unnest($1::bigint[], $2::text[])
    ON CONFLICT (id) DO UPDATE SET name = excluded.name";
const REMOVE_ROLES: &str = "DELETE FROM roles WHERE id = ANY($1::bigint[])";
const SAVE_MESSAGES: &str = "INSERT INTO messages (id, channel_id, author_id, author_is_bot,
        content, text, timestamp, edited_timestamp, reply_to, attachments, reactions, deleted,
        search)
    SELECT id, channel_id, author_id, author_is_bot, content, text, ts, edited, reply_to,
        attachments, reactions, false, search::tsvector
    FROM unnest($1::bigint[], $2::bigint[], $3::bigint[], $4::boolean[], $5::text[], $6::text[],
        $7::text[], $8::text[], $9::bigint[], $10::text[], $11::text[], $12::text[])
        AS u(id, channel_id, author_id, author_is_bot, content, text, ts, edited, reply_to,
             attachments, reactions, search)
    ON CONFLICT (id) DO UPDATE SET channel_id = excluded.channel_id,
        author_id = excluded.author_id, author_is_bot = excluded.author_is_bot,
        content = excluded.content, text = excluded.text, timestamp = excluded.timestamp,
        edited_timestamp = excluded.edited_timestamp, reply_to = excluded.reply_to,
        attachments = excluded.attachments, reactions = excluded.reactions, deleted = false,
        search = excluded.search";
const DELETE_MESSAGES: &str =
    "UPDATE messages SET deleted = true WHERE id = ANY($1::bigint[]) AND NOT deleted";
const FORGET_CHANNELS: &str = "DELETE FROM messages WHERE channel_id = ANY($1::bigint[])";
const OPEN_GAPS: &str = "INSERT INTO backfill_gaps (channel_id, after_id)
    SELECT * FROM unnest($1::bigint[], $2::bigint[])
    ON CONFLICT (channel_id) DO UPDATE
        SET after_id = least(backfill_gaps.after_id, excluded.after_id)";
const CLOSE_GAPS: &str = "DELETE FROM backfill_gaps WHERE channel_id = ANY($1::bigint[])";
const SAVE_WORKFLOWS: &str = "INSERT INTO workflows (id, state, finished_ms, body)
    SELECT * FROM unnest($1::text[], $2::text[], $3::bigint[], $4::text[])
    ON CONFLICT (id) DO UPDATE SET state = excluded.state, finished_ms = excluded.finished_ms,
        body = excluded.body";
const RECORD_AUDIT: &str = "INSERT INTO audit (time_ms, caller, run, requested_by, tool,
        sessions, input, decision, decided_by, outcome, code, duration_ms, count, events)
    SELECT time_ms, caller, run, requested_by, tool, sessions::bigint[], input, decision,
        decided_by, outcome, code, duration_ms, count, events
    FROM unnest($1::bigint[], $2::text[], $3::text[], $4::bigint[], $5::text[], $6::text[],
        $7::text[], $8::text[], $9::text[], $10::text[], $11::text[], $12::bigint[],
        $13::bigint[], $14::text[])
        WITH ORDINALITY AS u(time_ms, caller, run, requested_by, tool, sessions, input,
             decision, decided_by, outcome, code, duration_ms, count, events, n)
    ORDER BY n";
const IMPORT_AUDIT: &str = "WITH i AS (
        INSERT INTO audit (id, time_ms, caller, run, requested_by, tool, sessions, input,
            decision, decided_by, outcome, code, duration_ms, count, events)
        SELECT id, time_ms, caller, run, requested_by, tool, sessions::bigint[], input,
            decision, decided_by, outcome, code, duration_ms, count, events
        FROM unnest($15::bigint[], $1::bigint[], $2::text[], $3::text[], $4::bigint[],
            $5::text[], $6::text[], $7::text[], $8::text[], $9::text[], $10::text[],
            $11::text[], $12::bigint[], $13::bigint[], $14::text[])
            AS u(id, time_ms, caller, run, requested_by, tool, sessions, input, decision,
                 decided_by, outcome, code, duration_ms, count, events)
        ON CONFLICT (id) DO NOTHING
        RETURNING id)
    SELECT setval(pg_get_serial_sequence('audit', 'id'),
        greatest((SELECT max(id) FROM i), (SELECT last_value FROM audit_id_seq)))
    WHERE EXISTS (SELECT 1 FROM i)";
const SET_SCOPES: &str = "INSERT INTO session_scopes (session_id, scope)
    SELECT * FROM unnest($1::bigint[], $2::text[])
    ON CONFLICT (session_id) DO UPDATE SET scope = excluded.scope";
const REMOVE_SCOPES: &str = "DELETE FROM session_scopes WHERE session_id = ANY($1::bigint[])";
const SAVE_APPROVALS: &str = "INSERT INTO approvals (id, channel_id, message_id, pending,
        expires_ms, card, binding, updated_ms)
    SELECT * FROM unnest($1::text[], $2::bigint[], $3::bigint[], $4::boolean[], $5::bigint[],
        $6::text[], $7::text[], $8::bigint[])
    ON CONFLICT (id) DO UPDATE SET channel_id = excluded.channel_id,
        message_id = excluded.message_id, pending = excluded.pending,
        expires_ms = excluded.expires_ms, card = excluded.card, binding = excluded.binding,
        updated_ms = excluded.updated_ms
    WHERE approvals.pending";

fn ids(ids: impl Iterator<Item = Snowflake>) -> Param {
    let mut ids: Vec<i64> = ids.map(to_sql).collect();
    ids.sort_unstable();
    ids.dedup();
    p(ids)
}

/// Audit rows as the fourteen column arrays both audit statements take.
fn audit_params<'a>(rows: impl Iterator<Item = &'a AuditRow>) -> Vec<Param> {
    let rows: Vec<&AuditRow> = rows.collect();
    let sessions = |row: &AuditRow| {
        let ids: Vec<String> = row
            .sessions
            .iter()
            .map(|s| to_sql(*s).to_string())
            .collect();
        format!("{{{}}}", ids.join(","))
    };
    vec![
        p(rows.iter().map(|r| ms(r.time_ms)).collect::<Vec<_>>()),
        p(rows.iter().map(|r| clean(&r.caller)).collect::<Vec<_>>()),
        p(rows
            .iter()
            .map(|r| r.run.as_deref().map(clean))
            .collect::<Vec<_>>()),
        p(rows
            .iter()
            .map(|r| r.requested_by.map(to_sql))
            .collect::<Vec<_>>()),
        p(rows.iter().map(|r| clean(&r.tool)).collect::<Vec<_>>()),
        p(rows.iter().map(|r| sessions(r)).collect::<Vec<_>>()),
        p(rows.iter().map(|r| json(&r.input)).collect::<Vec<_>>()),
        p(rows.iter().map(|r| clean(&r.decision)).collect::<Vec<_>>()),
        p(rows
            .iter()
            .map(|r| r.decided_by.as_deref().map(clean))
            .collect::<Vec<_>>()),
        p(rows.iter().map(|r| clean(&r.outcome)).collect::<Vec<_>>()),
        p(rows
            .iter()
            .map(|r| r.code.as_deref().map(clean))
            .collect::<Vec<_>>()),
        p(rows.iter().map(|r| ms(r.duration_ms)).collect::<Vec<_>>()),
        p(rows.iter().map(|r| ms(r.count)).collect::<Vec<_>>()),
        p(rows
            .iter()
            .map(|r| switchboard_records::audit::events_to_column(&r.events).map(|e| clean(&e)))
            .collect::<Vec<_>>()),
    ]
}

fn messages(run: &[Write], out: &mut Vec<Stmt>) {
    let messages = last_by_key(each!(run, Write::SaveMessage(m) => &**m), |m| m.id);
    let col = |f: &dyn Fn(&Message) -> String| -> Param {
        p(messages.iter().map(|m| f(m)).collect::<Vec<String>>())
    };
    out.push(Stmt::new(
        SAVE_MESSAGES,
        vec![
            p(messages.iter().map(|m| to_sql(m.id)).collect::<Vec<_>>()),
            p(messages
                .iter()
                .map(|m| to_sql(m.channel_id))
                .collect::<Vec<_>>()),
            p(messages
                .iter()
                .map(|m| to_sql(m.author_id))
                .collect::<Vec<_>>()),
            p(messages.iter().map(|m| m.author_is_bot).collect::<Vec<_>>()),
            col(&|m| clean(&m.content)),
            col(&|m| clean(&m.text)),
            col(&|m| clean(&m.timestamp)),
            p(messages
                .iter()
                .map(|m| m.edited_timestamp.as_deref().map(clean))
                .collect::<Vec<_>>()),
            p(messages
                .iter()
                .map(|m| m.reply_to.map(to_sql))
                .collect::<Vec<_>>()),
            col(&|m| json(&m.attachments)),
            col(&|m| json(&m.reactions)),
            col(&|m| crate::search::document(&m.text, &m.content)),
        ],
    ));
}

/// The statement(s) of a run of writes of one kind.
fn run(run: &[Write], out: &mut Vec<Stmt>) {
    match &run[0] {
        Write::UpsertSession(_) => {
            let sessions = last_by_key(each!(run, Write::UpsertSession(s) => s), |s| s.id);
            out.push(Stmt::new(
                UPSERT_SESSIONS,
                vec![
                    p(sessions.iter().map(|s| to_sql(s.id)).collect::<Vec<_>>()),
                    p(sessions
                        .iter()
                        .map(|s| s.guild_id.map(to_sql))
                        .collect::<Vec<_>>()),
                    p(sessions
                        .iter()
                        .map(|s| s.parent_id.map(to_sql))
                        .collect::<Vec<_>>()),
                    p(sessions
                        .iter()
                        .map(|s| i16::from(s.kind.code()))
                        .collect::<Vec<_>>()),
                    p(sessions.iter().map(|s| clean(&s.name)).collect::<Vec<_>>()),
                ],
            ));
        }
        Write::RemoveSession(_) => out.push(Stmt::new(
            REMOVE_SESSIONS,
            vec![ids(each!(run, Write::RemoveSession(id) => *id))],
        )),
        Write::SaveThread(..) => {
            let threads = last_by_key(
                each!(run, Write::SaveThread(id, state) => (*id, *state)),
                |t| t.0,
            );
            out.push(Stmt::new(
                SAVE_THREADS,
                vec![
                    p(threads.iter().map(|t| to_sql(t.0)).collect::<Vec<_>>()),
                    p(threads.iter().map(|t| t.1.archived).collect::<Vec<_>>()),
                    p(threads.iter().map(|t| t.1.locked).collect::<Vec<_>>()),
                    p(threads
                        .iter()
                        .map(|t| i32::try_from(t.1.auto_archive_minutes).unwrap_or(i32::MAX))
                        .collect::<Vec<_>>()),
                ],
            ));
        }
        Write::UpsertUser(_) => {
            let users = last_by_key(each!(run, Write::UpsertUser(u) => u), |u| u.id);
            out.push(Stmt::new(
                UPSERT_USERS,
                vec![
                    p(users.iter().map(|u| to_sql(u.id)).collect::<Vec<_>>()),
                    p(users.iter().map(|u| clean(&u.username)).collect::<Vec<_>>()),
                    p(users
                        .iter()
                        .map(|u| u.global_name.as_deref().map(clean))
                        .collect::<Vec<_>>()),
                    p(users.iter().map(|u| u.is_bot).collect::<Vec<_>>()),
                ],
            ));
        }
        Write::UpsertRole(_) => {
            let roles = last_by_key(each!(run, Write::UpsertRole(r) => r), |r| r.id);
            out.push(Stmt::new(
                UPSERT_ROLES,
                vec![
                    p(roles.iter().map(|r| to_sql(r.id)).collect::<Vec<_>>()),
                    p(roles.iter().map(|r| clean(&r.name)).collect::<Vec<_>>()),
                ],
            ));
        }
        Write::RemoveRole(_) => out.push(Stmt::new(
            REMOVE_ROLES,
            vec![ids(each!(run, Write::RemoveRole(id) => *id))],
        )),
        Write::SaveMessage(_) => messages(run, out),
        Write::DeleteMessages { .. } => out.push(Stmt::new(
            DELETE_MESSAGES,
            vec![ids(
                each!(run, Write::DeleteMessages { ids, .. } => ids.iter().copied()).flatten(),
            )],
        )),
        Write::ForgetChannel(_) => out.push(Stmt::new(
            FORGET_CHANNELS,
            vec![ids(each!(run, Write::ForgetChannel(id) => *id))],
        )),
        Write::OpenGap(_) => {
            let mut oldest: HashMap<Snowflake, Snowflake> = HashMap::new();
            for gap in each!(run, Write::OpenGap(gap) => gap) {
                let kept = oldest.entry(gap.channel_id).or_insert(gap.after);
                *kept = (*kept).min(gap.after);
            }
            let mut gaps: Vec<(Snowflake, Snowflake)> = oldest.into_iter().collect();
            gaps.sort_unstable();
            out.push(Stmt::new(
                OPEN_GAPS,
                vec![
                    p(gaps.iter().map(|g| to_sql(g.0)).collect::<Vec<_>>()),
                    p(gaps.iter().map(|g| to_sql(g.1)).collect::<Vec<_>>()),
                ],
            ));
        }
        Write::CloseGap(_) => out.push(Stmt::new(
            CLOSE_GAPS,
            vec![ids(each!(run, Write::CloseGap(id) => *id))],
        )),
        Write::SaveWorkflow(_) => {
            let workflows = last_by_key(each!(run, Write::SaveWorkflow(w) => &**w), |w| {
                w.workflow_id.clone()
            });
            out.push(Stmt::new(
                SAVE_WORKFLOWS,
                vec![
                    p(workflows
                        .iter()
                        .map(|w| clean(&w.workflow_id))
                        .collect::<Vec<_>>()),
                    p(workflows
                        .iter()
                        .map(|w| w.state.as_str().to_owned())
                        .collect::<Vec<_>>()),
                    p(workflows
                        .iter()
                        .map(|w| w.finished_ms.map(ms))
                        .collect::<Vec<_>>()),
                    p(workflows.iter().map(json).collect::<Vec<_>>()),
                ],
            ));
        }
        Write::Audit(_) => out.push(Stmt::new(
            RECORD_AUDIT,
            audit_params(each!(run, Write::Audit(row) => &**row)),
        )),
        Write::ImportAudit(_) => {
            let entries: Vec<&AuditEntry> =
                each!(run, Write::ImportAudit(entries) => entries.iter())
                    .flatten()
                    .collect();
            for chunk in entries.chunks(crate::writer::MAX_BATCH) {
                let mut params = audit_params(chunk.iter().map(|e| &e.row));
                params.push(p(chunk.iter().map(|e| ms(e.id)).collect::<Vec<_>>()));
                out.push(Stmt::new(IMPORT_AUDIT, params));
            }
        }
        Write::SessionScope(..) => {
            let scopes = last_by_key(
                each!(run, Write::SessionScope(id, scope) => (*id, scope)),
                |s| s.0,
            );
            let (set, removed): (Vec<_>, Vec<_>) = scopes.into_iter().partition(|s| s.1.is_some());
            if !set.is_empty() {
                out.push(Stmt::new(
                    SET_SCOPES,
                    vec![
                        p(set.iter().map(|s| to_sql(s.0)).collect::<Vec<_>>()),
                        p(set.iter().map(|s| json(s.1)).collect::<Vec<_>>()),
                    ],
                ));
            }
            if !removed.is_empty() {
                out.push(Stmt::new(
                    REMOVE_SCOPES,
                    vec![ids(removed.iter().map(|s| s.0))],
                ));
            }
        }
        // Decided in the database (`claim_trigger`), never queued.
        Write::ClaimTrigger(_) | Write::PruneClaims(_) => {}
        Write::SaveApproval(_) => {
            let approvals = last_by_key(each!(run, Write::SaveApproval(a) => &**a), |a| {
                a.id().to_owned()
            });
            let now = ms(crate::now_ms());
            out.push(Stmt::new(
                SAVE_APPROVALS,
                vec![
                    p(approvals.iter().map(|a| clean(a.id())).collect::<Vec<_>>()),
                    p(approvals
                        .iter()
                        .map(|a| to_sql(a.channel_id))
                        .collect::<Vec<_>>()),
                    p(approvals
                        .iter()
                        .map(|a| a.message_id.map(to_sql))
                        .collect::<Vec<_>>()),
                    p(approvals.iter().map(|a| a.is_pending()).collect::<Vec<_>>()),
                    p(approvals.iter().map(|a| expires_ms(a)).collect::<Vec<_>>()),
                    p(approvals.iter().map(|a| json(&a.card)).collect::<Vec<_>>()),
                    p(approvals
                        .iter()
                        .map(|a| clean(&a.binding))
                        .collect::<Vec<_>>()),
                    p(vec![now; approvals.len()]),
                ],
            ));
        }
    }
}
