//! Config validation: every problem, located, with what to do.

use std::net::SocketAddr;

use switchboard_config::{AliasKind, Config, Snowflake};

const EXAMPLE: &str = r#"
[discord]
token_env = "DISCORD_TOKEN"
allowed_guild_ids = ["1000000000000000200"]
allowed_channel_ids = []
allow_dms = false

[entity.users]
Stanley = "123456789012345678"
Ops-Bot = { discord = "223456789012345678", comment = "the deploy bot" }

[entity.sessions]
ops = "334455667788990011"
release-room = { discord = "334455667788990022", comment = "release coordination" }

[entity.roles]
oncall = "445566778899001122"

[toolserver]
bind = "127.0.0.1:7311"
operator_token_env = "SWITCHBOARD_OPERATOR_TOKEN"

[store]
path = "switchboard.db"
"#;

fn problems(text: &str) -> Vec<String> {
    match Config::parse(text, "test.toml") {
        Ok(_) => Vec::new(),
        Err(report) => report
            .problems
            .iter()
            .map(|p| format!("{}:{} {} | {}", p.line, p.column, p.key_path, p.message))
            .collect(),
    }
}

#[test]
fn the_documented_example_is_valid() {
    let config = Config::parse(EXAMPLE, "example.toml").expect("valid");
    assert_eq!(
        config.discord.allowed_guild_ids,
        vec![Snowflake(1000000000000000200)]
    );
    assert_eq!(
        config.aliases.id_for(AliasKind::User, "ops-bot"),
        Some(Snowflake(223456789012345678))
    );
    assert_eq!(
        config.aliases.id_for(AliasKind::Session, "release-room"),
        Some(Snowflake(334455667788990022))
    );
    assert_eq!(
        config
            .alias_comments
            .get(&(AliasKind::Session, "release-room".into()))
            .map(String::as_str),
        Some("release coordination")
    );
    assert_eq!(
        config.toolserver.bind,
        "127.0.0.1:7311".parse::<SocketAddr>().unwrap()
    );
}

#[test]
fn the_example_file_in_the_repository_is_valid() {
    let text = include_str!("../../switchboard.example.toml");
    if let Err(report) = Config::parse(text, "switchboard.example.toml") {
        panic!("{report}");
    }
}

#[test]
fn an_empty_file_means_defaults_with_everything_denied() {
    let config = Config::parse("", "empty.toml").expect("valid");
    assert!(config.discord.allowed_guild_ids.is_empty());
    assert!(config.discord.allowed_channel_ids.is_empty());
    assert!(!config.discord.allow_dms);
    assert_eq!(config.discord.token_env, "DISCORD_TOKEN");
    assert_eq!(
        config.toolserver.operator_token_env,
        "SWITCHBOARD_OPERATOR_TOKEN"
    );
    assert!(config.toolserver.bind.ip().is_loopback());
    assert!(!config.toolserver.insecure_no_auth);
    assert_eq!(
        config.store.url,
        switchboard_config::StoreUrl::parse("sqlite://switchboard.db").unwrap()
    );
}

#[test]
fn three_planted_mistakes_give_three_located_problems() {
    let text = "[discord]\nallowd_guild_ids = []\nallowed_channel_ids = [\"12\"]\n\n[toolserver]\nbind = \"localhost:80:80\"\n";
    assert_eq!(
        problems(text),
        vec![
            "2:1 discord.allowd_guild_ids | unknown key `allowd_guild_ids`",
            "3:24 discord.allowed_channel_ids[0] | '12' is not a Discord id: it has 2 digits, expected 17 to 20",
            "6:8 toolserver.bind | 'localhost:80:80' is not an address to listen on",
        ]
    );
}

#[test]
fn unknown_key_suggests_the_nearest_known_key() {
    let report = Config::parse("[discord]\nallow_dm = true\n", "t.toml").unwrap_err();
    let problem = &report.problems[0];
    assert!(
        problem.help.starts_with("did you mean `allow_dms`?"),
        "{}",
        problem.help
    );
    let shown = report.to_string();
    assert!(
        shown.contains("t.toml:2:1: discord.allow_dm: unknown key `allow_dm`"),
        "{shown}"
    );
}

#[test]
fn unknown_tables_and_keys_everywhere_are_all_reported() {
    let text = "bogus = 1\n[discord]\nx = 1\n[entity]\nchannels = {}\n[store]\nsize = 3\n[toolserver]\nport = 1\n";
    let found = problems(text);
    assert_eq!(found.len(), 5, "{found:#?}");
    for key in [
        "bogus",
        "discord.x",
        "entity.channels",
        "store.size",
        "toolserver.port",
    ] {
        assert!(
            found.iter().any(|p| p.contains(&format!(" {key} |"))),
            "{key}: {found:#?}"
        );
    }
}

#[test]
fn ids_must_be_snowflakes() {
    let text = r#"
[discord]
allowed_guild_ids = ["123456789012345678", "abc", "1234567890123456789012", "99999999999999999999"]
[entity.users]
x = "42"
"#;
    let found = problems(text);
    assert_eq!(found.len(), 4, "{found:#?}");
    assert!(found[0].starts_with("3:44 discord.allowed_guild_ids[1]"));
    assert!(found[3].starts_with("5:5 entity.users.x"));
}

#[test]
fn integer_ids_are_refused_with_a_hint_to_quote_them() {
    let report = Config::parse(
        "[discord]\nallowed_channel_ids = [123456789012345678]\n",
        "t.toml",
    )
    .unwrap_err();
    assert_eq!(report.problems.len(), 1);
    assert!(report.problems[0].help.contains("quoted strings"));
    assert_eq!(
        report.problems[0].key_path,
        "discord.allowed_channel_ids[0]"
    );
}

#[test]
fn an_integer_where_a_prompt_or_a_flag_belongs_is_not_told_to_quote_an_id() {
    let report = Config::parse(
        "[discord]\nallowed_channel_ids = [\"334455667788990011\"]\n[agent]\nrunner = \"command\"\ncommand = [\"/bin/agent\"]\nsystem_prompt = 3\nactive_channel_ids = [5]\n[sessions.334455667788990011]\nrequire_mention = 1\n",
        "t.toml",
    )
    .unwrap_err();
    let help = |key: &str| {
        report
            .problems
            .iter()
            .find(|p| p.key_path == key)
            .unwrap_or_else(|| panic!("{key}: {:#?}", report.problems))
            .help
            .clone()
    };
    assert!(
        !help("agent.system_prompt").contains("Discord ids"),
        "{}",
        help("agent.system_prompt")
    );
    assert_eq!(
        help("sessions.334455667788990011.require_mention"),
        "write true or false (without quotes)"
    );
    assert!(
        help("agent.active_channel_ids[0]").contains("quoted strings"),
        "a key named for ids keeps the hint"
    );
}

#[test]
fn alias_names_outside_the_token_grammar_are_refused() {
    let text = "[entity.users]\n\"release manager\" = \"123456789012345678\"\n\"-x\" = \"123456789012345679\"\n";
    let found = problems(text);
    assert_eq!(found.len(), 2, "{found:#?}");
    assert!(found[0].contains("is not a valid alias name"));
}

#[test]
fn aliases_differing_only_by_case_are_refused() {
    let text = "[entity.sessions]\nops = \"334455667788990011\"\nOPS = \"334455667788990022\"\n";
    let found = problems(text);
    assert_eq!(found.len(), 1, "{found:#?}");
    assert!(
        found[0].contains("differs from 'ops' only by case"),
        "{found:#?}"
    );
}

#[test]
fn a_name_used_as_user_and_role_alias_is_refused() {
    let text = "[entity.users]\noncall = \"123456789012345678\"\n[entity.roles]\nOnCall = \"445566778899001122\"\n";
    let found = problems(text);
    assert_eq!(found.len(), 1, "{found:#?}");
    assert!(found[0].contains("both a user alias"), "{found:#?}");
    assert!(
        found[0].starts_with("4:1 entity.roles.OnCall"),
        "{found:#?}"
    );
}

#[test]
fn a_session_token_may_share_a_name_with_a_user() {
    let text = "[entity.users]\nops = \"123456789012345678\"\n[entity.sessions]\nops = \"334455667788990011\"\n";
    assert!(problems(text).is_empty());
}

#[test]
fn a_secret_in_place_of_an_env_var_name_is_refused() {
    let text = "[discord]\ntoken_env = \"MTA5.abc-def.xyz\"\n";
    let report = Config::parse(text, "t.toml").unwrap_err();
    assert_eq!(report.problems.len(), 1);
    assert!(report.problems[0]
        .help
        .contains("NAME of the environment variable"));
}

#[test]
fn alias_tables_reject_unknown_keys_and_missing_ids() {
    let text = "[entity.users]\na = { discord = \"123456789012345678\", note = \"x\" }\nb = { comment = \"no id\" }\nc = 5\n";
    let found = problems(text);
    assert_eq!(found.len(), 3, "{found:#?}");
}

#[test]
fn api_base_url_must_be_http() {
    assert!(problems("[discord]\napi_base_url = \"http://127.0.0.1:9999/\"\n").is_empty());
    let config = Config::parse(
        "[discord]\napi_base_url = \"http://127.0.0.1:9999/\"\n",
        "t",
    )
    .unwrap();
    assert_eq!(
        config.discord.api_base_url.as_deref(),
        Some("http://127.0.0.1:9999")
    );
    assert_eq!(problems("[discord]\napi_base_url = \"ftp://x\"\n").len(), 1);
}

#[test]
fn invalid_request_percent_defaults_to_half_and_is_bounded() {
    let config = Config::parse("", "t").unwrap();
    assert_eq!(config.discord.invalid_request_percent, 50);
    let config = Config::parse("[discord]\ninvalid_request_percent = 20\n", "t").unwrap();
    assert_eq!(config.discord.invalid_request_percent, 20);
    for bad in ["0", "101", "-1", "\"half\"", "0.5"] {
        let found = problems(&format!("[discord]\ninvalid_request_percent = {bad}\n"));
        assert_eq!(found.len(), 1, "{bad}: {found:#?}");
        assert!(found[0].contains("invalid_request_percent"), "{found:#?}");
    }
}

#[test]
fn toml_syntax_errors_are_located() {
    let found = problems("[discord\nallow_dms = true\n");
    assert!(!found.is_empty());
    assert!(found[0].starts_with("1:"), "{found:#?}");
}

#[test]
fn wrong_types_are_reported_with_the_expected_type() {
    let found =
        problems("[discord]\nallow_dms = \"yes\"\nallowed_guild_ids = \"123456789012345678\"\n");
    assert_eq!(found.len(), 2, "{found:#?}");
    assert!(found[0].contains("invalid type"), "{found:#?}");
}

#[test]
fn config_path_prefers_flag_then_env_then_default() {
    use std::path::{Path, PathBuf};
    assert_eq!(
        Config::resolve_path(Some(Path::new("a.toml")), Some("b.toml")),
        PathBuf::from("a.toml")
    );
    assert_eq!(
        Config::resolve_path(None, Some("b.toml")),
        PathBuf::from("b.toml")
    );
    assert_eq!(
        Config::resolve_path(None, Some("")),
        PathBuf::from("switchboard.toml")
    );
    assert_eq!(
        Config::resolve_path(None, None),
        PathBuf::from("switchboard.toml")
    );
}

#[test]
fn missing_file_error_says_what_to_do() {
    let err = Config::load(std::path::Path::new("/nonexistent/switchboard.toml")).unwrap_err();
    let text = err.to_string();
    assert!(text.contains("--config"), "{text}");
}

mod garbage {
    use super::*;
    use proptest::prelude::*;

    proptest! {
        #[test]
        fn any_text_yields_a_config_or_a_report_never_a_panic(text in any::<String>()) {
            let _ = Config::parse(&text, "fuzz.toml");
        }

        #[test]
        fn toml_shaped_garbage_never_panics(
            lines in proptest::collection::vec(
                "(\\[[a-z.]{0,12}\\]|[a-z_\"-]{0,10} = (\"[0-9a-z]{0,20}\"|[0-9]{0,5}|true|\\[\\]|\\{\\}))",
                0..12,
            )
        ) {
            let _ = Config::parse(&lines.join("\n"), "fuzz.toml");
        }
    }
}

#[test]
fn numbers_out_of_range_are_located() {
    let text = "[toolserver]\ncall_timeout_s = 0\nmax_concurrent_calls = 0\ndownload_max_bytes = 0\n[toolserver.rate_limits]\nper_caller_burst = 0\n[store]\nmessages_per_channel = 0\n";
    let found = problems(text);
    assert_eq!(found.len(), 5, "{found:#?}");
    assert!(
        found
            .iter()
            .any(|p| p.starts_with("4:22 toolserver.download_max_bytes")),
        "{found:#?}"
    );
    let garbage = problems("[toolserver]\ndownload_max_bytes = \"lots\"\n");
    assert_eq!(garbage.len(), 1, "{garbage:#?}");
    assert!(
        found[0].starts_with("2:18 toolserver.call_timeout_s"),
        "{found:#?}"
    );
}

#[test]
fn insecure_no_auth_needs_a_loopback_bind() {
    let text = "[toolserver]\nbind = \"0.0.0.0:7311\"\ninsecure_no_auth = true\n";
    let found = problems(text);
    assert_eq!(found.len(), 1, "{found:#?}");
    assert!(found[0].contains("not loopback"), "{found:#?}");
    assert!(problems("[toolserver]\nbind = \"[::1]:7311\"\ninsecure_no_auth = true\n").is_empty());
}

#[test]
fn defaults_for_limits_and_retention() {
    let config = Config::parse("", "t").unwrap();
    assert_eq!(config.toolserver.call_timeout.as_secs(), 30);
    assert_eq!(config.toolserver.download_max_bytes, 25 * 1024 * 1024);
    assert_eq!(config.toolserver.max_concurrent_calls, 64);
    assert_eq!(config.toolserver.rate_limits.per_caller.per_minute, 600);
    assert_eq!(config.store.messages_per_channel, 1000);
}

#[test]
fn connection_limits_have_defaults_and_read_their_keys() {
    let config = Config::parse("", "t").unwrap();
    assert_eq!(config.toolserver.max_connections, 512);
    assert_eq!(config.toolserver.header_read_timeout.as_millis(), 10_000);
    assert_eq!(config.toolserver.idle_timeout.as_secs(), 60);
    assert_eq!(config.toolserver.body_read_timeout.as_millis(), 15_000);
    let text = "[toolserver]\nmax_connections = 8\nheader_read_timeout_ms = 500\nidle_timeout_s = 2\nbody_read_timeout_ms = 750\n";
    let config = Config::parse(text, "t").unwrap();
    assert_eq!(config.toolserver.max_connections, 8);
    assert_eq!(config.toolserver.header_read_timeout.as_millis(), 500);
    assert_eq!(config.toolserver.idle_timeout.as_secs(), 2);
    assert_eq!(config.toolserver.body_read_timeout.as_millis(), 750);
}

#[test]
fn connection_limits_out_of_range_are_located_with_help() {
    let text = "[toolserver]\nmax_connections = 0\nheader_read_timeout_ms = 0\nidle_timeout_s = 0\nbody_read_timeout_ms = 0\n";
    let report = Config::parse(text, "test.toml").expect_err("zeros are refused");
    let found: Vec<String> = report
        .problems
        .iter()
        .map(|p| format!("{}:{} {} | {}", p.line, p.column, p.key_path, p.message))
        .collect();
    assert_eq!(
        found,
        [
            "2:19 toolserver.max_connections | 0 is out of range",
            "3:26 toolserver.header_read_timeout_ms | 0 is out of range",
            "4:18 toolserver.idle_timeout_s | 0 is out of range",
            "5:24 toolserver.body_read_timeout_ms | 0 is out of range",
        ]
    );
    for problem in &report.problems {
        assert!(
            problem.help.starts_with("use a whole number from 1 to "),
            "{problem:?}"
        );
    }
    assert!(
        report.problems[0].help.contains("file descriptor"),
        "{report}"
    );

    let too_big = "[toolserver]\nmax_connections = 1000000\nheader_read_timeout_ms = 86400000\nidle_timeout_s = 86400\nbody_read_timeout_ms = 86400000\n";
    let found = problems(too_big);
    assert_eq!(found.len(), 4, "{found:#?}");
    assert!(found[0].contains("1000000 is out of range"), "{found:#?}");
    let help: Vec<String> = Config::parse(too_big, "t")
        .expect_err("too big")
        .problems
        .into_iter()
        .map(|p| p.help)
        .collect();
    assert!(
        help[0].starts_with("use a whole number from 1 to 65536"),
        "{help:#?}"
    );
    assert!(
        help[1].starts_with("use a whole number from 1 to 300000"),
        "{help:#?}"
    );
    assert!(
        help[2].starts_with("use a whole number from 1 to 3600"),
        "{help:#?}"
    );
    assert!(
        help[3].starts_with("use a whole number from 1 to 600000"),
        "{help:#?}"
    );

    let wrong_type = problems("[toolserver]\nidle_timeout_s = \"1m\"\n");
    assert_eq!(wrong_type.len(), 1, "{wrong_type:#?}");
    assert!(
        wrong_type[0].starts_with("2:18 toolserver.idle_timeout_s"),
        "{wrong_type:#?}"
    );
}

#[test]
fn agent_section_is_optional_and_typed() {
    assert!(Config::parse("", "t").unwrap().agent.is_none());
    let config = Config::parse(
        "[agent]\nrunner = \"command\"\ncommand = [\"/bin/agent\", \"--fast\"]\nenv_passthrough = [\"PATH\"]\nactive_channel_ids = [\"1000000000000000401\"]\n",
        "t",
    )
    .unwrap();
    let agent = config.agent.expect("agent");
    assert_eq!(
        agent.runner,
        switchboard_config::Runner::Command {
            program: "/bin/agent".into(),
            args: vec!["--fast".into()],
            cwd: ".".into()
        }
    );
    assert_eq!(agent.timeout.as_secs(), 600);
    assert_eq!(agent.context_messages, 20);
    assert_eq!(
        (agent.context_tokens, agent.answer_tokens),
        (32_000, 4_000),
        "a request carries at most 28,000 tokens unless the operator says otherwise"
    );
    assert!(
        agent.protected_tools.is_empty(),
        "no tool is protected by default"
    );
    assert_eq!(agent.queue_per_session, 8);
    assert_eq!(
        agent.tool_scope,
        [
            "surface.help",
            "memory.*",
            "surface.sessions.*",
            "surface.messages.*",
            "surface.reactions.*",
            "surface.threads.*",
            "surface.pins.*",
            "workflow.*",
            "attachment.*"
        ],
        "a run may use every built-in callable but channel management unless the operator says otherwise"
    );
    assert_eq!(
        agent.active_channel_ids,
        vec![Snowflake(1000000000000000401)]
    );
}

#[test]
fn agent_garbage_is_reported_with_places() {
    let text = "[agent]\nrunner = \"telepathy\"\ntimeout_s = 0\nenv_passthrough = [\"NOT A NAME\"]\nactive_channel_ids = [\"12\"]\n";
    let found = problems(text);
    assert_eq!(found.len(), 4, "{found:#?}");
    assert!(found[0].starts_with("2:10 agent.runner"), "{found:#?}");
    let empty = problems("[agent]\nrunner = \"command\"\ncommand = []\n");
    assert_eq!(empty.len(), 1, "{empty:#?}");
    let missing = problems("[agent]\nrunner = \"openai\"\n");
    assert_eq!(missing.len(), 2, "base_url and model: {missing:#?}");
}

#[test]
fn the_context_budget_reads_its_keys() {
    let config = Config::parse(
        "[agent]\nrunner = \"command\"\ncommand = [\"/bin/agent\"]\ncontext_tokens = 8000\nanswer_tokens = 1000\nprotected_tools = [\"surface.pins.*\", \"workflow.status\"]\n",
        "t",
    )
    .unwrap();
    let agent = config.agent.expect("agent");
    assert_eq!((agent.context_tokens, agent.answer_tokens), (8_000, 1_000));
    assert_eq!(agent.protected_tools, ["surface.pins.*", "workflow.status"]);
}

#[test]
fn memory_max_chars_is_read_and_garbage_is_refused_with_places() {
    let base = "[agent]\nrunner = \"command\"\ncommand = [\"/bin/agent\"]\n";
    let default = Config::parse(base, "t").unwrap().agent.expect("agent");
    assert_eq!(default.memory_max_chars, 4_000);
    assert!(default.tool_scope.iter().any(|g| g == "memory.*"));
    let set = Config::parse(&format!("{base}memory_max_chars = 900\n"), "t").unwrap();
    assert_eq!(set.agent.expect("agent").memory_max_chars, 900);
    for garbage in ["10", "1000000", "\"lots\"", "-1", "[1]"] {
        let found = problems(&format!("{base}memory_max_chars = {garbage}\n"));
        assert_eq!(found.len(), 1, "{garbage}: {found:#?}");
        assert!(
            found[0].starts_with("4:20 agent.memory_max_chars"),
            "{garbage}: {found:#?}"
        );
    }
}

#[test]
fn provider_prompts_put_the_most_specific_glob_first_and_bad_globs_are_refused() {
    let base = "[agent]\nrunner = \"command\"\ncommand = [\"/bin/agent\"]\n";
    let config = Config::parse(
        &format!("{base}instructions_max_chars = 500\n[agent.prompts]\n\"gpt-*\" = \"g\"\ndefault = \"d\"\n\"claude-*\" = \"c\"\n\"gpt-4o*\" = \"o\"\n"),
        "t",
    )
    .unwrap();
    let agent = config.agent.expect("agent");
    assert_eq!(agent.instructions_max_chars, 500);
    assert_eq!(
        agent.prompts,
        [
            ("claude-*".to_owned(), "c".to_owned()),
            ("default".to_owned(), "d".to_owned()),
            ("gpt-4o*".to_owned(), "o".to_owned()),
            ("gpt-*".to_owned(), "g".to_owned()),
        ]
    );
    let default = Config::parse(base, "t").unwrap().agent.expect("agent");
    assert_eq!(default.instructions_max_chars, 20_000);
    assert!(default.prompts.is_empty());

    let bad_glob = problems(&format!("{base}[agent.prompts]\n\"gpt-[\" = \"x\"\n"));
    assert_eq!(bad_glob.len(), 1, "{bad_glob:#?}");
    assert!(
        bad_glob[0].contains("agent.prompts.\"gpt-[\" | not a model-name glob"),
        "{bad_glob:#?}"
    );
    let empty = problems(&format!("{base}[agent.prompts]\ndefault = \"  \"\n"));
    assert_eq!(empty.len(), 1, "{empty:#?}");
    assert!(empty[0].contains("the prompt is empty"), "{empty:#?}");
    for garbage in [
        "[agent.prompts]\n\"gpt-*\" = 7\n",
        "prompts = \"gpt\"\n",
        "instructions_max_chars = -1\n",
        "instructions_max_chars = 2000000\n",
        "instructions_max_chars = \"all\"\n",
    ] {
        let found = problems(&format!("{base}{garbage}"));
        assert_eq!(found.len(), 1, "{garbage}: {found:#?}");
        assert!(found[0].contains("agent."), "{garbage}: {found:#?}");
    }
}

#[test]
fn a_sessions_prompt_and_budget_are_read_and_garbage_is_refused() {
    let base = "[agent]\nrunner = \"command\"\ncommand = [\"/bin/agent\"]\nanswer_tokens = 2000\n[discord]\nallowed_channel_ids = [\"334455667788990011\"]\n";
    let config = Config::parse(
        &format!("{base}[sessions.334455667788990011]\nsystem_prompt = \"be terse\"\ncontext_tokens = 8000\n"),
        "t",
    )
    .unwrap();
    let session = &config.sessions[0];
    assert_eq!(session.system_prompt.as_deref(), Some("be terse"));
    assert_eq!(session.context_tokens, Some(8_000));
    assert_eq!(session.require_mention, None);
    let set = Config::parse(
        &format!("{base}[sessions.334455667788990011]\nrequire_mention = false\n"),
        "t",
    )
    .unwrap();
    assert_eq!(set.sessions[0].require_mention, Some(false));
    for (garbage, says) in [
        ("system_prompt = \"  \"\n", "the prompt is empty"),
        ("system_prompt = 3\n", "system_prompt"),
        ("context_tokens = 10\n", "out of range"),
        (
            "context_tokens = 1500\n",
            "more than agent.answer_tokens (2000)",
        ),
        ("context_tokens = \"big\"\n", "context_tokens"),
        ("require_mention = \"yes\"\n", "require_mention"),
    ] {
        let found = problems(&format!("{base}[sessions.334455667788990011]\n{garbage}"));
        assert_eq!(found.len(), 1, "{garbage}: {found:#?}");
        assert!(
            found[0].contains("sessions.334455667788990011") && found[0].contains(says),
            "{garbage}: {found:#?}"
        );
    }
}

#[test]
fn context_budget_garbage_is_refused_with_places() {
    let base = "[agent]\nrunner = \"command\"\ncommand = [\"/bin/agent\"]\n";
    let small = problems(&format!("{base}context_tokens = 10\n"));
    assert_eq!(small.len(), 1, "{small:#?}");
    assert!(
        small[0].starts_with("4:18 agent.context_tokens | 10 is out of range"),
        "{small:#?}"
    );
    let huge = problems(&format!("{base}context_tokens = 5000000\n"));
    assert_eq!(huge.len(), 1, "{huge:#?}");
    assert!(
        huge[0].starts_with("4:18 agent.context_tokens"),
        "{huge:#?}"
    );

    let no_room = problems(&format!(
        "{base}context_tokens = 4000\nanswer_tokens = 4000\n"
    ));
    assert_eq!(no_room.len(), 1, "{no_room:#?}");
    assert!(
        no_room[0].starts_with("5:17 agent.answer_tokens | 4000 leaves no room for the request"),
        "{no_room:#?}"
    );
    let default_context = problems(&format!("{base}answer_tokens = 40000\n"));
    assert_eq!(default_context.len(), 1, "{default_context:#?}");
    assert!(
        default_context[0].contains("less than agent.context_tokens (32000)"),
        "{default_context:#?}"
    );
    let zero = problems(&format!("{base}answer_tokens = 0\n"));
    assert_eq!(zero.len(), 1, "{zero:#?}");
    assert!(zero[0].starts_with("4:17 agent.answer_tokens"), "{zero:#?}");

    let words = problems(&format!("{base}context_tokens = \"lots\"\n"));
    assert_eq!(words.len(), 1, "{words:#?}");
    let negative = problems(&format!("{base}answer_tokens = -5\n"));
    assert_eq!(negative.len(), 1, "{negative:#?}");

    let unknown = problems(&format!(
        "{base}protected_tools = [\"surface.mesages.list\", 7]\n"
    ));
    assert_eq!(
        unknown.len(),
        1,
        "a wrong type stops the parse: {unknown:#?}"
    );
    let not_a_list = problems(&format!("{base}protected_tools = \"workflow.*\"\n"));
    assert_eq!(not_a_list.len(), 1, "{not_a_list:#?}");
}

#[test]
fn reply_in_thread_takes_three_modes_and_names_a_wrong_one() {
    let base = "[agent]\nrunner = \"command\"\ncommand = [\"/bin/agent\"]\n";
    let mode = |line: &str| {
        Config::parse(&format!("{base}{line}\n"), "t")
            .unwrap()
            .agent
            .expect("agent")
            .reply_in_thread
    };
    use switchboard_config::ReplyInThread;
    assert_eq!(
        mode(""),
        ReplyInThread::Never,
        "answers stay in the channel unless asked"
    );
    assert_eq!(mode("reply_in_thread = \"never\""), ReplyInThread::Never);
    assert_eq!(mode("reply_in_thread = \"always\""), ReplyInThread::Always);
    assert_eq!(mode("reply_in_thread = \"long\""), ReplyInThread::Long);
    let found = problems(&format!("{base}reply_in_thread = \"sometimes\"\n"));
    assert_eq!(found.len(), 1, "{found:#?}");
    assert!(
        found[0].starts_with("4:19 agent.reply_in_thread"),
        "{found:#?}"
    );
    assert!(found[0].contains("'sometimes'"), "{found:#?}");
    let wrong_type = problems(&format!("{base}reply_in_thread = true\n"));
    assert_eq!(wrong_type.len(), 1, "{wrong_type:#?}");
}

#[test]
fn openai_runner_reads_its_keys() {
    let config = Config::parse(
        "[agent]\nrunner = \"openai\"\nbase_url = \"http://127.0.0.1:8080/v1/\"\nmodel = \"m\"\napi_key_env = \"OPENAI_API_KEY\"\nmax_tool_rounds = 3\n",
        "t",
    )
    .unwrap();
    match config.agent.expect("agent").runner {
        switchboard_config::Runner::OpenAi(runner) => {
            assert_eq!(runner.base_url, "http://127.0.0.1:8080/v1");
            assert_eq!(runner.api_key_env.as_deref(), Some("OPENAI_API_KEY"));
            assert_eq!(runner.max_tool_rounds, 3);
        }
        other => panic!("{other:?}"),
    }
}

#[test]
fn admins_take_aliases_mentions_and_ids_and_name_unknown_ones() {
    let text = EXAMPLE.replace(
        "allow_dms = false",
        "allow_dms = false\nadmins = [\"@Stanley\", \"oncall\", \"<@&445566778899001122>\", \"123456789012345670\", \"@Stanly\"]",
    );
    let found = problems(&text);
    assert_eq!(found.len(), 1, "{found:?}");
    assert!(found[0].contains("discord.admins[4]"), "{found:?}");
    assert!(
        found[0].contains("'@Stanly' is not a configured"),
        "{found:?}"
    );
    let report = Config::parse(&text, "t.toml").unwrap_err();
    assert!(
        report.problems[0]
            .help
            .contains("did you mean \"@Stanley\""),
        "{report}"
    );

    let fixed = text.replace(", \"@Stanly\"", "");
    let config = Config::parse(&fixed, "t.toml").expect("valid");
    use switchboard_config::Principal;
    assert_eq!(
        config.discord.admins,
        vec![
            Principal::User(Snowflake(123456789012345678)),
            Principal::Role(Snowflake(445566778899001122)),
            Principal::Role(Snowflake(445566778899001122)),
            Principal::Id(Snowflake(123456789012345670)),
        ]
    );
    let member = Snowflake(999999999999999999);
    assert!(config.discord.admins[1].matches(member, &[Snowflake(445566778899001122)]));
    assert!(!config.discord.admins[0].matches(member, &[]));
}

#[test]
fn everyone_and_here_cannot_be_aliases() {
    let text = EXAMPLE
        .replace(
            "Stanley = \"123456789012345678\"",
            "Stanley = \"123456789012345678\"\nhere = \"123456789012345679\"",
        )
        .replace(
            "oncall = \"445566778899001122\"",
            "oncall = \"445566778899001122\"\nEveryone = \"445566778899001123\"",
        );
    let found = problems(&text);
    assert_eq!(found.len(), 2, "{found:?}");
    assert!(
        found
            .iter()
            .any(|p| p.contains("entity.users.here") && p.contains("Discord's own @here")),
        "{found:?}"
    );
    assert!(
        found
            .iter()
            .any(|p| p.contains("entity.roles.Everyone") && p.contains("Discord's own @everyone")),
        "{found:?}"
    );
}

#[test]
fn categories_and_the_send_part_cap_are_read_and_checked() {
    let text = EXAMPLE.replace(
        "allowed_channel_ids = []",
        "allowed_channel_ids = []\nallowed_category_ids = [\"334455667788990099\"]",
    ) + "\n";
    let config = Config::parse(&text, "t.toml").expect("valid");
    assert_eq!(
        config.discord.allowed_category_ids,
        vec![Snowflake(334455667788990099)]
    );
    assert_eq!(config.toolserver.max_parts_per_send, 10);
    let text = EXAMPLE.replace(
        "operator_token_env = \"SWITCHBOARD_OPERATOR_TOKEN\"",
        "operator_token_env = \"SWITCHBOARD_OPERATOR_TOKEN\"\nmax_parts_per_send = 0",
    );
    let found = problems(&text);
    assert!(
        found
            .iter()
            .any(|p| p.contains("toolserver.max_parts_per_send")),
        "{found:?}"
    );
}

#[test]
fn a_config_that_is_not_utf8_says_so_where_it_breaks() {
    let dir = std::env::temp_dir().join(format!("sb-config-utf8-{}", std::process::id()));
    std::fs::create_dir_all(&dir).unwrap();
    let path = dir.join("bad.toml");
    std::fs::write(&path, b"[discord]\nallow_dms = true # caf\xe9\n").unwrap();
    let error = Config::load(&path).unwrap_err();
    let text = error.to_string();
    std::fs::remove_dir_all(&dir).ok();
    assert!(text.contains("bad.toml:2:23: (encoding)"), "{text}");
    assert!(text.contains("not UTF-8"), "{text}");
    assert!(!text.contains("Create it"), "{text}");
}

fn store_of(section: &str) -> Result<switchboard_config::StoreConfig, Vec<String>> {
    let text = format!("[discord]\nallowed_guild_ids = []\n\n[store]\n{section}\n");
    match Config::parse(&text, "store.toml") {
        Ok(config) => Ok(config.store),
        Err(report) => Err(report
            .problems
            .iter()
            .map(|p| {
                format!(
                    "{}:{} {} | {} | {}",
                    p.line, p.column, p.key_path, p.message, p.help
                )
            })
            .collect()),
    }
}

#[test]
fn store_url_names_sqlite_files_memory_and_postgres() {
    use std::path::PathBuf;
    use switchboard_config::{SqliteLocation, StoreUrl};
    let url = |section: &str| store_of(section).expect("valid").url;
    assert_eq!(
        url("url = \"sqlite:///var/lib/switchboard/store.db\""),
        StoreUrl::Sqlite(SqliteLocation::File(PathBuf::from(
            "/var/lib/switchboard/store.db"
        )))
    );
    // Relative, as store.path is: to the working directory.
    assert_eq!(
        url("url = \"sqlite://data/store.db\""),
        StoreUrl::Sqlite(SqliteLocation::File(PathBuf::from("data/store.db")))
    );
    assert_eq!(url("url = \"memory:\""), StoreUrl::Memory);
    assert_eq!(
        url("url = \"postgres://switchboard@localhost/switchboard\""),
        StoreUrl::Postgres("postgres://switchboard@localhost/switchboard".into())
    );
    // Neither key: the default file.
    let default = store_of("").expect("valid");
    assert_eq!(default.url.spelling(), "sqlite://switchboard.db");
    assert_eq!(default.path_note, None);
}

#[test]
fn store_path_still_works_and_says_how_to_write_it_as_a_url() {
    let store = store_of("path = \"data/old.db\"").expect("store.path is still valid");
    assert_eq!(store.url.spelling(), "sqlite://data/old.db");
    let note = store.path_note.expect("a note");
    assert!(
        note.contains("store.url = \"sqlite://data/old.db\""),
        "{note}"
    );
    let memory = store_of("path = \":memory:\"").expect("valid");
    assert_eq!(memory.url.spelling(), "sqlite://:memory:");
}

#[test]
fn an_unknown_store_scheme_is_a_located_error_naming_the_known_ones() {
    let problems = store_of("messages_per_channel = 10\nurl = \"mysql://db/switchboard\"")
        .expect_err("mysql is not a store");
    assert_eq!(problems.len(), 1, "{problems:?}");
    let problem = &problems[0];
    assert!(problem.starts_with("6:7 store.url |"), "{problem}");
    assert!(problem.contains("mysql"), "{problem}");
    for scheme in switchboard_config::KNOWN_SCHEMES {
        assert!(problem.contains(scheme), "{scheme} missing: {problem}");
    }
    assert!(!problem.contains("unknown key"), "{problem}");
}

#[test]
fn garbage_store_urls_are_located_errors_never_panics() {
    for garbage in [
        "",
        "sqlite:",
        "sqlite://",
        "memory:x",
        "\\u0001",
        "::",
        "sqlite:rel.db",
    ] {
        let problems = store_of(&format!("url = \"{garbage}\"")).expect_err(garbage);
        assert!(
            problems.iter().all(|p| p.contains("store.url")),
            "{garbage}: {problems:?}"
        );
    }
}

#[test]
fn store_path_and_store_url_together_are_refused() {
    let problems = store_of("path = \"a.db\"\nurl = \"sqlite://b.db\"").expect_err("both");
    assert!(
        problems
            .iter()
            .any(|p| p.contains("store.path") && p.contains("both")),
        "{problems:?}"
    );
}

#[test]
fn burst_batching_reads_its_keys_and_garbage_is_refused_with_places() {
    let base = "[agent]\nrunner = \"command\"\ncommand = [\"/bin/agent\"]\n";
    let default = Config::parse(base, "t").unwrap().agent.expect("agent");
    assert_eq!(
        (default.batch, default.batch_max),
        (switchboard_config::BatchMode::Turn, 10),
        "a burst becomes one turn of at most 10 messages unless the operator says otherwise"
    );
    let off = Config::parse(&format!("{base}batch = \"off\"\nbatch_max = 3\n"), "t").unwrap();
    let off = off.agent.expect("agent");
    assert_eq!(
        (off.batch, off.batch_max),
        (switchboard_config::BatchMode::Off, 3)
    );
    for garbage in ["\"sometimes\"", "\"\"", "1", "true"] {
        let found = problems(&format!("{base}batch = {garbage}\n"));
        assert_eq!(found.len(), 1, "{garbage}: {found:#?}");
        assert!(
            found[0].starts_with("4:9 agent.batch"),
            "{garbage}: {found:#?}"
        );
    }
    for garbage in ["0", "101", "-1", "\"ten\"", "[1]"] {
        let found = problems(&format!("{base}batch_max = {garbage}\n"));
        assert_eq!(found.len(), 1, "{garbage}: {found:#?}");
        assert!(
            found[0].starts_with("4:13 agent.batch_max"),
            "{garbage}: {found:#?}"
        );
    }
    // `[agents.NAME]` takes the same keys, checked under its own path.
    let named = problems(
        "[agents]\ndefault = \"a\"\n[agents.a]\nrunner = \"demo\"\nbatch = \"burst\"\nbatch_max = 0\n",
    );
    assert_eq!(named.len(), 2, "{named:#?}");
    assert!(named[0].contains("agents.a.batch"), "{named:#?}");
    assert!(named[1].contains("agents.a.batch_max"), "{named:#?}");
}

#[test]
fn prompt_hooks_are_read_and_garbage_is_refused_with_places() {
    let config = Config::parse(
        "[[hooks.prompt]]\ncommand = [\"./rewrite.sh\", \"--brief\"]\n[[hooks.prompt]]\ncommand = [\"./must.sh\"]\ntimeout_ms = 250\nrequired = true\n",
        "t",
    )
    .unwrap();
    let prompt = &config.hooks.prompt;
    assert_eq!(prompt.len(), 2);
    assert_eq!(prompt[0].command, ["./rewrite.sh", "--brief"]);
    assert_eq!(prompt[0].timeout.as_millis(), 5_000);
    assert!(!prompt[0].required, "a prompt hook is optional unless said");
    assert_eq!(prompt[1].timeout.as_millis(), 250);
    assert!(prompt[1].required);
    let found = problems(
        "[[hooks.prompt]]\ncommand = []\n[[hooks.prompt]]\ncommand = [\"x\"]\ntimeout_ms = 0\n[[hooks.prompt]]\ncommand = [\"y\"]\nrequired = \"yes\"\n",
    );
    assert_eq!(found.len(), 3, "{found:#?}");
    assert!(
        found[0].starts_with("2:11 hooks.prompt[0].command"),
        "{found:#?}"
    );
    assert!(
        found
            .iter()
            .any(|p| p.contains("hooks.prompt[1].timeout_ms")),
        "{found:#?}"
    );
    assert!(found.iter().any(|p| p.contains("required")), "{found:#?}");
    // A prompt hook names no tool: a `tool` key is unknown there.
    let tool = problems("[[hooks.prompt]]\ntool = \"*\"\ncommand = [\"x\"]\n");
    assert_eq!(tool.len(), 1, "{tool:#?}");
    assert!(tool[0].contains("tool"), "{tool:#?}");
}
