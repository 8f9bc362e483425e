//! The scheduler loop (issue 26 §3): fires due schedules through the agent bridge, once each
//! even across restarts, and leaves a receipt of every firing.
//!
//! One task per service. Each pass reads the kept schedules, and for every active one whose
//! next due time has come asks the `switchboard-schedule` crate's [`due`] which firing runs and
//! which were missed (a firing missed while the service was down runs once when younger than
//! `scheduler.missed_max_age_s`, else is recorded as skipped). The firing is claimed through
//! the store ([`ScheduleStore::claim_firing`]: the cursor moves and the next due time is set in
//! one step, so a firing is handled once however often the service restarts), then run as a
//! queued trigger whose report (what it posted, its final text, its error) is judged by
//! [`judge`] and kept as a receipt ([`ScheduleStore::record_receipt`], which also counts
//! failures in a row and pauses the schedule at the third); a schedule paused by its firing
//! says so in its session. `[[schedules]]` entries are kept in the store under `config:NAME`
//! at start and whenever the config changes; an entry removed from the config is cancelled.
//!
//! The loop sleeps until the earliest next due time, at most [`MAX_SLEEP`], or until a
//! `schedule.*` callable changes something.

use std::collections::HashSet;
use std::sync::{Arc, Mutex};
use std::time::Duration;

use agent::Bridge;
use chrono::Utc;
use entity::Snowflake;
use serde_json::json;
use switchboard_config::ScheduleEntry;
use switchboard_engine::live::Settings;
use switchboard_engine::runs::Trigger;
use switchboard_engine::schedules::{
    millis, spec_of, stored_receipt, stored_spec, time, Scheduling, CONFIG_CREATOR,
};
use switchboard_engine::{CallContext, Core};
use switchboard_records::{AfterFiring, FiringClaim, Schedule, ScheduleStatus};
use switchboard_schedule::{due, judge, pause_notice, Outcome, RunReport, PAUSE_AFTER_FAILURES};
use switchboard_store::{Firing, ScheduleStore};

/// The longest the loop sleeps between passes (a change elsewhere — another node, a store
/// edited by hand — is seen within it).
pub const MAX_SLEEP: Duration = Duration::from_secs(60);
/// How long the loop waits before looking again while Discord is not connected yet (a run
/// needs the session's channel known).
const NOT_READY_RETRY: Duration = Duration::from_millis(500);
/// Schedules read per page.
const PAGE: usize = 500;

/// What the loop needs from the service.
pub struct Scheduler {
    /// The tool server's core: settings, notices.
    pub core: Arc<Core>,
    /// Where schedules are kept.
    pub scheduling: Arc<Scheduling>,
    /// Who runs the firings.
    pub bridge: Bridge,
    /// Whether the platform is connected (runs may start).
    pub ready: Box<dyn Fn() -> bool + Send + Sync>,
}

impl Scheduler {
    /// Runs the loop until the task is aborted.
    pub fn start(self) -> tokio::task::JoinHandle<()> {
        tokio::spawn(self.run())
    }

    fn store(&self) -> &Arc<dyn ScheduleStore> {
        self.scheduling.store()
    }

    async fn run(self) {
        let this = Arc::new(self);
        let firing: Arc<Mutex<HashSet<String>>> = Arc::default();
        let mut synced: Option<Arc<Settings>> = None;
        loop {
            let settings = this.core.settings();
            if synced
                .as_ref()
                .is_none_or(|seen| !Arc::ptr_eq(seen, &settings))
            {
                match this.sync_config(&settings.config().schedules).await {
                    Ok(()) => synced = Some(Arc::clone(&settings)),
                    Err(error) => tracing::error!("keeping [[schedules]] in the store: {error}"),
                }
            }
            let sleep = if (this.ready)() {
                match this.pass(&settings, &firing).await {
                    Ok(sleep) => sleep,
                    Err(error) => {
                        tracing::error!("scheduler: reading the schedules failed: {error}");
                        Duration::from_secs(5)
                    }
                }
            } else {
                NOT_READY_RETRY
            };
            tokio::select! {
                () = tokio::time::sleep(sleep) => {}
                () = this.scheduling.wait_changed() => {}
            }
        }
    }

    async fn all(&self) -> Result<Vec<Schedule>, switchboard_store::StoreError> {
        let mut found = Vec::new();
        let mut after = None;
        // Each page moves `after` forward; the count bounds a store that keeps answering.
        for _ in 0..1_000 {
            let page = self.store().schedules(after.clone(), PAGE).await?;
            let full = page.len() == PAGE;
            after = page.last().map(|s| s.id.clone());
            found.extend(page);
            if !full {
                break;
            }
        }
        Ok(found)
    }

    /// Keeps the `[[schedules]]` entries in the store under `config:NAME`: a new one starts
    /// now (nothing before it is missed), a changed one keeps its cursor and receipts, one
    /// removed from the file is cancelled.
    async fn sync_config(
        &self,
        entries: &[ScheduleEntry],
    ) -> Result<(), switchboard_store::StoreError> {
        let now = Utc::now();
        for entry in entries {
            let kept = self.store().schedule(&entry.id).await?;
            let spec = stored_spec(&entry.spec);
            let wanted = |mut row: Schedule| {
                row.session_id = entry.session_id;
                row.agent.clone_from(&entry.agent);
                row.prompt.clone_from(&entry.prompt);
                row.spec = spec.clone();
                let cursor = row.last_fired_ms.map_or(now, time);
                row.next_due_ms = entry.spec.next_after(cursor.max(now)).map(millis);
                if row.status == ScheduleStatus::Cancelled {
                    row.status = ScheduleStatus::Active;
                }
                row
            };
            let row = match kept {
                Some(row) => {
                    let same = row.session_id == entry.session_id
                        && row.agent == entry.agent
                        && row.prompt == entry.prompt
                        && row.spec == spec
                        && row.status != ScheduleStatus::Cancelled;
                    if same {
                        continue;
                    }
                    wanted(row)
                }
                None => wanted(Schedule {
                    id: entry.id.clone(),
                    session_id: entry.session_id,
                    agent: None,
                    prompt: String::new(),
                    spec: spec.clone(),
                    created_by: CONFIG_CREATOR.to_owned(),
                    created_ms: millis(now),
                    next_due_ms: None,
                    last_fired_ms: Some(millis(now)),
                    status: ScheduleStatus::Active,
                    consecutive_failures: 0,
                }),
            };
            tracing::info!(schedule = %row.id, "[[schedules]] entry kept");
            self.store().save_schedule(row).await?;
        }
        for row in self.all().await? {
            let removed = row.id.starts_with(switchboard_schedule::CONFIG_ID_PREFIX)
                && matches!(row.status, ScheduleStatus::Active | ScheduleStatus::Paused)
                && !entries.iter().any(|e| e.id == row.id);
            if removed {
                tracing::info!(schedule = %row.id, "[[schedules]] entry removed from the config: cancelled");
                self.store()
                    .set_schedule_status(&row.id, ScheduleStatus::Cancelled)
                    .await?;
            }
        }
        Ok(())
    }

    /// Handles every schedule due now; how long to sleep until the next one.
    async fn pass(
        self: &Arc<Self>,
        settings: &Settings,
        firing: &Arc<Mutex<HashSet<String>>>,
    ) -> Result<Duration, switchboard_store::StoreError> {
        let missed_max_age = settings.config().scheduler.missed_max_age;
        let now = Utc::now();
        let now_ms = millis(now);
        let mut earliest: Option<u64> = None;
        for schedule in self.all().await? {
            if schedule.status != ScheduleStatus::Active {
                continue;
            }
            let Some(next_ms) = schedule.next_due_ms else {
                continue;
            };
            if next_ms > now_ms {
                earliest = Some(earliest.map_or(next_ms, |e| e.min(next_ms)));
                continue;
            }
            // One firing of a schedule at a time: the next is decided once this one ends.
            if lock(firing).contains(&schedule.id) {
                continue;
            }
            if let Some(next) = self.handle(schedule, now, missed_max_age, firing).await? {
                earliest = Some(earliest.map_or(next, |e| e.min(next)));
            }
        }
        Ok(earliest.map_or(MAX_SLEEP, |next| {
            Duration::from_millis(next.saturating_sub(millis(Utc::now()))).min(MAX_SLEEP)
        }))
    }

    /// Claims what is due of one schedule, records skipped firings, starts the one that runs;
    /// the schedule's next due time.
    async fn handle(
        self: &Arc<Self>,
        schedule: Schedule,
        now: chrono::DateTime<Utc>,
        missed_max_age: Duration,
        firing: &Arc<Mutex<HashSet<String>>>,
    ) -> Result<Option<u64>, switchboard_store::StoreError> {
        let spec = match spec_of(&schedule) {
            Ok(spec) => spec,
            Err(error) => {
                // A spec this build cannot read never fires: pause it and say why, once.
                tracing::error!(schedule = %schedule.id, "the schedule's spec does not read ({error}); paused");
                self.store()
                    .set_schedule_status(&schedule.id, ScheduleStatus::Paused)
                    .await?;
                return Ok(None);
            }
        };
        let cursor = time(schedule.last_fired_ms.unwrap_or(schedule.created_ms));
        let decided = due(&spec, cursor, now, missed_max_age);
        let next_ms = decided.next.map(millis);
        if decided.cursor <= cursor {
            // Nothing new is due (a stale next due time, as after a resume): move it on.
            if schedule.next_due_ms != next_ms {
                if let Some(mut row) = self.store().schedule(&schedule.id).await? {
                    if row.status == ScheduleStatus::Active {
                        row.next_due_ms = next_ms;
                        self.store().save_schedule(row).await?;
                    }
                }
            }
            return Ok(next_ms);
        }
        let claim = FiringClaim {
            schedule_id: schedule.id.clone(),
            due_ms: millis(decided.cursor),
            next_due_ms: next_ms,
        };
        let won = match self.store().claim_firing(claim).await? {
            Firing::Won(won) => won,
            Firing::Taken | Firing::Inactive(_) => return Ok(None),
        };
        let one_shot = spec.is_one_shot();
        if let Some(skipped) = decided.skipped {
            tracing::info!(schedule = %won.id, count = skipped.count, "firings missed while the service was down are too old to run: recorded as skipped");
            let receipt = stored_receipt(
                &won.id,
                millis(skipped.last),
                None,
                &Outcome::Skipped(skipped),
            );
            self.store()
                .record_receipt(
                    receipt,
                    AfterFiring {
                        pause_after: PAUSE_AFTER_FAILURES,
                        one_shot: one_shot && decided.run.is_none(),
                    },
                )
                .await?;
        }
        if let Some(at) = decided.run {
            lock(firing).insert(won.id.clone());
            let this = Arc::clone(self);
            let firing = Arc::clone(firing);
            tokio::spawn(async move {
                let id = won.id.clone();
                this.fire(won, millis(at), one_shot).await;
                lock(&firing).remove(&id);
                // The next firing may be due already (a run longer than the interval).
                this.scheduling.changed();
            });
        }
        Ok(next_ms)
    }

    /// Runs one firing and keeps its receipt; a firing that pauses the schedule says so in
    /// its session.
    async fn fire(&self, schedule: Schedule, due_ms: u64, one_shot: bool) {
        tracing::info!(schedule = %schedule.id, session = %schedule.session_id, "schedule fires");
        let bot = self.core.surface().bot_user_id();
        let author_id = schedule
            .created_by
            .strip_prefix("user:")
            .and_then(|id| id.parse::<Snowflake>().ok())
            .or(bot)
            .unwrap_or(Snowflake(0));
        let trigger = Trigger {
            channel_id: schedule.session_id,
            message_id: None,
            author_id,
            author_name: format!("schedule {}", schedule.id),
            author_roles: Vec::new(),
            text: schedule.prompt.clone(),
            workflow_id: None,
            // A schedule that names an agent runs with it (checked against the configured
            // agents when it was made; a name no longer configured falls back to the session's).
            agent: schedule
                .agent
                .as_deref()
                .and_then(|name| switchboard_config::AgentName::parse(name).ok()),
        };
        let report = match self.bridge.run_reported(trigger).await {
            Ok(report) => report,
            Err(_) => RunReport {
                error: Some("the agent stopped before the run ended".to_owned()),
                ..RunReport::default()
            },
        };
        let outcome = judge(&report);
        let receipt = stored_receipt(&schedule.id, due_ms, report.run_id.clone(), &outcome);
        let kept = match self
            .store()
            .record_receipt(
                receipt,
                AfterFiring {
                    pause_after: PAUSE_AFTER_FAILURES,
                    one_shot,
                },
            )
            .await
        {
            Ok(kept) => kept,
            Err(error) => {
                tracing::error!(schedule = %schedule.id, "keeping the firing's receipt failed: {error}");
                return;
            }
        };
        tracing::info!(schedule = %schedule.id, run = report.run_id.as_deref().unwrap_or("-"), failed = outcome.is_failure(), "firing recorded");
        let paused_now = kept.status == ScheduleStatus::Paused
            && outcome.is_failure()
            && kept.consecutive_failures == PAUSE_AFTER_FAILURES;
        if paused_now {
            let text = pause_notice(&kept.id, &kept.prompt, &outcome, kept.consecutive_failures);
            let input = json!({ "sessionId": kept.session_id.to_string(), "text": text });
            if let Err(error) = self
                .core
                .call(&CallContext::operator(), "surface.messages.send", input)
                .await
            {
                tracing::warn!(schedule = %kept.id, code = %error.code, "posting the pause notice failed: {}", error.message);
            }
        }
    }
}

fn lock(set: &Mutex<HashSet<String>>) -> std::sync::MutexGuard<'_, HashSet<String>> {
    set.lock()
        .unwrap_or_else(std::sync::PoisonError::into_inner)
}
