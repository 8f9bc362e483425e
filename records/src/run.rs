//! Agent runs (issues 23 and 26): every run any node starts, queued per session so a session's
//! runs happen one at a time in arrival order, cluster-wide, each held by a node under a lease
//! it renews; a run whose node stopped renewing is found and marked interrupted.

use std::fmt;
use std::str::FromStr;

use serde::{Deserialize, Serialize};

/// Finished runs are kept a month (the console and `GET /v1/runs` list them).
pub const FINISHED_RUNS_KEPT_MS: u64 = 30 * 24 * 3600 * 1000;

/// Where a run is.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash, Serialize, Deserialize)]
#[serde(rename_all = "snake_case")]
pub enum RunState {
    /// Waiting for its session's earlier runs.
    Queued,
    /// A node holds it under a lease.
    Running,
    /// It answered.
    Finished,
    /// It ended with an error.
    Failed,
    /// Someone aborted it.
    Aborted,
    /// Its node stopped renewing the lease (died, restarted, lost the store).
    Interrupted,
}

impl RunState {
    /// Every state, in the order above.
    pub const ALL: [RunState; 6] = [
        RunState::Queued,
        RunState::Running,
        RunState::Finished,
        RunState::Failed,
        RunState::Aborted,
        RunState::Interrupted,
    ];

    /// The name a store and the API use.
    pub fn as_str(self) -> &'static str {
        match self {
            RunState::Queued => "queued",
            RunState::Running => "running",
            RunState::Finished => "finished",
            RunState::Failed => "failed",
            RunState::Aborted => "aborted",
            RunState::Interrupted => "interrupted",
        }
    }

    /// Whether the run is over.
    pub fn is_over(self) -> bool {
        !matches!(self, RunState::Queued | RunState::Running)
    }
}

impl fmt::Display for RunState {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(self.as_str())
    }
}

impl FromStr for RunState {
    type Err = String;

    fn from_str(text: &str) -> Result<Self, Self::Err> {
        RunState::ALL
            .into_iter()
            .find(|state| state.as_str() == text)
            .ok_or_else(|| {
                format!(
                    "`{}` is not a run state; use one of queued, running, finished, failed, aborted, interrupted",
                    text.chars().take(40).collect::<String>()
                )
            })
    }
}

/// A run to queue.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "camelCase")]
pub struct NewRun {
    /// Its id (the caller makes it unique).
    pub id: String,
    /// The session it runs in (a channel id, or an API session such as `api:<token>`): runs
    /// of one session happen one at a time.
    pub session: String,
    /// The agent that runs it.
    pub agent: String,
    /// What started it (`message:<id>`, `schedule:<id>`, `handoff`, `api`...).
    pub trigger: String,
    /// Who asked (a caller key: `user:<id>`, `token:<name>`, `operator`).
    pub requested_by: Option<String>,
    /// The run that handed this one off.
    pub parent_run: Option<String>,
    /// When it was queued, ms since the Unix epoch.
    pub enqueued_ms: u64,
}

/// A run as a store keeps it.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "camelCase")]
pub struct Run {
    /// Its id.
    pub id: String,
    /// The session it runs in.
    pub session: String,
    /// The agent.
    pub agent: String,
    /// What started it.
    pub trigger: String,
    /// Who asked.
    pub requested_by: Option<String>,
    /// The run that handed this one off.
    pub parent_run: Option<String>,
    /// Where it is.
    pub state: RunState,
    /// Its place in the queue: every run queued later has a greater one.
    pub seq: u64,
    /// The node holding it (while running; the last one after).
    pub node: Option<String>,
    /// Until when that node's lease holds, ms since the Unix epoch (while running).
    pub lease_until_ms: Option<u64>,
    /// Someone asked it to stop.
    pub abort_requested: bool,
    /// When it was queued.
    pub enqueued_ms: u64,
    /// When a node claimed it.
    pub started_ms: Option<u64>,
    /// When it ended.
    pub finished_ms: Option<u64>,
    /// What it answered, or why it failed.
    pub final_text: Option<String>,
    /// What its model calls used, summed (kept when it ends; `None` before, or when it called
    /// no model).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub usage: Option<RunUsage>,
}

/// What a run's model calls used, summed over its rounds.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Default, Serialize, Deserialize)]
#[serde(rename_all = "camelCase")]
pub struct RunUsage {
    /// Prompt tokens.
    pub tokens_in: u64,
    /// Completion tokens.
    pub tokens_out: u64,
    /// What they cost, in millionths of a US dollar, when the agent has prices.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub micro_usd: Option<u64>,
}

impl RunUsage {
    /// The usage as a store keeps it in one text column (JSON).
    pub fn to_text(&self) -> String {
        // A struct of numbers always serializes.
        serde_json::to_string(self).unwrap_or_default()
    }

    /// A kept column read back; `None` for garbage (a damaged row loses only its usage).
    pub fn from_text(text: &str) -> Option<RunUsage> {
        serde_json::from_str(text).ok()
    }
}

impl Run {
    /// A queued run from a new one.
    pub fn queued(new: NewRun, seq: u64) -> Run {
        Run {
            id: new.id,
            session: new.session,
            agent: new.agent,
            trigger: new.trigger,
            requested_by: new.requested_by,
            parent_run: new.parent_run,
            state: RunState::Queued,
            seq,
            node: None,
            lease_until_ms: None,
            abort_requested: false,
            enqueued_ms: new.enqueued_ms,
            started_ms: None,
            finished_ms: None,
            final_text: None,
            usage: None,
        }
    }

    /// A new run at place `seq` that started under `lease` (a run kept outside its session's
    /// queue: a sub-run, a chat-API run).
    pub fn started(new: NewRun, seq: u64, lease: Lease) -> Run {
        Run {
            state: RunState::Running,
            lease_until_ms: Some(lease.until_ms()),
            started_ms: Some(lease.now_ms),
            node: Some(lease.node),
            ..Run::queued(new, seq)
        }
    }
}

/// A node's hold on a run or a shard as it takes or renews it: from `now_ms` for `lease_ms`.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Lease {
    /// The node that holds it.
    pub node: String,
    /// Now, ms since the Unix epoch.
    pub now_ms: u64,
    /// How long the hold lasts unless renewed, ms.
    pub lease_ms: u64,
}

impl Lease {
    /// `node`'s hold from `now_ms` for `lease_ms`.
    pub fn new(node: impl Into<String>, now_ms: u64, lease_ms: u64) -> Lease {
        Lease {
            node: node.into(),
            now_ms,
            lease_ms,
        }
    }

    /// When the hold ends unless renewed (`now_ms + lease_ms`, saturating).
    pub fn until_ms(&self) -> u64 {
        self.now_ms.saturating_add(self.lease_ms)
    }
}

/// Queued runs a node takes into a run it holds (a burst answered by one run).
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct RunJoin {
    /// The run the node holds; the joined runs share its lease and end with it.
    pub held: String,
    /// The node that holds `held`.
    pub node: String,
    /// The queued runs to take, in any order.
    pub run_ids: Vec<String>,
    /// Now, ms since the Unix epoch: the joined runs' start.
    pub now_ms: u64,
}

/// How a run ended, as its node reports it.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct RunEnd {
    /// `Finished`, `Failed` or `Aborted` (anything else is refused).
    pub state: RunState,
    /// What it answered, or why it failed.
    pub final_text: Option<String>,
    /// What its model calls used.
    pub usage: Option<RunUsage>,
    /// When, ms since the Unix epoch.
    pub at_ms: u64,
}

/// Which runs to list: newest first (by queue place), at most `limit`, those with a place
/// below `before_seq` when given (the next page).
#[derive(Debug, Clone, PartialEq, Eq, Default)]
pub struct RunFilter {
    /// Only this session's.
    pub session: Option<String>,
    /// Only this agent's.
    pub agent: Option<String>,
    /// Only runs in this state.
    pub state: Option<RunState>,
    /// Only runs this one handed off.
    pub parent_run: Option<String>,
    /// Only runs queued before this place (a cursor).
    pub before_seq: Option<u64>,
    /// At most this many (a store caps it at [`RunFilter::MAX_LIMIT`]).
    pub limit: usize,
}

impl RunFilter {
    /// The most runs one listing answers.
    pub const MAX_LIMIT: usize = 1_000;

    /// Whether `run` passes the filter (the reference every backend matches).
    pub fn matches(&self, run: &Run) -> bool {
        self.session
            .as_ref()
            .is_none_or(|session| &run.session == session)
            && self.agent.as_ref().is_none_or(|agent| &run.agent == agent)
            && self.state.is_none_or(|state| run.state == state)
            && self
                .parent_run
                .as_ref()
                .is_none_or(|parent| run.parent_run.as_ref() == Some(parent))
            && self.before_seq.is_none_or(|before| run.seq < before)
    }

    /// The limit a store applies.
    pub fn capped_limit(&self) -> usize {
        self.limit.min(Self::MAX_LIMIT)
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn run_states_read_back_and_garbage_names_the_states() {
        for state in RunState::ALL {
            assert_eq!(state.as_str().parse::<RunState>(), Ok(state));
            assert_eq!(
                serde_json::to_value(state).unwrap(),
                serde_json::Value::String(state.as_str().into())
            );
        }
        let err = "done".parse::<RunState>().unwrap_err();
        assert!(err.contains("finished"), "{err}");
    }
}
