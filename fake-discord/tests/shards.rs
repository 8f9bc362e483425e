//! Sharding with a raw websocket client: `GET /gateway/bot` reports the shard count and the
//! session-start budget; IDENTIFY's `shard` decides which guilds READY and GUILD_CREATE hold
//! and which dispatches a session gets (a guild's events on `(guild_id >> 22) % n`, DMs on
//! shard 0); 4010 for a bad shard, 4011 for a shard over the guild limit, op 9 for a second
//! IDENTIFY of one bucket within 5 s, 4004 once the session starts are spent; two sessions on
//! one shard both receive; RESUME keeps the shard; the control API reports IDENTIFYs and
//! connections, changes the settings and closes connections.

mod common;

use std::collections::BTreeSet;
use std::time::Duration;

use common::{
    annex, http, say, start_sharded as start, text_channel, two_shard_world, Gateway, ALL_INTENTS,
    ANNEX, ANNEX_GENERAL,
};
use fake_discord::{
    demo, shard_of, ConnectionState, FakeDiscord, FakeOptions, GatewaySettingsPatch, Snowflake,
    World, IDENTIFY_INTERVAL,
};
use serde_json::{json, Value};

fn identify_frame(shard: Option<Value>) -> Value {
    let mut d = json!({"token": "fake-token", "intents": ALL_INTENTS, "properties": {"os": "linux", "browser": "t", "device": "t"}});
    if let Some(shard) = shard {
        d["shard"] = shard;
    }
    json!({"op": 2, "d": d})
}

/// Connects and identifies as `shard`; returns the client with READY and the GUILD_CREATEs'
/// guild ids (read until the first frame that is not a GUILD_CREATE would be needed: READY
/// lists them).
async fn on_shard(fake: &FakeDiscord, shard: [u32; 2]) -> (Gateway, Value, Vec<u64>) {
    let mut gw = Gateway::connect(&fake.gateway_url()).await;
    gw.send(identify_frame(Some(json!(shard)))).await;
    let ready = gw.next_frame().await.expect("READY");
    assert_eq!(ready["t"], "READY", "{ready}");
    gw.session_id = ready["d"]["session_id"].as_str().expect("id").to_string();
    let mut created = Vec::new();
    for _ in 0..ready["d"]["guilds"].as_array().expect("guilds").len() {
        let g = gw.dispatch("GUILD_CREATE").await;
        created.push(id_of(&g["d"]["id"]));
    }
    (gw, ready, created)
}

fn id_of(v: &Value) -> u64 {
    v.as_str()
        .and_then(|s| s.parse().ok())
        .unwrap_or_else(|| panic!("not a snowflake string: {v}"))
}

/// Reads dispatches until the MESSAGE_CREATE whose content is `marker`; returns those before.
async fn until_marker(gw: &mut Gateway, marker: &str) -> Vec<Value> {
    let mut seen = Vec::new();
    loop {
        let f = gw
            .next_frame()
            .await
            .unwrap_or_else(|| panic!("socket closed before {marker}"));
        if f["t"] == "MESSAGE_CREATE" && f["d"]["content"] == marker {
            return seen;
        }
        if f["op"] == 0 {
            seen.push(f);
        }
    }
}

async fn gateway_bot(fake: &FakeDiscord) -> Value {
    common::get(&fake.base_url(), "/api/v10/gateway/bot")
        .await
        .body
}

#[tokio::test]
async fn gateway_bot_reports_shards_max_concurrency_and_the_session_budget() {
    let fake = start(two_shard_world(), 4, 2).await;
    let bot = gateway_bot(&fake).await;
    assert_eq!(bot["url"], fake.gateway_url());
    assert_eq!(bot["shards"], 4);
    assert_eq!(
        bot["session_start_limit"],
        json!({"total": 1000, "remaining": 1000, "reset_after": 0, "max_concurrency": 2})
    );
    on_shard(&fake, [0, 4]).await;
    let bot = gateway_bot(&fake).await;
    let limit = &bot["session_start_limit"];
    assert_eq!(limit["remaining"], 999, "{bot}");
    let reset_after = limit["reset_after"].as_u64().expect("reset_after");
    assert!(
        reset_after > 86_000_000 && reset_after <= 86_400_000,
        "{reset_after}"
    );
    // The defaults are one shard, max_concurrency 1: what every unsharded test saw before.
    let plain = FakeDiscord::start(World::demo()).await.expect("start");
    let bot = gateway_bot(&plain).await;
    assert_eq!(bot["shards"], 1);
    assert_eq!(bot["session_start_limit"]["max_concurrency"], 1);
    // Out-of-range options refuse to start.
    for (shards, max_concurrency) in [(0, 1), (1, 0), (1, 5_000)] {
        let refused = FakeDiscord::start_with(
            World::demo(),
            "127.0.0.1:0".parse().expect("addr"),
            FakeOptions {
                shards,
                max_concurrency,
                ..FakeOptions::default()
            },
        )
        .await;
        assert!(
            matches!(refused, Err(fake_discord::FakeError::Options(_))),
            "{shards} {max_concurrency}"
        );
    }
}

#[tokio::test]
async fn ready_and_guild_creates_hold_only_the_shards_guilds() {
    let fake = start(two_shard_world(), 2, 2).await;
    let (_zero, ready0, created0) = on_shard(&fake, [0, 2]).await;
    let (_one, ready1, created1) = on_shard(&fake, [1, 2]).await;
    assert_eq!(ready0["d"]["shard"], json!([0, 2]));
    assert_eq!(ready1["d"]["shard"], json!([1, 2]));
    assert_eq!(
        ready0["d"]["guilds"],
        json!([{"id": ANNEX.to_string(), "unavailable": true}])
    );
    assert_eq!(created0, vec![ANNEX]);
    assert_eq!(created1, vec![demo::GUILD]);
    // Unsharded: every guild, and READY carries no `shard` (Discord echoes only what was sent).
    let mut all = Gateway::connect(&fake.gateway_url()).await;
    let (ready, guilds) = all.identify(ALL_INTENTS, 2).await;
    assert!(ready["d"].get("shard").is_none(), "{ready}");
    let ids: BTreeSet<u64> = guilds.iter().map(|g| id_of(&g["d"]["id"])).collect();
    assert_eq!(ids, BTreeSet::from([demo::GUILD, ANNEX]));
}

/// Makes every kind of dispatch a guild produces in `channel` (of guild `guild`): message
/// create, update, delete and bulk delete, reactions, typing, pins, channel create, update and
/// delete, a thread, and a slash command.
async fn every_event_in(fake: &FakeDiscord, guild: u64, channel: u64, tag: &str) {
    let base = fake.base_url();
    let posted = fake.post_message(say(channel, tag)).expect("post");
    let message = Snowflake::from_digits(posted["id"].as_str().expect("id")).expect("id");
    fake.edit_message(channel.into(), message, format!("{tag} edited"))
        .expect("edit");
    fake.react(channel.into(), message, demo::STANLEY.into(), "👍", true)
        .expect("react");
    fake.react(channel.into(), message, demo::STANLEY.into(), "👍", false)
        .expect("unreact");
    fake.typing(channel.into(), demo::STANLEY.into())
        .expect("typing");
    let pin = http(
        &base,
        "PUT",
        &format!("/api/v10/channels/{channel}/messages/pins/{message}"),
        None,
        true,
    )
    .await;
    assert_eq!(pin.status, 204, "{}", pin.text);
    let created = common::post(
        &base,
        &format!("/api/v10/guilds/{guild}/channels"),
        &json!({"name": format!("{tag}-new"), "type": 0}),
    )
    .await;
    assert_eq!(created.status, 201, "{}", created.text);
    let new_channel = id_of(&created.body["id"]);
    let renamed = http(
        &base,
        "PATCH",
        &format!("/api/v10/channels/{new_channel}"),
        Some(&json!({"name": format!("{tag}-renamed")}).to_string()),
        true,
    )
    .await;
    assert_eq!(renamed.status, 200, "{}", renamed.text);
    let thread = common::post(
        &base,
        &format!("/api/v10/channels/{channel}/threads"),
        &json!({"name": format!("{tag}-thread"), "type": 11}),
    )
    .await;
    assert_eq!(thread.status, 201, "{}", thread.text);
    let deleted = http(
        &base,
        "DELETE",
        &format!("/api/v10/channels/{new_channel}"),
        None,
        true,
    )
    .await;
    assert_eq!(deleted.status, 200, "{}", deleted.text);
    fake.invoke_command(fake_discord::SlashCommand {
        channel_id: channel.into(),
        user_id: demo::STANLEY.into(),
        name: "ping".into(),
        options: json!([]),
    })
    .expect("slash command");
    let two: Vec<String> = (0..2)
        .map(|i| {
            fake.post_message(say(channel, &format!("{tag} bulk {i}")))
                .expect("post")["id"]
                .as_str()
                .expect("id")
                .to_string()
        })
        .collect();
    let bulk = common::post(
        &base,
        &format!("/api/v10/channels/{channel}/messages/bulk-delete"),
        &json!({ "messages": two }),
    )
    .await;
    assert_eq!(bulk.status, 204, "{}", bulk.text);
    fake.delete_message(channel.into(), message)
        .expect("delete");
}

/// The guild a dispatch is about (`None`: a DM).
fn guild_of(frame: &Value) -> Option<u64> {
    frame["d"]
        .get("guild_id")
        .filter(|g| !g.is_null())
        .map(id_of)
}

fn names(frames: &[Value]) -> BTreeSet<String> {
    frames
        .iter()
        .map(|f| f["t"].as_str().expect("t").to_string())
        .collect()
}

#[tokio::test]
async fn each_guilds_events_reach_only_its_shard_and_dms_reach_shard_zero() {
    let fake = start(two_shard_world(), 2, 2).await;
    let registered = http(
        &fake.base_url(),
        "PUT",
        &format!("/api/v10/applications/{}/commands", demo::BOT),
        Some(&json!([{"name": "ping", "description": "Pong"}]).to_string()),
        true,
    )
    .await;
    assert_eq!(registered.status, 200, "{}", registered.text);
    let (mut zero, _, _) = on_shard(&fake, [0, 2]).await;
    let (mut one, _, _) = on_shard(&fake, [1, 2]).await;

    every_event_in(&fake, ANNEX, ANNEX_GENERAL, "annex").await;
    every_event_in(&fake, demo::GUILD, demo::OPS, "lab").await;
    fake.post_message(say(demo::STANLEY_DM, "a dm"))
        .expect("dm");
    fake.typing(demo::STANLEY_DM.into(), demo::STANLEY.into())
        .expect("dm typing");
    fake.post_message(say(ANNEX_GENERAL, "end"))
        .expect("marker");
    fake.post_message(say(demo::OPS, "end")).expect("marker");

    let expected: BTreeSet<String> = [
        "MESSAGE_CREATE",
        "MESSAGE_UPDATE",
        "MESSAGE_DELETE",
        "MESSAGE_DELETE_BULK",
        "MESSAGE_REACTION_ADD",
        "MESSAGE_REACTION_REMOVE",
        "TYPING_START",
        "CHANNEL_PINS_UPDATE",
        "CHANNEL_CREATE",
        "CHANNEL_UPDATE",
        "CHANNEL_DELETE",
        "THREAD_CREATE",
        "INTERACTION_CREATE",
    ]
    .into_iter()
    .map(String::from)
    .collect();

    let got_zero = until_marker(&mut zero, "end").await;
    let (annex_events, dms): (Vec<Value>, Vec<Value>) = got_zero
        .into_iter()
        .partition(|f| guild_of(f) == Some(ANNEX));
    assert_eq!(names(&annex_events), expected);
    assert_eq!(dms.len(), 2, "only the DM and its typing: {dms:?}");
    for dm in &dms {
        assert_eq!(guild_of(dm), None, "{dm}");
        assert_eq!(id_of(&dm["d"]["channel_id"]), demo::STANLEY_DM);
    }

    let got_one = until_marker(&mut one, "end").await;
    assert!(
        got_one.iter().all(|f| guild_of(f) == Some(demo::GUILD)),
        "shard 1 got something not of Lab: {:?}",
        got_one
            .iter()
            .filter(|f| guild_of(f) != Some(demo::GUILD))
            .collect::<Vec<_>>()
    );
    assert_eq!(names(&got_one), expected);
}

#[tokio::test]
async fn an_unsharded_session_gets_every_guild_and_the_dms() {
    let fake = start(two_shard_world(), 2, 1).await;
    let mut gw = Gateway::connect(&fake.gateway_url()).await;
    gw.identify(ALL_INTENTS, 2).await;
    fake.post_message(say(ANNEX_GENERAL, "annex"))
        .expect("post");
    fake.post_message(say(demo::OPS, "lab")).expect("post");
    fake.post_message(say(demo::STANLEY_DM, "dm"))
        .expect("post");
    fake.post_message(say(demo::OPS, "end")).expect("post");
    let seen: Vec<String> = until_marker(&mut gw, "end")
        .await
        .iter()
        .map(|f| f["d"]["content"].as_str().unwrap_or("").to_string())
        .collect();
    assert_eq!(seen, vec!["annex", "lab", "dm"]);
}

#[tokio::test]
async fn a_second_identify_of_one_bucket_within_five_seconds_gets_op_9_then_both_sessions_receive()
{
    let fake = start(two_shard_world(), 2, 1).await;
    let (mut first, _, _) = on_shard(&fake, [1, 2]).await;
    let started = std::time::Instant::now();
    // Same shard, and shard 0 too: with max_concurrency 1 all share bucket 0.
    for shard in [[1, 2], [0, 2]] {
        let mut early = Gateway::connect(&fake.gateway_url()).await;
        early.send(identify_frame(Some(json!(shard)))).await;
        let nine = early.next_frame().await.expect("op 9");
        assert_eq!(
            (nine["op"].as_u64(), nine["d"].as_bool()),
            (Some(9), Some(false)),
            "{nine}"
        );
    }
    let log = fake.identifies();
    assert_eq!(log.len(), 3);
    assert!(log[0].accepted);
    for refused in &log[1..] {
        assert!(!refused.accepted);
        assert_eq!(refused.close_code, None);
        assert!(
            refused.reason.as_deref().unwrap_or("").contains("bucket 0"),
            "{refused:?}"
        );
    }
    // Once the bucket's 5 s are over, a second session takes the same shard (a takeover
    // overlap Discord allows), and both get the shard's events.
    tokio::time::sleep(
        IDENTIFY_INTERVAL.saturating_sub(started.elapsed()) + Duration::from_millis(50),
    )
    .await;
    let (mut second, _, created) = on_shard(&fake, [1, 2]).await;
    assert_eq!(created, vec![demo::GUILD]);
    fake.post_message(say(ANNEX_GENERAL, "not for shard 1"))
        .expect("post");
    fake.post_message(say(demo::OPS, "for both")).expect("post");
    for gw in [&mut first, &mut second] {
        let got = gw.dispatch("MESSAGE_CREATE").await;
        assert_eq!(got["d"]["content"], "for both");
    }
    let held: Vec<_> = fake
        .connections()
        .into_iter()
        .filter(|c| c.shard == Some([1, 2]))
        .collect();
    assert_eq!(held.len(), 2, "{held:?}");
    assert_ne!(held[0].session_id, held[1].session_id);
}

#[tokio::test]
async fn max_concurrency_two_admits_shards_zero_and_one_together_but_not_a_third_of_bucket_zero() {
    let fake = start(two_shard_world(), 4, 2).await;
    on_shard(&fake, [0, 4]).await;
    on_shard(&fake, [1, 4]).await;
    let mut third = Gateway::connect(&fake.gateway_url()).await;
    third.send(identify_frame(Some(json!([2, 4])))).await;
    assert_eq!(third.next_frame().await.expect("op 9")["op"], 9);
    // The same socket may try again later; a refused IDENTIFY spent no session start.
    assert_eq!(
        gateway_bot(&fake).await["session_start_limit"]["remaining"],
        998
    );
    // Raising max_concurrency at run time puts shard 2 in a bucket of its own.
    fake.set_gateway_settings(GatewaySettingsPatch {
        max_concurrency: Some(4),
        ..Default::default()
    })
    .expect("settings");
    third.send(identify_frame(Some(json!([2, 4])))).await;
    assert_eq!(third.next_frame().await.expect("READY")["t"], "READY");
}

#[tokio::test]
async fn a_bad_shard_is_closed_with_4010() {
    let fake = start(two_shard_world(), 2, 1).await;
    for shard in [
        json!([2, 2]),
        json!([0, 0]),
        json!([5, 3]),
        json!([0]),
        json!([0, 1, 2]),
        json!(["0", "2"]),
        json!([-1, 2]),
        json!("0,2"),
        json!({"id": 0, "count": 2}),
    ] {
        let mut gw = Gateway::connect(&fake.gateway_url()).await;
        gw.send(identify_frame(Some(shard.clone()))).await;
        assert_eq!(gw.close_code().await, Some(4010), "{shard}");
    }
    let log = fake.identifies();
    assert_eq!(log.len(), 9);
    for record in &log {
        assert_eq!(
            (record.accepted, record.close_code, record.shard),
            (false, Some(4010), None)
        );
        assert!(record.reason.as_deref().unwrap_or("").contains("shard"));
    }
    // The fake is fine afterwards, and no session start was spent.
    on_shard(&fake, [1, 2]).await;
    assert_eq!(
        gateway_bot(&fake).await["session_start_limit"]["remaining"],
        999
    );
}

/// Three guilds, one on each shard of 3 (shard 1 of 2 holds two of them).
fn three_guild_world(guilds_per_shard_max: u32) -> World {
    let mut world = two_shard_world();
    let third = demo::GUILD + (2 << 22);
    let mut guild = annex();
    guild.id = Snowflake(third);
    guild.name = "Third".into();
    guild.channels = vec![text_channel(third + 1, "third-general")];
    world.guilds.push(guild);
    world.guilds_per_shard_max = Some(guilds_per_shard_max);
    let shards: BTreeSet<u32> = world.guilds.iter().map(|g| shard_of(g.id, 3)).collect();
    assert_eq!(shards.len(), 3, "one guild per shard of 3");
    world
}

#[tokio::test]
async fn identifying_with_too_few_shards_for_the_guild_limit_is_4011() {
    let fake = start(three_guild_world(1), 3, 3).await;
    let mut unsharded = Gateway::connect(&fake.gateway_url()).await;
    unsharded.send(identify_frame(None)).await;
    assert_eq!(unsharded.close_code().await, Some(4011));
    // Two shards: shard 1 would hold two guilds (Lab and Third).
    let mut two = Gateway::connect(&fake.gateway_url()).await;
    two.send(identify_frame(Some(json!([1, 2])))).await;
    assert_eq!(two.close_code().await, Some(4011));
    // Three shards: one guild each, all accepted (max_concurrency 3: together).
    for id in 0..3 {
        let (_, _, created) = on_shard(&fake, [id, 3]).await;
        assert_eq!(created.len(), 1);
    }
    let refusals: Vec<_> = fake
        .identifies()
        .into_iter()
        .filter(|r| !r.accepted)
        .collect();
    assert_eq!(refusals.len(), 2);
    assert_eq!(refusals[0].shard, Some([0, 1]));
    assert!(refusals.iter().all(|r| r.close_code == Some(4011)
        && r.reason
            .as_deref()
            .unwrap_or("")
            .contains("sharding required")));
    // The limit is a setting a test may change while the fake runs.
    let patched = common::http(
        &fake.base_url(),
        "PATCH",
        "/_fake/gateway",
        Some(&json!({"guilds_per_shard_max": 3}).to_string()),
        true,
    )
    .await;
    assert_eq!(patched.status, 200, "{}", patched.text);
    assert_eq!(patched.body["guilds_per_shard_max"], 3);
    let mut again = Gateway::connect(&fake.gateway_url()).await;
    again.identify(ALL_INTENTS, 3).await;
    // A world cannot ask for 0 guilds per shard.
    let mut bad = World::demo();
    bad.guilds_per_shard_max = Some(0);
    assert!(matches!(
        FakeDiscord::start(bad).await,
        Err(fake_discord::FakeError::World(_))
    ));
}

#[tokio::test]
async fn session_starts_count_down_run_out_with_4004_and_resume_is_free() {
    let fake = start(World::demo(), 1, 1).await;
    fake.set_gateway_settings(GatewaySettingsPatch {
        session_start_total: Some(2),
        ..Default::default()
    })
    .expect("settings");
    let mut first = Gateway::connect(&fake.gateway_url()).await;
    first.identify(ALL_INTENTS, 1).await;
    let mut second = Gateway::connect(&fake.gateway_url()).await;
    second.identify(ALL_INTENTS, 1).await;
    assert_eq!(
        gateway_bot(&fake).await["session_start_limit"]["remaining"],
        0
    );
    // RESUME spends nothing.
    let (session, seq) = (first.session_id.clone(), first.seq);
    let mut resumed = Gateway::connect(&fake.gateway_url()).await;
    resumed.resume(&session, seq).await;
    resumed.dispatch("RESUMED").await;
    let mut third = Gateway::connect(&fake.gateway_url()).await;
    third.send(identify_frame(None)).await;
    assert_eq!(third.close_code().await, Some(4004));
    let last = fake.identifies().pop().expect("logged");
    assert!(
        last.reason
            .as_deref()
            .unwrap_or("")
            .contains("session_start_limit exhausted"),
        "{last:?}"
    );
    // Refilled through the control API, IDENTIFY works again.
    fake.set_gateway_settings(GatewaySettingsPatch {
        session_start_remaining: Some(1),
        ..Default::default()
    })
    .expect("refill");
    let mut fourth = Gateway::connect(&fake.gateway_url()).await;
    fourth.identify(ALL_INTENTS, 1).await;
}

#[tokio::test]
async fn resume_keeps_the_shard() {
    let fake = start(two_shard_world(), 2, 2).await;
    let (mut gw, _, _) = on_shard(&fake, [1, 2]).await;
    let (session, seq) = (gw.session_id.clone(), gw.seq);
    let dropped = fake.close_shard(1, None).expect("drop");
    assert_eq!(dropped, 1);
    assert!(gw.next_frame().await.is_none(), "dropped");
    fake.post_message(say(demo::OPS, "while away"))
        .expect("post");
    let mut again = Gateway::connect(&fake.gateway_url()).await;
    again.resume(&session, seq).await;
    assert_eq!(
        again.dispatch("MESSAGE_CREATE").await["d"]["content"],
        "while away"
    );
    again.dispatch("RESUMED").await;
    let listed = fake.connections();
    assert_eq!(listed.len(), 1);
    assert_eq!(listed[0].shard, Some([1, 2]));
    assert_eq!(listed[0].state, ConnectionState::Resumed);
    fake.post_message(say(demo::STANLEY_DM, "dm: shard 0 only"))
        .expect("post");
    fake.post_message(say(ANNEX_GENERAL, "annex: shard 0 only"))
        .expect("post");
    fake.post_message(say(demo::OPS, "end")).expect("post");
    assert!(until_marker(&mut again, "end").await.is_empty());
}

#[tokio::test]
async fn the_control_api_reports_identifies_and_connections_and_closes_them() {
    let fake = start(two_shard_world(), 2, 2).await;
    let base = fake.base_url();
    let mut waiting = Gateway::connect(&fake.gateway_url()).await;
    let (mut zero, _, _) = on_shard(&fake, [0, 2]).await;
    let (mut one, _, _) = on_shard(&fake, [1, 2]).await;
    let mut bad = Gateway::connect(&fake.gateway_url()).await;
    bad.send(identify_frame(Some(json!([7, 2])))).await;
    assert_eq!(bad.close_code().await, Some(4010));

    let identifies = common::get(&base, "/_fake/gateway/identifies").await;
    assert_eq!(identifies.status, 200);
    let list = identifies.body.as_array().expect("array");
    assert_eq!(list.len(), 3, "{list:?}");
    assert_eq!(list[0]["shard"], json!([0, 2]));
    assert_eq!(list[0]["accepted"], true);
    assert_eq!(list[0]["session_id"], json!(zero.session_id));
    assert!(list[0]["at_ms"].as_u64().expect("at_ms") > 1_600_000_000_000);
    assert!(list[0].get("reason").is_none());
    assert_eq!(list[1]["shard"], json!([1, 2]));
    assert_eq!(list[2]["accepted"], false);
    assert_eq!(list[2]["session_id"], Value::Null);
    assert_eq!(list[2]["close_code"], 4010);
    assert!(list[2]["reason"].as_str().expect("reason").contains("7"));

    let connections = common::get(&base, "/_fake/gateway/connections").await;
    let conns = connections.body.as_array().expect("array").clone();
    assert_eq!(conns.len(), 3, "the closed one is gone: {conns:?}");
    assert_eq!(conns[0]["state"], "handshaking");
    assert_eq!(conns[0]["shard"], Value::Null);
    assert_eq!(conns[1]["state"], "identified");
    assert_eq!(conns[1]["shard"], json!([0, 2]));
    assert_eq!(conns[1]["session_id"], json!(zero.session_id));
    assert_eq!(conns[2]["shard"], json!([1, 2]));

    // Close one chosen connection with a chosen code.
    let closed = common::post(
        &base,
        "/_fake/gateway/close",
        &json!({"connection": conns[1]["connection"], "code": 4000}),
    )
    .await;
    assert_eq!((closed.status, &closed.body), (200, &json!({"closed": 1})));
    assert_eq!(zero.close_code().await, Some(4000));
    // Kill every connection of a shard: a drop, no close frame.
    let killed = common::post(&base, "/_fake/gateway/close", &json!({"shard": 1})).await;
    assert_eq!(killed.body, json!({"closed": 1}));
    assert_eq!(one.close_code().await, None);
    // Garbage is refused with what to do instead.
    for (body, status) in [
        (json!({"connection": 999_999}), 404),
        (json!({"connection": 1, "shard": 0}), 400),
        (json!({}), 400),
        (json!({"shard": 0, "code": 1000}), 400),
        (json!({"shard": "zero"}), 400),
        (json!({"shard": 0, "reason": "x"}), 400),
    ] {
        let answer = common::post(&base, "/_fake/gateway/close", &body).await;
        assert_eq!(answer.status, status, "{body}: {}", answer.text);
        assert!(answer.body["error"].is_string());
    }
    assert_eq!(
        fake.close_connection(999_999, Some(4000)),
        Err(fake_discord::ControlError::NotFound(
            "gateway connection 999999 is not open (GET /_fake/gateway/connections lists them)"
                .into()
        ))
    );
    // The settings, read and changed over HTTP; a bad change changes nothing.
    let settings = common::get(&base, "/_fake/gateway").await;
    assert_eq!(
        settings.body,
        json!({
            "shards": 2, "max_concurrency": 2, "guilds_per_shard_max": 2500,
            "session_start_total": 1000, "session_start_remaining": 998,
            "limit_unsharded_identifies": false
        })
    );
    for body in [
        json!({"shards": 0}),
        json!({"max_concurrency": 0}),
        json!({"max_concurrency": 2, "session_start_remaining": 5000}),
        json!({"shard_count": 3}),
        json!({"shards": "two"}),
    ] {
        let answer = http(
            &base,
            "PATCH",
            "/_fake/gateway",
            Some(&body.to_string()),
            true,
        )
        .await;
        assert_eq!(answer.status, 400, "{body}: {}", answer.text);
    }
    assert_eq!(
        common::get(&base, "/_fake/gateway").await.body,
        settings.body
    );
    let patched = http(
        &base,
        "PATCH",
        "/_fake/gateway",
        Some(&json!({"shards": 3, "max_concurrency": 16}).to_string()),
        true,
    )
    .await;
    assert_eq!(patched.status, 200, "{}", patched.text);
    let bot = gateway_bot(&fake).await;
    assert_eq!(
        (
            bot["shards"].as_u64(),
            bot["session_start_limit"]["max_concurrency"].as_u64()
        ),
        (Some(3), Some(16))
    );
    drop(waiting.ws.close(None).await);
}
