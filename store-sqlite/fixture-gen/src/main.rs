//! Writes a store file with the store as it was before the store crates (`bot::store`, schema
//! version 6): every kind of data it keeps, so `tests/fixture.rs` can prove that such a file
//! opens under the SQLite backend with nothing lost.
//!
//! Run (from the repository root, on a tree that still has `bot::store`):
//! `cargo run -p switchboard-store-fixture-gen -- store-sqlite/tests/fixtures/v6.db`
//!
//! Times that the store prunes by (claims by their message's time, finished workflows) are set
//! far in the future, so the fixture's rows are never too old for the week the store keeps them.

use std::borrow::Cow;
use std::future::Future;

use bot::store::{
    SessionKind, Snowflake, Store, StoreOptions, StoredAttachment, StoredMessage, StoredSession,
    ThreadState, WorkflowRow,
};
use clap::Parser;
use toolserver::governance::{ApprovalRecord, AuditRow, Ledger};

/// Writes the fixture store.
#[derive(Parser)]
struct Args {
    /// The file to write (replaced if it exists).
    path: std::path::PathBuf,
}

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

/// A message id of the year 2080: never older than the claims' week and a day.
const FUTURE_MESSAGE: Snowflake = Snowflake(8_700_000_000_000_000_000);
/// Milliseconds since the Unix epoch in the year 2080.
const FUTURE_MS: u64 = 3_471_292_800_000;

fn message(channel_id: Snowflake, id: u64, content: &str, text: &str) -> StoredMessage {
    StoredMessage {
        id: Snowflake(id),
        channel_id,
        author_id: MIRA,
        author_is_bot: false,
        content: content.to_owned(),
        text: text.to_owned(),
        timestamp: "2026-11-22T12:00:00.000000+00:00".into(),
        edited_timestamp: None,
        reply_to: None,
        attachments: Vec::new(),
        reactions: Vec::new(),
    }
}

fn main() {
    let args = Args::parse();
    let path = args.path.to_string_lossy().into_owned();
    for suffix in ["", "-wal", "-shm"] {
        let _ = std::fs::remove_file(format!("{path}{suffix}"));
    }
    let store = match Store::open(&path, StoreOptions::default()) {
        Ok(store) => store,
        Err(err) => {
            eprintln!("cannot open {path}: {err}");
            std::process::exit(1);
        }
    };
    let session = |id, guild_id, parent_id, kind, name: &str| StoredSession {
        id,
        guild_id,
        parent_id,
        kind,
        name: name.to_owned(),
    };
    store.upsert_session(session(
        CATEGORY,
        Some(GUILD),
        None,
        SessionKind::Category,
        "work",
    ));
    store.upsert_session(session(
        OPS,
        Some(GUILD),
        Some(CATEGORY),
        SessionKind::Channel,
        "ops",
    ));
    store.upsert_session(session(
        RELEASE,
        Some(GUILD),
        Some(CATEGORY),
        SessionKind::Channel,
        "release-room",
    ));
    store.upsert_session(session(
        FORUM,
        Some(GUILD),
        None,
        SessionKind::Forum,
        "ideas",
    ));
    store.upsert_session(session(
        THREAD,
        Some(GUILD),
        Some(OPS),
        SessionKind::Thread,
        "incident-42",
    ));
    store.upsert_session(session(DM, None, None, SessionKind::Dm, "mira"));
    store.set_thread_state(
        THREAD,
        ThreadState {
            archived: true,
            locked: false,
            auto_archive_minutes: 60,
            owner_id: Some(MIRA),
        },
    );
    store.upsert_user(MIRA, "mira", Some("Mira K"), false);
    store.upsert_user(BOT, "switchboard", None, true);
    store.upsert_role(ROLE, "on-call");

    let mut first = message(
        OPS,
        1_100_000_000_000_000_001,
        "deploy <@1000000000000000502> now",
        "deploy @switchboard now",
    );
    first.attachments = vec![
        StoredAttachment {
            filename: "canary report.png".into(),
            url: "https://cdn.example/attachments/1/canary.png".into(),
            size: 48_213,
            content_type: Some("image/png".into()),
        },
        StoredAttachment {
            filename: "notes".into(),
            url: "https://cdn.example/attachments/2/notes".into(),
            size: 0,
            content_type: None,
        },
    ];
    store.insert_message(first);
    store.add_reaction(OPS, Snowflake(1_100_000_000_000_000_001), "✅", true);
    store.add_reaction(OPS, Snowflake(1_100_000_000_000_000_001), "✅", false);
    store.add_reaction(OPS, Snowflake(1_100_000_000_000_000_001), "blob:123", false);
    let mut reply = message(OPS, 1_100_000_000_000_000_002, "rolled back", "rolled back");
    reply.reply_to = Some(Snowflake(1_100_000_000_000_000_001));
    reply.author_id = BOT;
    reply.author_is_bot = true;
    store.insert_message(reply);
    store.insert_message(message(
        OPS,
        1_100_000_000_000_000_003,
        "first draft",
        "first draft",
    ));
    store.update_message(
        OPS,
        Snowflake(1_100_000_000_000_000_003),
        "final wording".into(),
        "final wording".into(),
        Some("2026-11-22T12:05:00.000000+00:00".into()),
    );
    store.insert_message(message(
        OPS,
        1_100_000_000_000_000_004,
        "oops, secret",
        "oops, secret",
    ));
    store.delete_message(OPS, Snowflake(1_100_000_000_000_000_004));
    store.insert_message(message(
        THREAD,
        1_100_000_000_000_000_005,
        "thread talk <#1000000000000000402>",
        "thread talk #release-room",
    ));
    store.insert_message(message(
        DM,
        1_100_000_000_000_000_006,
        "hello bot",
        "hello bot",
    ));
    store.insert_message(message(
        RELEASE,
        FUTURE_MESSAGE.0,
        "ship it <@&1000000000000000601>",
        "ship it @on-call",
    ));

    store.open_gap(RELEASE, Snowflake(1_100_000_000_000_000_000));
    store.open_gap(DM, Snowflake(1_100_000_000_000_000_006));
    store.close_gap(DM);

    let workflow = |id: &str, state: &str, finished: Option<u64>| {
        serde_json::json!({
            "workflowId": id, "state": state, "originSessionId": OPS.to_string(),
            "originMessageId": "1100000000000000001", "createdBy": "operator",
            "createdMs": 1_764_000_000_000u64, "deadlineMs": FUTURE_MS, "finishedMs": finished,
            "resumePrompt": "tell ops what release said",
            "tasks": [{"sessionId": RELEASE.to_string(), "messageId": null, "fromUserId": MIRA.to_string(),
                       "summary": "go or no-go?", "description": null,
                       "answer": if state == "answered" { serde_json::json!({"messageId": "1100000000000000007",
                           "authorId": MIRA.to_string(), "authorName": "Mira K", "text": "go",
                           "ts": "2026-11-22T12:10:00.000000+00:00"}) } else { serde_json::Value::Null }}]
        })
    };
    for (id, state, finished) in [
        ("wf_00000000000000a1", "waiting", None),
        ("wf_00000000000000a2", "answered", Some(FUTURE_MS)),
    ] {
        store.save_workflow(WorkflowRow {
            id: id.into(),
            state: state.into(),
            finished_ms: finished,
            body: workflow(id, state, finished).to_string(),
        });
    }

    let ledger: &dyn Ledger = &store;
    for (i, tool) in [
        "surface.messages.send",
        "surface.messages.list",
        "workflow.create",
    ]
    .into_iter()
    .enumerate()
    {
        ledger.record(AuditRow {
            time_ms: FUTURE_MS + i as u64,
            caller: Cow::Borrowed(if i == 0 { "cap:1a2b3c4d" } else { "operator" }),
            run: (i == 0).then(|| "run-7".to_owned()),
            requested_by: (i == 0).then_some(MIRA),
            tool: Cow::Borrowed(tool),
            sessions: vec![OPS],
            input: serde_json::json!({"sessionId": "#ops", "text": format!("call {i}")}),
            decision: Cow::Borrowed(if i == 2 { "deny" } else { "allow" }),
            decided_by: (i == 2).then_some(Cow::Borrowed("permissions.rules[0]")),
            outcome: Cow::Borrowed(if i == 2 { "permission" } else { "ok" }),
            code: (i == 2).then_some(Cow::Borrowed("permission_denied")),
            duration_ms: 3 + i as u64,
            // The refusal is a burst of them counted into one row.
            count: if i == 2 { 3 } else { 1 },
        });
    }
    ledger.save_session_scope(
        OPS,
        Some(vec!["surface.messages.*".into(), "workflow.create".into()]),
    );
    ledger.save_session_scope(RELEASE, Some(vec![]));
    ledger.save_session_scope(DM, Some(vec!["x".into()]));
    ledger.save_session_scope(DM, None);
    ledger.save_approval(ApprovalRecord {
        id: "apr_00000000000000b1".into(),
        channel_id: RELEASE,
        message_id: Some(Snowflake(1_100_000_000_000_000_008)),
        pending: true,
        card: serde_json::json!({
            "id": "apr_00000000000000b1", "tool": "surface.messages.send",
            "sessionId": RELEASE.to_string(), "sessionLabel": "#release-room",
            "preview": "ship it @on-call", "requestedBy": "run run-7 for @Mira K",
            "binding": "0123456789ab", "run": "run-7", "toolCallId": "call-9",
            "state": "pending", "expiresAtMs": FUTURE_MS
        }),
    });

    match store.take_answer(RELEASE, FUTURE_MESSAGE) {
        Ok(Some(recording)) => {
            let runtime = match std::thread::Builder::new().spawn(move || {
                // The recording resolves once the writer committed the record.
                let waker = std::task::Waker::noop();
                let mut cx = std::task::Context::from_waker(waker);
                let mut recording = Box::pin(recording);
                loop {
                    if let std::task::Poll::Ready(result) = recording.as_mut().poll(&mut cx) {
                        return result;
                    }
                    std::thread::sleep(std::time::Duration::from_millis(5));
                }
            }) {
                Ok(thread) => thread.join(),
                Err(err) => {
                    eprintln!("cannot wait for the answered-trigger record: {err}");
                    std::process::exit(1);
                }
            };
            if !matches!(runtime, Ok(Ok(()))) {
                eprintln!("the answered-trigger record was not written");
                std::process::exit(1);
            }
        }
        other => {
            eprintln!(
                "could not take the trigger: {:?}",
                other.map(|o| o.is_some())
            );
            std::process::exit(1);
        }
    }
    if let Err(err) = store.flush().and_then(|()| store.close()) {
        eprintln!("cannot write {path}: {err}");
        std::process::exit(1);
    }
    println!("wrote {path} (schema {})", bot::store::SCHEMA_VERSION);
}
