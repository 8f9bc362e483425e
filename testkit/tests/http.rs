//! The HTTP protocol end to end: a real server on 127.0.0.1:0 over the test kit's recording
//! platform.

use std::time::Duration;

use serde_json::{json, Value};
use switchboard_engine::surface::{MentionPolicy, SurfaceError};
use switchboard_testkit::platform::{demo, SurfaceCall};
use switchboard_testkit::testing::{TestServer, DEMO_CONFIG};

struct Answer {
    status: u16,
    body: Value,
    retry_after: Option<String>,
}

/// One HTTP request from a blocking client on a worker thread.
async fn request(
    method: &'static str,
    url: String,
    token: Option<String>,
    headers: Vec<(&'static str, String)>,
    body: Option<Vec<u8>>,
) -> Answer {
    let task = tokio::task::spawn_blocking(move || {
        let agent: ureq::Agent = ureq::Agent::config_builder()
            .http_status_as_error(false)
            .timeout_global(Some(Duration::from_secs(20)))
            .build()
            .into();
        let mut builder = ureq::http::Request::builder().method(method).uri(&url);
        if let Some(token) = token {
            builder = builder.header("authorization", format!("Bearer {token}"));
        }
        for (name, value) in headers {
            builder = builder.header(name, value);
        }
        let request = builder
            .header("content-type", "application/json")
            .body(body.unwrap_or_default())
            .expect("request");
        let mut response = agent.run(request).expect("server answers");
        let status = response.status().as_u16();
        let retry_after = response
            .headers()
            .get("retry-after")
            .and_then(|v| v.to_str().ok())
            .map(str::to_owned);
        let text = response.body_mut().read_to_string().expect("body is text");
        let body = serde_json::from_str(&text).unwrap_or(Value::String(text));
        Answer {
            status,
            body,
            retry_after,
        }
    });
    tokio::time::timeout(Duration::from_secs(30), task)
        .await
        .expect("request finished in time")
        .expect("request task")
}

async fn call_as(server: &TestServer, token: Option<&str>, tool: &str, input: Value) -> Answer {
    call_with_headers(server, token, vec![], tool, input).await
}

async fn call_with_headers(
    server: &TestServer,
    token: Option<&str>,
    headers: Vec<(&'static str, String)>,
    tool: &str,
    input: Value,
) -> Answer {
    let body = serde_json::to_vec(&json!({ "tool": tool, "input": input })).unwrap();
    request(
        "POST",
        format!("{}/v1/call", server.url()),
        token.map(str::to_owned),
        headers,
        Some(body),
    )
    .await
}

async fn call(server: &TestServer, tool: &str, input: Value) -> Answer {
    call_as(server, Some(server.operator_token()), tool, input).await
}

fn kind(answer: &Answer) -> &str {
    answer.body["error"]["kind"].as_str().unwrap_or("<none>")
}

async fn demo_server() -> TestServer {
    TestServer::start(&DEMO_CONFIG)
        .await
        .expect("server starts")
}

#[tokio::test]
async fn health_needs_no_token() {
    let server = demo_server().await;
    let answer = request(
        "GET",
        format!("{}/health", server.url()),
        None,
        vec![],
        None,
    )
    .await;
    assert_eq!(answer.status, 200);
    assert_eq!(answer.body["status"], "ok");
    assert_eq!(answer.body["discord"], "none");
    assert!(answer.body["version"].is_string());
}

#[tokio::test]
async fn missing_or_wrong_token_is_401_denied() {
    let server = demo_server().await;
    for token in [None, Some("wrong"), Some("sbcap_0000")] {
        let answer = call_as(&server, token, "surface.help", json!({})).await;
        assert_eq!(answer.status, 401, "{token:?}");
        assert_eq!(kind(&answer), "denied");
        assert_eq!(answer.body["ok"], false);
    }
    let answer = request(
        "GET",
        format!("{}/v1/tools", server.url()),
        None,
        vec![],
        None,
    )
    .await;
    assert_eq!(answer.status, 401);
}

#[tokio::test]
async fn tools_listing_has_schemas_and_detail_has_examples() {
    let server = demo_server().await;
    let token = Some(server.operator_token().to_owned());
    let list = request(
        "GET",
        format!("{}/v1/tools", server.url()),
        token.clone(),
        vec![],
        None,
    )
    .await;
    assert_eq!(list.status, 200);
    let tools = list.body["tools"].as_array().unwrap();
    let send = tools
        .iter()
        .find(|t| t["id"] == "surface.messages.send")
        .expect("send is listed");
    assert_eq!(send["mutating"], true);
    assert_eq!(send["inputSchema"]["additionalProperties"], false);
    assert!(send["inputSchema"]["properties"]["replyToMessageId"].is_object());
    assert!(send["inputSchema"]["properties"]["paths"].is_object());
    // No workflow engine in this server (no agent could resume one): workflow.* is not listed.
    assert!(
        tools.iter().all(|t| !t["id"]
            .as_str()
            .unwrap_or_default()
            .starts_with("workflow.")),
        "{tools:?}"
    );
    let detail = request(
        "GET",
        format!("{}/v1/tools/surface.messages.send", server.url()),
        token.clone(),
        vec![],
        None,
    )
    .await;
    assert_eq!(detail.status, 200);
    assert!(!detail.body["examples"].as_array().unwrap().is_empty());
    assert!(detail.body["help"].as_str().unwrap().contains("2,000"));
    let unknown = request(
        "GET",
        format!("{}/v1/tools/surface.mesages.send", server.url()),
        token,
        vec![],
        None,
    )
    .await;
    assert_eq!(unknown.status, 404);
    assert_eq!(
        unknown.body["error"]["details"]["suggestion"],
        "surface.messages.send"
    );
}

#[tokio::test]
async fn unknown_callable_suggests_the_nearest() {
    let server = demo_server().await;
    let answer = call(&server, "surface.mesages.list", json!({})).await;
    assert_eq!(answer.status, 404);
    assert_eq!(kind(&answer), "not_found");
    assert!(answer.body["error"]["message"]
        .as_str()
        .unwrap()
        .contains("Did you mean 'surface.messages.list'?"));
}

#[tokio::test]
async fn did_you_mean_names_only_callables_in_the_callers_scope() {
    let server = demo_server().await;
    let reader = server.mint(
        demo::OPS,
        "run-dym",
        &["surface.messages.list", "surface.help"],
        Duration::from_secs(60),
    );
    // The nearest id is a send, out of this token's scope: it is not named.
    let answer = call_as(&server, Some(&reader), "surface.messages.sen", json!({})).await;
    assert_eq!(answer.status, 404, "{}", answer.body);
    let error = &answer.body["error"];
    assert!(
        !error.to_string().contains("surface.messages.send"),
        "a callable outside the scope was named: {error}"
    );
    let known: Vec<&str> = error["details"]["known"]
        .as_array()
        .unwrap()
        .iter()
        .filter_map(Value::as_str)
        .collect();
    assert_eq!(known, ["surface.help", "surface.messages.list"]);
    // Within the scope, the hint still helps.
    let answer = call_as(&server, Some(&reader), "surface.messages.lst", json!({})).await;
    assert!(
        answer.body["error"]["message"]
            .as_str()
            .unwrap()
            .contains("Did you mean 'surface.messages.list'?"),
        "{}",
        answer.body
    );
    // The operator sees every callable, so gets the send.
    let answer = call(&server, "surface.messages.sen", json!({})).await;
    assert_eq!(
        answer.body["error"]["details"]["suggestion"],
        "surface.messages.send"
    );
}

#[tokio::test]
async fn invalid_input_names_the_field() {
    let server = demo_server().await;
    let answer = call(
        &server,
        "surface.messages.list",
        json!({"sessionId": "#ops", "limit": "many"}),
    )
    .await;
    assert_eq!(answer.status, 400);
    assert_eq!(kind(&answer), "usage");
    assert!(
        answer.body["error"]["message"]
            .as_str()
            .unwrap()
            .contains("limit"),
        "{}",
        answer.body
    );
    let answer = call(
        &server,
        "surface.messages.list",
        json!({"sessionId": "#ops", "colour": 1}),
    )
    .await;
    assert_eq!(answer.status, 400);
    assert!(answer.body["error"]["message"]
        .as_str()
        .unwrap()
        .contains("colour"));
    let answer = call(
        &server,
        "surface.messages.send",
        json!({"sessionId": "#ops"}),
    )
    .await;
    assert_eq!(answer.status, 400);
    assert!(answer.body["error"]["message"]
        .as_str()
        .unwrap()
        .contains("text"));
    let answer = call(
        &server,
        "surface.messages.list",
        json!({"sessionId": "#ops", "limit": 201}),
    )
    .await;
    assert_eq!(answer.status, 400);
}

#[tokio::test]
async fn garbage_bodies_are_usage_errors() {
    let server = demo_server().await;
    let url = format!("{}/v1/call", server.url());
    let token = Some(server.operator_token().to_owned());
    for body in [
        &b"not json"[..],
        b"[]",
        b"{\"tool\": 5}",
        b"{\"input\":{}}",
        b"{\"tool\":\"surface.help\",\"extra\":1}",
        &[0xff, 0xfe],
    ] {
        let answer = request(
            "POST",
            url.clone(),
            token.clone(),
            vec![],
            Some(body.to_vec()),
        )
        .await;
        assert_eq!(answer.status, 400, "{:?}", String::from_utf8_lossy(body));
        assert_eq!(kind(&answer), "usage");
    }
    // A body of the wrong shape is explained where it went wrong (the path is worked out only
    // for a body that failed the plain read).
    let answer = request(
        "POST",
        url,
        token,
        vec![],
        Some(br#"{"tool": "surface.help", "input": []}"#.to_vec()),
    )
    .await;
    assert_eq!(answer.status, 400);
    let message = answer.body["error"]["message"].as_str().unwrap_or_default();
    assert!(message.contains("at 'input'"), "{message}");
}

#[tokio::test]
async fn body_over_one_mebibyte_is_413() {
    let server = demo_server().await;
    let text = "a".repeat(1024 * 1024 + 10);
    let body = serde_json::to_vec(
        &json!({"tool": "surface.messages.send", "input": {"sessionId": "#ops", "text": text}}),
    )
    .unwrap();
    let answer = request(
        "POST",
        format!("{}/v1/call", server.url()),
        Some(server.operator_token().to_owned()),
        vec![],
        Some(body),
    )
    .await;
    assert_eq!(answer.status, 413);
    assert_eq!(kind(&answer), "usage");
    assert!(server.sends().is_empty());
}

#[tokio::test]
async fn session_aliases_resolve_through_http() {
    let server = demo_server().await;
    for reference in [
        "#release-room",
        "release-room",
        "RELEASE-ROOM",
        "<#1000000000000000402>",
        "1000000000000000402",
    ] {
        let answer = call(
            &server,
            "surface.messages.send",
            json!({"sessionId": reference, "text": "hi"}),
        )
        .await;
        assert_eq!(answer.status, 200, "{reference}: {}", answer.body);
        assert_eq!(answer.body["value"]["channelId"], "1000000000000000402");
    }
    let answer = call(
        &server,
        "surface.messages.send",
        json!({"sessionId": "#relase-room", "text": "hi"}),
    )
    .await;
    assert_eq!(answer.status, 404);
    assert!(answer.body["error"]["message"]
        .as_str()
        .unwrap()
        .contains("Did you mean 'release-room'?"));
}

#[tokio::test]
async fn send_rewrites_mentions_and_never_pings_everyone() {
    let server = demo_server().await;
    let answer = call(&server, "surface.messages.send", json!({"sessionId": "#release-room", "text": "ping @Stanley about #ops, @everyone and @oncall"})).await;
    assert_eq!(answer.status, 200, "{}", answer.body);
    let sent = server.sends();
    assert_eq!(sent.len(), 1);
    assert_eq!(
        sent[0].content,
        "ping <@1000000000000000101> about <#1000000000000000401>, @everyone and <@&1000000000000000301>"
    );
    assert_eq!(
        sent[0].mentions,
        MentionPolicy {
            users: true,
            roles: false,
            replied_user: false
        }
    );
}

#[tokio::test]
async fn silent_send_pings_nobody_and_reply_pings_the_replied_user() {
    let server = demo_server().await;
    let trigger = server
        .surface()
        .post(demo::OPS.into(), demo::STANLEY.into(), "hello");
    call(
        &server,
        "surface.messages.send",
        json!({"sessionId": "#ops", "text": "quiet", "silent": true}),
    )
    .await;
    call(
        &server,
        "surface.messages.send",
        json!({"sessionId": "#ops", "text": "reply", "replyToMessageId": trigger.to_string()}),
    )
    .await;
    let sent = server.sends();
    assert_eq!(sent[0].mentions, MentionPolicy::default());
    assert!(sent[1].mentions.replied_user);
    assert_eq!(sent[1].reply_to, Some(trigger));
}

#[tokio::test]
async fn long_text_is_chunked_at_exactly_2000_characters() {
    let server = demo_server().await;
    let exact = "a".repeat(2000);
    let answer = call(
        &server,
        "surface.messages.send",
        json!({"sessionId": "#ops", "text": exact}),
    )
    .await;
    assert_eq!(
        answer.body["value"]["messageIds"].as_array().unwrap().len(),
        1
    );
    let over = format!("{} b", "a".repeat(1999));
    assert_eq!(over.chars().count(), 2001);
    let answer = call(
        &server,
        "surface.messages.send",
        json!({"sessionId": "#ops", "text": over}),
    )
    .await;
    assert_eq!(
        answer.body["value"]["messageIds"].as_array().unwrap().len(),
        2
    );
    let code: String = (0..300).map(|i| format!("line {i} @Stanley\n")).collect();
    server.surface().clear_calls();
    call(
        &server,
        "surface.messages.send",
        json!({"sessionId": "#ops", "text": format!("look:\n```text\n{code}```")}),
    )
    .await;
    let sent = server.sends();
    assert!(sent.len() >= 2);
    for part in &sent {
        assert!(part.content.chars().count() <= 2000);
        assert_eq!(
            part.content.matches("```").count() % 2,
            0,
            "fence balanced in every part"
        );
        assert!(
            !part.content.contains("<@1000000000000000101>"),
            "code is not rewritten"
        );
    }
}

#[tokio::test]
async fn edit_applies_outbound_rewrite() {
    let server = demo_server().await;
    let sent = call(
        &server,
        "surface.messages.send",
        json!({"sessionId": "#ops", "text": "draft"}),
    )
    .await;
    let id = sent.body["value"]["messageIds"][0]
        .as_str()
        .unwrap()
        .to_owned();
    let answer = call(
        &server,
        "surface.messages.edit",
        json!({"sessionId": "#ops", "messageId": id, "text": "thanks @Stanley, see #release-room"}),
    )
    .await;
    assert_eq!(answer.status, 200, "{}", answer.body);
    let edits: Vec<_> = server
        .surface()
        .calls()
        .into_iter()
        .filter_map(|c| match c {
            SurfaceCall::Edit { content, .. } => Some(content),
            _ => None,
        })
        .collect();
    assert_eq!(
        edits,
        vec!["thanks <@1000000000000000101>, see <#1000000000000000402>"]
    );
    let read = call(
        &server,
        "surface.messages.read",
        json!({"sessionId": "#ops", "messageId": id}),
    )
    .await;
    assert_eq!(
        read.body["value"]["message"]["text"],
        "thanks @Stanley, see #release-room"
    );
}

#[tokio::test]
async fn edit_of_someone_elses_message_or_over_2000_characters_is_refused() {
    let server = demo_server().await;
    let theirs = server
        .surface()
        .post(demo::OPS.into(), demo::STANLEY.into(), "mine");
    let answer = call(
        &server,
        "surface.messages.edit",
        json!({"sessionId": "#ops", "messageId": theirs.to_string(), "text": "hijack"}),
    )
    .await;
    assert_eq!(answer.status, 403);
    let ours = call(
        &server,
        "surface.messages.send",
        json!({"sessionId": "#ops", "text": "x"}),
    )
    .await;
    let id = ours.body["value"]["messageIds"][0]
        .as_str()
        .unwrap()
        .to_owned();
    let answer = call(
        &server,
        "surface.messages.edit",
        json!({"sessionId": "#ops", "messageId": id, "text": "a".repeat(2001)}),
    )
    .await;
    assert_eq!(answer.status, 400);
    assert_eq!(answer.body["error"]["code"], "text_too_long");
}

#[tokio::test]
async fn list_and_read_give_canonical_text_oldest_first() {
    let server = demo_server().await;
    let surface = server.surface();
    let first = surface.post(
        demo::OPS.into(),
        demo::STANLEY.into(),
        "hi <@1000000000000000001> see <#1000000000000000402>",
    );
    let second = surface.post(
        demo::OPS.into(),
        demo::TOMAS.into(),
        "<@1000000000000000101> <@&1000000000000000301> <@999>",
    );
    let answer = call(
        &server,
        "surface.messages.list",
        json!({"sessionId": "#ops"}),
    )
    .await;
    let messages = answer.body["value"]["messages"].as_array().unwrap();
    assert_eq!(messages.len(), 2);
    assert_eq!(messages[0]["messageId"], first.to_string());
    assert_eq!(messages[0]["text"], "hi @switchboard see #release-room");
    assert_eq!(messages[1]["text"], "@Stanley @oncall @user_999");
    assert_eq!(messages[1]["authorName"], "Tomas");
    assert_eq!(answer.body["value"]["session"]["token"], "ops");
    let answer = call(
        &server,
        "surface.messages.list",
        json!({"sessionId": "#ops", "beforeMessageId": second.to_string()}),
    )
    .await;
    assert_eq!(
        answer.body["value"]["messages"].as_array().unwrap().len(),
        1
    );
    let answer = call(
        &server,
        "surface.messages.read",
        json!({"sessionId": "#ops", "messageId": "1000000000000099999"}),
    )
    .await;
    assert_eq!(answer.status, 404);
}

#[tokio::test]
async fn delete_and_reactions_work_on_cached_messages() {
    let server = demo_server().await;
    let id = server
        .surface()
        .post(demo::OPS.into(), demo::STANLEY.into(), "react to me")
        .to_string();
    let add = call(
        &server,
        "surface.reactions.add",
        json!({"sessionId": "#ops", "messageId": id, "emoji": "✅"}),
    )
    .await;
    assert_eq!(add.status, 200);
    let list = call(
        &server,
        "surface.reactions.list",
        json!({"sessionId": "#ops", "messageId": id}),
    )
    .await;
    assert_eq!(
        list.body["value"]["reactions"],
        json!([{"emoji": "✅", "count": 1, "me": true}])
    );
    call(
        &server,
        "surface.reactions.remove",
        json!({"sessionId": "#ops", "messageId": id, "emoji": "✅"}),
    )
    .await;
    let list = call(
        &server,
        "surface.reactions.list",
        json!({"sessionId": "#ops", "messageId": id}),
    )
    .await;
    assert_eq!(list.body["value"]["reactions"], json!([]));
    let bad = call(
        &server,
        "surface.reactions.add",
        json!({"sessionId": "#ops", "messageId": id, "emoji": " "}),
    )
    .await;
    assert_eq!(bad.status, 400);
    let delete = call(
        &server,
        "surface.messages.delete",
        json!({"sessionId": "#ops", "messageId": id}),
    )
    .await;
    assert_eq!(delete.status, 200);
    let after = call(
        &server,
        "surface.messages.list",
        json!({"sessionId": "#ops"}),
    )
    .await;
    assert_eq!(after.body["value"]["messages"], json!([]));
}

/// `surface.messages.list` answers from the render cache by each message's revision (issue 22
/// §5): whatever changes what a reader sees of a listed message is listed anew.
#[tokio::test]
async fn a_listed_message_is_listed_anew_after_an_edit_a_reaction_or_a_rename() {
    async fn listed(server: &TestServer) -> Vec<Value> {
        let list = call(
            server,
            "surface.messages.list",
            json!({"sessionId": "#ops"}),
        )
        .await;
        assert_eq!(list.status, 200, "{}", list.body);
        list.body["value"]["messages"].as_array().unwrap().clone()
    }
    let server = demo_server().await;
    let theirs = server
        .surface()
        .post(demo::OPS.into(), demo::STANLEY.into(), "first words");
    let sent = call(
        &server,
        "surface.messages.send",
        json!({"sessionId": "#ops", "text": "draft"}),
    )
    .await;
    let ours = sent.body["value"]["messageIds"][0]
        .as_str()
        .unwrap()
        .to_owned();
    let before = listed(&server).await;
    assert_eq!(before.len(), 2);
    assert_eq!(before, listed(&server).await, "unchanged, listed the same");
    call(
        &server,
        "surface.messages.edit",
        json!({"sessionId": "#ops", "messageId": ours, "text": "final"}),
    )
    .await;
    let edited = listed(&server).await;
    assert_eq!(edited[1]["text"], "final");
    assert!(edited[1]["editedTs"].is_string(), "{}", edited[1]);
    assert_eq!(edited[0], before[0], "the other message is as it was");
    call(
        &server,
        "surface.reactions.add",
        json!({"sessionId": "#ops", "messageId": theirs.to_string(), "emoji": "✅"}),
    )
    .await;
    let reacted = listed(&server).await;
    assert_eq!(
        reacted[0]["reactions"],
        json!([{"emoji": "✅", "count": 1}])
    );
    assert_eq!(reacted[0]["authorName"], before[0]["authorName"]);
    server
        .surface()
        .store()
        .upsert_user(switchboard_records::User {
            id: demo::STANLEY.into(),
            username: "stanley".into(),
            global_name: Some("Stan the Renamed".into()),
            is_bot: false,
        });
    let renamed = listed(&server).await;
    assert_eq!(renamed[0]["authorName"], "Stan the Renamed");
    server
        .surface()
        .store()
        .delete_message(demo::OPS.into(), theirs);
    let deleted = listed(&server).await;
    assert_eq!(deleted.len(), 1);
    assert_eq!(deleted[0]["messageId"], ours);
}

/// The allowlist matrix, with the config that decides each row.
#[tokio::test]
async fn allowlist_matrix() {
    let channels_only = r#"
[discord]
allowed_channel_ids = ["1000000000000000401"]
"#;
    let guild = r#"
[discord]
allowed_guild_ids = ["1000000000000000200"]
"#;
    let with_dms = r#"
[discord]
allowed_channel_ids = ["1000000000000000401"]
allow_dms = true
"#;
    let cases: &[(&str, u64, u16)] = &[
        (channels_only, demo::OPS, 200),             // listed channel
        (channels_only, demo::INCIDENT_THREAD, 200), // thread of a listed channel
        (channels_only, demo::RANDOM_THREAD, 403),   // thread of an unlisted channel
        (guild, demo::RANDOM_THREAD, 200), // thread of an unlisted channel in a listed guild
        (guild, demo::RANDOM, 200),        // channel in a listed guild
        (guild, demo::UNCACHED, 200),      // not cached: channel_info says it is in the guild
        (guild, demo::OTHER_CHANNEL, 403), // unlisted guild
        (channels_only, demo::STANLEY_DM, 403), // DM without allow_dms
        (with_dms, demo::STANLEY_DM, 200), // DM with allow_dms
        (channels_only, 1000000000000000999, 404), // unknown channel: one lookup, not found
        (guild, 1000000000000000999, 404), // unknown channel, needs a lookup: not found
        ("", demo::OPS, 403),              // empty allowlist denies everything
    ];
    for (config, channel, expected) in cases {
        let server = TestServer::start(config).await.expect("server");
        let answer = call(
            &server,
            "surface.messages.send",
            json!({"sessionId": channel.to_string(), "text": "hi"}),
        )
        .await;
        assert_eq!(
            answer.status, *expected,
            "channel {channel} with {config}: {}",
            answer.body
        );
        let posted = server.sends().len();
        assert_eq!(
            posted,
            usize::from(*expected == 200),
            "a refused target never reaches send"
        );
        if *expected == 403 {
            let message = answer.body["error"]["message"].as_str().unwrap();
            assert!(
                message.contains("discord.allow"),
                "the refusal names the key: {message}"
            );
        }
        let read = call(
            &server,
            "surface.messages.list",
            json!({"sessionId": channel.to_string()}),
        )
        .await;
        assert_eq!(read.status, *expected, "reads obey the allowlist too");
    }
}

#[tokio::test]
async fn reading_a_disallowed_message_is_denied_without_its_content() {
    let server = demo_server().await;
    let secret = server.surface().post(
        demo::RANDOM.into(),
        demo::STANLEY.into(),
        "the launch codes",
    );
    let answer = call(
        &server,
        "surface.messages.read",
        json!({"sessionId": demo::RANDOM.to_string(), "messageId": secret.to_string()}),
    )
    .await;
    assert_eq!(answer.status, 403);
    assert!(!answer.body.to_string().contains("launch codes"));
}

#[tokio::test]
async fn uncached_channel_is_looked_up_once() {
    let server = TestServer::start("[discord]\nallowed_guild_ids = [\"1000000000000000200\"]\n")
        .await
        .unwrap();
    for _ in 0..3 {
        let answer = call(
            &server,
            "surface.messages.list",
            json!({"sessionId": demo::UNCACHED.to_string()}),
        )
        .await;
        assert_eq!(answer.status, 200);
    }
    let lookups = server
        .surface()
        .calls()
        .iter()
        .filter(|c| matches!(c, SurfaceCall::ChannelInfo(_)))
        .count();
    assert_eq!(lookups, 1);
}

#[tokio::test]
async fn sessions_list_filters_by_allowlist_before_limit() {
    let server = demo_server().await;
    let answer = call(&server, "surface.sessions.list", json!({})).await;
    let sessions = answer.body["value"]["sessions"].as_array().unwrap();
    let ids: Vec<&str> = sessions
        .iter()
        .map(|s| s["channelId"].as_str().unwrap())
        .collect();
    // ops, release-room, secret, and the thread under ops.
    assert_eq!(ids.len(), 4, "{ids:?}");
    assert!(!ids.contains(&"1000000000000000404"));
    let ops = sessions.iter().find(|s| s["token"] == "ops").unwrap();
    assert_eq!(ops["kind"], "channel");
    assert_eq!(ops["guildId"], "1000000000000000200");
    let thread = sessions.iter().find(|s| s["kind"] == "thread").unwrap();
    assert_eq!(thread["parentChannelId"], "1000000000000000401");
    let limited = call(&server, "surface.sessions.list", json!({"limit": 2})).await;
    assert_eq!(
        limited.body["value"]["sessions"].as_array().unwrap().len(),
        2
    );
}

#[tokio::test]
async fn no_session_anywhere_explains_how_to_pass_one() {
    let server = demo_server().await;
    let answer = call(&server, "surface.messages.list", json!({})).await;
    assert_eq!(answer.status, 400);
    assert!(answer.body["error"]["message"]
        .as_str()
        .unwrap()
        .contains("--session-id"));
}

#[tokio::test]
async fn context_headers_reach_the_handler() {
    let server = demo_server().await;
    let headers = vec![
        ("x-switchboard-request-id", "req-7".to_owned()),
        ("x-switchboard-session-id", "#ops".to_owned()),
        ("x-switchboard-client", "cli".to_owned()),
        ("x-switchboard-cwd", "/tmp/work".to_owned()),
        ("x-switchboard-tool-call-id", "tc-1".to_owned()),
    ];
    let answer = call_with_headers(
        &server,
        Some(server.operator_token()),
        headers.clone(),
        "surface.help",
        json!({}),
    )
    .await;
    let context = &answer.body["value"]["context"];
    assert_eq!(context["requestId"], "req-7");
    assert_eq!(context["client"], "cli");
    assert_eq!(context["cwd"], "/tmp/work");
    assert_eq!(context["session"]["token"], "ops");
    // The session header is the default session.
    let answer = call_with_headers(
        &server,
        Some(server.operator_token()),
        headers,
        "surface.messages.send",
        json!({"text": "hi"}),
    )
    .await;
    assert_eq!(answer.body["value"]["channelId"], "1000000000000000401");
    let help = call(&server, "surface.help", json!({})).await;
    let sessions = help.body["value"]["sessions"].as_array().unwrap();
    assert!(sessions
        .iter()
        .any(|s| s["token"] == "release-room" && s["comment"] == "release coordination"));
}

#[tokio::test]
async fn capability_takes_its_context_from_the_token() {
    let server = demo_server().await;
    let token = server.mint(demo::OPS, "run-1", &["surface.*"], Duration::from_secs(60));
    let answer = call_as(
        &server,
        Some(&token),
        "surface.messages.send",
        json!({"text": "from the run"}),
    )
    .await;
    assert_eq!(answer.status, 200, "{}", answer.body);
    assert_eq!(answer.body["value"]["channelId"], "1000000000000000401");
    let help = call_as(&server, Some(&token), "surface.help", json!({})).await;
    assert_eq!(help.body["value"]["context"]["requestId"], "run-1");
    assert_eq!(help.body["value"]["context"]["caller"], "capability");
    // A forged session header does not move it.
    let forged = call_with_headers(
        &server,
        Some(&token),
        vec![("x-switchboard-session-id", "#release-room".to_owned())],
        "surface.messages.send",
        json!({"text": "moved?"}),
    )
    .await;
    assert_eq!(forged.status, 403);
    assert_eq!(forged.body["error"]["code"], "context_override");
    let forged = call_with_headers(
        &server,
        Some(&token),
        vec![("x-switchboard-request-id", "run-2".to_owned())],
        "surface.help",
        json!({}),
    )
    .await;
    assert_eq!(forged.status, 403);
    // The same session named another way is fine.
    let same = call_with_headers(
        &server,
        Some(&token),
        vec![("x-switchboard-session-id", "#ops".to_owned())],
        "surface.help",
        json!({}),
    )
    .await;
    assert_eq!(same.status, 200);
    assert_eq!(server.sends().len(), 1);
}

#[tokio::test]
async fn a_capabilitys_cwd_and_message_come_from_the_token_not_headers() {
    let server = demo_server().await;
    let trigger = server.surface().post_with_files(
        entity::Snowflake(demo::OPS),
        entity::Snowflake(demo::STANLEY),
        "file",
        &[("a.txt", b"a")],
    );
    let cwd = std::env::temp_dir().canonicalize().expect("tmp");
    let token = server
        .core()
        .mint_capability(switchboard_engine::auth::CapabilityGrant {
            session_id: entity::Snowflake(demo::OPS),
            request_id: "run-files".into(),
            scope: vec!["*".into()],
            ttl: Duration::from_secs(60),
            client: None,
            cwd: Some(cwd.to_string_lossy().into_owned()),
            trigger_message_id: Some(trigger),
            requested_by: None,
            gate: None,
        })
        .expect("mint");
    for (header, value) in [
        ("x-switchboard-cwd", "/".to_owned()),
        ("x-switchboard-message-id", "1000000000000000999".to_owned()),
    ] {
        let forged = call_with_headers(
            &server,
            Some(&token),
            vec![(header, value)],
            "surface.help",
            json!({}),
        )
        .await;
        assert_eq!(forged.status, 403, "{header}: {}", forged.body);
        assert_eq!(forged.body["error"]["code"], "context_override");
    }
    let same = call_with_headers(
        &server,
        Some(&token),
        vec![("x-switchboard-message-id", trigger.to_string())],
        "surface.help",
        json!({}),
    )
    .await;
    assert_eq!(same.status, 200, "{}", same.body);
    // A garbage message id header from the operator is a usage error naming it.
    let garbage = call_with_headers(
        &server,
        Some(server.operator_token()),
        vec![("x-switchboard-message-id", "yesterday".to_owned())],
        "surface.help",
        json!({}),
    )
    .await;
    assert_eq!(garbage.status, 400, "{}", garbage.body);
    assert!(garbage.body["error"]["message"]
        .as_str()
        .is_some_and(|m| m.contains("x-switchboard-message-id")));
}

#[tokio::test]
async fn capability_scope_limits_listing_and_calls() {
    let server = demo_server().await;
    let token = server.mint(
        demo::OPS,
        "run-1",
        &["surface.messages.list", "surface.help"],
        Duration::from_secs(60),
    );
    let list = request(
        "GET",
        format!("{}/v1/tools", server.url()),
        Some(token.clone()),
        vec![],
        None,
    )
    .await;
    let ids: Vec<&str> = list.body["tools"]
        .as_array()
        .unwrap()
        .iter()
        .map(|t| t["id"].as_str().unwrap())
        .collect();
    assert_eq!(ids, vec!["surface.help", "surface.messages.list"]);
    let send = call_as(
        &server,
        Some(&token),
        "surface.messages.send",
        json!({"text": "no"}),
    )
    .await;
    assert_eq!(send.status, 403);
    assert_eq!(send.body["error"]["code"], "out_of_scope");
    assert!(server.sends().is_empty());
    let detail = request(
        "GET",
        format!("{}/v1/tools/surface.messages.send", server.url()),
        Some(token),
        vec![],
        None,
    )
    .await;
    assert_eq!(detail.status, 404);
}

#[tokio::test]
async fn expired_capability_is_401() {
    let server = demo_server().await;
    let token = server.mint(demo::OPS, "run-1", &["*"], Duration::ZERO);
    let answer = call_as(&server, Some(&token), "surface.help", json!({})).await;
    assert_eq!(answer.status, 401);
    assert_eq!(answer.body["error"]["code"], "token_expired");
}

#[tokio::test]
async fn operator_mints_capabilities_over_http_and_capabilities_cannot() {
    let server = demo_server().await;
    let url = format!("{}/v1/capabilities", server.url());
    let body =
        serde_json::to_vec(&json!({"sessionId": "#ops", "scope": ["surface.help"], "ttlS": 30}))
            .unwrap();
    let minted = request(
        "POST",
        url.clone(),
        Some(server.operator_token().to_owned()),
        vec![],
        Some(body.clone()),
    )
    .await;
    assert_eq!(minted.status, 201, "{}", minted.body);
    let token = minted.body["value"]["token"].as_str().unwrap().to_owned();
    let help = call_as(&server, Some(&token), "surface.help", json!({})).await;
    assert_eq!(help.status, 200);
    let again = request("POST", url, Some(token), vec![], Some(body)).await;
    assert_eq!(again.status, 403);
}

#[tokio::test]
async fn rate_limit_is_429_with_retry_after() {
    let config = format!("{DEMO_CONFIG}\n[toolserver.rate_limits]\nper_channel_mutating_per_minute = 1\nper_channel_mutating_burst = 1\n");
    let server = TestServer::start(&config).await.unwrap();
    let first = call(
        &server,
        "surface.messages.send",
        json!({"sessionId": "#ops", "text": "one"}),
    )
    .await;
    assert_eq!(first.status, 200);
    let second = call(
        &server,
        "surface.messages.send",
        json!({"sessionId": "#ops", "text": "two"}),
    )
    .await;
    assert_eq!(second.status, 429);
    assert_eq!(kind(&second), "unavailable");
    assert_eq!(second.body["error"]["retryable"], true);
    assert!(
        second.body["error"]["details"]["retryAfterMs"]
            .as_u64()
            .unwrap()
            > 0
    );
    assert!(second.retry_after.is_some());
    // Another channel has its own budget; reads are not limited per channel.
    assert_eq!(
        call(
            &server,
            "surface.messages.send",
            json!({"sessionId": "#release-room", "text": "x"})
        )
        .await
        .status,
        200
    );
    assert_eq!(
        call(
            &server,
            "surface.messages.list",
            json!({"sessionId": "#ops"})
        )
        .await
        .status,
        200
    );
    assert_eq!(server.sends().len(), 2);
}

#[tokio::test]
async fn surface_errors_map_onto_kinds_and_statuses() {
    let server = demo_server().await;
    let cases = [
        (SurfaceError::NotFound("gone".into()), 404, "not_found"),
        (
            SurfaceError::Denied("Missing Permissions".into()),
            403,
            "denied",
        ),
        (
            SurfaceError::Conflict("already done".into()),
            409,
            "conflict",
        ),
        (
            SurfaceError::RateLimited {
                retry_after: Duration::from_millis(1500),
            },
            429,
            "unavailable",
        ),
        (
            SurfaceError::Unavailable("502 from Discord".into()),
            503,
            "unavailable",
        ),
        (
            SurfaceError::InvalidInput {
                message: "Invalid Form Body".into(),
                details: json!({"content": "too long"}),
            },
            400,
            "usage",
        ),
    ];
    for (error, status, expected_kind) in cases {
        server.surface().fail_next(error.clone());
        let answer = call(
            &server,
            "surface.messages.send",
            json!({"sessionId": "#release-room", "text": "x"}),
        )
        .await;
        assert_eq!(answer.status, status, "{error:?}: {}", answer.body);
        assert_eq!(kind(&answer), expected_kind);
        if status == 429 {
            assert_eq!(answer.body["error"]["details"]["retryAfterMs"], 1500);
            assert_eq!(answer.retry_after.as_deref(), Some("2"));
        }
    }
}

#[tokio::test]
async fn slow_call_times_out_with_504() {
    let config = format!("{DEMO_CONFIG}\ncall_timeout_s = 1\n");
    let server = TestServer::start(&config).await.unwrap();
    server.surface().set_delay(Some(Duration::from_secs(3)));
    let answer = call(
        &server,
        "surface.messages.send",
        json!({"sessionId": "#ops", "text": "slow"}),
    )
    .await;
    assert_eq!(answer.status, 504);
    assert_eq!(kind(&answer), "timeout");
}

#[tokio::test]
async fn concurrent_call_cap_answers_503() {
    let config = format!("{DEMO_CONFIG}\nmax_concurrent_calls = 1\n");
    let server = TestServer::start(&config).await.unwrap();
    server.surface().set_delay(Some(Duration::from_millis(800)));
    let slow = call(
        &server,
        "surface.messages.send",
        json!({"sessionId": "#ops", "text": "slow"}),
    );
    let quick = async {
        tokio::time::sleep(Duration::from_millis(200)).await;
        call(&server, "surface.help", json!({})).await
    };
    let (slow, quick) = tokio::join!(slow, quick);
    assert_eq!(slow.status, 200);
    assert_eq!(quick.status, 503);
    assert_eq!(quick.body["error"]["code"], "busy");
    assert!(quick.retry_after.is_some());
}

#[tokio::test]
async fn cli_style_args_are_converted_by_schema() {
    let server = demo_server().await;
    server
        .surface()
        .post(demo::OPS.into(), demo::STANLEY.into(), "one");
    server
        .surface()
        .post(demo::OPS.into(), demo::STANLEY.into(), "two");
    let body = serde_json::to_vec(
        &json!({"tool": "surface.messages.list", "args": {"sessionId": "#ops", "limit": "1"}}),
    )
    .unwrap();
    let answer = request(
        "POST",
        format!("{}/v1/call", server.url()),
        Some(server.operator_token().to_owned()),
        vec![],
        Some(body),
    )
    .await;
    assert_eq!(answer.status, 200, "{}", answer.body);
    assert_eq!(answer.body["value"]["messages"][0]["text"], "two");
    let body = serde_json::to_vec(&json!({"tool": "surface.messages.send", "args": {"sessionId": "#ops", "silent": "true"}, "positional": ["hello", "there"]})).unwrap();
    let answer = request(
        "POST",
        format!("{}/v1/call", server.url()),
        Some(server.operator_token().to_owned()),
        vec![],
        Some(body),
    )
    .await;
    assert_eq!(answer.status, 200, "{}", answer.body);
    assert_eq!(server.sends()[0].content, "hello there");
    assert_eq!(server.sends()[0].mentions, MentionPolicy::default());
}

#[tokio::test]
async fn unknown_routes_answer_json_404() {
    let server = demo_server().await;
    let answer = request(
        "GET",
        format!("{}/v2/nothing", server.url()),
        None,
        vec![],
        None,
    )
    .await;
    assert_eq!(answer.status, 404);
    assert_eq!(kind(&answer), "not_found");
}

#[tokio::test]
async fn refuses_to_start_without_operator_token_unless_insecure_on_loopback() {
    use std::sync::Arc;
    use switchboard_testkit::platform::RecordingPlatform;
    let surface = Arc::new(RecordingPlatform::demo());
    let config = switchboard_config::Config::parse(&DEMO_CONFIG, "t").unwrap();
    assert!(matches!(
        switchboard_engine::Core::new(
            &config,
            surface.clone(),
            None.into(),
            switchboard_callables::registry()
        ),
        Err(switchboard_engine::StartError::NoOperatorToken { .. })
    ));
    let insecure = switchboard_config::Config::parse(
        &format!("{DEMO_CONFIG}\ninsecure_no_auth = true\n"),
        "t",
    )
    .unwrap();
    let core = switchboard_engine::Core::new(
        &insecure,
        surface,
        None.into(),
        switchboard_callables::registry(),
    )
    .expect("loopback + explicit opt-in");
    assert!(core.authenticate(None).is_ok());
}

/// `GET /health` with exactly this `Host` over a raw socket: the status.
async fn health_as_host(server: &TestServer, host: String) -> u16 {
    let addr = server.addr();
    tokio::task::spawn_blocking(move || {
        use std::io::{Read, Write};
        let mut stream = std::net::TcpStream::connect(addr).expect("connect");
        stream
            .set_read_timeout(Some(Duration::from_secs(5)))
            .expect("timeout");
        write!(
            stream,
            "GET /health HTTP/1.1\r\nHost: {host}\r\nConnection: close\r\n\r\n"
        )
        .expect("write");
        let mut answer = String::new();
        stream.read_to_string(&mut answer).expect("read");
        answer
            .split_whitespace()
            .nth(1)
            .and_then(|s| s.parse().ok())
            .unwrap_or(0)
    })
    .await
    .expect("request task")
}

#[tokio::test]
async fn a_host_named_in_allowed_hosts_is_served_and_a_reload_changes_the_list() {
    let config = format!("{DEMO_CONFIG}\nallowed_hosts = [\"Switchboard.LAN.\"]\n");
    let server = TestServer::start(&config).await.unwrap();
    let port = server.addr().port();
    assert_eq!(
        health_as_host(&server, format!("switchboard.lan:{port}")).await,
        200
    );
    assert_eq!(health_as_host(&server, "switchboard.lan".into()).await, 200);
    assert_eq!(
        health_as_host(&server, format!("other.lan:{port}")).await,
        403
    );
    // The list is read per request: a reload that drops the name refuses it at once.
    let reloaded = switchboard_config::Config::parse(&DEMO_CONFIG, "t").unwrap();
    server.core().apply(reloaded);
    assert_eq!(
        health_as_host(&server, format!("switchboard.lan:{port}")).await,
        403
    );
    assert_eq!(
        health_as_host(&server, format!("127.0.0.1:{port}")).await,
        200
    );
}

#[test]
fn allowed_hosts_must_be_host_names() {
    for bad in ["http://x.lan", "x.lan:80", "x.lan/path", "", "*.lan"] {
        let text = format!("{DEMO_CONFIG}\nallowed_hosts = [\"{bad}\"]\n");
        let report = switchboard_config::Config::parse(&text, "t").unwrap_err();
        assert!(
            report.to_string().contains("toolserver.allowed_hosts"),
            "{bad}: {report}"
        );
    }
}
