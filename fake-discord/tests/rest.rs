//! REST behaviour over real HTTP: Discord's validation errors and statuses, permissions,
//! nonces, replies, garbage bodies, the request log, rate-limit headers and injected faults.

mod common;

use std::time::Instant;

use common::{get, http, post};
use fake_discord::{demo, FakeDiscord, FakeOptions, RateLimits, World};
use serde_json::{json, Value};

fn messages_path(channel: u64) -> String {
    format!("/api/v10/channels/{channel}/messages")
}

async fn start() -> FakeDiscord {
    FakeDiscord::start(World::demo()).await.expect("start")
}

async fn user_post(fake: &FakeDiscord, channel: u64, content: &str) -> Value {
    let a = post(&fake.base_url(), "/_fake/messages", &json!({"channel_id": channel.to_string(), "author_id": demo::STANLEY.to_string(), "content": content})).await;
    assert_eq!(a.status, 200, "{}", a.text);
    a.body
}

#[tokio::test]
async fn content_of_2001_chars_is_invalid_form_body() {
    let fake = start().await;
    let a = post(
        &fake.base_url(),
        &messages_path(demo::OPS),
        &json!({"content": "x".repeat(2001)}),
    )
    .await;
    assert_eq!(a.status, 400);
    assert_eq!(a.body["code"], 50035);
    assert_eq!(a.body["message"], "Invalid Form Body");
    assert_eq!(
        a.body["errors"]["content"]["_errors"][0]["code"],
        "BASE_TYPE_MAX_LENGTH"
    );
    let ok = post(
        &fake.base_url(),
        &messages_path(demo::OPS),
        &json!({"content": "x".repeat(2000)}),
    )
    .await;
    assert_eq!(ok.status, 200, "{}", ok.text);
}

#[tokio::test]
async fn empty_message_is_50006() {
    let fake = start().await;
    let a = post(
        &fake.base_url(),
        &messages_path(demo::OPS),
        &json!({"content": ""}),
    )
    .await;
    assert_eq!((a.status, a.body["code"].as_u64()), (400, Some(50006)));
}

#[tokio::test]
async fn send_to_hidden_channel_is_missing_access() {
    let mut world = World::demo();
    world.guilds[0].channels[3].bot_can_see = false; // #random
    let fake = FakeDiscord::start(world).await.expect("start");
    let a = post(
        &fake.base_url(),
        &messages_path(demo::RANDOM),
        &json!({"content": "hi"}),
    )
    .await;
    assert_eq!((a.status, a.body["code"].as_u64()), (403, Some(50001)));
    // Its thread is hidden too, and reading is refused the same way.
    let t = get(
        &fake.base_url(),
        &format!("/api/v10/channels/{}", demo::RANDOM_THREAD),
    )
    .await;
    assert_eq!((t.status, t.body["code"].as_u64()), (403, Some(50001)));
}

#[tokio::test]
async fn send_where_bot_cannot_send_is_missing_permissions() {
    let fake = start().await;
    let a = post(
        &fake.base_url(),
        &messages_path(demo::SECRET),
        &json!({"content": "hi"}),
    )
    .await;
    assert_eq!((a.status, a.body["code"].as_u64()), (403, Some(50013)));
    // Reading is still allowed there.
    assert_eq!(
        get(&fake.base_url(), &messages_path(demo::SECRET))
            .await
            .status,
        200
    );
}

#[tokio::test]
async fn unknown_channel_and_message() {
    let fake = start().await;
    let a = post(
        &fake.base_url(),
        &messages_path(42),
        &json!({"content": "hi"}),
    )
    .await;
    assert_eq!((a.status, a.body["code"].as_u64()), (404, Some(10003)));
    let m = get(
        &fake.base_url(),
        &format!("{}/42", messages_path(demo::OPS)),
    )
    .await;
    assert_eq!((m.status, m.body["code"].as_u64()), (404, Some(10008)));
    let bad = get(&fake.base_url(), "/api/v10/channels/not-a-number").await;
    assert_eq!((bad.status, bad.body["code"].as_u64()), (400, Some(50035)));
}

#[tokio::test]
async fn a_message_route_names_the_path_id_that_is_not_a_snowflake() {
    let fake = start().await;
    let base = fake.base_url();
    let ops = messages_path(demo::OPS);
    let cases = [
        (
            "GET",
            "/api/v10/channels/abc/messages/1".to_owned(),
            "channel_id",
        ),
        ("GET", format!("{ops}/xyz"), "message_id"),
        ("DELETE", format!("{ops}/xyz"), "message_id"),
        ("POST", format!("{ops}/xyz/threads"), "message_id"),
        ("PUT", format!("{ops}/pins/xyz"), "message_id"),
        (
            "DELETE",
            "/api/v10/channels/abc/messages/pins/1".to_owned(),
            "channel_id",
        ),
    ];
    for (method, path, field) in cases {
        let body = (method == "POST").then_some(r#"{"name":"t"}"#);
        let a = http(&base, method, &path, body, true).await;
        assert_eq!(
            (a.status, a.body["code"].as_u64()),
            (400, Some(50035)),
            "{method} {path}: {}",
            a.text
        );
        assert!(
            a.text.contains(field),
            "{method} {path} names {field}: {}",
            a.text
        );
    }
    // A body that is not JSON is refused before the ids are looked at, as before.
    let edit = http(
        &base,
        "PATCH",
        &format!("{ops}/xyz"),
        Some("{not json"),
        true,
    )
    .await;
    assert_eq!(
        (edit.status, edit.body["code"].as_u64()),
        (400, Some(50109))
    );
}

#[tokio::test]
async fn repeated_enforced_nonce_returns_the_first_message() {
    let fake = start().await;
    let body = json!({"content": "once", "nonce": "abc-123", "enforce_nonce": true});
    let first = post(&fake.base_url(), &messages_path(demo::OPS), &body).await;
    let second = post(&fake.base_url(), &messages_path(demo::OPS), &body).await;
    assert_eq!(first.status, 200);
    assert_eq!(first.body["id"], second.body["id"]);
    assert_eq!(
        fake.channel_messages(demo::OPS.into()).expect("held").len(),
        1
    );
    // Without enforce_nonce the same nonce makes a new message.
    let third = post(
        &fake.base_url(),
        &messages_path(demo::OPS),
        &json!({"content": "again", "nonce": "abc-123"}),
    )
    .await;
    assert_ne!(third.body["id"], first.body["id"]);
    let long = post(
        &fake.base_url(),
        &messages_path(demo::OPS),
        &json!({"content": "x", "nonce": "n".repeat(26)}),
    )
    .await;
    assert_eq!(
        long.body["errors"]["nonce"]["_errors"][0]["code"],
        "BASE_TYPE_MAX_LENGTH"
    );
}

#[tokio::test]
async fn allowed_mentions_shape_is_checked() {
    let fake = start().await;
    let a = post(
        &fake.base_url(),
        &messages_path(demo::OPS),
        &json!({"content": "<@1000000000000000101>", "allowed_mentions": {"parse": ["nobody"]}}),
    )
    .await;
    assert_eq!(a.body["code"], 50035);
    assert_eq!(
        a.body["errors"]["allowed_mentions"]["parse"]["0"]["_errors"][0]["code"],
        "BASE_TYPE_CHOICES"
    );
    let muted = post(
        &fake.base_url(),
        &messages_path(demo::OPS),
        &json!({"content": "<@1000000000000000101>", "allowed_mentions": {"parse": []}}),
    )
    .await;
    assert_eq!(muted.body["mentions"], json!([]));
    let pinged = post(
        &fake.base_url(),
        &messages_path(demo::OPS),
        &json!({"content": "<@1000000000000000101>"}),
    )
    .await;
    assert_eq!(pinged.body["mentions"][0]["username"], "stanley");
}

#[tokio::test]
async fn reply_must_point_into_the_same_channel() {
    let fake = start().await;
    let parent = user_post(&fake, demo::RELEASE_ROOM, "elsewhere").await;
    let a = post(
        &fake.base_url(),
        &messages_path(demo::OPS),
        &json!({"content": "re", "message_reference": {"message_id": parent["id"]}}),
    )
    .await;
    assert_eq!(a.body["code"], 50035);
    assert_eq!(
        a.body["errors"]["message_reference"]["_errors"][0]["code"],
        "MESSAGE_REFERENCE_UNKNOWN_MESSAGE"
    );
    let lenient = post(&fake.base_url(), &messages_path(demo::OPS), &json!({"content": "re", "message_reference": {"message_id": parent["id"], "fail_if_not_exists": false}})).await;
    assert_eq!(lenient.status, 200);
    assert!(lenient.body.get("message_reference").is_none());
    let good = post(
        &fake.base_url(),
        &messages_path(demo::RELEASE_ROOM),
        &json!({"content": "re", "message_reference": {"message_id": parent["id"]}}),
    )
    .await;
    assert_eq!(good.body["type"], 19);
    assert_eq!(good.body["referenced_message"]["id"], parent["id"]);
}

#[tokio::test]
async fn editing_another_users_message_is_50005() {
    let fake = start().await;
    let theirs = user_post(&fake, demo::OPS, "mine").await;
    let path = format!(
        "{}/{}",
        messages_path(demo::OPS),
        theirs["id"].as_str().expect("id")
    );
    let a = http(
        &fake.base_url(),
        "PATCH",
        &path,
        Some(r#"{"content":"hijack"}"#),
        true,
    )
    .await;
    assert_eq!((a.status, a.body["code"].as_u64()), (403, Some(50005)));
    let ours = post(
        &fake.base_url(),
        &messages_path(demo::OPS),
        &json!({"content": "v1"}),
    )
    .await;
    let path = format!(
        "{}/{}",
        messages_path(demo::OPS),
        ours.body["id"].as_str().expect("id")
    );
    let edited = http(
        &fake.base_url(),
        "PATCH",
        &path,
        Some(r#"{"content":"v2"}"#),
        true,
    )
    .await;
    assert_eq!(edited.body["content"], "v2");
    assert!(edited.body["edited_timestamp"].is_string());
}

#[tokio::test]
async fn deleting_others_messages_needs_manage_messages() {
    let fake = start().await;
    let in_release = user_post(&fake, demo::RELEASE_ROOM, "keep").await;
    let path = format!(
        "{}/{}",
        messages_path(demo::RELEASE_ROOM),
        in_release["id"].as_str().expect("id")
    );
    let a = http(&fake.base_url(), "DELETE", &path, None, true).await;
    assert_eq!((a.status, a.body["code"].as_u64()), (403, Some(50013)));
    let in_ops = user_post(&fake, demo::OPS, "moderated").await;
    let path = format!(
        "{}/{}",
        messages_path(demo::OPS),
        in_ops["id"].as_str().expect("id")
    );
    assert_eq!(
        http(&fake.base_url(), "DELETE", &path, None, true)
            .await
            .status,
        204
    );
    let bulk = post(
        &fake.base_url(),
        &format!("{}/bulk-delete", messages_path(demo::OPS)),
        &json!({"messages": ["1"]}),
    )
    .await;
    assert_eq!(bulk.body["code"], 50035);
}

#[tokio::test]
async fn garbage_bodies_get_clear_errors() {
    let fake = start().await;
    let base = fake.base_url();
    let a = http(
        &base,
        "POST",
        &messages_path(demo::OPS),
        Some("{not json"),
        true,
    )
    .await;
    assert_eq!((a.status, a.body["code"].as_u64()), (400, Some(50109)));
    let b = http(
        &base,
        "POST",
        &messages_path(demo::OPS),
        Some("[1,2,3]"),
        true,
    )
    .await;
    assert_eq!((b.status, b.body["code"].as_u64()), (400, Some(50035)));
    let c = http(
        &base,
        "POST",
        "/_fake/messages",
        Some("{\"channel_id\": 5"),
        false,
    )
    .await;
    assert_eq!(c.status, 400);
    assert!(
        c.body["error"]
            .as_str()
            .is_some_and(|e| e.contains("bad request body")),
        "{}",
        c.text
    );
    let d = http(
        &base,
        "POST",
        "/_fake/faults",
        Some(r#"{"gateway":"explode"}"#),
        false,
    )
    .await;
    assert_eq!(d.status, 400, "{}", d.text);
    let e = http(&base, "POST", "/_fake/messages", Some(r#"{"channel_id":"1000000000000000401","author_id":"1000000000000000101","content":"hi","colour":"red"}"#), false).await;
    assert_eq!(e.status, 400, "unknown fields are refused: {}", e.text);
    let f = http(
        &base,
        "POST",
        "/_fake/faults",
        Some(r#"{"rest":{"status":200}}"#),
        false,
    )
    .await;
    assert_eq!(f.status, 400);
}

#[tokio::test]
async fn missing_authorization_is_401() {
    let fake = start().await;
    let a = http(&fake.base_url(), "GET", "/api/v10/users/@me", None, false).await;
    assert_eq!(a.status, 401);
    assert_eq!(
        http(&fake.base_url(), "GET", "/api/v10/gateway", None, false)
            .await
            .status,
        200
    );
}

#[tokio::test]
async fn unknown_route_is_404_and_recorded() {
    let fake = start().await;
    let a = get(&fake.base_url(), "/api/v10/guilds/1/audit-logs").await;
    assert_eq!(a.status, 404);
    let wrong_method = http(
        &fake.base_url(),
        "PUT",
        &messages_path(demo::OPS),
        Some("{}"),
        true,
    )
    .await;
    assert_eq!(wrong_method.status, 405);
    let log = fake.requests();
    assert_eq!(log[0].path, "/api/v10/guilds/1/audit-logs");
    assert_eq!(log[0].status, 404);
}

#[tokio::test]
async fn request_log_records_method_path_query_body_status() {
    let fake = start().await;
    let base = fake.base_url();
    post(
        &base,
        &messages_path(demo::OPS),
        &json!({"content": "logged"}),
    )
    .await;
    get(&base, &format!("{}?limit=5", messages_path(demo::OPS))).await;
    http(&base, "POST", &messages_path(demo::OPS), Some("nope"), true).await;
    let log = get(&base, "/_fake/requests").await;
    let entries = log.body.as_array().expect("array");
    assert_eq!(entries.len(), 3);
    assert_eq!(entries[0]["method"], "POST");
    assert_eq!(entries[0]["body"]["content"], "logged");
    assert_eq!(entries[0]["status"], 200);
    assert_eq!(entries[1]["query"], "limit=5");
    assert_eq!(entries[1]["body"], Value::Null);
    assert_eq!(entries[2]["body"], Value::Null);
    assert_eq!(entries[2]["status"], 400);
    assert_eq!(
        http(&base, "DELETE", "/_fake/requests", None, false)
            .await
            .status,
        204
    );
    assert!(fake.requests().is_empty());
}

/// `GET /_fake/ratelimits` counts what the bot sent under the global limit (a route's 429
/// included, the control API not) and the 429s by scope; `DELETE` starts it afresh.
#[tokio::test]
async fn the_rate_tally_counts_what_was_sent_and_each_scopes_429s() {
    let fake = start().await;
    let base = fake.base_url();
    for n in 0..6 {
        post(
            &base,
            &messages_path(demo::OPS),
            &json!({"content": format!("m{n}")}),
        )
        .await;
    }
    user_post(&fake, demo::OPS, "the control API is not the bot's traffic").await;
    let tally = get(&base, "/_fake/ratelimits").await;
    assert_eq!(tally.status, 200, "{}", tally.text);
    assert_eq!(
        tally.body,
        json!({"peak_per_second": 6, "global_429s": 0, "route_429s": 1})
    );
    assert_eq!(fake.rate_tally().route_429s, 1);
    let reset = http(&base, "DELETE", "/_fake/ratelimits", None, false).await;
    assert_eq!(reset.status, 204);
    assert_eq!(fake.rate_tally(), fake_discord::RateTally::default());
    let refused = http(&base, "POST", "/_fake/ratelimits", Some("{}"), false).await;
    assert_eq!(refused.status, 405, "{}", refused.text);
}

#[tokio::test]
async fn every_answer_carries_rate_limit_headers() {
    let fake = start().await;
    let a = get(&fake.base_url(), "/api/v10/users/@me").await;
    for h in [
        "x-ratelimit-limit",
        "x-ratelimit-remaining",
        "x-ratelimit-reset",
        "x-ratelimit-reset-after",
        "x-ratelimit-bucket",
    ] {
        assert!(a.header(h).is_some(), "missing {h}: {:?}", a.headers);
    }
}

#[tokio::test]
async fn a_sixth_create_in_five_seconds_is_refused_like_discord() {
    let fake = start().await;
    let base = fake.base_url();
    let mut remaining = Vec::new();
    for n in 0..5 {
        let a = post(
            &base,
            &messages_path(demo::OPS),
            &json!({"content": format!("m{n}")}),
        )
        .await;
        assert_eq!(a.status, 200, "{}", a.text);
        remaining.push(
            a.header("x-ratelimit-remaining")
                .unwrap_or_default()
                .to_owned(),
        );
        assert_eq!(a.header("x-ratelimit-limit"), Some("5"));
    }
    assert_eq!(remaining, ["4", "3", "2", "1", "0"]);
    let refused = post(&base, &messages_path(demo::OPS), &json!({"content": "m5"})).await;
    assert_eq!(refused.status, 429, "{}", refused.text);
    assert_eq!(refused.body["global"], false);
    let retry_after = refused.body["retry_after"].as_f64().expect("retry_after");
    assert!(retry_after > 0.0 && retry_after <= 5.0, "{retry_after}");
    assert_eq!(refused.header("x-ratelimit-scope"), Some("user"));
    assert_eq!(refused.header("x-ratelimit-remaining"), Some("0"));
    assert!(refused.header("x-ratelimit-global").is_none());
    assert!(refused.header("retry-after").is_some());
    // Other channels have buckets of their own, under the same bucket hash.
    let other = post(
        &base,
        &messages_path(demo::RANDOM),
        &json!({"content": "elsewhere"}),
    )
    .await;
    assert_eq!(other.status, 200, "{}", other.text);
    assert_eq!(
        other.header("x-ratelimit-bucket"),
        refused.header("x-ratelimit-bucket")
    );
    // The refusal is in the log with its status, and nothing was posted.
    let statuses: Vec<u16> = fake.requests().iter().map(|r| r.status).collect();
    assert_eq!(statuses, [200, 200, 200, 200, 200, 429, 200]);
    assert_eq!(fake.channel_messages(demo::OPS.into()).unwrap().len(), 5);
}

#[tokio::test]
async fn the_global_limit_answers_a_global_429() {
    use std::net::{Ipv4Addr, SocketAddr};
    let fake = FakeDiscord::start_with(
        World::demo(),
        SocketAddr::from((Ipv4Addr::LOCALHOST, 0)),
        FakeOptions {
            rate_limits: RateLimits {
                global_per_second: 3,
                ..RateLimits::discord()
            },
            ..FakeOptions::default()
        },
    )
    .await
    .expect("start");
    let base = fake.base_url();
    let mut statuses = Vec::new();
    let started = Instant::now();
    for _ in 0..4 {
        statuses.push(get(&base, "/api/v10/users/@me").await);
    }
    if started.elapsed().as_millis() < 900 {
        let refused = &statuses[3];
        assert_eq!(refused.status, 429, "{}", refused.text);
        assert_eq!(refused.body["global"], true);
        assert_eq!(refused.header("x-ratelimit-global"), Some("true"));
        assert_eq!(refused.header("x-ratelimit-scope"), Some("global"));
    }
    assert!(statuses[..3].iter().all(|a| a.status == 200));
}

#[tokio::test]
async fn injected_429s_carry_retry_after_then_stop() {
    let fake = start().await;
    let base = fake.base_url();
    let f = post(
        &base,
        "/_fake/faults",
        &json!({"rest": {"status": 429, "count": 2, "retry_after": 0.5}}),
    )
    .await;
    assert_eq!(f.status, 200, "{}", f.text);
    for _ in 0..2 {
        let a = post(&base, &messages_path(demo::OPS), &json!({"content": "hi"})).await;
        assert_eq!(a.status, 429);
        assert_eq!(a.header("retry-after"), Some("1"));
        assert_eq!(a.body["retry_after"], 0.5);
        assert_eq!(a.body["global"], false);
    }
    assert_eq!(
        post(&base, &messages_path(demo::OPS), &json!({"content": "hi"}))
            .await
            .status,
        200
    );
    post(
        &base,
        "/_fake/faults",
        &json!({"rest": {"status": 500, "count": 1}}),
    )
    .await;
    assert_eq!(get(&base, "/api/v10/users/@me").await.status, 500);
    assert_eq!(get(&base, "/api/v10/users/@me").await.status, 200);
    // Faulted requests are in the log with their status.
    assert!(fake.requests().iter().filter(|r| r.status == 429).count() == 2);
}

#[tokio::test]
async fn control_api_round_trip() {
    let fake = start().await;
    let base = fake.base_url();
    let first = user_post(&fake, demo::OPS, "first").await;
    let id = first["id"].as_str().expect("id").to_string();
    let reply = post(&base, "/_fake/messages", &json!({"channel_id": demo::OPS.to_string(), "author_id": demo::TOMAS.to_string(), "content": "second", "reply_to": id})).await;
    assert_eq!(reply.body["referenced_message"]["id"], first["id"]);
    let edit = http(
        &base,
        "PATCH",
        &format!("/_fake/messages/{}/{id}", demo::OPS),
        Some(r#"{"content":"first!"}"#),
        false,
    )
    .await;
    assert_eq!(edit.body["content"], "first!");
    let react = post(&base, "/_fake/reactions", &json!({"channel_id": demo::OPS.to_string(), "message_id": id, "user_id": demo::TOMAS.to_string(), "emoji": "👍"})).await;
    assert_eq!(react.status, 204, "{}", react.text);
    let held = get(&base, &format!("/_fake/channels/{}/messages", demo::OPS)).await;
    let held = held.body.as_array().expect("array").clone();
    assert_eq!(held.len(), 2);
    assert_eq!(held[0]["content"], "first!");
    assert_eq!(held[0]["reactions"][0]["count"], 1);
    let del = http(
        &base,
        "DELETE",
        &format!("/_fake/messages/{}/{id}", demo::OPS),
        None,
        false,
    )
    .await;
    assert_eq!(del.status, 204);
    let state = get(&base, "/_fake/state").await;
    assert_eq!(state.body["messages_held"], 1);
    let outsider = post(&base, "/_fake/messages", &json!({"channel_id": demo::STANLEY_DM.to_string(), "author_id": demo::TOMAS.to_string(), "content": "not my dm"})).await;
    assert_eq!(outsider.status, 409);
    let unregistered = post(&base, "/_fake/interactions", &json!({"channel_id": demo::OPS.to_string(), "user_id": demo::STANLEY.to_string(), "name": "nope"})).await;
    assert_eq!(unregistered.status, 409);
    assert!(unregistered.text.contains("not registered"));
}

#[tokio::test]
async fn the_fake_starts_in_under_100_ms() {
    let began = Instant::now();
    let fake = start().await;
    let elapsed = began.elapsed();
    assert_eq!(get(&fake.base_url(), "/api/v10/gateway").await.status, 200);
    assert!(elapsed.as_millis() < 100, "start took {elapsed:?}");
}

#[tokio::test]
async fn refuses_non_loopback_addresses() {
    let addr: std::net::SocketAddr = "0.0.0.0:0".parse().expect("addr");
    assert!(matches!(
        FakeDiscord::start_on(World::demo(), addr).await,
        Err(fake_discord::FakeError::NotLoopback(_))
    ));
}
