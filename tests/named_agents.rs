//! Named agents end to end (issue 26 §1): each channel's runs use the agent it is bound to —
//! its model, system prompt and tools — and, with more than one agent configured, each answer
//! says which agent wrote it.

#[path = "support/model.rs"]
mod model;
mod support;

use std::time::Duration;

use fake_discord::demo;
use model::{messages, text, FakeModel};
use serde_json::{json, Value};
use support::{check_config, poll, reply_to, slash, Allow, Fake, Sections, Switchboard, TempDir};

const BOT_MENTION: &str = "<@1000000000000000001>";

/// Two agents on one scripted model: `support` (the default, prefix labels, the message
/// tools) and `release` (bound to #release-room, footer labels, `surface.help` only).
fn two_agents(model: &FakeModel) -> String {
    format!(
        r#"
[agents]
default = "support"

[agents.support]
runner = "openai"
base_url = "{url}"
model = "support-model"
system_prompt = "You are the support agent."
stream = "off"
tool_scope = ["surface.messages.*"]

[agents.release]
runner = "openai"
base_url = "{url}"
model = "release-model"
system_prompt = "You are the release agent."
stream = "off"
answer_label = "footer"
tool_scope = ["surface.help"]

[sessions.release-room]
agent = "release"
"#,
        url = model.base_url
    )
}

/// The names of the tools a request offered.
fn tool_names(request: &Value) -> Vec<String> {
    request["tools"]
        .as_array()
        .map(|tools| {
            tools
                .iter()
                .filter_map(|t| t["function"]["name"].as_str().map(str::to_owned))
                .collect()
        })
        .unwrap_or_default()
}

/// Answers with the name of the agent whose system prompt the request opens with.
fn answer_as_the_prompted_agent(requests: &[Value]) -> (u16, Value) {
    let request = requests.last().expect("the current request");
    let system = messages(request)[0]["content"].as_str().unwrap_or_default();
    if system.contains("release agent") {
        text("release checklist is green")
    } else {
        text("support can help")
    }
}

#[test]
fn two_channels_bound_to_two_agents_answer_with_their_own_prompts_tools_and_labels() {
    let model = FakeModel::start(answer_as_the_prompted_agent);
    let fake = Fake::start();
    let dir = TempDir::new("named-agents");
    let sb = Switchboard::start_with(&fake, dir.path(), &Allow::default(), &two_agents(&model));

    let in_ops = fake.post(demo::OPS, demo::STANLEY, &format!("{BOT_MENTION} help me"));
    let reply = reply_to(&fake, &sb, demo::OPS, &in_ops);
    assert_eq!(reply["content"], "**support:** support can help", "{reply}");

    let in_room = fake.post(
        demo::RELEASE_ROOM,
        demo::STANLEY,
        &format!("{BOT_MENTION} is the release ready?"),
    );
    let reply = reply_to(&fake, &sb, demo::RELEASE_ROOM, &in_room);
    assert_eq!(
        reply["content"], "release checklist is green\n-# release",
        "{reply}"
    );
    // Once ended, the run stays in the node's record of ended runs, with its answer.
    let ended = poll("the run's record", Duration::from_secs(10), || {
        let listed = sb.tools(&["runs.list", "--state=finished"]).json();
        listed["runs"]
            .as_array()?
            .iter()
            .find(|run| run["triggerMessageId"] == in_room.as_str())
            .cloned()
    });
    assert_eq!(ended["answer"], "release checklist is green", "{ended}");
    assert_eq!(ended["requestedBy"], demo::STANLEY.to_string(), "{ended}");
    assert!(
        ended["endedMs"].as_u64() >= ended["startedMs"].as_u64(),
        "{ended}"
    );
    poll(
        "the run to leave the live list",
        Duration::from_secs(10),
        || {
            let live = sb.tools(&["runs.list"]).json();
            (live["runs"] == json!([])).then_some(())
        },
    );

    let requests = model.requests();
    assert_eq!(requests.len(), 2, "one model request per run");
    let (support, release) = (&requests[0], &requests[1]);
    assert_eq!(support["model"], "support-model");
    assert_eq!(release["model"], "release-model");
    let support_tools = tool_names(support);
    let release_tools = tool_names(release);
    assert!(
        support_tools.iter().any(|t| t == "surface__messages__send"),
        "{support_tools:?}"
    );
    assert!(
        !support_tools.iter().any(|t| t == "surface__help"),
        "{support_tools:?}"
    );
    assert_eq!(release_tools, ["surface__help"], "{release_tools:?}");
}

#[test]
fn agent_alone_answers_without_a_label() {
    let model = FakeModel::start(|_| text("just me"));
    let fake = Fake::start();
    let dir = TempDir::new("one-agent");
    let agent = format!(
        "[agent]\nrunner = \"openai\"\nbase_url = \"{}\"\nmodel = \"m\"\nstream = \"off\"\n",
        model.base_url
    );
    let sb = Switchboard::start_with(&fake, dir.path(), &Allow::default(), &agent);
    let trigger = fake.post(demo::OPS, demo::STANLEY, &format!("{BOT_MENTION} hi"));
    let reply = reply_to(&fake, &sb, demo::OPS, &trigger);
    assert_eq!(reply["content"], "just me", "{reply}");
}

/// Discord's `data.options` for string options.
fn options(pairs: &[(&str, &str)]) -> Value {
    pairs
        .iter()
        .map(|(name, value)| json!({"name": name, "type": 3, "value": value}))
        .collect()
}

#[test]
fn slash_agent_shows_the_channels_agent_only_admins_rebind_it_and_the_binding_survives_a_restart() {
    let model = FakeModel::start(answer_as_the_prompted_agent);
    let fake = Fake::start();
    let dir = TempDir::new("agent-command");
    let config = two_agents(&model);
    let start = || {
        Switchboard::start_sections(
            &fake,
            dir.path(),
            &Allow::default(),
            Sections {
                discord: r#"admins = ["@Stanley"]"#,
                extra: &config,
                ..Sections::default()
            },
        )
    };
    let sb = start();
    poll("the slash commands", Duration::from_secs(20), || {
        let commands = fake.fake.commands();
        let global = commands["global"].as_array()?;
        global.iter().any(|c| c["name"] == "agent").then_some(())
    });
    let shown = slash(&fake, demo::OPS, demo::TOMAS, "agent", json!([]));
    assert!(shown.contains("**support** (the default)"), "{shown}");
    let shown = slash(&fake, demo::RELEASE_ROOM, demo::TOMAS, "agent", json!([]));
    assert!(
        shown.contains("**release** (bound in the config)"),
        "{shown}"
    );

    let set = options(&[("action", "set"), ("name", "release")]);
    let refused = slash(&fake, demo::OPS, demo::TOMAS, "agent", set.clone());
    assert!(refused.contains("Only admins"), "{refused}");
    let typo = slash(
        &fake,
        demo::OPS,
        demo::STANLEY,
        "agent",
        options(&[("action", "set"), ("name", "relase")]),
    );
    assert!(typo.contains("did you mean `release`?"), "{typo}");
    let tools = slash(&fake, demo::OPS, demo::TOMAS, "tools", json!([]));
    assert!(tools.contains("`surface.messages.send`"), "{tools}");
    assert!(!tools.contains("`surface.help`"), "{tools}");
    let done = slash(&fake, demo::OPS, demo::STANLEY, "agent", set);
    assert!(done.contains("**release** (set with /agent)"), "{done}");
    // `/tools` shows the bound agent's scope: what its runs are offered (below).
    let tools = slash(&fake, demo::OPS, demo::TOMAS, "tools", json!([]));
    assert!(tools.contains("`surface.help`"), "{tools}");
    assert!(!tools.contains("`surface.messages.send`"), "{tools}");

    // The binding is kept in the store: a restarted service still answers with it.
    drop(sb);
    let sb = start();
    let shown = slash(&fake, demo::OPS, demo::TOMAS, "agent", json!([]));
    assert!(shown.contains("**release** (set with /agent)"), "{shown}");

    let trigger = fake.post(demo::OPS, demo::STANLEY, &format!("{BOT_MENTION} ready?"));
    let reply = reply_to(&fake, &sb, demo::OPS, &trigger);
    assert_eq!(
        reply["content"], "release checklist is green\n-# release",
        "{reply}"
    );
    // The run in #ops is offered the bound agent's tools, as `/tools` showed.
    let offered = model.requests();
    let offered = tool_names(offered.last().expect("the run asked the model"));
    assert_eq!(offered, ["surface__help"], "{offered:?}");

    let reset = slash(
        &fake,
        demo::OPS,
        demo::STANLEY,
        "agent",
        options(&[("action", "reset")]),
    );
    assert!(reset.contains("**support** (the default)"), "{reset}");
    // The change is audited like any call of the operator callable.
    let audit = sb
        .tools(&["audit.list", "--tool=admin.agent.set", "--output=json"])
        .json();
    let rows = audit["audit"].as_array().cloned().unwrap_or_default();
    assert_eq!(rows.len(), 4, "{audit}");
}

#[test]
fn check_config_accepts_named_agents_and_refuses_unknown_names_with_a_did_you_mean() {
    let dir = TempDir::new("agents-check");
    let base = support::config_text(
        "http://127.0.0.1:9",
        &dir.path().join("x.db"),
        &Allow::default(),
    );
    let agents = r#"
[agents]
default = "support"
[agents.support]
runner = "demo"
tool_scope = ["surface.messages.*", "agent.handoff"]
[agents.release]
runner = "demo"
[sessions.release-room]
agent = "release"
"#;
    let good = dir.path().join("good.toml");
    std::fs::write(&good, format!("{base}\n{agents}")).expect("write");
    let (code, report) = check_config(&good);
    assert_eq!(code, Some(0), "{report}");

    let bad = dir.path().join("bad.toml");
    let text = format!(
        "{base}\n{}\n[[toolserver.tokens]]\nname = \"webui\"\ntoken_env = \"WEBUI_TOKEN\"\nscope = [\"agent:suport\"]\n",
        agents.replace("agent = \"release\"", "agent = \"relase\"")
    );
    std::fs::write(&bad, &text).expect("write");
    let (code, report) = check_config(&bad);
    assert_eq!(code, Some(2), "{report}");
    assert!(report.contains("sessions.release-room.agent"), "{report}");
    assert!(report.contains("did you mean \"release\"?"), "{report}");
    assert!(
        report.contains("did you mean \"agent:support\"?"),
        "{report}"
    );
}
