//! Governance config: permissions, session scopes, named tokens, hooks and audit — every key
//! checked, every tool name against the registered callables (an unknown name never widens
//! anything).

use std::time::Duration;

use switchboard_config::{
    CallerMatch, Config, HookFailure, Known, Policy, Principal, SessionMatch, Snowflake,
};

const BASE: &str = r#"
[discord]
allowed_channel_ids = ["334455667788990011", "334455667788990022"]

[entity.users]
Mira = "123456789012345678"

[entity.sessions]
ops = "334455667788990011"
release-room = "334455667788990022"
release-notes = "334455667788990033"
deploys = "334455667788990044"

[entity.roles]
oncall = "445566778899001122"
"#;

fn known() -> Known {
    Known {
        callables: Some(
            [
                "surface.help",
                "surface.messages.list",
                "surface.messages.read",
                "surface.messages.send",
                "surface.messages.delete",
                "workflow.create",
                "audit.list",
            ]
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
            .map(|p| format!("{} | {} | {}", p.key_path, p.message, p.help))
            .collect()
    })
}

#[test]
fn the_issues_example_reads_as_written() {
    let config = parse(
        r##"
[permissions]
default = "allow"
approvers = ["@Mira", "@oncall"]
ask_timeout_s = 300
approvals_channel = "#release-room"

[[permissions.rules]]
tool = "surface.messages.delete"
policy = "deny"

[[permissions.rules]]
tool = "surface.messages.send"
session = "#release-room"
origin = "#deploys"
caller = "run"
policy = "ask"

[[permissions.rules]]
tool = "surface.messages.*"
session = "release-*"
caller = "token:ci"
policy = "ask"

[sessions.deploys]
tool_scope = ["surface.*", "workflow.*"]

[toolserver]
[[toolserver.tokens]]
name = "ci"
token_env = "SWITCHBOARD_CI_TOKEN"
scope = ["surface.messages.list", "surface.messages.read"]

[[hooks.before]]
tool = "surface.messages.send"
command = ["./no-secrets.sh"]
timeout_ms = 2000

[audit]
text_chars = 80
redact = true
retention_days = 30
"##,
    )
    .expect("valid");
    let p = &config.permissions;
    assert_eq!(p.default, Policy::Allow);
    assert_eq!(
        p.approvers,
        vec![
            Principal::User(Snowflake(123456789012345678)),
            Principal::Role(Snowflake(445566778899001122))
        ]
    );
    assert_eq!(p.ask_timeout, Duration::from_secs(300));
    assert_eq!(p.approvals_channel, Some(Snowflake(334455667788990022)));
    assert_eq!(p.rules.len(), 3);
    assert_eq!(p.rules[0].policy, Policy::Deny);
    assert_eq!(p.rules[0].caller, CallerMatch::Run);
    assert_eq!(
        p.rules[1].session,
        Some(SessionMatch::Id(Snowflake(334455667788990022)))
    );
    assert_eq!(
        p.rules[1].origin,
        Some(SessionMatch::Id(Snowflake(334455667788990044)))
    );
    assert_eq!(
        p.rules[2].session,
        Some(SessionMatch::AliasGlob("release-*".into()))
    );
    assert_eq!(p.rules[2].caller, CallerMatch::Token("ci".into()));
    assert_eq!(p.rules[2].name, "permissions.rules[2]");
    assert_eq!(config.sessions.len(), 1);
    assert_eq!(config.sessions[0].channel_id, Snowflake(334455667788990044));
    assert_eq!(
        config.sessions[0].tool_scope.as_deref(),
        Some(&["surface.*".to_owned(), "workflow.*".to_owned()][..])
    );
    assert_eq!(config.toolserver.tokens[0].name, "ci");
    assert_eq!(
        config.toolserver.tokens[0].token_env,
        "SWITCHBOARD_CI_TOKEN"
    );
    assert_eq!(config.hooks.before[0].command, vec!["./no-secrets.sh"]);
    assert_eq!(config.hooks.before[0].timeout, Duration::from_millis(2000));
    assert_eq!(config.hooks.on_error, HookFailure::Deny);
    assert_eq!(config.audit.text_chars, 80);
    assert!(config.audit.redact);
    assert_eq!(config.audit.retention, Duration::from_secs(30 * 86_400));
}

#[test]
fn a_misspelled_protected_tool_is_an_error_with_a_did_you_mean() {
    let problems = parse("[agent]\nrunner = \"command\"\ncommand = [\"/bin/true\"]\nprotected_tools = [\"workflow.*\", \"surface.mesages.list\"]\n")
        .unwrap_err();
    assert_eq!(problems.len(), 1, "{problems:?}");
    assert!(
        problems[0]
            .starts_with("agent.protected_tools[1] | 'surface.mesages.list' matches no callable"),
        "{problems:?}"
    );
    assert!(
        problems[0].contains("did you mean `surface.messages.list`"),
        "{problems:?}"
    );
}

#[test]
fn a_misspelled_tool_scope_is_an_error_with_a_did_you_mean() {
    let problems = parse("[agent]\nrunner = \"command\"\ncommand = [\"/bin/true\"]\ntool_scope = [\"surface.mesages.*\"]\n")
        .unwrap_err();
    assert_eq!(problems.len(), 1, "{problems:?}");
    assert!(
        problems[0].starts_with("agent.tool_scope[0] | 'surface.mesages.*' matches no callable"),
        "{problems:?}"
    );
    assert!(
        problems[0].contains("did you mean `surface.messages"),
        "{problems:?}"
    );
}

#[test]
fn every_tool_name_in_rules_scopes_tokens_and_hooks_is_checked() {
    let problems = parse(
        r#"
[[permissions.rules]]
tool = "surface.mesages.send"
policy = "deny"

[sessions.ops]
tool_scope = ["nothing.*"]

[toolserver]
[[toolserver.tokens]]
name = "ci"
token_env = "CI_TOKEN"
scope = ["surface.messages.list", "console", "surfce.help"]

[[hooks.after]]
tool = "workflow.crate"
command = ["./x"]
"#,
    )
    .unwrap_err();
    let keys: Vec<&str> = problems
        .iter()
        .map(|p| p.split(" | ").next().unwrap())
        .collect();
    assert_eq!(
        keys,
        [
            "permissions.rules[0].tool",
            "sessions.ops.tool_scope[0]",
            "toolserver.tokens[0].scope[2]",
            "hooks.after[0].tool"
        ],
        "{problems:?}"
    );
}

#[test]
fn policies_callers_sessions_and_approvers_are_checked() {
    let problems = parse(
        r##"
[permissions]
default = "maybe"
approvers = ["@Nobody"]
approvals_channel = "#nowhere"

[[permissions.rules]]
tool = "surface.help"
policy = "ask"
session = "#opz"
origin = "staging-*"
caller = "token:ghost"

[[permissions.rules]]
tool = "surface.help"
policy = "deny"
caller = "robot"
"##,
    )
    .unwrap_err();
    let text = problems.join("\n");
    for needle in [
        "permissions.default | unknown policy 'maybe'",
        "permissions.approvers[0] | '@Nobody' is not a configured user or role alias",
        "permissions.approvals_channel | '#nowhere' is not a configured session alias",
        "permissions.rules[0].session | '#opz' is not a configured session alias",
        "did you mean \"#ops\"",
        "permissions.rules[0].origin | 'staging-*' matches no session alias",
        "permissions.rules[0].caller | no [[toolserver.tokens]] entry is named 'ghost'",
        "permissions.rules[1].caller | unknown caller 'robot'",
    ] {
        assert!(text.contains(needle), "missing {needle:?} in:\n{text}");
    }
}

#[test]
fn asking_without_approvers_is_an_error() {
    let problems = parse("[permissions]\ndefault = \"ask\"\n").unwrap_err();
    assert!(
        problems.iter().any(|p| p.starts_with(
            "permissions.approvers | some calls are asked, but nobody may approve them"
        )),
        "{problems:?}"
    );
}

#[test]
fn self_approval_is_off_unless_turned_on_and_must_be_a_boolean() {
    let off = parse("[permissions]\napprovers = [\"@Mira\"]\n").expect("valid");
    assert!(!off.permissions.allow_self_approval, "off by default");
    let on = parse("[permissions]\napprovers = [\"@Mira\"]\nallow_self_approval = true\n")
        .expect("valid");
    assert!(on.permissions.allow_self_approval);
    let problems = parse("[permissions]\napprovers = [\"@Mira\"]\nallow_self_approval = \"yes\"\n")
        .unwrap_err();
    assert!(
        problems
            .iter()
            .any(|p| p.starts_with("permissions.allow_self_approval")),
        "{problems:?}"
    );
    let typo =
        parse("[permissions]\napprovers = [\"@Mira\"]\nallow_self_aproval = true\n").unwrap_err();
    assert!(
        typo.iter().any(|p| p.contains("allow_self_approval")),
        "a did-you-mean names the key: {typo:?}"
    );
}

#[test]
fn the_console_answers_asks_when_it_is_served_and_may_decide() {
    // Served and allowed to decide: nobody in Discord is needed.
    let config = parse("[toolserver]\nconsole = true\n\n[permissions]\ndefault = \"ask\"\n")
        .expect("the console answers");
    assert!(config.permissions.console_approves);
    assert!(config.permissions.approvers.is_empty());
    // Served but Discord only, or allowed but not served: nobody could answer.
    for extra in [
        "[toolserver]\nconsole = true\n\n[permissions]\ndefault = \"ask\"\nconsole_approves = false\n",
        "[permissions]\ndefault = \"ask\"\nconsole_approves = true\n",
    ] {
        let problems = parse(extra).unwrap_err();
        assert!(
            problems
                .iter()
                .any(|p| p.starts_with("permissions.approvers | some calls are asked")
                    && p.contains("toolserver.console = true")),
            "{extra}: {problems:?}"
        );
    }
}

#[test]
fn tokens_need_distinct_names_and_an_env_name() {
    let problems = parse(
        r#"
[toolserver]
[[toolserver.tokens]]
name = "ci"
token_env = "CI_TOKEN"
[[toolserver.tokens]]
name = "ci"
token_env = "not a name"
[[toolserver.tokens]]
name = "bad name!"
token_env = "X"
"#,
    )
    .unwrap_err();
    let text = problems.join("\n");
    assert!(
        text.contains("toolserver.tokens[1].name | two tokens are named 'ci'"),
        "{text}"
    );
    assert!(
        text.contains(
            "toolserver.tokens[1].token_env | 'not a name' is not an environment variable name"
        ),
        "{text}"
    );
    assert!(
        text.contains("toolserver.tokens[2].name | 'bad name!' is not a token name"),
        "{text}"
    );
}

#[test]
fn without_the_callables_known_names_are_not_checked() {
    // Plain `Config::parse` (no registry at hand) reads the names as written.
    let config = Config::parse(
        &format!("{BASE}[sessions.ops]\ntool_scope = [\"anything.*\"]\n"),
        "t.toml",
    )
    .expect("valid");
    assert_eq!(
        config.sessions[0].tool_scope.as_deref(),
        Some(&["anything.*".to_owned()][..])
    );
}
