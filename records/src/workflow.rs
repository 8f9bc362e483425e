//! Workflows: an agent asks people in other sessions and carries on when they answer. These
//! are the kept shapes (stored as JSON, listed by `workflow.*`); the matching and deadlines are
//! the engine's.

use entity::Snowflake;
use serde::{Deserialize, Serialize};

/// Ids as JSON strings: snowflakes exceed what JSON numbers carry exactly.
pub(crate) mod id_string {
    use entity::Snowflake;
    use serde::{Deserialize, Deserializer, Serializer};

    pub fn serialize<S: Serializer>(id: &Snowflake, s: S) -> Result<S::Ok, S::Error> {
        s.collect_str(id)
    }

    pub fn deserialize<'de, D: Deserializer<'de>>(d: D) -> Result<Snowflake, D::Error> {
        let text = String::deserialize(d)?;
        text.parse().map_err(serde::de::Error::custom)
    }

    pub mod option {
        use entity::Snowflake;
        use serde::{Deserialize, Deserializer, Serializer};

        pub fn serialize<S: Serializer>(id: &Option<Snowflake>, s: S) -> Result<S::Ok, S::Error> {
            match id {
                Some(id) => s.collect_str(id),
                None => s.serialize_none(),
            }
        }

        pub fn deserialize<'de, D: Deserializer<'de>>(d: D) -> Result<Option<Snowflake>, D::Error> {
            Option::<String>::deserialize(d)?
                .map(|text| text.parse().map_err(serde::de::Error::custom))
                .transpose()
        }
    }
}

/// Where a workflow is in its life.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash, Serialize, Deserialize, schemars::JsonSchema)]
#[serde(rename_all = "snake_case")]
pub enum WorkflowState {
    /// Some task still waits.
    Waiting,
    /// Every task was answered; the resumed run was started.
    Answered,
    /// The deadline passed first; the resumed run was started with what came in.
    TimedOut,
    /// Cancelled; it never resumes.
    Cancelled,
}

impl WorkflowState {
    /// The state as written in JSON and accepted by `workflow.list`'s filter (`timed_out`, ...).
    pub fn as_str(self) -> &'static str {
        match self {
            WorkflowState::Waiting => "waiting",
            WorkflowState::Answered => "answered",
            WorkflowState::TimedOut => "timed_out",
            WorkflowState::Cancelled => "cancelled",
        }
    }
}

/// The message that answered a task.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize, schemars::JsonSchema)]
#[serde(rename_all = "camelCase")]
pub struct Answer {
    /// The answering message.
    #[serde(with = "id_string")]
    #[schemars(with = "String")]
    pub message_id: Snowflake,
    /// Who wrote it.
    #[serde(with = "id_string")]
    #[schemars(with = "String")]
    pub author_id: Snowflake,
    /// The name people saw for the author when it came in.
    pub author_name: String,
    /// Canonical (readable) text: mentions as `@name` / `#token`.
    pub text: String,
    /// RFC 3339.
    pub ts: String,
}

/// One question waiting in one session.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize, schemars::JsonSchema)]
#[serde(rename_all = "camelCase")]
pub struct Task {
    /// The session (channel, thread or DM) the task waits in.
    #[serde(with = "id_string")]
    #[schemars(with = "String")]
    pub session_id: Snowflake,
    /// Only a reply to this message answers.
    #[serde(with = "id_string::option", default)]
    #[schemars(with = "Option<String>")]
    pub message_id: Option<Snowflake>,
    /// Only a message from this user answers.
    #[serde(with = "id_string::option", default)]
    #[schemars(with = "Option<String>")]
    pub from_user_id: Option<Snowflake>,
    /// What the task is, in a line: it heads the answer in the resumed run's prompt.
    pub summary: String,
    /// More about what was asked, shown under the summary in the resumed run's prompt.
    #[serde(default)]
    pub description: Option<String>,
    /// The message that answered it; `None` while it waits (or if it never got one).
    #[serde(default)]
    pub answer: Option<Answer>,
}

/// A workflow as it is kept, listed and handed to the resumed run.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize, schemars::JsonSchema)]
#[serde(rename_all = "camelCase")]
pub struct Workflow {
    /// Its id, `wf_` and 16 random hex digits.
    pub workflow_id: String,
    /// Where it is in its life.
    pub state: WorkflowState,
    /// The session that created it, where the resumed run happens.
    #[serde(with = "id_string")]
    #[schemars(with = "String")]
    pub origin_session_id: Snowflake,
    /// The message whose run created it (the resumed run replies to it), when there was one.
    #[serde(with = "id_string::option", default)]
    #[schemars(with = "Option<String>")]
    pub origin_message_id: Option<Snowflake>,
    /// Who created it (`operator`, `anonymous` or `cap:<id>`), for the audit trail.
    pub created_by: String,
    /// Milliseconds since the Unix epoch.
    pub created_ms: u64,
    /// When it times out and resumes with what came in, in milliseconds since the Unix epoch.
    pub deadline_ms: u64,
    /// When it was answered, timed out or cancelled, in milliseconds since the Unix epoch;
    /// `None` while it waits.
    #[serde(default)]
    pub finished_ms: Option<u64>,
    /// The creator's opening for the resumed run's prompt (what to do with the answers);
    /// `None`: a generic "carry on" line.
    #[serde(default)]
    pub resume_prompt: Option<String>,
    /// What it waits for, in the order they were given.
    pub tasks: Vec<Task>,
}

impl Workflow {
    /// True while it is [`WorkflowState::Waiting`]: not yet answered, timed out or cancelled.
    pub fn is_waiting(&self) -> bool {
        self.state == WorkflowState::Waiting
    }

    /// Whether every task has its answer.
    pub fn all_answered(&self) -> bool {
        self.tasks.iter().all(|task| task.answer.is_some())
    }
}

/// Finished workflows are kept at least this long (for `workflow.list`), then may be pruned.
pub const FINISHED_WORKFLOWS_KEPT_MS: u64 = 7 * 24 * 3600 * 1000;

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_workflow_keeps_its_json_shape() {
        let workflow = Workflow {
            workflow_id: "wf_0123456789abcdef".into(),
            state: WorkflowState::TimedOut,
            origin_session_id: Snowflake(1_000_000_000_000_000_401),
            origin_message_id: None,
            created_by: "operator".into(),
            created_ms: 1,
            deadline_ms: 2,
            finished_ms: Some(3),
            resume_prompt: None,
            tasks: vec![Task {
                session_id: Snowflake(1_000_000_000_000_000_402),
                message_id: Some(Snowflake(1_000_000_000_000_000_403)),
                from_user_id: None,
                summary: "ship?".into(),
                description: None,
                answer: Some(Answer {
                    message_id: Snowflake(1_000_000_000_000_000_404),
                    author_id: Snowflake(1_000_000_000_000_000_405),
                    author_name: "Mira".into(),
                    text: "yes".into(),
                    ts: "2026-11-22T12:00:00.000000+00:00".into(),
                }),
            }],
        };
        let json = serde_json::to_value(&workflow).unwrap();
        assert_eq!(
            json,
            serde_json::json!({
                "workflowId": "wf_0123456789abcdef", "state": "timed_out",
                "originSessionId": "1000000000000000401", "originMessageId": null,
                "createdBy": "operator", "createdMs": 1, "deadlineMs": 2, "finishedMs": 3,
                "resumePrompt": null,
                "tasks": [{"sessionId": "1000000000000000402", "messageId": "1000000000000000403",
                           "fromUserId": null, "summary": "ship?", "description": null,
                           "answer": {"messageId": "1000000000000000404", "authorId": "1000000000000000405",
                                      "authorName": "Mira", "text": "yes", "ts": "2026-11-22T12:00:00.000000+00:00"}}]
            })
        );
        assert_eq!(serde_json::from_value::<Workflow>(json).unwrap(), workflow);
    }
}
