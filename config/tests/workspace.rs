//! `[workspace]`, `[sessions.NAME] workspace = "PATH"` and the argument matchers of
//! `[[permissions.rules]]` (`command =`, `path =`): defaults, and every bad value located.

use std::path::PathBuf;
use std::time::Duration;

use switchboard_config::{Config, Known, Snowflake};

const BASE: &str = r#"
[discord]
allowed_channel_ids = ["334455667788990011"]

[entity.sessions]
ops = "334455667788990011"
"#;

fn known() -> Known {
    Known {
        callables: Some(
            [
                "shell.run",
                "fs.read",
                "fs.write",
                "git.status",
                "surface.help",
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
            .map(|p| {
                format!(
                    "{}:{} {} | {} | {}",
                    p.line, p.column, p.key_path, p.message, p.help
                )
            })
            .collect()
    })
}

#[test]
fn the_workspace_is_off_without_its_table() {
    assert!(parse("").unwrap().workspace.is_none());
}

#[test]
fn the_workspace_defaults_are_the_issues() {
    let config = parse("[workspace]\nroot = \"/srv/ws\"\n").unwrap();
    let ws = config.workspace.unwrap();
    assert_eq!(ws.root, PathBuf::from("/srv/ws"));
    assert_eq!(ws.max_output_bytes, 51_200);
    assert_eq!(ws.max_output_lines, 2_000);
    assert_eq!(ws.timeout, Duration::from_secs(120));
    assert_eq!(ws.max_timeout, Duration::from_secs(600));
    assert_eq!(ws.max_processes, 4);
    assert!(!ws.network);
    assert!(ws.env_passthrough.is_empty());
}

#[test]
fn bad_workspace_values_are_located_errors() {
    let errors = parse(
        r#"
[workspace]
root = "/"
timeout_s = 900
max_timeout_s = 60
max_output_bytes = 3
env_passthrough = ["PATH", "not a name"]
"#,
    )
    .unwrap_err();
    let joined = errors.join("\n");
    for key in [
        "workspace.root",
        "workspace.timeout_s",
        "workspace.max_output_bytes",
        "workspace.env_passthrough[1]",
    ] {
        assert!(joined.contains(key), "{key} not reported:\n{joined}");
    }
    // Located at the value's line.
    assert!(joined.contains("9:8 workspace.root"), "{joined}");
    assert!(parse("[workspace]\nroot = \"/x\"\nbogus = 1\n")
        .unwrap_err()
        .join("\n")
        .contains("bogus"));
}

#[test]
fn a_session_binds_to_an_absolute_project_directory() {
    let config = parse(
        "[workspace]\nroot = \"/srv/ws\"\n[sessions.ops]\nworkspace = \"/srv/projects/site\"\n",
    )
    .unwrap();
    let ops: Snowflake = "334455667788990011".parse().unwrap();
    let session = switchboard_config::session_settings(&config.sessions, ops).unwrap();
    assert_eq!(
        session.workspace.as_deref(),
        Some(std::path::Path::new("/srv/projects/site"))
    );
    let relative = parse("[workspace]\nroot = \"/srv/ws\"\n[sessions.ops]\nworkspace = \"site\"\n")
        .unwrap_err()
        .join("\n");
    assert!(relative.contains("sessions.ops.workspace"), "{relative}");
    assert!(relative.contains("absolute"), "{relative}");
    let off = parse("[sessions.ops]\nworkspace = \"/srv/projects/site\"\n")
        .unwrap_err()
        .join("\n");
    assert!(off.contains("the workspace is off"), "{off}");
}

#[test]
fn command_and_path_matchers_are_read_and_checked() {
    let config = parse(
        r#"
[[permissions.rules]]
tool = "shell.run"
command = "git status*"
policy = "allow"

[[permissions.rules]]
tool = "fs.*"
path = "src/**"
policy = "deny"
"#,
    )
    .unwrap();
    let rules = &config.permissions.rules;
    assert_eq!(rules[0].command.as_deref(), Some("git status*"));
    assert_eq!(rules[1].path.as_deref(), Some("src/**"));

    let wrong_tool =
        parse("[[permissions.rules]]\ntool = \"fs.read\"\ncommand = \"ls*\"\npolicy = \"allow\"\n")
            .unwrap_err()
            .join("\n");
    assert!(
        wrong_tool.contains("permissions.rules[0].command"),
        "{wrong_tool}"
    );
    let wrong_path_tool = parse(
        "[[permissions.rules]]\ntool = \"shell.run\"\npath = \"src/*\"\npolicy = \"allow\"\n",
    )
    .unwrap_err()
    .join("\n");
    assert!(
        wrong_path_tool.contains("permissions.rules[0].path"),
        "{wrong_path_tool}"
    );
    let bad_glob = parse(
        "[[permissions.rules]]\ntool = \"shell.run\"\ncommand = \"git [status\"\npolicy = \"allow\"\n",
    )
    .unwrap_err()
    .join("\n");
    assert!(bad_glob.contains("not valid"), "{bad_glob}");
}
