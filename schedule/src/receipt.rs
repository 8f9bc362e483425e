//! Receipts that prove delivery, and the rule that pauses a schedule that keeps failing.
//!
//! A firing's run is judged by what it left in the channel, not by its exit: the ids of the
//! messages it posted, or the agent's explicit `NO_REPLY`, or an error. A run that ended
//! without error but posted nothing and did not say `NO_REPLY` is a failed delivery.

use chrono::{DateTime, Utc};
use protocol::Snowflake;
use schemars::JsonSchema;
use serde::{Deserialize, Serialize};

use crate::due::Skipped;

/// What an agent answers, as its whole final text, to say on purpose that this firing needs
/// no message (a check that found nothing to report).
pub const NO_REPLY: &str = "NO_REPLY";

/// Failed firings in a row after which a schedule is paused.
pub const PAUSE_AFTER_FAILURES: u32 = 3;

/// What a firing's run did, as the runner reports it.
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub struct RunReport {
    /// The run's id; `None` when no run started (the agent is gone, a budget refused it).
    pub run_id: Option<String>,
    /// Messages the run posted in the schedule's session, in order (its reply and any
    /// `surface.messages.send` of its own).
    pub posted: Vec<Snowflake>,
    /// The run's final text.
    pub final_text: String,
    /// Why the run failed or did not start, if it did.
    pub error: Option<String>,
}

/// Why a firing failed.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize, Deserialize, JsonSchema)]
#[serde(rename_all = "snake_case")]
pub enum FailReason {
    /// The run ended without error but posted nothing and did not answer `NO_REPLY`.
    NothingPosted,
    /// The run failed or timed out (it may have posted some messages first).
    RunFailed,
    /// No run started: the error says why.
    NotStarted,
}

impl FailReason {
    /// A few words for the pause notice.
    pub fn describe(self) -> &'static str {
        match self {
            FailReason::NothingPosted => "the run posted nothing",
            FailReason::RunFailed => "the run failed",
            FailReason::NotStarted => "no run could start",
        }
    }
}

/// How a firing ended.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize, JsonSchema)]
#[serde(tag = "status", rename_all = "snake_case")]
pub enum Outcome {
    /// The run posted these messages.
    Delivered {
        /// The ids of the messages posted, in order.
        #[serde(rename = "messageIds")]
        #[schemars(with = "Vec<String>")]
        message_ids: Vec<Snowflake>,
    },
    /// The agent answered `NO_REPLY`: nothing was meant to be posted.
    NoReply,
    /// The firing failed.
    Failed {
        /// Why.
        reason: FailReason,
        /// Messages posted before it failed, if any.
        #[serde(rename = "messageIds", default)]
        #[schemars(with = "Vec<String>")]
        message_ids: Vec<Snowflake>,
        /// The error, if there was one.
        #[serde(default, skip_serializing_if = "Option::is_none")]
        error: Option<String>,
    },
    /// Firings missed while the service was down, too old to run.
    Skipped(Skipped),
}

impl Outcome {
    /// Whether the firing counts as a failed delivery (toward the pause).
    pub fn is_failure(&self) -> bool {
        matches!(self, Outcome::Failed { .. })
    }
}

/// The outcome of a firing's run, judged by what it posted.
pub fn judge(report: &RunReport) -> Outcome {
    if let Some(error) = &report.error {
        return Outcome::Failed {
            reason: if report.run_id.is_some() {
                FailReason::RunFailed
            } else {
                FailReason::NotStarted
            },
            message_ids: report.posted.clone(),
            error: Some(error.clone()),
        };
    }
    if !report.posted.is_empty() {
        return Outcome::Delivered {
            message_ids: report.posted.clone(),
        };
    }
    if report.final_text.trim() == NO_REPLY {
        return Outcome::NoReply;
    }
    Outcome::Failed {
        reason: FailReason::NothingPosted,
        message_ids: Vec::new(),
        error: None,
    }
}

/// One firing's record, as `schedule.get` shows it.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize, JsonSchema)]
#[serde(rename_all = "camelCase")]
pub struct Receipt {
    /// The firing's scheduled time (for skipped firings, the last of them).
    #[schemars(with = "String")]
    pub firing_at: DateTime<Utc>,
    /// When the receipt was written.
    #[schemars(with = "String")]
    pub recorded_at: DateTime<Utc>,
    /// The run's id, when a run started.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub run_id: Option<String>,
    /// How it ended.
    pub outcome: Outcome,
}

/// A schedule's state.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize, Deserialize, JsonSchema)]
#[serde(rename_all = "snake_case")]
pub enum Status {
    /// Fires when due.
    Active,
    /// Stopped after [`PAUSE_AFTER_FAILURES`] failed firings in a row; fires again only when
    /// resumed.
    Paused,
    /// An `at` schedule that has fired (or was skipped): nothing more will happen.
    Done,
    /// Cancelled by `schedule.cancel`.
    Cancelled,
}

/// What a schedule carries from one firing to the next.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Health {
    /// Its state.
    pub status: Status,
    /// Failed firings since the last good one.
    pub failures_in_a_row: u32,
}

impl Default for Health {
    fn default() -> Self {
        Health {
            status: Status::Active,
            failures_in_a_row: 0,
        }
    }
}

/// A firing's effect on the schedule.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Step {
    /// The schedule's health after the firing.
    pub health: Health,
    /// Whether this firing paused it: post [`pause_notice`] in its session.
    pub paused_now: bool,
}

/// The schedule's health after a firing with `outcome`. A good firing (delivered, or
/// `NO_REPLY`) clears the failure count; a skip leaves it as it was; the
/// [`PAUSE_AFTER_FAILURES`]-th failure in a row pauses an active schedule. An `at` schedule is
/// done after its firing, whatever the outcome.
pub fn after_firing(health: Health, outcome: &Outcome, one_shot: bool) -> Step {
    let failures_in_a_row = match outcome {
        Outcome::Delivered { .. } | Outcome::NoReply => 0,
        Outcome::Failed { .. } => health.failures_in_a_row.saturating_add(1),
        Outcome::Skipped(_) => health.failures_in_a_row,
    };
    let mut status = health.status;
    let mut paused_now = false;
    if one_shot && status == Status::Active {
        status = Status::Done;
    } else if status == Status::Active && failures_in_a_row >= PAUSE_AFTER_FAILURES {
        status = Status::Paused;
        paused_now = true;
    }
    Step {
        health: Health {
            status,
            failures_in_a_row,
        },
        paused_now,
    }
}

/// A paused schedule, resumed: active, its failure count cleared. Done and cancelled
/// schedules stay as they are.
pub fn resume(health: Health) -> Health {
    match health.status {
        Status::Paused => Health::default(),
        _ => health,
    }
}

/// The most characters of the prompt quoted in a notice.
const NOTICE_PROMPT_CHARS: usize = 80;

/// The line posted in the schedule's session when it is paused: which schedule, why, and
/// what to do.
pub fn pause_notice(schedule_id: &str, prompt: &str, latest: &Outcome, failures: u32) -> String {
    let mut quoted: String = prompt
        .split_whitespace()
        .collect::<Vec<_>>()
        .join(" ")
        .chars()
        .take(NOTICE_PROMPT_CHARS)
        .collect();
    if prompt.chars().count() > NOTICE_PROMPT_CHARS {
        quoted.push('…');
    }
    let why = match latest {
        Outcome::Failed {
            reason,
            error: Some(error),
            ..
        } => {
            let error: String = error.chars().take(200).collect();
            format!("{}: {error}", reason.describe())
        }
        Outcome::Failed { reason, .. } => reason.describe().to_owned(),
        _ => "see its receipts".to_owned(),
    };
    format!(
        "⏸️ Schedule `{schedule_id}` (\"{quoted}\") is paused: its last {failures} firings failed (latest: {why}). \
         See its receipts with `tools schedule.get {schedule_id}`; fix the cause, then resume it with \
         `tools schedule.resume {schedule_id}`, or cancel it with `tools schedule.cancel {schedule_id}`."
    )
}

#[cfg(test)]
mod tests {
    use super::*;

    fn report(posted: &[u64], text: &str, error: Option<&str>) -> RunReport {
        RunReport {
            run_id: Some("run-1".into()),
            posted: posted.iter().map(|id| Snowflake(*id)).collect(),
            final_text: text.into(),
            error: error.map(str::to_owned),
        }
    }

    #[test]
    fn a_run_that_posted_is_delivered_with_its_message_ids() {
        assert_eq!(
            judge(&report(&[11, 12], "done", None)),
            Outcome::Delivered {
                message_ids: vec![Snowflake(11), Snowflake(12)]
            }
        );
    }

    #[test]
    fn a_run_that_posted_nothing_is_a_failed_delivery_not_a_success() {
        let outcome = judge(&report(&[], "All good, I posted the summary.", None));
        assert_eq!(
            outcome,
            Outcome::Failed {
                reason: FailReason::NothingPosted,
                message_ids: vec![],
                error: None
            }
        );
        assert!(outcome.is_failure());
    }

    #[test]
    fn no_reply_said_on_purpose_is_a_good_firing() {
        assert_eq!(judge(&report(&[], "  NO_REPLY\n", None)), Outcome::NoReply);
        // Only the whole answer counts: a sentence mentioning it posted nothing.
        assert!(judge(&report(&[], "NO_REPLY because nothing happened", None)).is_failure());
    }

    #[test]
    fn an_error_fails_the_firing_even_after_a_partial_post() {
        let outcome = judge(&report(&[5], "", Some("timed out after 600 s")));
        assert_eq!(
            outcome,
            Outcome::Failed {
                reason: FailReason::RunFailed,
                message_ids: vec![Snowflake(5)],
                error: Some("timed out after 600 s".into())
            }
        );
        let not_started = judge(&RunReport {
            error: Some("budget".into()),
            ..RunReport::default()
        });
        assert!(matches!(
            not_started,
            Outcome::Failed {
                reason: FailReason::NotStarted,
                ..
            }
        ));
    }

    #[test]
    fn three_failed_firings_in_a_row_pause_the_schedule_once() {
        let failed = judge(&report(&[], "", None));
        let mut health = Health::default();
        let mut pauses = 0;
        for _ in 0..5 {
            let step = after_firing(health, &failed, false);
            pauses += usize::from(step.paused_now);
            health = step.health;
        }
        assert_eq!(pauses, 1);
        assert_eq!(health.status, Status::Paused);
        assert_eq!(health.failures_in_a_row, 5);
        assert_eq!(resume(health), Health::default());
    }

    #[test]
    fn a_good_firing_clears_the_count_and_a_skip_leaves_it() {
        let failed = judge(&report(&[], "", None));
        let mut health = after_firing(Health::default(), &failed, false).health;
        health = after_firing(health, &failed, false).health;
        let skip = Outcome::Skipped(Skipped {
            first: DateTime::UNIX_EPOCH,
            last: DateTime::UNIX_EPOCH,
            count: 4,
            exact: true,
        });
        health = after_firing(health, &skip, false).health;
        assert_eq!(health.failures_in_a_row, 2);
        health = after_firing(health, &Outcome::NoReply, false).health;
        assert_eq!(health.failures_in_a_row, 0);
        let step = after_firing(health, &failed, false);
        assert!(!step.paused_now);
        assert_eq!(step.health.status, Status::Active);
    }

    #[test]
    fn an_at_schedule_is_done_after_its_firing_even_a_failed_one() {
        let failed = judge(&report(&[], "", None));
        let step = after_firing(Health::default(), &failed, true);
        assert_eq!(step.health.status, Status::Done);
        assert!(!step.paused_now);
        assert_eq!(resume(step.health).status, Status::Done);
    }

    #[test]
    fn the_pause_notice_names_the_schedule_the_cause_and_what_to_do() {
        let latest = Outcome::Failed {
            reason: FailReason::RunFailed,
            message_ids: vec![],
            error: Some("the model server answered 500".into()),
        };
        let notice = pause_notice("sch_1a2b", "Post   the\nstandup reminder", &latest, 3);
        assert!(notice.starts_with("⏸️ Schedule `sch_1a2b` (\"Post the standup reminder\") is paused: its last 3 firings failed (latest: the run failed: the model server answered 500)."), "{notice}");
        assert!(notice.contains("tools schedule.resume sch_1a2b"));
        assert!(notice.contains("tools schedule.cancel sch_1a2b"));
        let long = pause_notice("x", &"a".repeat(500), &latest, 3);
        assert!(long.contains(&format!("\"{}…\"", "a".repeat(80))));
    }

    #[test]
    fn outcomes_serialize_with_a_status_and_message_ids() {
        let delivered = Outcome::Delivered {
            message_ids: vec![Snowflake(1000000000000000401)],
        };
        assert_eq!(
            serde_json::to_value(&delivered).unwrap(),
            serde_json::json!({"status": "delivered", "messageIds": ["1000000000000000401"]})
        );
        assert_eq!(
            serde_json::to_value(Outcome::NoReply).unwrap(),
            serde_json::json!({"status": "no_reply"})
        );
        let failed = judge(&report(&[], "", None));
        assert_eq!(
            serde_json::to_value(&failed).unwrap(),
            serde_json::json!({"status": "failed", "reason": "nothing_posted", "messageIds": []})
        );
        let back: Outcome = serde_json::from_value(serde_json::to_value(&failed).unwrap()).unwrap();
        assert_eq!(back, failed);
    }
}
