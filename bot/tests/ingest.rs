//! Gateway events into the store, without a socket: what each event does, and garbage.

use std::sync::atomic::AtomicU64;
use std::sync::Arc;

use bot::gateway::Ingest;
use bot::surface::Connection;
use entity::{AliasKind, Aliases, Snowflake};
use serde_json::{json, Value};
use serenity::model::event::{Event, GatewayEvent};
use switchboard_store::Store;

const BOT: u64 = 1000000000000000001;
const STANLEY: u64 = 1000000000000000101;
const OPS: u64 = 1000000000000000401;
const ROOM: u64 = 1000000000000000402;

/// The demo guild and DMs, as the playground allows them.
fn allowlist() -> Arc<switchboard_engine::allowlist::Allowlist> {
    let config = switchboard_config::Config::parse(
        "[discord]\nallowed_guild_ids = [\"1000000000000000200\"]\nallow_dms = true\n",
        "test.toml",
    )
    .expect("config");
    Arc::new(switchboard_engine::allowlist::Allowlist::new(
        &config.discord,
    ))
}

fn ingest() -> (Ingest, Store) {
    let store = sqlite_store(":memory:");
    let aliases = Aliases::new()
        .with(AliasKind::Session, "release-room", ROOM)
        .expect("alias");
    let ingest = Ingest::new(
        store.clone(),
        aliases,
        allowlist(),
        Arc::new(Connection::default()),
        Arc::new(AtomicU64::new(BOT)),
    );
    (ingest, store)
}

/// Parses a dispatch the way serenity does; garbage comes back as `Event::Unknown` or an error.
fn dispatch(kind: &str, d: Value) -> Option<Event> {
    let frame = json!({"op": 0, "s": 1, "t": kind, "d": d}).to_string();
    match serde_json::from_str::<GatewayEvent>(&frame) {
        Ok(GatewayEvent::Dispatch(_, event)) => Some(event),
        _ => None,
    }
}

fn message(id: u64, channel: u64, content: &str) -> Value {
    json!({
        "id": id.to_string(), "channel_id": channel.to_string(), "guild_id": "1000000000000000200",
        "author": {"id": STANLEY.to_string(), "username": "stanley", "global_name": "Stanley", "discriminator": "0", "avatar": null, "bot": false},
        "content": content, "timestamp": "2026-11-22T12:00:00.000000+00:00", "edited_timestamp": null,
        "tts": false, "mention_everyone": false, "mentions": [], "mention_roles": [], "attachments": [],
        "embeds": [], "pinned": false, "type": 0
    })
}

#[test]
fn message_create_stores_raw_and_canonical_text() {
    let (ingest, store) = ingest();
    let event = dispatch(
        "MESSAGE_CREATE",
        message(
            900,
            OPS,
            "hey <@1000000000000000101>, see <#1000000000000000402>",
        ),
    )
    .expect("parses");
    ingest.apply(&event);
    let stored = store
        .message(Snowflake(OPS), Snowflake(900))
        .expect("stored");
    assert_eq!(
        stored.content,
        "hey <@1000000000000000101>, see <#1000000000000000402>"
    );
    assert_eq!(stored.text, "hey @stanley, see #release-room");
    assert_eq!(
        store.user_display_name(Snowflake(STANLEY)).as_deref(),
        Some("Stanley")
    );
}

#[test]
fn update_delete_and_reactions_follow_the_gateway() {
    let (ingest, store) = ingest();
    ingest.apply(&dispatch("MESSAGE_CREATE", message(900, OPS, "draft")).unwrap());
    ingest.apply(&dispatch("MESSAGE_UPDATE", json!({"id": "900", "channel_id": OPS.to_string(), "content": "final", "edited_timestamp": "2026-11-22T12:01:00.000000+00:00"})).unwrap());
    let edited = store.message(Snowflake(OPS), Snowflake(900)).unwrap();
    assert_eq!(edited.content, "final");
    assert!(edited.edited_timestamp.is_some());
    ingest.apply(&dispatch("MESSAGE_REACTION_ADD", json!({"user_id": BOT.to_string(), "channel_id": OPS.to_string(), "message_id": "900", "emoji": {"id": null, "name": "✅"}, "type": 0, "burst": false})).unwrap());
    let reacted = store.message(Snowflake(OPS), Snowflake(900)).unwrap();
    assert_eq!(reacted.reactions.len(), 1);
    assert!(reacted.reactions[0].me);
    ingest.apply(
        &dispatch(
            "MESSAGE_DELETE",
            json!({"id": "900", "channel_id": OPS.to_string()}),
        )
        .unwrap(),
    );
    assert!(store.message(Snowflake(OPS), Snowflake(900)).is_none());
}

#[test]
fn events_about_unknown_messages_change_nothing() {
    let (ingest, store) = ingest();
    for (kind, d) in [
        (
            "MESSAGE_UPDATE",
            json!({"id": "1", "channel_id": OPS.to_string(), "content": "x"}),
        ),
        (
            "MESSAGE_DELETE",
            json!({"id": "1", "channel_id": OPS.to_string()}),
        ),
        (
            "MESSAGE_DELETE_BULK",
            json!({"ids": ["1", "2"], "channel_id": OPS.to_string()}),
        ),
        (
            "MESSAGE_REACTION_REMOVE_ALL",
            json!({"channel_id": OPS.to_string(), "message_id": "1"}),
        ),
    ] {
        ingest.apply(&dispatch(kind, d).expect(kind));
    }
    assert_eq!(store.message_count(), 0);
}

#[test]
fn garbage_dispatches_never_panic_and_store_nothing() {
    let (ingest, store) = ingest();
    let garbage = [
        ("MESSAGE_CREATE", json!({"id": "not a snowflake"})),
        ("MESSAGE_CREATE", json!(null)),
        ("MESSAGE_CREATE", json!([1, 2, 3])),
        ("GUILD_CREATE", json!({"id": "1"})),
        ("THREAD_CREATE", json!("thread")),
        ("NOT_AN_EVENT", json!({"anything": true})),
        ("MESSAGE_UPDATE", json!({"id": 5})),
    ];
    for (kind, d) in garbage {
        if let Some(event) = dispatch(kind, d) {
            ingest.apply(&event);
        }
    }
    assert_eq!(store.message_count(), 0);
    assert!(store.sessions().is_empty());
}

#[test]
fn health_is_ready_only_after_every_guild_arrived() {
    use switchboard_engine::surface::ConnectionState;
    let store = sqlite_store(":memory:");
    let connection = Arc::new(Connection::default());
    connection.set(ConnectionState::Connecting);
    let ingest = Ingest::new(
        store,
        Aliases::new(),
        allowlist(),
        Arc::clone(&connection),
        Arc::new(AtomicU64::new(0)),
    );
    let ready = dispatch(
        "READY",
        json!({"v": 10, "user": {"id": BOT.to_string(), "username": "switchboard", "discriminator": "0", "avatar": null, "bot": true},
               "guilds": [{"id": "1000000000000000200", "unavailable": true}], "session_id": "s", "resume_gateway_url": "ws://x",
               "application": {"id": BOT.to_string(), "flags": 0}}),
    )
    .expect("READY parses");
    ingest.apply(&ready);
    assert_eq!(connection.get(), ConnectionState::Connecting);
}

const GUILD: u64 = 1000000000000000200;
const SECRET: u64 = 1000000000000000403;
const SECRET_THREAD: u64 = 1000000000000000413;
const OTHER_GUILD_CHANNEL: u64 = 1000000000000000701;

fn session(
    id: u64,
    guild: Option<u64>,
    parent: Option<u64>,
    kind: switchboard_records::SessionKind,
) -> switchboard_records::Session {
    switchboard_records::Session {
        id: Snowflake(id),
        guild_id: guild.map(Snowflake),
        parent_id: parent.map(Snowflake),
        kind,
        name: format!("channel-{id}"),
    }
}

fn message_in(id: u64, channel: u64, guild: Option<u64>, content: &str) -> Value {
    let mut m = message(id, channel, content);
    match guild {
        Some(g) => m["guild_id"] = json!(g.to_string()),
        None => {
            m.as_object_mut().unwrap().remove("guild_id");
        }
    }
    m
}

/// Every byte SQLite holds for the store: the file, its WAL and shared memory.
fn bytes_on_disk(dir: &std::path::Path) -> Vec<u8> {
    let mut all = Vec::new();
    for entry in std::fs::read_dir(dir).unwrap() {
        all.extend(std::fs::read(entry.unwrap().path()).unwrap_or_default());
    }
    all
}

fn contains(haystack: &[u8], needle: &str) -> bool {
    haystack
        .windows(needle.len())
        .any(|w| w == needle.as_bytes())
}

#[test]
fn messages_of_refused_channels_are_not_stored_in_memory_sqlite_or_the_wal() {
    use switchboard_records::SessionKind::{Channel, Thread};
    let dir = std::env::temp_dir().join(format!("sb-ingest-refused-{}", std::process::id()));
    let _ = std::fs::remove_dir_all(&dir);
    std::fs::create_dir_all(&dir).unwrap();
    let path = dir.join("store.db");
    let store = sqlite_store(path.to_str().unwrap());
    let config = switchboard_config::Config::parse(
        &format!("[discord]\nallowed_channel_ids = [\"{OPS}\"]\nallow_dms = false\n"),
        "test.toml",
    )
    .expect("config");
    let ingest = Ingest::new(
        store.clone(),
        Aliases::new(),
        Arc::new(switchboard_engine::allowlist::Allowlist::new(
            &config.discord,
        )),
        Arc::new(Connection::default()),
        Arc::new(AtomicU64::new(BOT)),
    );
    store.upsert_session(session(OPS, Some(GUILD), None, Channel));
    store.upsert_session(session(SECRET, Some(GUILD), None, Channel));
    store.upsert_session(session(SECRET_THREAD, Some(GUILD), Some(SECRET), Thread));
    let cases = [
        (901, SECRET, Some(GUILD), "marker-unlisted-channel"),
        (902, SECRET_THREAD, Some(GUILD), "marker-thread-of-unlisted"),
        (
            903,
            OTHER_GUILD_CHANNEL,
            Some(1000000000000000299),
            "marker-other-guild",
        ),
        (
            904,
            1000000000000000502,
            None,
            "marker-dm-while-dms-are-off",
        ),
        (905, OPS, Some(GUILD), "marker-allowed"),
    ];
    for (id, channel, guild, text) in cases {
        ingest.apply(&dispatch("MESSAGE_CREATE", message_in(id, channel, guild, text)).unwrap());
    }
    assert_eq!(
        store.message_count(),
        1,
        "only the allowed channel's message is kept"
    );
    assert!(store.message(Snowflake(OPS), Snowflake(905)).is_some());
    store.flush_blocking().expect("flush");
    let disk = bytes_on_disk(&dir);
    assert!(
        contains(&disk, "marker-allowed"),
        "the allowed message is durable"
    );
    for (_, _, _, text) in &cases[..4] {
        assert!(!contains(&disk, text), "{text} reached the disk");
    }
    // The DM's channel may be listed as a session (id and name), never its messages.
    store.close().expect("close");
    let _ = std::fs::remove_dir_all(&dir);
}

#[test]
fn a_narrowed_allowlist_forgets_what_was_stored_of_the_channels_it_now_refuses() {
    use switchboard_records::SessionKind::Channel;
    let dir = std::env::temp_dir().join(format!("sb-ingest-narrowed-{}", std::process::id()));
    let _ = std::fs::remove_dir_all(&dir);
    std::fs::create_dir_all(&dir).unwrap();
    let path = dir.join("store.db");
    let (ingest, store) = {
        let store = sqlite_store(path.to_str().unwrap());
        (
            Ingest::new(
                store.clone(),
                Aliases::new(),
                allowlist(),
                Arc::new(Connection::default()),
                Arc::new(AtomicU64::new(BOT)),
            ),
            store,
        )
    };
    store.upsert_session(session(OPS, Some(GUILD), None, Channel));
    store.upsert_session(session(SECRET, Some(GUILD), None, Channel));
    ingest.apply(
        &dispatch(
            "MESSAGE_CREATE",
            message_in(901, OPS, Some(GUILD), "marker-kept"),
        )
        .unwrap(),
    );
    ingest.apply(
        &dispatch(
            "MESSAGE_CREATE",
            message_in(902, SECRET, Some(GUILD), "marker-now-refused"),
        )
        .unwrap(),
    );
    assert_eq!(store.message_count(), 2);
    let narrowed = switchboard_config::Config::parse(
        &format!("[discord]\nallowed_channel_ids = [\"{OPS}\"]\n"),
        "test.toml",
    )
    .expect("config");
    let narrowed = switchboard_engine::allowlist::Allowlist::new(&narrowed.discord);
    bot::service::forget_refused_channels(&store, &narrowed);
    assert!(store.message(Snowflake(SECRET), Snowflake(902)).is_none());
    assert!(store.message(Snowflake(OPS), Snowflake(901)).is_some());
    store.close().expect("close");
    drop(ingest);
    let reopened = sqlite_store(path.to_str().unwrap());
    assert!(
        reopened
            .message(Snowflake(SECRET), Snowflake(902))
            .is_none(),
        "gone from SQLite too"
    );
    assert!(reopened.message(Snowflake(OPS), Snowflake(901)).is_some());
    reopened.close().expect("close");
    let _ = std::fs::remove_dir_all(&dir);
}

/// A store over SQLite at `path` (":memory:": SQLite's private in-memory database).
fn sqlite_store(path: &str) -> Store {
    let backend = switchboard_store_sqlite::SqliteBackend::open(path, Default::default())
        .expect("the store opens");
    Store::open(std::sync::Arc::new(backend), Default::default()).expect("the cache loads")
}

/// What the agent was handed, by message id.
#[derive(Default)]
struct Agent(std::sync::Mutex<Vec<Snowflake>>);

impl switchboard_engine::runs::Runs for Agent {
    fn arrived(&self, message: &switchboard_engine::runs::Arrival<'_>) {
        self.0.lock().unwrap().push(message.message_id);
    }
    fn enqueue(&self, _: switchboard_engine::runs::Trigger) {}
    fn list(&self, _: Option<Snowflake>) -> Vec<switchboard_engine::runs::RunView> {
        Vec::new()
    }
    fn abort(
        &self,
        _: switchboard_engine::runs::AbortTarget<'_>,
        _: Snowflake,
        _: bool,
    ) -> switchboard_engine::runs::AbortOutcome {
        switchboard_engine::runs::AbortOutcome::NothingRunning
    }
}

/// Resumed workflows, by id.
#[derive(Default)]
struct Resumed(std::sync::Mutex<Vec<String>>);

impl switchboard_engine::workflow::WorkflowHooks for Resumed {
    fn resume(&self, workflow: &switchboard_engine::workflow::Workflow) {
        self.0.lock().unwrap().push(workflow.workflow_id.clone());
    }
}

/// The gateway leaves who has a new message to the engine's `workflow::dispatch`: the message
/// that answers a waiting workflow resumes it and is not handed to the agent; the one before
/// (another session) and the one after (the task answered) are the agent's.
#[test]
fn a_message_a_workflow_takes_is_not_handed_to_the_agent() {
    use switchboard_engine::workflow::{NewTask, NewWorkflow, WorkflowEngine};
    let (ingest, store) = ingest();
    let resumed = Arc::new(Resumed::default());
    let workflows = WorkflowEngine::new(resumed.clone(), store.backend().clone(), None, Vec::new());
    let agent = Arc::new(Agent::default());
    let ingest = ingest
        .with_workflows(Arc::clone(&workflows))
        .with_runs(agent.clone());
    workflows
        .create(NewWorkflow {
            origin_session_id: Snowflake(OPS),
            origin_message_id: None,
            created_by: "operator".into(),
            timeout: std::time::Duration::from_secs(600),
            resume_prompt: None,
            tasks: vec![NewTask {
                session_id: Snowflake(ROOM),
                message_id: None,
                from_user_id: None,
                summary: "is the build signed?".into(),
                description: None,
            }],
        })
        .expect("the workflow waits");
    for (id, channel, text) in [
        (901, OPS, "unrelated"),
        (902, ROOM, "yes, signed"),
        (903, ROOM, "thanks"),
    ] {
        ingest.apply(&dispatch("MESSAGE_CREATE", message(id, channel, text)).expect("parses"));
    }
    assert_eq!(resumed.0.lock().unwrap().len(), 1, "the answer resumes it");
    assert_eq!(
        *agent.0.lock().unwrap(),
        vec![Snowflake(901), Snowflake(903)],
        "the agent has every message but the workflow's answer"
    );
    ingest.apply(&dispatch("MESSAGE_CREATE", message(902, ROOM, "yes, signed")).expect("parses"));
    assert_eq!(
        agent.0.lock().unwrap().len(),
        2,
        "a replayed answer is stored once and handed to no one"
    );
}
