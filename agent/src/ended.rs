//! The node's record of recently ended runs that have no row in the store's run queue —
//! `agent.handoff`'s sub-runs and chat-API runs — so that `runs.list` (`state=finished`, …)
//! and `GET /v1/runs/{id}` still answer for such a run after it ended: a chat-API client reads
//! its run's outcome afterwards. It also keeps the token usage of this node's ended runs,
//! which the rows do not carry. Per node and bounded (the oldest record goes first); a restart
//! forgets it. Runs started by a message or a schedule are rows: `runs.list` reads their end
//! from the store, on every node.

use std::collections::VecDeque;
use std::sync::Mutex;

use entity::Snowflake;
use switchboard_engine::runs::RunView;

/// How many ended runs one node remembers.
pub(crate) const MAX_ENDED_RUNS: usize = 1_000;

/// Ended runs, newest last, at most `bound`.
pub(crate) struct EndedRuns {
    bound: usize,
    runs: Mutex<VecDeque<RunView>>,
}

impl EndedRuns {
    pub(crate) fn new(bound: usize) -> EndedRuns {
        EndedRuns {
            bound,
            runs: Mutex::new(VecDeque::with_capacity(bound.min(64))),
        }
    }

    /// Records `view` (its end state, time and answer filled in), dropping the oldest record
    /// beyond the bound.
    pub(crate) fn record(&self, view: RunView) {
        if self.bound == 0 {
            return;
        }
        let mut runs = self.lock();
        while runs.len() >= self.bound {
            runs.pop_front();
        }
        runs.push_back(view);
    }

    /// The recorded runs (a session's only, when given), newest first.
    pub(crate) fn views(&self, session: Option<Snowflake>) -> Vec<RunView> {
        self.lock()
            .iter()
            .rev()
            .filter(|view| session.is_none_or(|s| view.session_id == s))
            .cloned()
            .collect()
    }

    fn lock(&self) -> std::sync::MutexGuard<'_, VecDeque<RunView>> {
        self.runs
            .lock()
            .unwrap_or_else(std::sync::PoisonError::into_inner)
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use switchboard_engine::runs::RunState;

    fn ended(n: u64, session: u64) -> RunView {
        RunView {
            run_id: Some(format!("run-{n}")),
            session_id: Snowflake(session),
            state: RunState::Finished,
            started_ms: Some(n),
            requested_by: Snowflake(1),
            requested_by_name: "api".to_owned(),
            trigger_message_id: None,
            workflow_id: None,
            text: String::new(),
            parent_run_id: None,
            agent: None,
            started_by: None,
            ended_ms: Some(n + 1),
            answer: Some(format!("answer {n}")),
            usage: None,
        }
    }

    fn ids(views: &[RunView]) -> Vec<String> {
        views.iter().filter_map(|v| v.run_id.clone()).collect()
    }

    #[test]
    fn the_record_keeps_only_the_newest_runs_up_to_its_bound() {
        let record = EndedRuns::new(3);
        for n in 1..=5 {
            record.record(ended(n, 7 + n % 2));
        }
        assert_eq!(ids(&record.views(None)), ["run-5", "run-4", "run-3"]);
        assert_eq!(ids(&record.views(Some(Snowflake(7)))), ["run-4"]);
    }

    #[test]
    fn a_record_with_no_room_keeps_nothing() {
        let record = EndedRuns::new(0);
        record.record(ended(1, 7));
        assert!(record.views(None).is_empty());
    }
}
