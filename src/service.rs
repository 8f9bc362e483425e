//! Build every part, then serve until shutdown.

use std::future::Future;
use std::net::SocketAddr;
use std::path::PathBuf;
use std::sync::Arc;
use std::time::Duration;

use agent::Bridge;
use bot::service::{DiscordError, Gateway, GatewaySetup};
use bot::surface::{Connection, DiscordSurface};
use switchboard_config::Config;
use switchboard_engine::live::SharedAliases;
use switchboard_engine::runs::Runs;
use switchboard_engine::surface::ConnectionState;
use switchboard_engine::workflow::WorkflowEngine;
use switchboard_engine::{Core, StartError};
use switchboard_store::Store;

/// Which part could not be built. Each message starts with the part's name.
#[derive(Debug, thiserror::Error)]
pub enum BuildError {
    /// The store could not be opened.
    #[error("store: {0}")]
    Store(#[from] crate::store::OpenError),
    /// Discord refused the token, could not be reached, or the gateway could not start.
    #[error("discord: {0}")]
    Discord(#[from] DiscordError),
    /// The tool server refused its config (no operator token, ...).
    #[error("tool server: {0}")]
    ToolServer(#[from] StartError),
    /// The kept workflows could not be read.
    #[error("workflows: {0}")]
    Workflows(String),
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

    /// Whether the config or the environment is at fault (the binary exits 2 for it): the
    /// config, the store, or the bot's settings in the developer portal (privileged intents).
    pub fn is_usage(&self) -> bool {
        match self {
            ServiceError::Build(BuildError::ToolServer(_) | BuildError::Store(_)) => true,
            ServiceError::Build(BuildError::Discord(error)) | ServiceError::Gateway(error) => {
                error.is_setup()
            }
            _ => false,
        }
    }
}

/// Every part, built and connected, not yet serving.
pub struct Service {
    core: Arc<Core>,
    /// The HTTP fronts over the core (the API's settings, the console's state).
    front: switchboard_http::Front,
    store: Store,
    connection: Arc<Connection>,
    listener: tokio::net::TcpListener,
    addr: SocketAddr,
    mcp: switchboard_mcp::http::Options,
    gateway: Gateway,
    workflows: Option<(Arc<WorkflowEngine>, tokio::task::JoinHandle<()>)>,
    /// The aliases the bot's parts render with (swapped by a reload).
    aliases: SharedAliases,
    bridge: Option<Bridge>,
    /// The schedules the scheduler loop fires (with an agent only).
    scheduling: Option<Arc<switchboard_engine::schedules::Scheduling>>,
    /// The file a reload reads; `None`: no live reload.
    config_path: Option<PathBuf>,
    /// This node in its cluster (its heartbeat).
    node: Arc<crate::cluster::NodeFacts>,
    /// With `cluster.shards = "lease"`: the loop that leases this node's shards.
    lease: Option<bot::lease::LeaseLoop>,
}

impl Service {
    /// Reloads the config from `path` (the file this service was built from) on
    /// `POST /v1/admin/reload`, SIGHUP, and when the file changes. Without it the config is
    /// fixed for the service's life.
    #[must_use]
    pub fn reload_from(mut self, path: PathBuf) -> Service {
        self.config_path = Some(crate::reload::absolute(&path));
        self
    }

    /// Where the tool server listens.
    pub fn addr(&self) -> SocketAddr {
        self.addr
    }

    /// The tool server's core (for in-process callers).
    pub fn core(&self) -> &Arc<Core> {
        &self.core
    }

    /// The HTTP fronts (the console's state: plug the playground's compose box in here).
    pub fn front(&self) -> &switchboard_http::Front {
        &self.front
    }
}

/// The first argument that makes the `switchboard` binary the sandbox's helper (what
/// `switchboard-sandbox-exec` is): the first program inside the workspace's sandbox, which
/// applies the limits and Landlock and runs the command. Not a command for people.
pub const SANDBOX_EXEC: &str = "__sandbox-exec";

/// Probes the workspace's sandbox, with this binary as its helper (`__sandbox-exec`) and the
/// service's own files (the store, `.env`) hidden from commands. Never falls back: a failed
/// probe leaves `shell.*` and `git.*` answering `unavailable`, and `/health` says why.
pub async fn probe_sandbox(
    workspace: &switchboard_config::WorkspaceConfig,
    config: &Config,
) -> switchboard_engine::workspaces::SandboxState {
    let helper = std::env::current_exe().ok().map(|exe| {
        let mut helper = switchboard_engine::workspaces::SandboxHelper::new(exe);
        helper.args = vec![SANDBOX_EXEC.to_owned()];
        helper
    });
    // Only what exists can be covered.
    let mut hidden = vec![PathBuf::from(".env")];
    if let switchboard_store::StoreUrl::Sqlite(switchboard_store::SqliteLocation::File(store)) =
        &config.store.url
    {
        let store = store.display();
        hidden.extend([
            PathBuf::from(store.to_string()),
            PathBuf::from(format!("{store}-wal")),
            PathBuf::from(format!("{store}-shm")),
        ]);
    }
    let hidden = hidden
        .into_iter()
        .filter(|path| path.exists())
        .filter_map(|path| std::path::absolute(path).ok())
        .collect();
    switchboard_engine::workspaces::probe(workspace, helper, hidden).await
}

/// Builds every part from `config`: the store, the Discord client (the token is checked), the
/// surface, the tool server's core and listener, the agent and workflows when `[agent]` is
/// configured, and the gateway client.
pub async fn build(
    config: Config,
    token: String,
    secrets: switchboard_engine::Secrets,
) -> Result<Service, BuildError> {
    let store = crate::store::open(&config).await?;
    let backend = Arc::clone(store.backend());

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
    let aliases = Arc::clone(surface.aliases());
    let overrides = backend
        .session_scopes()
        .await
        .map_err(|error| BuildError::Store(crate::store::OpenError::Store(error)))?
        .into_iter()
        .map(|kept| (kept.session_id, kept.scope))
        .collect();
    let core = Arc::new(
        Core::new(
            &config,
            Arc::clone(&surface) as _,
            secrets,
            switchboard_callables::registry(),
        )?
        .with_store(Arc::clone(&backend), overrides),
    );
    // Idempotency keys of `POST /v1/call` are kept in the store: a retry after a restart (or
    // on another node) still answers the first call's answer.
    core.set_idempotency(Arc::clone(&backend) as _);
    // The agent's notes (`memory.*`) too.
    core.set_memory(Arc::clone(&backend) as _);
    if let Some(workspace) = &config.workspace {
        core.install_sandbox(probe_sandbox(workspace, &config).await);
    }
    // The live feed and the metrics hear of messages, Discord's answers and the gateway.
    surface.observe(core.observers());
    connection.observe(core.observers());
    {
        let store = store.clone();
        core.metrics().on_scrape(move |metrics| {
            metrics.store_size(store.message_count(), store.sessions().len());
            let queue = store.backend().queue_stats();
            metrics.store_queue(queue.depth, queue.waits, queue.waited);
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
    let mcp = switchboard_mcp::http::Options {
        idle_timeout: config.toolserver.idle_timeout,
    };

    let bridge = config.agent.clone().map(|agent| {
        // Runs reach the tool server on loopback even when it binds every interface.
        let host = if addr.ip().is_unspecified() {
            SocketAddr::from(([127, 0, 0, 1], addr.port()))
        } else {
            addr
        };
        Bridge::with_answers(
            agent,
            Arc::clone(&core),
            format!("http://{host}"),
            Arc::clone(&backend) as _,
        )
        .with_memory(Arc::clone(&backend) as _)
        // Runs are rows of the store's queue: a session's runs one at a time, in arrival
        // order, on whichever node claims them; a restarted node finds its queued ones.
        .with_run_queue(
            Arc::clone(&backend) as _,
            config.cluster.node_id.clone(),
            backend.shared(),
        )
    });
    if let Some(bridge) = &bridge {
        bridge.keep_usage_in(Arc::clone(&backend) as _);
        bridge.keep_bindings_in(Arc::clone(&backend) as _);
        core.set_usage(Arc::clone(&backend) as _);
        if backend.shared() {
            bridge.start_runs();
        } else {
            bridge.start_runs_alone();
        }
    }
    let runs: Option<Arc<dyn Runs>> = bridge
        .clone()
        .map(|bridge| Arc::new(bridge) as Arc<dyn Runs>);
    if let Some(runs) = &runs {
        core.set_runs(Arc::clone(runs));
    }
    // Schedules fire agent runs: they are served when there is an agent.
    let scheduling = bridge.as_ref().map(|_| {
        let scheduling = Arc::new(switchboard_engine::schedules::Scheduling::new(Arc::clone(
            &backend,
        )
            as _));
        core.set_scheduling(Arc::clone(&scheduling));
        scheduling
    });
    // The health panel shows the one REST client's rate-limit headroom.
    let front = switchboard_http::Front::new(Arc::clone(&core));
    front.console().set_headroom(
        Arc::new(discord.rest.clone()) as Arc<dyn switchboard_console::health::HeadroomSource>
    );
    let workflows = match runs.as_ref() {
        Some(runs) => Some(
            switchboard_engine::workflow_runs::start(
                &core,
                &store,
                Arc::clone(&backend) as _,
                Arc::clone(runs),
                Arc::clone(&aliases),
                Arc::clone(&discord.bot_id),
            )
            .await
            .map_err(|e| BuildError::Workflows(e.to_string()))?,
        ),
        None => None,
    };
    let lease_mode = config.cluster.shards == switchboard_config::ShardSelection::Lease;
    let plan = bot::shards::plan(
        config.discord.shard_count,
        &config.cluster.shards,
        &discord.rest,
    )
    .await?;
    let max_concurrency = plan.max_concurrency;
    let shard_states = bot::shards::ShardStates::default();
    let node = Arc::new(crate::cluster::NodeFacts {
        node_id: config.cluster.node_id.clone(),
        store: Arc::clone(&backend),
        shards: shard_states.clone(),
        lease: config.cluster.lease,
        leases_shards: lease_mode,
        store_trouble: std::sync::Mutex::new(None),
        rest: discord.rest.clone(),
    });
    core.set_node(Arc::clone(&node) as Arc<dyn switchboard_engine::cluster::NodeView>);
    let gateway = bot::service::start(GatewaySetup {
        token,
        store: store.clone(),
        allowlist: Arc::clone(core.allowlist()),
        connection: Arc::clone(&connection),
        bot_id: Arc::clone(&discord.bot_id),
        runs,
        workflows: workflows.as_ref().map(|(engine, _)| Arc::clone(engine)),
        core: Arc::clone(&core),
        aliases: Arc::clone(&aliases),
        rest: discord.rest,
        plan,
        states: shard_states,
        config,
    })
    .await?;
    let lease = lease_mode.then(|| bot::lease::LeaseLoop {
        store: Arc::clone(&backend) as _,
        node_id: node.node_id.clone(),
        lease: node.lease,
        control: gateway.control.clone(),
        max_concurrency,
    });
    Ok(Service {
        core,
        front,
        store,
        connection,
        listener,
        addr,
        mcp,
        gateway,
        workflows,
        aliases,
        bridge,
        scheduling,
        config_path: None,
        node,
        lease,
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
        front,
        store,
        connection,
        listener,
        addr,
        mcp,
        gateway,
        workflows,
        aliases,
        bridge,
        scheduling,
        config_path,
        node,
        lease,
    } = service;
    let Gateway {
        control: shards,
        resharding,
        ended: mut gateway_ended,
    } = gateway;
    let heartbeat = crate::cluster::heartbeat(Arc::clone(&node), format!("http://{addr}"));
    let leasing = lease.map(bot::lease::run);
    let (stop_serving, serving_stopped) = tokio::sync::oneshot::channel::<()>();
    let bot_id = core
        .surface()
        .bot_user_id()
        .map_or(0, switchboard_config::Snowflake::get);
    // Requests an earlier run left waiting can never be granted now: mark them expired (and
    // redraw their messages) without holding up the start.
    {
        let core = Arc::clone(&core);
        tokio::spawn(async move {
            let count = core
                .approvals()
                .expire_leftovers(core.surface().as_ref())
                .await;
            if count > 0 {
                tracing::info!(
                    count,
                    "approval requests left pending by the last run are expired"
                );
            }
            // Several nodes: a request whose node died before its timeout is expired by
            // whichever node settles it first in the store (once cluster-wide).
            if core.approvals().shares_store() {
                let core = Arc::downgrade(&core);
                let mut ticks = tokio::time::interval(switchboard_engine::approvals::OVERDUE_GRACE);
                loop {
                    ticks.tick().await;
                    let Some(core) = core.upgrade() else { return };
                    let now = switchboard_engine::clock::now_ms();
                    let count = core
                        .approvals()
                        .expire_overdue(core.surface().as_ref(), now)
                        .await;
                    if count > 0 {
                        tracing::info!(count, "approval requests whose node is gone are expired");
                    }
                }
            }
        });
    }
    // The first prompts after a restart find the recent sessions' token counts.
    if let Some(bridge) = &bridge {
        bridge.warm_recent_sessions();
    }
    let scheduler = match (scheduling, bridge.clone()) {
        (Some(scheduling), Some(bridge)) => {
            let connection = Arc::clone(&connection);
            Some(
                crate::scheduler::Scheduler {
                    core: Arc::clone(&core),
                    scheduling,
                    bridge,
                    ready: Box::new(move || {
                        matches!(
                            connection.get(),
                            ConnectionState::Ready | ConnectionState::Backfilling
                        )
                    }),
                }
                .start(),
            )
        }
        _ => None,
    };
    let reloads = match config_path {
        Some(path) => {
            let reloader = Arc::new(crate::reload::ConfigReloader::new(
                path,
                Arc::clone(&core),
                store.clone(),
                aliases,
                bridge.clone(),
            ));
            core.set_reloader(Arc::clone(&reloader) as Arc<dyn switchboard_engine::live::Reloader>);
            #[cfg(unix)]
            let hangups = crate::reload::on_sighup(Arc::clone(&reloader));
            #[cfg(not(unix))]
            let hangups = None;
            [hangups, crate::reload::on_file_change(reloader)]
        }
        None => [None, None],
    };
    // The MCP endpoint is served beside the API, by the same connection loop.
    let mcp = switchboard_mcp::http::router(Arc::clone(&core), mcp);
    let mut server = tokio::spawn(switchboard_http::serve_front(front, mcp, listener, async {
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
    // Runs end (or give their leases back) while the gateway and the tool server still work.
    if let Some(bridge) = &bridge {
        bridge.stop_runs(None).await;
    }
    resharding.abort();
    heartbeat.abort();
    if let Some(leasing) = leasing {
        leasing.abort();
        // Given back at once, so another node need not wait for the leases to end.
        let held: Vec<u32> = node
            .shards
            .snapshot()
            .into_iter()
            .map(|(id, _)| id)
            .collect();
        bot::lease::release_all(node.store.as_ref(), &node.node_id, &held).await;
    }
    for task in reloads.into_iter().flatten().chain(scheduler) {
        task.abort();
    }
    // The gateway closes before the tool server does, so what it says as it closes (its last
    // `gateway.state`) is still kept in the store and streamed like every other event.
    shards.shutdown_all().await;
    connection.set(ConnectionState::Down);
    let _ = stop_serving.send(());
    let _ = tokio::time::timeout(Duration::from_secs(5), server).await;
    if let Some((_, deadlines)) = &workflows {
        deadlines.abort();
    }
    let flushed = tokio::task::spawn_blocking(move || store.close()).await;
    match flushed {
        Ok(Ok(())) => tracing::info!("store flushed and closed"),
        Ok(Err(error)) => tracing::error!("closing the store: {error}"),
        Err(join) => tracing::error!("closing the store: {join}"),
    }
    outcome
}
