//! The store's behaviour: hot reads, names, durability across reopen and SIGKILL, retention,
//! and the errors opening a bad file gives.

use std::process::{Command, Stdio};
use std::time::{Duration, Instant};

use bot::store::{
    SessionKind, Snowflake, Store, StoreError, StoreOptions, StoredAttachment, StoredMessage,
    StoredReaction, StoredSession, WorkflowRow, SCHEMA_VERSION,
};
use entity::{normalize_name, NameDirectory};

mod support;
use support::TempDir;

const CHANNEL: Snowflake = Snowflake(1_100_000_000_000_000_001);
const OTHER_CHANNEL: Snowflake = Snowflake(1_100_000_000_000_000_002);
const AUTHOR: Snowflake = Snowflake(1_200_000_000_000_000_001);

/// [`Store::take_answer`], its record waited for from a test: true when taken now (and
/// durable), false when taken before.
fn take_answer(store: &Store, channel: Snowflake, message: Snowflake) -> Result<bool, StoreError> {
    let Some(recording) = store.take_answer(channel, message)? else {
        return Ok(false);
    };
    tokio::runtime::Builder::new_current_thread()
        .build()
        .expect("a runtime")
        .block_on(recording)
        .map(|()| true)
}

fn options(messages_per_channel: usize) -> StoreOptions {
    StoreOptions {
        messages_per_channel,
        ..StoreOptions::default()
    }
}

fn memory_store() -> Store {
    Store::open(":memory:", StoreOptions::default()).unwrap()
}

fn id(n: u64) -> Snowflake {
    Snowflake(1_300_000_000_000_000_000 + n)
}

fn message(channel_id: Snowflake, n: u64) -> StoredMessage {
    StoredMessage {
        id: id(n),
        channel_id,
        author_id: AUTHOR,
        author_is_bot: false,
        content: format!("message {n} for <@{AUTHOR}>"),
        text: format!("message {n} for @tomas"),
        timestamp: format!("2026-11-22T12:00:{:02}.000000+00:00", n % 60),
        edited_timestamp: None,
        reply_to: None,
        attachments: Vec::new(),
        reactions: Vec::new(),
    }
}

fn ids(messages: &[StoredMessage]) -> Vec<Snowflake> {
    messages.iter().map(|m| m.id).collect()
}

fn ids_of(range: impl IntoIterator<Item = u64>) -> Vec<Snowflake> {
    range.into_iter().map(id).collect()
}

fn row_count(path: &str) -> i64 {
    let conn = rusqlite::Connection::open(path).unwrap();
    conn.query_row("SELECT COUNT(*) FROM messages", [], |row| row.get(0))
        .unwrap()
}

#[test]
fn lists_newest_first_cut_oldest_first_order() {
    let store = memory_store();
    // Out of order on purpose: the store orders by id.
    for n in [3, 1, 5, 2, 4, 6, 8, 7, 9, 10] {
        assert!(store.insert_message(message(CHANNEL, n)));
    }
    assert_eq!(
        ids(&store.messages(CHANNEL, 100, None, None)),
        ids_of(1..=10)
    );
    assert_eq!(ids(&store.messages(CHANNEL, 3, None, None)), ids_of(8..=10));
    assert_eq!(
        ids(&store.messages(CHANNEL, 3, Some(id(5)), None)),
        ids_of(2..=4)
    );
    assert_eq!(
        ids(&store.messages(CHANNEL, 3, None, Some(id(5)))),
        ids_of(8..=10)
    );
    assert_eq!(
        ids(&store.messages(CHANNEL, 10, None, Some(id(7)))),
        ids_of(8..=10)
    );
    assert_eq!(
        ids(&store.messages(CHANNEL, 10, Some(id(6)), Some(id(3)))),
        ids_of(4..=5)
    );
    assert!(store
        .messages(CHANNEL, 10, Some(id(3)), Some(id(3)))
        .is_empty());
    assert!(store.messages(CHANNEL, 0, None, None).is_empty());
    assert!(store.messages(OTHER_CHANNEL, 10, None, None).is_empty());
    assert_eq!(store.message(CHANNEL, id(4)), Some(message(CHANNEL, 4)));
    assert_eq!(store.message(OTHER_CHANNEL, id(4)), None);
    assert_eq!(store.message_count(), 10);
}

#[test]
fn a_message_reads_back_exactly_as_stored() {
    let store = memory_store();
    let full = StoredMessage {
        author_is_bot: true,
        edited_timestamp: Some("2026-11-22T12:05:00.123456+00:00".into()),
        reply_to: Some(id(1)),
        timestamp: "2026-11-22T12:00:00+00:00".into(),
        attachments: vec![StoredAttachment {
            filename: "log.txt".into(),
            url: "https://cdn.example/log.txt".into(),
            size: 1234,
            content_type: Some("text/plain".into()),
        }],
        reactions: vec![StoredReaction {
            emoji: "👍".into(),
            count: 2,
            me: true,
        }],
        ..message(CHANNEL, 2)
    };
    let plain = StoredMessage {
        text: "same".into(),
        content: "same".into(),
        ..message(CHANNEL, 3)
    };
    assert!(store.insert_message(full.clone()));
    assert!(store.insert_message(plain.clone()));
    assert_eq!(store.message(CHANNEL, full.id), Some(full));
    assert_eq!(store.message(CHANNEL, plain.id), Some(plain));
}

#[test]
fn inserting_the_same_message_twice_stores_it_once() {
    let store = memory_store();
    let rest_answer = message(CHANNEL, 1);
    let gateway_echo = StoredMessage {
        text: "echo".into(),
        ..rest_answer.clone()
    };
    assert!(store.insert_message(rest_answer.clone()));
    assert!(!store.insert_message(gateway_echo));
    assert_eq!(store.messages(CHANNEL, 10, None, None), vec![rest_answer]);
    assert_eq!(store.message_count(), 1);
}

#[test]
fn a_late_echo_of_a_deleted_message_does_not_bring_it_back() {
    let store = memory_store();
    assert!(store.insert_message(message(CHANNEL, 1)));
    assert!(store.delete_message(CHANNEL, id(1)));
    assert!(!store.insert_message(message(CHANNEL, 1)));
    assert_eq!(store.message(CHANNEL, id(1)), None);
}

#[test]
fn edit_updates_text_and_edited_timestamp() {
    let store = memory_store();
    store.insert_message(message(CHANNEL, 1));
    let edited = Some("2026-11-22T12:10:00.000000+00:00".to_owned());
    assert!(store.update_message(
        CHANNEL,
        id(1),
        "fixed <#1>".into(),
        "fixed #ops".into(),
        edited.clone()
    ));
    let read = store.message(CHANNEL, id(1)).unwrap();
    assert_eq!(
        (read.content.as_str(), read.text.as_str()),
        ("fixed <#1>", "fixed #ops")
    );
    assert_eq!(read.edited_timestamp, edited);
    assert_eq!(read.timestamp, message(CHANNEL, 1).timestamp);
    assert!(!store.update_message(CHANNEL, id(2), "x".into(), "x".into(), None));
    assert!(!store.update_message(OTHER_CHANNEL, id(1), "x".into(), "x".into(), None));
}

#[test]
fn delete_hides_from_list_and_read() {
    let store = memory_store();
    for n in 1..=3 {
        store.insert_message(message(CHANNEL, n));
    }
    assert!(store.delete_message(CHANNEL, id(2)));
    assert!(!store.delete_message(CHANNEL, id(2)));
    assert_eq!(store.message(CHANNEL, id(2)), None);
    assert_eq!(
        ids(&store.messages(CHANNEL, 10, None, None)),
        ids_of([1, 3])
    );
    assert!(!store.update_message(CHANNEL, id(2), "x".into(), "x".into(), None));
    assert_eq!(store.message_count(), 2);
}

#[test]
fn bulk_delete_counts_what_was_cached() {
    let store = memory_store();
    for n in 1..=5 {
        store.insert_message(message(CHANNEL, n));
    }
    assert_eq!(store.delete_messages(CHANNEL, &ids_of([1, 3, 5, 99])), 3);
    assert_eq!(
        ids(&store.messages(CHANNEL, 10, None, None)),
        ids_of([2, 4])
    );
    assert_eq!(store.delete_messages(OTHER_CHANNEL, &ids_of([2])), 0);
}

#[test]
fn reactions_add_remove_and_clear_with_me() {
    let store = memory_store();
    store.insert_message(message(CHANNEL, 1));
    let reactions = |store: &Store| store.message(CHANNEL, id(1)).unwrap().reactions;
    store.add_reaction(CHANNEL, id(1), "👍", false);
    store.add_reaction(CHANNEL, id(1), "👍", true);
    store.add_reaction(CHANNEL, id(1), "🎉", false);
    assert_eq!(
        reactions(&store),
        vec![
            StoredReaction {
                emoji: "👍".into(),
                count: 2,
                me: true
            },
            StoredReaction {
                emoji: "🎉".into(),
                count: 1,
                me: false
            },
        ]
    );
    store.remove_reaction(CHANNEL, id(1), "👍", true);
    assert_eq!(
        reactions(&store)[0],
        StoredReaction {
            emoji: "👍".into(),
            count: 1,
            me: false
        }
    );
    store.remove_reaction(CHANNEL, id(1), "🎉", false);
    assert_eq!(reactions(&store).len(), 1);
    store.remove_all_reactions(CHANNEL, id(1));
    assert!(reactions(&store).is_empty());
    // Reactions on an unknown message are ignored.
    store.add_reaction(CHANNEL, id(2), "👍", true);
    assert_eq!(store.message(CHANNEL, id(2)), None);
}

fn session(id: Snowflake, name: &str, kind: SessionKind) -> StoredSession {
    StoredSession {
        id,
        guild_id: Some(Snowflake(1_000_000_000_000_000_001)),
        parent_id: None,
        kind,
        name: name.into(),
    }
}

#[test]
fn sessions_are_listed_by_id_and_found_by_name() {
    let store = memory_store();
    store.upsert_session(session(OTHER_CHANNEL, "release room", SessionKind::Thread));
    store.upsert_session(session(CHANNEL, "ops", SessionKind::Channel));
    assert_eq!(ids_of_sessions(&store), vec![CHANNEL, OTHER_CHANNEL]);
    assert_eq!(store.channel_by_key("release-room"), Some(OTHER_CHANNEL));
    assert_eq!(
        store.channel_name(OTHER_CHANNEL).as_deref(),
        Some("release room")
    );

    store.upsert_session(session(OTHER_CHANNEL, "launch", SessionKind::Thread));
    assert_eq!(store.channel_by_key("release-room"), None);
    assert_eq!(store.channel_by_key("launch"), Some(OTHER_CHANNEL));
    assert_eq!(store.session(OTHER_CHANNEL).unwrap().name, "launch");

    store.remove_session(OTHER_CHANNEL);
    assert_eq!(store.session(OTHER_CHANNEL), None);
    assert_eq!(store.channel_by_key("launch"), None);
    assert_eq!(ids_of_sessions(&store), vec![CHANNEL]);
}

fn ids_of_sessions(store: &Store) -> Vec<Snowflake> {
    store.sessions().iter().map(|s| s.id).collect()
}

#[test]
fn users_and_roles_are_found_by_normalized_name() {
    let store = memory_store();
    store.upsert_user(AUTHOR, "tnovak", Some("Tomas Novak"), false);
    assert_eq!(normalize_name("Tomas Novak"), "tomas-novak");
    assert_eq!(store.user_by_key("tomas-novak"), Some(AUTHOR));
    assert_eq!(store.user_by_key("tnovak"), Some(AUTHOR));
    assert_eq!(
        store.user_display_name(AUTHOR).as_deref(),
        Some("Tomas Novak")
    );
    assert_eq!(store.user_is_bot(AUTHOR), Some(false));

    let mut offered = Vec::new();
    store.find_user_name(AUTHOR, &mut |name| {
        offered.push(name.to_owned());
        // The mapper may look names up again from inside `accept`.
        store.user_by_key(&normalize_name(name)) == Some(AUTHOR) && name == "Tomas Novak"
    });
    assert_eq!(offered, vec!["tnovak", "Tomas Novak"]);

    store.upsert_user(AUTHOR, "tnovak", None, false);
    assert_eq!(store.user_by_key("tomas-novak"), None);
    assert_eq!(store.user_display_name(AUTHOR).as_deref(), Some("tnovak"));
    assert_eq!(store.user_display_name(Snowflake(5)), None);

    let role = Snowflake(1_400_000_000_000_000_001);
    store.upsert_role(role, "On Call");
    assert_eq!(store.role_by_key("on-call"), Some(role));
    assert_eq!(store.role_name(role).as_deref(), Some("On Call"));
    store.upsert_role(role, "Release Crew");
    assert_eq!(store.role_by_key("on-call"), None);
    assert_eq!(store.role_by_key("release-crew"), Some(role));
    store.remove_role(role);
    assert_eq!(store.role_by_key("release-crew"), None);
    assert_eq!(store.role_name(role), None);
}

#[test]
fn everything_flushed_is_there_after_reopen() {
    let dir = TempDir::new("reopen");
    let path = dir.db();
    let role = Snowflake(1_400_000_000_000_000_001);
    {
        let store = Store::open(&path, StoreOptions::default()).unwrap();
        store.upsert_session(session(CHANNEL, "ops", SessionKind::Channel));
        store.upsert_session(session(OTHER_CHANNEL, "gone", SessionKind::Channel));
        store.remove_session(OTHER_CHANNEL);
        store.upsert_user(AUTHOR, "tnovak", Some("Tomas Novak"), false);
        store.upsert_role(role, "On Call");
        for n in 1..=50 {
            store.insert_message(message(CHANNEL, n));
        }
        store.update_message(
            CHANNEL,
            id(7),
            "edited".into(),
            "edited".into(),
            Some("later".into()),
        );
        store.add_reaction(CHANNEL, id(8), "👍", true);
        store.delete_message(CHANNEL, id(9));
        store.flush().unwrap();
        // Dropped without close: the last handle closes it.
    }
    let store = Store::open(&path, StoreOptions::default()).unwrap();
    assert_eq!(
        ids(&store.messages(CHANNEL, 100, None, None)),
        ids_of((1..=50).filter(|n| *n != 9))
    );
    let edited = store.message(CHANNEL, id(7)).unwrap();
    assert_eq!(
        (edited.text.as_str(), edited.edited_timestamp.as_deref()),
        ("edited", Some("later"))
    );
    assert_eq!(
        store.message(CHANNEL, id(8)).unwrap().reactions[0].emoji,
        "👍"
    );
    assert_eq!(store.message(CHANNEL, id(10)), Some(message(CHANNEL, 10)));
    assert_eq!(ids_of_sessions(&store), vec![CHANNEL]);
    assert_eq!(store.channel_by_key("ops"), Some(CHANNEL));
    assert_eq!(store.user_by_key("tomas-novak"), Some(AUTHOR));
    assert_eq!(store.role_by_key("on-call"), Some(role));
    store.close().unwrap();
    // The deleted row went at pruning.
    assert_eq!(row_count(&path), 49);
}

#[test]
fn retention_keeps_the_newest_per_channel_in_memory_and_on_disk() {
    let dir = TempDir::new("retention");
    let path = dir.db();
    {
        let store = Store::open(&path, options(5)).unwrap();
        for n in 1..=20 {
            store.insert_message(message(CHANNEL, n));
        }
        for n in 101..=103 {
            store.insert_message(message(OTHER_CHANNEL, n));
        }
        assert_eq!(
            ids(&store.messages(CHANNEL, 100, None, None)),
            ids_of(16..=20)
        );
        // Older than everything kept: retention would drop it at once.
        assert!(!store.insert_message(message(CHANNEL, 3)));
        store.close().unwrap();
    }
    assert_eq!(row_count(&path), 8);
    let store = Store::open(&path, options(5)).unwrap();
    assert_eq!(
        ids(&store.messages(CHANNEL, 100, None, None)),
        ids_of(16..=20)
    );
    assert_eq!(
        ids(&store.messages(OTHER_CHANNEL, 100, None, None)),
        ids_of(101..=103)
    );
    store.delete_messages(CHANNEL, &ids_of([16, 17]));
    store.close().unwrap();
    assert_eq!(row_count(&path), 6);
    // A smaller window at open prunes at once.
    let store = Store::open(&path, options(2)).unwrap();
    assert_eq!(
        ids(&store.messages(CHANNEL, 100, None, None)),
        ids_of(19..=20)
    );
    store.close().unwrap();
    assert_eq!(row_count(&path), 4);
}

#[test]
fn writes_after_close_stay_in_memory_and_flush_reports_closed() {
    let store = memory_store();
    store.close().unwrap();
    store.close().unwrap();
    assert!(store.insert_message(message(CHANNEL, 1)));
    assert!(matches!(store.flush(), Err(StoreError::Closed { .. })));
}

#[test]
fn a_file_that_is_not_sqlite_is_a_typed_error() {
    let dir = TempDir::new("garbage");
    let path = dir.db();
    std::fs::write(
        &path,
        "this is not a database, just some text that is long enough ".repeat(40),
    )
    .unwrap();
    let err = Store::open(&path, StoreOptions::default()).unwrap_err();
    assert!(matches!(err, StoreError::NotADatabase { .. }), "{err:?}");
    assert!(err.to_string().contains(&path), "{err}");
}

#[test]
fn a_damaged_sqlite_file_is_a_typed_error() {
    let dir = TempDir::new("damaged");
    let path = dir.db();
    let mut bytes = b"SQLite format 3\0".to_vec();
    bytes.extend(std::iter::repeat_n(0xAB_u8, 8192));
    std::fs::write(&path, bytes).unwrap();
    let err = Store::open(&path, StoreOptions::default()).unwrap_err();
    assert!(matches!(err, StoreError::NotADatabase { .. }), "{err:?}");
}

#[test]
fn a_path_in_a_missing_directory_is_a_typed_error() {
    let dir = TempDir::new("missing");
    let path = dir.0.join("no-such-dir").join("store.db");
    let err = Store::open(&path.to_string_lossy(), StoreOptions::default()).unwrap_err();
    assert!(matches!(err, StoreError::Open { .. }), "{err:?}");
}

#[test]
fn a_newer_schema_is_a_typed_error() {
    let dir = TempDir::new("newer");
    let path = dir.db();
    Store::open(&path, StoreOptions::default())
        .unwrap()
        .close()
        .unwrap();
    let conn = rusqlite::Connection::open(&path).unwrap();
    conn.pragma_update(None, "user_version", SCHEMA_VERSION + 1)
        .unwrap();
    drop(conn);
    let err = Store::open(&path, StoreOptions::default()).unwrap_err();
    match &err {
        StoreError::NewerSchema {
            found, supported, ..
        } => {
            assert_eq!((*found, *supported), (SCHEMA_VERSION + 1, SCHEMA_VERSION));
        }
        other => panic!("expected NewerSchema, got {other:?}"),
    }
    assert!(err.to_string().contains("newer"), "{err}");
}

#[test]
fn a_store_in_use_is_reported_as_locked() {
    let dir = TempDir::new("locked");
    let path = dir.db();
    let first = Store::open(&path, StoreOptions::default()).unwrap();
    let err = Store::open(&path, StoreOptions::default()).unwrap_err();
    assert!(matches!(err, StoreError::Locked { .. }), "{err:?}");
    assert!(err.to_string().contains("another switchboard"), "{err}");
    first.close().unwrap();
    Store::open(&path, StoreOptions::default())
        .unwrap()
        .close()
        .unwrap();
}

const CHILD_ENV: &str = "SWITCHBOARD_STORE_TEST_CHILD_DB";
const CHILD_MESSAGES: u64 = 500;

/// The child half of [`flushed_messages_survive_sigkill`]: does nothing in a normal run.
#[test]
fn sigkill_child() {
    let Ok(path) = std::env::var(CHILD_ENV) else {
        return;
    };
    let store = Store::open(&path, StoreOptions::default()).unwrap();
    for n in 1..=CHILD_MESSAGES {
        store.insert_message(message(CHANNEL, n));
    }
    store.flush().unwrap();
    // Taking an answer is durable on its own, without a flush after it.
    let answered = bot::store::first_id_at(toolserver::clock::now_ms());
    assert!(take_answer(&store, CHANNEL, answered).unwrap());
    println!("flushed {answered}");
    // Unflushed writes after the acknowledgement may or may not survive.
    for n in CHILD_MESSAGES + 1..=CHILD_MESSAGES + 100 {
        store.insert_message(message(CHANNEL, n));
    }
    std::thread::sleep(Duration::from_secs(60));
}

#[test]
fn flushed_messages_survive_sigkill() {
    use std::io::{BufRead, BufReader};

    let dir = TempDir::new("sigkill");
    let path = dir.db();
    let mut child = Command::new(std::env::current_exe().unwrap())
        .args([
            "--exact",
            "sigkill_child",
            "--nocapture",
            "--test-threads=1",
        ])
        .env(CHILD_ENV, &path)
        .stdout(Stdio::piped())
        .stderr(Stdio::inherit())
        .spawn()
        .unwrap();
    let stdout = child.stdout.take().unwrap();
    let (tx, rx) = std::sync::mpsc::channel();
    std::thread::spawn(move || {
        for line in BufReader::new(stdout).lines() {
            let Ok(line) = line else { break };
            if let Some(answered) = line
                .split_once("flushed ")
                .and_then(|(_, id)| id.trim().parse::<u64>().ok())
            {
                let _ = tx.send(Snowflake(answered));
            }
        }
    });
    let flushed = rx.recv_timeout(Duration::from_secs(30));
    child.kill().unwrap(); // SIGKILL
    child.wait().unwrap();
    let answered = flushed.expect("the child never said it had flushed");

    let started = Instant::now();
    let store = Store::open(&path, StoreOptions::default()).unwrap();
    let listed = store.messages(CHANNEL, 1_000, None, None);
    assert!(
        listed.len() as u64 >= CHILD_MESSAGES,
        "{} listed",
        listed.len()
    );
    assert_eq!(
        ids(&listed[..CHILD_MESSAGES as usize]),
        ids_of(1..=CHILD_MESSAGES)
    );
    assert_eq!(store.message(CHANNEL, id(250)), Some(message(CHANNEL, 250)));
    assert!(
        store.is_answered(answered),
        "a taken answer survives SIGKILL"
    );
    store.close().unwrap();
    assert!(started.elapsed() < Duration::from_secs(10));
}

#[test]
fn clones_share_one_store_across_threads() {
    let store = memory_store();
    let workers: Vec<_> = (0..4u64)
        .map(|t| {
            let store = store.clone();
            std::thread::spawn(move || {
                for n in 0..250 {
                    store.insert_message(message(CHANNEL, t * 1_000 + n));
                    store.add_reaction(CHANNEL, id(t * 1_000 + n), "👍", false);
                }
            })
        })
        .collect();
    for worker in workers {
        worker.join().unwrap();
    }
    store.flush().unwrap();
    assert_eq!(store.message_count(), 1_000);
}

fn workflow_row(id: &str, state: &str, finished_ms: Option<u64>) -> WorkflowRow {
    WorkflowRow {
        id: id.to_owned(),
        state: state.to_owned(),
        finished_ms,
        body: format!("{{\"workflowId\":\"{id}\"}}"),
    }
}

#[test]
fn workflows_are_kept_replaced_by_id_and_pruned_a_week_after_they_finish() {
    let dir = TempDir::new("workflows");
    let path = dir.db();
    let now_ms = std::time::SystemTime::now()
        .duration_since(std::time::UNIX_EPOCH)
        .unwrap()
        .as_millis() as u64;
    let store = Store::open(&path, StoreOptions::default()).unwrap();
    assert!(store.workflows_at_open().is_empty());
    store.save_workflow(workflow_row("wf_a", "waiting", None));
    store.save_workflow(workflow_row("wf_a", "answered", Some(now_ms)));
    store.save_workflow(workflow_row("wf_b", "waiting", None));
    store.save_workflow(workflow_row(
        "wf_old",
        "cancelled",
        Some(now_ms - 8 * 24 * 3600 * 1000),
    ));
    store.close().unwrap();

    let store = Store::open(&path, StoreOptions::default()).unwrap();
    let kept: Vec<(&str, &str)> = store
        .workflows_at_open()
        .iter()
        .map(|w| (w.id.as_str(), w.state.as_str()))
        .collect();
    assert_eq!(kept, [("wf_a", "answered"), ("wf_b", "waiting")]);
    store.close().unwrap();
}

/// Takes a store back to before version 4 (search index, thread state, refs).
const UNDO_V4: &str = "
DROP TRIGGER IF EXISTS messages_fts_insert;
DROP TRIGGER IF EXISTS messages_fts_delete;
DROP TRIGGER IF EXISTS messages_fts_update;
DROP TABLE messages_fts;
DROP TABLE threads;
ALTER TABLE messages DROP COLUMN refs;
";

#[test]
fn a_version_3_store_gains_the_search_index_and_readable_emoji() {
    let dir = TempDir::new("migrate-v3");
    let path = dir.db();
    let store = Store::open(&path, StoreOptions::default()).unwrap();
    let mut old = message(id(900), 1);
    old.content = "deploy done <@42>".into();
    old.text = "deploy done @someone".into();
    old.reactions = vec![StoredReaction {
        emoji: "%F0%9F%91%8D".into(),
        count: 2,
        me: false,
    }];
    store.insert_message(old.clone());
    store.close().unwrap();
    let conn = rusqlite::Connection::open(&path).unwrap();
    conn.execute_batch(UNDO_V4).unwrap();
    conn.pragma_update(None, "user_version", 3).unwrap();
    drop(conn);

    let store = Store::open(&path, StoreOptions::default()).unwrap();
    let read = store.message(id(900), old.id).expect("kept");
    assert_eq!(read.reactions[0].emoji, "👍");
    let search = |expression: &str| {
        let runtime = tokio::runtime::Builder::new_current_thread()
            .enable_all()
            .build()
            .unwrap();
        runtime
            .block_on(store.search(
                bot::store::StoreSearch {
                    expression: expression.into(),
                    channels: vec![id(900)],
                    author: None,
                    before: None,
                    after: None,
                    limit: 10,
                },
                Duration::from_secs(5),
            ))
            .unwrap()
    };
    // The rows stored before the upgrade are indexed, words and mention ids both.
    assert_eq!(search("text : \"deploy\"").len(), 1);
    assert_eq!(search("refs : \"u42\"").len(), 1);
    assert!(search("text : \"absent\"").is_empty());
    store.close().unwrap();
    let conn = rusqlite::Connection::open(&path).unwrap();
    let version: i64 = conn
        .query_row("PRAGMA user_version", [], |row| row.get(0))
        .unwrap();
    assert_eq!(version, SCHEMA_VERSION);
}

#[test]
fn a_version_1_store_gains_every_later_table() {
    let dir = TempDir::new("migrate-v1");
    let path = dir.db();
    Store::open(&path, StoreOptions::default())
        .unwrap()
        .close()
        .unwrap();
    let conn = rusqlite::Connection::open(&path).unwrap();
    // A real version-1 file has none of the tables later versions added.
    conn.execute_batch(UNDO_V4).unwrap();
    conn.execute_batch(
        "DROP TABLE workflows; DROP TABLE audit; DROP TABLE session_scopes; DROP TABLE approvals;
         DROP TABLE answered_triggers; DROP TABLE backfill_gaps;",
    )
    .unwrap();
    conn.pragma_update(None, "user_version", 1).unwrap();
    drop(conn);
    let store = Store::open(&path, StoreOptions::default()).unwrap();
    store.save_workflow(workflow_row("wf_new", "waiting", None));
    store.close().unwrap();
    let conn = rusqlite::Connection::open(&path).unwrap();
    let version: i64 = conn
        .query_row("PRAGMA user_version", [], |row| row.get(0))
        .unwrap();
    assert_eq!(version, SCHEMA_VERSION);
    let count: i64 = conn
        .query_row("SELECT COUNT(*) FROM workflows", [], |row| row.get(0))
        .unwrap();
    assert_eq!(count, 1);
    for table in [
        "audit",
        "session_scopes",
        "approvals",
        "answered_triggers",
        "backfill_gaps",
    ] {
        let found: i64 = conn
            .query_row(
                "SELECT COUNT(*) FROM sqlite_master WHERE type = 'table' AND name = ?1",
                [table],
                |row| row.get(0),
            )
            .unwrap();
        assert_eq!(found, 1, "{table} was not created by the migration");
    }
}

#[test]
fn a_version_3_store_gains_the_answered_and_backfill_tables() {
    let dir = TempDir::new("migrate-v3");
    let path = dir.db();
    Store::open(&path, StoreOptions::default())
        .unwrap()
        .close()
        .unwrap();
    let conn = rusqlite::Connection::open(&path).unwrap();
    // A real version-3 file has neither version 4's search index nor version 5's tables.
    conn.execute_batch(UNDO_V4).unwrap();
    conn.execute_batch("DROP TABLE answered_triggers; DROP TABLE backfill_gaps")
        .unwrap();
    conn.pragma_update(None, "user_version", 3).unwrap();
    drop(conn);
    let store = Store::open(&path, StoreOptions::default()).unwrap();
    let recent = bot::store::first_id_at(toolserver::clock::now_ms());
    assert!(take_answer(&store, CHANNEL, recent).unwrap());
    store.open_gap(CHANNEL, id(1));
    store.close().unwrap();
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

#[test]
fn a_message_is_taken_to_answer_once_even_across_reopen() {
    let dir = TempDir::new("answered");
    let path = dir.db();
    let now = toolserver::clock::now_ms();
    let fresh = bot::store::first_id_at(now - 60_000);
    let other = Snowflake(fresh.0 + 1);
    // Older than the record keeps: forgotten at the next open.
    let ancient = bot::store::first_id_at(now - bot::store::ANSWERS_KEPT_MS - 3_600_000);
    let store = Store::open(&path, StoreOptions::default()).unwrap();
    assert!(take_answer(&store, CHANNEL, fresh).unwrap());
    assert!(!take_answer(&store, CHANNEL, fresh).unwrap(), "taken twice");
    assert!(take_answer(&store, CHANNEL, ancient).unwrap());
    assert!(store.is_answered(fresh));
    assert!(!store.is_answered(other));
    store.close().unwrap();
    let store = Store::open(&path, StoreOptions::default()).unwrap();
    assert!(store.is_answered(fresh));
    assert!(!take_answer(&store, CHANNEL, fresh).unwrap());
    assert!(!store.is_answered(ancient), "the record keeps eight days");
    assert!(take_answer(&store, OTHER_CHANNEL, other).unwrap());
    store.close().unwrap();
}

#[test]
fn answering_on_a_closed_store_is_an_error_not_a_silent_yes() {
    let store = memory_store();
    store.close().unwrap();
    let fresh = bot::store::first_id_at(toolserver::clock::now_ms());
    assert!(matches!(
        take_answer(&store, CHANNEL, fresh),
        Err(StoreError::Closed { .. })
    ));
}

#[test]
fn backfill_gaps_keep_the_oldest_start_until_closed_and_survive_reopen() {
    let dir = TempDir::new("gaps");
    let path = dir.db();
    let store = Store::open(&path, StoreOptions::default()).unwrap();
    store.open_gap(CHANNEL, id(5));
    store.open_gap(CHANNEL, id(9));
    store.open_gap(OTHER_CHANNEL, id(7));
    assert_eq!(store.gaps().get(&CHANNEL), Some(&id(5)));
    store.close().unwrap();
    let store = Store::open(&path, StoreOptions::default()).unwrap();
    let gaps = store.gaps();
    assert_eq!(gaps.get(&CHANNEL), Some(&id(5)), "the older start stays");
    assert_eq!(gaps.get(&OTHER_CHANNEL), Some(&id(7)));
    store.close_gap(CHANNEL);
    store.close().unwrap();
    let store = Store::open(&path, StoreOptions::default()).unwrap();
    assert_eq!(
        store.gaps().into_keys().collect::<Vec<_>>(),
        [OTHER_CHANNEL]
    );
    store.close().unwrap();
}

#[test]
fn the_latest_edit_wins_whatever_order_the_copies_arrive_in() {
    let store = memory_store();
    store.insert_message(message(CHANNEL, 1));
    let at = |s: u32| Some(format!("2026-11-22T12:0{s}:00.000000+00:00"));
    assert!(store.update_message(CHANNEL, id(1), "second".into(), "second".into(), at(2)));
    // An older edit (a stale backfilled copy) arrives after a newer one: refused.
    assert!(!store.update_message(CHANNEL, id(1), "first".into(), "first".into(), at(1)));
    // So is a copy from before any edit.
    assert!(!store.update_message(CHANNEL, id(1), "orig".into(), "orig".into(), None));
    assert_eq!(store.message(CHANNEL, id(1)).unwrap().content, "second");
    // Another form of the same instant, and a later one, are accepted.
    assert!(store.update_message(
        CHANNEL,
        id(1),
        "again".into(),
        "again".into(),
        Some("2026-11-22T12:02:00Z".into())
    ));
    assert!(store.update_message(CHANNEL, id(1), "third".into(), "third".into(), at(3)));
    assert_eq!(store.message(CHANNEL, id(1)).unwrap().content, "third");
    // A timestamp that cannot be ordered: the later arrival wins.
    assert!(store.update_message(
        CHANNEL,
        id(1),
        "odd".into(),
        "odd".into(),
        Some("yesterday".into())
    ));
    assert!(store.update_message(CHANNEL, id(1), "fourth".into(), "fourth".into(), at(4)));
    assert_eq!(store.message(CHANNEL, id(1)).unwrap().content, "fourth");
}

#[test]
fn the_newest_message_not_by_the_bot_marks_where_the_gateway_was() {
    let store = memory_store();
    let bot = Snowflake(1_200_000_000_000_000_009);
    store.insert_message(message(CHANNEL, 1));
    store.insert_message(message(CHANNEL, 2));
    store.insert_message(StoredMessage {
        author_id: bot,
        author_is_bot: true,
        ..message(CHANNEL, 3)
    });
    assert_eq!(store.newest_message_id(CHANNEL, Some(bot)), Some(id(2)));
    assert_eq!(store.newest_message_id(CHANNEL, None), Some(id(3)));
    assert_eq!(store.newest_message_id(OTHER_CHANNEL, Some(bot)), None);
}

#[test]
fn a_store_at_a_later_version_missing_the_answered_tables_gains_them() {
    // Schema steps may land out of order (version 4 after 5): a store recorded at version 5
    // whose answered-trigger tables are missing still gains them.
    let dir = TempDir::new("migrate-gap");
    let path = dir.db();
    Store::open(&path, StoreOptions::default())
        .unwrap()
        .close()
        .unwrap();
    let conn = rusqlite::Connection::open(&path).unwrap();
    conn.execute_batch("DROP TABLE answered_triggers; DROP TABLE backfill_gaps")
        .unwrap();
    drop(conn);
    let store = Store::open(&path, StoreOptions::default()).unwrap();
    let recent = bot::store::first_id_at(toolserver::clock::now_ms());
    assert!(take_answer(&store, CHANNEL, recent).unwrap());
    store.close().unwrap();
    let store = Store::open(&path, StoreOptions::default()).unwrap();
    assert!(store.is_answered(recent));
    store.close().unwrap();
}
