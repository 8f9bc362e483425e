//! Backfill after a fresh identify, against fake-discord's REST: what was missed is fetched and
//! stored through the live path, marked as missed for the agent, bounded, paced, and a channel
//! that could not be fetched keeps its gap for the next identify. Garbage listings end.

use std::sync::atomic::AtomicU64;
use std::sync::{Arc, Mutex};
use std::time::{Duration, Instant};

use bot::backfill::{BackfillOptions, BackfillReport};
use bot::gateway::Ingest;
use bot::rest::DiscordRest;
use bot::surface::Connection;
use entity::Aliases;
use entity::Snowflake;
use fake_discord::{demo, FakeDiscord, Fault, RestFault, UserMessage, World};
use serde_json::{json, Value};
use serenity::model::event::{Event, GatewayEvent};
use switchboard_engine::runs::{AbortOutcome, AbortTarget, Arrival, RunView, Runs, Trigger};
use switchboard_engine::surface::ConnectionState;
use switchboard_records::{Session as StoredSession, SessionKind};
use switchboard_store::Store;

/// What the agent was told: (message id, missed).
#[derive(Default)]
struct Recorder(Mutex<Vec<(Snowflake, bool)>>);

impl Runs for Recorder {
    fn arrived(&self, message: &Arrival<'_>) {
        self.0
            .lock()
            .unwrap()
            .push((message.message_id, message.missed));
    }
    fn enqueue(&self, _: Trigger) {}
    fn list(&self, _: Option<Snowflake>) -> Vec<RunView> {
        Vec::new()
    }
    fn abort(&self, _: AbortTarget<'_>, _: Snowflake, _: bool) -> AbortOutcome {
        AbortOutcome::NothingRunning
    }
}

fn allowlist(config: &str) -> Arc<switchboard_engine::allowlist::Allowlist> {
    let config = switchboard_config::Config::parse(config, "test.toml").expect("config");
    Arc::new(switchboard_engine::allowlist::Allowlist::new(
        &config.discord,
    ))
}

fn whole_guild() -> Arc<switchboard_engine::allowlist::Allowlist> {
    allowlist("[discord]\nallowed_guild_ids = [\"1000000000000000200\"]\n")
}

struct Rig {
    store: Store,
    ingest: Ingest,
    connection: Arc<Connection>,
    runs: Arc<Recorder>,
}

fn session(id: u64, parent: Option<u64>, kind: SessionKind, name: &str) -> StoredSession {
    StoredSession {
        id: Snowflake(id),
        guild_id: Some(Snowflake(demo::GUILD)),
        parent_id: parent.map(Snowflake),
        kind,
        name: name.into(),
    }
}

/// An ingest with backfill against `api`, knowing the demo guild's #ops, #release-room and
/// the thread incident-42, as GUILD_CREATE would have described them.
fn rig(
    api: &str,
    options: BackfillOptions,
    allow: Arc<switchboard_engine::allowlist::Allowlist>,
) -> Rig {
    let store = sqlite_store(":memory:");
    store.upsert_session(session(demo::OPS, None, SessionKind::Channel, "ops"));
    store.upsert_session(session(
        demo::RELEASE_ROOM,
        None,
        SessionKind::Channel,
        "release-room",
    ));
    store.upsert_session(session(
        demo::INCIDENT_THREAD,
        Some(demo::OPS),
        SessionKind::Thread,
        "incident-42",
    ));
    let connection = Arc::new(Connection::default());
    let runs = Arc::new(Recorder::default());
    let rest = DiscordRest::new(api, "backfill-test").expect("rest client");
    let ingest = Ingest::new(
        store.clone(),
        Aliases::new(),
        allow,
        Arc::clone(&connection),
        Arc::new(AtomicU64::new(demo::BOT)),
    )
    .with_runs(Arc::clone(&runs) as Arc<dyn Runs>)
    .with_backfill(rest, options);
    Rig {
        store,
        ingest,
        connection,
        runs,
    }
}

fn dispatch(kind: &str, d: Value) -> Event {
    let frame = json!({"op": 0, "s": 1, "t": kind, "d": d}).to_string();
    match serde_json::from_str::<GatewayEvent>(&frame) {
        Ok(GatewayEvent::Dispatch(_, event)) => event,
        other => panic!("{kind} does not parse: {other:?}"),
    }
}

/// READY without guilds: the cache is complete at once, so the backfill starts.
fn ready() -> Event {
    dispatch(
        "READY",
        json!({"v": 10, "user": {"id": demo::BOT.to_string(), "username": "switchboard", "discriminator": "0", "avatar": null, "bot": true},
               "guilds": [], "session_id": "s", "resume_gateway_url": "ws://127.0.0.1:1",
               "application": {"id": demo::BOT.to_string(), "flags": 0}}),
    )
}

fn post(fake: &FakeDiscord, channel: u64, content: &str) -> Value {
    fake.post_message(UserMessage {
        channel_id: channel.into(),
        author_id: demo::STANLEY.into(),
        content: content.into(),
        ..Default::default()
    })
    .expect("the fake takes the message")
}

fn id_of(message: &Value) -> Snowflake {
    Snowflake(message["id"].as_str().unwrap().parse().unwrap())
}

/// Applies a READY and waits until the pass it starts has caught up.
async fn identify_and_wait(rig: &Rig) -> BackfillReport {
    let before = rig.ingest.last_backfill();
    rig.ingest.apply(&ready());
    // Between READY and the end of the pass /health says backfilling; a pass against a server
    // answering at once may already be over (`health_says_backfilling_until_caught_up` holds
    // the answer back to see the state for sure).
    let state = rig.connection.get();
    assert!(
        state == ConnectionState::Backfilling
            || (state == ConnectionState::Ready && rig.ingest.last_backfill() != before),
        "{state:?} right after READY"
    );
    let report = caught_up(rig).await;
    assert_ne!(Some(&report), before.as_ref());
    report
}

/// The fake answers the next `count` listings of #ops' messages with `status` (a 429 with
/// `retry_after` seconds).
fn fail_ops_listings(fake: &FakeDiscord, status: u16, count: u32, retry_after: Option<f64>) {
    fake.inject_fault(Fault {
        rest: Some(RestFault {
            status,
            count,
            retry_after,
            path_contains: Some(format!("/channels/{}/messages", demo::OPS)),
        }),
        gateway: None,
        handshakes: None,
    })
    .expect("fault");
}

fn stored_ids(store: &Store, channel: u64) -> Vec<Snowflake> {
    store
        .messages(Snowflake(channel), 10_000, None, None)
        .into_iter()
        .map(|m| m.id)
        .collect()
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn what_was_posted_while_away_is_stored_and_marked_missed() {
    let fake = FakeDiscord::start(World::demo()).await.expect("fake");
    let rig = rig(&fake.base_url(), BackfillOptions::default(), whole_guild());
    let seen = post(&fake, demo::OPS, "seen live");
    rig.ingest.apply(&dispatch("MESSAGE_CREATE", seen.clone()));
    let missed_ops: Vec<Snowflake> = (0..150)
        .map(|i| id_of(&post(&fake, demo::OPS, &format!("ops {i}"))))
        .collect();
    let missed_room: Vec<Snowflake> = (0..30)
        .map(|i| id_of(&post(&fake, demo::RELEASE_ROOM, &format!("room {i}"))))
        .collect();
    let report = identify_and_wait(&rig).await;

    let mut want_ops = vec![id_of(&seen)];
    want_ops.extend(&missed_ops);
    assert_eq!(stored_ids(&rig.store, demo::OPS), want_ops);
    assert_eq!(stored_ids(&rig.store, demo::RELEASE_ROOM), missed_room);
    assert_eq!(
        (report.fetched, report.stored, report.failed),
        (180, 180, 0)
    );
    assert_eq!(report.channels, 3);
    // #ops: the full page after the gap's start, then the walk back from the newest, whose
    // first page reaches it; the room and the thread: one page each.
    assert_eq!(report.requests, 4, "{report:?}");
    let listings: Vec<String> = fake
        .requests()
        .into_iter()
        .filter(|r| {
            r.method == "GET"
                && r.path
                    .contains(&format!("/channels/{}/messages", demo::RELEASE_ROOM))
        })
        .map(|r| r.query.unwrap_or_default())
        .collect();
    // The gap starts before the room's first message: the age bound's floor.
    assert_eq!(listings.len(), 1, "{listings:?}");
    assert!(
        listings[0].contains("after=") && listings[0].contains("limit=100"),
        "{listings:?}"
    );
    let arrivals = rig.runs.0.lock().unwrap().clone();
    assert_eq!(arrivals[0], (id_of(&seen), false));
    assert_eq!(arrivals.len(), 181);
    assert!(arrivals[1..].iter().all(|(_, missed)| *missed));
    // Backfilled text is canonical, as live text is.
    let stored = rig
        .store
        .message(Snowflake(demo::OPS), missed_ops[0])
        .unwrap();
    assert_eq!(stored.content, "ops 0");
    assert!(rig.store.gaps().is_empty(), "every gap caught up");

    // Nothing new: the next identify fetches one page per channel and stores nothing twice.
    let again = identify_and_wait(&rig).await;
    assert_eq!((again.fetched, again.stored, again.requests), (0, 0, 3));
    assert_eq!(rig.runs.0.lock().unwrap().len(), 181);
    fake.shutdown().await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_gap_beyond_the_bound_keeps_the_newest_messages() {
    let fake = FakeDiscord::start(World::demo()).await.expect("fake");
    let options = BackfillOptions {
        max_messages: 120,
        ..BackfillOptions::default()
    };
    let rig = rig(&fake.base_url(), options, whole_guild());
    let seen = post(&fake, demo::OPS, "seen live");
    rig.ingest.apply(&dispatch("MESSAGE_CREATE", seen.clone()));
    let missed: Vec<Snowflake> = (0..250)
        .map(|i| id_of(&post(&fake, demo::OPS, &format!("ops {i}"))))
        .collect();
    let report = identify_and_wait(&rig).await;
    let mut want = vec![id_of(&seen)];
    want.extend(&missed[130..]);
    assert_eq!(stored_ids(&rig.store, demo::OPS), want);
    assert_eq!((report.fetched, report.truncated), (120, 1));
    fake.shutdown().await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn messages_older_than_the_age_bound_are_not_fetched() {
    let fake = FakeDiscord::start(World::demo()).await.expect("fake");
    let options = BackfillOptions {
        max_age: Duration::from_secs(2),
        ..BackfillOptions::default()
    };
    let rig = rig(&fake.base_url(), options, whole_guild());
    for i in 0..10 {
        post(&fake, demo::OPS, &format!("old {i}"));
    }
    tokio::time::sleep(Duration::from_millis(2_500)).await;
    let fresh: Vec<Snowflake> = (0..5)
        .map(|i| id_of(&post(&fake, demo::OPS, &format!("fresh {i}"))))
        .collect();
    identify_and_wait(&rig).await;
    assert_eq!(stored_ids(&rig.store, demo::OPS), fresh);
    fake.shutdown().await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn an_edit_made_while_away_replaces_the_stored_copy() {
    let fake = FakeDiscord::start(World::demo()).await.expect("fake");
    let rig = rig(&fake.base_url(), BackfillOptions::default(), whole_guild());
    let first = post(&fake, demo::OPS, "first");
    rig.ingest.apply(&dispatch("MESSAGE_CREATE", first.clone()));
    let draft = post(&fake, demo::OPS, "draft");
    rig.ingest.apply(&dispatch("MESSAGE_CREATE", draft.clone()));
    // A gap an earlier identify left open: the draft lies inside it.
    rig.store.open_gap(Snowflake(demo::OPS), id_of(&first));
    fake.edit_message(Snowflake(demo::OPS), id_of(&draft), "final")
        .expect("edit");
    let report = identify_and_wait(&rig).await;
    assert_eq!((report.fetched, report.stored), (1, 0));
    let stored = rig
        .store
        .message(Snowflake(demo::OPS), id_of(&draft))
        .unwrap();
    assert_eq!(stored.content, "final");
    assert!(stored.edited_timestamp.is_some());
    // Known messages start no second run.
    assert_eq!(rig.runs.0.lock().unwrap().len(), 2);
    fake.shutdown().await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn only_channels_the_allowlist_permits_are_fetched() {
    let fake = FakeDiscord::start(World::demo()).await.expect("fake");
    let allow = allowlist("[discord]\nallowed_channel_ids = [\"1000000000000000401\"]\n");
    let rig = rig(&fake.base_url(), BackfillOptions::default(), allow);
    post(&fake, demo::RELEASE_ROOM, "not for the bot's store");
    let ops = id_of(&post(&fake, demo::OPS, "for the store"));
    identify_and_wait(&rig).await;
    assert_eq!(stored_ids(&rig.store, demo::OPS), [ops]);
    assert!(stored_ids(&rig.store, demo::RELEASE_ROOM).is_empty());
    let listed: Vec<String> = fake
        .requests()
        .into_iter()
        .filter(|r| r.method == "GET" && r.path.ends_with("/messages"))
        .map(|r| r.path)
        .collect();
    assert!(
        listed
            .iter()
            .all(|p| !p.contains(&demo::RELEASE_ROOM.to_string())),
        "{listed:?}"
    );
    fake.shutdown().await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_429_is_waited_out_and_a_failing_channel_keeps_its_gap() {
    let fake = FakeDiscord::start(World::demo()).await.expect("fake");
    let rig = rig(&fake.base_url(), BackfillOptions::default(), whole_guild());
    let seen = post(&fake, demo::OPS, "seen live");
    rig.ingest.apply(&dispatch("MESSAGE_CREATE", seen.clone()));
    let missed = id_of(&post(&fake, demo::OPS, "missed"));
    fail_ops_listings(&fake, 429, 1, Some(0.2));
    let report = identify_and_wait(&rig).await;
    assert_eq!(report.failed, 0);
    assert!(rig.store.message(Snowflake(demo::OPS), missed).is_some());

    // Every attempt fails: the channel's gap stays open, and /health still turns ready (the
    // failure is logged), so a later identify fetches it.
    let later = id_of(&post(&fake, demo::OPS, "missed while Discord fails"));
    // Every attempt of one listing.
    fail_ops_listings(&fake, 500, 3, None);
    let report = identify_and_wait(&rig).await;
    assert_eq!(report.failed, 1);
    assert!(rig.store.message(Snowflake(demo::OPS), later).is_none());
    assert_eq!(
        rig.store.gaps().get(&Snowflake(demo::OPS)),
        Some(&missed),
        "the gap starts where the store was complete"
    );
    // Discord recovers: the next identify fetches the gap.
    let report = identify_and_wait(&rig).await;
    assert_eq!((report.failed, report.stored), (0, 1));
    assert!(rig.store.message(Snowflake(demo::OPS), later).is_some());
    assert!(rig.store.gaps().is_empty());
    fake.shutdown().await;
}

/// Waits until the pass of a READY applied earlier has caught up.
async fn caught_up(rig: &Rig) -> BackfillReport {
    let deadline = Instant::now() + Duration::from_secs(20);
    while rig.connection.get() != ConnectionState::Ready {
        assert!(Instant::now() < deadline, "the backfill never caught up");
        tokio::time::sleep(Duration::from_millis(10)).await;
    }
    rig.ingest.last_backfill().expect("a report")
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn live_messages_wait_for_their_channels_missed_ones_and_all_go_on_in_order() {
    let fake = FakeDiscord::start(World::demo()).await.expect("fake");
    let rig = rig(&fake.base_url(), BackfillOptions::default(), whole_guild());
    let seen = post(&fake, demo::OPS, "seen live");
    rig.ingest.apply(&dispatch("MESSAGE_CREATE", seen.clone()));
    let missed: Vec<Snowflake> = (0..3)
        .map(|i| id_of(&post(&fake, demo::OPS, &format!("missed {i}"))))
        .collect();
    // #ops' listing waits out a 429 of 2 s; meanwhile live messages arrive there (a node
    // taking over a shard hears new messages before it fetched the ones it missed).
    fail_ops_listings(&fake, 429, 1, Some(2.0));
    rig.ingest.apply(&ready());
    let live = post(&fake, demo::OPS, "live while #ops is fetched");
    rig.ingest.apply(&dispatch("MESSAGE_CREATE", live.clone()));
    let edited = post(&fake, demo::OPS, "before the edit");
    rig.ingest
        .apply(&dispatch("MESSAGE_CREATE", edited.clone()));
    let update = fake
        .edit_message(demo::OPS.into(), id_of(&edited).0.into(), "after the edit")
        .expect("edit");
    rig.ingest.apply(&dispatch("MESSAGE_UPDATE", update));
    let doomed = post(&fake, demo::OPS, "deleted while held");
    rig.ingest
        .apply(&dispatch("MESSAGE_CREATE", doomed.clone()));
    fake.delete_message(demo::OPS.into(), id_of(&doomed).0.into())
        .expect("delete");
    rig.ingest.apply(&dispatch(
        "MESSAGE_DELETE",
        json!({"id": doomed["id"], "channel_id": demo::OPS.to_string(), "guild_id": demo::GUILD.to_string()}),
    ));
    // Held, not stored: #ops' missed messages are not in yet.
    assert_eq!(rig.store.message(Snowflake(demo::OPS), id_of(&live)), None);
    // A channel whose gap is in does not wait for the others.
    let room = post(&fake, demo::RELEASE_ROOM, "live in the room");
    rig.ingest.apply(&dispatch("MESSAGE_CREATE", room.clone()));
    let deadline = Instant::now() + Duration::from_secs(1);
    loop {
        if rig
            .store
            .message(Snowflake(demo::RELEASE_ROOM), id_of(&room))
            .is_some()
        {
            break;
        }
        assert!(Instant::now() < deadline, "the room's live message waited");
        tokio::time::sleep(Duration::from_millis(20)).await;
    }
    assert_eq!(rig.connection.get(), ConnectionState::Backfilling);

    let report = caught_up(&rig).await;
    assert_eq!((report.failed, report.stored), (0, 3), "{report:?}");
    let mut want: Vec<Snowflake> = vec![id_of(&seen)];
    want.extend(&missed);
    want.extend([id_of(&live), id_of(&edited)]);
    assert_eq!(stored_ids(&rig.store, demo::OPS), want);
    let stored = rig
        .store
        .message(Snowflake(demo::OPS), id_of(&edited))
        .expect("the edited message");
    assert_eq!(stored.content, "after the edit");
    // The agent heard #ops in Discord's order, each message once, the live ones as live.
    let ops: Vec<(Snowflake, bool)> = rig
        .runs
        .0
        .lock()
        .unwrap()
        .iter()
        .copied()
        .filter(|(id, _)| want.contains(id) || *id == id_of(&doomed))
        .collect();
    let mut heard = vec![(id_of(&seen), false)];
    heard.extend(missed.iter().map(|id| (*id, true)));
    heard.extend([(id_of(&live), false), (id_of(&edited), false)]);
    assert_eq!(ops, heard);
    // After the pass, live messages go straight on.
    let after = post(&fake, demo::OPS, "after the pass");
    rig.ingest.apply(&dispatch("MESSAGE_CREATE", after.clone()));
    assert!(rig
        .store
        .message(Snowflake(demo::OPS), id_of(&after))
        .is_some());
    fake.shutdown().await;
}

/// A server answering every listing with `body`, for garbage Discord never sends.
async fn canned(body: &'static str) -> String {
    canned_after(body, Duration::ZERO).await
}

/// [`canned`], each answer held back `delay`.
async fn canned_after(body: &'static str, delay: Duration) -> String {
    use tokio::io::{AsyncReadExt, AsyncWriteExt};
    let listener = tokio::net::TcpListener::bind("127.0.0.1:0").await.unwrap();
    let addr = listener.local_addr().unwrap();
    tokio::spawn(async move {
        loop {
            let Ok((mut socket, _)) = listener.accept().await else {
                return;
            };
            tokio::spawn(async move {
                let mut buffer = vec![0u8; 8192];
                let mut seen = Vec::new();
                // One request per connection; answer once its head is in.
                while !seen.windows(4).any(|w| w == b"\r\n\r\n") {
                    match socket.read(&mut buffer).await {
                        Ok(0) | Err(_) => return,
                        Ok(n) => seen.extend_from_slice(&buffer[..n]),
                    }
                    if seen.len() > 64 * 1024 {
                        return;
                    }
                }
                tokio::time::sleep(delay).await;
                let answer = format!(
                    "HTTP/1.1 200 OK\r\ncontent-type: application/json\r\ncontent-length: {}\r\nconnection: close\r\n\r\n{body}",
                    body.len()
                );
                let _ = socket.write_all(answer.as_bytes()).await;
            });
        }
    });
    format!("http://{addr}")
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn garbage_listings_are_skipped_and_never_loop() {
    // Not a list; a list of things that are not messages; the same full page forever (a
    // server ignoring `before`).
    let newest = switchboard_records::trigger::first_id_at(switchboard_engine::clock::now_ms()).0;
    let same_page: &'static str = Box::leak(
        format!(
            "[{}]",
            (0..100)
                .map(|i| format!("{{\"id\":\"{}\"}}", newest - i))
                .collect::<Vec<_>>()
                .join(",")
        )
        .into_boxed_str(),
    );
    for (body, failed) in [
        ("{\"message\": \"not a list\"}", 3),
        ("not json at all", 3),
        ("[{\"id\": \"123\"}, 5, {\"id\": \"x\"}, null, []]", 0),
        (same_page, 0),
    ] {
        let api = canned(body).await;
        let rig = rig(&api, BackfillOptions::default(), whole_guild());
        let report = tokio::time::timeout(Duration::from_secs(30), identify_and_wait(&rig))
            .await
            .unwrap_or_else(|_| panic!("the backfill of {body:.40} never ended"));
        assert_eq!(report.failed, failed, "{body:.40}: {report:?}");
        assert_eq!(rig.store.message_count(), 0, "{body:.40}");
        assert!(report.requests <= 6, "{body:.40}: {report:?}");
    }
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn health_says_backfilling_until_caught_up() {
    // Every listing takes 400 ms: three channels, one page each (fetched side by side).
    let api = canned_after("[]", Duration::from_millis(400)).await;
    let rig = rig(&api, BackfillOptions::default(), whole_guild());
    let started = Instant::now();
    rig.ingest.apply(&ready());
    assert_eq!(rig.connection.get(), ConnectionState::Backfilling);
    tokio::time::sleep(Duration::from_millis(200)).await;
    assert_eq!(
        rig.connection.get(),
        ConnectionState::Backfilling,
        "still fetching"
    );
    let deadline = Instant::now() + Duration::from_secs(20);
    while rig.connection.get() != ConnectionState::Ready {
        assert!(Instant::now() < deadline, "the backfill never caught up");
        tokio::time::sleep(Duration::from_millis(10)).await;
    }
    assert!(started.elapsed() >= Duration::from_millis(400));
    let report = rig.ingest.last_backfill().expect("a report");
    assert_eq!((report.channels, report.requests, report.failed), (3, 3, 0));
}

/// A store over SQLite at `path` (":memory:": SQLite's private in-memory database).
fn sqlite_store(path: &str) -> Store {
    let backend = switchboard_store_sqlite::SqliteBackend::open(path, Default::default())
        .expect("the store opens");
    Store::open(std::sync::Arc::new(backend), Default::default()).expect("the cache loads")
}
