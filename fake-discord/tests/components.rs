//! Message components: the fake validates buttons as Discord does, a click becomes an
//! INTERACTION_CREATE of type 3, and the bot's answer (update the message, or a private note)
//! is applied and shown by `GET /_fake/interactions/{id}`.

mod common;

use std::net::{Ipv4Addr, SocketAddr};

use common::{get, http, post, Gateway, ALL_INTENTS};
use fake_discord::{demo, FakeDiscord, FakeOptions, RateLimits, Window, World};
use serde_json::{json, Value};

fn messages_path(channel: u64) -> String {
    format!("/api/v10/channels/{channel}/messages")
}

fn button(custom_id: &str) -> Value {
    json!({"type": 2, "style": 1, "label": "Go", "custom_id": custom_id})
}

fn row(buttons: Vec<Value>) -> Value {
    json!({"type": 1, "components": buttons})
}

async fn send(fake: &FakeDiscord, components: Value) -> common::Answer {
    post(
        &fake.base_url(),
        &messages_path(demo::OPS),
        &json!({"content": "pick one", "components": components}),
    )
    .await
}

fn first_error_code(body: &Value, path: &[&str]) -> Value {
    let mut at = &body["errors"];
    for key in path {
        at = &at[*key];
    }
    at["_errors"][0]["code"].clone()
}

#[tokio::test]
async fn components_are_validated_like_discord() {
    // More creates in one channel than Discord's 5 per 5 s: the bucket is widened, this is
    // about components.
    let fake = FakeDiscord::start_with(
        World::demo(),
        SocketAddr::from((Ipv4Addr::LOCALHOST, 0)),
        FakeOptions {
            rate_limits: RateLimits {
                message_create: Window::new(100, 1_000),
                ..RateLimits::discord()
            },
            ..FakeOptions::default()
        },
    )
    .await
    .expect("start");
    let six = row((0..6).map(|i| button(&format!("b{i}"))).collect());
    let a = send(&fake, json!([six])).await;
    assert_eq!(a.status, 400, "{}", a.text);
    assert_eq!(
        first_error_code(&a.body, &["components", "0", "components"]),
        "BASE_TYPE_MAX_LENGTH"
    );

    let long = send(&fake, json!([row(vec![button(&"x".repeat(101))])])).await;
    assert_eq!(long.status, 400, "{}", long.text);
    assert_eq!(
        first_error_code(
            &long.body,
            &["components", "0", "components", "0", "custom_id"]
        ),
        "BASE_TYPE_BAD_LENGTH"
    );
    let exactly_100 = send(&fake, json!([row(vec![button(&"x".repeat(100))])])).await;
    assert_eq!(exactly_100.status, 200, "{}", exactly_100.text);

    let duplicated = send(&fake, json!([row(vec![button("a"), button("a")])])).await;
    assert_eq!(duplicated.status, 400);
    assert_eq!(
        first_error_code(
            &duplicated.body,
            &["components", "0", "components", "1", "custom_id"]
        ),
        "COMPONENT_CUSTOM_ID_DUPLICATED"
    );

    let six_rows: Vec<Value> = (0..6)
        .map(|i| row(vec![button(&format!("r{i}"))]))
        .collect();
    let a = send(&fake, json!(six_rows)).await;
    assert_eq!(a.status, 400);
    assert_eq!(
        first_error_code(&a.body, &["components"]),
        "BASE_TYPE_MAX_LENGTH"
    );

    let bare_button = send(&fake, json!([button("top")])).await;
    assert_eq!(
        bare_button.status, 400,
        "a button must sit in an action row"
    );
    let no_id = send(
        &fake,
        json!([row(vec![json!({"type": 2, "style": 1, "label": "x"})])]),
    )
    .await;
    assert_eq!(
        first_error_code(
            &no_id.body,
            &["components", "0", "components", "0", "custom_id"]
        ),
        "BUTTON_COMPONENT_CUSTOM_ID_REQUIRED"
    );
    for garbage in [
        json!("x"),
        json!([1]),
        json!([{"type": "1"}]),
        json!([row(vec![json!({"type": 2, "style": 9, "custom_id": "s"})])]),
    ] {
        let a = send(&fake, garbage.clone()).await;
        assert_eq!(a.status, 400, "{garbage}: {}", a.text);
        assert_eq!(a.body["code"], 50035);
    }
}

#[tokio::test]
async fn a_click_reaches_the_bot_and_its_update_edits_the_message() {
    let fake = FakeDiscord::start(World::demo()).await.expect("start");
    let base = fake.base_url();
    let mut gateway = Gateway::connect(&fake.gateway_url()).await;
    gateway.identify(ALL_INTENTS, 1).await;

    let card = send(
        &fake,
        json!([row(vec![button("sb:approve:1"), button("sb:deny:1")])]),
    )
    .await;
    assert_eq!(card.status, 200, "{}", card.text);
    let message_id = card.body["id"].as_str().expect("id").to_owned();

    let unknown = post(
        &base,
        "/_fake/components",
        &json!({"message_id": message_id, "user_id": demo::TOMAS.to_string(), "custom_id": "nope"}),
    )
    .await;
    assert_eq!(unknown.status, 404, "{}", unknown.text);
    let garbage = post(
        &base,
        "/_fake/components",
        &json!({"message_id": "x", "user_id": 1}),
    )
    .await;
    assert_eq!(garbage.status, 400, "{}", garbage.text);

    let click = post(&base, "/_fake/components", &json!({"message_id": message_id, "user_id": demo::TOMAS.to_string(), "custom_id": "sb:approve:1"})).await;
    assert_eq!(click.status, 200, "{}", click.text);
    let event = gateway.dispatch("INTERACTION_CREATE").await;
    let d = &event["d"];
    assert_eq!(d["type"], 3);
    assert_eq!(d["data"]["custom_id"], "sb:approve:1");
    assert_eq!(d["data"]["component_type"], 2);
    assert_eq!(d["message"]["id"], message_id.as_str());
    assert_eq!(d["member"]["user"]["id"], demo::TOMAS.to_string());

    let interaction = d["id"].as_str().expect("id").to_owned();
    let token = d["token"].as_str().expect("token").to_owned();
    let callback = format!("/api/v10/interactions/{interaction}/{token}/callback");
    let disabled = json!({"type": 7, "data": {"content": "approved", "components": [row(vec![
        json!({"type": 2, "style": 1, "label": "Go", "custom_id": "sb:approve:1", "disabled": true}),
        json!({"type": 2, "style": 4, "label": "No", "custom_id": "sb:deny:1", "disabled": true}),
    ])]}});
    let answered = http(&base, "POST", &callback, Some(&disabled.to_string()), true).await;
    assert_eq!(answered.status, 204, "{}", answered.text);
    let again = http(&base, "POST", &callback, Some(&disabled.to_string()), true).await;
    assert_eq!(
        again.status, 400,
        "a second answer is refused: {}",
        again.text
    );

    let shown = get(&base, &format!("/_fake/interactions/{interaction}")).await;
    assert_eq!(shown.body["type"], 3);
    assert_eq!(shown.body["custom_id"], "sb:approve:1");
    assert_eq!(shown.body["response"]["type"], 7);
    let held = get(&base, &format!("/_fake/channels/{}/messages", demo::OPS)).await;
    let edited = held
        .body
        .as_array()
        .expect("messages")
        .iter()
        .find(|m| m["id"] == message_id.as_str())
        .expect("the card")
        .clone();
    assert_eq!(edited["content"], "approved");
    assert_eq!(edited["components"][0]["components"][0]["disabled"], true);

    let too_late = post(&base, "/_fake/components", &json!({"message_id": message_id, "user_id": demo::TOMAS.to_string(), "custom_id": "sb:approve:1"})).await;
    assert_eq!(
        too_late.status, 409,
        "a disabled button cannot be clicked: {}",
        too_late.text
    );
}

#[tokio::test]
async fn a_slash_command_cannot_be_answered_with_a_message_update() {
    let fake = FakeDiscord::start(World::demo()).await.expect("start");
    let base = fake.base_url();
    let register = http(
        &base,
        "PUT",
        &format!("/api/v10/applications/{}/commands", demo::BOT),
        Some(&json!([{"name": "status", "description": "status", "type": 1}]).to_string()),
        true,
    )
    .await;
    assert_eq!(register.status, 200, "{}", register.text);
    let invoked = post(&base, "/_fake/interactions", &json!({"channel_id": demo::OPS.to_string(), "user_id": demo::STANLEY.to_string(), "name": "status"})).await;
    assert_eq!(invoked.status, 200, "{}", invoked.text);
    let callback = format!(
        "/api/v10/interactions/{}/{}/callback",
        invoked.body["id"].as_str().expect("id"),
        invoked.body["token"].as_str().expect("token")
    );
    let update = http(
        &base,
        "POST",
        &callback,
        Some(r#"{"type":7,"data":{"content":"x"}}"#),
        true,
    )
    .await;
    assert_eq!(update.status, 400, "{}", update.text);
}
