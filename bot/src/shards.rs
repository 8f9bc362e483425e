//! Gateway shards (issue 23): how many the bot has (`discord.shard_count`, or what
//! `GET /gateway/bot` recommends), which of them this node runs (`cluster.shards`), each
//! one's state for `/health`, starting and stopping single shards in serenity's
//! `ShardManager`, and Discord's close 4011 ("sharding required").
//!
//! With `cluster.shards = "lease"` each shard runs in a client of its own (its own thread and
//! runtime), started at once and stopped by closing its socket and dropping the client within
//! [`STOP_WITHIN`]; with `all` or a list the node's shards share one client
//! (`service::one_client`), replaced by a fresh one for a new count.
//!
//! serenity 0.12 facts this leans on (pinned by `fake-discord/tests/serenity_shards.rs`):
//! `start_shard_range(a..b, n)` starts a..=b (the end is inclusive); `ShardManager::restart`
//! starts a shard that is not running (after a 5-s wait) and `shutdown` stops one without
//! ending the client; `set_shards` stops every running shard AND ends the client when any
//! runs, so a new count starts a fresh client instead ([`Relaunch`]); a 4011 never reaches the
//! caller — the shard is restarted with the same count forever — and is seen only in
//! serenity's log line "Shard has too many guilds", which [`crate::session_lost`]'s layer
//! reads.

use std::collections::{BTreeMap, BTreeSet};
use std::sync::atomic::{AtomicU32, AtomicU64, Ordering};
use std::sync::{Arc, LazyLock, Mutex, PoisonError};

use serde_json::Value;
use serenity::gateway::{ConnectionStage, ShardManager};
use serenity::model::id::ShardId;
use switchboard_config::{ShardCount, ShardSelection};

use crate::rest::DiscordRest;
use crate::service::DiscordError;

/// What `GET /gateway/bot` recommends.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Recommended {
    /// The shard count.
    pub shards: u32,
    /// `session_start_limit.max_concurrency`: shard `i` identifies in bucket
    /// `i % max_concurrency`, one IDENTIFY per bucket per 5 s.
    pub max_concurrency: u32,
}

impl Recommended {
    /// Reads `GET /gateway/bot`'s answer; `None` without a whole, positive `shards`.
    pub fn from_json(value: &Value) -> Option<Recommended> {
        let shards = value
            .get("shards")
            .and_then(Value::as_u64)
            .and_then(|n| u32::try_from(n).ok())
            .filter(|n| (1..=switchboard_config::MAX_SHARD_COUNT).contains(n))?;
        let max_concurrency = value
            .pointer("/session_start_limit/max_concurrency")
            .and_then(Value::as_u64)
            .and_then(|n| u32::try_from(n).ok())
            .filter(|n| *n >= 1)
            .unwrap_or(1);
        Some(Recommended {
            shards,
            max_concurrency,
        })
    }
}

/// How many shards the bot has and which of them this node runs at start.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct ShardPlan {
    /// The bot's shard count.
    pub total: u32,
    /// The shards this node starts with (ascending; empty with `lease` until one is leased).
    pub initial: Vec<u32>,
    /// `cluster.shards`.
    pub selection: ShardSelection,
    /// Whether the count follows Discord's recommendation (`shard_count = "auto"`).
    pub auto: bool,
    /// The IDENTIFY concurrency Discord reported.
    pub max_concurrency: u32,
}

/// Works out the plan: asks Discord for its recommendation, then applies the config. A
/// listed shard at or past the count Discord recommends (with `shard_count = "auto"`) is an
/// error: the list was written for another count.
pub async fn plan(
    count: ShardCount,
    selection: &ShardSelection,
    rest: &DiscordRest,
) -> Result<ShardPlan, DiscordError> {
    let recommended = rest.gateway_bot().await.map_err(|error| {
        DiscordError::Gateway(format!(
            "cannot ask Discord how many shards to run: {error}"
        ))
    })?;
    plan_for(count, selection, recommended)
}

/// [`plan`] with Discord's answer in hand.
pub fn plan_for(
    count: ShardCount,
    selection: &ShardSelection,
    recommended: Recommended,
) -> Result<ShardPlan, DiscordError> {
    let total = match count {
        ShardCount::Auto => recommended.shards,
        ShardCount::Fixed(n) => n,
    };
    let initial = match selection {
        ShardSelection::All => (0..total).collect(),
        ShardSelection::Lease => Vec::new(),
        ShardSelection::Ids(ids) => {
            if let Some(past) = ids.iter().find(|id| **id >= total) {
                return Err(DiscordError::ShardsMisconfigured(format!(
                    "cluster.shards lists shard {past}, but the bot has {total} shard{} (discord.shard_count = {}); list shards 0 to {}, or set discord.shard_count to the count the list was written for",
                    if total == 1 { "" } else { "s" },
                    match count {
                        ShardCount::Auto => "\"auto\": Discord's recommendation".to_owned(),
                        ShardCount::Fixed(n) => n.to_string(),
                    },
                    total - 1
                )));
            }
            ids.clone()
        }
    };
    Ok(ShardPlan {
        total,
        initial,
        selection: selection.clone(),
        auto: count == ShardCount::Auto,
        max_concurrency: recommended.max_concurrency,
    })
}

/// The state of each shard this node runs, for `/health`: `connecting`, `identifying`,
/// `resuming`, `ready` or `down`; and why this node cannot run its shards, when it cannot.
#[derive(Debug, Clone, Default)]
pub struct ShardStates(
    Arc<Mutex<BTreeMap<u32, &'static str>>>,
    Arc<Mutex<Option<String>>>,
);

impl ShardStates {
    /// Shard `id` is being started.
    pub fn starting(&self, id: u32) {
        self.lock().insert(id, "connecting");
    }

    /// Shard `id` moved to `stage` (only shards this node runs are kept).
    pub fn stage(&self, id: u32, stage: ConnectionStage) {
        let state = match stage {
            ConnectionStage::Connected => "ready",
            ConnectionStage::Connecting | ConnectionStage::Handshake => "connecting",
            ConnectionStage::Identifying => "identifying",
            ConnectionStage::Resuming => "resuming",
            _ => "down",
        };
        if let Some(kept) = self.lock().get_mut(&id) {
            *kept = state;
        }
    }

    /// Shard `id` was stopped here.
    pub fn stopped(&self, id: u32) {
        self.lock().remove(&id);
    }

    /// Every shard this node runs, by id, with its state.
    pub fn snapshot(&self) -> Vec<(u32, &'static str)> {
        self.lock()
            .iter()
            .map(|(id, state)| (*id, *state))
            .collect()
    }

    /// This node cannot run its shards (`/health` says `degraded` with `reason`).
    pub fn set_trouble(&self, reason: String) {
        *self.1.lock().unwrap_or_else(PoisonError::into_inner) = Some(reason);
    }

    /// Why this node cannot run its shards, if it cannot.
    pub fn trouble(&self) -> Option<String> {
        self.1
            .lock()
            .unwrap_or_else(PoisonError::into_inner)
            .clone()
    }

    fn lock(&self) -> std::sync::MutexGuard<'_, BTreeMap<u32, &'static str>> {
        self.0.lock().unwrap_or_else(PoisonError::into_inner)
    }
}

/// How long serenity's `restart` of a shard that is not running waits before starting it.
const RESTART_DELAY: std::time::Duration = std::time::Duration::from_secs(5);

/// The longest a shard's stop (a give-back, a lost lease, a new count, the service stopping)
/// waits for its client's thread to let go; past it the stop completes anyway.
pub const STOP_WITHIN: std::time::Duration = std::time::Duration::from_secs(3);

/// The longest a stop waits for serenity's list of runners (held only briefly by serenity).
const RUNNERS_WITHIN: std::time::Duration = std::time::Duration::from_secs(1);

/// Starts a client of its own (its own thread and runtime) running shard `id` of `total`.
pub(crate) type SpawnClient = Arc<
    dyn Fn(
            u32,
            u32,
        ) -> std::pin::Pin<
            Box<
                dyn std::future::Future<
                        Output = Result<
                            (
                                crate::service::ClientThread,
                                tokio::sync::oneshot::Receiver<Option<Result<(), serenity::Error>>>,
                            ),
                            DiscordError,
                        >,
                    > + Send,
            >,
        > + Send
        + Sync,
>;

/// Tells every runner of `manager` to close its socket with 1000, without waiting for an
/// answer. A runner whose socket Discord already closed (a 4011) fails the close and ends;
/// serenity's own shutdown would instead wait for a close frame that never comes.
pub(crate) async fn close_connections(manager: &ShardManager) {
    match tokio::time::timeout(RUNNERS_WITHIN, manager.runners.lock()).await {
        Ok(runners) => {
            for runner in runners.values() {
                runner.runner_tx.shutdown_clean();
            }
        }
        Err(_) => tracing::warn!(
            "cannot reach a gateway client's shard runners to close their sockets; its runtime is dropped anyway"
        ),
    }
}

/// Shards each running in a client of their own (`cluster.shards = "lease"`): started the
/// moment their IDENTIFY slot comes, and stopped by dropping their client.
struct OwnClients {
    spawn: SpawnClient,
    clients: tokio::sync::Mutex<BTreeMap<u32, crate::service::ClientThread>>,
    /// Where the first client that ends with an error reports it ([`Gateway::ended`]).
    ///
    /// [`Gateway::ended`]: crate::service::Gateway::ended
    ended: Mutex<Option<tokio::sync::oneshot::Sender<Result<(), serenity::Error>>>>,
    /// Each shard's latest start or stop, numbered from `next`: a client whose start was
    /// overtaken by a stop (it was building meanwhile) is retired instead of kept.
    latest: Mutex<BTreeMap<u32, u64>>,
    next: AtomicU64,
    /// Shards whose latest start failed (their client could not be built), for the lease
    /// loop to give back instead of renewing a lease for a shard nothing runs.
    failed: Mutex<BTreeSet<u32>>,
}

impl OwnClients {
    /// Records a start or stop of shard `id` (a failed start before it is no longer news);
    /// its number.
    fn mark(&self, id: u32) -> u64 {
        let mut latest = self.latest.lock().unwrap_or_else(PoisonError::into_inner);
        let n = self.next.fetch_add(1, Ordering::Relaxed);
        latest.insert(id, n);
        self.failed
            .lock()
            .unwrap_or_else(PoisonError::into_inner)
            .remove(&id);
        n
    }

    /// Records that start `n` of shard `id` failed, unless a later start or stop overtook it.
    fn start_failed(&self, id: u32, n: u64) {
        let latest = self.latest.lock().unwrap_or_else(PoisonError::into_inner);
        if latest.get(&id) == Some(&n) {
            self.failed
                .lock()
                .unwrap_or_else(PoisonError::into_inner)
                .insert(id);
        }
    }

    /// Whether start `n` of shard `id` is still its latest word.
    fn is_latest(&self, id: u32, n: u64) -> bool {
        self.latest
            .lock()
            .unwrap_or_else(PoisonError::into_inner)
            .get(&id)
            == Some(&n)
    }

    /// Records a stop of every shard started or stopped so far.
    fn mark_all(&self) {
        let ids: Vec<u32> = self
            .latest
            .lock()
            .unwrap_or_else(PoisonError::into_inner)
            .keys()
            .copied()
            .collect();
        for id in ids {
            self.mark(id);
        }
    }
}

/// The longest a shard's client may take to be built (it asks Discord for the gateway's
/// address) before its start is given up.
const BUILD_WITHIN: std::time::Duration = std::time::Duration::from_secs(30);

/// A request to the gateway thread (after a 4011, or a new cluster-wide count): retire the
/// running client and start a fresh one running `ids` of `total` — or, with none, the first
/// shard named through `deferred`. Not the running client's `set_shards` + `restart`: serenity
/// restarts a 4011-closed shard on its own meanwhile, so `set_shards` finds a runner or not by
/// chance (with one it ends the client's shard queuer for good, and no shard starts again),
/// the runner it restarts races ours for the same shard id, and a shutdown that reaches a
/// 4011-closed runner before its own restart never returns (see
/// `service::start_gateway_relaunching`).
pub struct Relaunch {
    /// The new shard count.
    pub total: u32,
    /// The shards the new client starts (ascending).
    pub ids: Vec<u32>,
    /// With no `ids`: what names the first shard.
    pub deferred: Option<tokio::sync::oneshot::Receiver<u32>>,
    /// Answered with the new client's manager, or why it could not be built.
    pub built: tokio::sync::oneshot::Sender<Result<Arc<ShardManager>, String>>,
    /// A slot of the bot's global rate limit for the client's `GET /gateway`, held until it
    /// is built.
    pub hold: Option<crate::rest::limits::GlobalHold>,
}

/// Starts and stops single shards: of one running client (`all`, a list), or each in a
/// client of its own (`lease`).
#[derive(Clone)]
pub struct ShardControl {
    /// The running client's manager (swapped by a relaunch); `None` with a client per shard.
    manager: Arc<Mutex<Option<Arc<ShardManager>>>>,
    total: Arc<AtomicU32>,
    states: ShardStates,
    /// While the client has not started (no shard yet): what starts it with its first shard.
    first: Arc<Mutex<Option<tokio::sync::oneshot::Sender<u32>>>>,
    /// Where a relaunch is asked for, and the REST client whose global slot it holds.
    relaunch: Option<(tokio::sync::mpsc::Sender<Relaunch>, DiscordRest)>,
    /// One relaunch or stop at a time; `true` once the gateway is stopped for good.
    serial: Arc<tokio::sync::Mutex<bool>>,
    /// The shard count a 4011 says the cluster needs (0: none yet), for the lease loop to
    /// record cluster-wide.
    wanted: Arc<AtomicU32>,
    /// With `lease`: each shard in a client of its own.
    own: Option<Arc<OwnClients>>,
}

impl ShardControl {
    /// Control over `manager`'s shards out of `total`, reporting into `states`.
    pub fn new(manager: Arc<ShardManager>, total: u32, states: ShardStates) -> ShardControl {
        ShardControl::with_manager(Some(manager), total, states)
    }

    fn with_manager(
        manager: Option<Arc<ShardManager>>,
        total: u32,
        states: ShardStates,
    ) -> ShardControl {
        ShardControl {
            manager: Arc::new(Mutex::new(manager)),
            total: Arc::new(AtomicU32::new(total)),
            states,
            first: Arc::new(Mutex::new(None)),
            relaunch: None,
            serial: Arc::new(tokio::sync::Mutex::new(false)),
            wanted: Arc::new(AtomicU32::new(0)),
            own: None,
        }
    }

    /// Control over shards of `total` that each run in a client of their own, made by `spawn`;
    /// the receiver hears of the first client that ends with an error.
    pub(crate) fn own_clients(
        spawn: SpawnClient,
        total: u32,
        states: ShardStates,
    ) -> (
        ShardControl,
        tokio::sync::oneshot::Receiver<Result<(), serenity::Error>>,
    ) {
        let (ended_tx, ended_rx) = tokio::sync::oneshot::channel();
        let mut control = ShardControl::with_manager(None, total, states);
        control.own = Some(Arc::new(OwnClients {
            spawn,
            clients: tokio::sync::Mutex::new(BTreeMap::new()),
            ended: Mutex::new(Some(ended_tx)),
            latest: Mutex::new(BTreeMap::new()),
            next: AtomicU64::new(0),
            failed: Mutex::new(BTreeSet::new()),
        }));
        (control, ended_rx)
    }

    /// The client is not started yet: the first shard started goes through `first`.
    #[must_use]
    pub fn starting_client_with(self, first: tokio::sync::oneshot::Sender<u32>) -> ShardControl {
        *self.first.lock().unwrap_or_else(PoisonError::into_inner) = Some(first);
        self
    }

    /// A new count relaunches the client through `relaunch` (the gateway thread's), its
    /// `GET /gateway` counted in `rest`'s global limit.
    #[must_use]
    pub fn relaunching_through(
        mut self,
        relaunch: tokio::sync::mpsc::Sender<Relaunch>,
        rest: DiscordRest,
    ) -> ShardControl {
        self.relaunch = Some((relaunch, rest));
        self
    }

    /// The running client's manager (`None` with a client per shard).
    fn manager(&self) -> Option<Arc<ShardManager>> {
        self.manager
            .lock()
            .unwrap_or_else(PoisonError::into_inner)
            .clone()
    }

    /// The bot's shard count as this node runs it.
    pub fn total(&self) -> u32 {
        self.total.load(Ordering::Relaxed)
    }

    /// The states `/health` reports.
    pub fn states(&self) -> &ShardStates {
        &self.states
    }

    /// The shard count a 4011 says the cluster needs, 0 when none has.
    pub fn wanted(&self) -> u32 {
        self.wanted.load(Ordering::Relaxed)
    }

    fn want(&self, total: u32) {
        self.wanted.fetch_max(total, Ordering::Relaxed);
    }

    /// Starts shard `id`: it identifies afresh — at once in a client of its own; otherwise
    /// after serenity's 5-s wait for a runner that is not there.
    pub async fn start(&self, id: u32) {
        self.states.starting(id);
        tracing::info!(shard = id, total = self.total(), "starting gateway shard");
        if let Some(own) = &self.own {
            self.start_own(own, id).await;
            return;
        }
        let first = self
            .first
            .lock()
            .unwrap_or_else(PoisonError::into_inner)
            .take();
        match (first, self.manager()) {
            (Some(first), _) => {
                // A shard started with `restart` identifies about 5 s later (serenity waits
                // for a runner that is not there); the client's first one would go at once.
                // Going as late keeps every node's IDENTIFY where its reserved slot put it.
                tokio::time::sleep(RESTART_DELAY).await;
                let _ = first.send(id);
            }
            (None, Some(manager)) => manager.restart(ShardId(id)).await,
            (None, None) => {}
        }
    }

    /// Starts shard `id` in a client of its own (one already running it is retired first).
    async fn start_own(&self, own: &Arc<OwnClients>, id: u32) {
        let start = own.mark(id);
        let old = own.clients.lock().await.remove(&id);
        if let Some(mut old) = old {
            old.retire_within(STOP_WITHIN).await;
        }
        // Built without holding the clients: a stop of another shard need not wait for it.
        let built = tokio::time::timeout(BUILD_WITHIN, (own.spawn)(self.total(), id))
            .await
            .unwrap_or_else(|_| {
                Err(DiscordError::Gateway(format!(
                    "its client was not built within {} s",
                    BUILD_WITHIN.as_secs()
                )))
            });
        match built {
            Ok((mut client, ended)) => {
                let mut clients = own.clients.lock().await;
                if !own.is_latest(id, start) {
                    // Stopped (given back, or a new count) while it was being built.
                    drop(clients);
                    client.retire_within(STOP_WITHIN).await;
                    return;
                }
                clients.insert(id, client);
                drop(clients);
                let report = Arc::clone(own);
                tokio::spawn(async move {
                    // A client ends by itself only when serenity gives up (a refused token or
                    // intents): the gateway has ended. A retired one ends without a word.
                    if let Ok(Some(Err(error))) = ended.await {
                        let sender = report
                            .ended
                            .lock()
                            .unwrap_or_else(PoisonError::into_inner)
                            .take();
                        if let Some(sender) = sender {
                            let _ = sender.send(Err(error));
                        }
                    }
                });
            }
            Err(error) => {
                self.states.stopped(id);
                own.start_failed(id, start);
                tracing::error!(
                    shard = id,
                    "cannot start the gateway shard: {error}; its lease is given back at the next round (another node, or this one after a round, takes it)"
                );
            }
        }
    }

    /// Stops shard `id` (closing its socket with 1000); the other shards go on. Bounded: with
    /// a client per shard its client is dropped (within [`STOP_WITHIN`]), never waiting on a
    /// runner's answer.
    pub async fn stop(&self, id: u32) {
        tracing::info!(shard = id, "stopping gateway shard");
        if let Some(own) = &self.own {
            own.mark(id);
            let client = own.clients.lock().await.remove(&id);
            if let Some(mut client) = client {
                client.retire_within(STOP_WITHIN).await;
            }
        } else if let Some(manager) = self.manager() {
            if tokio::time::timeout(STOP_WITHIN * 2, manager.shutdown(ShardId(id), 1000))
                .await
                .is_err()
            {
                tracing::warn!(shard = id, "the gateway shard did not stop in time");
            }
        }
        self.states.stopped(id);
    }

    /// Stops every shard and runs `ids` of a new count `total` (with none, the next
    /// [`ShardControl::start`] starts the first) in a fresh client. `false` when it could not
    /// (said in the log).
    pub async fn reshard(&self, total: u32, ids: &[u32]) -> bool {
        let stopped = self.serial.lock().await;
        if *stopped {
            return false;
        }
        if let Some(own) = &self.own {
            // Each shard is its own client: stop them all, then start `ids` with the new count.
            self.stop_own_clients(own).await;
            self.total.store(total, Ordering::Relaxed);
            for id in ids {
                self.start(*id).await;
            }
            tracing::info!(total, shards = ?ids, "the gateway runs with the new shard count");
            return true;
        }
        let Some((relaunch, rest)) = &self.relaunch else {
            tracing::error!(
                total,
                "cannot start the gateway with a new shard count: this client cannot be relaunched"
            );
            return false;
        };
        let hold = match rest.hold_global_slot().await {
            Ok(hold) => Some(hold),
            Err(error) => {
                tracing::error!(
                    total,
                    "cannot start the gateway with a new shard count: no room in the global rate limit ({error}); the next 4011 or count change tries again"
                );
                return false;
            }
        };
        let (built, answer) = tokio::sync::oneshot::channel();
        let (first, deferred) = if ids.is_empty() {
            let (first, deferred) = tokio::sync::oneshot::channel();
            (Some(first), Some(deferred))
        } else {
            (None, None)
        };
        let request = Relaunch {
            total,
            ids: ids.to_vec(),
            deferred,
            built,
            hold,
        };
        // The old client is retired before the new one is built; the new one's shards are
        // marked before it starts, so their first stage changes are kept.
        for (id, _) in self.states.snapshot() {
            self.states.stopped(id);
        }
        for id in ids {
            self.states.starting(*id);
        }
        let unmark = || {
            for id in ids {
                self.states.stopped(*id);
            }
        };
        if relaunch.send(request).await.is_err() {
            unmark();
            tracing::error!(
                total,
                "cannot start the gateway with a new shard count: the gateway thread has stopped"
            );
            return false;
        }
        let manager = match answer.await {
            Ok(Ok(manager)) => manager,
            Ok(Err(error)) => {
                unmark();
                tracing::error!(
                    total,
                    "cannot start the gateway with a new shard count: {error}"
                );
                return false;
            }
            Err(_) => {
                unmark();
                tracing::error!(total, "cannot start the gateway with a new shard count: the gateway thread has stopped");
                return false;
            }
        };
        *self.manager.lock().unwrap_or_else(PoisonError::into_inner) = Some(manager);
        self.total.store(total, Ordering::Relaxed);
        // A first shard the old client never started is no longer awaited: it ends unstarted.
        *self.first.lock().unwrap_or_else(PoisonError::into_inner) = first;
        tracing::info!(total, shards = ?ids, "the gateway runs with the new shard count");
        true
    }

    /// Retires every client of its own (each within [`STOP_WITHIN`], all at once).
    async fn stop_own_clients(&self, own: &OwnClients) {
        own.mark_all();
        let clients = std::mem::take(&mut *own.clients.lock().await);
        let mut stops = tokio::task::JoinSet::new();
        for (id, mut client) in clients {
            self.states.stopped(id);
            stops.spawn(async move {
                tracing::info!(shard = id, "stopping gateway shard");
                client.retire_within(STOP_WITHIN).await;
            });
        }
        while stops.join_next().await.is_some() {}
    }

    /// Stops every shard for good (the service is stopping): no relaunch starts after this.
    /// Bounded: sockets are closed without waiting on answers.
    pub async fn shutdown_all(&self) {
        let mut stopped = self.serial.lock().await;
        *stopped = true;
        if let Some(own) = &self.own {
            self.stop_own_clients(own).await;
        } else if let Some(manager) = self.manager() {
            // Closed first, so serenity's shutdown below finds no runner stuck on a dead
            // socket; it is bounded all the same (it waits up to 5 s per runner that does not
            // answer).
            close_connections(&manager).await;
            if tokio::time::timeout(STOP_WITHIN, manager.shutdown_all())
                .await
                .is_err()
            {
                tracing::warn!("the gateway's shards did not all stop in time");
            }
        }
    }

    /// The shards whose latest start failed since the last call (a client per shard only:
    /// their client could not be built), each reported once. Nothing runs them: the lease
    /// loop gives their leases back.
    pub fn take_failed_starts(&self) -> BTreeSet<u32> {
        match &self.own {
            Some(own) => {
                std::mem::take(&mut *own.failed.lock().unwrap_or_else(PoisonError::into_inner))
            }
            None => BTreeSet::new(),
        }
    }

    /// The shards with a runner (or a client of their own) now.
    pub async fn running(&self) -> Vec<u32> {
        if let Some(own) = &self.own {
            return own.clients.lock().await.keys().copied().collect();
        }
        let Some(manager) = self.manager() else {
            return Vec::new();
        };
        let mut ids: Vec<u32> = manager
            .shards_instantiated()
            .await
            .into_iter()
            .map(|id| id.0)
            .collect();
        ids.sort_unstable();
        ids
    }
}

/// The latest of serenity's "Shard has too many guilds" lines (a close 4011) in this process:
/// the shard count it was seen with, when the line says (every line notifies).
static SHARDING_REQUIRED: LazyLock<tokio::sync::watch::Sender<Option<u32>>> =
    LazyLock::new(|| tokio::sync::watch::channel(None).0);

/// Whether a serenity log message reports a close 4011.
pub fn is_sharding_required(message: &str) -> bool {
    message.contains("Shard has too many guilds")
}

/// The shard count in a serenity gateway line (`[ShardInfo { id: ShardId(0), total: 1 }] …`).
fn line_total(message: &str) -> Option<u32> {
    let rest = &message[message.find("total: ")? + "total: ".len()..];
    let digits = rest
        .find(|c: char| !c.is_ascii_digit())
        .unwrap_or(rest.len());
    rest[..digits].parse().ok()
}

/// Called by the log layer for each 4011 line.
pub(crate) fn sharding_required_seen(message: &str) {
    let total = line_total(message);
    SHARDING_REQUIRED.send_modify(|seen| *seen = total);
}

/// Handles 4011 for as long as the client runs: names it in the log, asks Discord for its
/// recommendation, and — when this node runs every shard — restarts with that count. With a
/// list or leases the count is the cluster's, so it says what to change instead. A line from
/// a shard of an older count (a replaced client's last words) changes nothing.
pub fn on_sharding_required(
    control: ShardControl,
    rest: DiscordRest,
    selection: ShardSelection,
) -> tokio::task::JoinHandle<()> {
    let mut seen = SHARDING_REQUIRED.subscribe();
    seen.mark_unchanged();
    tokio::spawn(async move {
        while seen.changed().await.is_ok() {
            let line_total = *seen.borrow_and_update();
            let total = control.total();
            if line_total.is_some_and(|seen| seen < total) {
                continue;
            }
            let recommended = match rest.gateway_bot().await {
                Ok(recommended) => recommended,
                Err(error) => {
                    tracing::error!(
                        "Discord closed the gateway with 4011 (sharding required: too many guilds for {total} shard(s)), and asking GET /gateway/bot for the recommended count failed: {error}; retrying at the next 4011"
                    );
                    continue;
                }
            };
            let next = recommended.shards.max(total + 1);
            match &selection {
                ShardSelection::All => {}
                ShardSelection::Lease => {
                    tracing::error!(
                        "Discord closed the gateway with 4011 (sharding required: too many guilds for {total} shard(s)); Discord recommends {} shards: raising the cluster's shard count to {next}, and every node leases its shards anew with it",
                        recommended.shards
                    );
                    control.want(next);
                    continue;
                }
                ShardSelection::Ids(ids) => {
                    let reason = format!(
                        "Discord closed the gateway with 4011 (sharding required: too many guilds for {total} shard(s)) and recommends {} shards, but cluster.shards lists {ids:?}, written for {total}: list the shards of a {next}-shard bot on the nodes (set discord.shard_count = {next} or \"auto\" with it), or use cluster.shards = \"lease\", and restart them. This node's shards are stopped (identifying again would be refused the same way)",
                        recommended.shards
                    );
                    tracing::error!("{reason}");
                    control.states().set_trouble(reason);
                    // A fresh client that starts no shard: the refused ones stop identifying.
                    control.reshard(total, &[]).await;
                    seen.mark_unchanged();
                    continue;
                }
            }
            tracing::error!(
                "Discord closed the gateway with 4011 (sharding required: too many guilds for {total} shard(s)); restarting with {next} shards (Discord recommends {}); set discord.shard_count = \"auto\" or {next} to start that way",
                recommended.shards
            );
            let ids: Vec<u32> = (0..next).collect();
            control.reshard(next, &ids).await;
            // Lines logged while the old shards were stopped belong to the old count.
            seen.mark_unchanged();
        }
    })
}

#[cfg(test)]
mod tests {
    use super::*;
    use serde_json::json;

    fn recommended(shards: u32) -> Recommended {
        Recommended {
            shards,
            max_concurrency: 1,
        }
    }

    #[test]
    fn gateway_bot_answers_are_read_and_garbage_refused() {
        let read = Recommended::from_json(
            &json!({"url": "wss://x", "shards": 4, "session_start_limit": {"max_concurrency": 16}}),
        );
        assert_eq!(
            read,
            Some(Recommended {
                shards: 4,
                max_concurrency: 16
            })
        );
        assert_eq!(
            Recommended::from_json(&json!({"shards": 2})).map(|r| r.max_concurrency),
            Some(1)
        );
        for bad in [
            json!({}),
            json!({"shards": 0}),
            json!({"shards": "2"}),
            json!({"shards": -1}),
            json!({"shards": 1_000_000}),
        ] {
            assert_eq!(Recommended::from_json(&bad), None, "{bad}");
        }
    }

    #[test]
    fn the_plan_follows_the_recommendation_unless_a_count_is_fixed() {
        let all = plan_for(ShardCount::Auto, &ShardSelection::All, recommended(3)).unwrap();
        assert_eq!((all.total, all.initial), (3, vec![0, 1, 2]));
        let fixed = plan_for(ShardCount::Fixed(2), &ShardSelection::All, recommended(3)).unwrap();
        assert_eq!((fixed.total, fixed.initial), (2, vec![0, 1]));
        let lease = plan_for(ShardCount::Auto, &ShardSelection::Lease, recommended(3)).unwrap();
        assert_eq!((lease.total, lease.initial), (3, vec![]));
        let list = plan_for(
            ShardCount::Auto,
            &ShardSelection::Ids(vec![1, 2]),
            recommended(3),
        )
        .unwrap();
        assert_eq!(list.initial, vec![1, 2]);
    }

    #[test]
    fn a_listed_shard_past_the_recommended_count_is_a_setup_error() {
        let error = plan_for(
            ShardCount::Auto,
            &ShardSelection::Ids(vec![0, 3]),
            recommended(2),
        )
        .unwrap_err();
        assert!(error.is_setup(), "{error}");
        let text = error.to_string();
        assert!(
            text.contains("shard 3") && text.contains("2 shards"),
            "{text}"
        );
    }

    #[test]
    fn a_4011_line_says_which_count_it_was_seen_with() {
        let line = "[ShardInfo { id: ShardId(0), total: 12 }] Shard has too many guilds.";
        assert!(is_sharding_required(line));
        assert_eq!(line_total(line), Some(12));
        for garbage in [
            "Shard has too many guilds.",
            "total: ",
            "total: x1",
            "total: 99999999999",
        ] {
            assert_eq!(line_total(garbage), None, "{garbage}");
        }
    }

    #[test]
    fn shard_states_keep_only_the_shards_this_node_runs() {
        let states = ShardStates::default();
        states.starting(1);
        states.stage(1, ConnectionStage::Identifying);
        states.stage(0, ConnectionStage::Connected);
        assert_eq!(states.snapshot(), vec![(1, "identifying")]);
        states.stage(1, ConnectionStage::Connected);
        states.starting(0);
        assert_eq!(states.snapshot(), vec![(0, "connecting"), (1, "ready")]);
        states.stopped(1);
        assert_eq!(states.snapshot(), vec![(0, "connecting")]);
    }
}
