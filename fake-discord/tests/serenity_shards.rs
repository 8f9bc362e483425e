//! serenity 0.12 runs sharded against the fake: each shard gets only its guilds (READY,
//! GUILD_CREATE, messages) and DMs come on shard 0; `start_shard_range`'s end is inclusive;
//! `ShardManager::shutdown` and `restart` stop and start single shards at run time; two
//! clients that identify at once in one bucket meet op 9, and serenity identifies again; a
//! 4011 never reaches the caller.
//!
//! What these pin about serenity 0.12.5 (read in its source and observed here):
//! - `Client::start_shard_range(a..b, n)` starts shards a..=b: `0..1` starts shards 0 AND 1.
//! - The shard queuer starts one shard per 5 s whatever `max_concurrency` says, measured
//!   from the moment the previous shard's websocket connected.
//! - `ShardManager::shutdown(id, code)` closes that shard's socket with `code` and removes
//!   its runner; the other shards keep running and the client keeps running.
//! - `ShardManager::restart(id)` on a shard that is not running still starts it, but only
//!   after `shutdown`'s 5-s wait for a runner that never answers. On a running shard it
//!   closes the socket (4000) and boots a fresh runner, which IDENTIFYs anew (a new session,
//!   not a RESUME), no sooner than 5 s after the queuer's previous start.
//! - op 9 (d: false) makes a shard ask the manager to restart it: the same 5-s wait, then a
//!   fresh IDENTIFY.
//! - A 4011 (or 4010) close is only logged: `Client::start` does not return, and the shard
//!   runner spins on the closed socket (its read answers at once) until its next heartbeat is
//!   due, then restarts the shard with the same `[id, total]` 5 s later, and meets 4011
//!   again. With Discord's 41.25-s heartbeat that spin held a test's runtime for ~40 s.

mod common;

use std::collections::BTreeSet;
use std::future::IntoFuture;
use std::time::{Duration, Instant};

use common::{say, start_sharded, two_shard_world, ANNEX, ANNEX_GENERAL};
use fake_discord::{demo, FakeDiscord, FakeOptions, IdentifyRecord};
use serenity::all as s;
use serenity::async_trait;
use tokio::sync::mpsc;

/// Longest wait for one step: a shard start can take the queuer's 5 s plus serenity's 5-s
/// restart wait.
const SHARD_STEP: Duration = Duration::from_secs(30);

#[derive(Debug, Clone, PartialEq)]
enum Seen {
    Ready {
        shard: u32,
        info: Option<[u32; 2]>,
        guilds: Vec<u64>,
    },
    Guild {
        shard: u32,
        id: u64,
    },
    Message {
        shard: u32,
        content: String,
    },
    Unknown(String),
}

struct Handler {
    tx: mpsc::UnboundedSender<Seen>,
}

#[async_trait]
impl s::EventHandler for Handler {
    async fn ready(&self, ctx: s::Context, ready: s::Ready) {
        let _ = self.tx.send(Seen::Ready {
            shard: ctx.shard_id.0,
            info: ready.shard.map(|i| [i.id.0, i.total]),
            guilds: ready.guilds.iter().map(|g| g.id.get()).collect(),
        });
    }

    async fn guild_create(&self, ctx: s::Context, guild: s::Guild, _is_new: Option<bool>) {
        let _ = self.tx.send(Seen::Guild {
            shard: ctx.shard_id.0,
            id: guild.id.get(),
        });
    }

    async fn message(&self, ctx: s::Context, msg: s::Message) {
        let _ = self.tx.send(Seen::Message {
            shard: ctx.shard_id.0,
            content: msg.content.clone(),
        });
    }
}

struct Raw {
    tx: mpsc::UnboundedSender<Seen>,
}

#[async_trait]
impl s::RawEventHandler for Raw {
    async fn raw_event(&self, _ctx: s::Context, event: s::Event) {
        if let s::Event::Unknown(unknown) = event {
            let _ = self.tx.send(Seen::Unknown(unknown.kind));
        }
    }
}

/// A client of the fake at `base_url`.
async fn client_of(base_url: String) -> (s::Client, mpsc::UnboundedReceiver<Seen>) {
    let (tx, rx) = mpsc::unbounded_channel();
    let http = s::HttpBuilder::new("fake-token")
        .proxy(base_url)
        .ratelimiter_disabled(true)
        .build();
    let intents = s::GatewayIntents::non_privileged() | s::GatewayIntents::MESSAGE_CONTENT;
    let client = tokio::time::timeout(
        SHARD_STEP,
        s::ClientBuilder::new_with_http(http, intents)
            .event_handler(Handler { tx: tx.clone() })
            .raw_event_handler(Raw { tx })
            .into_future(),
    )
    .await
    .expect("client build in time")
    .expect("client builds");
    (client, rx)
}

/// serenity's clients run on a runtime of their own, never the test's. A shard runner whose
/// socket Discord closed (a 4011, or a close racing a shutdown) never yields again once asked
/// to shut down: `ShardManager::shutdown_all` loops in `checked_shutdown` on the closed
/// socket's `next()`, which answers `None` at once, waiting for a close frame that cannot come
/// (seen in gdb on a hung run). On the test's runtime that held a worker for good and the
/// runtime's drop waited for it: the 4011 test hung CI for over an hour (2 of 4 runs here). On
/// this runtime it holds only serenity's threads, the fake and the test's clock keep going,
/// and the runtime is let go without waiting for its tasks (the process's exit ends them).
/// The service does the same for its own clients (`bot::shards::close_connections`).
struct Serenity(Option<tokio::runtime::Runtime>);

impl Serenity {
    fn new() -> Serenity {
        Serenity(Some(
            tokio::runtime::Builder::new_multi_thread()
                .worker_threads(4)
                .enable_all()
                .build()
                .expect("serenity's runtime"),
        ))
    }

    fn runtime(&self) -> &tokio::runtime::Runtime {
        self.0
            .as_ref()
            .expect("serenity's runtime is there until drop")
    }

    /// A client of `fake`, built on serenity's runtime.
    async fn client(&self, fake: &FakeDiscord) -> (s::Client, mpsc::UnboundedReceiver<Seen>) {
        self.runtime()
            .spawn(client_of(fake.base_url()))
            .await
            .expect("the client's build did not panic")
    }

    /// Runs `work` (a client's start) on serenity's runtime.
    fn spawn<F>(&self, work: F) -> tokio::task::JoinHandle<F::Output>
    where
        F: std::future::Future + Send + 'static,
        F::Output: Send + 'static,
    {
        self.runtime().spawn(work)
    }
}

impl Drop for Serenity {
    fn drop(&mut self) {
        if let Some(runtime) = self.0.take() {
            runtime.shutdown_background();
        }
    }
}

/// Waits (at most [`SHARD_STEP`]) for an event matching `pred`, collecting the others.
async fn wait_for(
    rx: &mut mpsc::UnboundedReceiver<Seen>,
    others: &mut Vec<Seen>,
    what: &str,
    mut pred: impl FnMut(&Seen) -> bool,
) -> Seen {
    let found = tokio::time::timeout(SHARD_STEP, async {
        loop {
            match rx.recv().await {
                Some(Seen::Unknown(kind)) => panic!("serenity could not parse a {kind} dispatch"),
                Some(seen) if pred(&seen) => return seen,
                Some(seen) => others.push(seen),
                None => panic!("handler channel closed waiting for {what}"),
            }
        }
    })
    .await;
    found.unwrap_or_else(|_| panic!("timed out waiting for {what}; saw {others:?}"))
}

fn ready_of(shard: u32) -> impl FnMut(&Seen) -> bool {
    move |s| matches!(s, Seen::Ready { shard: got, .. } if *got == shard)
}

fn message(content: &'static str) -> impl Fn(&Seen) -> bool + Copy {
    move |s| matches!(s, Seen::Message { content: got, .. } if got == content)
}

fn accepted(fake: &FakeDiscord) -> Vec<IdentifyRecord> {
    fake.identifies()
        .into_iter()
        .filter(|r| r.accepted)
        .collect()
}

/// Shuts every shard of a client down (bounded) and ends its task.
async fn stop<T>(manager: &s::ShardManager, runner: tokio::task::JoinHandle<T>) {
    tokio::time::timeout(SHARD_STEP, manager.shutdown_all())
        .await
        .expect("shutdown in time");
    runner.abort();
}

/// Polls the fake (every 20 ms, at most [`SHARD_STEP`]) until `check` holds.
async fn until(what: &str, mut check: impl FnMut() -> bool) {
    tokio::time::timeout(SHARD_STEP, async {
        while !check() {
            tokio::time::sleep(Duration::from_millis(20)).await;
        }
    })
    .await
    .unwrap_or_else(|_| panic!("timed out waiting for {what}"));
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn serenity_start_shards_gets_each_guild_on_its_shard_and_dms_on_shard_zero() {
    let fake = start_sharded(two_shard_world(), 2, 1).await;
    let serenity = Serenity::new();
    let (mut client, mut rx) = serenity.client(&fake).await;
    let manager = client.shard_manager.clone();
    let runner = serenity.spawn(async move { client.start_shards(2).await });
    let mut others = Vec::new();

    let zero = wait_for(&mut rx, &mut others, "shard 0 READY", ready_of(0)).await;
    let one = wait_for(&mut rx, &mut others, "shard 1 READY", ready_of(1)).await;
    assert_eq!(
        zero,
        Seen::Ready {
            shard: 0,
            info: Some([0, 2]),
            guilds: vec![ANNEX]
        }
    );
    assert_eq!(
        one,
        Seen::Ready {
            shard: 1,
            info: Some([1, 2]),
            guilds: vec![demo::GUILD]
        }
    );
    // serenity's queuer spaced the two IDENTIFYs (one bucket: max_concurrency 1) by 5 s.
    let log = accepted(&fake);
    assert_eq!(
        log.iter().map(|r| r.shard).collect::<Vec<_>>(),
        vec![Some([0, 2]), Some([1, 2])]
    );

    fake.post_message(say(ANNEX_GENERAL, "annex"))
        .expect("post");
    fake.post_message(say(demo::OPS, "lab")).expect("post");
    fake.post_message(say(demo::STANLEY_DM, "dm"))
        .expect("post");
    // serenity runs each handler call in a task of its own, so arrival order is loose: wait
    // for all three, give a duplicate time to show up, then look at everything seen.
    for content in ["annex", "lab", "dm"] {
        if !others.iter().any(message(content)) {
            let seen = wait_for(&mut rx, &mut others, content, message(content)).await;
            others.push(seen);
        }
    }
    tokio::time::sleep(Duration::from_millis(500)).await;
    while let Ok(late) = rx.try_recv() {
        others.push(late);
    }
    let mut messages: Vec<(u32, String)> = others
        .iter()
        .filter_map(|s| match s {
            Seen::Message { shard, content } => Some((*shard, content.clone())),
            _ => None,
        })
        .collect();
    messages.sort();
    assert_eq!(
        messages,
        vec![
            (0, "annex".to_string()),
            (0, "dm".to_string()),
            (1, "lab".to_string())
        ],
        "each message once, on its shard"
    );
    let guilds: BTreeSet<(u32, u64)> = others
        .iter()
        .filter_map(|s| match s {
            Seen::Guild { shard, id } => Some((*shard, *id)),
            _ => None,
        })
        .collect();
    assert_eq!(guilds, BTreeSet::from([(0, ANNEX), (1, demo::GUILD)]));

    stop(&manager, runner).await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn serenity_start_shard_range_end_is_inclusive() {
    // Three shards: Lab is on shard 1 of 3, Annex on shard 2.
    let fake = start_sharded(two_shard_world(), 3, 3).await;
    let serenity = Serenity::new();
    let (mut client, mut rx) = serenity.client(&fake).await;
    let manager = client.shard_manager.clone();
    let runner = serenity.spawn(async move { client.start_shard_range(0..1, 3).await });
    let mut others = Vec::new();
    wait_for(&mut rx, &mut others, "shard 0 READY", ready_of(0)).await;
    let one = wait_for(&mut rx, &mut others, "shard 1 READY", ready_of(1)).await;
    assert_eq!(
        one,
        Seen::Ready {
            shard: 1,
            info: Some([1, 3]),
            guilds: vec![demo::GUILD]
        }
    );
    // `0..1` started shard 1 too, and nothing else: the range's end is inclusive.
    let mut running = manager.shards_instantiated().await;
    running.sort();
    assert_eq!(running, vec![s::ShardId(0), s::ShardId(1)]);
    let shards: Vec<_> = fake.identifies().iter().map(|r| r.shard).collect();
    assert_eq!(shards, vec![Some([0, 3]), Some([1, 3])]);
    // Annex's shard (2) is not running: its messages reach nobody; Lab's do.
    let held: Vec<_> = fake.connections().iter().map(|c| c.shard).collect();
    assert_eq!(held, vec![Some([0, 3]), Some([1, 3])]);
    fake.post_message(say(ANNEX_GENERAL, "annex"))
        .expect("post");
    fake.post_message(say(demo::OPS, "lab")).expect("post");
    let lab = wait_for(&mut rx, &mut others, "lab", message("lab")).await;
    assert_eq!(
        lab,
        Seen::Message {
            shard: 1,
            content: "lab".into()
        }
    );
    assert!(
        !others
            .iter()
            .any(|s| matches!(s, Seen::Message { content, .. } if content == "annex")),
        "{others:?}"
    );
    stop(&manager, runner).await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn serenity_shard_manager_stops_and_starts_single_shards_at_run_time() {
    let fake = start_sharded(two_shard_world(), 2, 2).await;
    let serenity = Serenity::new();
    let (mut client, mut rx) = serenity.client(&fake).await;
    let manager = client.shard_manager.clone();
    let runner = serenity.spawn(async move { client.start_shards(2).await });
    let mut others = Vec::new();
    wait_for(&mut rx, &mut others, "shard 0 READY", ready_of(0)).await;
    wait_for(&mut rx, &mut others, "shard 1 READY", ready_of(1)).await;
    until("two connections", || fake.connections().len() == 2).await;

    // shutdown(1, 1000): shard 1's socket closes, shard 0 and the client keep running.
    tokio::time::timeout(SHARD_STEP, manager.shutdown(s::ShardId(1), 1000))
        .await
        .expect("shutdown(1) in time");
    assert_eq!(manager.shards_instantiated().await, vec![s::ShardId(0)]);
    until("shard 1's connection gone", || {
        fake.connections()
            .iter()
            .all(|c| c.shard.is_some_and(|[id, _]| id == 0))
    })
    .await;
    assert_eq!(fake.connections().len(), 1);
    fake.post_message(say(demo::OPS, "lab while shard 1 is down"))
        .expect("post");
    fake.post_message(say(ANNEX_GENERAL, "annex with shard 1 down"))
        .expect("post");
    wait_for(
        &mut rx,
        &mut others,
        "annex on shard 0",
        message("annex with shard 1 down"),
    )
    .await;

    // restart(1) on a stopped shard: starts it, after shutdown's 5-s wait for a runner that is
    // not there. The new runner IDENTIFYs afresh.
    let began = Instant::now();
    tokio::time::timeout(SHARD_STEP, manager.restart(s::ShardId(1)))
        .await
        .expect("restart(1) in time");
    assert!(
        began.elapsed() >= Duration::from_secs(4),
        "restart of a stopped shard waited {:?}",
        began.elapsed()
    );
    let again = wait_for(&mut rx, &mut others, "shard 1 READY again", ready_of(1)).await;
    assert_eq!(
        again,
        Seen::Ready {
            shard: 1,
            info: Some([1, 2]),
            guilds: vec![demo::GUILD]
        }
    );
    fake.post_message(say(demo::OPS, "lab after restart"))
        .expect("post");
    let after = wait_for(
        &mut rx,
        &mut others,
        "lab after restart",
        message("lab after restart"),
    )
    .await;
    assert_eq!(
        after,
        Seen::Message {
            shard: 1,
            content: "lab after restart".into()
        }
    );
    // What was posted while no session held shard 1 is not replayed to a new session (the
    // bot's backfill covers that gap).
    assert!(!others.iter().any(
        |s| matches!(s, Seen::Message { content, .. } if content == "lab while shard 1 is down")
    ));

    // restart(0) on a running shard: a fresh IDENTIFY, not a RESUME.
    let resumed_before = fake.state().sessions_resumed;
    tokio::time::timeout(SHARD_STEP, manager.restart(s::ShardId(0)))
        .await
        .expect("restart(0) in time");
    wait_for(&mut rx, &mut others, "shard 0 READY again", ready_of(0)).await;
    assert_eq!(fake.state().sessions_resumed, resumed_before);
    let shards: Vec<_> = accepted(&fake).iter().map(|r| r.shard).collect();
    assert_eq!(
        shards,
        vec![Some([0, 2]), Some([1, 2]), Some([1, 2]), Some([0, 2])]
    );
    until("two connections again", || {
        let mut held: Vec<_> = fake.connections().iter().filter_map(|c| c.shard).collect();
        held.sort();
        held == vec![[0, 2], [1, 2]]
    })
    .await;
    let mut running = manager.shards_instantiated().await;
    running.sort();
    assert_eq!(running, vec![s::ShardId(0), s::ShardId(1)]);

    stop(&manager, runner).await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn two_clients_identifying_at_once_in_one_bucket_meet_op_9_and_serenity_identifies_again() {
    let fake = start_sharded(two_shard_world(), 2, 1).await;
    let serenity = Serenity::new();
    let (mut first, mut rx0) = serenity.client(&fake).await;
    let (mut second, mut rx1) = serenity.client(&fake).await;
    let managers = [first.shard_manager.clone(), second.shard_manager.clone()];
    // One client per shard, as two nodes of a cluster would run them, started together.
    let runners = [
        serenity.spawn(async move { first.start_shard(0, 2).await }),
        serenity.spawn(async move { second.start_shard(1, 2).await }),
    ];
    let mut others = Vec::new();
    wait_for(&mut rx0, &mut others, "shard 0 READY", ready_of(0)).await;
    wait_for(&mut rx1, &mut others, "shard 1 READY", ready_of(1)).await;
    let log = fake.identifies();
    let refused: Vec<_> = log.iter().filter(|r| !r.accepted).collect();
    assert!(
        !refused.is_empty()
            && refused.iter().all(|r| r.close_code.is_none()
                && r.reason.as_deref().unwrap_or("").contains("bucket 0")),
        "serenity does not coordinate IDENTIFYs across clients: {log:?}"
    );
    // The accepted ones kept the bucket's pace.
    let accepted = accepted(&fake);
    assert_eq!(accepted.len(), 2, "{log:?}");
    assert!(
        accepted[1].at_ms - accepted[0].at_ms >= 5_000,
        "{accepted:?}"
    );
    for (manager, runner) in managers.iter().zip(runners) {
        stop(manager, runner).await;
    }
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn serenity_does_not_surface_4011_and_identifies_again_with_the_same_shard_count() {
    let mut world = two_shard_world();
    world.guilds_per_shard_max = Some(1);
    // A short heartbeat: after the close serenity spins until its next heartbeat is due.
    let fake = FakeDiscord::start_with(
        world,
        "127.0.0.1:0".parse().expect("addr"),
        FakeOptions {
            heartbeat_interval_ms: 1_000,
            shards: 2,
            ..FakeOptions::default()
        },
    )
    .await
    .expect("start");
    let serenity = Serenity::new();
    let (mut client, _rx) = serenity.client(&fake).await;
    let runner = serenity.spawn(async move { client.start().await });
    until("a second 4011", || {
        fake.identifies()
            .iter()
            .filter(|r| r.close_code == Some(4011) && r.shard == Some([0, 1]))
            .count()
            >= 2
    })
    .await;
    assert!(
        !runner.is_finished(),
        "Client::start returned: serenity reported the 4011"
    );
    assert!(accepted(&fake).is_empty());
    // Not `stop`: serenity's shutdown would spin on the closed socket (see [`Serenity`]).
    runner.abort();
}
