//! The operator commands, run as the real binary.

use std::io::Write;
use std::process::{Command, Output, Stdio};

const EXAMPLE: &str = concat!(env!("CARGO_MANIFEST_DIR"), "/switchboard.example.toml");

fn switchboard(args: &[&str]) -> Output {
    run(args, None, &[])
}

fn run(args: &[&str], stdin: Option<&str>, env: &[(&str, &str)]) -> Output {
    let mut command = Command::new(env!("CARGO_BIN_EXE_switchboard"));
    command
        .args(args)
        .env_remove("SWITCHBOARD_CONFIG")
        .env("RUST_LOG", "warn")
        .current_dir(std::env::temp_dir())
        .stdin(Stdio::piped())
        .stdout(Stdio::piped())
        .stderr(Stdio::piped());
    for (key, value) in env {
        command.env(key, value);
    }
    let mut child = command.spawn().expect("spawn switchboard");
    let mut pipe = child.stdin.take().expect("stdin");
    if let Some(input) = stdin {
        pipe.write_all(input.as_bytes()).expect("write stdin");
    }
    drop(pipe);
    child.wait_with_output().expect("wait for switchboard")
}

fn text(bytes: &[u8]) -> String {
    String::from_utf8_lossy(bytes).into_owned()
}

fn temp_config(name: &str, body: &str) -> std::path::PathBuf {
    let dir = std::env::temp_dir().join(format!("switchboard-cli-{}", std::process::id()));
    std::fs::create_dir_all(&dir).expect("temp dir");
    let path = dir.join(name);
    std::fs::write(&path, body).expect("write config");
    path
}

#[test]
fn check_config_summarises_a_valid_file() {
    let out = switchboard(&["check-config", "--config", EXAMPLE]);
    assert_eq!(out.status.code(), Some(0), "{}", text(&out.stderr));
    let stdout = text(&out.stdout);
    assert!(
        stdout.contains("aliases: 2 users, 2 sessions, 1 role"),
        "{stdout}"
    );
    assert!(
        stdout.contains("allowlist: 0 guilds, 2 channels, DMs denied"),
        "{stdout}"
    );
}

#[test]
fn check_config_prints_three_located_errors_for_three_planted_mistakes() {
    let path = temp_config(
        "planted.toml",
        "[discord]\nallowd_guild_ids = []\nallowed_channel_ids = [\"12\"]\n\n[toolserver]\nbind = \"localhost:80:80\"\n",
    );
    let out = switchboard(&["check-config", "--config", path.to_str().unwrap()]);
    assert_eq!(out.status.code(), Some(2));
    let stderr = text(&out.stderr);
    let shown = path.display().to_string();
    for located in [
        ":2:1: discord.allowd_guild_ids",
        ":3:24: discord.allowed_channel_ids[0]",
        ":6:8: toolserver.bind",
    ] {
        assert!(
            stderr.contains(&format!("{shown}{located}")),
            "{located} missing in:\n{stderr}"
        );
    }
    assert!(stderr.contains("3 problems found"), "{stderr}");
    assert_eq!(stderr.matches("help:").count(), 3, "{stderr}");
}

#[test]
fn config_env_var_names_the_file_and_the_flag_overrides_it() {
    let broken = temp_config("broken.toml", "nonsense = 1\n");
    let out = run(&["check-config"], None, &[("SWITCHBOARD_CONFIG", EXAMPLE)]);
    assert_eq!(out.status.code(), Some(0), "{}", text(&out.stderr));
    let out = run(
        &["check-config", "--config", broken.to_str().unwrap()],
        None,
        &[("SWITCHBOARD_CONFIG", EXAMPLE)],
    );
    assert_eq!(out.status.code(), Some(2));
}

#[test]
fn missing_config_file_exits_2_and_says_how_to_point_at_one() {
    let out = switchboard(&["check-config", "--config", "/nonexistent/sb.toml"]);
    assert_eq!(out.status.code(), Some(2));
    assert!(
        text(&out.stderr).contains("--config"),
        "{}",
        text(&out.stderr)
    );
}

#[test]
fn rewrite_outbound_uses_the_config_aliases() {
    let out = switchboard(&[
        "rewrite",
        "--outbound",
        "--config",
        EXAMPLE,
        "ping @stanley in #release-room. `@Stanley` @everyone",
    ]);
    assert_eq!(out.status.code(), Some(0));
    assert_eq!(
        text(&out.stdout),
        "ping <@123456789012345678> in <#334455667788990022>. `@Stanley` @everyone\n"
    );
}

#[test]
fn rewrite_inbound_reads_standard_input_and_uses_fallback_forms() {
    let out = run(
        &["rewrite", "--inbound", "--config", EXAMPLE],
        Some("<@123456789012345678> in <#334455667788990011>, <@&445566778899001122> <@42>\n"),
        &[],
    );
    assert_eq!(out.status.code(), Some(0));
    assert_eq!(text(&out.stdout), "@Stanley in #ops, @oncall @user_42\n");
}

#[test]
fn rewrite_needs_exactly_one_direction() {
    let out = switchboard(&["rewrite", "--config", EXAMPLE, "x"]);
    assert_eq!(out.status.code(), Some(2));
    let out = switchboard(&[
        "rewrite",
        "--inbound",
        "--outbound",
        "--config",
        EXAMPLE,
        "x",
    ]);
    assert_eq!(out.status.code(), Some(2));
}

#[test]
fn rewrite_refuses_input_that_is_not_utf8() {
    let mut child = Command::new(env!("CARGO_BIN_EXE_switchboard"))
        .args(["rewrite", "--outbound", "--config", EXAMPLE])
        .stdin(Stdio::piped())
        .stdout(Stdio::piped())
        .stderr(Stdio::piped())
        .spawn()
        .expect("spawn");
    child
        .stdin
        .take()
        .expect("stdin")
        .write_all(&[0xff, 0xfe, b'@'])
        .expect("write");
    let out = child.wait_with_output().expect("wait");
    assert_eq!(out.status.code(), Some(2));
    assert!(text(&out.stderr).contains("UTF-8"));
}

#[test]
fn resolve_session_prints_the_channel_id() {
    for reference in ["#ops", "OPS", "<#334455667788990011>", "334455667788990011"] {
        let out = switchboard(&["resolve-session", "--config", EXAMPLE, reference]);
        assert_eq!(out.status.code(), Some(0), "{reference}");
        assert_eq!(text(&out.stdout), "334455667788990011\n");
    }
}

#[test]
fn resolve_session_unknown_exits_4_with_a_suggestion() {
    let out = switchboard(&["resolve-session", "--config", EXAMPLE, "opps"]);
    assert_eq!(out.status.code(), Some(4));
    assert!(text(&out.stdout).is_empty());
    assert_eq!(
        text(&out.stderr).trim(),
        "error: Unknown session 'opps'. Did you mean 'ops'? Expected a channel id, a <#id> mention, or one of: ops, release-room"
    );
}

#[test]
fn unknown_flags_and_commands_are_usage_errors() {
    assert_eq!(
        switchboard(&["check-config", "--bogus"]).status.code(),
        Some(2)
    );
    assert_eq!(switchboard(&["frobnicate"]).status.code(), Some(2));
    assert_eq!(switchboard(&["resolve-session"]).status.code(), Some(2));
}

/// check-config from `cwd`, with `set` in the environment and `unset` removed.
fn check_config_in(
    config: &str,
    cwd: &std::path::Path,
    set: &[(&str, &str)],
    unset: &[&str],
) -> (i32, String) {
    let mut command = Command::new(env!("CARGO_BIN_EXE_switchboard"));
    command
        .args(["check-config", "--config", config])
        .env_remove("SWITCHBOARD_CONFIG")
        .current_dir(cwd)
        .stdin(Stdio::null());
    for name in unset {
        command.env_remove(name);
    }
    command.envs(set.iter().copied());
    let out = command.output().expect("run check-config");
    (
        out.status.code().unwrap_or(-1),
        format!("{}{}", text(&out.stdout), text(&out.stderr)),
    )
}

#[test]
fn the_example_configs_check_clean_where_their_agent_and_tokens_exist() {
    let root = std::path::Path::new(env!("CARGO_MANIFEST_DIR"));
    let tokens = [
        ("DISCORD_TOKEN", "x"),
        ("SWITCHBOARD_OPERATOR_TOKEN", "y"),
        ("OPENAI_API_KEY", "z"),
    ];
    let mut configs = vec![EXAMPLE.to_owned()];
    for entry in std::fs::read_dir(root.join("examples")).expect("examples/") {
        let path = entry.expect("entry").path();
        if path.extension().is_some_and(|e| e == "toml") {
            configs.push(path.display().to_string());
        }
    }
    assert!(configs.len() >= 4, "{configs:?}");
    for config in &configs {
        let (code, output) = check_config_in(config, root, &tokens, &[]);
        assert_eq!(code, 0, "{config}: {output}");
        assert!(!output.contains("warning"), "{config}: {output}");
    }
}

#[test]
fn check_config_warns_about_an_agent_that_cannot_start_and_empty_token_variables() {
    let dir = std::env::temp_dir().join(format!("switchboard-cli-warn-{}", std::process::id()));
    std::fs::create_dir_all(&dir).expect("dir");
    std::fs::write(dir.join("agent.sh"), "#!/bin/sh\necho hi\n").expect("agent");
    let config = dir.join("switchboard.toml");
    std::fs::write(
        &config,
        "[agent]\nrunner = \"command\"\ncommand = [\"./agent.sh\"]\n",
    )
    .expect("config");
    let config = config.display().to_string();
    let (code, output) = check_config_in(
        &config,
        &dir,
        &[("DISCORD_TOKEN", "  ")],
        &["SWITCHBOARD_OPERATOR_TOKEN"],
    );
    assert_eq!(code, 0, "warnings do not fail the check: {output}");
    assert!(output.contains("is not executable: chmod +x"), "{output}");
    assert!(
        output.contains("$DISCORD_TOKEN (discord.token_env) is empty"),
        "{output}"
    );
    assert!(output.contains("$SWITCHBOARD_OPERATOR_TOKEN"), "{output}");

    std::fs::write(
        dir.join("switchboard.toml"),
        "[agent]\nrunner = \"command\"\ncommand = [\"./missing.sh\"]\n",
    )
    .expect("config");
    let (_, output) = check_config_in(&config, &dir, &[("DISCORD_TOKEN", "t")], &[]);
    assert!(output.contains("./missing.sh does not exist"), "{output}");
    let _ = std::fs::remove_dir_all(&dir);
}
