//! Store files written by the store as it was before the store crates (`bot::store`: schema 6,
//! `tests/fixtures/v6.db`, and schema 7, `tests/fixtures/v7.db`, whose audit rows carry a
//! `count`; both made by `store-sqlite/fixture-gen`, which now lives only in history) open
//! under the SQLite backend, climb to the current schema, and keep every kind of data they held.

use std::sync::Arc;
use std::time::Duration;

use futures_executor::block_on;
use switchboard_records::approval::ApprovalState;
use switchboard_records::{
    AuditFilter, Mention, MessageQuery, SearchMatch, SearchQuery, SearchTerm, SessionKind,
    Snowflake, WorkflowState,
};
use switchboard_store::{Backend, CacheOptions, Claim, Store};
use switchboard_store_sqlite::{SqliteBackend, SqliteOptions, SCHEMA_VERSION};

mod support;
use support::TempDir;

const GUILD: Snowflake = Snowflake(1_000_000_000_000_000_200);
const OPS: Snowflake = Snowflake(1_000_000_000_000_000_401);
const RELEASE: Snowflake = Snowflake(1_000_000_000_000_000_402);
const CATEGORY: Snowflake = Snowflake(1_000_000_000_000_000_300);
const FORUM: Snowflake = Snowflake(1_000_000_000_000_000_403);
const THREAD: Snowflake = Snowflake(1_000_000_000_000_000_404);
const DM: Snowflake = Snowflake(1_000_000_000_000_000_405);
const MIRA: Snowflake = Snowflake(1_000_000_000_000_000_501);
const BOT: Snowflake = Snowflake(1_000_000_000_000_000_502);
const ROLE: Snowflake = Snowflake(1_000_000_000_000_000_601);
const FUTURE_MESSAGE: Snowflake = Snowflake(8_700_000_000_000_000_000);

fn m(n: u64) -> Snowflake {
    Snowflake(1_100_000_000_000_000_000 + n)
}

/// A copy of the fixture of schema `version` (opening upgrades it in place), opened as the
/// service would.
fn open_copy(dir: &TempDir, version: i64) -> (Arc<dyn Backend>, Store) {
    let path = dir.db();
    std::fs::copy(
        format!(
            "{}/tests/fixtures/v{version}.db",
            env!("CARGO_MANIFEST_DIR")
        ),
        &path,
    )
    .expect("copy the fixture");
    let wanted = version;
    let version: i64 = rusqlite::Connection::open(&path)
        .unwrap()
        .query_row("PRAGMA user_version", [], |row| row.get(0))
        .unwrap();
    assert_eq!(version, wanted, "the fixture is a schema-{wanted} file");
    let backend: Arc<dyn Backend> = Arc::new(
        SqliteBackend::open(
            &path,
            SqliteOptions {
                // The fixture's audit rows are dated 2080, its claim is a message of 2080:
                // nothing is old enough to prune.
                ..SqliteOptions::default()
            },
        )
        .expect("an older file opens"),
    );
    let store =
        Store::open(Arc::clone(&backend), CacheOptions::default()).expect("the cache loads it");
    (backend, store)
}

#[test]
fn a_store_file_of_schema_6_opens_with_every_kind_of_data() {
    every_kind_of_data_is_kept(6);
}

#[test]
fn a_store_file_of_schema_7_opens_with_every_kind_of_data() {
    every_kind_of_data_is_kept(7);
}

fn every_kind_of_data_is_kept(version: i64) {
    let dir = TempDir::new(&format!("fixture-v{version}"));
    let (backend, store) = open_copy(&dir, version);

    // Sessions of every kind, with their guilds and parents.
    let sessions = store.sessions();
    let kinds: Vec<(Snowflake, SessionKind, &str)> = sessions
        .iter()
        .map(|s| (s.id, s.kind, s.name.as_str()))
        .collect();
    assert_eq!(
        kinds,
        [
            (CATEGORY, SessionKind::Category, "work"),
            (OPS, SessionKind::Channel, "ops"),
            (RELEASE, SessionKind::Channel, "release-room"),
            (FORUM, SessionKind::Forum, "ideas"),
            (THREAD, SessionKind::Thread, "incident-42"),
            (DM, SessionKind::Dm, "mira"),
        ]
    );
    assert_eq!(store.session(OPS).unwrap().parent_id, Some(CATEGORY));
    assert_eq!(store.session(OPS).unwrap().guild_id, Some(GUILD));
    assert_eq!(store.session(DM).unwrap().guild_id, None);
    let thread = store.thread(THREAD).unwrap();
    assert_eq!(thread.parent_id(), Some(OPS));
    assert!(thread.state.archived && !thread.state.locked);
    assert_eq!(thread.state.auto_archive_minutes, 60);

    // Users and roles, found by name.
    assert_eq!(store.author_name(MIRA), "Mira K");
    assert_eq!(store.user_is_bot(BOT), Some(true));
    use entity::NameDirectory;
    assert_eq!(store.user_by_key("mira"), Some(MIRA));
    assert_eq!(store.role_by_key("on-call"), Some(ROLE));
    assert_eq!(store.channel_by_key("release-room"), Some(RELEASE));

    // Messages: attachments, reactions, a reply, an edit; the deleted one is gone.
    let first = store.message(OPS, m(1)).unwrap();
    assert_eq!(first.content, "deploy <@1000000000000000502> now");
    assert_eq!(first.text, "deploy @switchboard now");
    assert_eq!(first.attachments.len(), 2);
    assert_eq!(first.attachments[0].filename, "canary report.png");
    assert_eq!(first.attachments[0].size, 48_213);
    assert_eq!(
        first.attachments[0].content_type.as_deref(),
        Some("image/png")
    );
    assert_eq!(first.attachments[1].content_type, None);
    let reactions: Vec<(&str, u32, bool)> = first
        .reactions
        .iter()
        .map(|r| (r.emoji.as_str(), r.count, r.me))
        .collect();
    assert_eq!(reactions, [("✅", 2, true), ("blob:123", 1, false)]);
    let reply = store.message(OPS, m(2)).unwrap();
    assert_eq!(
        (reply.reply_to, reply.author_id, reply.author_is_bot),
        (Some(m(1)), BOT, true)
    );
    let edited = store.message(OPS, m(3)).unwrap();
    assert_eq!(edited.text, "final wording");
    assert_eq!(
        edited.edited_timestamp.as_deref(),
        Some("2026-11-22T12:05:00.000000+00:00")
    );
    assert_eq!(
        store.message(OPS, m(4)),
        None,
        "the deleted message stays deleted"
    );
    let ops: Vec<Snowflake> = store
        .messages(OPS, 10, None, None)
        .iter()
        .map(|m| m.id)
        .collect();
    assert_eq!(ops, [m(1), m(2), m(3)]);
    assert_eq!(
        store.message(THREAD, m(5)).unwrap().text,
        "thread talk #release-room"
    );
    assert_eq!(store.message(DM, m(6)).unwrap().text, "hello bot");
    assert_eq!(store.message_count(), 6);
    // The backend reads them too (not only the cache).
    let durable = block_on(backend.messages(OPS, MessageQuery::newest(10))).unwrap();
    assert_eq!(durable, store.messages(OPS, 10, None, None));

    // The search index of the old file answers: words, and mentions by id.
    let search = |terms: Vec<SearchTerm>| -> Vec<Snowflake> {
        let query = SearchQuery {
            terms,
            channels: vec![OPS, RELEASE, THREAD, DM],
            author: None,
            before: None,
            after: None,
            limit: 10,
        };
        block_on(backend.search(query, Duration::from_secs(5)))
            .unwrap()
            .into_iter()
            .map(|hit| hit.message.id)
            .collect()
    };
    assert_eq!(
        search(vec![SearchTerm {
            any_of: vec![SearchMatch::Words {
                text: "wording".into(),
                prefix: false
            }]
        }]),
        [m(3)]
    );
    assert_eq!(
        search(vec![SearchTerm {
            any_of: vec![SearchMatch::Mentions(Mention::User(BOT))]
        }]),
        [m(1)]
    );
    assert_eq!(
        search(vec![SearchTerm {
            any_of: vec![SearchMatch::Mentions(Mention::Role(ROLE))]
        }]),
        [FUTURE_MESSAGE]
    );
    assert!(search(vec![SearchTerm {
        any_of: vec![SearchMatch::Words {
            text: "secret".into(),
            prefix: false
        }]
    }])
    .is_empty());

    // The open gap stays; the closed one stayed closed.
    assert_eq!(store.gaps(), [(RELEASE, m(0))].into_iter().collect());

    // Workflows, waiting and answered, whole.
    let workflows = block_on(backend.workflows()).unwrap();
    let states: Vec<(&str, WorkflowState)> = workflows
        .iter()
        .map(|w| (w.workflow_id.as_str(), w.state))
        .collect();
    assert_eq!(
        states,
        [
            ("wf_00000000000000a1", WorkflowState::Waiting),
            ("wf_00000000000000a2", WorkflowState::Answered)
        ]
    );
    assert_eq!(workflows[1].tasks[0].answer.as_ref().unwrap().text, "go");
    assert_eq!(
        workflows[0].resume_prompt.as_deref(),
        Some("tell ops what release said")
    );

    // Audit rows, newest first, with every field.
    let page = block_on(backend.audit_page(AuditFilter {
        limit: 10,
        ..AuditFilter::default()
    }))
    .unwrap();
    let tools: Vec<&str> = page.rows.iter().map(|e| &*e.row.tool).collect();
    assert_eq!(
        tools,
        [
            "workflow.create",
            "surface.messages.list",
            "surface.messages.send"
        ]
    );
    let send = &page.rows[2].row;
    assert_eq!(
        (&*send.caller, send.run.as_deref(), send.requested_by),
        ("cap:1a2b3c4d", Some("run-7"), Some(MIRA))
    );
    assert_eq!(send.sessions, [OPS]);
    assert_eq!(send.input["text"], "call 0");
    assert_eq!(send.count, 1);
    let denied = &page.rows[0].row;
    assert_eq!(
        (
            &*denied.decision,
            denied.decided_by.as_deref(),
            denied.code.as_deref()
        ),
        (
            "deny",
            Some("permissions.rules[0]"),
            Some("permission_denied")
        )
    );
    // Schema 7 kept the refusal as a counted burst of three; schema 6 had no counts (1).
    assert_eq!(denied.count, if version >= 7 { 3 } else { 1 });

    // Scope overrides, an empty one included; the removed one stays removed.
    let scopes: Vec<(Snowflake, Vec<String>)> = block_on(backend.session_scopes())
        .unwrap()
        .into_iter()
        .map(|s| (s.session_id, s.scope))
        .collect();
    assert_eq!(
        scopes,
        [
            (
                OPS,
                vec![
                    "surface.messages.*".to_owned(),
                    "workflow.create".to_owned()
                ]
            ),
            (RELEASE, vec![])
        ]
    );

    // The pending approval: its card, where it is, the binding the card showed.
    let pending = block_on(backend.pending_approvals()).unwrap();
    assert_eq!(pending.len(), 1);
    let approval = &pending[0];
    assert_eq!(approval.card.id, "apr_00000000000000b1");
    assert_eq!(approval.channel_id, RELEASE);
    assert_eq!(approval.message_id, Some(m(8)));
    assert_eq!(approval.binding, "0123456789ab");
    assert_eq!(approval.card.run.as_deref(), Some("run-7"));
    assert!(matches!(approval.card.state, ApprovalState::Pending { .. }));

    // The answered trigger is still taken.
    assert!(block_on(backend.is_claimed(FUTURE_MESSAGE)).unwrap());
    let again = switchboard_records::TriggerClaim {
        channel_id: RELEASE,
        message_id: FUTURE_MESSAGE,
        claimed_ms: 1,
    };
    assert!(matches!(
        block_on(backend.claim_trigger(again)).unwrap(),
        Claim::Taken
    ));

    store.close().unwrap();
    let version: i64 = rusqlite::Connection::open(dir.db())
        .unwrap()
        .query_row("PRAGMA user_version", [], |row| row.get(0))
        .unwrap();
    assert_eq!(
        version, SCHEMA_VERSION,
        "the file climbed to the current schema"
    );
}

#[test]
fn an_upgraded_file_takes_new_writes_and_keeps_them() {
    let dir = TempDir::new("fixture-writes");
    let (backend, store) = open_copy(&dir, 7);
    store.insert_message(switchboard_records::Message {
        id: m(9),
        channel_id: OPS,
        author_id: MIRA,
        author_is_bot: false,
        content: "after the upgrade".into(),
        text: "after the upgrade".into(),
        timestamp: "2026-11-23T12:00:00.000000+00:00".into(),
        edited_timestamp: None,
        reply_to: None,
        attachments: Vec::new(),
        reactions: Vec::new(),
    });
    let decided = block_on(backend.decide_approval(
        "apr_00000000000000b1",
        switchboard_records::Settlement::Expire,
        5,
    ))
    .unwrap();
    assert!(matches!(decided, switchboard_store::Decided::Decided(_)));
    store.close().unwrap();
    drop(backend);
    let backend: Arc<dyn Backend> =
        Arc::new(SqliteBackend::open(&dir.db(), SqliteOptions::default()).unwrap());
    let store = Store::open(Arc::clone(&backend), CacheOptions::default()).unwrap();
    assert_eq!(store.message(OPS, m(9)).unwrap().text, "after the upgrade");
    assert!(block_on(backend.pending_approvals()).unwrap().is_empty());
    store.close().unwrap();
}
