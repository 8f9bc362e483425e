//! `surface.threads.*`, `surface.pins.*` and `surface.messages.search`, called in-process
//! through the whole pipeline over the test kit's recording platform.

use entity::Snowflake;
use protocol::{ErrorCode, ErrorKind};
use serde_json::{json, Value};
use switchboard_engine::surface::Surface as _;
use switchboard_engine::surface::{SearchMatch, SessionKind};
use switchboard_engine::{CallContext, ToolError};
use switchboard_testkit::platform::{demo, SurfaceCall};
use switchboard_testkit::testing::{TestServer, DEMO_CONFIG};

async fn server(extra: &str) -> TestServer {
    TestServer::start(&format!("{DEMO_CONFIG}{extra}"))
        .await
        .expect("server starts")
}

async fn call(server: &TestServer, tool: &str, input: Value) -> Result<Value, ToolError> {
    server
        .core()
        .call(&CallContext::operator(), tool, input)
        .await
        .map(|raw| serde_json::from_str(raw.get()).expect("callables answer JSON"))
}

fn ops() -> Snowflake {
    Snowflake(demo::OPS)
}

#[tokio::test]
async fn a_standalone_thread_is_created_in_an_allowed_channel_and_usable_by_its_token() {
    let server = server("").await;
    let made = call(
        &server,
        "surface.threads.create",
        json!({"sessionId": "#ops", "name": "deploy follow-up", "autoArchiveMinutes": 60}),
    )
    .await
    .expect("created");
    assert_eq!(made["parentChannelId"], demo::OPS.to_string());
    assert_eq!(made["name"], "deploy follow-up");
    assert_eq!(made["autoArchiveMinutes"], 60);
    assert_eq!(made["archived"], false);
    let token = made["token"].as_str().expect("a token").to_owned();
    assert!(token.starts_with('#'), "{token}");
    // The token works as a session reference: post in the new thread through it.
    let sent = call(
        &server,
        "surface.messages.send",
        json!({"sessionId": token, "text": "first post"}),
    )
    .await
    .expect("sent in the thread");
    assert_eq!(sent["channelId"], made["channelId"]);
    let info = server
        .surface()
        .session(made["channelId"].as_str().unwrap().parse().unwrap())
        .expect("cached");
    assert_eq!(info.kind, SessionKind::Thread);
    assert_eq!(info.parent_id, Some(ops()));
}

#[tokio::test]
async fn a_thread_named_with_spaces_is_shown_everywhere_by_a_reference_that_works() {
    let server = server("").await;
    let made = call(
        &server,
        "surface.threads.create",
        json!({"sessionId": "#ops", "name": "release checklist"}),
    )
    .await
    .expect("created");
    let id = made["channelId"].as_str().expect("id").to_owned();
    assert_eq!(made["token"], "#release-checklist");
    let listed = call(&server, "surface.sessions.list", json!({}))
        .await
        .expect("listed");
    let entry = listed["sessions"]
        .as_array()
        .into_iter()
        .flatten()
        .find(|s| s["channelId"] == id.as_str())
        .cloned()
        .expect("the thread is listed");
    assert_eq!(entry["reference"], "#release-checklist", "{entry}");
    assert_eq!(entry["title"], "release checklist", "{entry}");
    let ops = listed["sessions"]
        .as_array()
        .into_iter()
        .flatten()
        .find(|s| s["channelId"] == demo::OPS.to_string().as_str())
        .cloned()
        .expect("#ops is listed");
    assert_eq!(ops["reference"], "#ops");
    // What is shown is what works: as a session id, and back in the audit log's labels.
    let sent = call(
        &server,
        "surface.messages.send",
        json!({"sessionId": entry["reference"], "text": "step one"}),
    )
    .await
    .expect("sent through the listed reference");
    assert_eq!(sent["channelId"], id.as_str());
    let read = call(
        &server,
        "surface.messages.list",
        json!({"sessionId": "#release-checklist"}),
    )
    .await
    .expect("read through it");
    assert_eq!(read["session"]["reference"], "#release-checklist");
    let audit = call(
        &server,
        "audit.list",
        json!({"tool": "surface.messages.send"}),
    )
    .await
    .expect("audit");
    let labels = &audit["audit"][0]["sessionLabels"];
    assert_eq!(labels, &json!(["#release-checklist"]), "{audit}");
}

#[tokio::test]
async fn a_thread_from_a_message_takes_the_messages_id() {
    let server = server("").await;
    let message = server
        .surface()
        .post(ops(), Snowflake(demo::STANLEY), "deploy failed");
    let made = call(
        &server,
        "surface.threads.create",
        json!({"sessionId": "#ops", "name": "why", "messageId": message.to_string()}),
    )
    .await
    .expect("created");
    assert_eq!(made["channelId"], message.to_string());
    // Twice from the same message: the platform refuses, as Discord does.
    let again = call(
        &server,
        "surface.threads.create",
        json!({"sessionId": "#ops", "name": "why again", "messageId": message.to_string()}),
    )
    .await
    .expect_err("one thread per message");
    assert_eq!(again.code, ErrorCode::DiscordRejected);
}

#[tokio::test]
async fn thread_creation_is_refused_before_the_platform_hears_of_it() {
    let server = server("").await;
    let cases = [
        (
            json!({"sessionId": "#ops", "name": ""}),
            ErrorCode::InvalidInput,
        ),
        (
            json!({"sessionId": "#ops", "name": "x".repeat(101)}),
            ErrorCode::InvalidInput,
        ),
        (
            json!({"sessionId": "#ops", "name": "a", "autoArchiveMinutes": 30}),
            ErrorCode::InvalidInput,
        ),
        (
            json!({"sessionId": "#ops", "name": "a", "messageId": "not-an-id"}),
            ErrorCode::InvalidInput,
        ),
        // #random is not allowlisted: its threads may not be opened either.
        (
            json!({"sessionId": demo::RANDOM.to_string(), "name": "a"}),
            ErrorCode::ChannelNotAllowed,
        ),
        // A thread holds no threads; a DM neither.
        (
            json!({"sessionId": "#incident-42", "name": "a"}),
            ErrorCode::InvalidInput,
        ),
        (
            json!({"sessionId": "#ops", "name": "a", "unknown": 1}),
            ErrorCode::InvalidInput,
        ),
    ];
    for (input, code) in cases {
        let error = call(&server, "surface.threads.create", input.clone())
            .await
            .expect_err("refused");
        assert_eq!(error.code, code, "{input}: {error:?}");
    }
    assert!(
        !server
            .surface()
            .calls()
            .iter()
            .any(|c| matches!(c, SurfaceCall::CreateThread(_))),
        "the platform was asked to create a refused thread"
    );
}

#[tokio::test]
async fn threads_are_listed_per_channel_or_across_allowed_channels() {
    let server = server("").await;
    let incident = demo::INCIDENT_THREAD.to_string();
    let of_ops = call(
        &server,
        "surface.threads.list",
        json!({"sessionId": "#ops"}),
    )
    .await
    .expect("listed");
    let ids: Vec<&str> = of_ops["threads"]
        .as_array()
        .unwrap()
        .iter()
        .map(|t| t["channelId"].as_str().unwrap())
        .collect();
    assert_eq!(ids, vec![incident.as_str()]);

    server
        .surface()
        .set_thread_state(Snowflake(demo::INCIDENT_THREAD), true, false);
    let active = call(
        &server,
        "surface.threads.list",
        json!({"sessionId": "#ops"}),
    )
    .await
    .expect("listed");
    assert_eq!(active["threads"], json!([]));
    let all = call(
        &server,
        "surface.threads.list",
        json!({"sessionId": "#ops", "includeArchived": true}),
    )
    .await
    .expect("listed");
    assert_eq!(all["threads"][0]["archived"], true);

    // Without a session: the cached threads of allowed channels only (off-topic-thread lives
    // under #random, which is not allowed).
    let everywhere = call(
        &server,
        "surface.threads.list",
        json!({"includeArchived": true}),
    )
    .await
    .expect("listed");
    let ids: Vec<&str> = everywhere["threads"]
        .as_array()
        .unwrap()
        .iter()
        .map(|t| t["channelId"].as_str().unwrap())
        .collect();
    assert_eq!(ids, vec![incident.as_str()]);
    let refused = call(
        &server,
        "surface.threads.list",
        json!({"sessionId": "#incident-42"}),
    )
    .await
    .expect_err("a thread has no threads");
    assert_eq!(refused.code, ErrorCode::InvalidInput);
}

#[tokio::test]
async fn archive_and_reopen_a_thread_but_not_a_channel() {
    let server = server("").await;
    let archived = call(
        &server,
        "surface.threads.archive",
        json!({"sessionId": "#incident-42", "archived": true}),
    )
    .await
    .expect("archived");
    assert_eq!(archived["archived"], true);
    let reopened = call(
        &server,
        "surface.threads.archive",
        json!({"sessionId": "#incident-42", "archived": false}),
    )
    .await
    .expect("reopened");
    assert_eq!(reopened["archived"], false);
    let error = call(
        &server,
        "surface.threads.archive",
        json!({"sessionId": "#ops", "archived": true}),
    )
    .await
    .expect_err("not a thread");
    assert_eq!(error.code, ErrorCode::InvalidInput);
    assert!(error.message.contains("not a thread"), "{}", error.message);
}

#[tokio::test]
async fn a_send_reopens_an_archived_thread_and_says_so() {
    let server = server("").await;
    let thread = Snowflake(demo::INCIDENT_THREAD);
    server.surface().set_thread_state(thread, true, false);
    server.surface().clear_calls();
    let sent = call(
        &server,
        "surface.messages.send",
        json!({"sessionId": "#incident-42", "text": "back again"}),
    )
    .await
    .expect("sent");
    assert_eq!(sent["unarchived"], true, "{sent}");
    let calls = server.surface().calls();
    let reopen = calls
        .iter()
        .position(|c| {
            *c == SurfaceCall::SetThreadArchived {
                channel_id: thread,
                archived: false,
            }
        })
        .expect("reopened");
    let send = calls
        .iter()
        .position(|c| matches!(c, SurfaceCall::Send(_)))
        .expect("sent");
    assert!(reopen < send, "{calls:?}");

    // An open thread: no reopening, no note.
    let sent = call(
        &server,
        "surface.messages.send",
        json!({"sessionId": "#incident-42", "text": "still here"}),
    )
    .await
    .expect("sent");
    assert!(sent.get("unarchived").is_none(), "{sent}");
}

#[tokio::test]
async fn a_send_to_a_locked_archived_thread_is_refused_and_nothing_is_posted() {
    let server = server("").await;
    let thread = Snowflake(demo::INCIDENT_THREAD);
    server.surface().set_thread_state(thread, true, true);
    server.surface().clear_calls();
    let error = call(
        &server,
        "surface.messages.send",
        json!({"sessionId": "#incident-42", "text": "let me in"}),
    )
    .await
    .expect_err("locked");
    assert_eq!(error.code, ErrorCode::ThreadLocked);
    assert_eq!(error.kind, ErrorKind::Conflict);
    assert!(error.message.contains("locked"), "{}", error.message);
    assert!(!server
        .surface()
        .calls()
        .iter()
        .any(|c| matches!(c, SurfaceCall::Send(_))));
}

#[tokio::test]
async fn pins_are_added_listed_and_removed() {
    let server = server("").await;
    let first = server.surface().post(
        ops(),
        Snowflake(demo::STANLEY),
        "runbook: <#1000000000000000402>",
    );
    let second = server
        .surface()
        .post(ops(), Snowflake(demo::TOMAS), "on call this week");
    for id in [first, second] {
        call(
            &server,
            "surface.pins.add",
            json!({"sessionId": "#ops", "messageId": id.to_string()}),
        )
        .await
        .expect("pinned");
    }
    // Pinning twice is fine.
    call(
        &server,
        "surface.pins.add",
        json!({"sessionId": "#ops", "messageId": first.to_string()}),
    )
    .await
    .expect("pinned again");
    let listed = call(&server, "surface.pins.list", json!({"sessionId": "#ops"}))
        .await
        .expect("listed");
    let pins = listed["pins"].as_array().expect("pins");
    assert_eq!(pins.len(), 2, "{listed}");
    assert_eq!(pins[0]["message"]["messageId"], second.to_string());
    assert_eq!(pins[1]["message"]["text"], "runbook: #release-room");
    assert!(pins[0]["pinnedAt"].is_string());

    call(
        &server,
        "surface.pins.remove",
        json!({"sessionId": "#ops", "messageId": second.to_string()}),
    )
    .await
    .expect("unpinned");
    let listed = call(&server, "surface.pins.list", json!({"sessionId": "#ops"}))
        .await
        .expect("listed");
    assert_eq!(listed["pins"].as_array().unwrap().len(), 1);

    let unknown = call(
        &server,
        "surface.pins.add",
        json!({"sessionId": "#ops", "messageId": "1000000000000099999"}),
    )
    .await
    .expect_err("no such message");
    assert_eq!(unknown.kind, ErrorKind::NotFound);
    let elsewhere = call(
        &server,
        "surface.pins.list",
        json!({"sessionId": demo::RANDOM.to_string()}),
    )
    .await
    .expect_err("not allowed");
    assert_eq!(elsewhere.code, ErrorCode::ChannelNotAllowed);
}

fn result_ids(answer: &Value) -> Vec<String> {
    answer["results"]
        .as_array()
        .unwrap_or_else(|| panic!("no results: {answer}"))
        .iter()
        .map(|r| r["message"]["messageId"].as_str().unwrap().to_owned())
        .collect()
}

#[tokio::test]
async fn search_reads_only_what_the_allowlist_allows() {
    let server = server("").await;
    let surface = server.surface();
    let stanley = Snowflake(demo::STANLEY);
    let in_ops = surface.post(ops(), stanley, "the deploy failed at noon");
    let in_room = surface.post(
        Snowflake(demo::RELEASE_ROOM),
        Snowflake(demo::TOMAS),
        "deploy again after the fix",
    );
    let in_random = surface.post(Snowflake(demo::RANDOM), stanley, "deploy memes");
    let in_thread = surface.post(
        Snowflake(demo::INCIDENT_THREAD),
        stanley,
        "deploy timeline in this thread",
    );

    let everywhere = call(
        &server,
        "surface.messages.search",
        json!({"query": "deploy"}),
    )
    .await
    .expect("searched");
    let ids = result_ids(&everywhere);
    for id in [in_ops, in_room, in_thread] {
        assert!(ids.contains(&id.to_string()), "{id} missing: {everywhere}");
    }
    assert!(!ids.contains(&in_random.to_string()), "#random leaked");
    // The surface was never even asked about #random.
    let asked = surface
        .calls()
        .into_iter()
        .find_map(|c| match c {
            SurfaceCall::Search(q) => Some(q),
            _ => None,
        })
        .expect("searched");
    assert!(!asked
        .channels
        .iter()
        .any(|c| c.id() == Snowflake(demo::RANDOM)));

    // One channel: it and its threads.
    let in_one = call(
        &server,
        "surface.messages.search",
        json!({"query": "deploy", "sessionId": "#ops"}),
    )
    .await
    .expect("searched");
    let mut ids = result_ids(&in_one);
    ids.sort();
    let mut expected = vec![in_ops.to_string(), in_thread.to_string()];
    expected.sort();
    assert_eq!(ids, expected);
    let first = &in_one["results"][0];
    assert!(
        first["snippet"].as_str().unwrap().contains("**deploy**"),
        "{first}"
    );

    let refused = call(
        &server,
        "surface.messages.search",
        json!({"query": "deploy", "sessionId": demo::RANDOM.to_string()}),
    )
    .await
    .expect_err("not allowed");
    assert_eq!(refused.code, ErrorCode::ChannelNotAllowed);
}

#[tokio::test]
async fn search_filters_by_author_and_time_and_finds_mentions_by_id() {
    let server = server("").await;
    let surface = server.surface();
    let stanley = Snowflake(demo::STANLEY);
    let tomas = Snowflake(demo::TOMAS);
    let older = surface.post(
        ops(),
        tomas,
        "ping <@1000000000000000101> about the rollback",
    );
    let newer = surface.post(ops(), stanley, "rollback done");

    let by_mention = call(
        &server,
        "surface.messages.search",
        json!({"query": "@Stanley"}),
    )
    .await
    .expect("searched");
    assert_eq!(result_ids(&by_mention), vec![older.to_string()]);
    let asked = surface
        .calls()
        .into_iter()
        .rev()
        .find_map(|c| match c {
            SurfaceCall::Search(q) => Some(q),
            _ => None,
        })
        .expect("searched");
    assert!(asked.terms[0]
        .any_of
        .contains(&SearchMatch::Mentions(entity::Mention::User(stanley))));

    let by_author = call(
        &server,
        "surface.messages.search",
        json!({"query": "rollback", "authorId": "@Stanley"}),
    )
    .await
    .expect("searched");
    assert_eq!(result_ids(&by_author), vec![newer.to_string()]);
    let before = call(
        &server,
        "surface.messages.search",
        json!({"query": "rollback", "before": newer.to_string()}),
    )
    .await
    .expect("searched");
    assert_eq!(result_ids(&before), vec![older.to_string()]);
    let after = call(
        &server,
        "surface.messages.search",
        json!({"query": "rollback", "after": older.to_string(), "limit": 1}),
    )
    .await
    .expect("searched");
    assert_eq!(result_ids(&after), vec![newer.to_string()]);
}

#[tokio::test]
async fn garbage_search_input_gets_typed_errors() {
    let server = server("").await;
    let cases = [
        json!({"query": ""}),
        json!({"query": "\"\" ** ()"}),
        json!({"query": "x*"}),
        json!({"query": "a".repeat(300)}),
        json!({"query": "deploy", "limit": 0}),
        json!({"query": "deploy", "limit": 101}),
        json!({"query": "deploy", "before": "last tuesday"}),
        json!({"query": "deploy", "after": "1999-01-01"}),
        json!({"query": "deploy", "authorId": "nobody"}),
        json!({"query": 42}),
        json!({"query": "deploy", "colour": "red"}),
    ];
    for input in cases {
        let error = call(&server, "surface.messages.search", input.clone())
            .await
            .expect_err("refused");
        assert_eq!(error.kind, ErrorKind::Usage, "{input}: {error:?}");
    }
    let unknown = call(
        &server,
        "surface.messages.search",
        json!({"query": "deploy", "authorId": "@nobody"}),
    )
    .await
    .expect_err("no such user");
    assert_eq!(unknown.code, ErrorCode::UnknownUser);
    // Index syntax typed by a user is plain words, never an error of the index.
    call(
        &server,
        "surface.messages.search",
        json!({"query": "NEAR(deploy fail) OR col:text ^x \"unclosed"}),
    )
    .await
    .expect("searched as words");
}

#[tokio::test]
async fn a_rule_denying_search_in_a_session_keeps_it_out_of_searches_everywhere() {
    let rules = format!(
        "\n[[permissions.rules]]\ntool = \"surface.messages.search\"\nsession = \"{}\"\ncaller = \"operator\"\npolicy = \"deny\"\n",
        demo::OPS
    );
    let server = server(&rules).await;
    let surface = server.surface();
    surface.post(ops(), Snowflake(demo::STANLEY), "secret deploy plan");
    let kept = surface.post(
        Snowflake(demo::RELEASE_ROOM),
        Snowflake(demo::STANLEY),
        "public deploy plan",
    );
    let answer = call(
        &server,
        "surface.messages.search",
        json!({"query": "deploy"}),
    )
    .await
    .expect("searched");
    assert_eq!(result_ids(&answer), vec![kept.to_string()]);
    let named = call(
        &server,
        "surface.messages.search",
        json!({"query": "deploy", "sessionId": "#ops"}),
    )
    .await
    .expect_err("denied");
    assert_eq!(named.code, ErrorCode::PermissionDenied);
}
