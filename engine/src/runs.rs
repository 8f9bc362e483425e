//! The seam between the platform side (the bot's gateway, its slash commands, workflows) and
//! the agent that answers (the `agent` crate). The platform reports what arrived and asks for
//! status and aborts through [`Runs`]; the agent implements it, written against
//! [`crate::Core`] and [`crate::Surface`] only.

use entity::Snowflake;

pub use crate::run_gate::{GateOpener, RunGate};
/// The future a [`Runs`] method that may wait on the store answers with.
pub use futures_util::future::BoxFuture;

/// A message the platform stored, with the facts that decide whether it starts a run.
#[derive(Debug, Clone, Copy)]
pub struct Arrival<'a> {
    /// Where it was posted.
    pub channel_id: Snowflake,
    /// Its id.
    pub message_id: Snowflake,
    /// Who wrote it.
    pub author_id: Snowflake,
    /// The name people see for the author.
    pub author_name: &'a str,
    /// The author's guild roles as the message carried them (empty in a DM, and for a
    /// message fetched afterwards, which carries no member).
    pub author_roles: &'a [Snowflake],
    /// Whether the author is a bot account.
    pub author_is_bot: bool,
    /// Whether it was posted in a guild (else: a DM).
    pub in_guild: bool,
    /// The parent channel when the session is a thread.
    pub parent_id: Option<Snowflake>,
    /// Discord's raw text (mentions as `<@id>`).
    pub content: &'a str,
    /// The readable (canonical) text: mentions as `@name`, channels as `#token`.
    pub text: &'a str,
    /// Whether it replies to one of the bot's messages.
    pub replies_to_bot: bool,
    /// Whether it was missed live and fetched afterwards (a backfill after the gateway
    /// identified afresh, or after a restart): the agent applies its missed-trigger policy.
    pub missed: bool,
}

/// What started a run: a message, or a finished workflow resuming in its session.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Trigger {
    /// The session the run answers in.
    pub channel_id: Snowflake,
    /// The message the run answers (reactions and the reply go there). For a resumed workflow,
    /// the message whose run created it, when there was one.
    pub message_id: Option<Snowflake>,
    /// Who asked.
    pub author_id: Snowflake,
    /// Their name as people see it.
    pub author_name: String,
    /// Their guild roles when the trigger was a message that carried them (a live gateway
    /// message); empty otherwise. Role entries of `budgets.exempt` and `discord.admins` match
    /// these.
    pub author_roles: Vec<Snowflake>,
    /// The trigger's readable text; for a workflow, the resume prompt with the answers.
    pub text: String,
    /// Set when a finished workflow started this run.
    pub workflow_id: Option<String>,
    /// The configured agent that must answer (a schedule's `agent`); `None`: the session's.
    pub agent: Option<switchboard_agents::AgentName>,
}

/// Where a run stands, as `runs.list` shows it.
#[derive(
    Debug, Clone, Copy, PartialEq, Eq, serde::Serialize, serde::Deserialize, schemars::JsonSchema,
)]
#[serde(rename_all = "snake_case")]
pub enum RunState {
    /// Its agent is working.
    Running,
    /// It waits for the session's running run to finish.
    Queued,
    /// It ended with an answer (from the node's record of recently ended runs).
    Finished,
    /// It ended with an error, or ran out of time.
    Failed,
    /// It was stopped (`runs.abort`, the run that asked being stopped, a client gone).
    Aborted,
    /// Its node stopped renewing its lease before it ended (died, restarted, lost the store);
    /// `agent.interrupted` said what became of its question.
    Interrupted,
}

impl RunState {
    /// Whether the run has ended.
    pub fn ended(self) -> bool {
        matches!(
            self,
            RunState::Finished | RunState::Failed | RunState::Aborted | RunState::Interrupted
        )
    }
}

/// One run, running or queued, as `runs.list` shows it.
#[derive(
    Debug, Clone, PartialEq, Eq, serde::Serialize, serde::Deserialize, schemars::JsonSchema,
)]
#[serde(rename_all = "camelCase")]
pub struct RunView {
    /// The run's id (`run-<hex>`, as the audit log's `run` names it); a queued run gets its
    /// id when it starts, so it has none yet.
    pub run_id: Option<String>,
    /// The session it answers in.
    #[schemars(with = "String")]
    pub session_id: Snowflake,
    /// Running or queued.
    pub state: RunState,
    /// When it started (ms since the Unix epoch); `None` while queued.
    pub started_ms: Option<u64>,
    /// Who asked (the trigger's author).
    #[schemars(with = "String")]
    pub requested_by: Snowflake,
    /// Their name as people see it.
    pub requested_by_name: String,
    /// The message it answers, when a message started it.
    #[schemars(with = "Option<String>")]
    pub trigger_message_id: Option<Snowflake>,
    /// The workflow whose answers resumed it, when one did.
    pub workflow_id: Option<String>,
    /// The start of the trigger's readable text (at most [`RUN_TEXT_CHARS`] characters).
    pub text: String,
    /// For a handoff's sub-run (`agent.handoff`, a chat-API run): the run that asked, when a
    /// run did.
    #[serde(default)]
    pub parent_run_id: Option<String>,
    /// The agent that works on it, when the bridge knows it apart from the session's.
    #[serde(default)]
    pub agent: Option<String>,
    /// Who started it when it was an API caller (`token:NAME`, `operator`): the chat API, an
    /// `agent.handoff` call over the API. `None` for runs started in Discord.
    #[serde(default)]
    pub started_by: Option<String>,
    /// When it ended (ms since the Unix epoch); `None` while it runs or waits.
    #[serde(default)]
    pub ended_ms: Option<u64>,
    /// The start of its answer once it ended (at most [`RUN_ANSWER_CHARS`] characters).
    #[serde(default)]
    pub answer: Option<String>,
    /// The tokens its model calls used, once it ended, when they were counted.
    #[serde(default)]
    pub usage: Option<RunUsage>,
}

/// The tokens an ended run's model calls used.
#[derive(
    Debug, Clone, Copy, PartialEq, Eq, serde::Serialize, serde::Deserialize, schemars::JsonSchema,
)]
#[serde(rename_all = "camelCase")]
pub struct RunUsage {
    /// Prompt tokens, summed over its model rounds.
    pub prompt_tokens: u64,
    /// Completion tokens, summed over its model rounds.
    pub completion_tokens: u64,
}

/// How much of an ended run's answer [`RunView::answer`] keeps.
pub const RUN_ANSWER_CHARS: usize = 2_000;

/// How much of a trigger's text [`RunView::text`] shows.
pub const RUN_TEXT_CHARS: usize = 200;

/// Which run to stop.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum AbortTarget<'a> {
    /// The run with this id (`run-<hex>`).
    Run(&'a str),
    /// Whatever runs in this session now.
    Session(Snowflake),
}

/// What `/abort` did.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum AbortOutcome {
    /// The running run is being stopped.
    Stopped {
        /// Its id.
        run_id: String,
        /// Its session.
        session_id: Snowflake,
    },
    /// Someone else started the running run, and the caller is not an admin.
    NotYours {
        /// Whose run it is.
        owner: String,
    },
    /// Nothing is running in the session (or no running run has that id).
    NothingRunning,
}

/// The agent, as the platform side sees it. Calls never block: work is queued.
pub trait Runs: Send + Sync {
    /// A message was stored: queue a run when it calls for one (a mention of the bot, a reply
    /// to it, an active channel, a DM).
    fn arrived(&self, message: &Arrival<'_>);
    /// Queue a run for `trigger` (a resumed workflow).
    fn enqueue(&self, trigger: Trigger);
    /// Every run in progress and queued (a session's only, when given), running ones first,
    /// by session; bounded by the sessions' queues.
    fn list(&self, session: Option<Snowflake>) -> Vec<RunView>;
    /// Stops the running run `target` names when `user` started it, or when `admin`; queued
    /// runs stay.
    fn abort(&self, target: AbortTarget<'_>, user: Snowflake, admin: bool) -> AbortOutcome;
    /// [`Runs::list`] as the cluster sees it: a bridge that keeps its runs in a shared store
    /// reads them there (every node's, ended ones too). By default, [`Runs::list`].
    fn list_runs(&self, session: Option<Snowflake>) -> BoxFuture<'_, Vec<RunView>> {
        Box::pin(std::future::ready(self.list(session)))
    }
    /// [`Runs::abort`] wherever the run runs: a bridge that keeps its runs in a shared store
    /// flags another node's run there. By default, [`Runs::abort`].
    fn abort_run<'a>(
        &'a self,
        target: AbortTarget<'a>,
        user: Snowflake,
        admin: bool,
    ) -> BoxFuture<'a, AbortOutcome> {
        Box::pin(std::future::ready(self.abort(target, user, admin)))
    }
    /// The agent that answers in `session` and why (what `/agent` shows).
    fn session_agent(
        &self,
        session: Snowflake,
    ) -> std::pin::Pin<
        Box<dyn std::future::Future<Output = crate::handoff::SessionAgent> + Send + '_>,
    > {
        let _ = session;
        Box::pin(std::future::ready(crate::handoff::SessionAgent {
            agent: None,
            source: "default",
            agents: Vec::new(),
        }))
    }
    /// `/agent set NAME` (`Some`) or back to the config's agent (`None`) for `session`, kept
    /// in the store; the refusal says why (no such agent, with a did-you-mean).
    fn bind_agent(
        &self,
        session: Snowflake,
        agent: Option<String>,
    ) -> BoxFuture<'_, Result<(), String>> {
        let _ = (session, agent);
        Box::pin(std::future::ready(Err(
            "this agent bridge has one agent".to_owned()
        )))
    }
    /// `agent.handoff`: runs the named agent and answers once its run finished (or timed out).
    fn handoff(
        &self,
        request: crate::handoff::HandoffRequest,
    ) -> std::pin::Pin<
        Box<
            dyn std::future::Future<
                    Output = Result<crate::handoff::HandoffAnswer, crate::error::ToolError>,
                > + Send
                + '_,
        >,
    > {
        let _ = request;
        Box::pin(async {
            Err(crate::error::ToolError::not_found(
                protocol::ErrorCode::NoAgent,
                "this agent bridge cannot hand off",
            ))
        })
    }
}
