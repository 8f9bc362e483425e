//! `discord.shard_count` and `[cluster]` (issue 23): how many gateway shards the bot runs,
//! this node's name, and which shards it runs — every one, a fixed list, or those it leases in
//! PostgreSQL.

use std::fmt;
use std::time::Duration;

use serde::de::{self, SeqAccess, Visitor};
use serde::{Deserialize, Deserializer};
use toml::Spanned;

use crate::report::Collector;
use crate::StoreUrl;

/// The most shards switchboard runs (Discord's largest bots use a few thousand).
pub const MAX_SHARD_COUNT: u32 = 65_536;

/// The longest `cluster.node_id`.
pub const MAX_NODE_ID_CHARS: usize = 64;

/// `cluster.lease_s` unless set: a node that stops renewing frees its shards after this long.
pub const DEFAULT_LEASE: Duration = Duration::from_secs(20);

/// `discord.shard_count`.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Default)]
pub enum ShardCount {
    /// `"auto"` (the default): the count `GET /gateway/bot` recommends.
    #[default]
    Auto,
    /// A fixed count, 1 to [`MAX_SHARD_COUNT`].
    Fixed(u32),
}

/// `cluster.shards`: which of the bot's shards this node runs.
#[derive(Debug, Clone, PartialEq, Eq, Default)]
pub enum ShardSelection {
    /// `"all"` (the default): every shard, on this one node.
    #[default]
    All,
    /// `"lease"`: the shards this node leases in PostgreSQL, at most its fair share.
    Lease,
    /// A list: exactly these shards (static ownership), ascending, no duplicates.
    Ids(Vec<u32>),
}

/// `[cluster]`.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct ClusterConfig {
    /// `cluster.node_id` (`[A-Za-z0-9._-]`, 1 to 64 characters); default: the host name and
    /// this process's id ([`default_node_id`]).
    pub node_id: String,
    /// `cluster.shards`.
    pub shards: ShardSelection,
    /// `cluster.lease_s` (default 20, 3 to 600): how long a shard's lease lasts unrenewed.
    pub lease: Duration,
}

impl Default for ClusterConfig {
    fn default() -> Self {
        ClusterConfig {
            node_id: default_node_id(),
            shards: ShardSelection::All,
            lease: DEFAULT_LEASE,
        }
    }
}

/// Whether `id` may name a node: 1 to 64 of `A-Z a-z 0-9 . _ -`.
pub fn is_valid_node_id(id: &str) -> bool {
    (1..=MAX_NODE_ID_CHARS).contains(&id.len())
        && id
            .bytes()
            .all(|b| b.is_ascii_alphanumeric() || matches!(b, b'.' | b'_' | b'-'))
}

/// The host name and this process's id (`host-1234`), cut to a valid node id: a node restarted
/// on the same machine is a new node, and two on one machine differ.
pub fn default_node_id() -> String {
    let host = std::fs::read_to_string("/proc/sys/kernel/hostname")
        .ok()
        .or_else(|| std::env::var("HOSTNAME").ok())
        .unwrap_or_default();
    let pid = std::process::id().to_string();
    let mut host: String = host
        .trim()
        .chars()
        .map(|c| {
            if c.is_ascii_alphanumeric() || matches!(c, '.' | '_' | '-') {
                c
            } else {
                '-'
            }
        })
        .collect();
    if host.is_empty() {
        host.push_str("node");
    }
    host.truncate(MAX_NODE_ID_CHARS - pid.len() - 1);
    format!("{host}-{pid}")
}

/// `discord.shard_count` as written: `"auto"` or a whole number.
#[derive(Debug, Clone)]
pub(crate) enum RawShardCount {
    Word(String),
    Count(i64),
}

impl<'de> Deserialize<'de> for RawShardCount {
    fn deserialize<D: Deserializer<'de>>(deserializer: D) -> Result<Self, D::Error> {
        struct V;
        impl Visitor<'_> for V {
            type Value = RawShardCount;
            fn expecting(&self, f: &mut fmt::Formatter) -> fmt::Result {
                f.write_str(r#""auto" or a whole number of shards"#)
            }
            fn visit_str<E: de::Error>(self, value: &str) -> Result<Self::Value, E> {
                Ok(RawShardCount::Word(value.to_owned()))
            }
            fn visit_i64<E: de::Error>(self, value: i64) -> Result<Self::Value, E> {
                Ok(RawShardCount::Count(value))
            }
            fn visit_u64<E: de::Error>(self, value: u64) -> Result<Self::Value, E> {
                Ok(RawShardCount::Count(
                    i64::try_from(value).unwrap_or(i64::MAX),
                ))
            }
        }
        deserializer.deserialize_any(V)
    }
}

/// `cluster.shards` as written: a word, or a list of shard ids each with its place.
#[derive(Debug, Clone)]
pub(crate) enum RawShards {
    Word(String),
    Ids(Vec<Spanned<i64>>),
}

impl<'de> Deserialize<'de> for RawShards {
    fn deserialize<D: Deserializer<'de>>(deserializer: D) -> Result<Self, D::Error> {
        struct V;
        impl<'de> Visitor<'de> for V {
            type Value = RawShards;
            fn expecting(&self, f: &mut fmt::Formatter) -> fmt::Result {
                f.write_str(r#""all", "lease", or a list of shard ids such as [0, 1]"#)
            }
            fn visit_str<E: de::Error>(self, value: &str) -> Result<Self::Value, E> {
                Ok(RawShards::Word(value.to_owned()))
            }
            fn visit_seq<A: SeqAccess<'de>>(self, mut seq: A) -> Result<Self::Value, A::Error> {
                let mut ids = Vec::new();
                while let Some(id) = seq.next_element::<Spanned<i64>>()? {
                    ids.push(id);
                }
                Ok(RawShards::Ids(ids))
            }
        }
        deserializer.deserialize_any(V)
    }
}

/// `[cluster]` as written.
#[derive(Debug, Default, Deserialize)]
#[serde(deny_unknown_fields)]
pub(crate) struct RawCluster {
    #[serde(default)]
    pub node_id: Option<Spanned<String>>,
    #[serde(default)]
    pub shards: Option<Spanned<RawShards>>,
    #[serde(default)]
    pub lease_s: Option<Spanned<u64>>,
}

/// `discord.shard_count`, checked.
pub(crate) fn shard_count(raw: Option<&Spanned<RawShardCount>>, c: &mut Collector) -> ShardCount {
    let Some(raw) = raw else {
        return ShardCount::Auto;
    };
    let help = format!(
        "write shard_count = \"auto\" (Discord's recommendation) or a whole number from 1 to {MAX_SHARD_COUNT}"
    );
    match raw.get_ref() {
        RawShardCount::Word(word) if word == "auto" => ShardCount::Auto,
        RawShardCount::Word(word) => {
            c.add(
                Some(raw.span()),
                "discord.shard_count",
                format!("\"{word}\" is not a shard count"),
                help,
            );
            ShardCount::Auto
        }
        RawShardCount::Count(count) => match u32::try_from(*count) {
            Ok(count) if (1..=MAX_SHARD_COUNT).contains(&count) => ShardCount::Fixed(count),
            _ => {
                c.add(
                    Some(raw.span()),
                    "discord.shard_count",
                    format!("{count} shards is out of range"),
                    help,
                );
                ShardCount::Auto
            }
        },
    }
}

/// `[cluster]`, checked against the shard count and the store it runs on.
pub(crate) fn cluster(
    raw: &RawCluster,
    count: ShardCount,
    store: &StoreUrl,
    c: &mut Collector,
) -> ClusterConfig {
    let node_id = match &raw.node_id {
        Some(id) if is_valid_node_id(id.get_ref()) => id.get_ref().clone(),
        Some(id) => {
            c.add(
                Some(id.span()),
                "cluster.node_id",
                format!("\"{}\" is not a node id", id.get_ref()),
                format!("a node id is 1 to {MAX_NODE_ID_CHARS} of the characters A-Z a-z 0-9 . _ - (e.g. \"node-a\"); leave it out for the host name and process id"),
            );
            default_node_id()
        }
        None => default_node_id(),
    };
    let lease = match &raw.lease_s {
        Some(seconds) => Duration::from_secs(crate::validate::bounded_because(
            seconds,
            "cluster.lease_s",
            3..=600,
            "seconds a shard's lease lasts unrenewed: how long a stopped node's shards wait before another node takes them",
            c,
        )),
        None => DEFAULT_LEASE,
    };
    let shards = match &raw.shards {
        None => ShardSelection::All,
        Some(raw) => shards(raw, count, store, c),
    };
    ClusterConfig {
        node_id,
        shards,
        lease,
    }
}

fn shards(
    raw: &Spanned<RawShards>,
    count: ShardCount,
    store: &StoreUrl,
    c: &mut Collector,
) -> ShardSelection {
    match raw.get_ref() {
        RawShards::Word(word) if word == "all" => ShardSelection::All,
        RawShards::Word(word) if word == "lease" => {
            if !matches!(store, StoreUrl::Postgres(_)) {
                c.add(
                    Some(raw.span()),
                    "cluster.shards",
                    format!(
                        "shards are leased in the store, and the store is {}: one node only",
                        match store {
                            StoreUrl::Sqlite(_) => "SQLite",
                            _ => "in memory",
                        }
                    ),
                    "for several nodes use store.url = postgres://… (see `switchboard store copy` to move an SQLite store); on one node write shards = \"all\"",
                );
            }
            ShardSelection::Lease
        }
        RawShards::Word(word) => {
            c.add(
                Some(raw.span()),
                "cluster.shards",
                format!("\"{word}\" is not a shard selection"),
                "write \"all\" (this node runs every shard), \"lease\" (nodes share the shards through PostgreSQL) or a list of shard ids such as [0, 1]",
            );
            ShardSelection::All
        }
        RawShards::Ids(ids) if ids.is_empty() => {
            c.add(
                Some(raw.span()),
                "cluster.shards",
                "the list of shards is empty: this node would run no gateway at all",
                "list the shard ids this node runs, e.g. [0, 1], or write \"all\" or \"lease\"",
            );
            ShardSelection::All
        }
        RawShards::Ids(ids) => {
            let mut kept: Vec<u32> = Vec::with_capacity(ids.len());
            for (index, id) in ids.iter().enumerate() {
                let key = format!("cluster.shards[{index}]");
                let value = *id.get_ref();
                let in_range = match count {
                    ShardCount::Fixed(total) => u32::try_from(value).ok().filter(|v| *v < total),
                    ShardCount::Auto => u32::try_from(value).ok().filter(|v| *v < MAX_SHARD_COUNT),
                };
                let Some(shard) = in_range else {
                    let help = match count {
                        ShardCount::Fixed(total) => format!(
                            "discord.shard_count is {total}: shard ids go from 0 to {}",
                            total - 1
                        ),
                        ShardCount::Auto => format!(
                            "a shard id is a whole number from 0 to {}",
                            MAX_SHARD_COUNT - 1
                        ),
                    };
                    c.add(
                        Some(id.span()),
                        key,
                        format!("{value} is not a shard of this bot"),
                        help,
                    );
                    continue;
                };
                if kept.contains(&shard) {
                    c.add(
                        Some(id.span()),
                        key,
                        format!("shard {shard} is listed twice"),
                        "list each shard once",
                    );
                    continue;
                }
                kept.push(shard);
            }
            kept.sort_unstable();
            if kept.is_empty() {
                ShardSelection::All
            } else {
                ShardSelection::Ids(kept)
            }
        }
    }
}
