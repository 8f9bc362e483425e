//! `discord.shard_count` and `[cluster]`: defaults, what is accepted, and every kind of garbage
//! reported at its place with what to write instead.

use std::time::Duration;

use proptest::prelude::*;
use switchboard_config::{is_valid_node_id, Config, ShardCount, ShardSelection, DEFAULT_LEASE};

const POSTGRES: &str = "[store]\nurl = \"postgres://switchboard@localhost/switchboard\"\n";

fn problems(text: &str) -> Vec<String> {
    match Config::parse(text, "test.toml") {
        Ok(_) => Vec::new(),
        Err(report) => report
            .problems
            .iter()
            .map(|p| {
                format!(
                    "{}:{} {} | {} | {}",
                    p.line, p.column, p.key_path, p.message, p.help
                )
            })
            .collect(),
    }
}

#[test]
fn an_empty_file_runs_every_shard_at_discords_recommendation_under_a_host_and_pid_node_id() {
    let config = Config::parse("", "t").unwrap();
    assert_eq!(config.discord.shard_count, ShardCount::Auto);
    assert_eq!(config.cluster.shards, ShardSelection::All);
    assert_eq!(config.cluster.lease, DEFAULT_LEASE);
    assert_eq!(DEFAULT_LEASE, Duration::from_secs(20));
    let id = &config.cluster.node_id;
    assert!(is_valid_node_id(id), "{id}");
    assert!(
        id.ends_with(&format!("-{}", std::process::id())),
        "the pid ends the default node id: {id}"
    );
}

#[test]
fn a_fixed_shard_count_a_node_id_a_list_and_a_lease_period_are_read() {
    let config = Config::parse(
        "[discord]\nshard_count = 4\n[cluster]\nnode_id = \"node-a.eu_1\"\nshards = [3, 1]\nlease_s = 30\n",
        "t",
    )
    .unwrap();
    assert_eq!(config.discord.shard_count, ShardCount::Fixed(4));
    assert_eq!(config.cluster.node_id, "node-a.eu_1");
    assert_eq!(config.cluster.shards, ShardSelection::Ids(vec![1, 3]));
    assert_eq!(config.cluster.lease, Duration::from_secs(30));
    let config = Config::parse(
        "[discord]\nshard_count = \"auto\"\n[cluster]\nshards = \"all\"\n",
        "t",
    )
    .unwrap();
    assert_eq!(config.discord.shard_count, ShardCount::Auto);
    assert_eq!(config.cluster.shards, ShardSelection::All);
}

#[test]
fn lease_on_postgres_is_accepted() {
    let config = Config::parse(&format!("{POSTGRES}[cluster]\nshards = \"lease\"\n"), "t").unwrap();
    assert_eq!(config.cluster.shards, ShardSelection::Lease);
}

#[test]
fn lease_on_sqlite_or_memory_is_a_located_error_that_says_to_use_postgres() {
    for store in [
        "",
        "[store]\nurl = \"sqlite://x.db\"\n",
        "[store]\nurl = \"memory:\"\n",
    ] {
        let found = problems(&format!("{store}[cluster]\nshards = \"lease\"\n"));
        assert_eq!(found.len(), 1, "{store}: {found:#?}");
        let line = store.lines().count() + 2;
        assert!(
            found[0].starts_with(&format!("{line}:10 cluster.shards")),
            "{found:#?}"
        );
        assert!(found[0].contains("one node only"), "{found:#?}");
        assert!(found[0].contains("postgres://"), "{found:#?}");
    }
}

#[test]
fn garbage_shard_counts_are_located_errors() {
    for bad in [
        "0", "-1", "65537", "\"many\"", "\"AUTO\"", "1.5", "[2]", "true",
    ] {
        let found = problems(&format!("[discord]\nshard_count = {bad}\n"));
        assert_eq!(found.len(), 1, "{bad}: {found:#?}");
        assert!(
            found[0].starts_with("2:") && found[0].contains("shard_count"),
            "{bad}: {found:#?}"
        );
    }
}

#[test]
fn shard_ids_at_or_past_a_fixed_count_are_refused_each_at_its_place() {
    let found = problems("[discord]\nshard_count = 2\n[cluster]\nshards = [0, 2, 7]\n");
    assert_eq!(found.len(), 2, "{found:#?}");
    assert!(found[0].starts_with("4:14 cluster.shards[1]"), "{found:#?}");
    assert!(found[0].contains("shard ids go from 0 to 1"), "{found:#?}");
    assert!(found[1].starts_with("4:17 cluster.shards[2]"), "{found:#?}");
}

#[test]
fn an_empty_list_duplicates_and_negative_ids_are_refused() {
    let found = problems("[cluster]\nshards = []\n");
    assert_eq!(found.len(), 1, "{found:#?}");
    assert!(found[0].contains("empty"), "{found:#?}");
    let found = problems("[cluster]\nshards = [1, 0, 1]\n");
    assert_eq!(found.len(), 1, "{found:#?}");
    assert!(found[0].starts_with("2:17 cluster.shards[2]"), "{found:#?}");
    assert!(found[0].contains("listed twice"), "{found:#?}");
    let found = problems("[cluster]\nshards = [-1]\n");
    assert_eq!(found.len(), 1, "{found:#?}");
    assert!(found[0].contains("cluster.shards"), "{found:#?}");
}

#[test]
fn garbage_selections_lease_periods_and_unknown_keys_are_refused() {
    for (bad, key) in [
        ("shards = \"some\"", "cluster.shards"),
        ("shards = 3", "cluster.shards"),
        ("lease_s = 2", "cluster.lease_s"),
        ("lease_s = 601", "cluster.lease_s"),
        ("lease_s = \"20s\"", "cluster.lease_s"),
        ("leases = 20", "cluster.leases"),
    ] {
        let found = problems(&format!("[cluster]\n{bad}\n"));
        assert_eq!(found.len(), 1, "{bad}: {found:#?}");
        assert!(found[0].contains(key), "{bad}: {found:#?}");
    }
    // A quoted id is a type error at the id (the list it leaves empty is reported too).
    let found = problems("[cluster]\nshards = [\"0\"]\n");
    assert!(
        found
            .iter()
            .any(|p| p.starts_with("2:11 cluster.shards[0]")),
        "{found:#?}"
    );
}

#[test]
fn bad_node_ids_are_refused_with_the_grammar() {
    let long = "n".repeat(65);
    for bad in ["", "node a", "node/a", "nöde", long.as_str()] {
        let found = problems(&format!("[cluster]\nnode_id = \"{bad}\"\n"));
        assert_eq!(found.len(), 1, "{bad}: {found:#?}");
        assert!(found[0].starts_with("2:11 cluster.node_id"), "{found:#?}");
        assert!(found[0].contains("A-Z a-z 0-9 . _ -"), "{found:#?}");
    }
    let found = problems("[cluster]\nnode_id = 7\n");
    assert_eq!(found.len(), 1, "{found:#?}");
}

#[test]
fn a_reload_keeps_the_running_shards_and_cluster_and_says_a_restart_is_needed() {
    let running = Config::parse("[discord]\nshard_count = 2\n", "t").unwrap();
    let new = Config::parse(
        "[discord]\nshard_count = 4\n[cluster]\nnode_id = \"b\"\nshards = [1]\n",
        "t",
    )
    .unwrap();
    let plan = switchboard_config::plan_reload(&running, new);
    assert_eq!(plan.effective.discord.shard_count, ShardCount::Fixed(2));
    assert_eq!(plan.effective.cluster, running.cluster);
    assert!(
        plan.restart_needed.contains(&"discord.shard_count"),
        "{plan:?}"
    );
    assert!(plan.restart_needed.contains(&"cluster"), "{plan:?}");
}

proptest! {
    #[test]
    fn node_ids_are_valid_exactly_when_they_match_the_grammar(id in "\\PC{0,70}") {
        let expected = (1..=64).contains(&id.len())
            && id.chars().all(|c| c.is_ascii_alphanumeric() || ".-_".contains(c));
        prop_assert_eq!(is_valid_node_id(&id), expected);
        let text = format!("[cluster]\nnode_id = {}\n", toml::Value::String(id.clone()));
        let parsed = Config::parse(&text, "t");
        prop_assert_eq!(parsed.is_ok(), expected);
    }
}
