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
    secrets: toolserver::Secrets,
    prepare: impl FnOnce(&switchboard::Service),
    on_ready: impl FnOnce(std::net::SocketAddr) + Send,
) -> Result<(), ServiceError> {
    let service = switchboard::build(config, token, secrets).await?;
    prepare(&service);
    switchboard::serve(service, shutdown_signal(), on_ready).await
}

async fn serve(config: Config, token: String, path: std::path::PathBuf) -> ExitCode {
    let secrets = toolserver::Secrets::from_env(&config, env_secret);
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
    let runtime = match tokio::runtime::Builder::new_current_thread()
        .enable_all()
        .build()
    {
        Ok(runtime) => runtime,
        Err(error) => {
            tracing::error!("cannot start the async runtime: {error}");
            return ExitCode::FAILURE;
        }
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
/// The config the playground runs with, for the fake's demo world: the demo world's shared
/// aliases, #ops and #release-room allowlisted, DMs allowed.
pub fn playground_config(api_base_url: &str, bind: &str, store_path: &Path) -> String {
    use demo_world::{OPS, RELEASE_ROOM};
    format!(
        r#"[discord]
allowed_channel_ids = ["{OPS}", "{RELEASE_ROOM}"]
allow_dms = true
api_base_url = "{api_base_url}"

{aliases}
[toolserver]
bind = "{bind}"
console = true

[store]
path = "{}"
"#,
        store_path.display(),
        aliases = demo_world::alias_sections()
    )
}

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
/// `switchboard playground`: a fake Discord with its demo world, and switchboard against it.
/// `extra_config`: TOML appended to the playground's config (an `[agent]`, `[permissions]`,
/// rules, hooks: sections the playground's own config does not have).
pub fn playground(port: u16, extra_config: Option<&Path>) -> ExitCode {
    let extra = match extra_config.map(std::fs::read_to_string).transpose() {
        Ok(extra) => extra.unwrap_or_default(),
        Err(error) => {
            eprintln!("error: cannot read --extra-config: {error}");
            return ExitCode::from(EXIT_USAGE);
        }
    };
    let runtime = match runtime() {
        Ok(runtime) => runtime,
        Err(code) => return code,
    };
    runtime.block_on(async move {
        let fake = match fake_discord::FakeDiscord::start(fake_discord::World::demo()).await {
            Ok(fake) => std::sync::Arc::new(fake),
            Err(error) => {
                tracing::error!("cannot start the fake Discord: {error}");
                return ExitCode::FAILURE;
            }
        };
        let dir: std::path::PathBuf =
            std::env::temp_dir().join(format!("switchboard-playground-{}", std::process::id()));
        if let Err(error) = std::fs::create_dir_all(&dir) {
            tracing::error!("cannot create {}: {error}", dir.display());
            return ExitCode::FAILURE;
        }
        let mut text = playground_config(
            &fake.base_url(),
            &format!("127.0.0.1:{port}"),
            &dir.join("switchboard.db"),
        );
        text.push('\n');
        text.push_str(&extra);
        let config = match Config::parse_with(&text, "playground.toml", &crate::operator::known()) {
            Ok(config) => config,
            Err(report) if extra.is_empty() => {
                tracing::error!("the playground's own config is invalid (a bug):\n{report}");
                return ExitCode::FAILURE;
            }
            Err(report) => {
                eprint!(
                    "the playground's config with --extra-config appended is invalid:\n{report}"
                );
                return ExitCode::from(EXIT_USAGE);
            }
        };
        let operator_token = match toolserver::auth::random_hex(24) {
            Ok(token) => token,
            Err(error) => {
                tracing::error!("cannot draw random bytes for the operator token: {error}");
                return ExitCode::FAILURE;
            }
        };
        let fake_url = fake.base_url();
        let token_for_banner = operator_token.clone();
        let banner = move |addr: std::net::SocketAddr| {
            print_banner(&fake_url, addr, &token_for_banner);
        };
        let compose = std::sync::Arc::new(crate::compose::FakeCompose::new(std::sync::Arc::clone(
            &fake,
        )));
        let result = build_and_serve(
            config,
            "playground-bot-token".to_owned(),
            Some(operator_token).into(),
            |service| {
                service.core().console().set_compose(compose);
            },
            banner,
        )
        .await;
        match std::sync::Arc::try_unwrap(fake) {
            Ok(fake) => fake.shutdown().await,
            // The console still holds it: dropping the last handle stops it.
            Err(fake) => drop(fake),
        }
        let _ = std::fs::remove_dir_all(&dir);
        exit_for(result)
    })
}

#[cfg(feature = "playground")]
fn print_banner(fake_url: &str, addr: std::net::SocketAddr, token: &str) {
    use demo_world::{BOT, OPS, RELEASE_ROOM, STANLEY};
    let tools = tools_command();
    let banner = format!(
        r#"
switchboard playground: switchboard against a fake Discord (demo guild "Lab"), no token needed.
  fake Discord  {fake_url}   (control API under /_fake/)
  tool server   http://{addr}
  console       http://{addr}/   (log in with the SWITCHBOARD_TOKEN below)

In another shell:
  export SWITCHBOARD_URL=http://{addr}
  export SWITCHBOARD_TOKEN={token}

Try:
  {tools} surface.sessions.list --output=text
  {tools} surface.messages.send --session-id=#ops "hello @Stanley, see #release-room"
  {tools} surface.messages.list --session-id=#ops --output=text

Post as a demo user (stanley) in #ops:
  curl -s -X POST {fake_url}/_fake/messages -H 'content-type: application/json' \
    -d '{{"channel_id":"{OPS}","author_id":"{STANLEY}","content":"hi <@{BOT}>, status of <#{RELEASE_ROOM}>?"}}'

See what the bot sent:  curl -s {fake_url}/_fake/requests
Ctrl-C stops everything.
"#
    );
    // The banner is this command's output, for the person who started it.
    println!("{banner}");
}
