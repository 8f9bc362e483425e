//! The `runner = "openai"` agent bridge end to end: Discord messages in the fake start a run
//! of the real switchboard against a scripted fake OpenAI-compatible chat server; the model's
//! tool calls go through the real tool server and land in the fake Discord.

#[path = "support/model.rs"]
mod model;
mod support;

use std::time::Duration;

use fake_discord::demo;
use model::{messages, text, tool_call, tool_results, FakeModel};
use serde_json::{json, Value};
use support::{bot_posts, poll, reply_to, Allow, Fake, Switchboard, TempDir};

const BOT_MENTION: &str = "<@1000000000000000001>";
const SYSTEM_PROMPT: &str = "You are the e2e test agent. Be brief.";
/// How long a run may take to show up in the fake Discord.
const RUN_TIMEOUT: Duration = Duration::from_secs(8);

/// The function names offered in a request's `tools`.
fn offered(request: &Value) -> Vec<String> {
    request["tools"]
        .as_array()
        .map(|tools| {
            tools
                .iter()
                .map(|t| {
                    t["function"]["name"]
                        .as_str()
                        .unwrap_or_default()
                        .to_owned()
                })
                .collect()
        })
        .unwrap_or_default()
}

/// Drafts are off here: these tests read each reply as it is first posted (drafts shown while
/// a model streams are `tests/bridge_stream.rs`'s).
fn agent_config(model: &FakeModel, extra: &str) -> String {
    format!(
        "[agent]\nrunner = \"openai\"\nbase_url = \"{}\"\nmodel = \"fake-model\"\nsystem_prompt = \"{SYSTEM_PROMPT}\"\nmax_tool_rounds = 4\ntimeout_s = 6\ncontext_messages = 5\nstream = \"off\"\nerror_reply = \"agent failed: {{reason}}\"\n{extra}",
        model.base_url
    )
}

/// `PUT`/`DELETE` + the encoded emoji of every reaction request on `trigger`.
fn reactions_on(fake: &Fake, trigger: &str) -> Vec<String> {
    fake.fake
        .requests()
        .iter()
        .filter(|r| r.path.contains(&format!("{trigger}/reactions/")))
        .map(|r| format!("{} {}", r.method, r.path.rsplit('/').nth(1).unwrap_or("")))
        .collect()
}

#[test]
fn a_tool_call_lands_in_discord_and_the_final_answer_replies_to_the_trigger() {
    let model = FakeModel::start(|requests| {
        let last = requests.last().expect("the current request");
        if messages(last).last().is_some_and(|m| m["role"] == "tool") {
            text("Done: I warned the release room.")
        } else {
            tool_call(
                "call_send_1",
                "surface__messages__send",
                r##"{"sessionId":"#release-room","text":"heads up @Stanley"}"##,
            )
        }
    });
    let fake = Fake::start();
    let dir = TempDir::new("openai-send");
    let sb = Switchboard::start_with(
        &fake,
        dir.path(),
        &Allow::default(),
        &agent_config(&model, ""),
    );
    let trigger = fake.post(
        demo::OPS,
        demo::STANLEY,
        &format!("{BOT_MENTION} warn the release room"),
    );
    let reply = reply_to(&fake, &sb, demo::OPS, &trigger);
    assert_eq!(
        reply["content"], "Done: I warned the release room.",
        "{reply}"
    );

    // The tool call landed in #release-room, with the outbound rewrite.
    let sent = bot_posts(&fake, demo::RELEASE_ROOM);
    assert_eq!(sent.len(), 1, "one send in #release-room: {sent:?}");
    let sent_content = sent[0]["content"].as_str().unwrap_or_default();
    assert!(
        sent_content.contains("heads up") && sent_content.contains("<@1000000000000000101>"),
        "{sent_content}"
    );

    // What the model was sent.
    let requests = model.requests();
    assert_eq!(requests.len(), 2, "one tool round, then the answer");
    let first = &requests[0];
    assert_eq!(first["model"], "fake-model");
    let first_messages = messages(first);
    assert_eq!(first_messages[0]["role"], "system");
    assert_eq!(first_messages[0]["content"], SYSTEM_PROMPT);
    let last_turn = first_messages.last().unwrap();
    assert_eq!(last_turn["role"], "user", "{first}");
    assert_eq!(
        last_turn["content"],
        format!(
            "Stanley (user {}): @switchboard warn the release room",
            demo::STANLEY
        ),
        "the trigger's canonical text is the last turn, its author named with their id"
    );
    let tools = first["tools"].as_array().expect("tools offered");
    let send = tools
        .iter()
        .find(|t| t["function"]["name"] == "surface__messages__send")
        .unwrap_or_else(|| panic!("surface__messages__send not offered: {:?}", offered(first)));
    assert_eq!(send["type"], "function");
    let parameters = &send["function"]["parameters"];
    assert_eq!(parameters["type"], "object", "{parameters}");
    assert!(
        parameters["properties"]["text"].is_object()
            && parameters["properties"]["sessionId"].is_object(),
        "{parameters}"
    );
    assert!(
        parameters["properties"]["paths"]["type"]
            .as_array()
            .is_some_and(|t| t.contains(&json!("array"))),
        "the same schema the HTTP API serves, files included: {parameters}"
    );
    let names = offered(first);
    assert!(
        names
            .iter()
            .all(|name| ["surface__", "workflow__", "attachment__", "memory__"]
                .iter()
                .any(|prefix| name.starts_with(prefix))
                && !name.contains('.')),
        "the default scope is surface.*, workflow.*, attachment.*, memory.*; names use __: {names:?}"
    );
    assert!(
        names.contains(&"workflow__create".to_owned())
            && names.contains(&"attachment__download".to_owned())
            && names.contains(&"memory__write".to_owned()),
        "{names:?}"
    );

    let results = tool_results(&requests[1]);
    assert_eq!(results.len(), 1, "{}", requests[1]);
    let (call_id, result) = &results[0];
    assert_eq!(call_id, "call_send_1");
    assert_eq!(result["ok"], true, "{result}");
    assert_eq!(
        result["value"]["channelId"], "1000000000000000402",
        "{result}"
    );
    // The assistant's tool-call turn is echoed back before the result.
    let second_messages = messages(&requests[1]);
    let assistant = &second_messages[second_messages.len() - 2];
    assert_eq!(assistant["role"], "assistant");
    assert_eq!(assistant["tool_calls"][0]["id"], "call_send_1");

    // ⏳ then ✅ on the trigger.
    let reactions = poll("✅ on the trigger", RUN_TIMEOUT, || {
        let reactions = reactions_on(&fake, &trigger);
        reactions
            .iter()
            .any(|r| r == "PUT %E2%9C%85")
            .then_some(reactions)
    });
    assert!(
        reactions.iter().any(|r| r == "PUT %E2%8F%B3"),
        "{reactions:?}"
    );
}

#[test]
fn a_tool_outside_the_scope_comes_back_to_the_model_as_denied() {
    let model = FakeModel::start(|requests| {
        let last = requests.last().expect("the current request");
        if messages(last).last().is_some_and(|m| m["role"] == "tool") {
            text("I may not post there.")
        } else {
            tool_call(
                "call_forbidden",
                "surface__messages__send",
                r##"{"sessionId":"#release-room","text":"should not appear"}"##,
            )
        }
    });
    let fake = Fake::start();
    let dir = TempDir::new("openai-scope");
    let sb = Switchboard::start_with(
        &fake,
        dir.path(),
        &Allow::default(),
        &agent_config(
            &model,
            "tool_scope = [\"surface.messages.list\", \"surface.help\"]\n",
        ),
    );
    let trigger = fake.post(
        demo::OPS,
        demo::STANLEY,
        &format!("{BOT_MENTION} post in the release room"),
    );
    let reply = reply_to(&fake, &sb, demo::OPS, &trigger);
    assert_eq!(reply["content"], "I may not post there.", "{reply}");
    assert!(
        bot_posts(&fake, demo::RELEASE_ROOM).is_empty(),
        "a forbidden send was posted"
    );

    let requests = model.requests();
    assert_eq!(requests.len(), 2, "{requests:?}");
    let mut names = offered(&requests[0]);
    names.sort();
    assert_eq!(
        names,
        ["surface__help", "surface__messages__list"],
        "only the scoped callables are offered"
    );
    let results = tool_results(&requests[1]);
    assert_eq!(results.len(), 1, "{}", requests[1]);
    let (call_id, result) = &results[0];
    assert_eq!(call_id, "call_forbidden");
    assert_eq!(result["ok"], false, "{result}");
    assert_eq!(result["error"]["kind"], "denied", "{result}");
    assert_eq!(result["error"]["code"], "out_of_scope", "{result}");
}

#[test]
fn a_model_server_error_posts_the_error_line_and_reacts_failed() {
    let model = FakeModel::start(|_| (500, json!({"error": {"message": "the fake model broke"}})));
    let fake = Fake::start();
    let dir = TempDir::new("openai-500");
    let sb = Switchboard::start_with(
        &fake,
        dir.path(),
        &Allow::default(),
        &agent_config(&model, ""),
    );
    let trigger = fake.post(demo::OPS, demo::STANLEY, &format!("{BOT_MENTION} hello?"));
    let reply = reply_to(&fake, &sb, demo::OPS, &trigger);
    assert_eq!(
        reply["content"], "agent failed: the model server answered 500",
        "{reply}"
    );
    assert!(
        !reply["content"]
            .as_str()
            .unwrap_or_default()
            .contains("the fake model broke"),
        "the server's body is logged, not posted"
    );
    let reactions = poll("❌ on the trigger", RUN_TIMEOUT, || {
        let reactions = reactions_on(&fake, &trigger);
        reactions
            .iter()
            .any(|r| r == "PUT %E2%9D%8C")
            .then_some(reactions)
    });
    assert!(
        !reactions.iter().any(|r| r == "PUT %E2%9C%85"),
        "a failed run reacted ✅: {reactions:?}"
    );
    assert_eq!(model.requests().len(), 1, "no retry after a 500");
}

#[test]
fn malformed_tool_arguments_come_back_as_a_usage_error_and_the_loop_continues() {
    let model = FakeModel::start(|requests| {
        let last = requests.last().expect("the current request");
        let results = tool_results(last);
        match results.len() {
            0 => tool_call("call_bad", "surface__messages__send", "{not json"),
            1 => tool_call(
                "call_good",
                "surface__messages__send",
                r##"{"sessionId":"#release-room","text":"second try"}"##,
            ),
            _ => text("Posted on the second try."),
        }
    });
    let fake = Fake::start();
    let dir = TempDir::new("openai-malformed");
    let sb = Switchboard::start_with(
        &fake,
        dir.path(),
        &Allow::default(),
        &agent_config(&model, ""),
    );
    let trigger = fake.post(
        demo::OPS,
        demo::STANLEY,
        &format!("{BOT_MENTION} say something in the release room"),
    );
    let reply = reply_to(&fake, &sb, demo::OPS, &trigger);
    assert_eq!(reply["content"], "Posted on the second try.", "{reply}");

    let requests = model.requests();
    assert_eq!(requests.len(), 3, "{requests:?}");
    let results = tool_results(&requests[1]);
    assert_eq!(results.len(), 1, "{}", requests[1]);
    let (call_id, result) = &results[0];
    assert_eq!(call_id, "call_bad");
    assert_eq!(result["ok"], false, "{result}");
    assert_eq!(result["error"]["kind"], "usage", "{result}");
    assert_eq!(result["error"]["code"], "invalid_arguments", "{result}");
    assert!(
        offered(&requests[1]).contains(&"surface__messages__send".to_owned()),
        "tools are still offered after the error"
    );
    let results = tool_results(&requests[2]);
    assert_eq!(results.len(), 2, "{}", requests[2]);
    assert_eq!(results[1].0, "call_good");
    assert_eq!(results[1].1["ok"], true, "{}", results[1].1);

    let sent = bot_posts(&fake, demo::RELEASE_ROOM);
    assert_eq!(sent.len(), 1, "only the well-formed call posted: {sent:?}");
    assert_eq!(sent[0]["content"], "second try");
}
