//! `switchboard run`: the store, the tool server and the gateway, started and stopped together.

use std::future::Future;
use std::net::SocketAddr;
use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::Arc;
use std::time::Duration;

use serenity::all::{ClientBuilder, GatewayIntents, HttpBuilder};
use switchboard_config::Config;
use toolserver::surface::{ConnectionState, SurfaceError};
use toolserver::{Core, StartError};

use crate::gateway::{Ingest, StageWatcher};
use crate::rest::{DiscordRest, DISCORD_API};
use crate::store::{Store, StoreError, StoreOptions};
use crate::surface::{Connection, DiscordSurface};

/// Why the service stopped with an error.
#[derive(Debug, thiserror::Error)]
pub enum ServiceError {
    #[error("Discord rejected the bot token ({0}); check the value of the token variable")]
    TokenRejected(String),
    #[error("cannot reach Discord to check the token: {0}")]
    DiscordUnreachable(String),
    #[error(transparent)]
    Store(#[from] StoreError),
    #[error(transparent)]
    ToolServer(#[from] StartError),
    #[error("cannot build the HTTP client: {0}")]
    Http(String),
    #[error("the gateway stopped: {0}")]
    Gateway(String),
    #[error("the tool server stopped: {0}")]
    Serve(std::io::Error),
}

/// The intents switchboard needs.
pub fn intents() -> GatewayIntents {
    GatewayIntents::GUILDS
        | GatewayIntents::GUILD_MEMBERS
        | GatewayIntents::GUILD_MESSAGES
        | GatewayIntents::MESSAGE_CONTENT
        | GatewayIntents::DIRECT_MESSAGES
        | GatewayIntents::GUILD_MESSAGE_REACTIONS
        | GatewayIntents::DIRECT_MESSAGE_REACTIONS
}

/// Runs until `shutdown` resolves (then stops accepting calls, flushes the store, closes the
/// gateway) or something fails. `on_ready` gets the tool server's address once it listens.
pub async fn run(
    config: Config,
    token: String,
    operator_token: Option<String>,
    shutdown: impl Future<Output = ()> + Send + 'static,
    on_ready: impl FnOnce(SocketAddr) + Send,
) -> Result<(), ServiceError> {
    let store_path = config.store.path.clone();
    let options = StoreOptions {
        messages_per_channel: config.store.messages_per_channel,
    };
    let store = tokio::task::spawn_blocking(move || Store::open(&store_path, options))
        .await
        .map_err(|e| ServiceError::Gateway(format!("store task failed: {e}")))??;

    let base = config
        .discord
        .api_base_url
        .clone()
        .unwrap_or_else(|| DISCORD_API.to_owned());
    let rest = DiscordRest::new(&base, &token).map_err(|e| ServiceError::Http(e.to_string()))?;
    let me = rest.current_user().await.map_err(|e| match e {
        SurfaceError::Denied(why) => ServiceError::TokenRejected(why),
        other => ServiceError::DiscordUnreachable(other.to_string()),
    })?;
    let bot_id = Arc::new(AtomicU64::new(
        me.get("id")
            .and_then(|v| v.as_str())
            .and_then(|v| v.parse().ok())
            .unwrap_or(0),
    ));

    let connection = Arc::new(Connection::default());
    connection.set(ConnectionState::Connecting);
    // The bridge's reactions and typing share the surface's HTTP client.
    let agent_rest = rest.clone();
    let surface = Arc::new(DiscordSurface::new(
        store.clone(),
        rest,
        config.aliases.clone(),
        Arc::clone(&connection),
        Arc::clone(&bot_id),
    ));
    let core = Arc::new(Core::new(&config, surface, operator_token)?);
    forget_refused_channels(&store, core.allowlist());
    let listener = tokio::net::TcpListener::bind(config.toolserver.bind)
        .await
        .map_err(|source| StartError::Bind {
            bind: config.toolserver.bind,
            source,
        })?;
    let addr = listener.local_addr().map_err(|source| StartError::Bind {
        bind: config.toolserver.bind,
        source,
    })?;

    let bridge = config.agent.clone().map(|agent| {
        let host = if addr.ip().is_unspecified() {
            std::net::SocketAddr::from(([127, 0, 0, 1], addr.port()))
        } else {
            addr
        };
        crate::bridge::Bridge::new(
            agent,
            Arc::clone(&core),
            agent_rest,
            store.clone(),
            Arc::clone(&bot_id),
            format!("http://{host}"),
        )
    });
    let workflows = bridge
        .as_ref()
        .map(|bridge| crate::workflows::start(&core, &store, bridge, &config.aliases));
    let mut http = HttpBuilder::new(&token);
    if let Some(base) = &config.discord.api_base_url {
        // serenity's ratelimiter ignores the proxy and would talk to discord.com: off here,
        // and our own REST client handles 429.
        http = http.proxy(base.as_str()).ratelimiter_disabled(true);
    }
    let framework_store = store.clone();
    let framework_bridge = bridge.clone();
    let framework_allowlist = Arc::clone(core.allowlist());
    let framework_admins = config.discord.admins.clone();
    let framework = poise::Framework::builder()
        .options(poise::FrameworkOptions {
            commands: crate::commands::all(),
            // Slash commands only: a message mentioning the bot is a conversation for the
            // agent, not a prefix command poise should try to parse.
            prefix_options: poise::PrefixFrameworkOptions {
                mention_as_prefix: false,
                ..Default::default()
            },
            on_error: |error| Box::pin(crate::commands::on_error(error)),
            ..Default::default()
        })
        .setup(move |ctx, _ready, framework| {
            Box::pin(async move {
                if let Err(error) =
                    poise::builtins::register_globally(ctx, &framework.options().commands).await
                {
                    tracing::warn!("could not register slash commands: {error}");
                }
                Ok(crate::commands::Data {
                    store: framework_store,
                    allowlist: framework_allowlist,
                    admins: framework_admins,
                    bridge: framework_bridge,
                })
            })
        })
        .build();
    let builder = ClientBuilder::new_with_http(http.build(), intents())
        .raw_event_handler({
            let ingest = Ingest::new(
                store.clone(),
                config.aliases.clone(),
                Arc::clone(core.allowlist()),
                Arc::clone(&connection),
                Arc::clone(&bot_id),
            );
            let ingest = match bridge {
                Some(bridge) => ingest.with_bridge(bridge),
                None => ingest,
            };
            match &workflows {
                Some((engine, _)) => ingest.with_workflows(Arc::clone(engine)),
                None => ingest,
            }
        })
        .event_handler(StageWatcher {
            connection: Arc::clone(&connection),
        })
        .framework(framework);
    let (shards, mut gateway) = start_gateway(builder).await?;

    let (stop_serving, serving_stopped) = tokio::sync::oneshot::channel::<()>();
    let mut server = tokio::spawn(toolserver::http::serve(core, listener, async {
        let _ = serving_stopped.await;
    }));
    tracing::info!(
        tool_server = %format!("http://{addr}"),
        bot_id = bot_id.load(Ordering::Relaxed),
        "switchboard ready: tool server listening; connecting to the gateway"
    );
    on_ready(addr);

    let outcome = tokio::select! {
        () = shutdown => {
            tracing::info!("shutting down: no new calls, flushing the store, closing the gateway");
            Ok(())
        }
        result = &mut gateway => match result {
            Ok(Ok(())) => Ok(()),
            Ok(Err(serenity::Error::Gateway(serenity::gateway::GatewayError::InvalidAuthentication))) => {
                Err(ServiceError::TokenRejected("the gateway refused to identify".into()))
            }
            Ok(Err(error)) => Err(ServiceError::Gateway(error.to_string())),
            Err(_) => Err(ServiceError::Gateway("the gateway thread stopped".into())),
        },
        result = &mut server => Err(ServiceError::Serve(match result {
            Ok(Ok(())) => std::io::Error::other("stopped unexpectedly"),
            Ok(Err(error)) => error,
            Err(join) => std::io::Error::other(join.to_string()),
        })),
    };
    let _ = stop_serving.send(());
    let _ = tokio::time::timeout(Duration::from_secs(5), server).await;
    shards.shutdown_all().await;
    if let Some((_, deadlines)) = &workflows {
        deadlines.abort();
    }
    connection.set(ConnectionState::Down);
    let flushed = tokio::task::spawn_blocking(move || store.close()).await;
    match flushed {
        Ok(Ok(())) => tracing::info!("store flushed and closed"),
        Ok(Err(error)) => tracing::error!("closing the store: {error}"),
        Err(join) => tracing::error!("closing the store: {join}"),
    }
    outcome
}

/// Drops what the store holds of channels the allowlist refuses (it was narrowed since they
/// were stored): those messages must not sit on disk, readable the day the allowlist widens.
pub fn forget_refused_channels(store: &Store, allowlist: &toolserver::allowlist::Allowlist) {
    for channel in store.channels_with_messages() {
        let allowed = allowlist.allows_cached(channel, |id| {
            store
                .session(id)
                .map(|session| crate::surface::location(&session))
        });
        if !allowed {
            let forgotten = store.forget_channel_messages(channel);
            tracing::info!(%channel, forgotten, "forgot the stored messages of a channel the allowlist refuses");
        }
    }
}

/// Runs the gateway client on its own thread with a single-threaded runtime.
///
/// serenity spawns one task per event for its handlers; on a multi-threaded runtime those tasks
/// run in any order (a later MESSAGE_CREATE can be applied, and start its run, before an
/// earlier one). A current-thread runtime runs them in the order they were spawned, which is
/// gateway order, and every handler applies its event without awaiting.
pub async fn start_gateway(
    builder: ClientBuilder,
) -> Result<
    (
        Arc<serenity::gateway::ShardManager>,
        tokio::sync::oneshot::Receiver<Result<(), serenity::Error>>,
    ),
    ServiceError,
> {
    let (built_tx, built_rx) = tokio::sync::oneshot::channel();
    let (ended_tx, ended_rx) = tokio::sync::oneshot::channel();
    let runtime = tokio::runtime::Builder::new_current_thread()
        .enable_all()
        .build()
        .map_err(|e| ServiceError::Gateway(format!("cannot start the gateway runtime: {e}")))?;
    std::thread::Builder::new()
        .name("gateway".into())
        .spawn(move || {
            runtime.block_on(async move {
                let mut client = match builder.await {
                    Ok(client) => client,
                    Err(error) => {
                        let _ = built_tx.send(Err(error));
                        return;
                    }
                };
                let _ = built_tx.send(Ok(Arc::clone(&client.shard_manager)));
                let _ = ended_tx.send(client.start().await);
            });
        })
        .map_err(|e| ServiceError::Gateway(format!("cannot start the gateway thread: {e}")))?;
    match built_rx.await {
        Ok(Ok(shards)) => Ok((shards, ended_rx)),
        Ok(Err(error)) => Err(ServiceError::Gateway(error.to_string())),
        Err(_) => Err(ServiceError::Gateway("the gateway thread stopped".into())),
    }
}
