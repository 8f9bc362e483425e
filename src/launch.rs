//! `switchboard run` and `switchboard playground`: the long-running commands.

use std::path::Path;
use std::process::ExitCode;

use switchboard::ServiceError;
use switchboard_config::{Config, ConfigError};

use crate::operator::{config_path, EXIT_USAGE};

/// Exit code when Discord refuses the bot token.
const EXIT_TOKEN_REJECTED: u8 = 3;

/// Resolves on SIGINT or SIGTERM.
async fn shutdown_signal() {
    let interrupt = tokio::signal::ctrl_c();
    #[cfg(unix)]
    {
        let mut terminate =
            match tokio::signal::unix::signal(tokio::signal::unix::SignalKind::terminate()) {
                Ok(signal) => signal,
                Err(error) => {
                    tracing::warn!("cannot listen for SIGTERM: {error}");
                    let _ = interrupt.await;
                    return;
                }
            };
        tokio::select! {
            _ = interrupt => {}
            _ = terminate.recv() => {}
        }
    }
    #[cfg(not(unix))]
    {
        let _ = interrupt.await;
    }
}

fn runtime() -> Result<tokio::runtime::Runtime, ExitCode> {
    tokio::runtime::Runtime::new().map_err(|error| {
        tracing::error!("cannot start the async runtime: {error}");
        ExitCode::FAILURE
    })
}

fn env_secret(name: &str) -> Option<String> {
    std::env::var(name).ok().filter(|v| !v.trim().is_empty())
}

/// Builds every part, then serves until SIGINT/SIGTERM.
async fn build_and_serve(
    config: Config,
    token: String,
    secrets: switchboard_engine::Secrets,
    prepare: impl FnOnce(&switchboard::Service),
    on_ready: impl FnOnce(std::net::SocketAddr) + Send,
) -> Result<(), ServiceError> {
    let service = switchboard::build(config, token, secrets).await?;
    prepare(&service);
    switchboard::serve(service, shutdown_signal(), on_ready).await
}

async fn serve(config: Config, token: String, path: std::path::PathBuf) -> ExitCode {
    let secrets = switchboard_engine::Secrets::from_env(&config, env_secret);
    let served = async {
        let service = switchboard::build(config, token, secrets)
            .await?
            .reload_from(path);
        switchboard::serve(service, shutdown_signal(), |_| {}).await
    };
    exit_for(served.await)
}

fn exit_for(result: Result<(), ServiceError>) -> ExitCode {
    match result {
        Ok(()) => ExitCode::SUCCESS,
        Err(error) => {
            tracing::error!("{error}");
            if error.is_token_rejected() {
                ExitCode::from(EXIT_TOKEN_REJECTED)
            } else if error.is_usage() {
                ExitCode::from(EXIT_USAGE)
            } else {
                ExitCode::FAILURE
            }
        }
    }
}

/// `switchboard run`: the service, with the config file and the bot token from the environment.
pub fn run(flag: Option<&Path>) -> ExitCode {
    let path = config_path(flag);
    let config = match Config::load_with(&path, &crate::operator::known()) {
        Ok(config) => config,
        Err(ConfigError::Invalid(report)) => {
            eprint!("{report}");
            return ExitCode::from(EXIT_USAGE);
        }
        Err(error) => {
            eprintln!("error: {error}");
            eprintln!(
                "hint: with no Discord token, try the offline playground: switchboard playground"
            );
            return ExitCode::from(EXIT_USAGE);
        }
    };
    let Some(token) = env_secret(&config.discord.token_env) else {
        eprintln!(
            "error: no bot token: set the environment variable {} (in the environment or in .env). To try switchboard without Discord: switchboard playground",
            config.discord.token_env
        );
        return ExitCode::from(EXIT_USAGE);
    };
    match runtime() {
        Ok(runtime) => runtime.block_on(serve(config, token, path)),
        Err(code) => code,
    }
}

/// The runtime a one-shot command runs on, or the exit code after saying on standard error
/// why there is none.
pub fn command_runtime(
    mut builder: tokio::runtime::Builder,
) -> Result<tokio::runtime::Runtime, ExitCode> {
    builder.enable_all().build().map_err(|error| {
        eprintln!("error: cannot start the runtime: {error}");
        ExitCode::FAILURE
    })
}

/// `switchboard mcp`: MCP on standard input and output, forwarding every request to the
/// switchboard at `SWITCHBOARD_URL` with `SWITCHBOARD_TOKEN`. Exits 0 when the client closes
/// the stream, 2 when the environment is unusable.
pub fn mcp() -> ExitCode {
    let remote = match switchboard_mcp::stdio::Remote::from_env(&|name| std::env::var(name).ok()) {
        Ok(remote) => remote,
        Err(error) => {
            tracing::error!("{error}");
            return ExitCode::from(EXIT_USAGE);
        }
    };
    let runtime = match crate::launch::command_runtime(tokio::runtime::Builder::new_current_thread())
    {
        Ok(runtime) => runtime,
        Err(code) => return code,
    };
    match runtime.block_on(switchboard_mcp::stdio::run(remote)) {
        Ok(()) => ExitCode::SUCCESS,
        Err(error) => {
            tracing::error!("{error}");
            ExitCode::FAILURE
        }
    }
}

#[cfg(feature = "playground")]
/// The playground agent's scope: the default one and the workspace (`run <command>`).
const PLAYGROUND_SCOPE: &str = "tool_scope = [\"surface.help\", \"surface.sessions.*\", \"surface.messages.*\", \"surface.reactions.*\", \"surface.threads.*\", \"surface.pins.*\", \"workflow.*\", \"attachment.*\", \"fs.*\", \"shell.*\", \"git.*\", \"workspace.undo\"]\n";

#[cfg(feature = "playground")]
/// The playground's `[agent]` section: the built-in demo agent, or an OpenAI-compatible model
/// when `model` names one (the API key from `OPENAI_API_KEY` when that is set).
pub fn playground_agent_section(model: Option<(&str, &str)>) -> String {
    match model {
        None => format!("[agent]\nrunner = \"demo\"\ntimeout_s = 300\n{PLAYGROUND_SCOPE}"),
        Some((url, name)) => {
            let key = if env_secret("OPENAI_API_KEY").is_some() {
                "api_key_env = \"OPENAI_API_KEY\"\n"
            } else {
                ""
            };
            format!(
                "[agent]\nrunner = \"openai\"\nbase_url = {url}\nmodel = {name}\n{key}{PLAYGROUND_SCOPE}",
                url = toml_string(url),
                name = toml_string(name),
            )
        }
    }
}

#[cfg(feature = "playground")]
/// `text` as a TOML basic string.
fn toml_string(text: &str) -> String {
    let mut quoted = String::with_capacity(text.len() + 2);
    quoted.push('"');
    for c in text.chars() {
        match c {
            '"' => quoted.push_str("\\\""),
            '\\' => quoted.push_str("\\\\"),
            c if c.is_control() => quoted.push_str(&format!("\\u{:04X}", c as u32)),
            c => quoted.push(c),
        }
    }
    quoted.push('"');
    quoted
}

#[cfg(feature = "playground")]
/// The config the playground runs with, for the fake's demo world: the demo world's shared
/// aliases, #ops and #release-room allowlisted, DMs allowed, the agent `agent` (an `[agent]`
/// section), and rules that ask an approver (`@Stanley` or `@Tomas`, never the one whose
/// message started the run) before a run posts outside its own session.
pub fn playground_config(api_base_url: &str, bind: &str, store_path: &Path, agent: &str) -> String {
    use demo_world::{OPS, RELEASE_ROOM, STANLEY_DM};
    format!(
        r##"[discord]
allowed_channel_ids = ["{OPS}", "{RELEASE_ROOM}"]
allow_dms = true
api_base_url = "{api_base_url}"

{aliases}
[toolserver]
bind = "{bind}"
console = true

[store]
url = {store}

# Each channel's workspace: `run <command>` asks an approver, then runs it in the sandbox.
[workspace]
root = {workspaces}

{agent}
{permissions}"##,
        store = toml_string(&format!("sqlite://{}", store_path.display())),
        workspaces = toml_string(
            &store_path
                .parent()
                .unwrap_or(Path::new("."))
                .join("workspaces")
                .display()
                .to_string()
        ),
        aliases = demo_world::alias_sections(),
        permissions =
            PLAYGROUND_PERMISSIONS.replace("\"STANLEY_DM\"", &format!("\"{STANLEY_DM}\"")),
    )
}

#[cfg(feature = "playground")]
/// The playground's permissions: data, kept as a TOML file of its own.
const PLAYGROUND_PERMISSIONS: &str = include_str!("playground-permissions.toml");

#[cfg(feature = "playground")]
/// How to run the `tools` CLI from here: the binary beside this one, else through cargo.
fn tools_command() -> String {
    let beside = std::env::current_exe()
        .ok()
        .and_then(|exe| exe.parent().map(|dir| dir.join("tools")))
        .filter(|tools| tools.is_file());
    match beside {
        Some(path) => path.display().to_string(),
        None => "cargo run -q --release -p tools --".to_owned(),
    }
}

#[cfg(feature = "playground")]
/// Where the playground keeps its store: `--data DIR` (kept), else a temporary directory
/// removed at exit.
struct DataDir {
    path: std::path::PathBuf,
    temporary: bool,
}

#[cfg(feature = "playground")]
impl Drop for DataDir {
    fn drop(&mut self) {
        if self.temporary {
            let _ = std::fs::remove_dir_all(&self.path);
        }
    }
}

#[cfg(feature = "playground")]
/// The playground's config: the built-in one, the built-in one with `--extra-config FILE` laid
/// over it, or `--config FILE` — the last two pointed at the fake (its Discord URL, the tool
/// server's port, the store in the data directory, the console; the demo agent when the file
/// has no `[agent]`). `--agent-url`/`--model` replace the agent's runner either way.
fn playground_settings(
    file: Option<&Path>,
    args: &crate::cli::PlaygroundArgs,
    fake_url: &str,
    store: &Path,
) -> Result<Config, String> {
    let model = args.agent_url.as_deref().zip(args.model.as_deref());
    let bind = format!("127.0.0.1:{}", args.port);
    let agent = playground_agent_section(model);
    let known = crate::operator::known();
    let builtin_text = playground_config(fake_url, &bind, store, &agent);
    let builtin =
        Config::parse_with(&builtin_text, "playground.toml", &known).map_err(|report| {
            format!(
                "the playground's own config is invalid (check --agent-url and --model):\n{report}"
            )
        })?;
    let mut config = if let (Some(extra), Some(file)) = (&args.extra_config, file) {
        return Err(format!(
            "--extra-config {} is laid over the playground's own config, and --config {} replaces that config: give one (put the extra settings in {})",
            extra.display(),
            file.display(),
            file.display()
        ));
    } else if let Some(extra) = &args.extra_config {
        let layered = layered(&builtin_text, extra)?;
        Config::parse_with(&layered, "", &known).map_err(|report| {
            unlocated(
                report,
                &format!("{} (laid over the playground's config)", extra.display()),
            )
        })?
    } else if let Some(file) = file {
        match Config::load_with(file, &known) {
            Ok(config) => config,
            Err(ConfigError::Invalid(report)) => return Err(report.to_string()),
            Err(error) => return Err(error.to_string()),
        }
    } else {
        return Ok(builtin);
    };
    config.discord.api_base_url = builtin.discord.api_base_url;
    config.toolserver.bind = builtin.toolserver.bind;
    config.store.url = builtin.store.url;
    config.store.path_note = None;
    config.toolserver.console = true;
    match (&mut config.agent, builtin.agent) {
        (Some(mine), Some(built)) if model.is_some() => {
            // `--model` drives every agent the file names.
            for named in &mut config.agents.agents {
                named.config.runner = built.runner.clone();
            }
            mine.runner = built.runner;
        }
        (None, built) => {
            config.agent = built;
            config.agents = builtin.agents;
        }
        _ => {}
    }
    Ok(config)
}

#[cfg(feature = "playground")]
/// The playground's config text with `file` laid over it: tables merge key by key, a key the
/// file sets replaces the playground's value, and its arrays of tables (`[[permissions.rules]]`,
/// `[[hooks.before]]`, `[[toolserver.tokens]]`) come after the playground's, so its rules win
/// where both match (the last match wins). The fake's URL, the port, the store and the console
/// are not the file's to change: they are set again after (`playground_settings`).
fn layered(builtin: &str, file: &Path) -> Result<String, String> {
    let text = switchboard_config::Config::read_source(file).map_err(|error| match error {
        ConfigError::Invalid(report) => report.to_string(),
        error => error.to_string(),
    })?;
    let mine: toml::Table = text
        .parse()
        .map_err(|error| format!("{} is not TOML: {error}", file.display()))?;
    let mut config: toml::Table = builtin
        .parse()
        .map_err(|error| format!("the playground's own config is not TOML (a bug): {error}"))?;
    lay_over(&mut config, mine);
    toml::to_string(&config).map_err(|error| {
        format!(
            "cannot lay {} over the playground's config: {error}",
            file.display()
        )
    })
}

#[cfg(feature = "playground")]
fn lay_over(base: &mut toml::Table, over: toml::Table) {
    fn tables(values: &[toml::Value]) -> bool {
        !values.is_empty() && values.iter().all(toml::Value::is_table)
    }
    for (key, value) in over {
        match (base.get_mut(&key), value) {
            (Some(toml::Value::Table(inner)), toml::Value::Table(over)) => lay_over(inner, over),
            (Some(toml::Value::Array(entries)), toml::Value::Array(more))
                if tables(entries) && tables(&more) =>
            {
                entries.extend(more);
            }
            (_, value) => {
                base.insert(key, value);
            }
        }
    }
}

#[cfg(feature = "playground")]
/// A report about the laid-over config, named after the user's file: its lines are those of
/// the merged text nobody sees, so each problem is told by its key path alone.
fn unlocated(mut report: switchboard_config::Report, file: &str) -> String {
    report.file = file.to_owned();
    for problem in &mut report.problems {
        problem.line = 0;
        problem.column = 0;
    }
    report.to_string()
}

#[cfg(feature = "playground")]
/// `switchboard playground`: a fake Discord with its demo world, and switchboard against it,
/// with the demo agent (or the model `--agent-url`/`--model` name) answering mentions.
pub fn playground(file: Option<&Path>, args: &crate::cli::PlaygroundArgs) -> ExitCode {
    let runtime = match runtime() {
        Ok(runtime) => runtime,
        Err(code) => return code,
    };
    let data = match &args.data {
        Some(dir) => DataDir {
            path: dir.clone(),
            temporary: false,
        },
        None => DataDir {
            path: std::env::temp_dir()
                .join(format!("switchboard-playground-{}", std::process::id())),
            temporary: true,
        },
    };
    if let Err(error) = std::fs::create_dir_all(&data.path) {
        eprintln!("error: cannot create {}: {error}", data.path.display());
        return ExitCode::from(EXIT_USAGE);
    }
    runtime.block_on(async move {
        let fake = match fake_discord::FakeDiscord::start(fake_discord::World::demo()).await {
            Ok(fake) => std::sync::Arc::new(fake),
            Err(error) => {
                tracing::error!("cannot start the fake Discord: {error}");
                return ExitCode::FAILURE;
            }
        };
        let config = match playground_settings(
            file,
            args,
            &fake.base_url(),
            &data.path.join("switchboard.db"),
        ) {
            Ok(config) => config,
            Err(message) => {
                eprintln!("error: {message}");
                if let Ok(fake) = std::sync::Arc::try_unwrap(fake) {
                    fake.shutdown().await;
                }
                return ExitCode::from(EXIT_USAGE);
            }
        };
        let operator_token = match switchboard_engine::auth::random_hex(24) {
            Ok(token) => token,
            Err(error) => {
                tracing::error!("cannot draw random bytes for the operator token: {error}");
                return ExitCode::FAILURE;
            }
        };
        let banner =
            crate::banner::Banner::new(&config, &fake.base_url(), &operator_token, tools_command());
        if let Some(warning) = banner.nothing_allowed() {
            tracing::warn!("{warning}");
        }
        let banner = move |addr: std::net::SocketAddr| {
            // The banner is this command's output, for the person who started it.
            println!("{}", banner.render(addr));
        };
        let compose = std::sync::Arc::new(crate::compose::FakeCompose::new(std::sync::Arc::clone(
            &fake,
        )));
        // Named tokens a `--config` file declares read their values from the environment,
        // as `switchboard run` does; the operator token is the playground's own.
        let secrets = switchboard_engine::Secrets {
            operator: Some(operator_token),
            ..switchboard_engine::Secrets::from_env(&config, env_secret)
        };
        let result = build_and_serve(
            config,
            "playground-bot-token".to_owned(),
            secrets,
            |service| {
                service.front().console().set_compose(compose);
            },
            banner,
        )
        .await;
        match std::sync::Arc::try_unwrap(fake) {
            Ok(fake) => fake.shutdown().await,
            // The console still holds it: dropping the last handle stops it.
            Err(fake) => drop(fake),
        }
        exit_for(result)
    })
}

#[cfg(all(test, feature = "playground"))]
mod tests {
    use super::*;

    #[test]
    fn the_playground_config_parses_and_its_dm_rule_names_stanleys_dm() {
        let text = playground_config(
            "http://127.0.0.1:1",
            "127.0.0.1:0",
            Path::new("/tmp/playground/switchboard.db"),
            &playground_agent_section(None),
        );
        assert!(!text.contains("STANLEY_DM"), "{text}");
        assert!(
            text.contains(&format!("session = \"{}\"", demo_world::STANLEY_DM)),
            "{text}"
        );
        let config = switchboard_config::Config::parse(&text, "playground")
            .unwrap_or_else(|report| panic!("{report:?}\n{text}"));
        assert_eq!(config.permissions.rules.len(), 8, "{text}");
    }
}
