//! Runs in the store (issue 23 §3): every trigger the bridge takes becomes a row of the
//! store's [`RunStore`], queued behind its session's runs; every node runs a claim loop that
//! takes the oldest claimable row (a session's runs one at a time, in arrival order,
//! cluster-wide, whichever node received the message), holds it under a lease its heartbeats
//! renew, and ends it. A row whose node stopped renewing is interrupted by whichever node's
//! sweep finds it first, and `agent.interrupted` says what then happens to its question.
//!
//! The row carries the trigger itself (its `trigger` field, JSON: [`encode`]), so any node can
//! run it, and a restarted node finds the rows queued before it stopped.
//!
//! What stays per node: the wait for a claim's durability (SQLite decides a claim in memory
//! and writes it behind; its one node is the one that runs the row), a schedule's waiter for
//! its run's report (answered from the row when another node ran it), the newest message a
//! person wrote in each session it received (the loop guard's count itself is the store's),
//! and the abort of a run this node executes (another node's run is asked to
//! stop through the row's `abort_requested`, which its heartbeat reads).

use std::collections::HashMap;
use std::sync::{Arc, Mutex, MutexGuard};
use std::time::Duration;

use entity::Snowflake;
use serde::{Deserialize, Serialize};
use switchboard_engine::runs::Trigger;
use switchboard_records::Lease;
use switchboard_store::{Durable, RunStore};
use tokio::sync::{oneshot, Notify};

/// The most triggers waiting for their row to be written, per node: past it a trigger is
/// turned away with a notice (the store is far behind).
pub(crate) const ADMIT_BACKLOG: usize = 4_096;

/// How many expired runs one sweep interrupts.
pub(crate) const SWEEP_BATCH: usize = 32;

/// The claim loop's poll when nothing wakes it: other nodes' rows (a shared store), leases to
/// sweep, and schedules' reports of runs another node ran.
pub(crate) const POLL_SHARED: Duration = Duration::from_millis(250);
/// The same on a store only this node writes (its own enqueues and ends wake the loop).
pub(crate) const POLL_ALONE: Duration = Duration::from_secs(1);

/// The most often a running run's lease is renewed (its abort flag is read with it).
const HEARTBEAT_EVERY: Duration = Duration::from_secs(1);

/// How long a stopping node waits for the runs it executes to end before it gives their
/// leases back (they are then taken up as interrupted, under `agent.interrupted`).
pub(crate) const SHUTDOWN_GRACE: Duration = Duration::from_secs(10);

/// How often a run's lease is renewed: a quarter of it, at most every second.
pub(crate) fn heartbeat_period(lease: Duration) -> Duration {
    (lease / 4).clamp(Duration::from_millis(50), HEARTBEAT_EVERY)
}

/// The renewals of a running run's lease: ticks (the first a period from now), and the
/// heartbeat each sends for the rows this node holds.
pub(crate) struct Renewals {
    tick: tokio::time::Interval,
    lease_ms: u64,
}

impl Renewals {
    pub(crate) fn new(lease: Duration) -> Self {
        let period = heartbeat_period(lease);
        let mut tick = tokio::time::interval_at(tokio::time::Instant::now() + period, period);
        tick.set_missed_tick_behavior(tokio::time::MissedTickBehavior::Delay);
        Self {
            tick,
            lease_ms: u64::try_from(lease.as_millis()).unwrap_or(u64::MAX),
        }
    }

    /// Waits for the next renewal: false once this node gave its runs' leases back (`released`).
    pub(crate) async fn next(&mut self, queue: &RunQueue) -> bool {
        self.tick.tick().await;
        !queue.released.load(std::sync::atomic::Ordering::Acquire)
    }

    /// Renews `row`'s lease for this node; the answer says whether someone asked its run to stop.
    pub(crate) async fn renew(
        &self,
        queue: &RunQueue,
        row: &str,
    ) -> Result<switchboard_store::Heartbeat, switchboard_store::StoreError> {
        queue
            .store
            .heartbeat_run(row, queue.lease(crate::now_ms(), self.lease_ms))
            .await
    }
}

/// A trigger as a run row keeps it.
#[derive(Debug, Serialize, Deserialize)]
struct Kept {
    channel: Snowflake,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    message: Option<Snowflake>,
    author: Snowflake,
    author_name: String,
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    roles: Vec<Snowflake>,
    text: String,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    workflow: Option<String>,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    agent: Option<String>,
    /// How many times the run was put back after an interruption (`agent.interrupted =
    /// "rerun"`).
    #[serde(default, skip_serializing_if = "is_zero")]
    reruns: u32,
    /// The run whose nonces this one's posts carry (`switchboard_engine::nonce`): the first
    /// execution's id when it runs again under a new id, so it posts nothing twice.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    nonces_of: Option<String>,
}

fn is_zero(n: &u32) -> bool {
    *n == 0
}

/// How many times an interrupted run is run again before its question is told instead: a run
/// that takes its node down each time does not take every node down in turn, forever.
pub(crate) const MAX_RERUNS: u32 = 2;

/// The trigger of the row `run` run once more after an interruption (its count of reruns one
/// up, the run whose nonces it posts with kept); `None` when it was run again [`MAX_RERUNS`]
/// times already, or does not read.
pub(crate) fn rerun_trigger(text: &str, run: &str) -> Option<String> {
    let mut kept: Kept = serde_json::from_str(text).ok()?;
    if kept.reruns >= MAX_RERUNS {
        return None;
    }
    kept.reruns += 1;
    kept.nonces_of.get_or_insert_with(|| run.to_owned());
    serde_json::to_string(&kept).ok()
}

/// The run whose nonces a row's posts carry, when it is not the row's own: an interrupted run
/// queued again under a new id.
pub(crate) fn nonces_of(text: &str) -> Option<String> {
    serde_json::from_str::<Kept>(text).ok()?.nonces_of
}

/// The row's `trigger`: the whole trigger, so that any node can run it.
pub(crate) fn encode(trigger: &Trigger) -> String {
    let kept = Kept {
        channel: trigger.channel_id,
        message: trigger.message_id,
        author: trigger.author_id,
        author_name: trigger.author_name.clone(),
        roles: trigger.author_roles.clone(),
        text: trigger.text.clone(),
        workflow: trigger.workflow_id.clone(),
        agent: trigger.agent.as_ref().map(ToString::to_string),
        reruns: 0,
        nonces_of: None,
    };
    // A struct of strings and numbers always serializes.
    serde_json::to_string(&kept).unwrap_or_default()
}

/// A row's trigger; `None` when it does not read (a row another program wrote, a damaged one).
pub(crate) fn decode(text: &str) -> Option<Trigger> {
    let kept: Kept = serde_json::from_str(text).ok()?;
    let agent = match kept.agent {
        Some(name) => Some(name.parse().ok()?),
        None => None,
    };
    Some(Trigger {
        channel_id: kept.channel,
        message_id: kept.message,
        author_id: kept.author,
        author_name: kept.author_name,
        author_roles: kept.roles,
        text: kept.text,
        workflow_id: kept.workflow,
        agent,
    })
}

/// A trigger on its way into the store, in arrival order.
pub(crate) struct Admission {
    pub trigger: Trigger,
    pub missed: bool,
    /// From another bot: the loop guard counts it once it is claimed, after the newest
    /// message a person wrote in the session when it arrived (so a person's message that
    /// arrives later does not undo the stop of one that came before it).
    pub bot: Option<Option<Snowflake>>,
    pub report: Option<oneshot::Sender<switchboard_schedule::RunReport>>,
}

/// A run this node executes: how to stop it, and who may.
pub(crate) struct Executing {
    pub session: Snowflake,
    /// The rows it holds: its own, then those of a burst it answers together.
    pub rows: Vec<String>,
    pub askers: Vec<Snowflake>,
    pub owner: String,
    pub abort: Option<oneshot::Sender<()>>,
    /// The run whose nonces its posts carry when not its own (`nonces_of`).
    pub nonces_of: Option<String>,
}

/// The node's side of the store's run queue.
pub(crate) struct RunQueue {
    pub store: Arc<dyn RunStore>,
    pub node: String,
    /// Whether other nodes write to the same store.
    pub shared: bool,
    /// Wakes the claim loop: a row was queued or ended here.
    pub wake: Notify,
    /// Triggers to claim and queue, in arrival order.
    pub admit: Mutex<Option<tokio::sync::mpsc::Sender<Admission>>>,
    /// Whether the claim loop runs.
    pub started: std::sync::atomic::AtomicBool,
    /// The node is shutting down: no more rows are claimed here.
    pub stopping: std::sync::atomic::AtomicBool,
    /// The node gave back the leases of the runs it still executes: heartbeats stop renewing
    /// them, so that the next sweep (this node restarted, or another) takes them up.
    pub released: std::sync::atomic::AtomicBool,
    /// Claims won here whose record is still being written, by run id.
    durables: Mutex<HashMap<String, Vec<(Snowflake, Durable)>>>,
    /// Schedules' waiters for their run's report, by run id.
    reports: Mutex<HashMap<String, oneshot::Sender<switchboard_schedule::RunReport>>>,
    /// The runs this node executes, by their own row's id.
    executing: Mutex<HashMap<String, Executing>>,
    /// What the runs this node executes used, kept as each ends, until its row ends.
    usages: Mutex<HashMap<String, switchboard_records::RunUsage>>,
}

fn lock<T>(mutex: &Mutex<T>) -> MutexGuard<'_, T> {
    mutex
        .lock()
        .unwrap_or_else(std::sync::PoisonError::into_inner)
}

impl RunQueue {
    /// The runs `filter` selects, as many as the store lists at once (its `limit` is set to
    /// [`RunFilter::MAX_LIMIT`](switchboard_records::RunFilter::MAX_LIMIT)).
    pub(crate) async fn runs(
        &self,
        filter: switchboard_records::RunFilter,
    ) -> Result<Vec<switchboard_records::Run>, switchboard_store::StoreError> {
        let limit = switchboard_records::RunFilter::MAX_LIMIT;
        self.store
            .runs(switchboard_records::RunFilter { limit, ..filter })
            .await
    }

    /// This node's hold on a run from `now_ms` for `lease_ms`.
    pub(crate) fn lease(&self, now_ms: u64, lease_ms: u64) -> Lease {
        Lease::new(self.node.clone(), now_ms, lease_ms)
    }

    pub(crate) fn new(store: Arc<dyn RunStore>, node: String, shared: bool) -> RunQueue {
        RunQueue {
            store,
            node,
            shared,
            wake: Notify::new(),
            admit: Mutex::new(None),
            started: std::sync::atomic::AtomicBool::new(false),
            stopping: std::sync::atomic::AtomicBool::new(false),
            released: std::sync::atomic::AtomicBool::new(false),
            durables: Mutex::new(HashMap::new()),
            reports: Mutex::new(HashMap::new()),
            executing: Mutex::new(HashMap::new()),
            usages: Mutex::new(HashMap::new()),
        }
    }

    pub(crate) fn poll(&self) -> Duration {
        if self.shared {
            POLL_SHARED
        } else {
            POLL_ALONE
        }
    }

    pub(crate) fn keep_durable(&self, run_id: &str, message: Snowflake, durable: Durable) {
        lock(&self.durables)
            .entry(run_id.to_owned())
            .or_default()
            .push((message, durable));
    }

    pub(crate) fn take_durables(&self, run_id: &str) -> Vec<(Snowflake, Durable)> {
        lock(&self.durables).remove(run_id).unwrap_or_default()
    }

    pub(crate) fn keep_report(
        &self,
        run_id: &str,
        report: oneshot::Sender<switchboard_schedule::RunReport>,
    ) {
        lock(&self.reports).insert(run_id.to_owned(), report);
    }

    pub(crate) fn take_report(
        &self,
        run_id: &str,
    ) -> Option<oneshot::Sender<switchboard_schedule::RunReport>> {
        lock(&self.reports).remove(run_id)
    }

    /// The run ids whose report someone here waits for.
    pub(crate) fn awaited_reports(&self) -> Vec<String> {
        lock(&self.reports).keys().cloned().collect()
    }

    /// Keeps what the run `run_id` (one this node executes) used, for its row's end.
    pub(crate) fn keep_usage(&self, run_id: &str, usage: switchboard_records::RunUsage) {
        let mut usages = lock(&self.usages);
        // Bounded by the runs executing here; a run whose row never ends (its end failed
        // before this was taken) is forgotten rather than kept forever.
        if usages.len() >= ADMIT_BACKLOG {
            usages.clear();
        }
        usages.insert(run_id.to_owned(), usage);
    }

    pub(crate) fn take_usage(&self, run_id: &str) -> Option<switchboard_records::RunUsage> {
        lock(&self.usages).remove(run_id)
    }

    pub(crate) fn executing(&self) -> MutexGuard<'_, HashMap<String, Executing>> {
        lock(&self.executing)
    }

    /// Stops the run this node executes that holds `row` (its own or a joined one); its id
    /// when there was one to stop.
    pub(crate) fn stop_local(&self, row: &str) -> Option<String> {
        let mut executing = self.executing();
        let (id, run) = executing
            .iter_mut()
            .find(|(_, run)| run.rows.iter().any(|r| r == row))?;
        let abort = run.abort.take()?;
        abort.send(()).ok()?;
        Some(id.clone())
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_trigger_reads_back_from_its_row_and_garbage_does_not() {
        let trigger = Trigger {
            channel_id: Snowflake(7),
            message_id: Some(Snowflake(9)),
            author_id: Snowflake(3),
            author_name: "Mira «ü» \"q\"".into(),
            author_roles: vec![Snowflake(11)],
            text: "line one\nline two 🧵".into(),
            workflow_id: Some("wf-1".into()),
            agent: Some("support".parse().unwrap()),
        };
        assert_eq!(decode(&encode(&trigger)), Some(trigger.clone()));
        for garbage in ["", "message:12", "{}", "{\"channel\":\"x\"}", "[1,2]"] {
            assert_eq!(decode(garbage), None, "{garbage}");
            assert_eq!(rerun_trigger(garbage, "run-1"), None, "{garbage}");
        }
        // Run again at most MAX_RERUNS times, the trigger unchanged, its posts carrying the
        // first run's nonces.
        let mut text = encode(&trigger);
        assert_eq!(nonces_of(&text), None);
        for again in 0..MAX_RERUNS {
            text = rerun_trigger(&text, &format!("run-{again}")).expect("may run again");
            assert_eq!(decode(&text).as_ref(), Some(&trigger));
            assert_eq!(nonces_of(&text).as_deref(), Some("run-0"));
        }
        assert_eq!(rerun_trigger(&text, "run-9"), None);
    }

    #[test]
    fn heartbeats_come_well_within_the_lease() {
        assert_eq!(
            heartbeat_period(Duration::from_secs(20)),
            Duration::from_secs(1)
        );
        assert_eq!(
            heartbeat_period(Duration::from_secs(2)),
            Duration::from_millis(500)
        );
    }
}
