//! Build every part, then serve until shutdown.

use std::future::Future;
use std::net::SocketAddr;
use std::sync::Arc;
use std::time::Duration;

use agent::Bridge;
use bot::service::{DiscordError, Gateway, GatewaySetup};
use bot::store::{Store, StoreError, StoreOptions};
use bot::surface::{Connection, DiscordSurface};
use switchboard_config::Config;
use toolserver::governance::Ledger;
use toolserver::runs::Runs;
use toolserver::surface::ConnectionState;
use toolserver::workflow::WorkflowEngine;
use toolserver::{Core, StartError};

/// Which part could not be built. Each message starts with the part's name.
#[derive(Debug, thiserror::Error)]
pub enum BuildError {
    /// The store could not be opened.
    #[error("store: {0}")]
    Store(#[from] StoreError),
    /// The store's opening task failed.
    #[error("store: the task opening it failed: {0}")]
    StoreTask(String),
    /// Discord refused the token, could not be reached, or the gateway could not start.
    #[error("discord: {0}")]
    Discord(#[from] DiscordError),
    /// The tool server refused its config (no operator token, ...).
    #[error("tool server: {0}")]
    ToolServer(#[from] StartError),
}

/// Why the service stopped with an error.
#[derive(Debug, thiserror::Error)]
pub enum ServiceError {
    /// A part could not be built.
    #[error(transparent)]
    Build(#[from] BuildError),
    /// The gateway stopped (or Discord refused the token at identify).
    #[error("discord: {0}")]
    Gateway(DiscordError),
    /// The tool server stopped.
    #[error("tool server: it stopped: {0}")]
    Serve(std::io::Error),
}

impl ServiceError {
    /// Whether Discord refused the bot token (the binary exits 3 for it).
    pub fn is_token_rejected(&self) -> bool {
        matches!(
            self,
            ServiceError::Build(BuildError::Discord(DiscordError::TokenRejected(_)))
                | ServiceError::Gateway(DiscordError::TokenRejected(_))
        )
    }

    /// Whether the config or the environment is at fault (the binary exits 2 for it).
    pub fn is_usage(&self) -> bool {
        matches!(
            self,
            ServiceError::Build(BuildError::ToolServer(_) | BuildError::Store(_))
        )
    }
}

/// Every part, built and connected, not yet serving.
pub struct Service {
    core: Arc<Core>,
    store: Store,
    connection: Arc<Connection>,
    listener: tokio::net::TcpListener,
    addr: SocketAddr,
    gateway: Gateway,
    workflows: Option<(Arc<WorkflowEngine>, tokio::task::JoinHandle<()>)>,
}

impl Service {
    /// Where the tool server listens.
    pub fn addr(&self) -> SocketAddr {
        self.addr
    }

    /// The tool server's core (for in-process callers).
    pub fn core(&self) -> &Arc<Core> {
        &self.core
    }
}

/// Builds every part from `config`: the store, the Discord client (the token is checked), the
/// surface, the tool server's core and listener, the agent and workflows when `[agent]` is
/// configured, and the gateway client.
pub async fn build(
    config: Config,
    token: String,
    secrets: toolserver::Secrets,
) -> Result<Service, BuildError> {
    let store_path = config.store.path.clone();
    let options = StoreOptions {
        messages_per_channel: config.store.messages_per_channel,
        audit_retention: config.audit.retention,
    };
    let store = tokio::task::spawn_blocking(move || Store::open(&store_path, options))
        .await
        .map_err(|e| BuildError::StoreTask(e.to_string()))??;

    let discord = bot::service::connect(&config, &token).await?;
    let connection = Arc::new(Connection::default());
    connection.set(ConnectionState::Connecting);
    let surface = Arc::new(DiscordSurface::new(
        store.clone(),
        discord.rest.clone(),
        config.aliases.clone(),
        Arc::clone(&connection),
        Arc::clone(&discord.bot_id),
    ));
    let overrides = store.scope_overrides_at_open();
    let core = Arc::new(
        Core::new(&config, Arc::clone(&surface) as _, secrets)?
            .with_ledger(Arc::new(store.clone()) as Arc<dyn Ledger>, overrides),
    );
    // The live feed and the metrics hear of messages, Discord's answers and the gateway.
    surface.observe(core.observers());
    connection.observe(core.observers());
    {
        let store = store.clone();
        core.metrics().on_scrape(move |metrics| {
            metrics.store_size(store.message_count(), store.sessions().len())
        });
    }
    bot::service::forget_refused_channels(&store, core.allowlist());

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

    let runs: Option<Arc<dyn Runs>> = config.agent.clone().map(|agent| {
        // Runs reach the tool server on loopback even when it binds every interface.
        let host = if addr.ip().is_unspecified() {
            SocketAddr::from(([127, 0, 0, 1], addr.port()))
        } else {
            addr
        };
        Arc::new(Bridge::new(
            agent,
            Arc::clone(&core),
            format!("http://{host}"),
        )) as Arc<dyn Runs>
    });
    let workflows = runs.as_ref().map(|runs| {
        bot::workflows::start(
            &core,
            &store,
            Arc::clone(runs),
            &config.aliases,
            Arc::clone(&discord.bot_id),
        )
    });
    let gateway = bot::service::start(GatewaySetup {
        token,
        store: store.clone(),
        allowlist: Arc::clone(core.allowlist()),
        connection: Arc::clone(&connection),
        bot_id: Arc::clone(&discord.bot_id),
        runs,
        workflows: workflows.as_ref().map(|(engine, _)| Arc::clone(engine)),
        core: Arc::clone(&core),
        rest: discord.rest,
        config,
    })
    .await?;
    Ok(Service {
        core,
        store,
        connection,
        listener,
        addr,
        gateway,
        workflows,
    })
}

/// Serves until `shutdown` resolves (then stops accepting calls, flushes the store, closes the
/// gateway) or a part fails. `on_ready` gets the tool server's address once it listens.
pub async fn serve(
    service: Service,
    shutdown: impl Future<Output = ()> + Send + 'static,
    on_ready: impl FnOnce(SocketAddr) + Send,
) -> Result<(), ServiceError> {
    let Service {
        core,
        store,
        connection,
        listener,
        addr,
        gateway,
        workflows,
    } = service;
    let Gateway {
        shards,
        ended: mut gateway_ended,
    } = gateway;
    let (stop_serving, serving_stopped) = tokio::sync::oneshot::channel::<()>();
    let bot_id = core
        .surface()
        .bot_user_id()
        .map_or(0, switchboard_config::Snowflake::get);
    // Requests an earlier run left waiting can never be granted now: mark them expired (and
    // redraw their messages) without holding up the start.
    let leftovers = store.pending_approvals_at_open();
    if !leftovers.is_empty() {
        let core = Arc::clone(&core);
        tokio::spawn(async move {
            let count = leftovers.len();
            core.approvals()
                .expire_leftovers(core.surface().as_ref(), leftovers)
                .await;
            tracing::info!(
                count,
                "approval requests left pending by the last run are expired"
            );
        });
    }
    let mut server = tokio::spawn(toolserver::http::serve(core, listener, async {
        let _ = serving_stopped.await;
    }));
    tracing::info!(
        tool_server = %format!("http://{addr}"),
        bot_id,
        "switchboard ready: tool server listening; connecting to the gateway"
    );
    on_ready(addr);
    let outcome = tokio::select! {
        () = shutdown => {
            tracing::info!("shutting down: no new calls, flushing the store, closing the gateway");
            Ok(())
        }
        ended = &mut gateway_ended => Gateway::outcome(ended).map_err(ServiceError::Gateway),
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
