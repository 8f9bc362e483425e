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

/// A running gateway client: its shard manager (to shut it down) and how it ended.
pub struct Gateway {
    /// Shuts the shards down.
    pub shards: Arc<serenity::gateway::ShardManager>,
    /// Starts and stops single shards.
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
    let mut http = HttpBuilder::new(&token);
    if let Some(base) = &config.discord.api_base_url {
        // serenity's ratelimiter ignores the proxy and would talk to discord.com: off here.
        // serenity's client makes one request, `GET /gateway` when the gateway starts;
        // everything else, interaction answers included, is [`DiscordRest`].
        http = http.proxy(base.as_str()).ratelimiter_disabled(true);
    }
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
    let builder = ClientBuilder::new_with_http(http.build(), intents())
        .raw_event_handler(ingest)
        .event_handler(Handlers {
            stage: StageWatcher::new(connection),
            interactions,
            states: states.clone(),
        });
    for id in &plan.initial {
        states.starting(*id);
    }
    tracing::info!(
        total = plan.total,
        shards = ?plan.initial,
        max_concurrency = plan.max_concurrency,
        "starting the gateway's shards"
    );
    // With no shard to start yet (`lease`), the client starts with the first one leased.
    let (first_tx, first_rx) = tokio::sync::oneshot::channel();
    let deferred = plan.initial.is_empty().then_some(first_rx);
    let (shards, ended) =
        start_gateway_sharded(builder, plan.total, &plan.initial, deferred).await?;
    drop(gateway_request);
    let mut control = ShardControl::new(Arc::clone(&shards), plan.total, states);
    if plan.initial.is_empty() {
        control = control.starting_client_with(first_tx);
    }
    let resharding = crate::shards::on_sharding_required(control.clone(), rest, plan.selection);
    Ok(Gateway {
        shards,
        control,
        resharding,
        ended,
    })
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
    // What starts the client: its first run of shards now, or the first shard named later.
    enum First {
        Now { first: u32, last: u32 },
        Later(tokio::sync::oneshot::Receiver<u32>),
    }
    let (first, later) = match (ids.split_first(), deferred) {
        (Some((&first, rest)), _) => {
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
        (None, Some(deferred)) => (First::Later(deferred), Vec::new()),
        (None, None) => return Err(DiscordError::Gateway("no shard to start".into())),
    };
    let (built_tx, built_rx) = tokio::sync::oneshot::channel();
    let (ended_tx, ended_rx) = tokio::sync::oneshot::channel();
    let runtime = tokio::runtime::Builder::new_current_thread()
        .enable_all()
        .build()
        .map_err(|e| DiscordError::Gateway(format!("cannot start the gateway runtime: {e}")))?;
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
                let manager = Arc::clone(&client.shard_manager);
                let _ = built_tx.send(Ok(Arc::clone(&manager)));
                if !later.is_empty() {
                    // Runs once `start_shard_range` below has set the count and waits: each
                    // `restart` of a shard not running starts it.
                    tokio::spawn(async move {
                        for id in later {
                            manager.restart(serenity::model::id::ShardId(id)).await;
                        }
                    });
                }
                let (first, last) = match first {
                    First::Now { first, last } => (first, last),
                    First::Later(named) => match named.await {
                        Ok(id) => (id, id),
                        // Nothing will ever be started: the service is stopping.
                        Err(_) => return,
                    },
                };
                let ended = client.start_shard_range(first..last, total).await;
                let _ = ended_tx.send(ended);
            });
        })
        .map_err(|e| DiscordError::Gateway(format!("cannot start the gateway thread: {e}")))?;
    match built_rx.await {
        Ok(Ok(shards)) => Ok((shards, ended_rx)),
        Ok(Err(error)) => Err(DiscordError::Gateway(error.to_string())),
        Err(_) => Err(DiscordError::Gateway("the gateway thread stopped".into())),
    }
}
