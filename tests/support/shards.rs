//! Two gateway shards with a guild on each (issue 23): the world and the fake the cluster
//! tests and the cluster bench start.

use std::time::{Duration, Instant};

use fake_discord::{demo, shard_of, ChannelSpec, FakeOptions, GuildSpec, Snowflake, World};
use serde_json::Value;

use super::{http_get, Fake, Switchboard};

/// A guild on shard 0 of 2 (the demo guild `Lab` is on shard 1 of 2).
pub const ANNEX: u64 = demo::GUILD + (1 << 22);
/// `#annex-general`, a text channel of [`ANNEX`].
pub const ANNEX_GENERAL: u64 = ANNEX + 1;

/// The demo world plus the guild Annex: a guild on each of two shards.
pub fn two_shard_world() -> World {
    let mut world = World::demo();
    world.guilds.push(GuildSpec {
        id: Snowflake(ANNEX),
        name: "Annex".into(),
        owner_id: None,
        roles: Vec::new(),
        channels: vec![ChannelSpec {
            id: Snowflake(ANNEX_GENERAL),
            name: "annex-general".into(),
            kind: 0,
            parent_id: None,
            topic: None,
            bot_can_see: true,
            bot_can_send: true,
            bot_can_manage_messages: true,
            archived: false,
        }],
        members: None,
        bot_can_manage_channels: true,
        emojis: Vec::new(),
    });
    assert_eq!(shard_of(Snowflake(ANNEX), 2), 0);
    assert_eq!(shard_of(Snowflake(demo::GUILD), 2), 1);
    world
}

impl Fake {
    /// A fake Discord with 2 shards over [`two_shard_world`].
    pub fn two_shards() -> Fake {
        Fake::start_with(
            two_shard_world(),
            FakeOptions {
                shards: 2,
                ..FakeOptions::default()
            },
        )
    }
}

/// `/health` of `sb`, asserting 200.
pub fn health(sb: &Switchboard) -> Value {
    let (status, body) = http_get(&sb.url, "/health").expect("GET /health");
    assert_eq!(status, 200, "{body}");
    serde_json::from_str(&body).expect("health is JSON")
}

/// Polls `/health` until every shard in `ids` (and no other) is `ready`.
pub fn wait_shards_ready(sb: &Switchboard, ids: &[u64], timeout: Duration) -> Value {
    let deadline = Instant::now() + timeout;
    loop {
        let health = health(sb);
        let shards: Vec<(u64, String)> = health["shards"]
            .as_array()
            .map(|shards| {
                shards
                    .iter()
                    .map(|s| {
                        (
                            s["id"].as_u64().unwrap_or(u64::MAX),
                            s["state"].as_str().unwrap_or("").to_owned(),
                        )
                    })
                    .collect()
            })
            .unwrap_or_default();
        let ready = shards.len() == ids.len()
            && shards
                .iter()
                .zip(ids)
                .all(|((id, state), want)| id == want && state == "ready");
        if ready {
            return health;
        }
        assert!(
            Instant::now() < deadline,
            "shards {ids:?} not all ready after {timeout:?}: {health}\n{}",
            sb.stderr()
        );
        std::thread::sleep(Duration::from_millis(200));
    }
}

/// No two IDENTIFYs of one bucket within 5 s (`max_concurrency` 1: every shard is in one).
pub fn assert_identifies_spaced(fake: &Fake) {
    let mut times: Vec<u64> = fake.fake.identifies().iter().map(|i| i.at_ms).collect();
    times.sort_unstable();
    for pair in times.windows(2) {
        assert!(
            pair[1] - pair[0] >= 5_000,
            "IDENTIFYs {} ms apart: {times:?}",
            pair[1] - pair[0]
        );
    }
}
