//! Runs as rows of the store's run queue (issue 23 §3), with several bridges — nodes, each
//! with its own engine and node id — on one store and one chat surface: a channel's runs
//! happen one at a time in arrival order whichever node received each message; a node that
//! stops heartbeating has its running run interrupted after the lease, handled once per
//! `agent.interrupted` by a live node, and the runs queued behind it still run; a node that
//! restarts finds the runs queued before it stopped.

use std::path::{Path, PathBuf};
use std::sync::Arc;
use std::time::{Duration, Instant};

use agent::Bridge;
use switchboard_engine::runs::{Runs, Trigger};
use switchboard_store::{Backend, MemoryBackend, MemoryOptions};
use switchboard_testkit::platform::{demo, RecordingPlatform, SurfaceCall};
use switchboard_testkit::testing::{TestServer, DEMO_CONFIG};

/// A scratch directory with the agent script: it logs `start <message> <node>`, waits while
/// `$DIR/hold-<message>` exists (at most 60 s), logs `end <message>` and answers.
fn scratch(name: &str) -> PathBuf {
    use std::os::unix::fs::PermissionsExt;
    let dir = std::env::temp_dir().join(format!("cluster-runs-{name}-{}", std::process::id()));
    let _ = std::fs::remove_dir_all(&dir);
    std::fs::create_dir_all(&dir).unwrap();
    let agent = dir.join("agent.sh");
    std::fs::write(
        &agent,
        format!(
            r#"#!/bin/sh
DIR='{dir}'
cat > /dev/null
echo "start $SWITCHBOARD_MESSAGE_ID $1" >> "$DIR/log"
i=0
while [ -e "$DIR/hold-$SWITCHBOARD_MESSAGE_ID" ] && [ $i -lt 600 ]; do sleep 0.1; i=$((i+1)); done
sleep 0.2
echo "end $SWITCHBOARD_MESSAGE_ID" >> "$DIR/log"
echo "answer to $SWITCHBOARD_MESSAGE_ID"
"#,
            dir = dir.display()
        ),
    )
    .unwrap();
    std::fs::set_permissions(&agent, std::fs::Permissions::from_mode(0o755)).unwrap();
    dir
}

/// The config of node `node`: the command agent (told its node's name), one run at a time,
/// a 3 s lease, and `extra` in `[agent]`.
fn config_text(dir: &Path, node: &str, extra: &str) -> String {
    format!(
        "{DEMO_CONFIG}\n[cluster]\nlease_s = 3\n[agent]\nrunner = \"command\"\ncommand = [\"{agent}\", \"{node}\"]\ncwd = \"{dir}\"\ntimeout_s = 90\nstream = \"off\"\nbatch = \"off\"\nmax_concurrent_runs = 1\n{extra}\n",
        agent = dir.join("agent.sh").display(),
        dir = dir.display(),
    )
}

/// A node: its own engine (on the shared surface) and a bridge on the shared store.
struct Node {
    server: TestServer,
    bridge: Bridge,
    bridge_store: Arc<dyn Backend>,
}

async fn node(
    dir: &Path,
    name: &str,
    extra: &str,
    surface: &Arc<RecordingPlatform>,
    store: &Arc<dyn Backend>,
) -> Node {
    let shared = store.shared();
    let text = config_text(dir, name, extra);
    let config = switchboard_config::Config::parse(&text, "node.toml").expect("config");
    let server = TestServer::start_with(&text, Arc::clone(surface))
        .await
        .expect("server");
    let bridge = Bridge::with_answers(
        config.agent.clone().expect("[agent]"),
        Arc::clone(server.core()),
        server.url(),
        Arc::clone(store) as _,
    )
    .with_run_queue(Arc::clone(store) as _, name.to_owned(), shared);
    bridge.start_runs();
    Node {
        server,
        bridge,
        bridge_store: Arc::clone(store),
    }
}

fn trigger(surface: &RecordingPlatform, text: &str) -> Trigger {
    let message = surface.post(demo::OPS.into(), demo::STANLEY.into(), text);
    Trigger {
        channel_id: demo::OPS.into(),
        message_id: Some(message),
        author_id: demo::STANLEY.into(),
        author_name: "Stanley".into(),
        author_roles: Vec::new(),
        text: text.into(),
        workflow_id: None,
        agent: None,
    }
}

fn log(dir: &Path) -> Vec<String> {
    std::fs::read_to_string(dir.join("log"))
        .unwrap_or_default()
        .lines()
        .map(str::to_owned)
        .collect()
}

async fn wait_for<T>(what: &str, within: Duration, mut check: impl FnMut() -> Option<T>) -> T {
    let deadline = Instant::now() + within;
    loop {
        if let Some(found) = check() {
            return found;
        }
        assert!(Instant::now() < deadline, "timed out waiting for {what}");
        tokio::time::sleep(Duration::from_millis(50)).await;
    }
}

/// How many rows the store holds (every state).
async fn rows(store: &Arc<dyn Backend>) -> usize {
    store
        .runs(switchboard_records::RunFilter {
            limit: 1_000,
            ..Default::default()
        })
        .await
        .unwrap()
        .len()
}

/// The replies posted to `message`.
fn replies_to(surface: &RecordingPlatform, message: entity::Snowflake) -> Vec<String> {
    surface
        .calls()
        .into_iter()
        .filter_map(|call| match call {
            SurfaceCall::Send(sent) if sent.reply_to == Some(message) => Some(sent.content),
            _ => None,
        })
        .collect()
}

/// Where the nodes keep their runs: one memory store they all hold, one SQLite file (one node
/// at a time: a restart), or one PostgreSQL database each node opens for itself.
enum Place {
    Memory(Arc<dyn Backend>),
    Sqlite(PathBuf),
    Postgres(String),
}

impl Place {
    fn memory() -> Place {
        Place::Memory(Arc::new(MemoryBackend::new(MemoryOptions::default())))
    }

    fn sqlite(dir: &Path) -> Place {
        Place::Sqlite(dir.join("switchboard.db"))
    }

    /// A database of its own on the shared throwaway cluster (its harness blocks on its own
    /// runtime: called off the test's).
    fn postgres() -> Place {
        tokio::task::block_in_place(|| {
            let cluster = switchboard_store_postgres::testing::PgCluster::shared();
            Place::Postgres(cluster.url(&cluster.database().expect("a test database")))
        })
    }

    /// A node's handle on the place.
    fn open(&self) -> Arc<dyn Backend> {
        match self {
            Place::Memory(store) => Arc::clone(store),
            Place::Sqlite(path) => Arc::new(
                switchboard_store_sqlite::SqliteBackend::open(
                    path.to_str().unwrap(),
                    Default::default(),
                )
                .expect("the SQLite store opens"),
            ),
            Place::Postgres(url) => Arc::new(tokio::task::block_in_place(|| {
                switchboard_store_postgres::PgBackend::open(url, Default::default())
                    .expect("the PostgreSQL store opens")
            })),
        }
    }

    /// What a node's death leaves of its handle: a file or a pool let go (the memory store is
    /// everyone's).
    async fn let_go(&self, store: Arc<dyn Backend>) {
        if !matches!(self, Place::Memory(_)) {
            store.close().await.unwrap();
        }
    }
}

/// Asserts the log shows each of `messages` started and ended in that order, one at a time.
fn assert_one_at_a_time_in_order(log: &[String], messages: &[entity::Snowflake]) {
    let expected: Vec<String> = messages
        .iter()
        .flat_map(|m| [format!("start {m}"), format!("end {m}")])
        .collect();
    let seen: Vec<String> = log
        .iter()
        .map(|line| line.split(' ').take(2).collect::<Vec<_>>().join(" "))
        .collect();
    assert_eq!(seen, expected, "the runs, in the order they ran:\n{log:#?}");
}

async fn a_channels_triggers_handed_to_two_nodes_run_in_arrival_order(dir: &Path, place: Place) {
    let dir = dir.to_owned();
    let surface = Arc::new(RecordingPlatform::demo());
    let store = place.open();
    let a = node(&dir, "node-a", "", &surface, &store).await;
    let b = node(&dir, "node-b", "", &surface, &place.open()).await;
    let mut messages = Vec::new();
    for i in 0..6 {
        let t = trigger(&surface, &format!("@switchboard question {i}"));
        messages.push(t.message_id.unwrap());
        // Alternately, each queued before the next arrives: its arrival order.
        let receiver = if i % 2 == 0 { &a } else { &b };
        receiver.bridge.enqueue(t);
        let want = i + 1;
        let deadline = Instant::now() + Duration::from_secs(10);
        while rows(&store).await < want {
            assert!(Instant::now() < deadline, "the run was never queued");
            tokio::time::sleep(Duration::from_millis(10)).await;
        }
    }
    let log = wait_for("every run's end", Duration::from_secs(60), || {
        let log = log(&dir);
        (log.iter().filter(|l| l.starts_with("end ")).count() == messages.len()).then_some(log)
    })
    .await;
    assert_one_at_a_time_in_order(&log, &messages);
    // Runs are not tied to the node that received their message.
    let ran_elsewhere = log
        .iter()
        .filter(|l| l.starts_with("start "))
        .enumerate()
        .any(|(i, line)| {
            let receiver = if i % 2 == 0 { "node-a" } else { "node-b" };
            !line.ends_with(receiver)
        });
    assert!(
        ran_elsewhere,
        "every run ran where it was received:\n{log:#?}"
    );
    for message in &messages {
        let replies = wait_for("the reply", Duration::from_secs(10), || {
            let replies = replies_to(&surface, *message);
            (!replies.is_empty()).then_some(replies)
        })
        .await;
        assert_eq!(replies, [format!("answer to {message}")], "answered once");
    }
    // runs.list on either node reads the rows: every run, ended, on both. A run's end is
    // recorded once its process has exited, a moment after its reply was posted.
    for n in [&a, &b] {
        let deadline = Instant::now() + Duration::from_secs(10);
        loop {
            let listed = n.bridge.list_runs(Some(demo::OPS.into())).await;
            assert_eq!(listed.len(), messages.len(), "{listed:#?}");
            if listed
                .iter()
                .all(|run| run.state == switchboard_engine::runs::RunState::Finished)
            {
                break;
            }
            assert!(
                Instant::now() < deadline,
                "runs not all finished 10 s after their replies: {listed:#?}"
            );
            tokio::time::sleep(Duration::from_millis(20)).await;
        }
    }
    drop((a.server, b.server));
}

#[tokio::test(flavor = "multi_thread", worker_threads = 4)]
async fn a_channels_triggers_handed_to_two_nodes_run_one_at_a_time_in_arrival_order() {
    a_channels_triggers_handed_to_two_nodes_run_in_arrival_order(
        &scratch("order-memory"),
        Place::memory(),
    )
    .await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 4)]
async fn on_postgres_two_nodes_run_a_channels_triggers_one_at_a_time_in_arrival_order() {
    a_channels_triggers_handed_to_two_nodes_run_in_arrival_order(
        &scratch("order-postgres"),
        Place::postgres(),
    )
    .await;
}

/// Node A runs the first of three triggers and dies mid-run (its runtime shut down: no more
/// heartbeats); the others were queued behind it. The survivors interrupt its run once the
/// lease expired and apply `agent.interrupted` exactly once; the queued runs then run, in order.
async fn a_dead_nodes_run_is_interrupted_once_and_the_queue_goes_on(
    dir: &Path,
    place: Place,
    survivors: &[&str],
    interrupted: &str,
) {
    let dir = dir.to_owned();
    let surface = Arc::new(RecordingPlatform::demo());
    let store = place.open();
    let extra = format!("interrupted = \"{interrupted}\"");
    let first = trigger(&surface, "@switchboard first");
    let queued: Vec<Trigger> = (0..2)
        .map(|i| trigger(&surface, &format!("@switchboard then {i}")))
        .collect();
    let first_id = first.message_id.unwrap();
    std::fs::write(dir.join(format!("hold-{first_id}")), "").unwrap();
    let doomed = tokio::runtime::Builder::new_multi_thread()
        .worker_threads(1)
        .enable_all()
        .build()
        .unwrap();
    let a = {
        let (dir, surface, store, extra) =
            (dir.clone(), surface.clone(), store.clone(), extra.clone());
        let queued = queued.clone();
        doomed
            .spawn(async move {
                let a = node(&dir, "node-a", &extra, &surface, &store).await;
                a.bridge.enqueue(first);
                for t in queued {
                    a.bridge.enqueue(t);
                }
                a
            })
            .await
            .unwrap()
    };
    wait_for("node A's run to start", Duration::from_secs(20), || {
        log(&dir)
            .iter()
            .any(|l| l == &format!("start {first_id} node-a"))
            .then_some(())
    })
    .await;
    while rows(&store).await < 3 {
        tokio::time::sleep(Duration::from_millis(20)).await;
    }
    // Node A dies: its tasks (the run, its heartbeats, its loop) stop where they are.
    doomed.shutdown_background();
    drop(a.bridge);
    std::mem::forget(a.server);
    place.let_go(store).await;
    let mut live = Vec::new();
    for name in survivors {
        live.push(node(&dir, name, &extra, &surface, &place.open()).await);
    }
    let store = Arc::clone(&live[0].bridge_store);
    let order: Vec<entity::Snowflake> = if interrupted == "rerun" {
        std::fs::remove_file(dir.join(format!("hold-{first_id}"))).unwrap();
        std::iter::once(first_id)
            .chain(queued.iter().map(|t| t.message_id.unwrap()))
            .collect()
    } else {
        queued.iter().map(|t| t.message_id.unwrap()).collect()
    };
    let log = wait_for("the queued runs' ends", Duration::from_secs(60), || {
        let log = log(&dir);
        (log.iter().filter(|l| l.starts_with("end ")).count() == order.len()).then_some(log)
    })
    .await;
    // The dead node's start, then the survivors' runs one at a time, in order (with `rerun`
    // the interrupted run first, as the queue had it).
    assert_eq!(log[0], format!("start {first_id} node-a"), "{log:#?}");
    // With `rerun` the interrupted run took its own place back: it ran first, the queued ones
    // after.
    assert_one_at_a_time_in_order(&log[1..], &order);
    if interrupted == "rerun" {
        assert!(
            replies_to(&surface, first_id).contains(&format!("answer to {first_id}")),
            "the rerun answered the first question"
        );
    }
    tokio::time::sleep(Duration::from_secs(2)).await;
    let told: Vec<String> = replies_to(&surface, first_id)
        .into_iter()
        .filter(|text| text.contains("interrupted"))
        .collect();
    let warnings = surface
        .calls()
        .into_iter()
        .filter(|call| {
            matches!(call, SurfaceCall::AddReaction { message_id, emoji, .. }
                if *message_id == first_id && emoji == "⚠️")
        })
        .count();
    if interrupted == "notify" {
        assert_eq!(told.len(), 1, "told once: {told:#?}");
        assert_eq!(warnings, 1, "one ⚠️");
    } else {
        assert!(told.is_empty(), "a rerun is not told: {told:#?}");
        assert_eq!(warnings, 0);
    }
    for t in &queued {
        let id = t.message_id.unwrap();
        assert_eq!(replies_to(&surface, id), [format!("answer to {id}")]);
    }
    let states: Vec<switchboard_records::RunState> = store
        .runs(switchboard_records::RunFilter {
            limit: 100,
            ..Default::default()
        })
        .await
        .unwrap()
        .into_iter()
        .map(|r| r.state)
        .collect();
    // With `rerun` the interrupted row itself ran again (no new row): none stays interrupted.
    let cut = usize::from(interrupted == "notify");
    assert_eq!(
        states
            .iter()
            .filter(|s| **s == switchboard_records::RunState::Interrupted)
            .count(),
        cut,
        "{states:?}"
    );
    assert_eq!(states.len(), 3, "{states:?}");
}

#[tokio::test(flavor = "multi_thread", worker_threads = 4)]
async fn a_dead_nodes_run_is_told_interrupted_once_by_one_of_two_live_nodes() {
    let dir = scratch("dead-memory");
    a_dead_nodes_run_is_interrupted_once_and_the_queue_goes_on(
        &dir,
        Place::memory(),
        &["node-b", "node-c"],
        "notify",
    )
    .await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 4)]
async fn on_postgres_a_dead_nodes_run_is_told_interrupted_once_by_one_of_two_live_nodes() {
    let dir = scratch("dead-postgres");
    a_dead_nodes_run_is_interrupted_once_and_the_queue_goes_on(
        &dir,
        Place::postgres(),
        &["node-b", "node-c"],
        "notify",
    )
    .await;
}

/// One node on its SQLite file, killed with a run going and two queued: started again on the
/// same file, it tells the cut run's question and answers the queued ones.
#[tokio::test(flavor = "multi_thread", worker_threads = 4)]
async fn a_restarted_sqlite_node_finds_its_queued_runs_and_tells_the_cut_one() {
    let dir = scratch("restart-sqlite");
    a_dead_nodes_run_is_interrupted_once_and_the_queue_goes_on(
        &dir,
        Place::sqlite(&dir),
        &["node-a"],
        "notify",
    )
    .await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 4)]
async fn with_rerun_a_dead_nodes_run_runs_again_on_a_live_node() {
    let dir = scratch("rerun-memory");
    a_dead_nodes_run_is_interrupted_once_and_the_queue_goes_on(
        &dir,
        Place::memory(),
        &["node-b"],
        "rerun",
    )
    .await;
}

/// `/health`'s view of a node whose store trouble the test sets (the service's heartbeat
/// sets it when a beat cannot be recorded).
struct Health {
    store: Arc<dyn Backend>,
    trouble: std::sync::Mutex<Option<String>>,
}

impl Health {
    fn set(&self, trouble: Option<&str>) {
        *self.trouble.lock().unwrap() = trouble.map(str::to_owned);
    }
}

impl switchboard_engine::cluster::NodeView for Health {
    fn node_id(&self) -> &str {
        "node-a"
    }
    fn store_kind(&self) -> &'static str {
        self.store.kind()
    }
    fn shards(&self) -> Vec<protocol::ShardHealth> {
        Vec::new()
    }
    fn cluster_store(&self) -> Arc<dyn switchboard_store::ClusterStore> {
        Arc::clone(&self.store) as _
    }
    fn lease_ms(&self) -> u64 {
        3_000
    }
    fn store_trouble(&self) -> Option<String> {
        self.trouble.lock().unwrap().clone()
    }
}

/// PostgreSQL stops under a node: it says `degraded`, and triggers that arrive meanwhile wait;
/// with PostgreSQL back but the node still degraded, nothing starts; once the node's store is
/// healthy again every one of them is answered exactly once, in arrival order.
#[tokio::test(flavor = "multi_thread", worker_threads = 4)]
async fn on_postgres_a_degraded_node_starts_no_run_and_answers_what_came_meanwhile_once() {
    let dir = scratch("outage");
    // A cluster of its own: stopping the shared one would cut the other tests' stores.
    let cluster = tokio::task::block_in_place(|| {
        switchboard_store_postgres::testing::PgCluster::start().expect("PostgreSQL starts")
    });
    let url = tokio::task::block_in_place(|| cluster.url(&cluster.database().expect("database")));
    let place = Place::Postgres(url);
    let store = place.open();
    let surface = Arc::new(RecordingPlatform::demo());
    let a = node(&dir, "node-a", "", &surface, &store).await;
    let health = Arc::new(Health {
        store: Arc::clone(&store),
        trouble: std::sync::Mutex::new(None),
    });
    assert!(a.server.core().set_node(Arc::clone(&health) as _));
    let before = trigger(&surface, "@switchboard before");
    let before_id = before.message_id.unwrap();
    a.bridge.enqueue(before);
    wait_for("the first answer", Duration::from_secs(30), || {
        (!replies_to(&surface, before_id).is_empty()).then_some(())
    })
    .await;

    tokio::task::block_in_place(|| cluster.stop_immediate().expect("PostgreSQL stops"));
    health.set(Some("the store (postgres) is unreachable"));
    let mut during = Vec::new();
    for n in 0..3 {
        let t = trigger(&surface, &format!("@switchboard during {n}"));
        during.push(t.message_id.unwrap());
        a.bridge.enqueue(t);
    }
    tokio::time::sleep(Duration::from_secs(2)).await;
    tokio::task::block_in_place(|| cluster.start_again().expect("PostgreSQL starts again"));
    // The store answers again, but the node still says degraded: nothing starts.
    tokio::time::sleep(Duration::from_secs(3)).await;
    let started = |log: &[String]| log.iter().filter(|l| l.starts_with("start ")).count();
    assert_eq!(
        started(&log(&dir)),
        1,
        "a run started while degraded: {:#?}",
        log(&dir)
    );
    for message in &during {
        assert!(
            replies_to(&surface, *message).is_empty(),
            "answered while degraded"
        );
    }

    health.set(None);
    let ran = wait_for("the runs of the outage", Duration::from_secs(60), || {
        let log = log(&dir);
        (log.iter().filter(|l| l.starts_with("end ")).count() == 1 + during.len()).then_some(log)
    })
    .await;
    let mut all = vec![before_id];
    all.extend(&during);
    assert_one_at_a_time_in_order(&ran, &all);
    tokio::time::sleep(Duration::from_secs(2)).await;
    for message in &all {
        assert_eq!(
            replies_to(&surface, *message),
            [format!("answer to {message}")],
            "answered once"
        );
    }
    assert_eq!(started(&log(&dir)), all.len(), "none ran twice");
    drop(a.server);
}

/// Another bot, allowed to trigger runs (`agent.allow_bots`).
const OTTERBOT: u64 = 1_200_000_000_000_000_777;

/// `author` posts `text` in #ops and `receiver` gets the message from its gateway.
fn arrives(
    surface: &RecordingPlatform,
    receiver: &Node,
    author: u64,
    text: &str,
) -> entity::Snowflake {
    let id = surface.post(demo::OPS.into(), author.into(), text);
    deliver(receiver, id, author, text, false);
    id
}

/// `receiver` gets message `id` from its gateway, live or (`missed`) from a backfill.
fn deliver(receiver: &Node, id: entity::Snowflake, author: u64, text: &str, missed: bool) {
    receiver.bridge.arrived(&switchboard_engine::runs::Arrival {
        channel_id: demo::OPS.into(),
        message_id: id,
        author_id: author.into(),
        author_name: "someone",
        author_roles: &[],
        author_is_bot: author == OTTERBOT,
        in_guild: true,
        parent_id: None,
        content: text,
        text,
        replies_to_bot: false,
        missed,
    });
}

/// The loop guard's count is the cluster's: another bot's messages received alternately by
/// two nodes are counted together, the stop is said once, and a person's message starts the
/// count again.
#[tokio::test(flavor = "multi_thread", worker_threads = 4)]
async fn the_loop_guard_counts_bot_turns_received_by_two_nodes_together() {
    let dir = scratch("loop-guard");
    let surface = Arc::new(RecordingPlatform::demo());
    let store = Place::memory().open();
    let extra = format!("allow_bots = [\"{OTTERBOT}\"]\nmax_bot_turns = 2");
    let a = node(&dir, "node-a", &extra, &surface, &store).await;
    let b = node(&dir, "node-b", &extra, &surface, &store).await;
    let mention = format!("<@{}> ping", demo::BOT);
    let started = |message: entity::Snowflake| {
        let prefix = format!("start {message} ");
        log(&dir).iter().any(|line| line.starts_with(&prefix))
    };
    for receiver in [&a, &b] {
        let id = arrives(&surface, receiver, OTTERBOT, &mention);
        wait_for(
            "a bot's run within the limit",
            Duration::from_secs(20),
            || started(id).then_some(()),
        )
        .await;
    }
    // The third in a row (on node a, which counted one itself) is stopped, and said so.
    let stopped = arrives(&surface, &a, OTTERBOT, &mention);
    let notice = wait_for("the loop guard's notice", Duration::from_secs(20), || {
        replies_to(&surface, stopped).into_iter().next()
    })
    .await;
    assert!(
        notice.contains("answered other bots 2 times in a row"),
        "{notice}"
    );
    let quiet = arrives(&surface, &b, OTTERBOT, &mention);
    arrives(&surface, &b, demo::STANLEY, "hey bots, calm down");
    let again = arrives(&surface, &b, OTTERBOT, &mention);
    wait_for(
        "a bot's run after a person wrote",
        Duration::from_secs(20),
        || started(again).then_some(()),
    )
    .await;
    // Node b admits in arrival order: `quiet` was decided before `again` ran.
    assert!(
        !started(stopped) && !started(quiet),
        "stopped {stopped}, quiet {quiet}: {:?}",
        log(&dir)
    );
    assert!(
        replies_to(&surface, quiet).is_empty(),
        "said once, cluster-wide"
    );
    drop((a.server, b.server));
}

/// A message id made now, with `n` in its low bits: young enough for a missed trigger to be
/// answered (`agent.missed_max_age_s`).
fn fresh_id(n: u64) -> entity::Snowflake {
    let now_ms = std::time::SystemTime::now()
        .duration_since(std::time::UNIX_EPOCH)
        .unwrap()
        .as_millis() as u64;
    entity::Snowflake(((now_ms - 1_420_070_400_000) << 22) | n)
}

/// A missed trigger (found by a backfill) that finds its session's queue full is told so, as
/// a live one is: its claim is taken, so nothing else would ever answer it.
#[tokio::test(flavor = "multi_thread", worker_threads = 4)]
async fn a_missed_trigger_that_finds_the_queue_full_is_told_to_ask_again() {
    let dir = scratch("missed-full");
    let surface = Arc::new(RecordingPlatform::demo());
    let store = Place::memory().open();
    let a = node(&dir, "node-a", "queue_per_session = 1", &surface, &store).await;
    let text = format!("<@{}> question", demo::BOT);
    let [running, waiting, missed] = [1, 2, 3].map(fresh_id);
    let started = |message: entity::Snowflake| {
        let prefix = format!("start {message} ");
        log(&dir).iter().any(|line| line.starts_with(&prefix))
    };
    std::fs::write(dir.join(format!("hold-{running}")), "").unwrap();
    deliver(&a, running, demo::STANLEY, &text, false);
    wait_for("the first run", Duration::from_secs(20), || {
        started(running).then_some(())
    })
    .await;
    deliver(&a, waiting, demo::STANLEY, &text, false);
    let deadline = Instant::now() + Duration::from_secs(20);
    while rows(&store).await < 2 {
        assert!(Instant::now() < deadline, "the second run was never queued");
        tokio::time::sleep(Duration::from_millis(10)).await;
    }
    deliver(&a, missed, demo::STANLEY, &text, true);
    let told = wait_for("the busy notice", Duration::from_secs(20), || {
        replies_to(&surface, missed).into_iter().next()
    })
    .await;
    assert!(told.contains("I'm busy in this channel"), "{told}");
    std::fs::remove_file(dir.join(format!("hold-{running}"))).unwrap();
    for message in [running, waiting] {
        wait_for("the queued runs' answers", Duration::from_secs(20), || {
            (!replies_to(&surface, message).is_empty()).then_some(())
        })
        .await;
    }
    assert_eq!(
        replies_to(&surface, missed).len(),
        1,
        "told once, never run"
    );
    assert!(!started(missed), "{:?}", log(&dir));
    drop(a.server);
}
