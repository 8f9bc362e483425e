//! The Discord side's building blocks for the service the binary wires together: checking the
//! bot token, the gateway client (ingest, slash commands, stage tracking) on its own thread,
//! and keeping refused channels out of the store.

use std::sync::atomic::AtomicU64;
use std::sync::Arc;

use serenity::all::{ClientBuilder, GatewayIntents, HttpBuilder};
use switchboard_config::Config;
use switchboard_engine::allowlist::Allowlist;
use switchboard_engine::runs::Runs;
use switchboard_engine::surface::{ConnectionState, SurfaceError};
use switchboard_engine::workflow::WorkflowEngine;

use crate::backfill::BackfillOptions;
use crate::gateway::{Ingest, StageWatcher};
use crate::rest::{DiscordRest, LimiterOptions, DISCORD_API};
use crate::shards::{ShardControl, ShardPlan, ShardStates};
use crate::surface::Connection;
use switchboard_store::Store;

/// Why the Discord side could not start or stopped.
#[derive(Debug, thiserror::Error)]
pub enum DiscordError {
    /// Discord refused the token (REST 401 or gateway close 4004).
    #[error("Discord rejected the bot token ({0}); check the value of the token variable")]
    TokenRejected(String),
    /// Discord could not be reached to check the token.
    #[error("cannot reach Discord to check the token: {0}")]
    Unreachable(String),
    /// The HTTP client could not be built.
    #[error("cannot build the HTTP client: {0}")]
    Http(String),
    /// The gateway client failed to start or stopped.
    #[error("the gateway stopped: {0}")]
    Gateway(String),
    /// Discord refused privileged intents the bot has not been granted (gateway close 4014).
    #[error("Discord refused the gateway intents switchboard needs (close 4014, disallowed intents): in the Discord developer portal, open this application's Bot page and enable the privileged gateway intents Message Content Intent and Server Members Intent, then start switchboard again")]
    IntentsDisallowed,
    /// Discord does not know an intent the bot asked for (gateway close 4013).
    #[error("Discord refused the gateway intents switchboard asked for as invalid (close 4013, intents {0}): this build asks for intents Discord does not know; upgrade switchboard, or report it if it is the newest")]
    IntentsInvalid(u64),
    /// `cluster.shards` names shards the bot does not have.
    #[error("{0}")]
    ShardsMisconfigured(String),
}

impl DiscordError {
    /// Whether the operator must change something outside switchboard's config file for it to
    /// start (the binary exits 2 for it, as for a bad config).
    pub fn is_setup(&self) -> bool {
        matches!(
            self,
            DiscordError::IntentsDisallowed | DiscordError::ShardsMisconfigured(_)
        )
    }
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

/// A REST client whose token Discord accepted, and the bot's own id.
pub struct Connected {
    /// The one REST client.
    pub rest: DiscordRest,
    /// The bot's user id (the gateway's READY confirms it).
    pub bot_id: Arc<AtomicU64>,
}

/// Builds the REST client and asks Discord who the token belongs to.
pub async fn connect(config: &Config, token: &str) -> Result<Connected, DiscordError> {
    let base = config
        .discord
        .api_base_url
        .clone()
        .unwrap_or_else(|| DISCORD_API.to_owned());
    let options = LimiterOptions::with_invalid_percent(config.discord.invalid_request_percent);
    let rest = DiscordRest::with_options(&base, token, options)
        .map_err(|e| DiscordError::Http(e.to_string()))?;
    let me = rest.current_user().await.map_err(|e| match e {
        SurfaceError::Denied(why) => DiscordError::TokenRejected(why),
        other => DiscordError::Unreachable(other.to_string()),
    })?;
    let bot_id = me
        .get("id")
        .and_then(|v| v.as_str())
        .and_then(|v| v.parse().ok())
        .unwrap_or(0);
    Ok(Connected {
        rest,
        bot_id: Arc::new(AtomicU64::new(bot_id)),
    })
}

/// What the gateway client feeds and answers.
pub struct GatewaySetup {
    /// The bot token.
    pub token: String,
    /// The validated config.
    pub config: Config,
    /// Where events are stored.
    pub store: Store,
    /// The allowlist the tool server applies, applied at ingest too.
    pub allowlist: Arc<Allowlist>,
    /// The gateway's state, for `/health`.
    pub connection: Arc<Connection>,
    /// The bot's user id, set from READY.
    pub bot_id: Arc<AtomicU64>,
    /// The agent, when one is configured.
    pub runs: Option<Arc<dyn Runs>>,
    /// The workflows waiting for messages, when an agent is configured.
    pub workflows: Option<Arc<WorkflowEngine>>,
    /// The tool server's core: `/tools` and approval buttons act on its governance.
    pub core: Arc<switchboard_engine::Core>,
    /// The aliases ingest renders text with (the surface's, swapped by a reload).
    pub aliases: switchboard_engine::live::SharedAliases,
    /// The one REST client (its rate limiter shared with the surface's): registers the slash
    /// commands, answers approval clicks and fetches the gap after a fresh identify.
    pub rest: DiscordRest,
    /// The shards to run ([`crate::shards::plan`]).
    pub plan: ShardPlan,
    /// Each running shard's state, for `/health`.
    pub states: ShardStates,
}

/// A running gateway client: its shards (to shut them down) and how it ended.
pub struct Gateway {
    /// Starts and stops single shards, and shuts them all down.
    pub control: ShardControl,
    /// Handles close 4011 while the client runs.
    pub resharding: tokio::task::JoinHandle<()>,
    /// Resolves when the client stops.
    pub ended: tokio::sync::oneshot::Receiver<Result<(), serenity::Error>>,
}

impl Gateway {
    /// Maps how the client ended onto [`DiscordError`]; `Ok` for a clean stop.
    pub fn outcome(
        ended: Result<Result<(), serenity::Error>, tokio::sync::oneshot::error::RecvError>,
    ) -> Result<(), DiscordError> {
        match ended {
            Ok(Ok(())) => Ok(()),
            Ok(Err(serenity::Error::Gateway(
                serenity::gateway::GatewayError::InvalidAuthentication,
            ))) => Err(DiscordError::TokenRejected(
                "the gateway refused to identify".into(),
            )),
            Ok(Err(serenity::Error::Gateway(
                serenity::gateway::GatewayError::DisallowedGatewayIntents,
            ))) => Err(DiscordError::IntentsDisallowed),
            Ok(Err(serenity::Error::Gateway(
                serenity::gateway::GatewayError::InvalidGatewayIntents,
            ))) => Err(DiscordError::IntentsInvalid(intents().bits())),
            Ok(Err(error)) => Err(DiscordError::Gateway(error.to_string())),
            Err(_) => Err(DiscordError::Gateway("the gateway thread stopped".into())),
        }
    }
}

/// Starts the gateway client (ingest, slash commands, stage tracking) on its own thread.
pub async fn start(setup: GatewaySetup) -> Result<Gateway, DiscordError> {
    let GatewaySetup {
        token,
        config,
        store,
        allowlist,
        connection,
        bot_id,
        runs,
        workflows,
        core,
        aliases,
        rest,
        plan,
        states,
    } = setup;
    connection.set(ConnectionState::Connecting);
    // That one request counts against the bot's global limit like every other: it takes a
    // slot of the REST client's, held until the client is built (the request answered).
    let gateway_request = rest.hold_global_slot().await.map_err(|error| {
        DiscordError::Gateway(format!(
            "no room in the global rate limit to start: {error}"
        ))
    })?;
    let interactions = crate::commands::Interactions::new(crate::commands::Data {
        store: store.clone(),
        allowlist: Arc::clone(&allowlist),
        runs: runs.clone(),
        core: Arc::clone(&core),
        rest: rest.clone(),
    });
    let mut ingest = Ingest::new(
        store,
        entity::Aliases::new(),
        allowlist,
        Arc::clone(&connection),
        bot_id,
    )
    .with_backfill(
        rest.clone(),
        BackfillOptions {
            max_messages: config.store.backfill_max_messages,
            max_age: config.store.backfill_max_age,
        },
    )
    .sharing_aliases(aliases)
    .with_observers(core.observers());
    if let Some(runs) = runs {
        ingest = ingest.with_runs(runs);
    }
    if let Some(engine) = workflows {
        ingest = ingest.with_workflows(engine);
    }
    let ingest = Arc::new(ingest);
    let handlers = Arc::new(Handlers {
        stage: StageWatcher::new(connection),
        interactions,
        states: states.clone(),
    });
    // A relaunch (a new shard count) builds a fresh client with the same handlers.
    let api_base = config.discord.api_base_url.clone();
    let build = move || {
        let mut http = HttpBuilder::new(&token);
        if let Some(base) = &api_base {
            // serenity's ratelimiter ignores the proxy and would talk to discord.com: off
            // here. serenity's client makes one request, `GET /gateway` when it starts;
            // everything else, interaction answers included, is [`DiscordRest`].
            http = http.proxy(base.as_str()).ratelimiter_disabled(true);
        }
        Some(
            ClientBuilder::new_with_http(http.build(), intents())
                .raw_event_handler(SharedIngest(Arc::clone(&ingest)))
                .event_handler_arc(Arc::clone(&handlers)),
        )
    };
    for id in &plan.initial {
        states.starting(*id);
    }
    tracing::info!(
        total = plan.total,
        shards = ?plan.initial,
        max_concurrency = plan.max_concurrency,
        "starting the gateway's shards"
    );
    if plan.selection == switchboard_config::ShardSelection::Lease {
        // Leased shards come and go one at a time: each runs in a client of its own, so
        // giving one back drops that client instead of asking serenity to stop a runner.
        drop(gateway_request);
        let (control, ended) = client_per_shard(build, plan.total, states, Some(rest.clone()));
        let resharding = crate::shards::on_sharding_required(control.clone(), rest, plan.selection);
        return Ok(Gateway {
            control,
            resharding,
            ended,
        });
    }
    let (control, ended) =
        one_client(build, plan.total, &plan.initial, states, rest.clone()).await?;
    drop(gateway_request);
    let resharding = crate::shards::on_sharding_required(control.clone(), rest, plan.selection);
    Ok(Gateway {
        control,
        resharding,
        ended,
    })
}

/// Shard control over one gateway client (on its own thread and runtime) running `ids`
/// (ascending) of `total` — with none, the first shard started —, built by `build`; a new
/// shard count retires it and starts a fresh one (its `GET /gateway` counted in `rest`'s
/// global limit). The receiver hears how the newest client ended.
pub async fn one_client(
    build: impl FnMut() -> Option<ClientBuilder> + Send + 'static,
    total: u32,
    ids: &[u32],
    states: ShardStates,
    rest: DiscordRest,
) -> Result<
    (
        ShardControl,
        tokio::sync::oneshot::Receiver<Result<(), serenity::Error>>,
    ),
    DiscordError,
> {
    let (first_tx, first_rx) = tokio::sync::oneshot::channel();
    let deferred = ids.is_empty().then_some(first_rx);
    let (relaunch_tx, relaunch_rx) = tokio::sync::mpsc::channel(1);
    let (shards, ended) =
        start_gateway_relaunching(Box::new(build), total, ids, deferred, Some(relaunch_rx)).await?;
    let mut control =
        ShardControl::new(shards, total, states).relaunching_through(relaunch_tx, rest);
    if ids.is_empty() {
        control = control.starting_client_with(first_tx);
    }
    Ok((control, ended))
}

/// Shard control where each shard runs in a gateway client of its own (on its own thread and
/// runtime), built by `build` (`None`: no more can be built), out of `total`; with `rest`,
/// each client's `GET /gateway` takes a slot of the bot's global limit. The receiver hears of
/// the first client that ends with an error (a refused token or intents).
pub fn client_per_shard(
    build: impl FnMut() -> Option<ClientBuilder> + Send + 'static,
    total: u32,
    states: ShardStates,
    rest: Option<DiscordRest>,
) -> (
    ShardControl,
    tokio::sync::oneshot::Receiver<Result<(), serenity::Error>>,
) {
    let build = Arc::new(std::sync::Mutex::new(build));
    let spawn: crate::shards::SpawnClient = Arc::new(move |total, id| {
        let build = Arc::clone(&build);
        let rest = rest.clone();
        Box::pin(async move {
            let hold = match &rest {
                Some(rest) => Some(rest.hold_global_slot().await.map_err(|error| {
                    DiscordError::Gateway(format!(
                        "no room in the global rate limit to start shard {id}: {error}"
                    ))
                })?),
                None => None,
            };
            let builder = (build
                .lock()
                .unwrap_or_else(std::sync::PoisonError::into_inner))()
            .ok_or_else(|| DiscordError::Gateway("no client to start".into()))?;
            let started = client_thread(builder, total, vec![id], None).await;
            drop(hold);
            started
        })
    });
    ShardControl::own_clients(spawn, total, states)
}

/// The ingest handler, shared by every client a relaunch builds.
struct SharedIngest(Arc<Ingest>);

#[async_trait::async_trait]
impl serenity::prelude::RawEventHandler for SharedIngest {
    async fn raw_event(
        &self,
        context: serenity::prelude::Context,
        event: serenity::model::event::Event,
    ) {
        self.0.raw_event(context, event).await;
    }
}

/// The gateway's typed handlers as one: serenity clones every event once per handler it
/// has and spawns a task for each, on the gateway's thread, before the next event.
struct Handlers {
    stage: StageWatcher,
    interactions: crate::commands::Interactions,
    states: ShardStates,
}

#[async_trait::async_trait]
impl serenity::prelude::EventHandler for Handlers {
    async fn shard_stage_update(
        &self,
        context: serenity::prelude::Context,
        update: serenity::gateway::ShardStageUpdateEvent,
    ) {
        self.states.stage(update.shard_id.0, update.new);
        self.stage.shard_stage_update(context, update).await;
    }

    async fn ready(
        &self,
        context: serenity::prelude::Context,
        ready: serenity::model::gateway::Ready,
    ) {
        self.interactions.ready(context, ready).await;
    }

    async fn interaction_create(
        &self,
        context: serenity::prelude::Context,
        interaction: serenity::model::application::Interaction,
    ) {
        self.interactions
            .interaction_create(context, interaction)
            .await;
    }
}

/// Drops what the store holds of channels the allowlist refuses (it was narrowed since they
/// were stored): those messages must not sit on disk, readable the day the allowlist widens.
pub fn forget_refused_channels(store: &Store, allowlist: &Allowlist) {
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
    DiscordError,
> {
    start_gateway_sharded(builder, 1, &[0], None).await
}

/// [`start_gateway`], running shards `ids` (ascending) of `total`; with none, the client
/// starts when `deferred` names its first shard (and never, if it is dropped).
pub async fn start_gateway_sharded(
    builder: ClientBuilder,
    total: u32,
    ids: &[u32],
    deferred: Option<tokio::sync::oneshot::Receiver<u32>>,
) -> Result<
    (
        Arc<serenity::gateway::ShardManager>,
        tokio::sync::oneshot::Receiver<Result<(), serenity::Error>>,
    ),
    DiscordError,
> {
    let mut builder = Some(builder);
    start_gateway_relaunching(Box::new(move || builder.take()), total, ids, deferred, None).await
}

/// Builds a client (`None`: no more can be built).
type BuildClient = Box<dyn FnMut() -> Option<ClientBuilder> + Send>;

/// How one client ended: `None` when it never started (its first shard was never named).
type ClientEnd = Option<Result<(), serenity::Error>>;

/// [`start_gateway_sharded`], where each [`crate::shards::Relaunch`] from `relaunches`
/// replaces the client with a fresh one from `build`. `ended` reports how the newest client
/// ended.
///
/// Each client runs on its own thread and runtime, and a replaced one is retired by dropping
/// its runtime (its shard queuer and runners with it) rather than by serenity's shutdown: a
/// shutdown message reaching a runner whose socket Discord already closed (a 4011) sends
/// serenity 0.12's runner into a loop that never yields (`checked_shutdown` waits for a close
/// frame on a stream that only answers `None`), which would stall every shard on its thread.
async fn start_gateway_relaunching(
    mut build: BuildClient,
    total: u32,
    ids: &[u32],
    deferred: Option<tokio::sync::oneshot::Receiver<u32>>,
    relaunches: Option<tokio::sync::mpsc::Receiver<crate::shards::Relaunch>>,
) -> Result<
    (
        Arc<serenity::gateway::ShardManager>,
        tokio::sync::oneshot::Receiver<Result<(), serenity::Error>>,
    ),
    DiscordError,
> {
    if ids.is_empty() && deferred.is_none() {
        return Err(DiscordError::Gateway("no shard to start".into()));
    }
    let builder = build().ok_or_else(|| DiscordError::Gateway("no client to start".into()))?;
    let (mut current, mut current_ended) =
        client_thread(builder, total, ids.to_vec(), deferred).await?;
    let manager = Arc::clone(&current.manager);
    let (ended_tx, ended_rx) = tokio::sync::oneshot::channel();
    let mut relaunches = relaunches;
    tokio::spawn(async move {
        loop {
            tokio::select! {
                Some(request) = async {
                    match relaunches.as_mut() {
                        Some(relaunches) => relaunches.recv().await,
                        None => std::future::pending().await,
                    }
                } => {
                    let crate::shards::Relaunch { total, ids, deferred, built, hold } = request;
                    let Some(builder) = build() else {
                        let _ = built.send(Err("no client can be built".into()));
                        continue;
                    };
                    // Retired first, without waiting for its thread (bounded, and on its
                    // own thread): its connections close at once, while the new one starts.
                    let mut old = current;
                    tokio::spawn(async move { old.retire_within(crate::shards::STOP_WITHIN).await });
                    match client_thread(builder, total, ids, deferred).await {
                        Ok((next, next_ended)) => {
                            drop(hold);
                            let _ = built.send(Ok(Arc::clone(&next.manager)));
                            current = next;
                            current_ended = next_ended;
                        }
                        Err(error) => {
                            let _ = built.send(Err(error.to_string()));
                            let _ = ended_tx.send(Err(serenity::Error::Other(
                                "the gateway client could not be started with a new shard count",
                            )));
                            return;
                        }
                    }
                }
                end = &mut current_ended => {
                    // `None` (or the thread gone): the newest client never started (the
                    // service is stopping); nothing to report.
                    if let Ok(Some(end)) = end {
                        let _ = ended_tx.send(end);
                    }
                    return;
                }
            }
        }
    });
    Ok((manager, ended_rx))
}

/// One client's thread: retired (its connections closed, its runtime dropped with its tasks)
/// when this is dropped or [`ClientThread::retire_within`].
pub(crate) struct ClientThread {
    /// The client's manager.
    pub(crate) manager: Arc<serenity::gateway::ShardManager>,
    retire: Option<tokio::sync::oneshot::Sender<()>>,
    /// Closed when the thread has dropped the client's runtime.
    gone: tokio::sync::oneshot::Receiver<()>,
}

impl ClientThread {
    /// Closes the client's connections and drops its runtime, waiting at most `bound` for its
    /// thread to let go; `false` when it did not (said in the log: it lets go by itself at its
    /// runners' next yield). Never a shutdown message a runner must answer: each runner is told
    /// to close its socket (a close 1000 on a live one; on one Discord already closed, a 4011,
    /// the failed close ends the runner, which would otherwise spin until its next heartbeat
    /// and hold up the thread), and the thread drops the rest.
    pub(crate) async fn retire_within(&mut self, bound: std::time::Duration) -> bool {
        crate::shards::close_connections(&self.manager).await;
        if let Some(retire) = self.retire.take() {
            let _ = retire.send(());
        }
        let gone = tokio::time::timeout(bound, &mut self.gone).await.is_ok();
        if !gone {
            tracing::warn!(
                bound_ms = bound.as_millis() as u64,
                "a retired gateway client's thread did not stop in time; it stops at its shards' next heartbeat"
            );
        }
        gone
    }
}

/// Builds a client on a new thread with a single-threaded runtime and runs shards `ids` of
/// `total` (or the first `deferred` names) there until it ends or is retired.
async fn client_thread(
    builder: ClientBuilder,
    total: u32,
    ids: Vec<u32>,
    deferred: Option<tokio::sync::oneshot::Receiver<u32>>,
) -> Result<(ClientThread, tokio::sync::oneshot::Receiver<ClientEnd>), DiscordError> {
    let (built_tx, built_rx) = tokio::sync::oneshot::channel();
    let (ended_tx, ended_rx) = tokio::sync::oneshot::channel();
    let (retire_tx, retire_rx) = tokio::sync::oneshot::channel::<()>();
    let (gone_tx, gone_rx) = tokio::sync::oneshot::channel::<()>();
    let runtime = tokio::runtime::Builder::new_current_thread()
        .enable_all()
        .build()
        .map_err(|e| DiscordError::Gateway(format!("cannot start the gateway runtime: {e}")))?;
    std::thread::Builder::new()
        .name("gateway".into())
        .spawn(move || {
            runtime.block_on(async move {
                let (manager, run) = match launch(builder, total, ids, deferred).await {
                    Ok(launched) => launched,
                    Err(error) => {
                        let _ = built_tx.send(Err(error));
                        return;
                    }
                };
                let _ = built_tx.send(Ok(manager));
                tokio::select! {
                    end = run => {
                        let _ = ended_tx.send(end);
                    }
                    // Retired, or its supervisor gone: dropping the runtime ends the rest.
                    _ = retire_rx => {}
                }
            });
            // The runtime drops here, with the client's queuer and runners (their sockets).
            drop(runtime);
            drop(gone_tx);
        })
        .map_err(|e| DiscordError::Gateway(format!("cannot start the gateway thread: {e}")))?;
    match built_rx.await {
        Ok(Ok(manager)) => Ok((
            ClientThread {
                manager,
                retire: Some(retire_tx),
                gone: gone_rx,
            },
            ended_rx,
        )),
        Ok(Err(error)) => Err(DiscordError::Gateway(error.to_string())),
        Err(_) => Err(DiscordError::Gateway("the gateway thread stopped".into())),
    }
}

/// Builds a client and readies it to run shards `ids` (ascending) of `total` — or the first
/// shard `deferred` names: its manager, and the run to spawn.
async fn launch(
    builder: ClientBuilder,
    total: u32,
    ids: Vec<u32>,
    deferred: Option<tokio::sync::oneshot::Receiver<u32>>,
) -> Result<
    (
        Arc<serenity::gateway::ShardManager>,
        impl std::future::Future<Output = ClientEnd>,
    ),
    serenity::Error,
> {
    // What starts the client: its first run of shards now, or the first shard named later.
    enum First {
        Now { first: u32, last: u32 },
        Later(Option<tokio::sync::oneshot::Receiver<u32>>),
    }
    let (first, later) = match ids.split_first() {
        Some((&first, rest)) => {
            // One contiguous run starts as one range (serenity's end is inclusive); the
            // others are started one by one once the client runs.
            let contiguous = rest
                .iter()
                .enumerate()
                .all(|(i, id)| u64::from(*id) == u64::from(first) + 1 + i as u64);
            if contiguous {
                let last = rest.last().copied().unwrap_or(first);
                (First::Now { first, last }, Vec::new())
            } else {
                (First::Now { first, last: first }, rest.to_vec())
            }
        }
        None => (First::Later(deferred), Vec::new()),
    };
    let mut client = builder.await?;
    let manager = Arc::clone(&client.shard_manager);
    let restarts = Arc::clone(&manager);
    let run = async move {
        if !later.is_empty() {
            // Runs once `start_shard_range` below has set the count and waits: each
            // `restart` of a shard not running starts it.
            tokio::spawn(async move {
                for id in later {
                    restarts.restart(serenity::model::id::ShardId(id)).await;
                }
            });
        }
        let (first, last) = match first {
            First::Now { first, last } => (first, last),
            First::Later(named) => match named?.await {
                Ok(id) => (id, id),
                // Nothing will ever be started: the service is stopping, or a relaunch
                // replaced this client.
                Err(_) => return None,
            },
        };
        Some(client.start_shard_range(first..last, total).await)
    };
    Ok((manager, run))
}
