//! Gateway behaviour with a raw websocket client: handshake, heartbeats, permissions filter,
//! RESUME replay, injected op 7 / op 9 / drop, and Discord's close codes for garbage.

mod common;

use common::{say, within, Gateway, ALL_INTENTS};
use fake_discord::{demo, intents, FakeDiscord, Fault, GatewayFaultKind, World};
use futures_util::SinkExt;
use serde_json::json;
use tokio_tungstenite::tungstenite::Message;

fn gateway_fault(kind: GatewayFaultKind) -> Fault {
    Fault {
        rest: None,
        gateway: Some(kind),
        handshakes: None,
    }
}

#[tokio::test]
async fn identify_gets_ready_then_guild_create_and_heartbeats_are_acked() {
    let fake = FakeDiscord::start(World::demo()).await.expect("start");
    let mut gw = Gateway::connect(&fake.gateway_url()).await;
    let (ready, guilds) = gw.identify(ALL_INTENTS, 1).await;
    assert_eq!(ready["s"], 1);
    assert_eq!(ready["d"]["user"]["id"], demo::BOT.to_string());
    let guild = &guilds[0]["d"];
    assert_eq!(guild["id"], demo::GUILD.to_string());
    let threads = guild["threads"].as_array().expect("threads");
    assert!(threads.iter().any(
        |t| t["id"].as_str().and_then(|s| s.parse::<u64>().ok()) == Some(demo::INCIDENT_THREAD)
    ));
    assert!(guild["roles"]
        .as_array()
        .expect("roles")
        .iter()
        .any(|r| r["name"] == "oncall"));
    gw.send(json!({"op": 1, "d": 2})).await;
    let ack = gw.next_frame().await.expect("ack");
    assert_eq!(ack["op"], 11);
}

#[tokio::test]
async fn messages_in_hidden_channels_are_not_delivered() {
    let mut world = World::demo();
    world.guilds[0].channels[3].bot_can_see = false; // #random (and its thread)
    let fake = FakeDiscord::start(world).await.expect("start");
    let mut gw = Gateway::connect(&fake.gateway_url()).await;
    gw.identify(ALL_INTENTS, 1).await;
    fake.post_message(say(demo::RANDOM, "hidden"))
        .expect("post");
    fake.post_message(say(demo::RANDOM_THREAD, "hidden too"))
        .expect("post");
    fake.post_message(say(demo::OPS, "visible")).expect("post");
    let first = gw.dispatch("MESSAGE_CREATE").await;
    assert_eq!(first["d"]["content"], "visible");
    assert_eq!(first["d"]["guild_id"], demo::GUILD.to_string());
    assert!(first["d"]["member"].is_object());
}

#[tokio::test]
async fn bots_own_rest_message_is_dispatched_to_it() {
    let fake = FakeDiscord::start(World::demo()).await.expect("start");
    let mut gw = Gateway::connect(&fake.gateway_url()).await;
    gw.identify(ALL_INTENTS, 1).await;
    let a = common::post(
        &fake.base_url(),
        &format!("/api/v10/channels/{}/messages", demo::OPS),
        &json!({"content": "from the bot"}),
    )
    .await;
    assert_eq!(a.status, 200);
    let d = gw.dispatch("MESSAGE_CREATE").await;
    assert_eq!(d["d"]["author"]["id"], demo::BOT.to_string());
    assert_eq!(d["d"]["author"]["bot"], true);
}

#[tokio::test]
async fn missing_message_content_intent_blanks_content() {
    let fake = FakeDiscord::start(World::demo()).await.expect("start");
    let mut gw = Gateway::connect(&fake.gateway_url()).await;
    gw.identify(
        intents::GUILDS | intents::GUILD_MESSAGES | intents::DIRECT_MESSAGES,
        1,
    )
    .await;
    fake.post_message(say(demo::OPS, "secret words"))
        .expect("post");
    fake.post_message(say(demo::OPS, "hey <@1000000000000000001>"))
        .expect("post");
    fake.post_message(say(demo::STANLEY_DM, "dm words"))
        .expect("post");
    assert_eq!(gw.dispatch("MESSAGE_CREATE").await["d"]["content"], "");
    assert_eq!(
        gw.dispatch("MESSAGE_CREATE").await["d"]["content"],
        "hey <@1000000000000000001>"
    );
    assert_eq!(
        gw.dispatch("MESSAGE_CREATE").await["d"]["content"],
        "dm words"
    );
}

#[tokio::test]
async fn resume_replays_what_was_missed_then_resumed() {
    let fake = FakeDiscord::start(World::demo()).await.expect("start");
    let mut gw = Gateway::connect(&fake.gateway_url()).await;
    gw.identify(ALL_INTENTS, 1).await;
    fake.post_message(say(demo::OPS, "one")).expect("post");
    gw.dispatch("MESSAGE_CREATE").await;
    let (session, seq) = (gw.session_id.clone(), gw.seq);
    assert_eq!(
        fake.inject_fault(gateway_fault(GatewayFaultKind::Drop))
            .expect("fault"),
        1
    );
    assert!(gw.next_frame().await.is_none(), "socket dropped");
    fake.post_message(say(demo::OPS, "two")).expect("post");
    fake.post_message(say(demo::OPS, "three")).expect("post");
    let mut again = Gateway::connect(&fake.gateway_url()).await;
    again.resume(&session, seq).await;
    assert_eq!(
        again.dispatch("MESSAGE_CREATE").await["d"]["content"],
        "two"
    );
    let three = again.dispatch("MESSAGE_CREATE").await;
    assert_eq!(three["d"]["content"], "three");
    assert_eq!(three["s"], seq + 2);
    again.dispatch("RESUMED").await;
    // An unknown session cannot resume: op 9 d:false.
    let mut stranger = Gateway::connect(&fake.gateway_url()).await;
    stranger
        .send(json!({"op": 6, "d": {"token": "t", "session_id": "nope", "seq": 1}}))
        .await;
    let refused = stranger.next_frame().await.expect("op 9");
    assert_eq!(
        (refused["op"].as_u64(), refused["d"].as_bool()),
        (Some(9), Some(false))
    );
}

#[tokio::test]
async fn reconnect_and_invalid_session_on_demand() {
    let fake = FakeDiscord::start(World::demo()).await.expect("start");
    let mut gw = Gateway::connect(&fake.gateway_url()).await;
    gw.identify(ALL_INTENTS, 1).await;
    fake.inject_fault(gateway_fault(GatewayFaultKind::Reconnect))
        .expect("fault");
    assert_eq!(gw.next_frame().await.expect("op 7")["op"], 7);
    fake.inject_fault(gateway_fault(GatewayFaultKind::InvalidSession))
        .expect("fault");
    let nine = gw.next_frame().await.expect("op 9");
    assert_eq!(
        (nine["op"].as_u64(), nine["d"].as_bool()),
        (Some(9), Some(false))
    );
    // After op 9 the same socket may identify afresh.
    gw.identify(ALL_INTENTS, 1).await;
    assert_eq!(fake.state().sessions_identified, 2);
}

async fn close_code_for(fake: &FakeDiscord, frame: Message) -> Option<u16> {
    let mut gw = Gateway::connect(&fake.gateway_url()).await;
    within("send garbage", gw.ws.send(frame))
        .await
        .expect("send");
    gw.close_code().await
}

#[tokio::test]
async fn garbage_frames_get_discord_close_codes() {
    let fake = FakeDiscord::start(World::demo()).await.expect("start");
    assert_eq!(
        close_code_for(&fake, Message::Text("{not json".into())).await,
        Some(4002)
    );
    assert_eq!(
        close_code_for(&fake, Message::Text(r#"{"op":"two"}"#.into())).await,
        Some(4002)
    );
    assert_eq!(
        close_code_for(&fake, Message::Binary(vec![0xff, 0xfe, 0x00].into())).await,
        Some(4002)
    );
    assert_eq!(
        close_code_for(&fake, Message::Text(r#"{"op":99,"d":null}"#.into())).await,
        Some(4001)
    );
    assert_eq!(
        close_code_for(&fake, Message::Text(r#"{"op":3,"d":{}}"#.into())).await,
        Some(4003)
    );
    assert_eq!(
        close_code_for(&fake, Message::Text(r#"{"op":2,"d":{"intents":1}}"#.into())).await,
        Some(4004)
    );
    assert_eq!(
        close_code_for(&fake, Message::Text(r#"{"op":2,"d":{"token":"t"}}"#.into())).await,
        Some(4013)
    );
    // The fake is still healthy afterwards.
    let mut gw = Gateway::connect(&fake.gateway_url()).await;
    gw.identify(ALL_INTENTS, 1).await;
}

#[tokio::test]
async fn a_close_code_on_demand_reaches_every_connection() {
    let fake = FakeDiscord::start(World::demo()).await.expect("start");
    let mut gw = Gateway::connect(&fake.gateway_url()).await;
    gw.identify(ALL_INTENTS, 1).await;
    let affected = fake
        .inject_fault(gateway_fault(GatewayFaultKind::Close(4014)))
        .expect("fault");
    assert_eq!(affected, 1);
    assert_eq!(gw.close_code().await, Some(4014));
    // Not a gateway close code: refused, the REST half too.
    for code in [1000, 3999, 5000] {
        assert!(fake
            .inject_fault(Fault {
                rest: Some(fake_discord::RestFault {
                    status: 500,
                    count: 1,
                    retry_after: None,
                    path_contains: None,
                }),
                gateway: Some(GatewayFaultKind::Close(code)),
                handshakes: None,
            })
            .is_err());
    }
    // The close fault reads as `{"close": 4014}` on the control API.
    let parsed: Fault = serde_json::from_value(json!({"gateway": {"close": 4012}})).unwrap();
    assert_eq!(parsed.gateway, Some(GatewayFaultKind::Close(4012)));
}

#[tokio::test]
async fn refused_handshakes_close_the_next_identifies_then_stop() {
    let fake = FakeDiscord::start(World::demo()).await.expect("start");
    let refuse = |close: u16, count: u32| Fault {
        rest: None,
        gateway: None,
        handshakes: Some(fake_discord::HandshakeFault { close, count }),
    };
    // Garbage is refused and leaves nothing behind.
    for (close, count) in [(1000, 1), (5000, 1), (4012, 0), (4012, 1_001)] {
        assert!(
            fake.inject_fault(refuse(close, count)).is_err(),
            "{close} x{count}"
        );
    }
    assert!(fake
        .inject_fault(Fault {
            rest: None,
            gateway: None,
            handshakes: None,
        })
        .is_err());
    assert_eq!(
        fake.inject_fault(refuse(4012, 2)).expect("fault"),
        0,
        "no open connection is touched"
    );
    for _ in 0..2 {
        let mut gw = Gateway::connect(&fake.gateway_url()).await;
        gw.send(json!({"op": 2, "d": {"token": "fake-token", "intents": ALL_INTENTS, "properties": {"os": "linux", "browser": "t", "device": "t"}}})).await;
        assert_eq!(gw.close_code().await, Some(4012));
    }
    // Spent: the next one is answered.
    let mut gw = Gateway::connect(&fake.gateway_url()).await;
    gw.identify(ALL_INTENTS, 1).await;
    // The control API's form.
    let parsed: Fault =
        serde_json::from_value(json!({"handshakes": {"close": 4008, "count": 3}})).unwrap();
    assert_eq!(
        parsed.handshakes,
        Some(fake_discord::HandshakeFault {
            close: 4008,
            count: 3
        })
    );
}
