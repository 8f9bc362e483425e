//! Stopping single gateway shards against fake-discord (issue 23): a shard given back — even
//! one whose socket the fake just closed with 4011, which sends serenity 0.12's runner into a
//! loop that answers no shutdown message — stops within a bound, and the node keeps its other
//! shards; a client retired for a new shard count closes its connections at once; a leased
//! shard whose client could not be built is given back and taken again, never left unrun
//! under a renewed lease.

use std::sync::atomic::{AtomicU32, Ordering};
use std::sync::Arc;
use std::time::{Duration, Instant};

use bot::lease::LeaseLoop;
use bot::rest::DiscordRest;
use bot::service::{client_per_shard, intents, one_client};
use bot::shards::{ShardControl, ShardStates, STOP_WITHIN};
use fake_discord::{ConnectionInfo, FakeDiscord, FakeOptions, World};
use serenity::all::{ClientBuilder, HttpBuilder};
use switchboard_store::{ClusterStore, MemoryBackend, MemoryOptions};

/// Longest wait for one step (a connection, an IDENTIFY, a READY).
const STEP: Duration = Duration::from_secs(30);

/// A fake with two shards in two IDENTIFY buckets (both may identify at once), and Discord's
/// heartbeat interval: a serenity runner spinning on a closed socket would go on for 41 s.
async fn fake() -> FakeDiscord {
    FakeDiscord::start_with(
        World::demo(),
        "127.0.0.1:0".parse().expect("addr"),
        FakeOptions {
            shards: 2,
            max_concurrency: 2,
            ..FakeOptions::default()
        },
    )
    .await
    .expect("fake starts")
}

fn builder(fake: &FakeDiscord) -> impl FnMut() -> Option<ClientBuilder> + Send + 'static {
    let base = fake.base_url();
    move || {
        let http = HttpBuilder::new("fake-token")
            .proxy(base.as_str())
            .ratelimiter_disabled(true)
            .build();
        Some(ClientBuilder::new_with_http(http, intents()))
    }
}

/// The fake's open connections identified on shard `id` (of any count).
fn identified_on(fake: &FakeDiscord, id: u32) -> Vec<ConnectionInfo> {
    fake.connections()
        .into_iter()
        .filter(|c| c.shard.is_some_and(|[shard, _]| shard == id) && c.session_id.is_some())
        .collect()
}

/// Polls (every 20 ms, at most [`STEP`]) until `check` holds.
async fn until(what: &str, mut check: impl FnMut() -> bool) {
    tokio::time::timeout(STEP, async {
        while !check() {
            tokio::time::sleep(Duration::from_millis(20)).await;
        }
    })
    .await
    .unwrap_or_else(|_| panic!("timed out waiting for {what}"));
}

/// Runs shards 0 and 1, each in a client of its own, until both are identified.
async fn both_shards(fake: &FakeDiscord) -> ShardControl {
    let (control, _ended) = client_per_shard(builder(fake), 2, ShardStates::default(), None);
    control.start(0).await;
    control.start(1).await;
    until("both shards identified", || {
        identified_on(fake, 0).len() == 1 && identified_on(fake, 1).len() == 1
    })
    .await;
    control
}

/// Closes shard 0's connection at the fake with `code` (`None`: dropped without a close
/// frame), gives shard 0 back, and checks the stop is bounded and shard 1 stays as it was.
async fn a_closed_shard_is_given_back_in_time_and_the_other_stays(code: Option<u16>) {
    let fake = fake().await;
    let control = both_shards(&fake).await;
    let kept = identified_on(&fake, 1)[0].connection;
    let closed = identified_on(&fake, 0)[0].connection;
    assert_eq!(fake.close_shard(0, code).expect("close shard 0"), 1);
    until("shard 0's connection closed", || {
        fake.connections().iter().all(|c| c.connection != closed)
    })
    .await;
    // Let serenity's runner see the close (after a 4011 it spins; after a drop it resumes).
    tokio::time::sleep(Duration::from_millis(300)).await;
    let asked = Instant::now();
    tokio::time::timeout(STOP_WITHIN + Duration::from_secs(2), control.stop(0))
        .await
        .unwrap_or_else(|_| panic!("giving back a shard closed with {code:?} hung"));
    let took = asked.elapsed();
    assert!(
        took < STOP_WITHIN,
        "the stopped client's thread did not let go (took {took:?}): it was left running"
    );
    assert_eq!(control.running().await, vec![1]);
    let still: Vec<u64> = identified_on(&fake, 1)
        .iter()
        .map(|c| c.connection)
        .collect();
    assert_eq!(still, vec![kept], "shard 1 kept its one connection");
    // Shard 0 stays stopped: a connection it resumed on is closed, and nothing of the old
    // client connects again.
    until("no connection of shard 0", || {
        fake.connections()
            .iter()
            .all(|c| c.shard.is_none_or(|[shard, _]| shard == 1))
    })
    .await;
    tokio::time::sleep(Duration::from_secs(1)).await;
    assert!(
        fake.connections()
            .iter()
            .all(|c| c.shard.is_none_or(|[shard, _]| shard == 1)),
        "{:?}",
        fake.connections()
    );
    control.shutdown_all().await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_shard_closed_with_4011_is_given_back_within_the_bound_and_the_node_keeps_its_other_shard(
) {
    a_closed_shard_is_given_back_in_time_and_the_other_stays(Some(4011)).await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_shard_whose_connection_dropped_is_given_back_within_the_bound_and_the_node_keeps_its_other_shard(
) {
    a_closed_shard_is_given_back_in_time_and_the_other_stays(None).await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_live_shard_given_back_closes_its_connection_at_once_and_can_be_taken_again() {
    let fake = fake().await;
    let control = both_shards(&fake).await;
    let old = identified_on(&fake, 1)[0].connection;
    tokio::time::timeout(STOP_WITHIN + Duration::from_secs(2), control.stop(1))
        .await
        .expect("a live shard stops in time");
    until("shard 1's connection gone", || {
        identified_on(&fake, 1).is_empty()
    })
    .await;
    assert_eq!(control.running().await, vec![0]);
    control.start(1).await;
    until("shard 1 identified anew", || {
        identified_on(&fake, 1).len() == 1
    })
    .await;
    assert_ne!(identified_on(&fake, 1)[0].connection, old);
    let stopped = Instant::now();
    tokio::time::timeout(STOP_WITHIN + Duration::from_secs(2), control.shutdown_all())
        .await
        .expect("every shard stops in time");
    assert!(stopped.elapsed() < STOP_WITHIN);
    until("every connection gone", || fake.connections().is_empty()).await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_client_retired_after_a_4011_closes_its_other_connections_at_once() {
    let fake = fake().await;
    let rest = DiscordRest::new(&fake.base_url(), "fake-token").expect("rest client");
    let (control, _ended) = one_client(builder(&fake), 2, &[0, 1], ShardStates::default(), rest)
        .await
        .expect("the gateway starts");
    until("both shards identified", || {
        identified_on(&fake, 0).len() == 1 && identified_on(&fake, 1).len() == 1
    })
    .await;
    let closed = identified_on(&fake, 0)[0].connection;
    let other = identified_on(&fake, 1)[0].connection;
    assert_eq!(fake.close_shard(0, Some(4011)).expect("close shard 0"), 1);
    until("shard 0's connection closed", || {
        fake.connections().iter().all(|c| c.connection != closed)
    })
    .await;
    // serenity's runner now spins on the closed socket until its next heartbeat (41 s away),
    // holding up its client's thread.
    tokio::time::sleep(Duration::from_millis(300)).await;
    assert!(
        tokio::time::timeout(STEP, control.reshard(2, &[0, 1]))
            .await
            .expect("the relaunch answers"),
        "the gateway relaunched"
    );
    let retired = Instant::now();
    until("the retired client's shard 1 connection gone", || {
        fake.connections().iter().all(|c| c.connection != other)
    })
    .await;
    assert!(
        retired.elapsed() < Duration::from_secs(2),
        "the retired client's connection lingered {:?}",
        retired.elapsed()
    );
    until("the new client's shards identified", || {
        identified_on(&fake, 0).len() == 1 && identified_on(&fake, 1).len() == 1
    })
    .await;
    tokio::time::timeout(STOP_WITHIN + Duration::from_secs(2), control.shutdown_all())
        .await
        .expect("every shard stops in time");
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_leased_shard_whose_client_cannot_be_built_is_given_back_and_ends_up_running() {
    let fake = fake().await;
    // The first client asked for cannot be built (as when no global-limit slot is free or
    // GET /gateway fails); every later one can.
    let builds = Arc::new(AtomicU32::new(0));
    let mut real = builder(&fake);
    let counted = Arc::clone(&builds);
    let build = move || {
        if counted.fetch_add(1, Ordering::Relaxed) == 0 {
            None
        } else {
            real()
        }
    };
    let (control, _ended) = client_per_shard(build, 2, ShardStates::default(), None);
    let store: Arc<dyn ClusterStore> = Arc::new(MemoryBackend::new(MemoryOptions::default()));
    let lease = bot::lease::run(LeaseLoop {
        store: Arc::clone(&store),
        node_id: "node-a".into(),
        lease: Duration::from_millis(1_500),
        control: control.clone(),
        max_concurrency: 2,
    });
    // Shard 0's first start fails; its lease is given back and the shard taken again once
    // its bucket's next IDENTIFY slot comes (5.5 s on).
    until("both shards identified", || {
        identified_on(&fake, 0).len() == 1 && identified_on(&fake, 1).len() == 1
    })
    .await;
    assert!(
        builds.load(Ordering::Relaxed) >= 3,
        "shard 0 was started again after its failed start"
    );
    assert_eq!(control.running().await, vec![0, 1]);
    let leases = store.shard_leases().await.expect("leases");
    assert!(
        leases.iter().all(|l| l.node_id == "node-a") && leases.len() == 2,
        "{leases:?}"
    );
    lease.abort();
    tokio::time::timeout(STOP_WITHIN + Duration::from_secs(2), control.shutdown_all())
        .await
        .expect("every shard stops in time");
}
