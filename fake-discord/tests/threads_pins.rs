//! Threads, pins and message paging over real HTTP, per Discord's spec: creation from a message
//! and standalone, archive and lock, members, active and archived listings, pins, `GET
//! messages?after|before|around`; and every answer carries the keys the spec requires.

mod common;

use common::{get, http, post};
use fake_discord::{demo, FakeDiscord, World};
use serde_json::{json, Value};

// The keys Discord's OpenAPI description marks required in each answer (checked against it
// when written; the tests hold them as the project's own facts).
const USER: &[&str] = &[
    "id",
    "username",
    "avatar",
    "discriminator",
    "public_flags",
    "flags",
    "global_name",
    "primary_guild",
];
const MESSAGE: &[&str] = &[
    "type",
    "content",
    "mentions",
    "mention_roles",
    "attachments",
    "embeds",
    "timestamp",
    "edited_timestamp",
    "flags",
    "components",
    "id",
    "channel_id",
    "author",
    "pinned",
    "mention_everyone",
    "tts",
];
const THREAD: &[&str] = &[
    "id",
    "type",
    "flags",
    "guild_id",
    "name",
    "owner_id",
    "thread_metadata",
    "message_count",
    "member_count",
    "total_message_sent",
];
const THREAD_METADATA: &[&str] = &[
    "archived",
    "archive_timestamp",
    "auto_archive_duration",
    "locked",
];
const THREAD_MEMBER: &[&str] = &["id", "user_id", "join_timestamp", "flags"];
const THREADS: &[&str] = &["threads", "members", "has_more"];
const PINS: &[&str] = &["items", "has_more"];
const PIN: &[&str] = &["pinned_at", "message"];
const REACTION: &[&str] = &[
    "emoji",
    "count",
    "count_details",
    "burst_colors",
    "me_burst",
    "me",
];

fn has_keys(value: &Value, keys: &[&str], what: &str) {
    let object = value
        .as_object()
        .unwrap_or_else(|| panic!("{what} is not an object: {value}"));
    for key in keys {
        assert!(
            object.contains_key(*key),
            "{what} lacks required `{key}`: {value}"
        );
    }
}

fn check_user(user: &Value) {
    has_keys(user, USER, "user");
}

fn check_message(message: &Value) {
    has_keys(message, MESSAGE, "message");
    check_user(&message["author"]);
    for user in message["mentions"].as_array().expect("mentions") {
        check_user(user);
    }
    for reaction in message["reactions"].as_array().into_iter().flatten() {
        has_keys(reaction, REACTION, "reaction");
    }
}

fn check_thread(thread: &Value) {
    has_keys(thread, THREAD, "thread");
    has_keys(
        &thread["thread_metadata"],
        THREAD_METADATA,
        "thread_metadata",
    );
}

fn check_threads(listing: &Value) {
    has_keys(listing, THREADS, "threads listing");
    for thread in listing["threads"].as_array().expect("threads") {
        check_thread(thread);
    }
    for member in listing["members"].as_array().expect("members") {
        has_keys(member, THREAD_MEMBER, "thread member");
    }
}

async fn start() -> FakeDiscord {
    FakeDiscord::start(World::demo()).await.expect("start")
}

async fn user_post(fake: &FakeDiscord, channel: u64, content: &str) -> String {
    let a = post(
        &fake.base_url(),
        "/_fake/messages",
        &json!({"channel_id": channel.to_string(), "author_id": demo::STANLEY.to_string(), "content": content}),
    )
    .await;
    assert_eq!(a.status, 200, "{}", a.text);
    a.body["id"].as_str().expect("id").to_owned()
}

async fn send(fake: &FakeDiscord, method: &str, path: &str, body: &Value) -> common::Answer {
    http(
        &fake.base_url(),
        method,
        path,
        Some(&body.to_string()),
        true,
    )
    .await
}

#[tokio::test]
async fn a_message_author_and_mentions_carry_every_required_user_key() {
    let fake = start().await;
    let id = user_post(&fake, demo::OPS, &format!("hi <@{}>", demo::TOMAS)).await;
    let base = fake.base_url();
    let one = get(
        &base,
        &format!("/api/v10/channels/{}/messages/{id}", demo::OPS),
    )
    .await;
    assert_eq!(one.status, 200, "{}", one.text);
    check_message(&one.body);
    assert_eq!(one.body["author"]["flags"], 0);
    assert!(one.body["author"]["primary_guild"].is_null());
    assert_eq!(one.body["mentions"].as_array().map(Vec::len), Some(1));
    let sent = post(
        &base,
        &format!("/api/v10/channels/{}/messages", demo::OPS),
        &json!({"content": "from the bot"}),
    )
    .await;
    assert_eq!(sent.status, 200, "{}", sent.text);
    check_message(&sent.body);
}

#[tokio::test]
async fn messages_page_after_before_and_around() {
    let fake = start().await;
    let mut ids = Vec::new();
    for i in 0..9 {
        ids.push(user_post(&fake, demo::RANDOM, &format!("m{i}")).await);
    }
    let base = fake.base_url();
    let page = |query: String| {
        let base = base.clone();
        async move {
            let a = get(
                &base,
                &format!("/api/v10/channels/{}/messages?{query}", demo::RANDOM),
            )
            .await;
            assert_eq!(a.status, 200, "{}", a.text);
            let list = a.body.as_array().expect("array").clone();
            list.iter().for_each(check_message);
            list.iter()
                .map(|m| m["content"].as_str().unwrap().to_owned())
                .collect::<Vec<_>>()
        }
    };
    // Newest first in every mode; `after` takes the oldest ones past the id.
    assert_eq!(
        page(format!("after={}&limit=3", ids[2])).await,
        ["m5", "m4", "m3"]
    );
    assert_eq!(
        page(format!("before={}&limit=2", ids[2])).await,
        ["m1", "m0"]
    );
    assert_eq!(
        page(format!("around={}&limit=3", ids[4])).await,
        ["m5", "m4", "m3"]
    );
    assert_eq!(page("limit=2".into()).await, ["m8", "m7"]);
    for bad in ["limit=0", "limit=101", "after=abc", "before=-1"] {
        let a = get(
            &base,
            &format!("/api/v10/channels/{}/messages?{bad}", demo::RANDOM),
        )
        .await;
        assert_eq!(
            (a.status, a.body["code"].as_u64()),
            (400, Some(50035)),
            "{bad}"
        );
    }
}

#[tokio::test]
async fn threads_are_created_standalone_and_from_a_message() {
    let fake = start().await;
    let base = fake.base_url();
    let standalone = send(
        &fake,
        "POST",
        &format!("/api/v10/channels/{}/threads", demo::OPS),
        &json!({"name": "standup", "type": 11, "auto_archive_duration": 60}),
    )
    .await;
    assert_eq!(standalone.status, 201, "{}", standalone.text);
    check_thread(&standalone.body);
    assert_eq!(standalone.body["type"], 11);
    assert_eq!(standalone.body["parent_id"], demo::OPS.to_string());
    assert_eq!(
        standalone.body["thread_metadata"]["auto_archive_duration"],
        60
    );
    has_keys(&standalone.body["member"], THREAD_MEMBER, "member");

    // Without a type, Discord makes a private thread.
    let private = send(
        &fake,
        "POST",
        &format!("/api/v10/channels/{}/threads", demo::OPS),
        &json!({"name": "quiet"}),
    )
    .await;
    assert_eq!(
        (private.status, private.body["type"].as_u64()),
        (201, Some(12))
    );

    let starter = user_post(&fake, demo::OPS, "deploy failed").await;
    let path = format!("/api/v10/channels/{}/messages/{starter}/threads", demo::OPS);
    let from_message = send(&fake, "POST", &path, &json!({"name": "deploy follow-up"})).await;
    assert_eq!(from_message.status, 201, "{}", from_message.text);
    check_thread(&from_message.body);
    assert_eq!(from_message.body["id"], starter.as_str());
    assert_eq!(from_message.body["type"], 11);
    // One thread per message.
    let again = send(&fake, "POST", &path, &json!({"name": "again"})).await;
    assert_eq!(
        (again.status, again.body["code"].as_u64()),
        (400, Some(160004))
    );

    // The thread is a channel the bot can post in and read back.
    let thread_id = from_message.body["id"].as_str().unwrap().to_owned();
    let sent = post(
        &base,
        &format!("/api/v10/channels/{thread_id}/messages"),
        &json!({"content": "in the thread"}),
    )
    .await;
    assert_eq!(sent.status, 200, "{}", sent.text);
    let got = get(&base, &format!("/api/v10/channels/{thread_id}")).await;
    check_thread(&got.body);
}

#[tokio::test]
async fn thread_creation_refuses_garbage_and_wrong_channels() {
    let fake = start().await;
    let path = format!("/api/v10/channels/{}/threads", demo::OPS);
    for (body, key) in [
        (json!({}), "name"),
        (json!({"name": ""}), "name"),
        (json!({"name": "x".repeat(101)}), "name"),
        (json!({"name": 5}), "name"),
        (
            json!({"name": "ok", "auto_archive_duration": 61}),
            "auto_archive_duration",
        ),
        (json!({"name": "ok", "type": 0}), "type"),
    ] {
        let a = send(&fake, "POST", &path, &body).await;
        assert_eq!(
            (a.status, a.body["code"].as_u64()),
            (400, Some(50035)),
            "{body}"
        );
        assert!(a.body["errors"].get(key).is_some(), "{body}: {}", a.text);
    }
    let not_json = http(&fake.base_url(), "POST", &path, Some("{nope"), true).await;
    assert_eq!(not_json.body["code"], 50109);
    // A thread cannot hold threads; a hidden channel is 50001; an unknown message 10008.
    let in_thread = send(
        &fake,
        "POST",
        &format!("/api/v10/channels/{}/threads", demo::INCIDENT_THREAD),
        &json!({"name": "nested"}),
    )
    .await;
    assert_eq!(in_thread.body["code"], 50024);
    let unknown = send(
        &fake,
        "POST",
        &format!(
            "/api/v10/channels/{}/messages/1000000000000009999/threads",
            demo::OPS
        ),
        &json!({"name": "x"}),
    )
    .await;
    assert_eq!(unknown.body["code"], 10008);
    let secret = send(
        &fake,
        "POST",
        &format!("/api/v10/channels/{}/threads", demo::SECRET),
        &json!({"name": "x"}),
    )
    .await;
    assert_eq!(secret.status, 403, "{}", secret.text);
}

#[tokio::test]
async fn archive_lock_and_members_follow_discord() {
    let fake = start().await;
    let base = fake.base_url();
    let thread = format!("/api/v10/channels/{}", demo::INCIDENT_THREAD);
    let archived = send(&fake, "PATCH", &thread, &json!({"archived": true})).await;
    assert_eq!(archived.status, 200, "{}", archived.text);
    check_thread(&archived.body);
    assert_eq!(archived.body["thread_metadata"]["archived"], true);
    // An archived thread takes no messages and no members.
    let refused = post(
        &base,
        &format!("{thread}/messages"),
        &json!({"content": "x"}),
    )
    .await;
    assert_eq!(refused.body["code"], 50083);
    let join = send(
        &fake,
        "PUT",
        &format!("{thread}/thread-members/@me"),
        &json!({}),
    )
    .await;
    assert_eq!(join.body["code"], 50083);
    // It is listed among the archived public threads, not the active ones.
    let listing = get(
        &base,
        &format!("/api/v10/channels/{}/threads/archived/public", demo::OPS),
    )
    .await;
    assert_eq!(listing.status, 200, "{}", listing.text);
    check_threads(&listing.body);
    assert_eq!(
        listing.body["threads"][0]["id"],
        demo::INCIDENT_THREAD.to_string()
    );
    let active = get(
        &base,
        &format!("/api/v10/guilds/{}/threads/active", demo::GUILD),
    )
    .await;
    check_threads(&active.body);
    let incident = demo::INCIDENT_THREAD.to_string();
    assert!(!active.body["threads"]
        .as_array()
        .unwrap()
        .iter()
        .any(|t| t["id"].as_str() == Some(incident.as_str())));

    let reopened = send(&fake, "PATCH", &thread, &json!({"archived": false})).await;
    assert_eq!(reopened.body["thread_metadata"]["archived"], false);
    let join = send(
        &fake,
        "PUT",
        &format!("{thread}/thread-members/@me"),
        &json!({}),
    )
    .await;
    assert_eq!(join.status, 204, "{}", join.text);
    let members = get(&base, &format!("{thread}/thread-members")).await;
    assert_eq!(members.status, 200, "{}", members.text);
    let members = members.body.as_array().unwrap().clone();
    assert_eq!(members.len(), 1);
    has_keys(&members[0], THREAD_MEMBER, "member");
    assert_eq!(members[0]["user_id"], demo::BOT.to_string());

    // A moderator archives and locks it: the bot cannot reopen it (no MANAGE_THREADS), nor lock.
    let control = send(
        &fake,
        "PATCH",
        &format!("/_fake/channels/{}", demo::INCIDENT_THREAD),
        &json!({"archived": true, "locked": true}),
    )
    .await;
    assert_eq!(control.status, 200, "{}", control.text);
    assert_eq!(control.body["thread_metadata"]["locked"], true);
    let reopen = send(&fake, "PATCH", &thread, &json!({"archived": false})).await;
    assert_eq!(
        (reopen.status, reopen.body["code"].as_u64()),
        (403, Some(50013))
    );
    let refused = post(
        &base,
        &format!("{thread}/messages"),
        &json!({"content": "x"}),
    )
    .await;
    assert_eq!(refused.body["code"], 50083);
    // Garbage and channels that are not threads.
    let bad = send(&fake, "PATCH", &thread, &json!({"archived": "yes"})).await;
    assert_eq!(bad.body["code"], 50035);
    let channel = send(
        &fake,
        "PATCH",
        &format!("/api/v10/channels/{}", demo::OPS),
        &json!({"archived": true}),
    )
    .await;
    // A text channel has no `archived`: Discord ignores the field, and nothing changes.
    assert_eq!(channel.status, 200, "{}", channel.text);
    assert!(
        channel.body.get("thread_metadata").is_none(),
        "{}",
        channel.text
    );
    let members = get(
        &base,
        &format!("/api/v10/channels/{}/thread-members", demo::OPS),
    )
    .await;
    assert_eq!(members.body["code"], 50024);
    let limit = get(
        &base,
        &format!(
            "/api/v10/channels/{}/threads/archived/public?limit=1",
            demo::OPS
        ),
    )
    .await;
    assert_eq!(limit.body["code"], 50035);
    let before = get(
        &base,
        &format!(
            "/api/v10/channels/{}/threads/archived/public?before=yesterday",
            demo::OPS
        ),
    )
    .await;
    assert_eq!(before.body["code"], 50035);
}

#[tokio::test]
async fn pins_are_added_listed_paged_and_removed() {
    let fake = start().await;
    let base = fake.base_url();
    let mut ids = Vec::new();
    for i in 0..3 {
        ids.push(user_post(&fake, demo::OPS, &format!("pin me {i}")).await);
    }
    for id in &ids {
        let path = format!("/api/v10/channels/{}/messages/pins/{id}", demo::OPS);
        let a = send(&fake, "PUT", &path, &json!({})).await;
        assert_eq!(a.status, 204, "{}", a.text);
    }
    // Pinning twice is fine.
    let path = format!("/api/v10/channels/{}/messages/pins/{}", demo::OPS, ids[0]);
    assert_eq!(send(&fake, "PUT", &path, &json!({})).await.status, 204);
    let list = get(
        &base,
        &format!("/api/v10/channels/{}/messages/pins?limit=2", demo::OPS),
    )
    .await;
    assert_eq!(list.status, 200, "{}", list.text);
    has_keys(&list.body, PINS, "pins");
    let items = list.body["items"].as_array().unwrap().clone();
    for item in &items {
        has_keys(item, PIN, "pin");
        check_message(&item["message"]);
        assert_eq!(item["message"]["pinned"], true);
    }
    // Most recently pinned first; the rest on the next page.
    assert_eq!(items[0]["message"]["id"], ids[2].as_str());
    assert_eq!(list.body["has_more"], true);
    let cursor = items[1]["pinned_at"].as_str().unwrap();
    let next = get(
        &base,
        &format!(
            "/api/v10/channels/{}/messages/pins?before={}",
            demo::OPS,
            cursor.replace('+', "%2B")
        ),
    )
    .await;
    assert_eq!(next.status, 200, "{}", next.text);
    assert_eq!(next.body["items"].as_array().unwrap().len(), 1);
    assert_eq!(next.body["items"][0]["message"]["id"], ids[0].as_str());
    assert_eq!(next.body["has_more"], false);

    let a = send(&fake, "DELETE", &path, &json!({})).await;
    assert_eq!(a.status, 204);
    let list = get(
        &base,
        &format!("/api/v10/channels/{}/messages/pins", demo::OPS),
    )
    .await;
    assert_eq!(list.body["items"].as_array().unwrap().len(), 2);

    // Without MANAGE_MESSAGES the bot may not pin; unknown messages are 10008; garbage is 50035.
    let random = user_post(&fake, demo::RANDOM, "no pins here").await;
    let denied = send(
        &fake,
        "PUT",
        &format!("/api/v10/channels/{}/messages/pins/{random}", demo::RANDOM),
        &json!({}),
    )
    .await;
    assert_eq!(
        (denied.status, denied.body["code"].as_u64()),
        (403, Some(50013))
    );
    let unknown = send(
        &fake,
        "PUT",
        &format!(
            "/api/v10/channels/{}/messages/pins/1000000000000009999",
            demo::OPS
        ),
        &json!({}),
    )
    .await;
    assert_eq!(unknown.body["code"], 10008);
    for bad in ["limit=0", "limit=51", "before=soon"] {
        let a = get(
            &base,
            &format!("/api/v10/channels/{}/messages/pins?{bad}", demo::OPS),
        )
        .await;
        assert_eq!(a.body["code"], 50035, "{bad}");
    }
}
