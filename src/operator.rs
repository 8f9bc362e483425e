//! Operator commands that test a config before going live.

use std::io::{Read, Write};
use std::path::{Path, PathBuf};
use std::process::ExitCode;

use entity::{AliasKind, Mapper, NoNames};
use switchboard_config::{Config, ConfigError, Known, CONFIG_PATH_ENV};

use crate::cli::RewriteArgs;

/// Exit code for a config that is missing or invalid, and for bad usage.
pub const EXIT_USAGE: u8 = 2;
/// Exit code for a reference that names nothing.
const EXIT_NOT_FOUND: u8 = 4;

pub fn config_path(flag: Option<&Path>) -> PathBuf {
    let env_value = std::env::var(CONFIG_PATH_ENV).ok();
    Config::resolve_path(flag, env_value.as_deref())
}

/// What every command checks a config against: the callables this build registers.
pub fn known() -> Known {
    Known {
        callables: Some(switchboard_callables::callable_ids()),
        ..Known::default()
    }
}

/// Loads the config, or prints why not and gives the exit code to use.
pub(crate) fn load(flag: Option<&Path>) -> Result<Config, ExitCode> {
    let path = config_path(flag);
    Config::load_with(&path, &known()).map_err(|error| {
        match &error {
            ConfigError::Read { .. } | ConfigError::Unusable { .. } => {
                eprintln!("error: {error}");
            }
            ConfigError::Invalid(report) => eprint!("{report}"),
        }
        ExitCode::from(EXIT_USAGE)
    })
}

fn plural(count: usize, one: &str, many: &str) -> String {
    format!("{count} {}", if count == 1 { one } else { many })
}

/// Categories the store of an earlier run knows, so check-config can catch a category id in
/// the channel list; `Err` says why they could not be read.
fn known_channels(config: &Config) -> Result<Known, String> {
    let switchboard_config::StoreUrl::Sqlite(switchboard_config::SqliteLocation::File(path)) =
        &config.store.url
    else {
        return Err(format!(
            "the store ({}) is not a SQLite file check-config can read",
            config.store.url.spelling()
        ));
    };
    let path = &path.to_string_lossy().into_owned();
    if !Path::new(path).is_file() {
        return Err(format!(
            "no store at {path} yet (it is written by the first run)"
        ));
    }
    let sessions =
        switchboard_store_sqlite::peek_sessions(path).map_err(|error| error.to_string())?;
    Ok(Known {
        callables: Some(switchboard_callables::callable_ids()),
        categories: sessions
            .into_iter()
            .filter(|s| s.kind == switchboard_records::SessionKind::Category)
            .map(|s| (s.id, format!("#{}", s.name)))
            .collect(),
    })
}

pub fn check_config(flag: Option<&Path>) -> ExitCode {
    let path = config_path(flag);
    let config = match load(flag) {
        Ok(config) => config,
        Err(code) => return code,
    };
    let channels_note = match known_channels(&config) {
        Ok(known) => match Config::load_with(&path, &known) {
            Ok(_) => None,
            Err(ConfigError::Invalid(report)) => {
                eprint!("{report}");
                return ExitCode::from(EXIT_USAGE);
            }
            Err(error) => {
                eprintln!("error: {error}");
                return ExitCode::from(EXIT_USAGE);
            }
        },
        Err(why) => Some(why),
    };
    let a = &config.aliases;
    let d = &config.discord;
    println!("{}: ok", path.display());
    println!(
        "  aliases: {}, {}, {}",
        plural(a.len(AliasKind::User), "user", "users"),
        plural(a.len(AliasKind::Session), "session", "sessions"),
        plural(a.len(AliasKind::Role), "role", "roles"),
    );
    let categories = if d.allowed_category_ids.is_empty() {
        String::new()
    } else {
        format!(
            ", {}",
            plural(d.allowed_category_ids.len(), "category", "categories")
        )
    };
    println!(
        "  allowlist: {}, {}{categories}, DMs {}",
        plural(d.allowed_guild_ids.len(), "guild", "guilds"),
        plural(d.allowed_channel_ids.len(), "channel", "channels"),
        if d.allow_dms { "allowed" } else { "denied" },
    );
    if !d.admins.is_empty() {
        println!(
            "  admins: {}",
            plural(d.admins.len(), "user or role", "users or roles")
        );
    }
    if d.allowed_guild_ids.is_empty()
        && d.allowed_channel_ids.is_empty()
        && d.allowed_category_ids.is_empty()
        && !d.allow_dms
    {
        println!("  note: the allowlist is empty, so every channel is denied");
    }
    println!(
        "  tool server: {} (operator token from ${})",
        config.toolserver.bind, config.toolserver.operator_token_env
    );
    println!("  bot token from ${}", d.token_env);
    if let Some(url) = &d.api_base_url {
        println!("  Discord API: {url}");
    }
    println!("  store: {}", config.store.url.spelling());
    if let Some(note) = &config.store.path_note {
        println!("  note: {note}");
    }
    if let Some(why) = channels_note {
        println!("  note: channel kinds not checked against the store: {why}");
    }
    for warning in environment_warnings(&config, |name| std::env::var_os(name)) {
        println!("  warning: {warning}");
    }
    if let Some(workspace) = &config.workspace {
        println!(
            "  workspace: {} (network {})",
            workspace.root.display(),
            if workspace.network { "on" } else { "off" }
        );
        match sandbox_check(workspace, &config) {
            Ok(()) => println!("  sandbox: ready"),
            Err(why) => println!(
                "  warning: the workspace's sandbox is unavailable, so shell.* and git.* will answer unavailable (nothing runs unsandboxed): {why}"
            ),
        }
    }
    ExitCode::SUCCESS
}

/// Probes the workspace's sandbox as the service will at start.
fn sandbox_check(
    workspace: &switchboard_config::WorkspaceConfig,
    config: &switchboard_config::Config,
) -> Result<(), String> {
    let runtime = tokio::runtime::Builder::new_current_thread()
        .enable_all()
        .build()
        .map_err(|e| format!("cannot start the probe: {e}"))?;
    match runtime.block_on(switchboard::probe_sandbox(workspace, config)) {
        switchboard_engine::workspaces::SandboxState::Ready(_) => Ok(()),
        switchboard_engine::workspaces::SandboxState::Unavailable { reason, install } => {
            Err(format!("{reason}. {install}"))
        }
    }
}

/// What the config names that this machine lacks: an empty or unset token variable, an agent
/// command that is missing or not executable. Warnings, not errors: the file is valid, and the
/// environment of `switchboard run` may differ from this shell's.
pub fn environment_warnings(
    config: &Config,
    env: impl Fn(&str) -> Option<std::ffi::OsString>,
) -> Vec<String> {
    let mut warnings = Vec::new();
    let empty =
        |name: &str| env(name).is_none_or(|value| value.to_string_lossy().trim().is_empty());
    if empty(&config.discord.token_env) {
        warnings.push(format!(
            "${} (discord.token_env) is empty or unset: switchboard run will not start without the bot token (put it in the environment or in .env)",
            config.discord.token_env
        ));
    }
    if !config.toolserver.insecure_no_auth && empty(&config.toolserver.operator_token_env) {
        warnings.push(format!(
            "${} (toolserver.operator_token_env) is empty or unset: switchboard run will not start without the operator token",
            config.toolserver.operator_token_env
        ));
    }
    let Some(agent) = &config.agent else {
        return warnings;
    };
    match &agent.runner {
        switchboard_config::Runner::Command { program, cwd, .. } => {
            if let Some(problem) = command_problem(program, cwd, agent, &env) {
                warnings.push(problem);
            }
        }
        switchboard_config::Runner::OpenAi(model) => {
            if let Some(name) = &model.api_key_env {
                if empty(name) {
                    warnings.push(format!(
                        "${name} (agent.api_key_env) is empty or unset: every model call will fail"
                    ));
                }
            }
        }
        switchboard_config::Runner::Demo => {}
    }
    warnings
}

/// Why `agent.command` cannot start, as far as can be told from here.
fn command_problem(
    program: &str,
    cwd: &Path,
    agent: &switchboard_config::AgentConfig,
    env: &impl Fn(&str) -> Option<std::ffi::OsString>,
) -> Option<String> {
    if !cwd.is_dir() {
        return Some(format!(
            "agent.cwd {} is not a directory: the agent cannot start",
            cwd.display()
        ));
    }
    let candidates: Vec<std::path::PathBuf> = if program.contains('/') {
        // Relative paths are looked up from the agent's working directory.
        vec![cwd.join(program)]
    } else {
        // Without PATH passed through, the agent's lookup path is the C library's default.
        let path = if agent.env_passthrough.iter().any(|n| n == "PATH") {
            env("PATH").map_or_else(String::new, |p| p.to_string_lossy().into_owned())
        } else {
            "/bin:/usr/bin".to_owned()
        };
        path.split(':')
            .filter(|dir| !dir.is_empty())
            .map(|dir| Path::new(dir).join(program))
            .collect()
    };
    let Some(found) = candidates.iter().find(|c| c.is_file()) else {
        return Some(if program.contains('/') {
            format!(
                "agent.command {program} does not exist (looked for {})",
                candidates[0].display()
            )
        } else {
            format!("agent.command {program} is not on the agent's PATH (pass PATH through with agent.env_passthrough, or give a path)")
        });
    };
    if !is_executable(found) {
        return Some(format!(
            "agent.command {} is not executable: chmod +x {}",
            found.display(),
            found.display()
        ));
    }
    None
}

#[cfg(unix)]
fn is_executable(path: &Path) -> bool {
    use std::os::unix::fs::PermissionsExt;
    std::fs::metadata(path).is_ok_and(|m| m.permissions().mode() & 0o111 != 0)
}

#[cfg(not(unix))]
fn is_executable(path: &Path) -> bool {
    path.is_file()
}

pub fn rewrite(flag: Option<&Path>, args: &RewriteArgs) -> ExitCode {
    let config = match load(flag) {
        Ok(config) => config,
        Err(code) => return code,
    };
    let (text, from_stdin) = match &args.text {
        Some(text) => (text.clone(), false),
        None => {
            let mut buffer = String::new();
            if let Err(error) = std::io::stdin().read_to_string(&mut buffer) {
                eprintln!("error: cannot read standard input as UTF-8 text: {error}");
                return ExitCode::from(EXIT_USAGE);
            }
            (buffer, true)
        }
    };
    let mapper = Mapper::new(&config.aliases, &NoNames);
    let rewritten = if args.direction.outbound {
        mapper.outbound(&text)
    } else {
        mapper.inbound(&text)
    };
    let mut stdout = std::io::stdout().lock();
    let written = stdout
        .write_all(rewritten.as_bytes())
        .and_then(|()| {
            if from_stdin {
                Ok(())
            } else {
                stdout.write_all(b"\n")
            }
        })
        .and_then(|()| stdout.flush());
    match written {
        Ok(()) => ExitCode::SUCCESS,
        Err(error) if error.kind() == std::io::ErrorKind::BrokenPipe => ExitCode::SUCCESS,
        Err(error) => {
            eprintln!("error: cannot write output: {error}");
            ExitCode::FAILURE
        }
    }
}

pub fn resolve_session(flag: Option<&Path>, reference: &str) -> ExitCode {
    let config = match load(flag) {
        Ok(config) => config,
        Err(code) => return code,
    };
    match Mapper::new(&config.aliases, &NoNames).resolve_session(reference) {
        Ok(id) => {
            println!("{id}");
            ExitCode::SUCCESS
        }
        Err(error) => {
            eprintln!("error: {error}");
            ExitCode::from(EXIT_NOT_FOUND)
        }
    }
}
