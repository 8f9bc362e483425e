//! Scheduled prompts as the tool server holds them (issue 26 §3): the store's schedules
//! aggregate the `schedule.*` callables read and write, the wake-up that tells the
//! composition root's scheduler loop a schedule changed, and the translation between the
//! store's rows and the `switchboard-schedule` crate's specs and views.

use std::sync::Arc;

use chrono::{DateTime, Utc};
use switchboard_records::{Receipt as StoredReceipt, Schedule, ScheduleSpec, ScheduleStatus};
use switchboard_schedule::{
    Anchor, FailReason, Outcome, PastAt, Receipt, ScheduleId, ScheduleView, Spec, Status, When,
};
use switchboard_store::ScheduleStore;
use tokio::sync::Notify;

/// `created_by` of a `[[schedules]]` entry: its `every` counts from the Unix epoch.
pub const CONFIG_CREATOR: &str = "config";

/// The schedules the tool server serves, installed by the composition root
/// ([`crate::Core::set_scheduling`]).
pub struct Scheduling {
    store: Arc<dyn ScheduleStore>,
    changed: Notify,
}

impl Scheduling {
    /// Schedules kept in `store`.
    pub fn new(store: Arc<dyn ScheduleStore>) -> Scheduling {
        Scheduling {
            store,
            changed: Notify::new(),
        }
    }

    /// Where schedules are kept.
    pub fn store(&self) -> &Arc<dyn ScheduleStore> {
        &self.store
    }

    /// A schedule was made, cancelled or resumed: the scheduler looks again at once.
    pub fn changed(&self) {
        self.changed.notify_one();
    }

    /// Resolves when [`Scheduling::changed`] was called since the last wait.
    pub async fn wait_changed(&self) {
        self.changed.notified().await;
    }
}

/// Whole milliseconds since the Unix epoch (0 before it).
pub fn millis(time: DateTime<Utc>) -> u64 {
    u64::try_from(time.timestamp_millis()).unwrap_or(0)
}

/// The time of `ms` since the Unix epoch.
pub fn time(ms: u64) -> DateTime<Utc> {
    i64::try_from(ms)
        .ok()
        .and_then(DateTime::from_timestamp_millis)
        .unwrap_or(DateTime::<Utc>::MAX_UTC)
}

/// How the store keeps a spec.
pub fn stored_spec(spec: &Spec) -> ScheduleSpec {
    match spec {
        Spec::At(at) => ScheduleSpec::At { at_ms: millis(*at) },
        Spec::Every { interval_s, .. } => ScheduleSpec::Every {
            every_ms: interval_s.saturating_mul(1000),
        },
        Spec::Cron(cron) => ScheduleSpec::Cron {
            expr: cron.written().to_owned(),
            tz: cron.tz().name().to_owned(),
        },
    }
}

/// The words a kept spec was made from.
pub fn when_of(spec: &ScheduleSpec) -> When {
    match spec {
        ScheduleSpec::At { at_ms } => When {
            at: Some(time(*at_ms).to_rfc3339_opts(chrono::SecondsFormat::AutoSi, true)),
            ..When::default()
        },
        ScheduleSpec::Every { every_ms } => When {
            every: Some(
                humantime::format_duration(std::time::Duration::from_secs(every_ms / 1000))
                    .to_string()
                    .replace(' ', ""),
            ),
            ..When::default()
        },
        ScheduleSpec::Cron { expr, tz } => When {
            cron: Some(expr.clone()),
            tz: Some(tz.clone()),
            ..When::default()
        },
    }
}

/// The spec of a kept schedule: an `every` counts from its creation, or from the epoch for a
/// `[[schedules]]` entry. `None` when the row no longer parses (a zone this build does not
/// know): the scheduler records the firing as failed rather than guessing.
pub fn spec_of(schedule: &Schedule) -> Result<Spec, String> {
    let anchor = if schedule.created_by == CONFIG_CREATOR {
        Anchor::Epoch
    } else {
        Anchor::At(time(schedule.created_ms))
    };
    Spec::parse(&when_of(&schedule.spec), Utc::now(), PastAt::Accept, anchor)
        .map_err(|error| error.to_string())
}

/// The schedule crate's status for a kept one.
pub fn status_of(status: ScheduleStatus) -> Status {
    match status {
        ScheduleStatus::Active => Status::Active,
        ScheduleStatus::Paused => Status::Paused,
        ScheduleStatus::Done => Status::Done,
        ScheduleStatus::Cancelled => Status::Cancelled,
    }
}

/// A kept receipt as `schedule.get` shows it: the scheduler's whole account when it kept
/// one, else rebuilt from the row.
pub fn receipt_view(receipt: &StoredReceipt) -> Receipt {
    let outcome = receipt
        .detail
        .as_deref()
        .and_then(|detail| serde_json::from_str::<Outcome>(detail).ok())
        .unwrap_or_else(|| {
            let message_ids = receipt
                .message_ids
                .iter()
                .filter_map(|id| id.parse().ok())
                .collect();
            match receipt.outcome {
                switchboard_records::FiringOutcome::Posted => Outcome::Delivered { message_ids },
                switchboard_records::FiringOutcome::NoReply => Outcome::NoReply,
                switchboard_records::FiringOutcome::Nothing => Outcome::Failed {
                    reason: FailReason::NothingPosted,
                    message_ids,
                    error: receipt.error.clone(),
                },
                switchboard_records::FiringOutcome::Failed
                | switchboard_records::FiringOutcome::Skipped => Outcome::Failed {
                    reason: FailReason::RunFailed,
                    message_ids,
                    error: receipt.error.clone(),
                },
            }
        });
    Receipt {
        firing_at: time(receipt.due_ms),
        recorded_at: time(receipt.at_ms),
        run_id: receipt.run_id.clone(),
        outcome,
    }
}

/// A kept schedule as the callables answer it, with `receipts` (newest first).
pub fn view(schedule: &Schedule, receipts: &[StoredReceipt]) -> ScheduleView {
    let status = status_of(schedule.status);
    ScheduleView {
        schedule_id: ScheduleId::parse(&schedule.id)
            .unwrap_or_else(|_| ScheduleId::from_random([0; 8])),
        session_id: schedule.session_id.to_string(),
        agent: schedule
            .agent
            .as_deref()
            .and_then(|a| switchboard_agents::AgentName::parse(a).ok()),
        prompt: schedule.prompt.clone(),
        when: when_of(&schedule.spec),
        status,
        failures_in_a_row: schedule.consecutive_failures,
        next_at: schedule
            .next_due_ms
            .filter(|_| status == Status::Active)
            .map(time),
        created_by: schedule.created_by.clone(),
        created_at: time(schedule.created_ms),
        receipts: receipts.iter().map(receipt_view).collect(),
    }
}

/// The store row of a firing's outcome.
pub fn stored_receipt(
    schedule_id: &str,
    due_ms: u64,
    run_id: Option<String>,
    outcome: &Outcome,
) -> StoredReceipt {
    use switchboard_records::FiringOutcome;
    let (kind, message_ids, error) = match outcome {
        Outcome::Delivered { message_ids } => (FiringOutcome::Posted, message_ids.clone(), None),
        Outcome::NoReply => (FiringOutcome::NoReply, Vec::new(), None),
        Outcome::Failed {
            reason: FailReason::NothingPosted,
            message_ids,
            error,
        } => (FiringOutcome::Nothing, message_ids.clone(), error.clone()),
        Outcome::Failed {
            message_ids, error, ..
        } => (FiringOutcome::Failed, message_ids.clone(), error.clone()),
        Outcome::Skipped(_) => (FiringOutcome::Skipped, Vec::new(), None),
    };
    StoredReceipt {
        schedule_id: schedule_id.to_owned(),
        due_ms,
        run_id,
        outcome: kind,
        message_ids: message_ids.iter().map(ToString::to_string).collect(),
        error,
        at_ms: crate::clock::now_ms(),
        detail: serde_json::to_string(outcome).ok(),
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_kept_every_reads_back_as_the_same_interval_from_its_creation() {
        let created = Utc::now();
        let spec = Spec::parse(
            &When {
                every: Some("15m".into()),
                ..When::default()
            },
            created,
            PastAt::Refuse,
            Anchor::At(created),
        )
        .unwrap();
        let schedule = Schedule {
            id: "sch_1".into(),
            session_id: entity::Snowflake(1),
            agent: None,
            prompt: "p".into(),
            spec: stored_spec(&spec),
            created_by: "operator".into(),
            created_ms: millis(created),
            next_due_ms: None,
            last_fired_ms: None,
            status: ScheduleStatus::Active,
            consecutive_failures: 0,
        };
        assert_eq!(when_of(&schedule.spec).every.as_deref(), Some("15m"));
        let back = spec_of(&schedule).unwrap();
        assert_eq!(back.next_after(created), spec.next_after(created));
    }

    #[test]
    fn a_receipt_keeps_the_schedulers_whole_account() {
        let outcome = Outcome::Failed {
            reason: FailReason::NothingPosted,
            message_ids: vec![],
            error: None,
        };
        let stored = stored_receipt("sch_1", 5_000, Some("run-ab".into()), &outcome);
        assert_eq!(stored.outcome, switchboard_records::FiringOutcome::Nothing);
        let shown = receipt_view(&stored);
        assert_eq!(shown.outcome, outcome);
        assert_eq!(shown.run_id.as_deref(), Some("run-ab"));
    }
}
