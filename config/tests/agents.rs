//! `[agents.NAME]`, `agents.default`, `agents.max_handoff_depth`, `[sessions.X] agent` and
//! `agent:NAME` token scope entries: read as written, every mistake located with what to do.

use switchboard_config::{AnswerLabel, Config, Known, Runner, LEGACY_AGENT_NAME};

const BASE: &str = r#"
[discord]
allowed_channel_ids = ["334455667788990011", "334455667788990022"]

[entity.sessions]
help = "334455667788990011"
release-room = "334455667788990022"
"#;

fn known() -> Known {
    Known {
        callables: Some(
            ["surface.help", "surface.messages.send", "agent.handoff"]
                .map(str::to_owned)
                .to_vec(),
        ),
        ..Known::default()
    }
}

fn parse(extra: &str) -> Result<Config, Vec<String>> {
    Config::parse_with(&format!("{BASE}{extra}"), "test.toml", &known()).map_err(|report| {
        report
            .problems
            .iter()
            .map(|p| {
                format!(
                    "{}:{} | {} | {} | {}",
                    p.line, p.column, p.key_path, p.message, p.help
                )
            })
            .collect()
    })
}

const TWO_AGENTS: &str = r#"
[agents]
default = "support"
max_handoff_depth = 1

[agents.support]
runner = "openai"
base_url = "http://127.0.0.1:9/v1"
model = "small"
system_prompt = "You help in #help."
tool_scope = ["surface.help"]

[agents.release]
runner = "demo"
answer_label = "footer"
tool_scope = ["surface.*", "agent.handoff"]

[sessions.release-room]
agent = "release"
"#;

#[test]
fn agent_alone_keeps_working_as_the_one_default_agent() {
    let config = parse("[agent]\nrunner = \"demo\"\n").unwrap();
    assert_eq!(config.agents.agents.len(), 1);
    assert_eq!(config.agents.agents[0].name.as_str(), LEGACY_AGENT_NAME);
    assert_eq!(config.agents.default.as_ref().unwrap().as_str(), "agent");
    assert_eq!(config.agent.as_ref().unwrap().runner, Runner::Demo);
    assert_eq!(config.agents.max_handoff_depth, 2);
    assert!(!config.agents.labelled());
    // And `[agents]` may still set the depth beside it.
    let config = parse("[agent]\nrunner = \"demo\"\n[agents]\nmax_handoff_depth = 0\n").unwrap();
    assert_eq!(config.agents.max_handoff_depth, 0);
    // No agent at all: none runs.
    let config = parse("").unwrap();
    assert!(config.agent.is_none() && config.agents.agents.is_empty());
}

#[test]
fn named_agents_sessions_and_the_default_read_as_written() {
    let config = parse(TWO_AGENTS).unwrap();
    let names: Vec<&str> = config
        .agents
        .agents
        .iter()
        .map(|a| a.name.as_str())
        .collect();
    assert_eq!(names, ["support", "release"]);
    assert_eq!(config.agents.default.as_ref().unwrap().as_str(), "support");
    assert_eq!(config.agents.max_handoff_depth, 1);
    assert!(config.agents.labelled());
    let support = config.agents.get("support").unwrap();
    let Runner::OpenAi(openai) = &support.config.runner else {
        panic!("support runs openai");
    };
    assert_eq!(openai.system_prompt, "You help in #help.");
    assert_eq!(support.config.answer_label, AnswerLabel::Prefix);
    // `config.agent` is the default agent's.
    assert_eq!(config.agent.as_ref().unwrap(), &support.config);
    let release = config.agents.get("release").unwrap();
    assert_eq!(release.config.answer_label, AnswerLabel::Footer);
    assert_eq!(release.config.tool_scope, ["surface.*", "agent.handoff"]);
    let room = config
        .sessions
        .iter()
        .find(|s| s.channel_id.get() == 334455667788990022)
        .unwrap();
    assert_eq!(room.agent.as_ref().unwrap().as_str(), "release");
}

#[test]
fn each_agent_table_is_checked_like_agent_with_its_own_key_path() {
    let problems = parse(
        r#"
[agents]
default = "a"
[agents.a]
runner = "openai"
timeout_s = 0
[agents.b]
runner = "sometimes"
answer_label = "banner"
"#,
    )
    .unwrap_err();
    let keys: Vec<&str> = problems
        .iter()
        .map(|p| p.split(" | ").nth(1).unwrap())
        .collect();
    assert!(keys.contains(&"agents.a.base_url"), "{problems:#?}");
    assert!(keys.contains(&"agents.a.model"), "{problems:#?}");
    assert!(keys.contains(&"agents.a.timeout_s"), "{problems:#?}");
    assert!(keys.contains(&"agents.b.runner"), "{problems:#?}");
    assert!(keys.contains(&"agents.b.answer_label"), "{problems:#?}");
    // Every problem has a place in the file.
    assert!(
        problems.iter().all(|p| !p.starts_with("0:")),
        "{problems:#?}"
    );
}

#[test]
fn a_misspelled_key_in_an_agent_table_gets_a_did_you_mean() {
    let problems = parse("[agents.a]\nrunner = \"demo\"\nsystem_promt = \"x\"\n").unwrap_err();
    assert_eq!(problems.len(), 1, "{problems:#?}");
    assert!(
        problems[0].contains("agents.a.system_promt"),
        "{}",
        problems[0]
    );
    assert!(
        problems[0].contains("did you mean `system_prompt`?"),
        "{}",
        problems[0]
    );
}

#[test]
fn agent_beside_named_agents_and_reserved_names_are_refused() {
    let problems =
        parse("[agent]\nrunner = \"demo\"\n[agents.a]\nrunner = \"demo\"\n").unwrap_err();
    assert_eq!(problems.len(), 1, "{problems:#?}");
    assert!(
        problems[0].contains("both [agent] and [agents.NAME]"),
        "{}",
        problems[0]
    );
    let problems = parse("[agents.default]\nrunner = \"demo\"\n").unwrap_err();
    assert!(
        problems[0].contains("key of the [agents] table itself"),
        "{problems:#?}"
    );
    let problems =
        parse("[agents.a]\nrunner = \"demo\"\n[agents.b]\nrunner = \"demo\"\n").unwrap_err();
    assert!(problems[0].contains("agents.default"), "{problems:#?}");
}

#[test]
fn a_session_bound_to_an_unknown_agent_gets_a_did_you_mean() {
    let text = TWO_AGENTS.replace("agent = \"release\"", "agent = \"relase\"");
    let problems = parse(&text).unwrap_err();
    assert_eq!(problems.len(), 1, "{problems:#?}");
    assert!(
        problems[0].contains("sessions.release-room.agent"),
        "{}",
        problems[0]
    );
    assert!(
        problems[0].contains("did you mean \"release\"?"),
        "{}",
        problems[0]
    );
    let problems = parse("[sessions.help]\nagent = \"x\"\n").unwrap_err();
    assert!(
        problems[0].contains("no named agents are configured"),
        "{problems:#?}"
    );
}

#[test]
fn token_scopes_name_configured_agents_with_a_did_you_mean() {
    let token = |scope: &str| {
        format!("{TWO_AGENTS}\n[[toolserver.tokens]]\nname = \"webui\"\ntoken_env = \"WEBUI_TOKEN\"\nscope = {scope}\n")
    };
    let config = parse(&token(r#"["agent:support", "agent:*", "surface.help"]"#)).unwrap();
    assert_eq!(
        config.toolserver.tokens[0].scope,
        ["agent:support", "agent:*", "surface.help"]
    );
    let problems = parse(&token(
        r#"["agent:suport", "agent:sup*", "agent:two words"]"#,
    ))
    .unwrap_err();
    assert_eq!(problems.len(), 3, "{problems:#?}");
    assert!(
        problems[0].contains("toolserver.tokens[0].scope[0]"),
        "{}",
        problems[0]
    );
    assert!(
        problems[0].contains("did you mean \"agent:support\"?"),
        "{}",
        problems[0]
    );
    assert!(problems[1].contains("is a glob"), "{}", problems[1]);
    assert!(
        problems[2].contains("does not name an agent"),
        "{}",
        problems[2]
    );
}
