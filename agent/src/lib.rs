//! The agent bridge: a message that should start a run is queued per session (one run at a
//! time per session, FIFO, bounded), an agent runs with a fresh capability token, and its
//! answer is posted as a reply through the tool server's own pipeline.
//!
//! Written against the tool server's [`Core`] and [`Surface`](switchboard_engine::Surface) only: the
//! platform reports arrivals through [`switchboard_engine::runs::Runs`], which [`Bridge`] implements;
//! reactions and typing go through the surface (and its Discord client's rate limits) on a
//! channel [`Core::allowed`] checked; capabilities are minted and revoked through `Core`; the
//! prompt's transcript is read through the surface. Runners: [`command`] (a program with the
//! prompt on stdin) and [`openai`] (an OpenAI-compatible chat endpoint with tool calls).
//! Every arrival is also offered to the token-count warmer ([`warm`]), so an `openai` run's
//! first prompt finds its messages' token counts.

#![warn(missing_docs)]

pub mod agents;
mod burst;
pub mod command;
pub mod demo;
mod ended;
pub mod handoff;
pub mod instructions;
pub mod metering;
pub mod notes;
pub mod openai;
mod outage;
pub mod prompt;
mod prompt_hooks;
mod queue;
mod run_rows;
pub mod scheduled;
pub mod stream;
pub mod summaries;
pub mod threads;
pub mod warm;

use std::collections::HashMap;
use std::path::PathBuf;
use std::sync::{Arc, Mutex, MutexGuard};
use std::time::Duration;

use entity::Snowflake;
use serde_json::json;
use switchboard_config::{
    AgentConfig, AgentName, MissedTriggers, ReplyInThread, Runner, StreamMode,
};
use switchboard_engine::auth::{random_hex, CapabilityGrant};
use switchboard_engine::live::Live;
use switchboard_engine::runs::{
    AbortOutcome, AbortTarget, Arrival, RunGate, RunState, RunView, Runs, Trigger,
};
use switchboard_engine::surface::AllowedChannel;
use switchboard_engine::{CallContext, Core};
use switchboard_records::TriggerClaim;
use switchboard_store::{BotTurn, Claim, MemoryStore, TriggerStore};
use tokio::sync::{oneshot, Semaphore};

use command::{run_command_with, CommandSpec, RunOutcome};

/// How often the typing indicator is refreshed (Discord shows it for about 10 s).
const TYPING_EVERY: Duration = Duration::from_secs(8);
const WORKING: &str = "⏳";
const DONE: &str = "✅";
const FAILED: &str = "❌";
const INTERRUPTED: &str = "⚠️";

/// What this node knows of a session for the loop guard; the count itself is the store's
/// ([`switchboard_store::BotTurnStore`]), the cluster's.
#[derive(Default)]
struct SessionQueue {
    /// The newest message a person wrote in the session that this node received: the next
    /// bot turn it counts starts the store's count again after it.
    person_since: Option<Snowflake>,
}

/// What claiming a trigger's message decided.
enum Claimed {
    /// Answer it once the record is durable.
    Won(switchboard_store::Durable),
    /// Answer it; nothing to record (no message, or a resumed workflow).
    Unrecorded,
    /// Leave it: answered before, or its answer could not be recorded.
    Leave,
}

/// A run being executed: its id, what it waits on before it acts, its capability token, and
/// how it shows its own answer.
#[derive(Clone, Copy)]
struct RunTicket<'a> {
    /// `run-<hex>`.
    id: &'a str,
    /// The messages of a burst it answers together before `trigger`, the newest (in arrival
    /// order; empty for one message).
    earlier: &'a [Trigger],
    /// Its usage and budgets.
    meter: Option<&'a metering::Meter>,
    gate: &'a RunGate,
    token: &'a str,
    voice: &'a stream::Voice,
    /// The agent that answers.
    agent: &'a agents::RunAgent,
}

/// How long after a run ends its reply may take to be stored (the gateway's echo of the bot's
/// own message), when another node reads what the run posted.
const ECHO_WAIT_MS: u64 = 10_000;

/// Why a built-in runner's run failed when its own token was refused.
const TOKEN_REFUSED: &str = "the run's own token was refused";

/// Now, ms since the Unix epoch.
fn now_ms() -> u64 {
    std::time::SystemTime::now()
        .duration_since(std::time::UNIX_EPOCH)
        .map_or(0, |since| since.as_millis() as u64)
}

/// Runs agents for Discord messages.
#[derive(Clone)]
pub struct Bridge {
    inner: Arc<Inner>,
}

struct Inner {
    /// `[agent]` as of the last config (re)load: each run takes it once when it starts.
    config: Live<AgentConfig>,
    core: Arc<Core>,
    tool_server_url: String,
    sessions: Mutex<HashMap<Snowflake, SessionQueue>>,
    /// `agent.max_concurrent_runs`: the claim loop takes a row only with a permit in hand.
    runs: Arc<Semaphore>,
    /// The runs, as rows of the store's run queue (a store in memory until
    /// [`Bridge::with_run_queue`]).
    queue: queue::RunQueue,
    /// Where runs execute: the service's runtime, not the gateway thread that enqueues them.
    runtime: tokio::runtime::Handle,
    /// The durable record of answered triggers (the store's claims); without it, only this
    /// process's queues keep a message from being answered twice.
    answers: Option<Arc<dyn TriggerStore>>,
    /// Where model usage is kept and budgets are summed ([`Bridge::keep_usage_in`]).
    usage: std::sync::OnceLock<Arc<dyn switchboard_store::UsageStore>>,
    /// Where `/agent set` bindings are kept ([`Bridge::keep_bindings_in`]; without it, a
    /// store in memory).
    bindings: std::sync::OnceLock<Arc<dyn switchboard_store::AgentBindingStore>>,
    /// `agent.handoff` sub-runs going, by the run that asked.
    handoffs: handoff::Handoffs,
    /// The node's record of recently ended sub-runs and chat-API runs.
    ended: ended::EndedRuns,
    /// Where sessions' compaction summaries (and the agent's notes) are kept; without it, a
    /// summary serves only the run that wrote it.
    memory: Option<Arc<dyn MemoryStore>>,
    /// Counts stored messages' tokens off the runs' path ([`warm`]); started on first use
    /// (its thread holds the bridge weakly).
    warmer: std::sync::OnceLock<warm::Warmer>,
}

/// Builds the `openai` runner's tokenizer off the runtime's threads (a few hundred
/// milliseconds, once per process), so that the first run does not wait for it.
fn warm_counter(config: &AgentConfig) {
    if let Runner::OpenAi(runner) = &config.runner {
        let model = runner.model.clone();
        if let Ok(runtime) = tokio::runtime::Handle::try_current() {
            drop(runtime.spawn_blocking(move || openai::counter(&model)));
        }
    }
}

impl Bridge {
    /// Must be called inside the runtime the runs should execute on. Runs reach the tool
    /// server at `tool_server_url` (their `SWITCHBOARD_URL`).
    pub fn new(config: AgentConfig, core: Arc<Core>, tool_server_url: String) -> Self {
        Bridge::build(config, core, tool_server_url, None)
    }

    /// [`Bridge::new`], remembering in `answers` every message it takes to answer, so none is
    /// answered twice across reconnects and restarts. A message is taken when its run starts
    /// (or when a full queue turns it away with a notice): a run that crashes half-way is not
    /// started again.
    pub fn with_answers(
        config: AgentConfig,
        core: Arc<Core>,
        tool_server_url: String,
        answers: Arc<dyn TriggerStore>,
    ) -> Self {
        Bridge::build(config, core, tool_server_url, Some(answers))
    }

    fn build(
        config: AgentConfig,
        core: Arc<Core>,
        tool_server_url: String,
        answers: Option<Arc<dyn TriggerStore>>,
    ) -> Self {
        let runs = Arc::new(Semaphore::new(config.max_concurrent_runs));
        warm_counter(&config);
        Bridge {
            inner: Arc::new(Inner {
                config: Live::new(config),
                core,
                tool_server_url,
                sessions: Mutex::new(HashMap::new()),
                runs,
                runtime: tokio::runtime::Handle::current(),
                answers,
                usage: std::sync::OnceLock::new(),
                bindings: std::sync::OnceLock::new(),
                handoffs: handoff::Handoffs::default(),
                ended: ended::EndedRuns::new(ended::MAX_ENDED_RUNS),
                memory: None,
                warmer: std::sync::OnceLock::new(),
                queue: queue::RunQueue::new(
                    Arc::new(switchboard_store::MemoryBackend::new(Default::default())),
                    "local".to_owned(),
                    false,
                ),
            }),
        }
    }

    /// Keeps sessions' compaction summaries in `memory` (read back to start later prompts).
    /// Call right after building the bridge, before it is cloned.
    #[must_use]
    pub fn with_memory(mut self, memory: Arc<dyn MemoryStore>) -> Self {
        match Arc::get_mut(&mut self.inner) {
            Some(inner) => inner.memory = Some(memory),
            None => tracing::error!(
                "Bridge::with_memory called on a shared bridge; summaries are not stored"
            ),
        }
        self
    }

    /// Keeps the runs in `store` as node `node` (issue 23): a session's runs happen one at a
    /// time, in arrival order, on whichever node sharing the store claims them; `shared`: other
    /// nodes write to it (their rows are looked for often). Call right after building the
    /// bridge, before it is cloned; then [`Bridge::start_runs`].
    #[must_use]
    pub fn with_run_queue(
        mut self,
        store: Arc<dyn switchboard_store::RunStore>,
        node: String,
        shared: bool,
    ) -> Self {
        match Arc::get_mut(&mut self.inner) {
            Some(inner) => inner.queue = queue::RunQueue::new(store, node, shared),
            None => tracing::error!(
                "Bridge::with_run_queue called on a shared bridge; runs stay in memory"
            ),
        }
        self
    }

    /// A run's gate over the claims of the messages it answers that are still being written
    /// (`durables`): open once every one is durable, shut for good (logged) when one fails, so
    /// either the whole batch is recorded as answered before the run acts, or it does not act.
    /// A claim is made when its trigger is queued (at once with SQLite, after one round trip
    /// with PostgreSQL); the run may start while it is written, but acts only through the gate.
    fn gate_of(durables: Vec<(Snowflake, switchboard_store::Durable)>) -> RunGate {
        if durables.is_empty() {
            return RunGate::open();
        }
        let (opener, gate) = RunGate::closed();
        tokio::spawn(async move {
            for (message_id, durable) in durables {
                if let Err(error) = durable.await {
                    tracing::error!(message = ?message_id, "not answering, stopping the run: {error}");
                    return;
                }
                tracing::trace!(trigger = ?message_id, "trigger recorded");
            }
            opener.open();
        });
        gate
    }

    /// Claims one trigger's message in the store of answered triggers.
    async fn claim(&self, trigger: &Trigger) -> Claimed {
        let (Some(answers), Some(message_id), None) = (
            self.inner.answers.clone(),
            trigger.message_id,
            trigger.workflow_id.as_ref(),
        ) else {
            return Claimed::Unrecorded;
        };
        let channel_id = trigger.channel_id;
        let claim = TriggerClaim {
            channel_id,
            message_id,
            claimed_ms: switchboard_engine::clock::now_ms(),
        };
        let claimed = self
            .through_outage("claim a trigger", || answers.claim_trigger(claim.clone()))
            .await;
        match claimed {
            Ok(Claim::Won(durable)) => Claimed::Won(durable),
            Ok(Claim::Taken) => {
                tracing::info!(message = %message_id, session = %channel_id, "this message was answered before; not answering it again");
                Claimed::Leave
            }
            // At most once: a trigger whose answer cannot be recorded is not answered, or a
            // restart could answer it a second time.
            Err(error) => {
                tracing::error!(message = %message_id, "not answering: {error}");
                Claimed::Leave
            }
        }
    }

    /// Takes the trigger (claims its message) and waits for its record to be durable: true
    /// when it may be answered.
    async fn take_durably(&self, trigger: &Trigger) -> bool {
        match self.claim(trigger).await {
            Claimed::Leave => false,
            Claimed::Unrecorded => true,
            Claimed::Won(durable) => match durable.await {
                Ok(()) => true,
                Err(error) => {
                    tracing::error!(message = ?trigger.message_id, "not answering: {error}");
                    false
                }
            },
        }
    }

    /// Whether a message that was missed live (fetched by a backfill) is still to be answered:
    /// `agent.missed_triggers = "reply"` and younger than `agent.missed_max_age_s`.
    fn answers_missed(&self, message: &Arrival<'_>) -> bool {
        let config = self.inner.config.load();
        if config.missed_triggers == MissedTriggers::Ignore {
            tracing::info!(message = %message.message_id, session = %message.channel_id, "a trigger missed while the gateway was away is not answered (agent.missed_triggers = \"ignore\")");
            return false;
        }
        let age_ms =
            switchboard_engine::clock::now_ms().saturating_sub(message.message_id.timestamp_ms());
        let max_ms = u64::try_from(config.missed_max_age.as_millis()).unwrap_or(u64::MAX);
        if age_ms > max_ms {
            tracing::info!(message = %message.message_id, session = %message.channel_id, age_s = age_ms / 1000, "a trigger missed while the gateway was away is too old to answer (agent.missed_max_age_s)");
            return false;
        }
        true
    }

    /// Keeps every model call's usage in `store` and checks `[budgets]` against it before
    /// each run. Once only.
    pub fn keep_usage_in(&self, store: Arc<dyn switchboard_store::UsageStore>) -> bool {
        self.inner.usage.set(store).is_ok()
    }

    /// Opens the run's meter: `Ok(None)` without a usage store; `Err` when a `[budgets]` cap
    /// refuses the run (its caller is not exempt).
    async fn open_meter(
        &self,
        trigger: &Trigger,
        run_id: &str,
        session: Snowflake,
        agent: &str,
        config: &AgentConfig,
    ) -> Result<Option<metering::Meter>, metering::Refused> {
        let Some(store) = self.inner.usage.get() else {
            return Ok(None);
        };
        let settings = self.inner.core.settings();
        let whole = settings.config();
        // A schedule's run with no person behind it is charged to no user.
        let user = (Some(trigger.author_id) != self.bot_id() && trigger.author_id.get() != 0)
            .then(|| trigger.author_id.to_string());
        let guild = self
            .inner
            .core
            .surface()
            .session(session)
            .and_then(|info| info.guild_id)
            .map(|guild| guild.to_string());
        let model = match &config.runner {
            Runner::OpenAi(runner) => runner.model.clone(),
            Runner::Command { program, .. } => program.clone(),
            Runner::Demo => "demo".to_owned(),
        };
        let charged = metering::Charged {
            to: switchboard_records::UsageCharge {
                run_id: run_id.to_owned(),
                agent: agent.to_owned(),
                user,
                session: Some(session.to_string()),
                guild,
                model,
            },
            price: config.price,
        };
        let exempt = whole.budgets.exempts_user(
            trigger.author_id,
            &trigger.author_roles,
            &whole.discord.admins,
        );
        metering::Meter::open(Arc::clone(store), charged, &whole.budgets, exempt)
            .await
            .map(Some)
    }

    /// Puts reloaded `[agent]` settings in force: triggers, queues and error replies at once,
    /// runner, scope and timeout from the next run (a run in progress keeps its own).
    /// `agent.max_concurrent_runs` is fixed at start; a change to it is not applied here.
    pub fn set_config(&self, config: AgentConfig) {
        warm_counter(&config);
        self.inner.config.store(Arc::new(config));
    }

    /// The `[agent]` settings in force now.
    pub fn config(&self) -> Arc<AgentConfig> {
        self.inner.config.load()
    }

    /// Keeps `/agent set` bindings in `store` (the service's store: read at each run's start,
    /// so they hold on every node and across restarts). Once only, before the first run.
    pub fn keep_bindings_in(&self, store: Arc<dyn switchboard_store::AgentBindingStore>) -> bool {
        self.inner.bindings.set(store).is_ok()
    }

    fn bindings(&self) -> &dyn switchboard_store::AgentBindingStore {
        self.inner
            .bindings
            .get_or_init(|| Arc::new(switchboard_store::MemoryBackend::new(Default::default())))
            .as_ref()
    }

    /// The agent that answers in `session` now (what `/agent` shows).
    pub async fn agent_for(&self, session: Snowflake) -> agents::RunAgent {
        agents::for_session(&self.inner.core, self.bindings(), self.config(), session).await
    }

    /// `/agent set NAME` (`Some`) or `/agent reset` (`None`) for `session`: its next runs use
    /// that agent, on every node. The caller has checked that an admin asked.
    pub async fn bind_agent(
        &self,
        session: Snowflake,
        name: Option<&str>,
    ) -> Result<(), agents::BindError> {
        let config = self.inner.core.settings().config().clone();
        agents::bind(&config, self.bindings(), session, name).await
    }

    fn sessions(&self) -> MutexGuard<'_, HashMap<Snowflake, SessionQueue>> {
        self.inner
            .sessions
            .lock()
            .unwrap_or_else(std::sync::PoisonError::into_inner)
    }

    /// The bot's own user id, once the platform knows it.
    pub fn bot_id(&self) -> Option<Snowflake> {
        self.inner.core.surface().bot_user_id()
    }

    /// Whether a message should start a run: a real mention of the bot or a reply to it (in
    /// guilds), any message in an active channel, a DM, or (with `agent.reply_in_thread` on) a
    /// thread the bot started; never the bot's own messages, and other bots' only when
    /// `agent.allow_bots` lists them. The allowlist is applied later.
    pub fn should_trigger(&self, message: &Arrival<'_>) -> bool {
        let Some(bot) = self.bot_id() else {
            return false;
        };
        let allowed_bot = self.config().allow_bots.contains(&message.author_id);
        if message.author_id == bot || (message.author_is_bot && !allowed_bot) {
            return false;
        }
        // `[sessions.NAME] require_mention` (a thread's channel's when it has none) overrides
        // the channel's rule.
        let require_mention = {
            let settings = self.inner.core.settings();
            let sessions = &settings.config().sessions;
            switchboard_config::session_settings(sessions, message.channel_id)
                .and_then(|s| s.require_mention)
                .or_else(|| {
                    message
                        .parent_id
                        .and_then(|parent| switchboard_config::session_settings(sessions, parent))
                        .and_then(|s| s.require_mention)
                })
        };
        match require_mention {
            Some(false) => return true,
            Some(true) => {}
            None => {
                if self.answers_unmentioned(
                    message.channel_id,
                    message.in_guild,
                    message.parent_id,
                    bot,
                ) {
                    return true;
                }
            }
        }
        let mentioned = message.content.contains(&format!("<@{bot}>"))
            || message.content.contains(&format!("<@!{bot}>"));
        mentioned || message.replies_to_bot
    }

    /// Whether a person's message in `channel` starts a run without mentioning the bot: in a
    /// DM, an active channel (or a thread of one), or a thread the bot started when threads are
    /// conversations (`agent.reply_in_thread` is not `never`).
    fn answers_unmentioned(
        &self,
        channel: Snowflake,
        in_guild: bool,
        parent: Option<Snowflake>,
        bot: Snowflake,
    ) -> bool {
        if !in_guild {
            return true;
        }
        let config = self.config();
        let active = &config.active_channel_ids;
        if active.contains(&channel) || parent.is_some_and(|p| active.contains(&p)) {
            return true;
        }
        parent.is_some()
            && config.reply_in_thread.threads_are_conversations()
            && self
                .inner
                .core
                .surface()
                .thread(channel)
                .and_then(|thread| thread.state.owner_id)
                == Some(bot)
    }

    /// Where people must mention the bot for it to answer, seen from `session` (what the demo
    /// agent's help says): [`Bridge::answers_unmentioned`], as for a person's message.
    fn mentions(&self, session: Snowflake) -> demo::Mentions {
        let info = self.inner.core.surface().session(session);
        let free_here = self.bot_id().is_some_and(|bot| {
            self.answers_unmentioned(
                session,
                info.as_ref().is_none_or(|info| info.guild_id.is_some()),
                info.as_ref().and_then(|info| info.parent_id),
                bot,
            )
        });
        demo::Mentions {
            needed_here: !free_here,
            needed_in_new_threads: !self.config().reply_in_thread.threads_are_conversations(),
        }
    }

    /// A person wrote `message` in `channel`: the loop guard's count starts again (in the
    /// store, at the next bot turn counted here).
    fn person_spoke(&self, channel: Snowflake, message: Snowflake) {
        let mut sessions = self.sessions();
        let known = &mut sessions.entry(channel).or_default().person_since;
        *known = (*known).max(Some(message));
    }

    /// Counts a run for another bot's message, up to `agent.max_bot_turns` in a row,
    /// cluster-wide: two bots that answer each other stop there instead of looping for ever,
    /// whichever nodes receive their messages. Called once the trigger is claimed, so a
    /// message two nodes received is counted once. A store that cannot count stops the turn:
    /// a loop must not run on because the store is away. `person_since`: the newest message a
    /// person wrote in the session when the bot's message arrived.
    async fn bot_turn(&self, trigger: &Trigger, person_since: Option<Snowflake>) -> BotTurn {
        let Some(message) = trigger.message_id else {
            return BotTurn::Answer;
        };
        let session = trigger.channel_id;
        let max = self.config().max_bot_turns;
        let store = &self.inner.queue.store;
        match self
            .through_outage("count a bot's turn", || {
                store.count_bot_turn(switchboard_store::BotMessage {
                    session,
                    message,
                    person_since,
                    max,
                })
            })
            .await
        {
            Ok(turn) => turn,
            Err(error) => {
                tracing::error!(%session, %message, "cannot count a bot's turn in the store; the bot is not answered: {error}");
                BotTurn::Stop
            }
        }
    }

    /// The loop guard's notice, said once when it stops answering bots.
    fn loop_guard_notice(&self) -> String {
        format!(
            "I've answered other bots {} times in a row here, so I'll stop answering bots until a person writes in this channel.",
            self.config().max_bot_turns
        )
    }

    /// The trigger with its message's current text when it was edited before the run started
    /// (a run reads the text once, when it starts; later edits are ignored).
    fn edited(&self, channel: AllowedChannel, trigger: &Trigger) -> Option<Trigger> {
        if trigger.workflow_id.is_some() {
            return None;
        }
        let message = self
            .inner
            .core
            .surface()
            .message(channel, trigger.message_id?)?;
        message.edited_timestamp.as_ref()?;
        let text = self.inner.core.readable(&message.content);
        (text != trigger.text.as_str()).then(|| Trigger {
            text: text.into_owned(),
            ..trigger.clone()
        })
    }

    /// The messages a run answers, each with its text as edited so far: `earlier` (a burst's),
    /// then `trigger` (already read as edited by the caller when it wants that).
    fn as_edited(
        &self,
        channel: AllowedChannel,
        earlier: &[Trigger],
        trigger: &Trigger,
    ) -> Vec<Trigger> {
        earlier
            .iter()
            .chain(std::iter::once(trigger))
            .map(|t| self.edited(channel, t).unwrap_or_else(|| t.clone()))
            .collect()
    }

    /// Queues a run for `trigger` in its session (a row of the store's run queue, written in
    /// arrival order). A missed trigger finding the queue full is left with a log line rather
    /// than a notice: a backfill can bring many at once.
    fn queue(&self, trigger: Trigger, missed: bool) {
        self.queue_reported(trigger, missed, None);
    }

    /// Queues a run for `trigger` and answers what it did once it ends (a schedule's firing):
    /// the messages it posted, its final text, or why it failed or could not start. A full
    /// queue answers at once with the reason.
    pub fn run_reported(
        &self,
        trigger: Trigger,
    ) -> oneshot::Receiver<switchboard_schedule::RunReport> {
        let (report, reported) = oneshot::channel();
        self.queue_reported(trigger, false, Some(report));
        reported
    }

    fn queue_reported(
        &self,
        trigger: Trigger,
        missed: bool,
        report: Option<oneshot::Sender<switchboard_schedule::RunReport>>,
    ) {
        self.queue_admission(queue::Admission {
            trigger,
            missed,
            bot: None,
            report,
        });
    }

    fn queue_admission(&self, admission: queue::Admission) {
        let sender = self.admitter();
        match sender.try_send(admission) {
            Ok(()) => {}
            Err(
                tokio::sync::mpsc::error::TrySendError::Full(admission)
                | tokio::sync::mpsc::error::TrySendError::Closed(admission),
            ) => {
                let queue::Admission {
                    trigger, report, ..
                } = admission;
                tracing::warn!(session = %trigger.channel_id, message = ?trigger.message_id, "{} triggers wait to be queued in the store; this one is turned away", queue::ADMIT_BACKLOG);
                if let Some(report) = report {
                    let _ = report.send(report_error(
                        "the node's run queue is far behind the store; the run did not start",
                    ));
                    return;
                }
                let bridge = self.clone();
                self.inner.runtime.spawn(async move {
                    bridge
                        .refuse(
                            trigger,
                            None,
                            "I'm too busy to take this right now; please ask again in a moment.",
                        )
                        .await;
                });
            }
        }
    }

    /// The sender of the node's admissions: one task claims and queues them in arrival order,
    /// so that a channel's runs keep the order its messages came in. Starts the claim loop too.
    fn admitter(&self) -> tokio::sync::mpsc::Sender<queue::Admission> {
        let mut admit = self
            .inner
            .queue
            .admit
            .lock()
            .unwrap_or_else(std::sync::PoisonError::into_inner);
        if let Some(sender) = admit.as_ref().filter(|sender| !sender.is_closed()) {
            return sender.clone();
        }
        let (sender, mut admissions) = tokio::sync::mpsc::channel(queue::ADMIT_BACKLOG);
        *admit = Some(sender.clone());
        drop(admit);
        let weak = Arc::downgrade(&self.inner);
        self.inner.runtime.spawn(async move {
            while let Some(admission) = admissions.recv().await {
                let Some(inner) = weak.upgrade() else {
                    return;
                };
                Bridge { inner }.admit(admission).await;
            }
        });
        self.start_runs();
        sender
    }

    /// Claims the trigger's message (at most once, cluster-wide) and queues its run row.
    async fn admit(&self, admission: queue::Admission) {
        let queue::Admission {
            trigger,
            missed,
            bot,
            report,
        } = admission;
        let durable = match self.claim(&trigger).await {
            Claimed::Leave => {
                if let Some(report) = report {
                    let _ = report.send(report_error("its trigger was answered before"));
                }
                return;
            }
            Claimed::Unrecorded => None,
            Claimed::Won(durable) => Some(durable),
        };
        if let Some(person_since) = bot {
            match self.bot_turn(&trigger, person_since).await {
                BotTurn::Answer => {}
                BotTurn::Stop => return,
                BotTurn::StopAndSay => {
                    let notice = self.loop_guard_notice();
                    self.refuse(trigger, durable, &notice).await;
                    return;
                }
            }
        }
        let run_id = match random_hex(8) {
            Ok(hex) => format!("run-{hex}"),
            Err(error) => {
                tracing::error!(session = %trigger.channel_id, "cannot draw random bytes for a run id: {error}");
                if let Some(report) = report {
                    let _ = report.send(report_error("no run id could be drawn"));
                }
                self.refuse(
                    trigger,
                    durable,
                    "I couldn't start on this; please ask again.",
                )
                .await;
                return;
            }
        };
        let queue = &self.inner.queue;
        // Kept before the row exists: this node's loop may claim it the moment it does.
        if let (Some(message), Some(durable)) = (trigger.message_id, durable) {
            queue.keep_durable(&run_id, message, durable);
        }
        if let Some(report) = report {
            queue.keep_report(&run_id, report);
        }
        let limit = self.config().queue_per_session;
        let row = switchboard_records::NewRun {
            id: run_id.clone(),
            session: trigger.channel_id.to_string(),
            agent: trigger.agent.as_ref().map_or_else(
                || switchboard_config::LEGACY_AGENT_NAME.to_owned(),
                ToString::to_string,
            ),
            trigger: queue::encode(&trigger),
            requested_by: Some(format!("user:{}", trigger.author_id)),
            parent_run: None,
            enqueued_ms: now_ms(),
        };
        let enqueued = self
            .through_outage("queue a run", || {
                queue.store.enqueue_run(row.clone(), limit)
            })
            .await;
        let refusal = match enqueued {
            // The run id is new: a conflict is this row, written by a try whose answer was lost.
            Err(error) if error.kind() == switchboard_store::StoreErrorKind::Conflict => {
                tracing::info!(run = %run_id, "the run was queued by a try whose answer was lost");
                queue.wake.notify_one();
                return;
            }
            Ok(switchboard_store::Enqueued::Queued(_)) => {
                tracing::trace!(run = %run_id, session = %trigger.channel_id, "run queued");
                queue.wake.notify_one();
                return;
            }
            Ok(switchboard_store::Enqueued::Full { .. }) => {
                // A missed trigger is told too: its claim is taken, so nothing else would
                // ever answer it, and its asker would wait for nothing.
                if missed {
                    tracing::info!(session = %trigger.channel_id, message = ?trigger.message_id, "a missed trigger finds the session's queue full; told to ask again");
                }
                format!(
                    "I'm busy in this channel and {limit} more requests are already waiting; please ask again when I'm done."
                )
            }
            Err(error) => {
                tracing::error!(session = %trigger.channel_id, message = ?trigger.message_id, "cannot queue the run in the store: {error}");
                "I couldn't queue this request (my store is unavailable); please ask again in a moment.".to_owned()
            }
        };
        let durable = queue
            .take_durables(&run_id)
            .into_iter()
            .next()
            .map(|(_, durable)| durable);
        if let Some(report) = queue.take_report(&run_id) {
            let _ = report.send(report_error(&format!(
                "the session's queue was full ({limit} runs waiting), or the store refused the run; the run did not start"
            )));
            return;
        }
        self.refuse(trigger, durable, &refusal).await;
    }

    /// Answers a trigger that gets no run with `text` as its one answer: once its claim is
    /// durable (`durable`: claimed already; `None`: claimed now).
    async fn refuse(
        &self,
        trigger: Trigger,
        durable: Option<switchboard_store::Durable>,
        text: &str,
    ) {
        if self.inner.core.allowed(trigger.channel_id).await.is_err() {
            return;
        }
        let recorded = match durable {
            Some(durable) => durable.await.is_ok(),
            None => self.take_durably(&trigger).await,
        };
        if !recorded {
            return;
        }
        self.post_reply(&stream::reply_context(&trigger), &trigger, text)
            .await;
    }

    /// Starts the node's claim loop (once): it takes the oldest claimable run row — queued here,
    /// on another node, or before a restart —, runs it, and sweeps expired leases. Runs until
    /// the bridge is dropped.
    pub fn start_runs(&self) {
        if self
            .inner
            .queue
            .started
            .swap(true, std::sync::atomic::Ordering::AcqRel)
        {
            return;
        }
        let weak = Arc::downgrade(&self.inner);
        self.inner.runtime.spawn(claim_loop(weak));
    }

    /// [`Bridge::start_runs`] on a store no other process can hold (SQLite: one process at a
    /// time): the rows still running there were left by an earlier process that died, so
    /// nobody can be running them; their leases are given back first, and the loop's first
    /// sweep takes them up under `agent.interrupted` at once rather than after the lease.
    pub fn start_runs_alone(&self) {
        let this = self.clone();
        self.inner.runtime.spawn(async move {
            this.release_orphans().await;
            this.start_runs();
        });
    }

    async fn release_orphans(&self) {
        let queue = &self.inner.queue;
        let running = match queue
            .runs(switchboard_records::RunFilter {
                state: Some(switchboard_records::RunState::Running),
                ..Default::default()
            })
            .await
        {
            Ok(running) => running,
            Err(error) => {
                tracing::warn!("cannot look for runs an earlier process left running: {error}; their leases will expire");
                return;
            }
        };
        for run in running {
            let Some(node) = run.node.as_deref() else {
                continue;
            };
            if let Err(error) = give_back_lease(queue, &run.id, node).await {
                tracing::warn!(run = %run.id, "cannot give back the lease of a run an earlier process left running: {error}");
            } else {
                tracing::info!(run = %run.id, node, "a run an earlier process left running is taken up as interrupted");
            }
        }
    }

    /// Stops the node's part of the run queue for a shutdown: no row is claimed any more
    /// (rows queued meanwhile stay queued for the next node), the runs this node executes get
    /// up to `grace` to end, and those still going then give their leases back, so that the
    /// next sweep — this node restarted, or another — takes them up under `agent.interrupted`
    /// at once instead of after the lease. Returns how many runs were still going.
    pub async fn stop_runs(&self, grace: Option<Duration>) -> usize {
        let queue = &self.inner.queue;
        queue
            .stopping
            .store(true, std::sync::atomic::Ordering::Release);
        queue.wake.notify_one();
        let grace = grace.unwrap_or(queue::SHUTDOWN_GRACE);
        let started = std::time::Instant::now();
        while !queue.executing().is_empty() && started.elapsed() < grace {
            tokio::time::sleep(Duration::from_millis(50)).await;
        }
        queue
            .released
            .store(true, std::sync::atomic::Ordering::Release);
        let rows: Vec<String> = queue
            .executing()
            .values()
            .flat_map(|run| run.rows.clone())
            .collect();
        if rows.is_empty() {
            return 0;
        }
        tracing::warn!(
            runs = queue.executing().len(),
            "runs still going at shutdown; their leases are given back and they are taken up as interrupted (agent.interrupted)"
        );
        for row in &rows {
            if let Err(error) = give_back_lease(queue, row, &queue.node).await {
                tracing::warn!(run = %row, "cannot give back a run's lease: {error}; it is taken up when the lease ends");
            }
        }
        queue.executing().len()
    }

    /// The lease a claimed run holds: `[cluster] lease_s`.
    fn lease(&self) -> Duration {
        self.inner.core.settings().config().cluster.lease
    }

    /// Claims rows while a run permit is free; whether any was claimed.
    async fn claim_rows(&self) {
        let queue = &self.inner.queue;
        let lease = self.lease();
        loop {
            if queue.stopping.load(std::sync::atomic::Ordering::Acquire) {
                return;
            }
            let Ok(permit) = Arc::clone(&self.inner.runs).try_acquire_owned() else {
                return;
            };
            let lease_ms = u64::try_from(lease.as_millis()).unwrap_or(u64::MAX);
            match queue
                .store
                .claim_next_run(queue.lease(now_ms(), lease_ms))
                .await
            {
                Ok(Some(row)) => {
                    let bridge = self.clone();
                    self.inner
                        .runtime
                        .spawn(async move { bridge.execute_row(row, permit).await });
                }
                Ok(None) => return,
                Err(error) => {
                    tracing::warn!(
                        "cannot claim a run from the store: {error}; trying again shortly"
                    );
                    return;
                }
            }
        }
    }

    /// Runs a claimed row (and the rows of a burst it answers together), renewing their lease
    /// meanwhile, and ends them.
    async fn execute_row(
        &self,
        row: switchboard_records::Run,
        permit: tokio::sync::OwnedSemaphorePermit,
    ) {
        let queue = &self.inner.queue;
        let Some(head) = queue::decode(&row.trigger) else {
            tracing::error!(run = %row.id, "a queued run's trigger does not read; ending it as failed");
            self.end_rows(
                &[row.id],
                "failed",
                Some("its trigger does not read".to_owned()),
                None,
            )
            .await;
            return;
        };
        let channel = head.channel_id;
        let agent = self.agent_for(channel).await;
        let report = queue.take_report(&row.id);
        let joined = self
            .join_burst(&row, &head, report.is_some(), &agent.config)
            .await;
        let mut rows = vec![row.id.clone()];
        let mut triggers = vec![head];
        for (id, trigger) in joined {
            rows.push(id);
            triggers.push(trigger);
        }
        let durables: Vec<_> = rows.iter().flat_map(|id| queue.take_durables(id)).collect();
        let gate = Bridge::gate_of(durables);
        let (abort, aborted) = oneshot::channel();
        queue.executing().insert(
            row.id.clone(),
            queue::Executing {
                session: channel,
                rows: rows.clone(),
                askers: triggers.iter().map(|t| t.author_id).collect(),
                owner: triggers
                    .last()
                    .map(|t| t.author_name.clone())
                    .unwrap_or_default(),
                abort: Some(abort),
                nonces_of: queue::nonces_of(&row.trigger),
            },
        );
        let heartbeat =
            self.inner
                .runtime
                .spawn(heartbeat(self.clone(), row.id.clone(), rows.clone()));
        let run = self.run(triggers, agent, &row.id, aborted, gate, permit);
        let (state, text) = match report {
            Some(report) => {
                let mut ended = None;
                let done = scheduled::reported(&row.id, async {
                    ended = Some(run.await);
                })
                .await;
                let _ = report.send(done);
                ended.unwrap_or(("failed", None))
            }
            None => run.await,
        };
        heartbeat.abort();
        queue.executing().remove(&row.id);
        let usage = queue.take_usage(&row.id);
        self.end_rows(&rows, state, text, usage).await;
        queue.wake.notify_one();
    }

    /// The rows queued right behind `row` in its session that its run answers together (a
    /// burst), joined to it in the store.
    async fn join_burst(
        &self,
        row: &switchboard_records::Run,
        head: &Trigger,
        reported: bool,
        config: &AgentConfig,
    ) -> Vec<(String, Trigger)> {
        if config.batch == switchboard_config::BatchMode::Off || !burst::joins(head) || reported {
            return Vec::new();
        }
        let store = &self.inner.queue.store;
        let session = Some(row.session.clone());
        let queued = self
            .inner
            .queue
            .runs(switchboard_records::RunFilter {
                session: session.clone(),
                state: Some(switchboard_records::RunState::Queued),
                ..Default::default()
            })
            .await
            .unwrap_or_default();
        if queued.is_empty() {
            return Vec::new();
        }
        // They queued while the session was busy only when the run before this one was still
        // going when this one was queued.
        let before = store
            .runs(switchboard_records::RunFilter {
                session,
                before_seq: Some(row.seq),
                limit: 1,
                ..Default::default()
            })
            .await
            .unwrap_or_default();
        let after_a_run = before
            .first()
            .is_some_and(|prev| prev.finished_ms.is_none_or(|end| end >= row.enqueued_ms));
        let mut behind: Vec<(switchboard_records::Run, Trigger)> = queued
            .into_iter()
            .filter(|r| r.seq > row.seq)
            .filter_map(|r| {
                let trigger = queue::decode(&r.trigger)?;
                Some((r, trigger))
            })
            .collect();
        behind.sort_by_key(|(r, _)| r.seq);
        let chosen: Vec<String> = burst::gather(head, reported, &behind, config, after_a_run)
            .into_iter()
            .map(|(r, _)| r.id.clone())
            .collect();
        if chosen.is_empty() {
            return Vec::new();
        }
        let queue = &self.inner.queue;
        match store
            .join_runs(switchboard_records::RunJoin {
                held: row.id.clone(),
                node: queue.node.clone(),
                run_ids: chosen,
                now_ms: now_ms(),
            })
            .await
        {
            Ok(joined) => joined
                .into_iter()
                .filter_map(|r| {
                    let trigger = queue::decode(&r.trigger)?;
                    Some((r.id, trigger))
                })
                .collect(),
            Err(error) => {
                tracing::warn!(run = %row.id, "cannot take the burst behind the run: {error}; its messages get runs of their own");
                Vec::new()
            }
        }
    }

    /// Ends rows this node holds as `outcome` (as `run.finished` names it); the first (the
    /// run's own) keeps `usage`, the burst's rows it answered together none (counted once).
    async fn end_rows(
        &self,
        rows: &[String],
        outcome: &str,
        text: Option<String>,
        usage: Option<switchboard_records::RunUsage>,
    ) {
        let queue = &self.inner.queue;
        for (n, id) in rows.iter().enumerate() {
            let end = switchboard_records::RunEnd {
                state: stored_state(outcome),
                final_text: text.clone(),
                usage: usage.filter(|_| n == 0),
                at_ms: now_ms(),
            };
            // The answer is posted: its end must be recorded, or the run is taken up as
            // interrupted once its lease runs out and its question is answered twice.
            let recorded = self
                .through_outage("record a run's end", || {
                    queue.store.finish_run(id, &queue.node, end.clone())
                })
                .await;
            match recorded {
                Ok(Some(_)) => {}
                Ok(None) => {
                    tracing::warn!(run = %id, "the run ended after its lease was lost (another node interrupted it)");
                }
                Err(error) => {
                    tracing::error!(run = %id, "cannot record the run's end: {error}; its lease will expire and it will be taken as interrupted");
                }
            }
        }
    }

    /// Interrupts the runs whose lease expired (their node died, restarted or lost the store)
    /// and applies `agent.interrupted` to each; answers schedules' waiters whose run another
    /// node ran; counts the queue.
    async fn sweep(&self) {
        let queue = &self.inner.queue;
        match queue
            .store
            .interrupt_expired_runs(now_ms(), queue::SWEEP_BATCH)
            .await
        {
            Ok(rows) => {
                for row in rows {
                    // Before this loop claims again: the run takes its own place back.
                    if self.rerun_in_place(&row).await {
                        continue;
                    }
                    let bridge = self.clone();
                    self.inner
                        .runtime
                        .spawn(async move { bridge.interrupted(row).await });
                }
            }
            Err(error) => tracing::warn!("cannot look for interrupted runs: {error}"),
        }
        for id in queue.awaited_reports() {
            let Ok(Some(row)) = queue.store.run(&id).await else {
                continue;
            };
            if !row.state.is_over() {
                continue;
            }
            let posted = self.posted_elsewhere(&row).await;
            let finished = row.state == switchboard_records::RunState::Finished;
            // The bot's own messages are stored when the gateway echoes them: a run that
            // finished a moment ago may not show its reply yet, so look again next sweep.
            let ended_ms = row.finished_ms.unwrap_or(0);
            if finished && posted.is_empty() && now_ms().saturating_sub(ended_ms) < ECHO_WAIT_MS {
                continue;
            }
            if let Some(report) = queue.take_report(&id) {
                let _ = report.send(switchboard_schedule::RunReport {
                    run_id: Some(row.id.clone()),
                    posted,
                    final_text: row.final_text.clone().unwrap_or_default(),
                    error: (!finished)
                        .then(|| format!("the run ended {} on another node", row.state)),
                });
            }
        }
        if let Ok(waiting) = queue
            .runs(switchboard_records::RunFilter {
                state: Some(switchboard_records::RunState::Queued),
                ..Default::default()
            })
            .await
        {
            self.inner
                .core
                .metrics()
                .queue_depth_set(waiting.len() as i64);
        }
    }

    /// What a run another node ran posted in its trigger's session: the bot's stored messages
    /// from the run's start to a moment after its end (their ids carry their time), oldest
    /// first. The node that ran it knew the ids; the row does not keep them.
    async fn posted_elsewhere(&self, row: &switchboard_records::Run) -> Vec<Snowflake> {
        let (Some(trigger), Some(started_ms)) = (queue::decode(&row.trigger), row.started_ms)
        else {
            return Vec::new();
        };
        let Ok(channel) = self.inner.core.allowed(trigger.channel_id).await else {
            return Vec::new();
        };
        let until_ms = row
            .finished_ms
            .unwrap_or(u64::MAX)
            .saturating_add(ECHO_WAIT_MS);
        let bot = self.inner.core.surface().bot_user_id();
        let mut posted: Vec<Snowflake> = self
            .inner
            .core
            .surface()
            .messages(
                channel,
                switchboard_engine::surface::MessageQuery {
                    limit: 100,
                    before: None,
                    after: Some(switchboard_records::trigger::first_id_at(started_ms)),
                },
            )
            .iter()
            .filter(|m| Some(m.author_id) == bot && m.message_id.timestamp_ms() <= until_ms)
            .map(|m| m.message_id)
            .collect();
        posted.sort_unstable();
        posted
    }

    /// A run whose node stopped renewing its lease: `agent.interrupted` says whether it runs
    /// again (`rerun`: a new row with the same trigger, whose message was claimed already) or
    /// its question is told it was cut short (`notify`).
    async fn interrupted(&self, row: switchboard_records::Run) {
        if run_rows::started_at_once(&row.trigger) {
            // Its caller (a run handing off, a chat client) went with its node.
            tracing::warn!(run = %row.id, node = row.node.as_deref().unwrap_or("-"), "a handoff's or chat-API run's node stopped renewing its lease; the run is interrupted");
            return;
        }
        let Some(trigger) = queue::decode(&row.trigger) else {
            tracing::warn!(run = %row.id, "an interrupted run's trigger does not read; nothing to tell");
            return;
        };
        tracing::warn!(run = %row.id, session = %trigger.channel_id, node = row.node.as_deref().unwrap_or("-"), "a run's node stopped renewing its lease; the run is interrupted");
        self.inner.core.events().publish(
            "run.finished",
            Some(trigger.channel_id),
            json!({ "run": row.id, "outcome": "interrupted" }),
        );
        let again = queue::rerun_trigger(&row.trigger, &row.id);
        if again.is_none() && self.config().interrupted == switchboard_config::Interrupted::Rerun {
            tracing::warn!(run = %row.id, "the run was interrupted {} times; its question is told instead of running it again", queue::MAX_RERUNS + 1);
        }
        // Its place was taken meanwhile (a run behind it started): it runs again last.
        if let (switchboard_config::Interrupted::Rerun, Some(again), Ok(hex)) =
            (self.config().interrupted, again, random_hex(8))
        {
            let again = switchboard_records::NewRun {
                id: format!("run-{hex}"),
                session: row.session.clone(),
                agent: row.agent.clone(),
                trigger: again,
                requested_by: row.requested_by.clone(),
                parent_run: None,
                enqueued_ms: now_ms(),
            };
            let limit = self.config().queue_per_session;
            match self.inner.queue.store.enqueue_run(again, limit).await {
                Ok(switchboard_store::Enqueued::Queued(run)) => {
                    tracing::info!(run = %run.id, interrupted = %row.id, "the interrupted run runs again (agent.interrupted = \"rerun\")");
                    self.inner.queue.wake.notify_one();
                    return;
                }
                Ok(switchboard_store::Enqueued::Full { .. }) => {
                    tracing::warn!(run = %row.id, "the session's queue is full; the interrupted run is not run again, its question is told instead");
                }
                Err(error) => {
                    tracing::error!(run = %row.id, "cannot queue the interrupted run again: {error}; its question is told instead");
                }
            }
        }
        self.notify_interrupted(&row.id, &trigger).await;
    }

    /// `agent.interrupted = "rerun"`: puts an interrupted run back in its own place, the first
    /// of its session, under its own id (so what it posts carries the same run); false when
    /// the mode is `notify`, the run is not one to rerun (a handoff's, a chat-API run, one run
    /// again [`queue::MAX_RERUNS`] times) or its place was taken meanwhile.
    async fn rerun_in_place(&self, row: &switchboard_records::Run) -> bool {
        if self.config().interrupted != switchboard_config::Interrupted::Rerun {
            return false;
        }
        let Some(again) = queue::rerun_trigger(&row.trigger, &row.id) else {
            return false;
        };
        match self.inner.queue.store.rerun_run(&row.id, again).await {
            Ok(Some(_)) => {
                tracing::warn!(run = %row.id, node = row.node.as_deref().unwrap_or("-"), "a run's node stopped renewing its lease; the run runs again in its place (agent.interrupted = \"rerun\")");
                self.inner.core.events().publish(
                    "run.finished",
                    row.session.parse().ok().map(Snowflake),
                    json!({ "run": row.id, "outcome": "interrupted" }),
                );
                self.inner.queue.wake.notify_one();
                true
            }
            Ok(None) => false,
            Err(error) => {
                tracing::warn!(run = %row.id, "cannot put the interrupted run back in its place: {error}");
                false
            }
        }
    }

    /// `agent.interrupted = "notify"`: the ⏳ becomes ⚠️ and a reply to the question says
    /// that the answer was interrupted and to ask again.
    async fn notify_interrupted(&self, run_id: &str, trigger: &Trigger) {
        let Ok(channel) = self.inner.core.allowed(trigger.channel_id).await else {
            return;
        };
        let config = self.config();
        let gate = RunGate::open();
        let Some((token, voice)) = self.mint(trigger, channel.id(), run_id, &gate, &config) else {
            return;
        };
        self.react(&voice, trigger, WORKING, false).await;
        self.react(&voice, trigger, INTERRUPTED, true).await;
        let context = voice.context(trigger.channel_id);
        self.post_reply(
            &context,
            trigger,
            "My answer to this was interrupted (the node running it stopped); please ask again.",
        )
        .await;
        self.inner
            .core
            .end_capability(&token, switchboard_engine::auth::TokenEnd::Finished);
    }

    /// `runs.abort` (`/abort`, the console) by `user`, on this node only: stops the run it
    /// executes that `target` names when `user` started it, or when `admin`; queued runs stay.
    fn abort_for(&self, target: AbortTarget<'_>, user: Snowflake, admin: bool) -> AbortOutcome {
        let mut executing = self.inner.queue.executing();
        let found = executing.iter_mut().find(|(_, run)| match target {
            AbortTarget::Session(channel) => run.session == channel,
            AbortTarget::Run(run_id) => run.rows.iter().any(|row| row == run_id),
        });
        let Some((run_id, run)) = found else {
            drop(executing);
            // Not a session's run: a handoff's sub-run (or a chat-API run) by its id.
            return match target {
                AbortTarget::Run(run_id) => self.inner.handoffs.abort(run_id, user, admin),
                AbortTarget::Session(_) => AbortOutcome::NothingRunning,
            };
        };
        if !run.askers.contains(&user) && !admin {
            return AbortOutcome::NotYours {
                owner: run.owner.clone(),
            };
        }
        if run.abort.take().is_some_and(|abort| abort.send(()).is_ok()) {
            let run_id = run_id.clone();
            let session_id = run.session;
            drop(executing);
            // Its sub-runs stop with it.
            self.inner.handoffs.stop_below(&run_id);
            AbortOutcome::Stopped { run_id, session_id }
        } else {
            AbortOutcome::NothingRunning
        }
    }

    /// `runs.abort` wherever the run runs: this node's run stops at once; another node's run is
    /// flagged in the store and stops at its node's next heartbeat.
    async fn abort_anywhere(
        &self,
        target: AbortTarget<'_>,
        user: Snowflake,
        admin: bool,
    ) -> AbortOutcome {
        let store = &self.inner.queue.store;
        let running_in = |session: String| switchboard_records::RunFilter {
            session: Some(session),
            state: Some(switchboard_records::RunState::Running),
            limit: 64,
            ..Default::default()
        };
        let running = match target {
            AbortTarget::Session(channel) => store.runs(running_in(channel.to_string())).await,
            AbortTarget::Run(run_id) => match store.run(run_id).await {
                Ok(Some(row)) if row.state == switchboard_records::RunState::Running => store
                    .runs(running_in(row.session.clone()))
                    .await
                    .map(|rows| {
                        rows.into_iter()
                            .filter(|r| r.node == row.node)
                            .collect::<Vec<_>>()
                    }),
                Ok(_) => Ok(Vec::new()),
                Err(error) => Err(error),
            },
        };
        let running = match running {
            Ok(rows) if !rows.is_empty() => rows,
            Ok(_) => return self.abort_for(target, user, admin),
            Err(error) => {
                tracing::warn!("cannot read the runs to stop from the store: {error}; stopping this node's only");
                return self.abort_for(target, user, admin);
            }
        };
        let mut triggers: Vec<(u64, Trigger)> = running
            .iter()
            .filter_map(|r| Some((r.seq, queue::decode(&r.trigger)?)))
            .collect();
        triggers.sort_by_key(|(seq, _)| *seq);
        let Some(head) = running.iter().min_by_key(|r| r.seq) else {
            return AbortOutcome::NothingRunning;
        };
        if !admin && !triggers.iter().any(|(_, t)| t.author_id == user) {
            return AbortOutcome::NotYours {
                owner: triggers
                    .last()
                    .map(|(_, t)| t.author_name.clone())
                    .unwrap_or_default(),
            };
        }
        if running.iter().all(|r| r.abort_requested) {
            return AbortOutcome::NothingRunning;
        }
        let session_id = triggers.first().map_or(Snowflake(0), |(_, t)| t.channel_id);
        // This node's run stops at once — a queued run it executes, or a chat-API run or
        // sub-run it holds — before its sub-runs, so that it takes no round after theirs.
        let stopped_here = self
            .inner
            .queue
            .stop_local(&head.id)
            .or_else(|| self.inner.handoffs.stop(&head.id).then(|| head.id.clone()));
        for row in &running {
            if let Err(error) = store.request_abort(&row.id, now_ms()).await {
                tracing::warn!(run = %row.id, "cannot flag the run to stop in the store: {error}");
            }
        }
        let run_id = stopped_here.unwrap_or_else(|| head.id.clone());
        self.inner.handoffs.stop_below(&run_id);
        AbortOutcome::Stopped { run_id, session_id }
    }

    /// This node's view: the runs it executes, its handoffs' sub-runs and the runs it recorded
    /// as ended.
    fn run_views(&self, session: Option<Snowflake>) -> Vec<RunView> {
        let mut views: Vec<RunView> = Vec::new();
        views.extend(self.inner.handoffs.views(session));
        let ended = self.inner.ended.views(session);
        views.extend(ended);
        views
    }

    /// What runs and waits, a session's or everywhere, as the store holds it (every node's):
    /// running runs first, then queued ones in order, by session; then handoffs' sub-runs;
    /// then ended runs, newest first.
    async fn stored_views(&self, session: Option<Snowflake>) -> Vec<RunView> {
        let rows = match self
            .inner
            .queue
            .runs(switchboard_records::RunFilter {
                session: session.map(|s| s.to_string()),
                ..Default::default()
            })
            .await
        {
            Ok(rows) => rows,
            Err(error) => {
                tracing::warn!("cannot read the runs from the store: {error}; listing this node's");
                return self.run_views(session);
            }
        };
        let ended_here = self.inner.ended.views(session);
        let going_here = self.inner.handoffs.views(session);
        let view = |row: &switchboard_records::Run| {
            let state = view_state(row.state);
            let here = ended_here
                .iter()
                .find(|e| e.run_id.as_deref() == Some(row.id.as_str()));
            let Some(trigger) = queue::decode(&row.trigger) else {
                // A handoff's sub-run or a chat-API run: what this node kept of it, else its row.
                if !run_rows::started_at_once(&row.trigger) {
                    return None;
                }
                let going = going_here
                    .iter()
                    .any(|g| g.run_id.as_deref() == Some(row.id.as_str()));
                return match here {
                    _ if going => None,
                    Some(ended) => Some(ended.clone()),
                    None => Some(run_rows::row_view(row, state)),
                };
            };
            Some(RunView {
                run_id: Some(row.id.clone()),
                started_ms: row.started_ms,
                ended_ms: row.finished_ms,
                answer: run_rows::row_answer(row),
                usage: here
                    .and_then(|e| e.usage)
                    .or_else(|| row.usage.map(run_rows::view_usage)),
                ..trigger_view(&trigger, state)
            })
        };
        let mut live: Vec<&switchboard_records::Run> =
            rows.iter().filter(|r| !r.state.is_over()).collect();
        live.sort_by_key(|r| {
            (
                r.state != switchboard_records::RunState::Running,
                r.session.parse::<u64>().unwrap_or(u64::MAX),
                r.seq,
            )
        });
        let mut views: Vec<RunView> = live.into_iter().filter_map(view).collect();
        views.extend(going_here.iter().cloned());
        // Handoffs' sub-runs and chat-API runs whose row could not be kept: their ends are
        // this node's record.
        views.extend(
            ended_here
                .iter()
                .filter(|e| {
                    !rows
                        .iter()
                        .any(|r| e.run_id.as_deref() == Some(r.id.as_str()))
                })
                .cloned(),
        );
        views.extend(rows.iter().filter(|r| r.state.is_over()).filter_map(view));
        views
    }

    /// The ⏳/✅/❌ on the trigger, as the run (audited as its calls).
    async fn react(&self, voice: &stream::Voice, trigger: &Trigger, emoji: &str, add: bool) {
        let Some(message_id) = trigger.message_id else {
            return;
        };
        let tool = if add {
            "surface.reactions.add"
        } else {
            "surface.reactions.remove"
        };
        let input = json!({
            "sessionId": trigger.channel_id.to_string(),
            "messageId": message_id.to_string(),
            "emoji": emoji,
        });
        let context = voice.context(trigger.channel_id);
        if let Err(error) = self.inner.core.call(&context, tool, input).await {
            tracing::debug!(code = %error.code, message = %error.message, emoji, "reaction on the trigger failed");
        }
    }

    /// Mints the run's capability token (bound to `session`, where it answers) and the voice
    /// it shows its answer with; `None` (logged) when it cannot.
    fn mint(
        &self,
        trigger: &Trigger,
        session: Snowflake,
        run_id: &str,
        gate: &RunGate,
        config: &AgentConfig,
    ) -> Option<(String, stream::Voice)> {
        let grant = CapabilityGrant {
            session_id: session,
            request_id: run_id.to_owned(),
            scope: config.tool_scope.clone(),
            ttl: config.timeout + Duration::from_secs(60),
            client: Some("discord".to_owned()),
            cwd: Some(run_cwd(config).display().to_string()),
            trigger_message_id: trigger.message_id,
            requested_by: Some(trigger.author_id),
            gate: Some(gate.clone()),
        };
        let core = &self.inner.core;
        let minted = core
            .mint_capability(grant)
            .and_then(|token| Ok((core.authenticate(Some(&token))?, token)));
        match minted {
            Ok((caller, token)) => {
                self.continue_posts(&caller, run_id);
                Some((token, stream::Voice::new(caller, run_id)))
            }
            Err(error) => {
                tracing::error!(run = %run_id, "cannot mint a capability token: {}", error.message);
                None
            }
        }
    }

    /// A run queued again under a new id after an interruption posts with the first run's
    /// nonces (`switchboard_engine::nonce`), so it posts nothing that run posted already. Before
    /// the token is handed to anyone: nothing has posted with it yet.
    fn continue_posts(&self, caller: &switchboard_engine::auth::Caller, run_id: &str) {
        let first = self
            .inner
            .queue
            .executing()
            .get(run_id)
            .and_then(|executing| executing.nonces_of.clone());
        let posts = caller.capability().and_then(|c| c.posts.as_ref());
        if let (Some(first), Some(posts)) = (first, posts) {
            posts.continue_run(&first);
        }
    }

    /// Posts `text` as a reply to the trigger through the tool server's policy path: outbound
    /// rewrite, safe mentions, splitting, allowlist and rate limits.
    /// True when the reply was posted.
    async fn post_reply(&self, context: &CallContext, trigger: &Trigger, text: &str) -> bool {
        let text = fit_reply(text, self.inner.core.max_parts_per_send());
        let mut input = json!({ "text": text.as_ref() });
        if let Some(message_id) = trigger.message_id {
            input["replyToMessageId"] = json!(message_id.to_string());
        }
        match self
            .inner
            .core
            .call(context, "surface.messages.send", input)
            .await
        {
            Ok(output) => {
                scheduled::answered(&output);
                true
            }
            Err(error) => {
                tracing::error!(code = %error.code, message = %error.message, "posting the agent's reply failed");
                false
            }
        }
    }

    /// Posts the agent's answer: as a reply in the trigger's channel, or where `answering`
    /// says. With `agent.reply_in_thread = "long"`, an answer longer than one message goes
    /// into a thread started from the trigger's message, all its parts together.
    async fn post_answer(
        &self,
        channel: AllowedChannel,
        trigger: &Trigger,
        answering: &Trigger,
        text: &str,
        voice: &stream::Voice,
        config: &AgentConfig,
    ) -> bool {
        let moved = answering.channel_id != trigger.channel_id;
        if !moved && config.reply_in_thread == ReplyInThread::Long && self.needs_parts(text) > 1 {
            if let Some(thread) = threads::open(&self.inner.core, channel, trigger).await {
                let answering = threads::in_thread(trigger, thread);
                let context = voice.context(thread);
                return self.post_reply(&context, &answering, text).await;
            }
        }
        let context = voice.context(answering.channel_id);
        self.post_reply(&context, answering, text).await
    }

    /// How many messages a reply of `text` becomes (as cut to what one send may post).
    fn needs_parts(&self, text: &str) -> usize {
        let text = fit_reply(text, self.inner.core.max_parts_per_send());
        switchboard_engine::chunk::split_message(&text, switchboard_engine::chunk::MESSAGE_LIMIT)
            .len()
    }

    /// Runs the agent for `triggers`: one message, or a burst answered together (in arrival
    /// order; the newest is the one replied to), with the session's agent `session_agent`
    /// unless the trigger names another.
    async fn run(
        &self,
        triggers: Vec<Trigger>,
        session_agent: agents::RunAgent,
        run_id: &str,
        aborted: oneshot::Receiver<()>,
        gate: RunGate,
        permit: tokio::sync::OwnedSemaphorePermit,
    ) -> (&'static str, Option<String>) {
        let Some(trigger) = triggers.last() else {
            return ("failed", None);
        };
        tracing::trace!(session = %trigger.channel_id, messages = triggers.len(), "run dequeued");
        let channel = match self.inner.core.allowed(trigger.channel_id).await {
            Ok(channel) => channel,
            Err(error) => {
                tracing::debug!(channel = %trigger.channel_id, code = %error.code, "not starting a run: channel not allowed");
                return ("failed", Some("the channel is not allowed".to_owned()));
            }
        };
        // The messages were claimed when they were queued. The run may start while a claim's
        // record is written, but it acts (tool calls, draft, reply, reactions) only through
        // the gate, which opens once every record is durable: a crash from here on leaves the
        // message unanswered rather than answered twice.
        let earlier = &triggers[..triggers.len() - 1];
        // A trigger that names an agent (a schedule's) runs with it; else the session's.
        let requested = {
            let settings = self.inner.core.settings();
            agents::requested(settings.config(), trigger.agent.as_ref())
        };
        let agent = requested.unwrap_or(session_agent);
        // `agent.reply_in_thread = "always"`: the conversation moves into a thread started from
        // the message before the run, so the run's session, typing and draft are the thread's.
        let thread = match agent.config.reply_in_thread {
            ReplyInThread::Always => {
                if !gate.opened().await {
                    return ("failed", None);
                }
                threads::open(&self.inner.core, channel, trigger).await
            }
            ReplyInThread::Never | ReplyInThread::Long => None,
        };
        let answer_channel = match thread {
            Some(thread) => match self.inner.core.allowed(thread).await {
                Ok(allowed) => allowed,
                Err(error) => {
                    tracing::warn!(%thread, code = %error.code, "the answer's thread is not allowed; answering in the channel");
                    channel
                }
            },
            None => channel,
        };
        tracing::trace!(session = %trigger.channel_id, "trigger taken");
        let Some((token, voice)) =
            self.mint(trigger, answer_channel.id(), run_id, &gate, &agent.config)
        else {
            return ("failed", Some("no capability could be minted".to_owned()));
        };
        // The ⏳ and the typing indicator start once the agent has started (a command: once
        // its process is spawned), so they never compete with it for the machine; the ⏳ is
        // awaited before it comes off, so it never stays behind.
        let (started, spawned) = tokio::sync::watch::channel(false);
        let working = {
            let bridge = self.clone();
            let trigger = trigger.clone();
            let mut spawned = spawned.clone();
            let gate = gate.clone();
            let voice = voice.clone();
            tokio::spawn(async move {
                // An error means the run ended before it said so: react anyway, it comes off.
                let _ = spawned.wait_for(|started| *started).await;
                if gate.opened().await {
                    bridge.react(&voice, &trigger, WORKING, true).await;
                }
            })
        };
        let typing = {
            let core = Arc::clone(&self.inner.core);
            let mut spawned = spawned;
            let gate = gate.clone();
            let context = voice.context(answer_channel.id());
            tokio::spawn(async move {
                let _ = spawned.wait_for(|started| *started).await;
                if !gate.opened().await {
                    return;
                }
                // The run's typing, audited once as the run; its refreshes (Discord shows it
                // about 10 s) are not rows of their own.
                if let Err(error) = core.call(&context, "surface.typing", json!({})).await {
                    tracing::debug!(code = %error.code, "typing indicator failed");
                }
                loop {
                    tokio::time::sleep(TYPING_EVERY).await;
                    if let Err(error) = core.surface().typing(answer_channel).await {
                        tracing::debug!(%error, "typing indicator failed");
                    }
                }
            })
        };
        // Budgets are checked before the agent starts: a refused run never calls the model.
        let agent_name = agent
            .name
            .as_ref()
            .map_or(switchboard_config::LEGACY_AGENT_NAME, AgentName::as_str);
        let meter = match self
            .open_meter(
                trigger,
                run_id,
                answer_channel.id(),
                agent_name,
                &agent.config,
            )
            .await
        {
            Ok(meter) => meter,
            Err(refused) => {
                tracing::info!(run = %run_id, session = %answer_channel.id(), "run refused: {}", refused.message());
                scheduled::failed(&refused.message());
                working.abort();
                typing.abort();
                if gate.opened().await {
                    let context = voice.context(answer_channel.id());
                    self.post_reply(&context, trigger, &refused.notice()).await;
                }
                self.inner
                    .core
                    .end_capability(&token, switchboard_engine::auth::TokenEnd::Finished);
                return ("failed", Some(refused.message()));
            }
        };
        let answer_in = (answer_channel != channel).then_some(answer_channel);
        // A run whose record failed is stopped like an aborted one.
        let stopped = {
            let gate = gate.clone();
            async move {
                tokio::select! {
                    _ = aborted => {}
                    false = gate.opened() => {}
                }
            }
        };
        let (succeeded, outcome, excerpt) = self
            .execute(
                channel,
                trigger,
                answer_in,
                stopped,
                started,
                &RunTicket {
                    id: run_id,
                    earlier,
                    meter: meter.as_ref(),
                    gate: &gate,
                    token: &token,
                    voice: &voice,
                    agent: &agent,
                },
            )
            .await;
        typing.abort();
        drop(permit);
        let _ = working.await;
        let ended = (outcome, Some(excerpt));
        if !gate.opened().await {
            return ended;
        }
        self.react(&voice, trigger, WORKING, false).await;
        // Every message the run answered says how it went.
        for answered in &triggers {
            self.react(
                &voice,
                answered,
                if succeeded { DONE } else { FAILED },
                true,
            )
            .await;
        }
        ended
    }

    fn error_line(config: &AgentConfig, reason: &str) -> String {
        config.error_reply.replace("{reason}", reason)
    }

    /// Runs the agent and posts its answer; true when it succeeded. The prompt reads the
    /// trigger's own channel; the run acts and answers in `answer_in` (a thread started for the
    /// conversation) when given.
    async fn execute(
        &self,
        channel: AllowedChannel,
        trigger: &Trigger,
        answer_in: Option<AllowedChannel>,
        aborted: impl std::future::Future<Output = ()> + Send,
        spawned: tokio::sync::watch::Sender<bool>,
        run: &RunTicket<'_>,
    ) -> (bool, &'static str, String) {
        let RunTicket {
            id: request_id,
            earlier,
            meter,
            gate,
            token,
            voice,
            agent,
        } = *run;
        let config = Arc::clone(&agent.config);
        // A command reads an edit made before its run in its prompt, which is built once its
        // process is spawned; the built-in runners read it now.
        let spawns_first = matches!(config.runner, Runner::Command { .. });
        let edited = (!spawns_first)
            .then(|| self.edited(channel, trigger))
            .flatten();
        let trigger = edited.as_ref().unwrap_or(trigger);
        let answering = match answer_in {
            Some(thread) => threads::in_thread(trigger, thread.id()),
            None => trigger.clone(),
        };
        let cwd = run_cwd(&config);
        tracing::info!(
            run = %request_id,
            session = %answering.channel_id,
            trigger = trigger.message_id.map(|id| id.to_string()).as_deref().unwrap_or("-"),
            workflow = trigger.workflow_id.as_deref().unwrap_or("-"),
            "agent run starts"
        );
        let started = std::time::Instant::now();
        // `run.started`, once: for a command once its process is spawned (or could not be).
        let announced = std::sync::atomic::AtomicBool::new(false);
        let announce = || {
            if announced.swap(true, std::sync::atomic::Ordering::Relaxed) {
                return;
            }
            self.inner.core.events().publish(
                "run.started",
                Some(answering.channel_id),
                serde_json::json!({
                    "run": request_id,
                    "trigger": trigger.message_id.map(|id| id.to_string()),
                    "answers": earlier
                        .iter()
                        .chain(std::iter::once(trigger))
                        .filter_map(|t| t.message_id.map(|id| id.to_string()))
                        .collect::<Vec<_>>(),
                    "requestedBy": trigger.author_id.to_string(),
                    "workflow": trigger.workflow_id,
                }),
            );
        };
        if !spawns_first {
            announce();
        }
        // A draft shows the answer while it is written (and a command's progress lines).
        let draft = match (&config.runner, config.stream) {
            (Runner::Demo, _) | (_, StreamMode::Off) => None,
            _ => Some(stream::Draft::start(
                Arc::clone(&self.inner.core),
                &answering,
                config.stream_interval,
                gate.clone(),
                voice.context(answering.channel_id),
            )),
        };
        // The characters a runner that reports no usage (a command, the demo) was prompted
        // with: its usage is estimated from them and its answer, and marked so.
        let prompted: std::sync::OnceLock<u64> = std::sync::OnceLock::new();
        let answer = match &config.runner {
            Runner::Command { program, args, .. } => {
                // What the run does once its process exists: announce it and write its prompt.
                let prompt = || {
                    announce();
                    let answered = self.as_edited(channel, earlier, trigger);
                    let input = prompt::build(
                        &self.inner.core,
                        channel,
                        &answered,
                        config.context_messages,
                        &config.trusted_users,
                    );
                    tracing::trace!(bytes = input.len(), "prompt built");
                    let _ = prompted.set(input.chars().count() as u64);
                    input
                };
                let spec = CommandSpec {
                    cwd: Some(cwd.clone()),
                    env: self.environment(&config, &answering, trigger, token, request_id, &cwd),
                    stderr_lines: draft
                        .as_ref()
                        .map(|draft| command::progress_sink(draft.sender())),
                    started: Some(spawned),
                    ..CommandSpec::new(program.clone(), args.clone(), config.timeout)
                };
                let outcome = run_command_with(&spec, prompt, aborted).await;
                announce();
                command_answer(request_id, outcome, config.timeout)
            }
            Runner::OpenAi(runner) => {
                spawned.send_replace(true);
                let Some(context) = self.run_context(&answering, token, request_id, &cwd) else {
                    return (false, "failed", TOKEN_REFUSED.to_owned());
                };
                let memory = self.inner.memory.as_deref();
                let (summary, notes) = match memory {
                    Some(memory) => (
                        summaries::load(memory, trigger.channel_id).await,
                        notes::block(
                            memory,
                            trigger.channel_id,
                            trigger.author_id,
                            &trigger.author_name,
                        )
                        .await,
                    ),
                    None => (None, None),
                };
                let mut transcript = prompt::transcript(
                    &self.inner.core,
                    channel,
                    trigger,
                    config.context_messages,
                    self.bot_id(),
                    &config.trusted_users,
                    summary,
                );
                // A burst is answered together: one turn quoting each message.
                burst::answer_together(
                    &mut transcript,
                    &self.inner.core,
                    channel,
                    &self.as_edited(channel, earlier, trigger),
                    &switchboard_engine::trust::Trust::new(&config.trusted_users, self.bot_id()),
                );
                // An untrusted note needs the note saying what the mark means, even when no
                // message of the transcript is untrusted.
                if transcript.untrusted_note.is_none()
                    && notes
                        .as_deref()
                        .is_some_and(switchboard_engine::trust::marks_any)
                {
                    let trust =
                        switchboard_engine::trust::Trust::new(&config.trusted_users, self.bot_id());
                    transcript.untrusted_note =
                        Some(switchboard_engine::trust::untrusted_note(&trust));
                }
                let mut limits = openai::ContextLimits::of(&config);
                // `[sessions.NAME] context_tokens` (a thread's parent's when it has none).
                if let Some(tokens) =
                    instructions::session_settings(&self.inner.core, trigger.channel_id)
                        .and_then(|s| s.context_tokens)
                {
                    limits.context_tokens = tokens;
                }
                let run = openai::Run {
                    runner,
                    core: &self.inner.core,
                    context: &context,
                    session: answering.channel_id,
                    limits: &limits,
                    meter,
                    memory,
                    summary_session: trigger.channel_id,
                    notes,
                    system: instructions::system_blocks(
                        &self.inner.core,
                        &config,
                        runner,
                        trigger.channel_id,
                    ),
                };
                let chat = openai::answer(
                    run,
                    transcript,
                    config.timeout,
                    draft.as_ref().map(stream::Draft::sender),
                );
                tokio::select! {
                    result = chat => match result {
                        Ok(text) => Answer::Reply(text),
                        Err(error) => {
                            tracing::warn!(run = %request_id, "model run failed: {error}");
                            Answer::Failed(error.short_reason())
                        }
                    },
                    () = aborted => Answer::Aborted,
                }
            }
            Runner::Demo => {
                spawned.send_replace(true);
                let Some(context) = self.run_context(&answering, token, request_id, &cwd) else {
                    return (false, "failed", TOKEN_REFUSED.to_owned());
                };
                let _ = prompted.set(trigger.text.chars().count() as u64);
                let demo = tokio::time::timeout(
                    config.timeout,
                    demo::answer(
                        &self.inner.core,
                        &context,
                        &answering,
                        self.mentions(answering.channel_id),
                    ),
                );
                tokio::select! {
                    result = demo => match result {
                        Ok(text) => Answer::Reply(text),
                        Err(_) => Answer::Failed(format!("no answer within {} s", config.timeout.as_secs())),
                    },
                    () = aborted => Answer::Aborted,
                }
            }
        };
        if let (Some(meter), Some(prompt_chars)) = (meter, prompted.get()) {
            meter.record(estimated_usage(*prompt_chars, &answer)).await;
        }
        // The token ends with the run: a call still waiting on it (an approval) answers
        // `cancelled`, as does any later call of an aborted run.
        match &answer {
            Answer::Reply(text) => scheduled::final_text(text),
            Answer::Failed(reason) => scheduled::failed(reason),
            Answer::Aborted => scheduled::failed("the run was aborted"),
        }
        let how = match answer {
            Answer::Aborted => switchboard_engine::auth::TokenEnd::Aborted,
            Answer::Reply(_) | Answer::Failed(_) => switchboard_engine::auth::TokenEnd::Finished,
        };
        self.inner.core.end_capability(token, how);
        // Nothing is posted for a run whose trigger could not be recorded as answered.
        if !gate.opened().await {
            if let Some(draft) = draft {
                draft.finish(None, stream::DRAFT_CHARS).await;
            }
            tracing::warn!(run = %request_id, "the run was stopped and posts nothing: its trigger could not be recorded as answered");
            self.finished(&answering, request_id, "failed", started);
            return (
                false,
                "failed",
                "its trigger could not be recorded as answered".to_owned(),
            );
        }
        let reply = match &answer {
            Answer::Reply(text) => Some(text.trim()).filter(|r| !r.is_empty() && *r != "NO_REPLY"),
            Answer::Failed(_) | Answer::Aborted => None,
        };
        // With several agents, the answer says which one wrote it.
        let labelled = reply.map(|reply| agent.label(reply));
        let reply = labelled.as_deref();
        // The draft becomes the answer when it fits one message; else it goes away.
        let settled = match draft {
            Some(draft) => draft.finish(reply, stream::DRAFT_CHARS).await,
            None => false,
        };
        let excerpt = answer_excerpt(&answer);
        let (succeeded, outcome) = match answer {
            Answer::Reply(text) => {
                let reply = text.trim();
                if reply.is_empty() || reply == "NO_REPLY" {
                    tracing::info!(run = %request_id, "agent run finished without a reply");
                    (true, "no_reply")
                } else if settled {
                    tracing::info!(run = %request_id, bytes = reply.len(), "agent run finished; the draft became the reply");
                    (true, "replied")
                } else if self
                    .post_answer(
                        channel,
                        trigger,
                        &answering,
                        &agent.label(reply),
                        voice,
                        &config,
                    )
                    .await
                {
                    tracing::info!(run = %request_id, bytes = reply.len(), "agent run finished; reply posted");
                    (true, "replied")
                } else {
                    // The answer exists but could not be posted: the trigger must not say ✅.
                    scheduled::failed("the answer could not be posted");
                    (false, "reply_failed")
                }
            }
            Answer::Failed(reason) => {
                let context = voice.context(answering.channel_id);
                self.post_reply(&context, &answering, &Self::error_line(&config, &reason))
                    .await;
                (false, "failed")
            }
            Answer::Aborted => {
                tracing::info!(run = %request_id, "agent run aborted");
                (false, "aborted")
            }
        };
        self.finished(&answering, request_id, outcome, started);
        self.record_ended(&answering, request_id, outcome, &excerpt, meter, started);
        (succeeded, outcome, excerpt)
    }

    /// Puts a Discord-started run that ended in the node's record of ended runs.
    fn record_ended(
        &self,
        answering: &Trigger,
        request_id: &str,
        outcome: &str,
        answer: &str,
        meter: Option<&metering::Meter>,
        started: std::time::Instant,
    ) {
        if let Some(meter) = meter {
            self.inner
                .queue
                .keep_usage(request_id, run_rows::run_usage(meter));
        }
        let ended_ms = now_ms();
        let started_ms =
            ended_ms.saturating_sub(u64::try_from(started.elapsed().as_millis()).unwrap_or(0));
        self.inner.ended.record(RunView {
            run_id: Some(request_id.to_owned()),
            started_ms: Some(started_ms),
            ended_ms: Some(ended_ms),
            answer: Some(answer.to_owned()),
            usage: meter.map(|meter| {
                let (prompt_tokens, completion_tokens) = meter.tokens();
                switchboard_engine::runs::RunUsage {
                    prompt_tokens,
                    completion_tokens,
                }
            }),
            ..trigger_view(answering, ended_state(outcome))
        });
    }

    /// Counts a finished run and publishes `run.finished`.
    fn finished(
        &self,
        answering: &Trigger,
        request_id: &str,
        outcome: &'static str,
        started: std::time::Instant,
    ) {
        let core = &self.inner.core;
        core.metrics().run_finished(outcome);
        core.events().publish(
            "run.finished",
            Some(answering.channel_id),
            serde_json::json!({
                "run": request_id,
                "outcome": outcome,
                "durationMs": started.elapsed().as_millis() as u64,
            }),
        );
    }

    /// The call context of a built-in runner's tool calls: the run's own capability, so they
    /// take the full policy path. `None` (logged, token revoked) when the token is refused:
    /// the run then fails with [`TOKEN_REFUSED`].
    fn run_context(
        &self,
        trigger: &Trigger,
        token: &str,
        request_id: &str,
        cwd: &std::path::Path,
    ) -> Option<CallContext> {
        match self.inner.core.authenticate(Some(token)) {
            Ok(caller) => Some(CallContext {
                caller,
                request_id: Some(request_id.to_owned()),
                session_ref: Some(trigger.channel_id.to_string()),
                client: Some("discord".to_owned()),
                cwd: Some(cwd.display().to_string()),
                tool_call_id: None,
                trigger_message_id: trigger.message_id,
                front: switchboard_engine::Front::Api,
            }),
            Err(error) => {
                tracing::error!(run = %request_id, "the run's own token was refused: {}", error.message);
                self.inner.core.revoke_capability(token);
                self.inner.core.metrics().run_finished("failed");
                self.inner.core.events().publish(
                    "run.finished",
                    Some(trigger.channel_id),
                    serde_json::json!({ "run": request_id, "outcome": "failed" }),
                );
                None
            }
        }
    }

    /// The agent's whole environment: the passthrough names, then the run's context (its
    /// session is `answering`'s; `SWITCHBOARD_MESSAGE_ID` is the trigger's message, which is
    /// in the parent channel when the conversation moved into a thread).
    fn environment(
        &self,
        config: &AgentConfig,
        answering: &Trigger,
        trigger: &Trigger,
        token: &str,
        request_id: &str,
        cwd: &std::path::Path,
    ) -> Vec<(String, String)> {
        let mut env: Vec<(String, String)> = config
            .env_passthrough
            .iter()
            .filter_map(|name| std::env::var(name).ok().map(|value| (name.clone(), value)))
            .collect();
        env.extend([
            (
                "SWITCHBOARD_URL".to_owned(),
                self.inner.tool_server_url.clone(),
            ),
            ("SWITCHBOARD_TOKEN".to_owned(), token.to_owned()),
            ("SWITCHBOARD_REQUEST_ID".to_owned(), request_id.to_owned()),
            (
                "SWITCHBOARD_SESSION_ID".to_owned(),
                answering.channel_id.to_string(),
            ),
            ("SWITCHBOARD_CLIENT".to_owned(), "discord".to_owned()),
            ("SWITCHBOARD_CWD".to_owned(), cwd.display().to_string()),
            (
                "SWITCHBOARD_AUTHOR_ID".to_owned(),
                trigger.author_id.to_string(),
            ),
            (
                "SWITCHBOARD_AUTHOR_NAME".to_owned(),
                trigger.author_name.clone(),
            ),
        ]);
        if let Some(message_id) = trigger.message_id {
            env.push(("SWITCHBOARD_MESSAGE_ID".to_owned(), message_id.to_string()));
        }
        if let Some(workflow_id) = &trigger.workflow_id {
            env.push(("SWITCHBOARD_WORKFLOW_ID".to_owned(), workflow_id.clone()));
        }
        env
    }
}

impl Runs for Bridge {
    fn arrived(&self, message: &Arrival<'_>) {
        self.warm_arrived(message.channel_id, message.message_id);
        if !message.author_is_bot {
            self.person_spoke(message.channel_id, message.message_id);
        }
        if !self.should_trigger(message) || (message.missed && !self.answers_missed(message)) {
            return;
        }
        let trigger = Trigger {
            channel_id: message.channel_id,
            message_id: Some(message.message_id),
            author_id: message.author_id,
            author_name: message.author_name.to_owned(),
            author_roles: message.author_roles.to_vec(),
            text: message.text.to_owned(),
            workflow_id: None,
            agent: None,
        };
        let bot = message.author_is_bot.then(|| {
            self.sessions()
                .get(&message.channel_id)
                .and_then(|known| known.person_since)
        });
        self.queue_admission(queue::Admission {
            trigger,
            missed: message.missed,
            bot,
            report: None,
        });
    }

    fn enqueue(&self, trigger: Trigger) {
        self.queue(trigger, false);
    }

    fn list(&self, session: Option<Snowflake>) -> Vec<RunView> {
        self.run_views(session)
    }

    fn abort(&self, target: AbortTarget<'_>, user: Snowflake, admin: bool) -> AbortOutcome {
        self.abort_for(target, user, admin)
    }

    fn list_runs(
        &self,
        session: Option<Snowflake>,
    ) -> switchboard_engine::runs::BoxFuture<'_, Vec<RunView>> {
        Box::pin(self.stored_views(session))
    }

    fn abort_run<'a>(
        &'a self,
        target: AbortTarget<'a>,
        user: Snowflake,
        admin: bool,
    ) -> switchboard_engine::runs::BoxFuture<'a, AbortOutcome> {
        Box::pin(self.abort_anywhere(target, user, admin))
    }

    fn session_agent(
        &self,
        session: Snowflake,
    ) -> std::pin::Pin<
        Box<
            dyn std::future::Future<Output = switchboard_engine::handoff::SessionAgent> + Send + '_,
        >,
    > {
        Box::pin(agents::describe(
            &self.inner.core,
            self.bindings(),
            self.config(),
            session,
        ))
    }

    fn bind_agent(
        &self,
        session: Snowflake,
        agent: Option<String>,
    ) -> switchboard_engine::runs::BoxFuture<'_, Result<(), String>> {
        Box::pin(async move {
            Bridge::bind_agent(self, session, agent.as_deref())
                .await
                .map_err(|e| e.to_string())
        })
    }

    fn handoff(
        &self,
        request: switchboard_engine::handoff::HandoffRequest,
    ) -> std::pin::Pin<
        Box<
            dyn std::future::Future<
                    Output = Result<
                        switchboard_engine::handoff::HandoffAnswer,
                        switchboard_engine::ToolError,
                    >,
                > + Send
                + '_,
        >,
    > {
        Box::pin(self.run_handoff(request))
    }
}

/// How a run ended, whatever the runner.
enum Answer {
    /// The agent's text (empty or `NO_REPLY` posts nothing).
    Reply(String),
    /// A short reason for the error line; details were logged.
    Failed(String),
    Aborted,
}

/// A run of `trigger` as `runs.list` shows it, before it has an id or a start.
fn trigger_view(trigger: &Trigger, state: RunState) -> RunView {
    RunView {
        run_id: None,
        session_id: trigger.channel_id,
        state,
        started_ms: None,
        requested_by: trigger.author_id,
        requested_by_name: trigger.author_name.clone(),
        trigger_message_id: trigger.message_id,
        workflow_id: trigger.workflow_id.clone(),
        text: trigger
            .text
            .chars()
            .take(switchboard_engine::runs::RUN_TEXT_CHARS)
            .collect(),
        parent_run_id: None,
        agent: trigger.agent.as_ref().map(ToString::to_string),
        started_by: None,
        ended_ms: None,
        answer: None,
        usage: None,
    }
}

/// What the record of ended runs keeps of an answer: its text, the failure's reason, or
/// nothing for a stopped run; at most [`switchboard_engine::runs::RUN_ANSWER_CHARS`].
fn answer_excerpt(answer: &Answer) -> String {
    let text = match answer {
        Answer::Reply(text) => text.trim(),
        Answer::Failed(reason) => reason.as_str(),
        Answer::Aborted => "",
    };
    text.chars()
        .take(switchboard_engine::runs::RUN_ANSWER_CHARS)
        .collect()
}

/// The node's claim loop: claims rows while run permits are free, sweeps expired leases every
/// quarter lease, and waits for a wake-up (a row queued or ended here) or its poll. Ends when
/// the bridge is dropped.
async fn claim_loop(bridge: std::sync::Weak<Inner>) {
    let mut swept: Option<std::time::Instant> = None;
    let mut degraded = false;
    // When the store last came back after an outage: every lease may have run out while no
    // node could renew it. The nodes still alive renew theirs, and record the ends of runs
    // they finished meanwhile, within a lease of reaching the store again; only a lease still
    // expired after that belongs to a node that is gone, so the sweep waits that long.
    let mut back: Option<std::time::Instant> = None;
    loop {
        let Some(inner) = bridge.upgrade() else {
            return;
        };
        let this = Bridge { inner };
        // A stopping node neither claims nor sweeps: the runs it still executes could be
        // taken up as interrupted by its own sweep while they post.
        if this
            .inner
            .queue
            .stopping
            .load(std::sync::atomic::Ordering::Acquire)
        {
            return;
        }
        // A node whose store is unreachable (`/health` says `degraded`) starts no run and
        // interrupts none until it is back: its triggers wait in admission meanwhile.
        if this.store_degraded() {
            degraded = true;
        } else {
            if degraded {
                degraded = false;
                back = Some(std::time::Instant::now());
                tracing::info!("the store is back; runs start again");
            }
            let renewed_since = back.is_none_or(|at| at.elapsed() >= this.lease());
            if renewed_since && swept.is_none_or(|at| at.elapsed() >= this.lease() / 4) {
                this.sweep().await;
                swept = Some(std::time::Instant::now());
            }
            this.claim_rows().await;
        }
        let poll = this.inner.queue.poll();
        let woken = {
            let inner = Arc::clone(&this.inner);
            drop(this);
            tokio::time::timeout(poll, async move { inner.queue.wake.notified().await }).await
        };
        drop(woken);
    }
}

/// Renews the lease of a run's rows while it runs; stops the run when someone asked it to stop
/// (`runs.abort` on any node) or when its lease was lost (another node interrupted it).
async fn heartbeat(bridge: Bridge, run_id: String, rows: Vec<String>) {
    let mut renewals = queue::Renewals::new(bridge.lease());
    let queue = &bridge.inner.queue;
    while renewals.next(queue).await {
        for row in &rows {
            match renewals.renew(queue, row).await {
                Ok(switchboard_store::Heartbeat::Held {
                    abort_requested: false,
                    ..
                }) => {}
                Ok(switchboard_store::Heartbeat::Held {
                    abort_requested: true,
                    ..
                }) => {
                    if queue.stop_local(&run_id).is_some() {
                        tracing::info!(run = %run_id, "run aborted (asked through the store)");
                        bridge.inner.handoffs.stop_below(&run_id);
                    }
                }
                Ok(switchboard_store::Heartbeat::Lost) => {
                    if queue.stop_local(&run_id).is_some() {
                        tracing::warn!(run = %run_id, "the run's lease was lost (another node took it as interrupted); stopping it");
                    }
                }
                Err(error) => {
                    tracing::warn!(run = %run_id, "cannot renew the run's lease: {error}");
                }
            }
        }
    }
}

/// Ends a running row's lease a moment ago (a heartbeat with no lease), so that the next
/// sweep finds it expired.
async fn give_back_lease(
    queue: &queue::RunQueue,
    row: &str,
    node: &str,
) -> Result<switchboard_store::Heartbeat, switchboard_store::StoreError> {
    queue
        .store
        .heartbeat_run(
            row,
            switchboard_records::Lease::new(node, now_ms().saturating_sub(1), 0),
        )
        .await
}

/// A schedule's report of a run that did not start.
fn report_error(reason: &str) -> switchboard_schedule::RunReport {
    switchboard_schedule::RunReport {
        error: Some(reason.to_owned()),
        ..switchboard_schedule::RunReport::default()
    }
}

/// The state a run row ends in for an outcome (as `run.finished` names it).
fn stored_state(outcome: &str) -> switchboard_records::RunState {
    match outcome {
        "replied" | "no_reply" => switchboard_records::RunState::Finished,
        "aborted" => switchboard_records::RunState::Aborted,
        _ => switchboard_records::RunState::Failed,
    }
}

/// A stored run's state as `runs.list` shows it.
fn view_state(state: switchboard_records::RunState) -> RunState {
    match state {
        switchboard_records::RunState::Queued => RunState::Queued,
        switchboard_records::RunState::Running => RunState::Running,
        switchboard_records::RunState::Finished => RunState::Finished,
        switchboard_records::RunState::Failed => RunState::Failed,
        switchboard_records::RunState::Aborted => RunState::Aborted,
        switchboard_records::RunState::Interrupted => RunState::Interrupted,
    }
}

/// The end state a run's outcome (as `run.finished` names it) is listed with.
fn ended_state(outcome: &str) -> RunState {
    match outcome {
        "replied" | "no_reply" => RunState::Finished,
        "aborted" => RunState::Aborted,
        _ => RunState::Failed,
    }
}

/// The usage of a run whose runner reports none (a command, the demo): estimated from the
/// characters it was prompted with and the answer it gave (none when it failed), and marked
/// estimated, so `[budgets]` count every runner.
fn estimated_usage(prompt_chars: u64, answer: &Answer) -> switchboard_usage::Usage {
    let completion_chars = match answer {
        Answer::Reply(text) => text.chars().count() as u64,
        Answer::Failed(_) | Answer::Aborted => 0,
    };
    switchboard_usage::Usage::estimate(prompt_chars, completion_chars)
}

/// A command run's outcome as an [`Answer`]; stderr is logged, never posted.
fn command_answer(
    run: &str,
    outcome: Result<RunOutcome, command::RunnerError>,
    timeout: Duration,
) -> Answer {
    match outcome {
        Ok(RunOutcome::Exited {
            code: Some(0),
            stdout,
            stderr,
        }) => {
            log_stderr(run, &stderr);
            Answer::Reply(stdout)
        }
        Ok(RunOutcome::Exited { code, stderr, .. }) => {
            log_stderr(run, &stderr);
            let reason = code.map_or_else(
                || "the agent was killed".to_owned(),
                |c| format!("the agent exited with status {c}"),
            );
            tracing::warn!(run, %reason, "agent run failed");
            Answer::Failed(reason)
        }
        Ok(RunOutcome::TimedOut { stderr, .. }) => {
            log_stderr(run, &stderr);
            let reason = format!("no answer within {} s", timeout.as_secs());
            tracing::warn!(run, %reason, "agent run timed out; process group killed");
            Answer::Failed(reason)
        }
        Ok(RunOutcome::Aborted { stderr, .. }) => {
            log_stderr(run, &stderr);
            Answer::Aborted
        }
        // The agent's stdout is truncated, never failed on.
        Ok(RunOutcome::Overflowed { stderr, .. }) => {
            log_stderr(run, &stderr);
            Answer::Failed("the agent's answer was too long".to_owned())
        }
        Err(error @ command::RunnerError::Spawn { .. }) => {
            tracing::error!(
                run,
                "the agent command did not start: {error}. Check agent.command and agent.cwd"
            );
            Answer::Failed("the agent could not start".to_owned())
        }
        Err(error) => {
            tracing::error!(run, "{error}");
            Answer::Failed("the agent could not start".to_owned())
        }
    }
}

/// Characters of a reply kept per message the send may post: well under 2,000, so mentions
/// that grow in the outbound rewrite and the splitter's boundaries still fit.
const REPLY_CHARS_PER_PART: usize = 1_500;

/// An agent's answer cut to what one send may post (`toolserver.max_parts_per_send`), saying
/// so at the end, instead of refusing the whole answer.
fn fit_reply(text: &str, max_parts: usize) -> std::borrow::Cow<'_, str> {
    let budget = max_parts.saturating_sub(1).max(1) * REPLY_CHARS_PER_PART;
    let chars = text.chars().count();
    if chars <= budget {
        return std::borrow::Cow::Borrowed(text);
    }
    let cut = text
        .char_indices()
        .nth(budget)
        .map_or(text.len(), |(at, _)| at);
    std::borrow::Cow::Owned(format!(
        "{}\n\n… (the answer was {chars} characters; it was cut here)",
        &text[..cut]
    ))
}

/// Where a run's files are read and saved: the command's `cwd`, else the service's.
fn run_cwd(config: &AgentConfig) -> PathBuf {
    match &config.runner {
        Runner::Command { cwd, .. } => absolute(cwd),
        Runner::OpenAi(_) | Runner::Demo => absolute(std::path::Path::new(".")),
    }
}

fn absolute(path: &std::path::Path) -> PathBuf {
    if path.is_absolute() {
        path.to_owned()
    } else {
        std::env::current_dir()
            .map(|dir| dir.join(path))
            .unwrap_or_else(|_| path.to_owned())
    }
}

fn log_stderr(run: &str, stderr: &str) {
    if !stderr.trim().is_empty() {
        tracing::info!(run, stderr = %stderr.trim_end(), "agent stderr");
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_short_reply_is_posted_as_is() {
        assert!(matches!(
            fit_reply("done", 10),
            std::borrow::Cow::Borrowed("done")
        ));
    }

    #[test]
    fn a_long_reply_is_cut_to_what_one_send_may_post_and_says_so() {
        let long = "é".repeat(100_000);
        let fitted = fit_reply(&long, 10);
        assert!(fitted.chars().count() < 9 * REPLY_CHARS_PER_PART + 100);
        assert!(
            fitted.ends_with("it was cut here)"),
            "{}",
            &fitted[fitted.len() - 80..]
        );
        assert!(fitted.contains("100000 characters"));
    }
}
