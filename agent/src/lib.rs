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
pub mod prompt;
mod prompt_hooks;
pub mod scheduled;
pub mod stream;
pub mod summaries;
pub mod threads;
pub mod warm;

use std::collections::{HashMap, VecDeque};
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
use switchboard_store::{Claim, MemoryStore, TriggerStore};
use tokio::sync::{oneshot, Semaphore};

use command::{run_command_with, CommandSpec, RunOutcome};

/// How often the typing indicator is refreshed (Discord shows it for about 10 s).
const TYPING_EVERY: Duration = Duration::from_secs(8);
const WORKING: &str = "⏳";
const DONE: &str = "✅";
const FAILED: &str = "❌";

#[derive(Default)]
struct SessionQueue {
    waiting: VecDeque<Queued>,
    running: Option<RunningRun>,
    worker: bool,
    /// Runs queued in a row for other bots' messages; a person's message resets it.
    bot_turns: u32,
    /// Whether the loop guard said why it stopped, since the last reset.
    bot_guard_said: bool,
}

/// A trigger waiting in its session's queue, and who waits for its report (a schedule's
/// firing).
struct Queued {
    trigger: Trigger,
    report: Option<oneshot::Sender<switchboard_schedule::RunReport>>,
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

/// What the loop guard decides for a message from another bot.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
enum BotTurn {
    /// Answer it.
    Answer,
    /// Stop, and say why (the first time).
    StopAndSay,
    /// Stop quietly (already said).
    Stop,
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

struct RunningRun {
    /// The message it answers (the newest, when it answers a burst together).
    trigger: Trigger,
    /// Who asked, for every message it answers: any of them may stop it.
    askers: Vec<Snowflake>,
    /// `run-<hex>`: its capability's request id and the audit log's `run`.
    run_id: String,
    /// When it was dequeued, ms since the Unix epoch.
    started_ms: u64,
    abort: Option<oneshot::Sender<()>>,
}

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
    runs: Semaphore,
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
        let runs = Semaphore::new(config.max_concurrent_runs);
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

    /// Takes the trigger's message to answer (claims it in the store); `None` when it was
    /// claimed before — by this process, an earlier one, or another node — or the claim could
    /// not be made: leave it. Whether it was claimed before is known when the claim answers
    /// (at once with SQLite, after one round trip with PostgreSQL); the gate it hands back
    /// opens once the claim is durable, and is shut for good (logged) when that fails. A trigger without a message, or a resumed workflow
    /// (which answers its own run's message once more, by design), is not recorded: its gate
    /// is open at once.
    async fn take(&self, trigger: &Trigger) -> Option<RunGate> {
        self.take_all(vec![trigger.clone()])
            .await
            .map(|(gate, _)| gate)
    }

    /// [`Bridge::take`] for every message a run answers (a burst answered together), claimed
    /// one by one in order: those answered before are left out, and `None` when none is left.
    /// The gate opens once every claim is durable and is shut for good when any fails, so
    /// either the whole batch is recorded as answered before the run acts, or it does not act.
    async fn take_all(&self, triggers: Vec<Trigger>) -> Option<(RunGate, Vec<Trigger>)> {
        let mut kept = Vec::with_capacity(triggers.len());
        let mut durables = Vec::new();
        for trigger in triggers {
            match self.claim(&trigger).await {
                Claimed::Leave => {}
                Claimed::Unrecorded => kept.push(trigger),
                Claimed::Won(durable) => {
                    durables.push((trigger.message_id, durable));
                    kept.push(trigger);
                }
            }
        }
        if kept.is_empty() {
            return None;
        }
        if durables.is_empty() {
            return Some((RunGate::open(), kept));
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
        Some((gate, kept))
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
        match answers.claim_trigger(claim).await {
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

    /// Takes the trigger and waits for its record to be durable: true when it may be answered.
    async fn take_durably(&self, trigger: &Trigger) -> bool {
        match self.take(trigger).await {
            Some(gate) => gate.opened().await,
            None => false,
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
            run_id: run_id.to_owned(),
            agent: agent.to_owned(),
            user,
            session: Some(session.to_string()),
            guild,
            model,
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

    /// A person wrote in `channel`: the loop guard's count starts again.
    fn person_spoke(&self, channel: Snowflake) {
        if let Some(queue) = self.sessions().get_mut(&channel) {
            queue.bot_turns = 0;
            queue.bot_guard_said = false;
        }
    }

    /// Counts a run for another bot's message in `channel`, up to `agent.max_bot_turns` in a
    /// row: two bots that answer each other stop there instead of looping for ever.
    fn bot_turn(&self, channel: Snowflake) -> BotTurn {
        let max = self.config().max_bot_turns;
        let mut sessions = self.sessions();
        let queue = sessions.entry(channel).or_default();
        if queue.bot_turns < max {
            queue.bot_turns += 1;
            BotTurn::Answer
        } else if std::mem::replace(&mut queue.bot_guard_said, true) {
            BotTurn::Stop
        } else {
            BotTurn::StopAndSay
        }
    }

    async fn say_loop_guard(&self, trigger: Trigger) {
        if self.inner.core.allowed(trigger.channel_id).await.is_err() {
            return;
        }
        let text = format!(
            "I've answered other bots {} times in a row here, so I'll stop answering bots until a person writes in this channel.",
            self.config().max_bot_turns
        );
        self.post_reply(&stream::reply_context(&trigger), &trigger, &text)
            .await;
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

    /// Queues a run for `trigger` in its session; starts the session's worker when idle.
    /// A missed trigger finding the queue full is dropped with a log line rather than a notice:
    /// a backfill can bring many at once.
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
        let channel = trigger.channel_id;
        let limit = self.config().queue_per_session;
        let start_worker = {
            let mut sessions = self.sessions();
            let queue = sessions.entry(channel).or_default();
            // While the worker is between runs, the head of `waiting` is the next to run, not
            // one that waits.
            let about_to_run = usize::from(queue.worker && queue.running.is_none());
            if queue.worker && queue.waiting.len() >= limit + about_to_run {
                drop(sessions);
                if let Some(report) = report {
                    let _ = report.send(switchboard_schedule::RunReport {
                        error: Some(format!(
                            "the session's queue was full ({limit} runs waiting); the run did not start"
                        )),
                        ..switchboard_schedule::RunReport::default()
                    });
                    return;
                }
                if missed {
                    tracing::info!(session = %channel, message = ?trigger.message_id, "a missed trigger finds the session's queue full; not answered");
                    return;
                }
                let bridge = self.clone();
                self.inner
                    .runtime
                    .spawn(async move { bridge.refuse_full(trigger, limit).await });
                return;
            }
            queue.waiting.push_back(Queued { trigger, report });
            self.inner.core.metrics().queue_depth_add(1);
            !std::mem::replace(&mut queue.worker, true)
        };
        if start_worker {
            let bridge = self.clone();
            self.inner
                .runtime
                .spawn(async move { bridge.work(channel).await });
        }
    }

    async fn refuse_full(&self, trigger: Trigger, limit: usize) {
        if self.inner.core.allowed(trigger.channel_id).await.is_err() {
            return;
        }
        // The notice is this message's one answer.
        if !self.take_durably(&trigger).await {
            return;
        }
        let text = format!(
            "I'm busy in this channel and {limit} more requests are already waiting; please ask again when I'm done."
        );
        self.post_reply(&stream::reply_context(&trigger), &trigger, &text)
            .await;
    }

    /// Runs the session's triggers one after the other until none is left.
    async fn work(&self, channel: Snowflake) {
        // Messages gather into one run only once a run of the session ended: they waited
        // while it was busy.
        let mut after_a_run = false;
        loop {
            // The session's agent decides whether a burst is answered together, and answers it
            // (unless its trigger names another): read once per run.
            let agent = self.agent_for(channel).await;
            let next = {
                let mut sessions = self.sessions();
                let queue = sessions.entry(channel).or_default();
                match burst::next(&mut queue.waiting, &agent.config, after_a_run) {
                    Some(burst::NextRun { triggers, report }) => {
                        self.inner
                            .core
                            .metrics()
                            .queue_depth_add(-(triggers.len() as i64));
                        let Some(trigger) = triggers.last().cloned() else {
                            continue;
                        };
                        let run_id = match random_hex(8) {
                            Ok(hex) => format!("run-{hex}"),
                            Err(error) => {
                                tracing::error!(session = %channel, "cannot draw random bytes for a run id, the trigger is dropped: {error}");
                                continue;
                            }
                        };
                        let (abort, aborted) = oneshot::channel();
                        queue.running = Some(RunningRun {
                            trigger,
                            askers: triggers.iter().map(|t| t.author_id).collect(),
                            run_id: run_id.clone(),
                            started_ms: now_ms(),
                            abort: Some(abort),
                        });
                        Some((triggers, run_id, aborted, report))
                    }
                    None => {
                        queue.worker = false;
                        queue.running = None;
                        None
                    }
                }
            };
            let Some((triggers, run_id, aborted, report)) = next else {
                return;
            };
            match report {
                Some(report) => {
                    let done =
                        scheduled::reported(&run_id, self.run(triggers, agent, &run_id, aborted))
                            .await;
                    let _ = report.send(done);
                }
                None => self.run(triggers, agent, &run_id, aborted).await,
            }
            after_a_run = true;
            if let Some(queue) = self.sessions().get_mut(&channel) {
                queue.running = None;
            }
        }
    }

    /// `runs.abort` (`/abort`, the console) by `user`: stops the running run `target` names
    /// when `user` started it, or when `admin`; queued runs stay.
    fn abort_for(&self, target: AbortTarget<'_>, user: Snowflake, admin: bool) -> AbortOutcome {
        let mut sessions = self.sessions();
        let run = match target {
            AbortTarget::Session(channel) => sessions
                .get_mut(&channel)
                .and_then(|queue| queue.running.as_mut()),
            AbortTarget::Run(run_id) => sessions
                .values_mut()
                .filter_map(|queue| queue.running.as_mut())
                .find(|run| run.run_id == run_id),
        };
        let Some(run) = run else {
            drop(sessions);
            // Not a session's run: a handoff's sub-run (or a chat-API run) by its id.
            return match target {
                AbortTarget::Run(run_id) => self.inner.handoffs.abort(run_id, user, admin),
                AbortTarget::Session(_) => AbortOutcome::NothingRunning,
            };
        };
        if !run.askers.contains(&user) && !admin {
            return AbortOutcome::NotYours {
                owner: run.trigger.author_name.clone(),
            };
        }
        if run.abort.take().is_some_and(|abort| abort.send(()).is_ok()) {
            let run_id = run.run_id.clone();
            let session_id = run.trigger.channel_id;
            drop(sessions);
            // Its sub-runs stop with it.
            self.inner.handoffs.stop_below(&run_id);
            AbortOutcome::Stopped { run_id, session_id }
        } else {
            AbortOutcome::NothingRunning
        }
    }

    /// What runs and waits, a session's or everywhere: running runs first, then queued ones
    /// in order, by session.
    fn run_views(&self, session: Option<Snowflake>) -> Vec<RunView> {
        let sessions = self.sessions();
        let mut ids: Vec<Snowflake> = match session {
            Some(session) => vec![session],
            None => sessions.keys().copied().collect(),
        };
        ids.sort_unstable();
        let view = |trigger: &Trigger, state, run: Option<&RunningRun>| RunView {
            run_id: run.map(|run| run.run_id.clone()),
            started_ms: run.map(|run| run.started_ms),
            ..trigger_view(trigger, state)
        };
        let queues: Vec<&SessionQueue> = ids.iter().filter_map(|id| sessions.get(id)).collect();
        let running = queues.iter().filter_map(|queue| {
            let run = queue.running.as_ref()?;
            Some(view(&run.trigger, RunState::Running, Some(run)))
        });
        let queued = queues.iter().flat_map(|queue| {
            queue
                .waiting
                .iter()
                .map(|queued| view(&queued.trigger, RunState::Queued, None))
        });
        let mut views: Vec<RunView> = running.chain(queued).collect();
        views.extend(self.inner.handoffs.views(session));
        // A run is recorded as ended a moment before its session's slot is freed: until then
        // it is listed once, as running.
        let ended: Vec<RunView> = self
            .inner
            .ended
            .views(session)
            .into_iter()
            .filter(|ended| !views.iter().any(|live| live.run_id == ended.run_id))
            .collect();
        views.extend(ended);
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
            Ok((caller, token)) => Some((token, stream::Voice::new(caller, run_id))),
            Err(error) => {
                tracing::error!(run = %run_id, "cannot mint a capability token: {}", error.message);
                None
            }
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
    ) {
        let Some(trigger) = triggers.last() else {
            return;
        };
        tracing::trace!(session = %trigger.channel_id, messages = triggers.len(), "run dequeued");
        let channel = match self.inner.core.allowed(trigger.channel_id).await {
            Ok(channel) => channel,
            Err(error) => {
                tracing::debug!(channel = %trigger.channel_id, code = %error.code, "not starting a run: channel not allowed");
                return;
            }
        };
        let Ok(permit) = self.inner.runs.acquire().await else {
            return;
        };
        // Taken when the run starts. The run may start while the record is written, but it
        // acts (tool calls, draft, reply, reactions) only through the gate, which opens once
        // the record is durable: a crash from here on leaves the message unanswered rather
        // than answered twice.
        let Some((gate, triggers)) = self.take_all(triggers).await else {
            return;
        };
        let Some(trigger) = triggers.last() else {
            return;
        };
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
                    return;
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
            return;
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
                return;
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
        let succeeded = self
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
        if !gate.opened().await {
            return;
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
    ) -> bool {
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
                    return false;
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
                    return false;
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
            return false;
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
        succeeded
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
    /// take the full policy path. `None` (logged, token revoked) when the token is refused.
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
            self.person_spoke(message.channel_id);
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
        if message.author_is_bot {
            match self.bot_turn(message.channel_id) {
                BotTurn::Answer => {}
                BotTurn::Stop => return,
                BotTurn::StopAndSay => {
                    let bridge = self.clone();
                    self.inner
                        .runtime
                        .spawn(async move { bridge.say_loop_guard(trigger).await });
                    return;
                }
            }
        }
        self.queue(trigger, message.missed);
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
    ) -> std::pin::Pin<Box<dyn std::future::Future<Output = Result<(), String>> + Send + '_>> {
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
