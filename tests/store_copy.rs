//! `switchboard store copy --from URL --to URL`: no config file, every kind copied, the report's
//! lines, a second run that writes nothing, and garbage URLs refused with exit 2.

mod support;

use std::process::{Command, Stdio};
use std::sync::Arc;
use std::time::Duration;

use futures_executor::block_on;
use support::{wait_bounded, TempDir};
use switchboard_records::{AuditRow, Message, Session, SessionKind, Snowflake};
use switchboard_store::{AuditStore as _, Backend, CacheOptions, Store};
use switchboard_store_sqlite::{SqliteBackend, SqliteOptions};

const OPS: Snowflake = Snowflake(1_000_000_000_000_000_401);
const MIRA: Snowflake = Snowflake(1_000_000_000_000_000_501);

fn message(n: u64) -> Message {
    Message {
        id: Snowflake(1_300_000_000_000_000_000 + n),
        channel_id: OPS,
        author_id: MIRA,
        author_is_bot: false,
        content: format!("message {n}"),
        text: format!("message {n}"),
        timestamp: "2026-11-22T12:00:00.000000+00:00".into(),
        edited_timestamp: None,
        reply_to: None,
        attachments: Vec::new(),
        reactions: Vec::new(),
    }
}

/// A SQLite store holding a session, 41 messages and 3 audit rows.
fn source(path: &str) {
    let backend: Arc<dyn Backend> =
        Arc::new(SqliteBackend::open(path, SqliteOptions::default()).unwrap());
    let store = Store::open(Arc::clone(&backend), CacheOptions::default()).unwrap();
    store.upsert_session(Session {
        id: OPS,
        guild_id: None,
        parent_id: None,
        kind: SessionKind::Channel,
        name: "ops".into(),
    });
    for n in 0..41 {
        store.insert_message(message(n));
    }
    for n in 0..3 {
        backend
            .record(AuditRow {
                time_ms: 4_000_000_000_000 + n,
                caller: "operator".into(),
                run: None,
                requested_by: None,
                tool: "surface.messages.send".into(),
                sessions: vec![OPS],
                input: serde_json::json!({"text": n}),
                decision: "allow".into(),
                decided_by: None,
                outcome: "ok".into(),
                code: None,
                duration_ms: 1,
                count: 1 + n,
                events: Vec::new(),
            })
            .unwrap();
    }
    store.close().unwrap();
}

/// Runs `switchboard store copy ARGS` in `dir` (no config there): exit code, stdout, stderr.
fn copy(dir: &std::path::Path, args: &[&str]) -> (Option<i32>, String, String) {
    let mut child = Command::new(env!("CARGO_BIN_EXE_switchboard"))
        .args(["store", "copy"])
        .args(args)
        .current_dir(dir)
        .env_remove("SWITCHBOARD_CONFIG")
        .stdin(Stdio::null())
        .stdout(Stdio::piped())
        .stderr(Stdio::piped())
        .spawn()
        .expect("spawn switchboard store copy");
    let stdout = child.stdout.take().unwrap();
    let stderr = child.stderr.take().unwrap();
    let status = wait_bounded(&mut child, Duration::from_secs(60)).expect("the copy ends");
    (
        status.code(),
        std::io::read_to_string(stdout).unwrap(),
        std::io::read_to_string(stderr).unwrap(),
    )
}

#[test]
fn a_sqlite_store_copies_into_another_file_completely_and_a_second_run_writes_nothing() {
    let dir = TempDir::new("store-copy-sqlite");
    source(&dir.path().join("from.db").to_string_lossy());
    let (code, out, err) = copy(
        dir.path(),
        &["--from", "sqlite://from.db", "--to", "sqlite://to.db"],
    );
    assert_eq!(code, Some(0), "{out}{err}");
    assert!(
        out.contains("messages: 41 in source, 41 in target"),
        "{out}"
    );
    assert!(out.contains("sessions: 1 in source, 1 in target"), "{out}");
    assert!(
        out.contains("audit rows: 3 in source, 3 in target"),
        "{out}"
    );
    // The target holds them, counts of refusal bursts included.
    let target = SqliteBackend::open(
        &dir.path().join("to.db").to_string_lossy(),
        SqliteOptions::default(),
    )
    .unwrap();
    let census = block_on(target.census()).unwrap();
    assert_eq!((census.messages, census.sessions, census.audit), (41, 1, 3));
    let rows = block_on(target.audit_after(0, 10)).unwrap();
    assert_eq!(
        rows.iter().map(|e| e.row.count).collect::<Vec<_>>(),
        [1, 2, 3]
    );
    block_on(target.close()).unwrap();
    drop(target);
    let (code, again, err) = copy(
        dir.path(),
        &["--from", "sqlite://from.db", "--to", "sqlite://to.db"],
    );
    assert_eq!(code, Some(0), "{again}{err}");
    assert!(again.contains("complete: 0 written"), "{again}");
}

#[test]
fn a_sqlite_store_copies_into_memory() {
    let dir = TempDir::new("store-copy-memory");
    let from = dir.path().join("from.db");
    source(&from.to_string_lossy());
    let url = format!("sqlite://{}", from.display());
    let (code, out, err) = copy(dir.path(), &["--from", &url, "--to", "memory:"]);
    assert_eq!(code, Some(0), "{out}{err}");
    assert!(
        out.contains("messages: 41 in source, 41 in target"),
        "{out}"
    );
}

#[test]
fn garbage_urls_and_one_store_on_both_sides_exit_2() {
    let dir = TempDir::new("store-copy-garbage");
    for args in [
        ["--from", "mysql://db/x", "--to", "memory:"],
        ["--from", "memory:", "--to", "sqlite:"],
        ["--from", "sqlite://a.db", "--to", "sqlite://a.db"],
    ] {
        let (code, out, err) = copy(dir.path(), &args);
        assert_eq!(code, Some(2), "{args:?}: {out}{err}");
        assert!(err.starts_with("error:"), "{args:?}: {err}");
    }
    let (_, _, err) = copy(dir.path(), &["--from", "mysql://db/x", "--to", "memory:"]);
    for scheme in ["sqlite://", "memory:", "postgres://"] {
        assert!(err.contains(scheme), "{scheme} not named: {err}");
    }
}

#[test]
fn a_source_file_that_is_not_there_is_an_error_and_nothing_is_created() {
    let dir = TempDir::new("store-copy-missing");
    let (code, out, err) = copy(
        dir.path(),
        &["--from", "sqlite://typo.db", "--to", "sqlite://copy.db"],
    );
    assert_eq!(code, Some(2), "{out}{err}");
    assert!(
        err.contains("no store at") && err.contains("typo.db"),
        "{err}"
    );
    assert!(
        !dir.path().join("typo.db").exists(),
        "the missing source was created"
    );
    assert!(
        !dir.path().join("copy.db").exists(),
        "a target was made for nothing"
    );
}

#[test]
fn a_sqlite_store_copies_into_postgres() {
    use switchboard_store_postgres::testing::PgCluster;
    let dir = TempDir::new("store-copy-postgres");
    source(&dir.path().join("from.db").to_string_lossy());
    let cluster = PgCluster::shared();
    let url = cluster.url(&cluster.database().expect("a database"));
    let (code, out, err) = copy(dir.path(), &["--from", "sqlite://from.db", "--to", &url]);
    assert_eq!(code, Some(0), "{out}{err}");
    assert!(
        out.contains("messages: 41 in source, 41 in target"),
        "{out}"
    );
    assert!(
        out.contains("audit rows: 3 in source, 3 in target"),
        "{out}"
    );
    let target = switchboard_store_postgres::PgBackend::open(&url, Default::default()).unwrap();
    let rows = block_on(target.audit_after(0, 10)).unwrap();
    assert_eq!(
        rows.iter().map(|e| e.row.count).collect::<Vec<_>>(),
        [1, 2, 3],
        "the refusal counts arrive (PostgreSQL schema 2)"
    );
    block_on(target.close()).unwrap();
}
