//! `Core::apply`: a reloaded config is in force for the next call, a call in flight finishes
//! with the settings it started with, and no call ever sees half of one config and half of
//! another.

use std::sync::Arc;
use std::time::Duration;

use protocol::ErrorCode;
use serde_json::json;
use switchboard_config::Config;
use switchboard_engine::CallContext;
use switchboard_testkit::platform::demo;
use switchboard_testkit::testing::TestServer;

/// A config where `#x` names `channel` and only `channel` is allowed.
fn config_x(channel: u64) -> String {
    format!(
        r#"
[discord]
allowed_channel_ids = ["{channel}"]

[entity.sessions]
x = "{channel}"

[toolserver]
bind = "127.0.0.1:0"

[toolserver.rate_limits]
per_caller_per_minute = 1000000
per_caller_burst = 100000
"#
    )
}

fn parse(text: &str) -> Config {
    Config::parse(text, "reload.toml").expect("valid")
}

#[tokio::test]
async fn the_next_call_sees_a_reloaded_alias_and_allowlist() {
    let server = TestServer::start(&config_x(demo::OPS))
        .await
        .expect("server");
    let core = server.core();
    let list = json!({"sessionId": "#x", "limit": 1});
    let ops = core
        .call(
            &CallContext::operator(),
            "surface.messages.list",
            list.clone(),
        )
        .await;
    assert!(ops.is_ok(), "{ops:?}");
    // Before: the release room is refused.
    let room = json!({"sessionId": demo::RELEASE_ROOM.to_string(), "limit": 1});
    let refused = core
        .call(
            &CallContext::operator(),
            "surface.messages.list",
            room.clone(),
        )
        .await
        .unwrap_err();
    assert_eq!(refused.code, ErrorCode::ChannelNotAllowed);

    let settings = core.apply(parse(&config_x(demo::RELEASE_ROOM)));
    assert_eq!(settings.generation(), 1);
    assert!(core
        .call(&CallContext::operator(), "surface.messages.list", room)
        .await
        .is_ok());
    // `#x` now names the release room; the allowlist the bot reads outside calls moved too.
    let via_alias = core
        .call(&CallContext::operator(), "surface.messages.list", list)
        .await;
    assert!(via_alias.is_ok(), "{via_alias:?}");
    assert!(core
        .allowed(switchboard_config::Snowflake(demo::OPS))
        .await
        .is_err());
}

#[tokio::test]
async fn a_call_in_flight_keeps_its_settings() {
    let server = TestServer::start(&config_x(demo::OPS))
        .await
        .expect("server");
    let core = Arc::clone(server.core());
    server.surface().set_delay(Some(Duration::from_millis(300)));
    let in_flight = {
        let core = Arc::clone(&core);
        tokio::spawn(async move {
            core.call(
                &CallContext::operator(),
                "surface.messages.send",
                json!({"sessionId": "#x", "text": "hello"}),
            )
            .await
        })
    };
    tokio::time::sleep(Duration::from_millis(100)).await;
    // The allowlist narrows to another channel while the send waits on the platform.
    core.apply(parse(&config_x(demo::RELEASE_ROOM)));
    let sent = in_flight.await.expect("the task");
    assert!(
        sent.is_ok(),
        "the call in flight lost its settings: {sent:?}"
    );
}

/// Reloads flip `#x` and the allowlist together between two channels while calls run: with a
/// torn read (the alias from one config, the allowlist from the other) a call would be refused.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn calls_never_see_half_of_a_reload() {
    let server = TestServer::start(&config_x(demo::OPS))
        .await
        .expect("server");
    let core = Arc::clone(server.core());
    let (a, b) = (
        parse(&config_x(demo::OPS)),
        parse(&config_x(demo::RELEASE_ROOM)),
    );
    let flipper = {
        let core = Arc::clone(&core);
        tokio::spawn(async move {
            for round in 0..2_000 {
                core.apply(if round % 2 == 0 { b.clone() } else { a.clone() });
                tokio::task::yield_now().await;
            }
        })
    };
    let mut calls = 0;
    while !flipper.is_finished() && calls < 5_000 {
        let answer = core
            .call(
                &CallContext::operator(),
                "surface.messages.list",
                json!({"sessionId": "#x", "limit": 1}),
            )
            .await;
        assert!(answer.is_ok(), "call {calls} saw a torn config: {answer:?}");
        calls += 1;
    }
    flipper.await.expect("the flipper");
    assert!(calls > 0);
}
