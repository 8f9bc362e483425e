//! Runs that start at once, outside their session's queue (issue 23 §4): a handoff's sub-run
//! and a chat-API run, whose caller waits for the answer. Each gets a row of the store's
//! [`RunStore`](switchboard_store::RunStore) too (`parent_run`: the run that handed it off),
//! so that `runs.list`, `cluster status` and the usage of every run are seen from every node.
//! The row is renewed while the run goes — an abort asked through the store, on any node,
//! stops it — and ends with what its model calls used. A row that cannot be written is
//! logged and the run goes on: bookkeeping never fails a run its caller waits for.

use entity::Snowflake;
use switchboard_engine::runs::{RunState, RunView};
use switchboard_records::{NewRun, Run, RunUsage};

use crate::{metering, now_ms, queue, Bridge};

/// The `trigger` of a handoff's sub-run's row.
pub(crate) const HANDOFF_TRIGGER: &str = "handoff";
/// The `trigger` of a chat-API run's row.
pub(crate) const API_TRIGGER: &str = "api";

/// Whether a row's trigger is one of a run that started at once (it has no message to answer
/// again or to tell it was interrupted: its caller went with its node).
pub(crate) fn started_at_once(trigger: &str) -> bool {
    trigger == HANDOFF_TRIGGER || trigger == API_TRIGGER
}

/// What a run's model calls used, as its row keeps it.
pub(crate) fn run_usage(meter: &metering::Meter) -> RunUsage {
    let (tokens_in, tokens_out) = meter.tokens();
    RunUsage {
        tokens_in,
        tokens_out,
        micro_usd: Some(meter.micros()),
    }
}

/// A row's usage as `runs.list` shows it.
pub(crate) fn view_usage(usage: RunUsage) -> switchboard_engine::runs::RunUsage {
    switchboard_engine::runs::RunUsage {
        prompt_tokens: usage.tokens_in,
        completion_tokens: usage.tokens_out,
    }
}

/// How `runs.list` shows the row of a run that started at once on another node (that node
/// kept its prompt; the row keeps who asked, where, and its answer).
pub(crate) fn row_view(row: &Run, state: RunState) -> RunView {
    let user = row
        .requested_by
        .as_deref()
        .and_then(|by| by.strip_prefix("user:"))
        .and_then(|id| id.parse().ok());
    RunView {
        run_id: Some(row.id.clone()),
        session_id: row.session.parse().map(Snowflake).unwrap_or_default(),
        state,
        started_ms: row.started_ms,
        requested_by: user.map(Snowflake).unwrap_or_default(),
        requested_by_name: row
            .parent_run
            .as_ref()
            .map_or_else(|| "chat API".to_owned(), |p| format!("agent run {p}")),
        trigger_message_id: None,
        workflow_id: None,
        text: String::new(),
        parent_run_id: row.parent_run.clone(),
        agent: Some(row.agent.clone()),
        started_by: row
            .requested_by
            .clone()
            .filter(|by| !by.starts_with("user:")),
        ended_ms: row.finished_ms,
        answer: row_answer(row),
        usage: row.usage.map(view_usage),
    }
}

/// An ended row's answer as `runs.list` shows it (at most
/// [`switchboard_engine::runs::RUN_ANSWER_CHARS`]); `None` while it has not ended.
pub(crate) fn row_answer(row: &Run) -> Option<String> {
    row.state.is_over().then(|| {
        row.final_text
            .as_deref()
            .unwrap_or_default()
            .chars()
            .take(switchboard_engine::runs::RUN_ANSWER_CHARS)
            .collect()
    })
}

/// The row of a run that started at once, renewed while the run goes.
pub(crate) struct HeldRow {
    id: String,
    renewing: tokio::task::JoinHandle<()>,
    /// Set when [`Bridge::end_held_row`] ends the row; a row dropped before (its run's
    /// future was dropped: the caller that waited went away, or the run that handed off was
    /// stopped) is ended as aborted, never left running until its lease runs out.
    ended: bool,
    bridge: Bridge,
}

impl Drop for HeldRow {
    fn drop(&mut self) {
        self.renewing.abort();
        if self.ended {
            return;
        }
        let (bridge, id) = (self.bridge.clone(), std::mem::take(&mut self.id));
        self.bridge.inner.runtime.spawn(async move {
            bridge.end_rows(&[id], "aborted", None, None).await;
            bridge.inner.queue.wake.notify_one();
        });
    }
}

impl Bridge {
    /// Keeps the row of a run that starts now on this node and renews it; `None` (logged)
    /// when the store refuses it.
    pub(crate) async fn hold_row(&self, row: NewRun) -> Option<HeldRow> {
        let queue = &self.inner.queue;
        let lease_ms = u64::try_from(self.lease().as_millis()).unwrap_or(u64::MAX);
        match queue
            .store
            .start_run(row, queue.lease(now_ms(), lease_ms))
            .await
        {
            Ok(run) => Some(HeldRow {
                renewing: self
                    .inner
                    .runtime
                    .spawn(renew(self.clone(), run.id.clone())),
                id: run.id,
                ended: false,
                bridge: self.clone(),
            }),
            Err(error) => {
                tracing::warn!("cannot keep the run's row: {error}; it runs without one (other nodes do not list it)");
                None
            }
        }
    }

    /// Ends a held row as `outcome` (as `run.finished` names it), with its usage.
    pub(crate) async fn end_held_row(
        &self,
        held: Option<HeldRow>,
        outcome: &str,
        text: Option<String>,
        usage: Option<RunUsage>,
    ) {
        let Some(mut held) = held else {
            return;
        };
        held.ended = true;
        held.renewing.abort();
        self.end_rows(std::slice::from_ref(&held.id), outcome, text, usage)
            .await;
        // Runs queued in its session after it may start now.
        self.inner.queue.wake.notify_one();
    }
}

/// Renews a held row's lease; stops its run when someone asked it to stop through the store
/// (`runs.abort` on another node) or when its lease was lost.
async fn renew(bridge: Bridge, id: String) {
    let mut renewals = queue::Renewals::new(bridge.lease());
    while renewals.next(&bridge.inner.queue).await {
        let stop = match renewals.renew(&bridge.inner.queue, &id).await {
            Ok(switchboard_store::Heartbeat::Held {
                abort_requested, ..
            }) => abort_requested,
            Ok(switchboard_store::Heartbeat::Lost) => true,
            Err(error) => {
                tracing::warn!(run = %id, "cannot renew the run's lease: {error}");
                false
            }
        };
        if stop {
            // As an admin: whoever asked through the store passed `runs.abort`'s checks there.
            let outcome = bridge.inner.handoffs.abort(&id, Snowflake(0), true);
            tracing::info!(run = %id, ?outcome, "a run that started at once is stopped (asked through the store, or its lease was lost)");
            return;
        }
    }
}
