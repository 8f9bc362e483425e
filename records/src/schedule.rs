//! Scheduled prompts (issue 26): a schedule, each firing claimed once cluster-wide, and the
//! receipt every firing leaves (what was posted, or why nothing was).

use entity::Snowflake;
use serde::{Deserialize, Serialize};

use crate::workflow::id_string;

/// Receipts kept per schedule (the newest).
pub const RECEIPTS_KEPT_PER_SCHEDULE: usize = 50;

/// When a schedule fires. The store keeps it; computing the next time is the scheduler's.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "camelCase", tag = "kind")]
pub enum ScheduleSpec {
    /// Once, at this time (ms since the Unix epoch).
    At {
        /// When.
        at_ms: u64,
    },
    /// Every so often.
    Every {
        /// How often, in ms.
        every_ms: u64,
    },
    /// Five cron fields in a time zone.
    Cron {
        /// The five fields.
        expr: String,
        /// The IANA time zone (`UTC` when none was given).
        tz: String,
    },
}

/// Where a schedule is (the `schedule` crate's `Status`).
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash, Serialize, Deserialize)]
#[serde(rename_all = "snake_case")]
pub enum ScheduleStatus {
    /// Fires when due.
    Active,
    /// Stopped after failed firings in a row (or by hand); fires again once resumed.
    Paused,
    /// A one-shot schedule that has fired: nothing more happens.
    Done,
    /// Cancelled (`schedule.cancel`, or its `[[schedules]]` entry was removed).
    Cancelled,
}

impl ScheduleStatus {
    /// Every status.
    pub const ALL: [ScheduleStatus; 4] = [
        ScheduleStatus::Active,
        ScheduleStatus::Paused,
        ScheduleStatus::Done,
        ScheduleStatus::Cancelled,
    ];

    /// The name a store uses.
    pub fn as_str(self) -> &'static str {
        match self {
            ScheduleStatus::Active => "active",
            ScheduleStatus::Paused => "paused",
            ScheduleStatus::Done => "done",
            ScheduleStatus::Cancelled => "cancelled",
        }
    }

    /// The status with this name.
    pub fn parse(text: &str) -> Option<ScheduleStatus> {
        Self::ALL.into_iter().find(|s| s.as_str() == text)
    }
}

/// A scheduled prompt.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "camelCase")]
pub struct Schedule {
    /// Its id.
    pub id: String,
    /// The session its runs post in.
    #[serde(with = "id_string")]
    pub session_id: Snowflake,
    /// The agent (the session's when none).
    pub agent: Option<String>,
    /// The prompt each firing runs.
    pub prompt: String,
    /// When it fires.
    pub spec: ScheduleSpec,
    /// Who made it (a caller key, or `config` for `[[schedules]]`).
    pub created_by: String,
    /// When it was made, ms since the Unix epoch.
    pub created_ms: u64,
    /// When it is next due (`None`: never again).
    pub next_due_ms: Option<u64>,
    /// The due time of the last firing claimed: a due time at or before it never fires again
    /// (a store keeps the greater of this and what it holds when a schedule is saved again).
    pub last_fired_ms: Option<u64>,
    /// Whether it fires.
    pub status: ScheduleStatus,
    /// Failed firings in a row (a delivery counts as success and resets it).
    pub consecutive_failures: u32,
}

/// What a firing came to.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "snake_case")]
pub enum FiringOutcome {
    /// The run posted messages.
    Posted,
    /// The run answered `NO_REPLY`: it chose to post nothing.
    NoReply,
    /// The run ended without posting anything: a failed delivery.
    Nothing,
    /// The run failed (or could not start).
    Failed,
    /// Missed while the service was down, and too old to run.
    Skipped,
}

impl FiringOutcome {
    /// Every outcome.
    pub const ALL: [FiringOutcome; 5] = [
        FiringOutcome::Posted,
        FiringOutcome::NoReply,
        FiringOutcome::Nothing,
        FiringOutcome::Failed,
        FiringOutcome::Skipped,
    ];

    /// The name a store uses.
    pub fn as_str(self) -> &'static str {
        match self {
            FiringOutcome::Posted => "posted",
            FiringOutcome::NoReply => "no_reply",
            FiringOutcome::Nothing => "nothing",
            FiringOutcome::Failed => "failed",
            FiringOutcome::Skipped => "skipped",
        }
    }

    /// The outcome with this name.
    pub fn parse(text: &str) -> Option<FiringOutcome> {
        Self::ALL.into_iter().find(|o| o.as_str() == text)
    }

    /// Whether it counts as a failed firing (towards pausing the schedule).
    pub fn is_failure(self) -> bool {
        matches!(self, FiringOutcome::Nothing | FiringOutcome::Failed)
    }
}

/// Claiming one firing of a schedule: it wins when `due_ms` is after the schedule's
/// `last_fired_ms`.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct FiringClaim {
    /// The schedule.
    pub schedule_id: String,
    /// The due time this firing is for: each (schedule, due time) fires once.
    pub due_ms: u64,
    /// When the schedule is due next, set by the winner in the same step (`None`: never).
    pub next_due_ms: Option<u64>,
}

/// What a firing's receipt does to its schedule besides counting it: an active `one_shot`
/// schedule is done; an active one whose failures in a row reached `pause_after` is paused.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct AfterFiring {
    /// Failures in a row that pause the schedule.
    pub pause_after: u32,
    /// The schedule fires once (`at`): it is done after this firing.
    pub one_shot: bool,
}

/// The receipt a firing leaves.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "camelCase")]
pub struct Receipt {
    /// The schedule.
    pub schedule_id: String,
    /// The due time of the firing.
    pub due_ms: u64,
    /// The run it started.
    pub run_id: Option<String>,
    /// What came of it.
    pub outcome: FiringOutcome,
    /// The messages it posted.
    #[serde(default)]
    pub message_ids: Vec<String>,
    /// Why it failed.
    pub error: Option<String>,
    /// When the firing ended, ms since the Unix epoch.
    pub at_ms: u64,
    /// The scheduler's whole account of the firing (the `schedule` crate's `Outcome` as
    /// JSON: why it failed, how many firings a skip covers), kept as given.
    #[serde(default)]
    pub detail: Option<String>,
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn outcomes_read_back_and_only_nothing_and_failed_count_as_failures() {
        for outcome in FiringOutcome::ALL {
            assert_eq!(FiringOutcome::parse(outcome.as_str()), Some(outcome));
            assert_eq!(
                serde_json::to_value(outcome).unwrap(),
                serde_json::Value::String(outcome.as_str().into())
            );
        }
        assert_eq!(FiringOutcome::parse("ok"), None);
        let failures: Vec<_> = FiringOutcome::ALL
            .into_iter()
            .filter(|o| o.is_failure())
            .collect();
        assert_eq!(failures, [FiringOutcome::Nothing, FiringOutcome::Failed]);
    }

    #[test]
    fn statuses_read_back() {
        for status in ScheduleStatus::ALL {
            assert_eq!(ScheduleStatus::parse(status.as_str()), Some(status));
            assert_eq!(
                serde_json::to_value(status).unwrap(),
                serde_json::Value::String(status.as_str().into())
            );
        }
        assert_eq!(ScheduleStatus::parse("on"), None);
    }

    #[test]
    fn a_spec_is_tagged_json() {
        let spec = ScheduleSpec::Cron {
            expr: "0 9 * * 1".into(),
            tz: "Europe/Paris".into(),
        };
        let json = serde_json::to_value(&spec).unwrap();
        assert_eq!(json["kind"], "cron");
        assert_eq!(serde_json::from_value::<ScheduleSpec>(json).unwrap(), spec);
    }
}
