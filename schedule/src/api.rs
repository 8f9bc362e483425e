//! The callables' inputs and answers: `schedule.create`, `schedule.list`, `schedule.get`,
//! `schedule.cancel` (and `schedule.resume`, which the pause notice points at), checked here so
//! the callables only resolve sessions and talk to the store.

use chrono::{DateTime, Utc};
use schemars::JsonSchema;
use serde::{Deserialize, Serialize};
use switchboard_agents::{nearest_agent, AgentName};

use crate::receipt::{Receipt, Status};
use crate::spec::{Anchor, PastAt, Spec, SpecError, When};

/// The most characters a schedule's prompt holds.
pub const MAX_PROMPT_CHARS: usize = 4_000;
/// The most characters a schedule id holds.
pub const MAX_ID_CHARS: usize = 100;
/// The prefix of the ids of `[[schedules]]` entries.
pub const CONFIG_ID_PREFIX: &str = "config:";

/// A schedule's id: `sch_` and 16 hex digits for one made by `schedule.create`, `config:NAME`
/// for a `[[schedules]]` entry.
#[derive(
    Debug, Clone, PartialEq, Eq, PartialOrd, Ord, Hash, Serialize, Deserialize, JsonSchema,
)]
#[serde(try_from = "String", into = "String")]
pub struct ScheduleId(String);

/// Why a string is not a schedule id (or a schedule name).
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
#[non_exhaustive]
pub enum ScheduleIdError {
    /// Empty, too long, or holding characters ids never have.
    #[error("'{0}' is not a schedule id")]
    Malformed(String),
    /// A `[[schedules]]` name that is not 1 to 64 letters, digits, '_' or '-'.
    #[error("'{0}' is not a schedule name")]
    BadName(String),
}

impl ScheduleIdError {
    /// What to do about it.
    pub fn help(&self) -> &'static str {
        match self {
            ScheduleIdError::Malformed(_) => {
                "pass the scheduleId that schedule.create answered (sch_…) or config:NAME; schedule.list shows them"
            }
            ScheduleIdError::BadName(_) => {
                "name it with 1 to 64 letters, digits, '_' or '-', such as \"standup\"; its id is config:NAME"
            }
        }
    }
}

fn name_ok(name: &str) -> bool {
    (1..=64).contains(&name.len())
        && name
            .bytes()
            .all(|b| b.is_ascii_alphanumeric() || b == b'_' || b == b'-')
}

impl ScheduleId {
    /// An id for a new schedule from 8 random bytes (the store draws them).
    pub fn from_random(bytes: [u8; 8]) -> ScheduleId {
        ScheduleId(format!("sch_{:016x}", u64::from_be_bytes(bytes)))
    }

    /// `config:NAME` for the `[[schedules]]` entry named `name`.
    pub fn for_config(name: &str) -> Result<ScheduleId, ScheduleIdError> {
        if name_ok(name) {
            Ok(ScheduleId(format!("{CONFIG_ID_PREFIX}{name}")))
        } else {
            Err(ScheduleIdError::BadName(name.to_owned()))
        }
    }

    /// Checks an id given by a caller.
    pub fn parse(text: &str) -> Result<ScheduleId, ScheduleIdError> {
        let text = text.trim();
        let ok = match text.strip_prefix(CONFIG_ID_PREFIX) {
            Some(name) => name_ok(name),
            None => {
                (1..=MAX_ID_CHARS).contains(&text.len())
                    && text
                        .bytes()
                        .all(|b| b.is_ascii_alphanumeric() || b == b'_' || b == b'-')
            }
        };
        if ok {
            Ok(ScheduleId(text.to_owned()))
        } else {
            Err(ScheduleIdError::Malformed(
                text.chars().take(MAX_ID_CHARS).collect(),
            ))
        }
    }

    /// The id.
    pub fn as_str(&self) -> &str {
        &self.0
    }

    /// Whether it belongs to a `[[schedules]]` entry (which `schedule.cancel` cannot remove:
    /// the config would make it again).
    pub fn is_config(&self) -> bool {
        self.0.starts_with(CONFIG_ID_PREFIX)
    }
}

impl TryFrom<String> for ScheduleId {
    type Error = ScheduleIdError;

    fn try_from(text: String) -> Result<Self, Self::Error> {
        ScheduleId::parse(&text)
    }
}

impl From<ScheduleId> for String {
    fn from(id: ScheduleId) -> String {
        id.0
    }
}

impl std::fmt::Display for ScheduleId {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.write_str(&self.0)
    }
}

/// Why a prompt was refused.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
#[non_exhaustive]
pub enum PromptError {
    /// Empty or only whitespace.
    #[error("the prompt is empty")]
    Empty,
    /// Over [`MAX_PROMPT_CHARS`].
    #[error("the prompt is {len} characters long; at most {MAX_PROMPT_CHARS} are allowed")]
    TooLong {
        /// Its length in characters.
        len: usize,
    },
}

impl PromptError {
    /// What to do about it.
    pub fn help(&self) -> &'static str {
        match self {
            PromptError::Empty => "write what the agent should do at each firing, such as \"Post the standup reminder\"",
            PromptError::TooLong { .. } => "shorten the prompt; put long instructions in the agent's system_prompt",
        }
    }
}

/// A prompt, trimmed, when it is not empty and not too long.
pub fn check_prompt(prompt: &str) -> Result<String, PromptError> {
    let trimmed = prompt.trim();
    if trimmed.is_empty() {
        return Err(PromptError::Empty);
    }
    let len = trimmed.chars().count();
    if len > MAX_PROMPT_CHARS {
        return Err(PromptError::TooLong { len });
    }
    Ok(trimmed.to_owned())
}

/// `schedule.create`'s input.
#[derive(Debug, Clone, Deserialize, JsonSchema)]
#[serde(deny_unknown_fields, rename_all = "camelCase")]
pub struct CreateInput {
    /// The session the agent runs in and posts to (alias like `#ops`, or id).
    pub session_id: String,
    /// What the agent is asked at each firing. It may answer exactly `NO_REPLY` when there is
    /// nothing to post; any other run that posts nothing is a failed firing.
    pub prompt: String,
    /// The agent that answers (one of `[agents.NAME]`); unset, the session's agent.
    #[serde(default)]
    pub agent: Option<String>,
    /// Once, at this RFC 3339 time (`2026-11-23T09:00:00+01:00`). Exactly one of `at`,
    /// `every`, `cron`.
    #[serde(default)]
    pub at: Option<String>,
    /// Repeatedly, this long apart: `2s`, `15m`, `1h30m`, `1d` (whole seconds, 1 s to 366 d);
    /// the first firing is one interval after creation.
    #[serde(default)]
    pub every: Option<String>,
    /// Five cron fields, `minute hour day-of-month month day-of-week` (`30 9 * * 1-5`).
    #[serde(default)]
    pub cron: Option<String>,
    /// The IANA time zone the cron fields are read in (`Europe/Paris`); default UTC.
    #[serde(default)]
    pub tz: Option<String>,
}

/// Why `schedule.create`'s input was refused.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
#[non_exhaustive]
pub enum CreateError {
    /// The at / every / cron / tz words.
    #[error(transparent)]
    Spec(#[from] SpecError),
    /// The prompt.
    #[error("prompt: {0}")]
    Prompt(#[from] PromptError),
    /// `agent` is not a valid name or names no configured agent.
    #[error("agent: '{given}' is not a configured agent")]
    UnknownAgent {
        /// The name given.
        given: String,
        /// The configured agent it is probably a typo of.
        suggestion: Option<AgentName>,
        /// The configured agents.
        configured: Vec<AgentName>,
    },
}

impl CreateError {
    /// The input field at fault.
    pub fn field(&self) -> &'static str {
        match self {
            CreateError::Spec(error) => error.field().map_or("at|every|cron", |f| f.key()),
            CreateError::Prompt(_) => "prompt",
            CreateError::UnknownAgent { .. } => "agent",
        }
    }

    /// The machine-readable code (`invalid_input` for the prompt, as for any callable).
    pub fn code(&self) -> &'static str {
        match self {
            CreateError::Spec(error) => error.code(),
            CreateError::Prompt(_) => "invalid_input",
            CreateError::UnknownAgent { .. } => "unknown_agent",
        }
    }

    /// What to do about it.
    pub fn help(&self) -> String {
        match self {
            CreateError::Spec(error) => error.help(),
            CreateError::Prompt(error) => error.help().to_owned(),
            CreateError::UnknownAgent {
                suggestion,
                configured,
                ..
            } => {
                let listed = configured
                    .iter()
                    .map(AgentName::as_str)
                    .collect::<Vec<_>>()
                    .join(", ");
                match suggestion {
                    Some(near) => format!("did you mean \"{near}\"? The configured agents are: {listed}"),
                    None if configured.is_empty() => "no named agents are configured: leave agent out to use the session's agent".to_owned(),
                    None => format!("name one of the configured agents ({listed}), or leave agent out to use the session's agent"),
                }
            }
        }
    }
}

/// A `schedule.create` input, checked; the session reference is still as written.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct NewSchedule {
    /// The session as written (the callable resolves and allowlists it, as any call's).
    pub session_ref: String,
    /// The prompt, trimmed.
    pub prompt: String,
    /// The agent named, if any.
    pub agent: Option<AgentName>,
    /// When it fires; an `every` counts from `now`.
    pub spec: Spec,
}

impl CreateInput {
    /// Checks everything but the session, which the pipeline resolves.
    pub fn check(
        &self,
        configured: &[AgentName],
        now: DateTime<Utc>,
    ) -> Result<NewSchedule, CreateError> {
        let prompt = check_prompt(&self.prompt)?;
        let agent = match &self.agent {
            None => None,
            Some(given) => {
                let found = configured.iter().find(|a| a.as_str() == given.trim());
                match found {
                    Some(agent) => Some(agent.clone()),
                    None => {
                        return Err(CreateError::UnknownAgent {
                            given: given.chars().take(80).collect(),
                            suggestion: nearest_agent(given.trim(), configured),
                            configured: configured.to_vec(),
                        })
                    }
                }
            }
        };
        let when = When {
            at: self.at.clone(),
            every: self.every.clone(),
            cron: self.cron.clone(),
            tz: self.tz.clone(),
        };
        let spec = Spec::parse(&when, now, PastAt::Refuse, Anchor::At(now))?;
        Ok(NewSchedule {
            session_ref: self.session_id.clone(),
            prompt,
            agent,
            spec,
        })
    }
}

/// `schedule.get`'s, `schedule.cancel`'s and `schedule.resume`'s input: the id is the main
/// field, so `tools schedule.get ID` works.
#[derive(Debug, Clone, Deserialize, JsonSchema)]
#[serde(deny_unknown_fields, rename_all = "camelCase")]
pub struct ScheduleRef {
    /// The schedule's id (`sch_…`, or `config:NAME`).
    pub schedule_id: ScheduleId,
}

/// `schedule.list`'s input.
#[derive(Debug, Clone, Default, Deserialize, JsonSchema)]
#[serde(deny_unknown_fields, rename_all = "camelCase")]
pub struct ListInput {
    /// Only schedules posting in this session (alias like `#ops`, or id).
    #[serde(default)]
    pub session_id: Option<String>,
}

/// A schedule as `schedule.create`, `schedule.list` and `schedule.get` answer it.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize, JsonSchema)]
#[serde(rename_all = "camelCase")]
pub struct ScheduleView {
    /// Its id.
    pub schedule_id: ScheduleId,
    /// The session it posts in (id).
    pub session_id: String,
    /// The agent named, if any.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub agent: Option<AgentName>,
    /// What the agent is asked.
    pub prompt: String,
    /// When it fires, as given.
    #[serde(flatten)]
    pub when: When,
    /// Its state.
    pub status: Status,
    /// Failed firings since the last good one (paused at 3).
    pub failures_in_a_row: u32,
    /// Its next firing, while active.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    #[schemars(with = "Option<String>")]
    pub next_at: Option<DateTime<Utc>>,
    /// Who made it: `config`, or the caller (`operator`, `token:NAME`, `cap:…`).
    pub created_by: String,
    /// When it was made.
    #[schemars(with = "String")]
    pub created_at: DateTime<Utc>,
    /// Its newest receipts, newest first (only `schedule.get` fills them).
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    pub receipts: Vec<Receipt>,
}

#[cfg(test)]
mod tests {
    use super::*;
    use serde_json::json;

    fn now() -> DateTime<Utc> {
        crate::spec::tests::utc("2026-03-01T12:00:00Z")
    }

    fn agents() -> Vec<AgentName> {
        vec![
            AgentName::parse("support").unwrap(),
            AgentName::parse("release").unwrap(),
        ]
    }

    fn create(input: serde_json::Value) -> Result<NewSchedule, CreateError> {
        let input: CreateInput = serde_json::from_value(input).unwrap();
        input.check(&agents(), now())
    }

    #[test]
    fn create_takes_a_session_a_prompt_and_one_of_at_every_cron() {
        let made = create(json!({"sessionId": "#ops", "prompt": " ping ", "every": "2s"})).unwrap();
        assert_eq!(made.session_ref, "#ops");
        assert_eq!(made.prompt, "ping");
        assert_eq!(made.agent, None);
        assert_eq!(
            made.spec.next_after(now()),
            Some(now() + chrono::Duration::seconds(2))
        );
        let made = create(json!({"sessionId": "#ops", "prompt": "p", "agent": "release", "cron": "0 9 * * *", "tz": "Europe/Paris"})).unwrap();
        assert_eq!(made.agent.unwrap().as_str(), "release");
    }

    #[test]
    fn create_refuses_an_unknown_agent_with_a_did_you_mean() {
        let error =
            create(json!({"sessionId": "#ops", "prompt": "p", "agent": "suport", "every": "1h"}))
                .unwrap_err();
        assert_eq!(error.field(), "agent");
        assert_eq!(error.code(), "unknown_agent");
        assert!(error.help().starts_with("did you mean \"support\"?"));
    }

    #[test]
    fn create_refuses_empty_and_huge_prompts_and_bad_specs() {
        let error =
            create(json!({"sessionId": "#ops", "prompt": "   ", "every": "1h"})).unwrap_err();
        assert_eq!(error, CreateError::Prompt(PromptError::Empty));
        let error = create(json!({"sessionId": "#ops", "prompt": "x".repeat(4001), "every": "1h"}))
            .unwrap_err();
        assert_eq!(error.field(), "prompt");
        let error =
            create(json!({"sessionId": "#ops", "prompt": "p", "cron": "0 9 * *"})).unwrap_err();
        assert_eq!((error.field(), error.code()), ("cron", "invalid_schedule"));
        let error = create(json!({"sessionId": "#ops", "prompt": "p"})).unwrap_err();
        assert_eq!(error.field(), "at|every|cron");
    }

    #[test]
    fn create_refuses_unknown_fields() {
        let error = serde_json::from_value::<CreateInput>(
            json!({"sessionId": "#ops", "prompt": "p", "evry": "1h"}),
        )
        .unwrap_err();
        assert!(error.to_string().contains("evry"), "{error}");
    }

    #[test]
    fn schedule_ids_are_checked_and_config_ids_are_told_apart() {
        let id = ScheduleId::from_random([0, 1, 2, 3, 4, 5, 6, 255]);
        assert_eq!(id.as_str(), "sch_00010203040506ff");
        assert_eq!(ScheduleId::parse(id.as_str()), Ok(id.clone()));
        assert!(!id.is_config());
        assert!(ScheduleId::for_config("standup").unwrap().is_config());
        for bad in [
            "",
            "config:",
            "config:a b",
            "sch 1",
            "../etc",
            &"a".repeat(101),
        ] {
            assert!(ScheduleId::parse(bad).is_err(), "{bad:?}");
        }
        let input: ScheduleRef =
            serde_json::from_value(json!({"scheduleId": "config:standup"})).unwrap();
        assert_eq!(input.schedule_id.as_str(), "config:standup");
        assert!(serde_json::from_value::<ScheduleRef>(json!({"scheduleId": "no way"})).is_err());
    }

    #[test]
    fn a_view_serializes_its_words_flat_beside_its_state() {
        let view = ScheduleView {
            schedule_id: ScheduleId::parse("sch_1").unwrap(),
            session_id: "1000000000000000401".into(),
            agent: None,
            prompt: "p".into(),
            when: When {
                every: Some("2s".into()),
                ..When::default()
            },
            status: Status::Active,
            failures_in_a_row: 0,
            next_at: Some(now()),
            created_by: "operator".into(),
            created_at: now(),
            receipts: vec![],
        };
        let value = serde_json::to_value(&view).unwrap();
        assert_eq!(
            value,
            json!({"scheduleId": "sch_1", "sessionId": "1000000000000000401", "prompt": "p", "every": "2s",
                   "status": "active", "failuresInARow": 0, "nextAt": "2026-03-01T12:00:00Z",
                   "createdBy": "operator", "createdAt": "2026-03-01T12:00:00Z"})
        );
        let back: ScheduleView = serde_json::from_value(value).unwrap();
        assert_eq!(back, view);
    }
}
