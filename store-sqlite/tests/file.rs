//! The file itself: what opening says about files that are not stores, are damaged, are newer,
//! or are in use; and every older schema climbing the ladder.

use std::sync::Arc;

use switchboard_store::{Backend, StoreErrorKind};
use switchboard_store_sqlite::{peek_sessions, SqliteBackend, SqliteOptions, SCHEMA_VERSION};

mod support;
use support::TempDir;

fn open(path: &str) -> Result<SqliteBackend, switchboard_store::StoreError> {
    SqliteBackend::open(path, SqliteOptions::default())
}

fn close(backend: SqliteBackend) {
    futures_executor::block_on(backend.close()).unwrap();
}

#[test]
fn a_file_that_is_not_sqlite_is_corrupt_and_named() {
    let dir = TempDir::new("garbage");
    let path = dir.db();
    std::fs::write(
        &path,
        "this is not a database, just some text that is long enough ".repeat(40),
    )
    .unwrap();
    let err = open(&path).unwrap_err();
    assert_eq!(err.kind(), StoreErrorKind::Corrupt, "{err}");
    assert!(err.to_string().contains(&path), "{err}");
    assert!(
        err.to_string().contains("store.url"),
        "it says what to do: {err}"
    );
}

#[test]
fn a_damaged_sqlite_file_is_corrupt() {
    let dir = TempDir::new("damaged");
    let path = dir.db();
    let mut bytes = b"SQLite format 3\0".to_vec();
    bytes.extend(std::iter::repeat_n(0xAB_u8, 8192));
    std::fs::write(&path, bytes).unwrap();
    assert_eq!(open(&path).unwrap_err().kind(), StoreErrorKind::Corrupt);
}

#[test]
fn a_path_in_a_missing_directory_is_unavailable() {
    let dir = TempDir::new("missing");
    let path = dir.0.join("no-such-dir").join("store.db");
    let err = open(&path.to_string_lossy()).unwrap_err();
    assert_eq!(err.kind(), StoreErrorKind::Unavailable, "{err}");
    assert!(err.to_string().contains("directory exists"), "{err}");
}

#[test]
fn a_newer_schema_is_refused_and_says_so() {
    let dir = TempDir::new("newer");
    let path = dir.db();
    close(open(&path).unwrap());
    let conn = rusqlite::Connection::open(&path).unwrap();
    conn.pragma_update(None, "user_version", SCHEMA_VERSION + 1)
        .unwrap();
    drop(conn);
    let err = open(&path).unwrap_err();
    assert_eq!(err.kind(), StoreErrorKind::Corrupt);
    assert!(err.to_string().contains("newer"), "{err}");
}

#[test]
fn a_store_in_use_is_locked_until_closed() {
    let dir = TempDir::new("locked");
    let path = dir.db();
    let first = open(&path).unwrap();
    let err = open(&path).unwrap_err();
    assert_eq!(err.kind(), StoreErrorKind::Locked, "{err}");
    assert!(err.to_string().contains("another switchboard"), "{err}");
    assert!(
        err.to_string().contains(
            "the store is SQLite: one node only; for several nodes use store.url = postgres://…"
        ),
        "{err}"
    );
    assert!(
        peek_sessions(&path).is_err(),
        "peeking fails while the file is held"
    );
    close(first);
    close(open(&path).unwrap());
    assert_eq!(peek_sessions(&path).unwrap(), []);
}

const UNDO_V4: &str = "
DROP TRIGGER IF EXISTS messages_fts_insert;
DROP TRIGGER IF EXISTS messages_fts_delete;
DROP TRIGGER IF EXISTS messages_fts_update;
DROP TABLE messages_fts;
DROP TABLE threads;
ALTER TABLE messages DROP COLUMN refs;
";

fn tables(path: &str) -> Vec<String> {
    let conn = rusqlite::Connection::open(path).unwrap();
    let mut stmt = conn
        .prepare("SELECT name FROM sqlite_master WHERE type = 'table' ORDER BY name")
        .unwrap();
    let names = stmt
        .query_map([], |row| row.get(0))
        .unwrap()
        .collect::<rusqlite::Result<_>>()
        .unwrap();
    names
}

#[test]
fn a_version_1_store_gains_every_later_table() {
    let dir = TempDir::new("migrate-v1");
    let path = dir.db();
    close(open(&path).unwrap());
    let current = tables(&path);
    let conn = rusqlite::Connection::open(&path).unwrap();
    conn.execute_batch(UNDO_V4).unwrap();
    conn.execute_batch(
        "DROP TABLE workflows; DROP TABLE audit; DROP TABLE session_scopes; DROP TABLE approvals;
         DROP TABLE answered_triggers; DROP TABLE backfill_gaps; DROP TABLE idempotency;",
    )
    .unwrap();
    conn.pragma_update(None, "user_version", 1).unwrap();
    drop(conn);
    let backend = Arc::new(open(&path).unwrap());
    close(Arc::try_unwrap(backend).unwrap());
    assert_eq!(tables(&path), current);
    let conn = rusqlite::Connection::open(&path).unwrap();
    let version: i64 = conn
        .query_row("PRAGMA user_version", [], |row| row.get(0))
        .unwrap();
    assert_eq!(version, SCHEMA_VERSION);
    assert!(
        conn.prepare("SELECT binding FROM approvals").is_ok(),
        "approvals gained the binding"
    );
}

#[test]
fn a_store_at_version_7_missing_a_step_gains_it() {
    // Branches that land out of order: the version says 7, the idempotency table is missing.
    let dir = TempDir::new("repair");
    let path = dir.db();
    close(open(&path).unwrap());
    let conn = rusqlite::Connection::open(&path).unwrap();
    conn.execute_batch("DROP TABLE idempotency;").unwrap();
    drop(conn);
    close(open(&path).unwrap());
    assert!(tables(&path).contains(&"idempotency".to_owned()));
}

#[test]
fn a_store_at_version_13_gains_the_audit_events_and_its_rows_read_with_none() {
    use switchboard_store::records::AuditFilter;
    use switchboard_store::AuditStore as _;
    let dir = TempDir::new("audit-events");
    let path = dir.db();
    close(open(&path).unwrap());
    // A file as version 13 left it: no `events` column, one row written then.
    let conn = rusqlite::Connection::open(&path).unwrap();
    conn.execute_batch(
        "ALTER TABLE audit DROP COLUMN events;
         INSERT INTO audit (time_ms, caller, tool, sessions, input, decision, outcome,
                            duration_ms)
         VALUES (strftime('%s', 'now') * 1000, 'operator', 'fs.write', '', '{}', 'allow',
                 'ok', 1);",
    )
    .unwrap();
    conn.pragma_update(None, "user_version", 13).unwrap();
    drop(conn);
    let backend = open(&path).unwrap();
    let page = futures_executor::block_on(backend.audit_page(AuditFilter {
        limit: 10,
        ..AuditFilter::default()
    }))
    .unwrap();
    assert_eq!(page.rows.len(), 1);
    assert!(page.rows[0].row.events.is_empty());
    close(backend);
    // A column a broken writer left unreadable reads as one event that says so.
    let conn = rusqlite::Connection::open(&path).unwrap();
    conn.execute_batch("UPDATE audit SET events = 'not json'")
        .unwrap();
    drop(conn);
    let backend = open(&path).unwrap();
    let rows = futures_executor::block_on(backend.audit_after(0, 10)).unwrap();
    assert_eq!(rows[0].row.events[0]["type"], "events.unreadable");
    assert_eq!(rows[0].row.events[0]["text"], "not json");
    close(backend);
}

#[test]
fn a_stored_workflow_that_does_not_parse_is_skipped_not_fatal() {
    use switchboard_records::{Snowflake, Workflow, WorkflowState};
    use switchboard_store::WorkflowStore as _;
    let dir = TempDir::new("workflow-rows");
    let path = dir.db();
    let good = Workflow {
        workflow_id: "wf_good".into(),
        state: WorkflowState::Waiting,
        origin_session_id: Snowflake(1_000_000_000_000_000_401),
        origin_message_id: None,
        created_by: "operator".into(),
        created_ms: 1,
        deadline_ms: 2,
        finished_ms: None,
        resume_prompt: None,
        tasks: Vec::new(),
    };
    let backend = open(&path).unwrap();
    backend.save_workflow(&good).unwrap();
    close(backend);
    // Rows an older or broken writer left: not JSON, and JSON of the wrong shape.
    let conn = rusqlite::Connection::open(&path).unwrap();
    for (id, body) in [
        ("wf_garbage", "not json"),
        ("wf_wrong", "{\"workflowId\":7}"),
    ] {
        conn.execute(
            "INSERT INTO workflows (id, state, finished_ms, body) VALUES (?1, 'waiting', NULL, ?2)",
            [id, body],
        )
        .unwrap();
    }
    drop(conn);
    let backend = open(&path).unwrap();
    assert_eq!(
        futures_executor::block_on(backend.workflows()).unwrap(),
        vec![good]
    );
    close(backend);
}

#[test]
fn a_version_3_store_gains_the_search_index_readable_emoji_and_the_claim_tables() {
    use std::time::Duration;
    use switchboard_records::{
        Gap, Mention, Message, Reaction, SearchMatch, SearchQuery, SearchTerm, Snowflake,
    };
    use switchboard_store::{Claim, MessageStore as _, SearchStore as _, TriggerStore as _};
    let channel = Snowflake(1_000_000_000_000_000_401);
    let mentioned = Snowflake(1_000_000_000_000_000_102);
    let dir = TempDir::new("migrate-v3");
    let path = dir.db();
    let old = Message {
        id: Snowflake(1_300_000_000_000_000_001),
        channel_id: channel,
        author_id: Snowflake(1_000_000_000_000_000_101),
        author_is_bot: false,
        content: format!("deploy done <@{mentioned}>"),
        text: "deploy done @tomas".into(),
        timestamp: "2024-05-01T12:34:56.789000+00:00".into(),
        edited_timestamp: None,
        reply_to: None,
        attachments: Vec::new(),
        reactions: vec![Reaction {
            emoji: "👍".into(),
            count: 2,
            me: false,
        }],
    };
    let backend = open(&path).unwrap();
    backend.save_message(old.clone()).unwrap();
    close(backend);
    // A file as version 3 left it: no search index, thread state or refs (4), no claim or
    // backfill tables (5), no idempotency keys (8), and reaction emoji kept percent-encoded.
    let conn = rusqlite::Connection::open(&path).unwrap();
    conn.execute_batch(UNDO_V4).unwrap();
    conn.execute_batch(
        "DROP TABLE answered_triggers; DROP TABLE backfill_gaps; DROP TABLE idempotency;
         UPDATE messages SET reactions = '[{\"emoji\":\"%F0%9F%91%8D\",\"count\":2,\"me\":false}]';",
    )
    .unwrap();
    conn.pragma_update(None, "user_version", 3).unwrap();
    drop(conn);

    let backend = open(&path).unwrap();
    let read = futures_executor::block_on(backend.message(channel, old.id))
        .unwrap()
        .expect("the message stored before the upgrade is kept");
    assert_eq!(read, old, "kept whole, its emoji readable again");
    let search = |any_of: SearchMatch| {
        futures_executor::block_on(backend.search(
            SearchQuery {
                terms: vec![SearchTerm {
                    any_of: vec![any_of],
                }],
                channels: vec![channel],
                author: None,
                before: None,
                after: None,
                limit: 10,
            },
            Duration::from_secs(5),
        ))
        .unwrap()
        .len()
    };
    // The rows stored before the upgrade are indexed, words and mention ids both.
    let word = |text: &str| SearchMatch::Words {
        text: text.into(),
        prefix: false,
    };
    assert_eq!(search(word("deploy")), 1);
    assert_eq!(search(SearchMatch::Mentions(Mention::User(mentioned))), 1);
    assert_eq!(search(word("absent")), 0);
    // The tables of version 5 work.
    let now_ms = std::time::SystemTime::now()
        .duration_since(std::time::UNIX_EPOCH)
        .unwrap()
        .as_millis() as u64;
    let trigger = switchboard_records::trigger::first_id_at(now_ms);
    let claim = futures_executor::block_on(backend.claim_trigger(
        switchboard_records::trigger::TriggerClaim {
            channel_id: channel,
            message_id: trigger,
            claimed_ms: now_ms,
        },
    ))
    .unwrap();
    let Claim::Won(durable) = claim else {
        panic!("a fresh claim wins")
    };
    futures_executor::block_on(durable).unwrap();
    backend
        .open_gap(Gap {
            channel_id: channel,
            after: old.id,
        })
        .unwrap();
    close(backend);
    let conn = rusqlite::Connection::open(&path).unwrap();
    let version: i64 = conn
        .query_row("PRAGMA user_version", [], |row| row.get(0))
        .unwrap();
    assert_eq!(version, SCHEMA_VERSION);
    for table in ["answered_triggers", "backfill_gaps"] {
        let count: i64 = conn
            .query_row(&format!("SELECT COUNT(*) FROM {table}"), [], |row| {
                row.get(0)
            })
            .unwrap();
        assert_eq!(count, 1, "{table}");
    }
}
