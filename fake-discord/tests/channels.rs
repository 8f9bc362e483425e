//! Guild channels over real HTTP, per Discord's spec: `POST /guilds/{id}/channels`, `PATCH
//! /channels/{id}` on a guild channel, `DELETE /channels/{id}`, their validation (every field
//! problem in one 50035), MANAGE_CHANNELS, and the gateway events each sends.

mod common;

use common::{get, http, post, Gateway, ALL_INTENTS};
use fake_discord::{demo, FakeDiscord, World};
use serde_json::{json, Value};

/// The keys the spec's `GuildChannelResponse` requires.
const GUILD_CHANNEL: &[&str] = &["id", "type", "flags", "guild_id", "name", "position"];

fn check_channel(channel: &Value) {
    for key in GUILD_CHANNEL {
        assert!(
            channel.get(*key).is_some(),
            "a guild channel lacks `{key}`: {channel}"
        );
    }
}

async fn start_world(world: World) -> (FakeDiscord, Gateway) {
    let fake = FakeDiscord::start(world).await.expect("start");
    let mut gateway = Gateway::connect(&fake.gateway_url()).await;
    gateway.identify(ALL_INTENTS, 1).await;
    (fake, gateway)
}

async fn send(
    fake: &FakeDiscord,
    method: &str,
    path: &str,
    body: Option<&Value>,
) -> common::Answer {
    let body = body.map(Value::to_string);
    http(&fake.base_url(), method, path, body.as_deref(), true).await
}

fn create_path() -> String {
    format!("/api/v10/guilds/{}/channels", demo::GUILD)
}

/// `POST /guilds/{demo guild}/channels` with `body`.
async fn create(fake: &FakeDiscord, body: Value) -> common::Answer {
    send(fake, "POST", &create_path(), Some(&body)).await
}

/// The 50035 field errors of an answer, as `path: code` lines.
fn field_errors(answer: &common::Answer) -> Vec<String> {
    fn walk(value: &Value, path: &str, out: &mut Vec<String>) {
        if let Some(errors) = value.get("_errors").and_then(Value::as_array) {
            for error in errors {
                out.push(format!("{path}: {}", error["code"].as_str().unwrap_or("?")));
            }
        }
        for (key, child) in value.as_object().into_iter().flatten() {
            if key != "_errors" {
                let path = if path.is_empty() {
                    key.clone()
                } else {
                    format!("{path}.{key}")
                };
                walk(child, &path, out);
            }
        }
    }
    assert_eq!(answer.status, 400, "{}", answer.text);
    assert_eq!(answer.body["code"], 50035, "{}", answer.text);
    let mut out = Vec::new();
    walk(&answer.body["errors"], "", &mut out);
    out.sort();
    out
}

#[tokio::test]
async fn a_channel_is_created_in_a_category_and_announced_on_the_gateway() {
    let (fake, mut gateway) = start_world(World::demo()).await;
    let category = create(&fake, json!({"name": "Projects", "type": 4})).await;
    assert_eq!(category.status, 201, "{}", category.text);
    check_channel(&category.body);
    assert_eq!(
        gateway.dispatch("CHANNEL_CREATE").await["d"]["id"],
        category.body["id"]
    );
    let made = create(&fake, json!({"name": "launch-plan", "topic": "what ships when", "parent_id": category.body["id"]})).await;
    assert_eq!(made.status, 201, "{}", made.text);
    check_channel(&made.body);
    assert_eq!(made.body["type"], 0, "text by default");
    assert_eq!(made.body["guild_id"], demo::GUILD.to_string());
    assert_eq!(made.body["parent_id"], category.body["id"]);
    assert_eq!(made.body["topic"], "what ships when");
    let event = gateway.dispatch("CHANNEL_CREATE").await;
    assert_eq!(event["d"]["id"], made.body["id"]);
    assert_eq!(event["d"]["name"], "launch-plan");
    // It is a channel like any other: readable, and the bot may post in it.
    let id = made.body["id"].as_str().expect("id").to_owned();
    let read = get(&fake.base_url(), &format!("/api/v10/channels/{id}")).await;
    assert_eq!(read.status, 200, "{}", read.text);
    let posted = post(
        &fake.base_url(),
        &format!("/api/v10/channels/{id}/messages"),
        &json!({"content": "first"}),
    )
    .await;
    assert_eq!(posted.status, 200, "{}", posted.text);
    // A forum and a voice channel: the types the spec lets a bot create.
    for (kind, topic) in [(15, Some("x".repeat(4096))), (2, None)] {
        let mut body = json!({"name": format!("kind-{kind}"), "type": kind});
        if let Some(topic) = topic {
            body["topic"] = json!(topic);
        }
        let made = create(&fake, body).await;
        assert_eq!(made.status, 201, "{kind}: {}", made.text);
        assert_eq!(made.body["type"], kind);
    }
}

#[tokio::test]
async fn a_create_that_breaks_the_spec_gets_every_field_error_at_once() {
    let (fake, _gateway) = start_world(World::demo()).await;
    let cases = [
        (json!({}), vec!["name: BASE_TYPE_REQUIRED"]),
        (
            json!({"name": "", "type": 11}),
            vec!["name: BASE_TYPE_BAD_LENGTH", "type: BASE_TYPE_CHOICES"],
        ),
        (
            json!({"name": "x".repeat(101), "type": "text", "topic": 5}),
            vec![
                "name: BASE_TYPE_BAD_LENGTH",
                "topic: STRING_TYPE_CONVERT",
                "type: BASE_TYPE_CHOICES",
            ],
        ),
        (
            json!({"name": "t", "topic": "x".repeat(1025)}),
            vec!["topic: BASE_TYPE_MAX_LENGTH"],
        ),
        (
            json!({"name": "t", "parent_id": demo::OPS.to_string()}),
            vec!["parent_id: CHANNEL_PARENT_INVALID"],
        ),
        (
            json!({"name": "t", "parent_id": "not-an-id"}),
            vec!["parent_id: NUMBER_TYPE_COERCE"],
        ),
        (json!({"name": 7}), vec!["name: STRING_TYPE_CONVERT"]),
        (
            json!({"name": "t", "type": 14}),
            vec!["type: BASE_TYPE_CHOICES"],
        ),
    ];
    for (body, expected) in cases {
        let answer = create(&fake, body.clone()).await;
        assert_eq!(field_errors(&answer), expected, "{body}");
    }
    let category = create(&fake, json!({"name": "c", "type": 4})).await;
    let nested = create(
        &fake,
        json!({"name": "c2", "type": 4, "parent_id": category.body["id"]}),
    )
    .await;
    assert_eq!(
        field_errors(&nested),
        ["parent_id: CHANNEL_PARENT_INVALID_TYPE"]
    );
    let unknown = send(
        &fake,
        "POST",
        "/api/v10/guilds/1000000000000009999/channels",
        Some(&json!({"name": "t"})),
    )
    .await;
    assert_eq!(unknown.status, 404, "{}", unknown.text);
    assert_eq!(unknown.body["code"], 10004);
    let garbage = http(
        &fake.base_url(),
        "POST",
        &create_path(),
        Some("{not json"),
        true,
    )
    .await;
    assert_eq!(garbage.status, 400, "{}", garbage.text);
    assert_eq!(garbage.body["code"], 50109);
}

#[tokio::test]
async fn without_manage_channels_the_bot_may_not_create_change_or_delete() {
    let mut world = World::demo();
    world.guilds[0].bot_can_manage_channels = false;
    let (fake, _gateway) = start_world(world).await;
    let create = create(&fake, json!({"name": "t"})).await;
    let channel = format!("/api/v10/channels/{}", demo::RANDOM);
    let rename = send(&fake, "PATCH", &channel, Some(&json!({"name": "t"}))).await;
    let delete = send(&fake, "DELETE", &channel, None).await;
    for answer in [create, rename, delete] {
        assert_eq!(answer.status, 403, "{}", answer.text);
        assert_eq!(answer.body["code"], 50013);
    }
    assert_eq!(
        get(&fake.base_url(), &channel).await.body["name"],
        "random",
        "nothing changed"
    );
}

#[tokio::test]
async fn a_guild_channel_is_renamed_and_given_a_topic() {
    let (fake, mut gateway) = start_world(World::demo()).await;
    let path = format!("/api/v10/channels/{}", demo::RANDOM);
    let changed = send(
        &fake,
        "PATCH",
        &path,
        Some(&json!({"name": "watercooler", "topic": "anything goes"})),
    )
    .await;
    assert_eq!(changed.status, 200, "{}", changed.text);
    check_channel(&changed.body);
    assert_eq!(changed.body["name"], "watercooler");
    assert_eq!(changed.body["topic"], "anything goes");
    let event = gateway.dispatch("CHANNEL_UPDATE").await;
    assert_eq!(event["d"]["name"], "watercooler");
    // A null topic clears it; a bad name changes nothing.
    let cleared = send(&fake, "PATCH", &path, Some(&json!({"topic": null}))).await;
    assert!(cleared.body["topic"].is_null(), "{}", cleared.text);
    let bad = send(&fake, "PATCH", &path, Some(&json!({"name": ""}))).await;
    assert_eq!(field_errors(&bad), ["name: BASE_TYPE_BAD_LENGTH"]);
    assert_eq!(
        get(&fake.base_url(), &path).await.body["name"],
        "watercooler"
    );
    // A DM is no guild channel.
    let dm = send(
        &fake,
        "PATCH",
        &format!("/api/v10/channels/{}", demo::STANLEY_DM),
        Some(&json!({"name": "x"})),
    )
    .await;
    assert_eq!(dm.body["code"], 50003, "{}", dm.text);
    // Threads keep their own rules.
    let thread = send(
        &fake,
        "PATCH",
        &format!("/api/v10/channels/{}", demo::INCIDENT_THREAD),
        Some(&json!({"archived": true})),
    )
    .await;
    assert_eq!(thread.status, 200, "{}", thread.text);
    assert_eq!(thread.body["thread_metadata"]["archived"], true);
}

#[tokio::test]
async fn deleting_a_channel_takes_its_threads_and_a_category_leaves_its_channels() {
    let (fake, mut gateway) = start_world(World::demo()).await;
    let deleted = send(
        &fake,
        "DELETE",
        &format!("/api/v10/channels/{}", demo::OPS),
        None,
    )
    .await;
    assert_eq!(deleted.status, 200, "{}", deleted.text);
    assert_eq!(deleted.body["id"], demo::OPS.to_string());
    let mut seen = Vec::new();
    for _ in 0..2 {
        let frame = loop {
            let frame = gateway.next_frame().await.expect("an event");
            if frame["op"] == 0 {
                break frame;
            }
        };
        seen.push((
            frame["t"].as_str().unwrap_or("").to_owned(),
            frame["d"]["id"].clone(),
        ));
    }
    assert!(
        seen.contains(&(
            "THREAD_DELETE".to_owned(),
            json!(demo::INCIDENT_THREAD.to_string())
        )),
        "{seen:?}"
    );
    assert!(
        seen.contains(&("CHANNEL_DELETE".to_owned(), json!(demo::OPS.to_string()))),
        "{seen:?}"
    );
    for gone in [demo::OPS, demo::INCIDENT_THREAD] {
        let read = get(&fake.base_url(), &format!("/api/v10/channels/{gone}")).await;
        assert_eq!(read.body["code"], 10003, "{gone}: {}", read.text);
    }
    let again = send(
        &fake,
        "DELETE",
        &format!("/api/v10/channels/{}", demo::OPS),
        None,
    )
    .await;
    assert_eq!(again.body["code"], 10003, "{}", again.text);

    let category = create(&fake, json!({"name": "c", "type": 4})).await;
    let child = create(
        &fake,
        json!({"name": "kid", "parent_id": category.body["id"]}),
    )
    .await;
    let id = category.body["id"].as_str().expect("id");
    let removed = send(&fake, "DELETE", &format!("/api/v10/channels/{id}"), None).await;
    assert_eq!(removed.status, 200, "{}", removed.text);
    let kid = get(
        &fake.base_url(),
        &format!(
            "/api/v10/channels/{}",
            child.body["id"].as_str().expect("id")
        ),
    )
    .await;
    assert_eq!(kid.status, 200, "{}", kid.text);
    assert!(kid.body["parent_id"].is_null(), "{}", kid.text);
}
