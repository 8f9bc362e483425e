//! Several shards and several nodes (issue 23), end to end: the real `switchboard` binary
//! against the fake Discord with `--shards`.

mod support;

use std::time::{Duration, Instant};

use fake_discord::{demo, FakeOptions};
use serde_json::Value;
use support::shards::{
    assert_identifies_spaced, health, two_shard_world, wait_shards_ready, ANNEX_GENERAL,
};
use support::{Allow, Fake, Sections, Switchboard, TempDir};

const INGEST: Duration = Duration::from_secs(20);

fn both_guilds() -> Allow {
    Allow {
        channels: vec![demo::OPS, ANNEX_GENERAL],
        dms: true,
    }
}

/// Polls `/health` until `done` holds for it (`what` names that in the failure).
fn wait_health(
    sb: &Switchboard,
    timeout: Duration,
    what: &str,
    done: impl Fn(&Value) -> bool,
) -> Value {
    let deadline = Instant::now() + timeout;
    loop {
        let health = health(sb);
        if done(&health) {
            return health;
        }
        assert!(
            Instant::now() < deadline,
            "{what} not seen after {timeout:?}: {health}\n{}",
            sb.stderr()
        );
        std::thread::sleep(Duration::from_millis(200));
    }
}

/// The `shard` of every IDENTIFY the fake accepted, sorted.
fn accepted_identifies(fake: &Fake) -> Vec<[u32; 2]> {
    let mut shards: Vec<[u32; 2]> = fake
        .fake
        .identifies()
        .iter()
        .filter(|i| i.accepted)
        .filter_map(|i| i.shard)
        .collect();
    shards.sort_unstable();
    shards
}

#[test]
fn guild_events_from_both_shards_arrive_and_are_stored() {
    let fake = Fake::two_shards();
    let dir = TempDir::new("two-shards");
    // shard_count is "auto": the fake recommends 2.
    let sb = Switchboard::start(&fake, dir.path(), &both_guilds());
    let health = wait_shards_ready(&sb, &[0, 1], INGEST);
    assert_eq!(health["store"], "sqlite", "{health}");
    assert!(
        health["node"].as_str().is_some_and(|n| !n.is_empty()),
        "{health}"
    );
    let on_shard_1 = fake.post(demo::OPS, demo::STANLEY, "from the Lab, shard 1");
    let on_shard_0 = fake.post(ANNEX_GENERAL, demo::STANLEY, "from the Annex, shard 0");
    sb.wait_listed("#ops", &[on_shard_1], INGEST);
    sb.wait_listed(&ANNEX_GENERAL.to_string(), &[on_shard_0], INGEST);
    // Each shard identified as itself, once.
    assert_eq!(accepted_identifies(&fake), vec![[0, 2], [1, 2]]);
}

#[test]
fn a_listed_shard_runs_alone_and_the_others_guilds_are_not_seen() {
    let fake = Fake::two_shards();
    let dir = TempDir::new("listed-shard");
    // Shard 1 holds the demo guild (what the harness waits for); shard 0 is another node's.
    let sb = Switchboard::start_sections(
        &fake,
        dir.path(),
        &both_guilds(),
        Sections {
            discord: "shard_count = 2",
            extra: "[cluster]\nnode_id = \"node-b\"\nshards = [1]\n",
            ..Sections::default()
        },
    );
    let health = wait_shards_ready(&sb, &[1], INGEST);
    assert_eq!(health["node"], "node-b", "{health}");
    let seen = fake.post(demo::OPS, demo::STANLEY, "on shard 1");
    let unseen = fake.post(ANNEX_GENERAL, demo::STANLEY, "on shard 0");
    sb.wait_listed("#ops", &[seen], INGEST);
    let annex = sb.list(&ANNEX_GENERAL.to_string());
    assert!(
        !annex.iter().any(|m| m["messageId"] == unseen.as_str()),
        "shard 0 is not this node's: {annex:?}"
    );
    let shards: Vec<Option<[u32; 2]>> = fake.fake.identifies().iter().map(|i| i.shard).collect();
    assert_eq!(shards, vec![Some([1, 2])]);
}

#[test]
fn a_4011_is_named_in_the_log_and_the_gateway_restarts_with_the_recommended_count() {
    let fake = fake_requiring_two_shards();
    let dir = TempDir::new("sharding-required");
    let sb = Switchboard::start_sections(
        &fake,
        dir.path(),
        &both_guilds(),
        Sections {
            discord: "shard_count = 1",
            ..Sections::default()
        },
    );
    wait_shards_ready(&sb, &[0, 1], Duration::from_secs(60));
    let log = sb.stderr();
    assert!(
        log.contains("4011") && log.contains("sharding required"),
        "the log names the close code: {log}"
    );
    assert!(log.contains("restarting with 2 shards"), "{log}");
    let on_shard_0 = fake.post(ANNEX_GENERAL, demo::STANLEY, "after resharding");
    sb.wait_listed(&ANNEX_GENERAL.to_string(), &[on_shard_0], INGEST);
    // Each shard of the new count identified once: serenity's own restart of the refused
    // shard did not start a second session of shard 0 beside the reshard's.
    assert_eq!(
        accepted_identifies(&fake),
        vec![[0, 2], [1, 2]],
        "{:?}",
        fake.fake.identifies()
    );
}

/// `cluster.shards = "lease"` on `url`, as `node`, leases of 6 s (renewed every 2 s).
fn lease_node(fake: &Fake, dir: &TempDir, url: &str, node: &str) -> Switchboard {
    lease_node_with(fake, dir, url, node, "")
}

/// [`lease_node`] with `discord` keys.
fn lease_node_with(
    fake: &Fake,
    dir: &TempDir,
    url: &str,
    node: &str,
    discord: &str,
) -> Switchboard {
    let extra = format!("[cluster]\nnode_id = \"{node}\"\nshards = \"lease\"\nlease_s = 6\n");
    Switchboard::start_sections(
        fake,
        dir.path(),
        &both_guilds(),
        Sections {
            discord,
            extra: &extra,
            store_url: Some(url),
            ..Sections::default()
        },
    )
}

/// A fake that closes a bot identifying with one shard with 4011 (each shard may hold one
/// guild, the bot has two) and recommends 2 shards.
fn fake_requiring_two_shards() -> Fake {
    let mut world = two_shard_world();
    world.guilds_per_shard_max = Some(1);
    Fake::start_with(
        world,
        FakeOptions {
            shards: 2,
            // serenity spins on a 4011-closed socket until its next heartbeat is due.
            heartbeat_interval_ms: 1_000,
            ..FakeOptions::default()
        },
    )
}

#[test]
fn a_4011_on_lease_nodes_raises_the_cluster_shard_count_and_every_node_leases_anew() {
    use switchboard_store_postgres::testing::PgCluster;
    let cluster = PgCluster::shared();
    let url = cluster.url(&cluster.database().expect("a database"));
    let fake = fake_requiring_two_shards();
    let (dir_a, dir_b) = (TempDir::new("reshard-a"), TempDir::new("reshard-b"));
    // Both nodes are told one shard; node-a's IDENTIFY is closed with 4011, so it raises the
    // cluster's count to Discord's 2 and, alone, runs both.
    let a = lease_node_with(&fake, &dir_a, &url, "node-a", "shard_count = 1");
    wait_shards_ready(&a, &[0, 1], Duration::from_secs(60));
    let log_a = a.stderr();
    assert!(
        log_a.contains("4011") && log_a.contains("raising the cluster's shard count to 2"),
        "{log_a}"
    );
    // node-b starts with the count of its config (1), finds the cluster's (2) and follows it
    // without a 4011 of its own; the two share the shards.
    let b = lease_node_with(&fake, &dir_b, &url, "node-b", "shard_count = 1");
    let health_a = wait_shards_ready(&a, &[0], Duration::from_secs(40));
    let health_b = wait_shards_ready(&b, &[1], Duration::from_secs(40));
    assert_eq!(health_a["status"], "ok", "{health_a}");
    assert_eq!(health_b["status"], "ok", "{health_b}");
    let log_b = b.stderr();
    assert!(
        log_b.contains("the cluster's shard count changed") && !log_b.contains("4011"),
        "{log_b}"
    );
    // Every IDENTIFY accepted since is of the 2-shard count, once per shard per start.
    let accepted = accepted_identifies(&fake);
    assert!(accepted.iter().all(|s| s[1] == 2), "{accepted:?}");
    let lab = fake.post(demo::OPS, demo::STANLEY, "to node-b's shard");
    let annex = fake.post(ANNEX_GENERAL, demo::STANLEY, "to node-a's shard");
    b.wait_listed("#ops", &[lab], INGEST);
    a.wait_listed(&ANNEX_GENERAL.to_string(), &[annex], INGEST);
}

#[test]
fn a_4011_on_a_static_shard_list_stops_its_shards_and_health_says_why() {
    let fake = fake_requiring_two_shards();
    let dir = TempDir::new("list-4011");
    let sb = Switchboard::start_sections(
        &fake,
        dir.path(),
        &both_guilds(),
        Sections {
            discord: "shard_count = 1",
            extra: "[cluster]\nnode_id = \"node-l\"\nshards = [0]\n",
            no_gateway_wait: true,
            ..Sections::default()
        },
    );
    let degraded = wait_health(
        &sb,
        Duration::from_secs(30),
        "a degraded /health after a 4011",
        |health| health["status"] == "degraded" && health["reason"].is_string(),
    );
    let reason = degraded["reason"].as_str().unwrap_or_default();
    assert!(
        reason.contains("4011") && reason.contains("cluster.shards lists [0]"),
        "{degraded}"
    );
    assert_eq!(degraded["shards"], serde_json::json!([]), "{degraded}");
    assert!(sb.stderr().contains(reason), "the log says it too");
    // The refused shard is stopped: no IDENTIFY follows (serenity would retry every few s).
    let before = fake.fake.identifies().len();
    std::thread::sleep(Duration::from_secs(8));
    assert_eq!(
        fake.fake.identifies().len(),
        before,
        "{:?}",
        fake.fake.identifies()
    );
    assert_eq!(health(&sb)["status"], "degraded");
}

#[test]
fn two_lease_nodes_run_one_shard_each_and_the_survivor_takes_both_after_a_kill() {
    use switchboard_store_postgres::testing::PgCluster;
    let cluster = PgCluster::shared();
    let url = cluster.url(&cluster.database().expect("a database"));
    let fake = Fake::two_shards();
    let (dir_a, dir_b) = (TempDir::new("lease-a"), TempDir::new("lease-b"));
    // Alone, node-a's fair share is both shards.
    let a = lease_node(&fake, &dir_a, &url, "node-a");
    wait_shards_ready(&a, &[0, 1], INGEST);
    // node-b joins: the share is one each; node-a gives its highest back and node-b takes it.
    let b = lease_node(&fake, &dir_b, &url, "node-b");
    let health_a = wait_shards_ready(&a, &[0], Duration::from_secs(40));
    let health_b = wait_shards_ready(&b, &[1], Duration::from_secs(40));
    assert_eq!(health_a["store"], "postgres", "{health_a}");
    assert_eq!(health_b["node"], "node-b", "{health_b}");
    // Both guilds' messages arrive, each on the node that runs its shard.
    let lab = fake.post(demo::OPS, demo::STANLEY, "to node-b's shard");
    let annex = fake.post(ANNEX_GENERAL, demo::STANLEY, "to node-a's shard");
    b.wait_listed("#ops", &[lab], INGEST);
    a.wait_listed(&ANNEX_GENERAL.to_string(), &[annex], INGEST);
    // `switchboard cluster status` lists both nodes live with their shards, and the leases.
    let status = std::process::Command::new(env!("CARGO_BIN_EXE_switchboard"))
        .args(["cluster", "status", "--url", &a.url])
        .current_dir(dir_a.path())
        .env_remove("SWITCHBOARD_CONFIG")
        .env("SWITCHBOARD_TOKEN", &a.token)
        .output()
        .expect("run switchboard cluster status");
    let text = String::from_utf8_lossy(&status.stdout);
    assert!(
        status.status.success(),
        "{text}{}",
        String::from_utf8_lossy(&status.stderr)
    );
    let line_of = |node: &str| {
        text.lines()
            .find(|l| l.starts_with(node))
            .unwrap_or_else(|| panic!("no line for {node}: {text}"))
            .to_owned()
    };
    assert!(
        line_of("node-a").contains("live") && line_of("node-a").contains("shards 0 "),
        "{text}"
    );
    assert!(
        line_of("node-b").contains("live") && line_of("node-b").contains("shards 1 "),
        "{text}"
    );
    assert!(text.contains("leases:"), "{text}");
    // node-b dies without a word: once its lease ends, node-a runs both shards.
    let killed = Instant::now();
    b.kill();
    wait_shards_ready(&a, &[0, 1], Duration::from_secs(45));
    let took = killed.elapsed();
    // The lease (6 s), a renewal period (2 s), serenity's restart wait and the bucket's
    // IDENTIFY spacing (5 s each), and margin.
    assert!(took < Duration::from_secs(40), "took over after {took:?}");
    let after = fake.post(demo::OPS, demo::STANLEY, "after the takeover");
    a.wait_listed("#ops", &[after], INGEST);
    assert_identifies_spaced(&fake);
}

/// With one shard and two lease nodes, the second is a spare: its `/health` says `ok` (not
/// `degraded`), `discord: "standby"` and no shards; when the first dies it takes the shard and
/// says `ready`.
#[test]
fn a_spare_lease_node_is_healthy_holds_no_shard_and_takes_one_when_it_is_free() {
    use switchboard_store_postgres::testing::PgCluster;
    let cluster = PgCluster::shared();
    let url = cluster.url(&cluster.database().expect("a database"));
    let fake = Fake::start();
    let (dir_a, dir_b) = (TempDir::new("spare-a"), TempDir::new("spare-b"));
    let a = lease_node(&fake, &dir_a, &url, "node-a");
    wait_shards_ready(&a, &[0], INGEST);
    let extra = "[cluster]\nnode_id = \"node-b\"\nshards = \"lease\"\nlease_s = 6\n";
    let b = Switchboard::start_sections(
        &fake,
        dir_b.path(),
        &both_guilds(),
        Sections {
            extra,
            store_url: Some(&url),
            no_gateway_wait: true,
            ..Sections::default()
        },
    );
    // Past a few lease renewals: it tried for a shard and found none free.
    std::thread::sleep(Duration::from_secs(8));
    let spare = health(&b);
    assert_eq!(spare["status"], "ok", "{spare}\n{}", b.stderr());
    assert_eq!(spare["discord"], "standby", "{spare}");
    assert_eq!(spare["shards"], serde_json::json!([]), "{spare}");
    assert_eq!(spare["node"], "node-b", "{spare}");
    assert!(spare.get("reason").is_none(), "{spare}");
    // The holder's health is unchanged.
    assert_eq!(health(&a)["discord"], "ready");
    // The spare is a real standby: the shard is its once the holder is gone.
    a.kill();
    wait_shards_ready(&b, &[0], Duration::from_secs(45));
    let deadline = Instant::now() + INGEST;
    loop {
        let took = health(&b);
        if took["status"] == "ok" && took["discord"] == "ready" {
            break;
        }
        assert!(Instant::now() < deadline, "{took}");
        std::thread::sleep(Duration::from_millis(200));
    }
}

/// Two nodes on one PostgreSQL each connect (every shard: `cluster.shards = "all"`) and see
/// READY; the slash commands are PUT once for the cluster, not once per node.
#[test]
fn two_nodes_register_the_slash_commands_once() {
    use switchboard_store_postgres::testing::PgCluster;
    let cluster = PgCluster::shared();
    let url = cluster.url(&cluster.database().expect("a database"));
    let fake = Fake::start();
    let (dir_a, dir_b) = (TempDir::new("commands-a"), TempDir::new("commands-b"));
    let node = |dir: &TempDir, name: &str| {
        let extra = format!("[cluster]\nnode_id = \"{name}\"\n");
        Switchboard::start_sections(
            &fake,
            dir.path(),
            &Allow::default(),
            Sections {
                extra: &extra,
                store_url: Some(&url),
                ..Sections::default()
            },
        )
    };
    let a = node(&dir_a, "node-a");
    let b = node(&dir_b, "node-b");
    for sb in [&a, &b] {
        wait_shards_ready(sb, &[0], INGEST);
    }
    let puts = || {
        fake.fake
            .requests()
            .iter()
            .filter(|r| r.method == "PUT" && r.path.ends_with("/commands"))
            .count()
    };
    // Registration follows READY: wait (bounded) for the first PUT, then give a second
    // node's PUT time to show up too.
    let deadline = Instant::now() + INGEST;
    while puts() == 0 {
        assert!(Instant::now() < deadline, "no node registered the commands");
        std::thread::sleep(Duration::from_millis(100));
    }
    std::thread::sleep(Duration::from_secs(3));
    assert_eq!(puts(), 1, "{}\n{}", a.stderr(), b.stderr());
    assert!(
        fake.fake.commands()["global"]
            .as_array()
            .is_some_and(|c| !c.is_empty()),
        "the commands are registered"
    );
}

/// A node that loses PostgreSQL says `degraded` on `/health`, with the reason, and keeps its
/// gateway; once PostgreSQL is back it says `ok` again, and a message posted while it was away
/// is stored (nothing acknowledged is lost).
#[test]
fn a_node_that_loses_postgres_says_degraded_until_it_is_back() {
    use switchboard_store_postgres::testing::PgCluster;
    // Its own cluster: stopping the shared one would pull it from under other tests.
    let cluster = PgCluster::start().expect("a PostgreSQL cluster");
    let url = cluster.url(&cluster.database().expect("a database"));
    let fake = Fake::start();
    let dir = TempDir::new("degraded");
    let sb = Switchboard::start_sections(
        &fake,
        dir.path(),
        &Allow::default(),
        Sections {
            // Heartbeats every second.
            extra: "[cluster]\nnode_id = \"node-a\"\nlease_s = 3\n",
            store_url: Some(&url),
            ..Sections::default()
        },
    );
    wait_shards_ready(&sb, &[0], INGEST);
    let wait_for = |want: &str| {
        let deadline = Instant::now() + INGEST;
        loop {
            let health = health(&sb);
            if health["status"] == want {
                return health;
            }
            assert!(
                Instant::now() < deadline,
                "/health never said {want}: {health}\n{}",
                sb.stderr()
            );
            std::thread::sleep(Duration::from_millis(200));
        }
    };
    assert!(wait_for("ok").get("reason").is_none());
    cluster.stop_immediate().expect("stop PostgreSQL");
    let degraded = wait_for("degraded");
    let reason = degraded["reason"].as_str().unwrap_or_default();
    assert!(reason.contains("postgres"), "{degraded}");
    assert_eq!(
        degraded["discord"], "ready",
        "the gateway stays up: {degraded}"
    );
    let while_away = fake.post(demo::OPS, demo::STANLEY, "posted while the store was away");
    cluster.start_again().expect("start PostgreSQL again");
    let back = wait_for("ok");
    assert!(back.get("reason").is_none(), "{back}");
    sb.wait_listed("#ops", &[while_away], INGEST);
}

/// Mints a capability through `sb`'s API (as the operator): the token.
fn mint_on(sb: &Switchboard, session: u64, ttl_s: u64) -> String {
    let body = serde_json::json!({
        "sessionId": session.to_string(),
        "scope": ["surface.*"],
        "ttlS": ttl_s,
    })
    .to_string();
    let host = sb.url.trim_start_matches("http://").to_owned();
    let bearer = format!("Bearer {}", sb.token);
    let (status, answer) = support::http_send(
        &sb.url,
        "POST",
        "/v1/capabilities",
        &[
            ("Host", &host),
            ("Authorization", &bearer),
            ("Content-Type", "application/json"),
        ],
        &body,
    )
    .expect("mint");
    assert_eq!(status, 201, "{answer}");
    let answer: Value = serde_json::from_str(&answer).expect("json");
    answer["value"]["token"]
        .as_str()
        .expect("a token")
        .to_owned()
}

/// A capability minted through node A's API is valid on node B, another process on the same
/// PostgreSQL (a `tools` call behind a load balancer may reach either); a token never minted
/// is refused on B exactly as on A; once expired, both refuse it.
#[test]
fn a_capability_minted_on_one_node_is_valid_on_the_other() {
    use switchboard_store_postgres::testing::PgCluster;
    let cluster = PgCluster::shared();
    let url = cluster.url(&cluster.database().expect("a database"));
    let fake = Fake::two_shards();
    let (dir_a, dir_b) = (TempDir::new("caps-a"), TempDir::new("caps-b"));
    let a = lease_node(&fake, &dir_a, &url, "node-a");
    let b = lease_node(&fake, &dir_b, &url, "node-b");

    let token = mint_on(&a, demo::OPS, 4);
    let listed = support::tools_at(&b.url, &token, &["surface.messages.list"]);
    assert_eq!(
        listed.code,
        Some(0),
        "node B accepts node A's token: {listed:?}"
    );
    let on_a = support::tools_at(&a.url, &token, &["surface.messages.list"]);
    assert_eq!(on_a.code, Some(0), "{on_a:?}");

    let never_minted = format!("sbcap_{}", "ab".repeat(32));
    let on_b = support::tools_at(&b.url, &never_minted, &["surface.help"]);
    let on_a = support::tools_at(&a.url, &never_minted, &["surface.help"]);
    assert_eq!(on_b.code, on_a.code, "{on_b:?} {on_a:?}");
    assert!(on_b.stderr.contains("invalid_token"), "{on_b:?}");

    std::thread::sleep(Duration::from_secs(5));
    for (node, sb) in [("A", &a), ("B", &b)] {
        let late = support::tools_at(&sb.url, &token, &["surface.help"]);
        assert_ne!(late.code, Some(0), "node {node} refuses an expired token");
        assert!(
            late.stderr.contains("token_expired"),
            "node {node}: {late:?}"
        );
    }
}
