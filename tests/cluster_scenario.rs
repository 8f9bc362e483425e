//! Issue 23's "what it must show", end to end: two `switchboard` nodes (separate processes,
//! each the leader of its own process group) on one real PostgreSQL with
//! `cluster.shards = "lease"`, against the fake Discord with two shards and a guild on each,
//! under a steady stream of messages and mentions answered by a scripted command agent.
//!
//! * `a_node_killed_mid_run_loses_nothing_and_answers_nothing_twice`: one node's process group
//!   is SIGKILLed mid-run; every message is stored (those posted while its shard had no owner
//!   too), every trigger answered exactly once and in order per channel, the approval decided
//!   on the survivor once, the workflow deadline fired once, IDENTIFYs spaced, the global rate
//!   limit kept, and the survivor runs both shards within 60 s.
//! * `a_postgres_crash_mid_run_loses_nothing_acknowledged_and_answers_nothing_twice`:
//!   PostgreSQL restarts `-m immediate` mid-run; both nodes reconnect and nothing is lost or
//!   answered twice.

mod support;

use std::collections::{BTreeMap, HashMap};
use std::path::Path;
use std::time::{Duration, Instant};

use fake_discord::demo;
use serde_json::Value;
use support::approvals::{card, Background};
use support::shards::{assert_identifies_spaced, health, wait_shards_ready, ANNEX_GENERAL};
use support::{
    bot_posts, command_agent, poll, script, tools_bin, Allow, Fake, Sections, Switchboard, TempDir,
};
use switchboard_store_postgres::testing::PgCluster;

const BOT_MENTION: &str = "<@1000000000000000001>";
/// Shard leases (and run leases) of 4 s, renewed about every second: a dead node's shards and
/// runs are free a few seconds after it stops renewing.
const LEASE_S: u64 = 4;
/// The text `agent.interrupted = "notify"` answers a question with when its run's node died.
const INTERRUPTED: &str = "My answer to this was interrupted";
/// Every wait for the cluster to settle ends by itself.
const SETTLE: Duration = Duration::from_secs(60);

/// The channels the stream goes to: `#ops` (the demo guild, shard 1) and `#annex-general`
/// (the Annex, shard 0).
const STREAM: [u64; 2] = [demo::OPS, ANNEX_GENERAL];

/// A scripted agent shared by both nodes: a mention in `#release-room` sets a workflow whose
/// deadline (`deadline_s`) passes unanswered; a resumed workflow's run logs its id in
/// `resumed.log` and says so; every other mention is answered, after a short think, with
/// `answer to <message id>` (the id also logged in `runs.log`, one line a run). While the
/// file `hold` names the node's URL, the first run there stays running (its id in `held/id`),
/// so a kill finds a run in flight.
fn agent(dir: &Path, deadline_s: u64) -> String {
    let agent = script(
        dir,
        "agent.sh",
        &format!(
            r##"O="{o}"
T="{t}"
cat > /dev/null
if [ -n "$SWITCHBOARD_WORKFLOW_ID" ]; then
  echo "$SWITCHBOARD_WORKFLOW_ID" >> "$O/resumed.log"
  echo "resumed $SWITCHBOARD_WORKFLOW_ID"
  exit 0
fi
echo "$SWITCHBOARD_MESSAGE_ID" >> "$O/runs.log"
if [ -f "$O/hold" ] && [ "$SWITCHBOARD_URL" = "$(cat "$O/hold")" ] && mkdir "$O/held" 2>/dev/null; then
  echo "$SWITCHBOARD_MESSAGE_ID" > "$O/held/id"
  sleep 30
fi
if [ "$SWITCHBOARD_SESSION_ID" = "{release}" ]; then
  "$T" workflow.create --output=json --timeout-s={deadline_s} --resume-prompt="The deadline passed." --tasks="[{{\"sessionId\":\"$SWITCHBOARD_SESSION_ID\",\"messageId\":\"$SWITCHBOARD_MESSAGE_ID\",\"fromUserId\":\"Tomas\",\"summary\":\"Anything before the deadline?\"}}]" > "$O/workflow.json" 2> "$O/workflow.err" || {{ echo "could not set the deadline"; exit 1; }}
  echo "deadline set for $SWITCHBOARD_MESSAGE_ID"
  exit 0
fi
sleep 0.3
echo "answer to $SWITCHBOARD_MESSAGE_ID"
"##,
            o = dir.display(),
            t = tools_bin().display(),
            release = demo::RELEASE_ROOM,
        ),
    );
    // One run per trigger (not a batch of the queued ones), so each has its own answer; room
    // in the queue for every mention posted while a shard had no owner (they arrive at once).
    command_agent(
        &agent,
        dir,
        30,
        "interrupted = \"notify\"\nbatch = \"off\"\nqueue_per_session = 32",
    )
}

/// Sends to `#release-room` by the operator wait for `@Stanley`'s approval (two minutes).
const PERMISSIONS: &str = r##"
[permissions]
default = "allow"
approvers = ["@Stanley"]
ask_timeout_s = 120

[[permissions.rules]]
tool = "surface.messages.send"
session = "#release-room"
caller = "operator"
policy = "ask"
"##;

/// A lease node named `node` on `url`, its own process group, the shared agent in `agent_dir`.
fn node(fake: &Fake, dir: &TempDir, url: &str, name: &str, agent: &str) -> Switchboard {
    let extra = format!(
        "[cluster]\nnode_id = \"{name}\"\nshards = \"lease\"\nlease_s = {LEASE_S}\n\n{agent}\n{PERMISSIONS}"
    );
    Switchboard::start_sections(
        fake,
        dir.path(),
        &Allow {
            channels: vec![demo::OPS, demo::RELEASE_ROOM, ANNEX_GENERAL],
            dms: true,
        },
        Sections {
            extra: &extra,
            store_url: Some(url),
            own_process_group: true,
            ..Sections::default()
        },
    )
}

/// Node A alone (both shards), then node B, waited for until each runs one shard: A shard 0
/// (the Annex), B shard 1 (`#ops`, `#release-room`).
fn two_nodes(
    fake: &Fake,
    url: &str,
    agent: &str,
    dirs: &(TempDir, TempDir),
) -> (Switchboard, Switchboard) {
    let a = node(fake, &dirs.0, url, "node-a", agent);
    wait_shards_ready(&a, &[0, 1], SETTLE);
    let b = node(fake, &dirs.1, url, "node-b", agent);
    wait_shards_ready(&a, &[0], SETTLE);
    wait_shards_ready(&b, &[1], SETTLE);
    (a, b)
}

/// What was posted: every message's id, and the triggers (mentions) per channel in order.
#[derive(Default)]
struct Posted {
    all: Vec<String>,
    triggers: BTreeMap<u64, Vec<String>>,
    /// While set, mentions are posted into an outage: they must not be answered twice, but
    /// they may go unanswered (see `a_mention_posted_while_postgres_is_down_is_answered_or_refused`).
    in_outage: bool,
    /// The mentions posted into an outage.
    outage: std::collections::HashSet<String>,
}

impl Posted {
    fn post(&mut self, fake: &Fake, channel: u64, text: &str) -> String {
        let id = fake.post(channel, demo::STANLEY, text);
        self.all.push(id.clone());
        id
    }

    fn trigger(&mut self, fake: &Fake, channel: u64, text: &str) -> String {
        let id = self.post(fake, channel, &format!("{BOT_MENTION} {text}"));
        self.triggers.entry(channel).or_default().push(id.clone());
        if self.in_outage {
            self.outage.insert(id.clone());
        }
        id
    }

    fn trigger_count(&self) -> usize {
        self.triggers.values().map(Vec::len).sum()
    }
}

/// Posts message `i` of the stream: every fifth a mention, alternating channels; a few
/// mentions come back to back in one channel.
fn post_stream_message(fake: &Fake, posted: &mut Posted, i: usize) {
    let channel = STREAM[i % 2];
    if i.is_multiple_of(5) {
        posted.trigger(fake, channel, &format!("question {i}"));
        if i % 50 == 20 {
            posted.trigger(fake, channel, &format!("question {i}, right after"));
        }
    } else {
        posted.post(fake, channel, &format!("chatter {i}"));
    }
}

/// The bot's replies in `channel` (posts referencing a message), in the order posted: (the
/// message answered, the text). The resumed workflow's post is not a reply to a trigger.
fn replies(fake: &Fake, channel: u64) -> Vec<(String, String)> {
    bot_posts(fake, channel)
        .into_iter()
        .filter_map(|m| {
            let to = m["message_reference"]["message_id"].as_str()?.to_owned();
            let text = m["content"].as_str().unwrap_or_default().to_owned();
            (!text.starts_with("resumed ")).then_some((to, text))
        })
        .collect()
}

/// Waits until every trigger (but those posted into an outage) has at least one reply; then, past a lease and a sweep more (a
/// late second answer, an interrupted run noticed twice), returns the replies per channel.
fn settled_replies(
    fake: &Fake,
    posted: &Posted,
    log: impl Fn() -> String,
) -> HashMap<u64, Vec<(String, String)>> {
    let deadline = Instant::now() + Duration::from_secs(75);
    loop {
        let unanswered: Vec<&String> = posted
            .triggers
            .iter()
            .flat_map(|(channel, ids)| {
                let answered = replies(fake, *channel);
                ids.iter()
                    .filter(|id| !posted.outage.contains(*id))
                    .filter(move |id| !answered.iter().any(|(to, _)| to == *id))
                    .collect::<Vec<_>>()
            })
            .collect();
        if unanswered.is_empty() {
            break;
        }
        assert!(
            Instant::now() < deadline,
            "{} of {} triggers unanswered: {unanswered:?}\n{}",
            unanswered.len(),
            posted.trigger_count(),
            log()
        );
        std::thread::sleep(Duration::from_millis(250));
    }
    std::thread::sleep(Duration::from_secs(LEASE_S + 2));
    posted
        .triggers
        .keys()
        .map(|&channel| (channel, replies(fake, channel)))
        .collect()
}

/// Every trigger answered exactly once (an answer, or the interrupted notice; one posted into
/// an outage at most once), the answer naming its own question, and each channel's answers in
/// the order of its questions.
fn assert_answered_once_in_order(
    posted: &Posted,
    replies: &HashMap<u64, Vec<(String, String)>>,
    log: &str,
) -> usize {
    let mut interrupted = 0;
    for (channel, triggers) in &posted.triggers {
        let answers = &replies[channel];
        for trigger in triggers {
            let mine: Vec<&String> = answers
                .iter()
                .filter(|(to, _)| to == trigger)
                .map(|(_, text)| text)
                .collect();
            let want = if posted.outage.contains(trigger) {
                0..=1
            } else {
                1..=1
            };
            assert!(
                want.contains(&mine.len()),
                "trigger {trigger} in {channel} answered {} times: {mine:?}\n{log}",
                mine.len()
            );
            let Some(&text) = mine.first() else {
                continue;
            };
            if text.starts_with(INTERRUPTED) {
                interrupted += 1;
            } else {
                assert!(
                    text == &format!("answer to {trigger}")
                        || text == &format!("deadline set for {trigger}"),
                    "trigger {trigger} got {text:?}\n{log}"
                );
            }
        }
        let order: Vec<usize> = answers
            .iter()
            .filter_map(|(to, _)| triggers.iter().position(|t| t == to))
            .collect();
        assert!(
            order.windows(2).all(|w| w[0] < w[1]),
            "answers in {channel} out of trigger order: {order:?}\n{answers:?}"
        );
    }
    interrupted
}

/// No question reached the agent twice (`agent.interrupted = "notify"` never runs one again).
fn assert_each_run_once(agent_dir: &Path) {
    let runs = std::fs::read_to_string(agent_dir.join("runs.log")).unwrap_or_default();
    let mut seen = std::collections::HashSet::new();
    for id in runs.lines() {
        assert!(seen.insert(id), "the agent ran for {id} twice: {runs}");
    }
}

/// The ids in `ids` that the `messages` table of `database` lacks.
fn not_stored(cluster: &PgCluster, database: &str, ids: &[String]) -> Vec<String> {
    let stored = cluster
        .psql(
            database,
            &format!("SELECT id FROM messages WHERE id IN ({})", ids.join(",")),
        )
        .expect("read the messages table");
    let stored: Vec<&str> = stored.lines().map(str::trim).collect();
    ids.iter()
        .filter(|id| !stored.contains(&id.as_str()))
        .cloned()
        .collect()
}

/// Waits (bounded) until `database` holds every one of `ids`.
fn wait_stored(cluster: &PgCluster, database: &str, ids: &[String], log: impl Fn() -> String) {
    let deadline = Instant::now() + SETTLE;
    loop {
        let missing = not_stored(cluster, database, ids);
        if missing.is_empty() {
            return;
        }
        assert!(
            Instant::now() < deadline,
            "{} of {} messages never stored: {missing:?}\n{}",
            missing.len(),
            ids.len(),
            log()
        );
        std::thread::sleep(Duration::from_millis(500));
    }
}

/// Never more than 50 requests in a second across both nodes, and no global 429.
fn assert_global_limit_kept(fake: &Fake) {
    let tally = fake.fake.rate_tally();
    println!("Discord requests: {tally:?}");
    assert!(tally.peak_per_second <= 50, "{tally:?}");
    assert_eq!(tally.global_429s, 0, "{tally:?}");
}

#[test]
fn a_node_killed_mid_run_loses_nothing_and_answers_nothing_twice() {
    let cluster = PgCluster::shared();
    let database = cluster.database().expect("a database");
    let url = cluster.url(&database);
    let fake = Fake::two_shards();
    let agent_dir = TempDir::new("scenario-agent");
    let dirs = (TempDir::new("scenario-a"), TempDir::new("scenario-b"));
    let agent = agent(agent_dir.path(), 15);
    let (a, b) = two_nodes(&fake, &url, &agent, &dirs);
    let b_log = std::cell::RefCell::new(String::new());
    let log = || format!("node-a:\n{}\nnode-b:\n{}", a.stderr(), b_log.borrow());

    // The operator's send waits for an approval on node A (the node that will survive); its
    // card is in #release-room, on node B's shard.
    let mut approval = Background::start(
        &a,
        &[
            "surface.messages.send",
            "--session-id=#release-room",
            "ship the cluster release",
        ],
    );
    let (_, approval_id) = approval.waiting_line();
    let pending = card(&fake, demo::RELEASE_ROOM, &approval_id);

    // 200 messages over 20 s, 44 of them mentions (4 pairs back to back), plus the deadline's;
    // node B's process group is killed after about 80, once it runs a run.
    let mut posted = Posted::default();
    let deadline_trigger = posted.trigger(&fake, demo::RELEASE_ROOM, "set a deadline");
    let started = Instant::now();
    let mut b = Some(b);
    let mut killed = None;
    let hold = agent_dir.path().join("hold");
    let held = agent_dir.path().join("held/id");
    for i in 0..200 {
        if i == 80 {
            std::fs::write(&hold, &b.as_ref().expect("node B").url).expect("write hold");
        }
        // Node B dies with a run in flight (bounded: it takes one within a few mentions).
        if killed.is_none() && (held.exists() || i == 120) {
            *b_log.borrow_mut() = b.take().expect("node B").kill_group();
            killed = Some(Instant::now());
            let _ = std::fs::remove_file(&hold);
        }
        post_stream_message(&fake, &mut posted, i);
        let next = Duration::from_millis(100 * (i as u64 + 1));
        if let Some(left) = next.checked_sub(started.elapsed()) {
            std::thread::sleep(left);
        }
    }
    let killed = killed.expect("node B was killed");

    // The survivor runs both shards within 60 s of the kill.
    wait_shards_ready(
        &a,
        &[0, 1],
        Duration::from_secs(60).saturating_sub(killed.elapsed()),
    );
    let took_over = killed.elapsed();
    assert!(took_over <= Duration::from_secs(60), "{took_over:?}");

    // The approval is decided on the survivor: two approvers' clicks at once, one decides and
    // the other is told it is no longer pending.
    assert!(
        approval.still_running(),
        "the send still waits for its approval"
    );
    let clicks = two_clicks(&fake, &pending);
    let decided: Vec<&Value> = clicks
        .iter()
        .filter(|c| c["response"]["type"] == 7)
        .collect();
    assert_eq!(decided.len(), 1, "exactly one click decides: {clicks:?}");
    let refused = clicks
        .iter()
        .find(|c| c["response"]["type"] == 4)
        .unwrap_or_else(|| panic!("the other click is refused: {clicks:?}"));
    let refused_text = refused["response"]["data"]["content"]
        .as_str()
        .unwrap_or_default();
    assert!(
        refused_text.contains("no longer pending"),
        "the second click is told it was decided: {refused_text}"
    );
    let (code, stdout, stderr) = approval.finish();
    assert_eq!(code, Some(0), "{stdout}{stderr}");
    let shipped = bot_posts(&fake, demo::RELEASE_ROOM)
        .iter()
        .filter(|m| m["content"] == "ship the cluster release")
        .count();
    assert_eq!(shipped, 1, "the approved send posted once");

    // Every message stored, the ones posted while shard 1 had no owner too (the backfill).
    wait_stored(cluster, &database, &posted.all, log);

    // Every trigger answered exactly once, in order per channel.
    let replies = settled_replies(&fake, &posted, log);
    let interrupted = assert_answered_once_in_order(&posted, &replies, &log());
    assert_each_run_once(agent_dir.path());
    let held = std::fs::read_to_string(&held).expect("node B was killed running a run");
    let held_answer = posted
        .triggers
        .keys()
        .flat_map(|channel| &replies[channel])
        .find(|(to, _)| to == held.trim())
        .map(|(_, text)| text.clone());
    assert!(
        held_answer
            .as_deref()
            .is_some_and(|text| text.starts_with(INTERRUPTED)),
        "the run node B died in is told interrupted: {held_answer:?}"
    );
    println!(
        "{} triggers answered once each ({interrupted} as interrupted); both shards on the survivor {:.1} s after the kill",
        posted.trigger_count(),
        took_over.as_secs_f64()
    );

    // The workflow's deadline fired once, cluster-wide.
    let resumed = poll("the deadline to fire", SETTLE, || {
        let lines = std::fs::read_to_string(agent_dir.path().join("resumed.log")).ok()?;
        (!lines.is_empty()).then_some(lines)
    });
    std::thread::sleep(Duration::from_secs(LEASE_S + 2));
    let resumed = std::fs::read_to_string(agent_dir.path().join("resumed.log")).unwrap_or(resumed);
    assert_eq!(
        resumed.lines().count(),
        1,
        "the deadline of the workflow set by {deadline_trigger} fired once: {resumed}"
    );
    let resumed_posts = bot_posts(&fake, demo::RELEASE_ROOM)
        .iter()
        .filter(|m| {
            m["content"]
                .as_str()
                .is_some_and(|t| t.starts_with("resumed "))
        })
        .count();
    assert_eq!(resumed_posts, 1);

    assert_identifies_spaced(&fake);
    assert_global_limit_kept(&fake);
}

/// Clicks approve on `card` as Stanley twice at once (before either is answered); both
/// interactions once answered.
fn two_clicks(fake: &Fake, card: &Value) -> Vec<Value> {
    let custom_id = card["components"][0]["components"][0]["custom_id"]
        .as_str()
        .expect("custom_id")
        .to_owned();
    let message: u64 = card["id"].as_str().expect("id").parse().expect("id");
    let ids: Vec<u64> = (0..2)
        .map(|_| {
            let clicked = fake
                .fake
                .click_component(fake_discord::ComponentClick {
                    message_id: message.into(),
                    user_id: demo::STANLEY.into(),
                    custom_id: custom_id.clone(),
                })
                .expect("the fake takes the click");
            clicked["id"].as_str().expect("id").parse().expect("id")
        })
        .collect();
    ids.into_iter()
        .map(|id| {
            poll("the bot answers the click", SETTLE, || {
                let shown = fake.fake.interaction(id.into()).ok()?;
                (!shown["response"].is_null()).then_some(shown)
            })
        })
        .collect()
}

#[test]
fn a_postgres_crash_mid_run_loses_nothing_acknowledged_and_answers_nothing_twice() {
    postgres_crash_scenario(false);
}

/// A mention whose trigger claim finds PostgreSQL unreachable is held and claimed again once
/// the store is back (`agent/src/outage.rs`): answered once, never dropped in silence.
#[test]
fn a_mention_posted_while_postgres_is_down_is_answered_or_refused() {
    postgres_crash_scenario(true);
}

/// PostgreSQL crashes (`pg_ctl stop -m immediate`) mid-stream and is back 2 s later. Both
/// nodes reconnect; every message is stored; no trigger is answered twice; those posted
/// while the store was up are answered once, in order. `strict`: the ones posted into the
/// outage too.
fn postgres_crash_scenario(strict: bool) {
    // Its own PostgreSQL: crashing the shared one would pull it from under other tests.
    let cluster = PgCluster::start().expect("a PostgreSQL cluster");
    let database = cluster.database().expect("a database");
    let url = cluster.url(&database);
    let fake = Fake::two_shards();
    let agent_dir = TempDir::new("pg-crash-agent");
    let dirs = (TempDir::new("pg-crash-a"), TempDir::new("pg-crash-b"));
    let agent = agent(agent_dir.path(), 600);
    let (a, b) = two_nodes(&fake, &url, &agent, &dirs);
    let log = || format!("node-a:\n{}\nnode-b:\n{}", a.stderr(), b.stderr());
    let both_ok = || [&a, &b].iter().all(|sb| health(sb)["status"] == "ok");

    // 120 messages over 12 s, 26 of them mentions; PostgreSQL is down from the 40th to the
    // 60th. A mention counts as posted into the outage from just before the crash until both
    // nodes say `ok` again.
    let mut posted = Posted::default();
    let started = Instant::now();
    for i in 0..120 {
        if i == 36 {
            posted.in_outage = !strict;
        }
        if i == 40 {
            cluster.stop_immediate().expect("pg_ctl stop -m immediate");
        }
        if i == 60 {
            cluster.start_again().expect("pg_ctl start");
        }
        if i > 60 && posted.in_outage && both_ok() {
            posted.in_outage = false;
        }
        post_stream_message(&fake, &mut posted, i);
        let next = Duration::from_millis(100 * (i as u64 + 1));
        if let Some(left) = next.checked_sub(started.elapsed()) {
            std::thread::sleep(left);
        }
    }

    // Both nodes reconnect: `ok` again, each still running its shard.
    poll("both nodes to say ok again", SETTLE, || {
        both_ok().then_some(())
    });
    wait_shards_ready(&a, &[0], SETTLE);
    wait_shards_ready(&b, &[1], SETTLE);
    wait_stored(&cluster, &database, &posted.all, log);
    let replies = settled_replies(&fake, &posted, log);
    assert_answered_once_in_order(&posted, &replies, &log());
    assert_each_run_once(agent_dir.path());
    let unanswered = posted
        .outage
        .iter()
        .filter(|id| !replies.values().flatten().any(|(to, _)| to == *id))
        .count();
    println!(
        "{} triggers, {} posted into the outage, {unanswered} of those never answered",
        posted.trigger_count(),
        posted.outage.len()
    );
    assert_identifies_spaced(&fake);
    assert_global_limit_kept(&fake);
}
