//! `agent.handoff`'s seam: what the engine's [`Runs::handoff`](crate::runs::Runs::handoff)
//! passes between the callable (callables crate) and the agent bridge that runs the sub-run,
//! and the callables the pipeline holds open past `toolserver.call_timeout_s`.

use std::time::Duration;

use schemars::JsonSchema;
use serde::Serialize;

use crate::auth::Caller;
use crate::surface::AllowedChannel;

/// `timeoutS` when not given.
pub const DEFAULT_HANDOFF_TIMEOUT: Duration = Duration::from_secs(600);
/// The largest `timeoutS`.
pub const MAX_HANDOFF_TIMEOUT: Duration = Duration::from_secs(3_600);
/// The longest prompt handed over, in characters.
pub const MAX_HANDOFF_PROMPT_CHARS: usize = 16_000;
/// The callables held open past `toolserver.call_timeout_s` (their own timeout bounds them).
pub const HELD_OPEN: [&str; 1] = ["agent.handoff"];

/// What the bridge is asked to do.
#[derive(Debug)]
pub struct HandoffRequest {
    /// Who asked: a run's capability (whose scope bounds the sub-run's), a token, the operator.
    pub caller: Caller,
    /// The target agent's name, as given.
    pub agent: String,
    /// What it is asked.
    pub prompt: String,
    /// Where the sub-run works: the caller's session, or the allowed one `sessionId` named.
    pub session: AllowedChannel,
    /// How long the caller waits.
    pub timeout: Duration,
    /// Where the sub-run's text so far goes as the model writes it (the chat API streams it).
    pub text: Option<tokio::sync::watch::Sender<String>>,
    /// Told the run's id as soon as it has one (before it works), so the caller can stop it.
    pub started: Option<tokio::sync::oneshot::Sender<String>>,
}

/// The tokens a sub-run's model calls used, as recorded for its usage (reported by the model,
/// else estimated).
#[derive(Debug, Clone, Copy, PartialEq, Eq, Default)]
pub struct HandoffUsage {
    /// Prompt tokens, summed over the run's model calls.
    pub prompt_tokens: u64,
    /// Completion tokens, summed likewise.
    pub completion_tokens: u64,
}

/// What the sub-run came to.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct HandoffAnswer {
    /// The sub-run's id (`run-<parent>.<hex>` when a run asked).
    pub run_id: String,
    /// The agent that answered.
    pub agent: String,
    /// Its final text; with `timed_out`, what it had written by then.
    pub text: String,
    /// Whether the timeout ended it.
    pub timed_out: bool,
    /// What its model calls used; `None` when nothing records usage (a command agent, no
    /// usage store).
    pub usage: Option<HandoffUsage>,
}

/// Where a session's agent comes from, as `/agent` shows it.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, JsonSchema)]
#[serde(rename_all = "camelCase")]
pub struct SessionAgent {
    /// The agent that answers there; `None` when no agent is configured.
    pub agent: Option<String>,
    /// `set` (`/agent set`), `config` (`[sessions.X] agent`, or its channel's for a thread) or
    /// `default` (`agents.default`).
    pub source: &'static str,
    /// Every configured agent.
    pub agents: Vec<String>,
}
