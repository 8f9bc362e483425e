//! `[[schedules]]` entries and the `[scheduler]` table.
//!
//! TOML cannot hold both `[[schedules]]` (an array of tables) and `schedules.missed_max_age_s`
//! (a key of a `[schedules]` table), so the scheduler's own settings live in `[scheduler]`.
//!
//! ```toml
//! [scheduler]
//! missed_max_age_s = 600
//!
//! [[schedules]]
//! name = "standup"
//! session = "#ops"
//! prompt = "Post the standup reminder, or NO_REPLY on holidays."
//! cron = "30 9 * * 1-5"
//! tz = "Europe/Paris"
//! agent = "support"      # optional: the session's agent otherwise
//! ```

use std::collections::HashMap;
use std::time::Duration;

use chrono::{DateTime, Utc};
use serde::Deserialize;
use switchboard_agents::{agent_ref, bounded, AgentName, Findings};
use toml::Spanned;

use crate::api::{check_prompt, ScheduleId};
use crate::spec::{Anchor, PastAt, Spec, When, WhenField};

/// One `[[schedules]]` entry as read from the file.
#[derive(Debug, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct RawSchedule {
    /// Its name, unique among the entries: the schedule's id is `config:NAME`, the same on
    /// every load, so its cursor and receipts survive restarts and reloads.
    pub name: Spanned<String>,
    /// The session it posts in (an alias such as `#ops`, or an id); the config crate resolves
    /// it as it resolves every session reference.
    pub session: Spanned<String>,
    /// What the agent is asked at each firing.
    pub prompt: Spanned<String>,
    /// The agent that answers; unset, the session's agent.
    #[serde(default)]
    pub agent: Option<Spanned<String>>,
    /// See [`When::at`].
    #[serde(default)]
    pub at: Option<Spanned<String>>,
    /// See [`When::every`]; counted from the Unix epoch (`15m` fires on the quarter hours).
    #[serde(default)]
    pub every: Option<Spanned<String>>,
    /// See [`When::cron`].
    #[serde(default)]
    pub cron: Option<Spanned<String>>,
    /// See [`When::tz`].
    #[serde(default)]
    pub tz: Option<Spanned<String>>,
}

/// A checked `[[schedules]]` entry.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct ConfigSchedule {
    /// Its position among the `[[schedules]]` entries (the config crate reads `session` from
    /// the raw entry at this index).
    pub index: usize,
    /// `config:NAME`.
    pub id: ScheduleId,
    /// What the agent is asked.
    pub prompt: String,
    /// The agent named, if any.
    pub agent: Option<AgentName>,
    /// When it fires.
    pub spec: Spec,
}

/// `[scheduler]` as read from the file.
#[derive(Debug, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct RawScheduler {
    /// See [`SchedulerSettings::missed_max_age`].
    #[serde(default = "default_missed_max_age_s")]
    pub missed_max_age_s: Spanned<u64>,
    /// See [`SchedulerSettings::max_schedules`].
    #[serde(default = "default_max_schedules")]
    pub max_schedules: Spanned<u64>,
    /// See [`SchedulerSettings::max_per_session`].
    #[serde(default = "default_max_per_session")]
    pub max_per_session: Spanned<u64>,
    /// See [`SchedulerSettings::receipts_kept`].
    #[serde(default = "default_receipts_kept")]
    pub receipts_kept: Spanned<u64>,
}

impl Default for RawScheduler {
    fn default() -> Self {
        RawScheduler {
            missed_max_age_s: default_missed_max_age_s(),
            max_schedules: default_max_schedules(),
            max_per_session: default_max_per_session(),
            receipts_kept: default_receipts_kept(),
        }
    }
}

fn default_missed_max_age_s() -> Spanned<u64> {
    Spanned::new(0..0, 600)
}

fn default_max_schedules() -> Spanned<u64> {
    Spanned::new(0..0, 500)
}

fn default_max_per_session() -> Spanned<u64> {
    Spanned::new(0..0, 50)
}

fn default_receipts_kept() -> Spanned<u64> {
    Spanned::new(0..0, 20)
}

/// `[scheduler]`, checked.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct SchedulerSettings {
    /// `scheduler.missed_max_age_s` (default 600, 1 to 604,800): a firing missed while the
    /// service was down runs once on start when younger than this, else is recorded as
    /// skipped.
    pub missed_max_age: Duration,
    /// `scheduler.max_schedules` (default 500, 1 to 100,000): schedules that may exist at once
    /// (`[[schedules]]` entries included); `schedule.create` past it is refused.
    pub max_schedules: usize,
    /// `scheduler.max_per_session` (default 50, 1 to 10,000): schedules per session.
    pub max_per_session: usize,
    /// `scheduler.receipts_kept` (default 20, 1 to 1,000): receipts kept per schedule, the
    /// newest; older ones are pruned as new ones are written.
    pub receipts_kept: usize,
}

impl Default for SchedulerSettings {
    fn default() -> Self {
        scheduler(&RawScheduler::default(), &mut Findings::new())
    }
}

/// Checks `[scheduler]`.
pub fn scheduler(raw: &RawScheduler, findings: &mut Findings) -> SchedulerSettings {
    SchedulerSettings {
        missed_max_age: Duration::from_secs(bounded(
            &raw.missed_max_age_s,
            "scheduler.missed_max_age_s",
            1..=604_800,
            "seconds; a missed firing older than this is recorded as skipped instead of run",
            findings,
        )),
        max_schedules: bounded(
            &raw.max_schedules,
            "scheduler.max_schedules",
            1..=100_000,
            "schedules that may exist at once",
            findings,
        ) as usize,
        max_per_session: bounded(
            &raw.max_per_session,
            "scheduler.max_per_session",
            1..=10_000,
            "schedules per session",
            findings,
        ) as usize,
        receipts_kept: bounded(
            &raw.receipts_kept,
            "scheduler.receipts_kept",
            1..=1_000,
            "receipts kept per schedule, the newest",
            findings,
        ) as usize,
    }
}

/// Checks every `[[schedules]]` entry: names (valid, unique), prompts, agents (against the
/// configured ones, with a did-you-mean), and the at / every / cron / tz words. `now` is only
/// used to tell whether a cron expression ever fires; an `at` in the past is accepted (its
/// firing is then missed or done). Sessions are left to the config crate.
pub fn schedules(
    raw: &[RawSchedule],
    agents: &[AgentName],
    now: DateTime<Utc>,
    findings: &mut Findings,
) -> Vec<ConfigSchedule> {
    let mut names: HashMap<String, String> = HashMap::new();
    let mut checked = Vec::with_capacity(raw.len());
    for (index, entry) in raw.iter().enumerate() {
        let key = |field: &str| format!("schedules[{index}].{field}");
        let id = match ScheduleId::for_config(entry.name.get_ref()) {
            Ok(id) => {
                let folded = entry.name.get_ref().to_ascii_lowercase();
                match names.get(&folded) {
                    Some(first) => {
                        findings.add(
                            Some(entry.name.span()),
                            key("name"),
                            format!("another schedule is already named '{first}'"),
                            "each [[schedules]] entry needs its own name (compared ignoring case): it is the schedule's id, config:NAME",
                        );
                        None
                    }
                    None => {
                        names.insert(folded, entry.name.get_ref().clone());
                        Some(id)
                    }
                }
            }
            Err(error) => {
                findings.add(
                    Some(entry.name.span()),
                    key("name"),
                    error.to_string(),
                    error.help(),
                );
                None
            }
        };
        let prompt = match check_prompt(entry.prompt.get_ref()) {
            Ok(prompt) => Some(prompt),
            Err(error) => {
                findings.add(
                    Some(entry.prompt.span()),
                    key("prompt"),
                    error.to_string(),
                    error.help(),
                );
                None
            }
        };
        let agent = match &entry.agent {
            Some(agent) => agent_ref(agent, &key("agent"), agents, findings).map(Some),
            None => Some(None),
        };
        let when = When {
            at: entry.at.as_ref().map(|v| v.get_ref().clone()),
            every: entry.every.as_ref().map(|v| v.get_ref().clone()),
            cron: entry.cron.as_ref().map(|v| v.get_ref().clone()),
            tz: entry.tz.as_ref().map(|v| v.get_ref().clone()),
        };
        let spec = match Spec::parse(&when, now, PastAt::Accept, Anchor::Epoch) {
            Ok(spec) => Some(spec),
            Err(error) => {
                let (span, path) = match error.field() {
                    Some(field) => {
                        let value = match field {
                            WhenField::At => &entry.at,
                            WhenField::Every => &entry.every,
                            WhenField::Cron => &entry.cron,
                            WhenField::Tz => &entry.tz,
                        };
                        (value.as_ref().map(Spanned::span), key(field.key()))
                    }
                    None => (Some(entry.name.span()), format!("schedules[{index}]")),
                };
                findings.add(span, path, error.to_string(), error.help());
                None
            }
        };
        if let (Some(id), Some(prompt), Some(agent), Some(spec)) = (id, prompt, agent, spec) {
            checked.push(ConfigSchedule {
                index,
                id,
                prompt,
                agent,
                spec,
            });
        }
    }
    checked
}

#[cfg(test)]
mod tests {
    use super::*;

    #[derive(Debug, Deserialize)]
    struct File {
        #[serde(default)]
        schedules: Vec<RawSchedule>,
        #[serde(default)]
        scheduler: Option<RawScheduler>,
    }

    fn now() -> DateTime<Utc> {
        crate::spec::tests::utc("2026-03-01T12:00:00Z")
    }

    fn check(text: &str) -> (Vec<ConfigSchedule>, Vec<switchboard_agents::Finding>) {
        let file: File = toml::from_str(text).unwrap();
        let agents = vec![AgentName::parse("support").unwrap()];
        let mut findings = Findings::new();
        let checked = schedules(&file.schedules, &agents, now(), &mut findings);
        (checked, findings.into_vec())
    }

    #[test]
    fn a_config_schedule_has_a_stable_id_and_counts_every_from_the_epoch() {
        let (checked, findings) = check(
            "[[schedules]]\nname = \"digest\"\nsession = \"#ops\"\nprompt = \"Post the digest\"\nevery = \"15m\"\n",
        );
        assert!(findings.is_empty(), "{findings:?}");
        assert_eq!(checked[0].id.as_str(), "config:digest");
        assert_eq!(
            checked[0].spec.next_after(now()),
            Some(crate::spec::tests::utc("2026-03-01T12:15:00Z"))
        );
    }

    #[test]
    fn each_bad_field_is_located_at_its_value() {
        let text = "[[schedules]]\nname = \"a b\"\nsession = \"#ops\"\nprompt = \"  \"\nagent = \"suport\"\ncron = \"0 9 * * *\"\ntz = \"Europe/Pari\"\n";
        let (checked, findings) = check(text);
        assert!(checked.is_empty());
        let keys: Vec<&str> = findings.iter().map(|f| f.key_path.as_str()).collect();
        assert_eq!(
            keys,
            [
                "schedules[0].name",
                "schedules[0].prompt",
                "schedules[0].agent",
                "schedules[0].tz"
            ]
        );
        let tz = &findings[3];
        assert_eq!(&text[tz.span.clone().unwrap()], "\"Europe/Pari\"");
        assert!(tz.help.starts_with("did you mean \"Europe/Paris\"?"));
        assert!(findings[2].help.starts_with("did you mean \"support\"?"));
    }

    #[test]
    fn two_schedules_cannot_share_a_name_and_one_needs_exactly_one_of_at_every_cron() {
        let text = "[[schedules]]\nname = \"x\"\nsession = \"#ops\"\nprompt = \"p\"\nevery = \"1h\"\n\n[[schedules]]\nname = \"X\"\nsession = \"#ops\"\nprompt = \"p\"\nevery = \"1h\"\ncron = \"* * * * *\"\n";
        let (checked, findings) = check(text);
        assert_eq!(checked.len(), 1);
        assert_eq!(findings.len(), 2, "{findings:?}");
        assert_eq!(findings[0].key_path, "schedules[1].name");
        assert_eq!(findings[1].key_path, "schedules[1]");
        assert!(findings[1].message.contains("every and cron"));
    }

    #[test]
    fn a_past_at_in_the_config_is_kept() {
        let (checked, findings) = check(
            "[[schedules]]\nname = \"launch\"\nsession = \"#ops\"\nprompt = \"p\"\nat = \"2020-01-01T00:00:00Z\"\n",
        );
        assert!(findings.is_empty());
        assert!(checked[0].spec.is_one_shot());
    }

    #[test]
    fn scheduler_settings_default_and_are_bounded() {
        assert_eq!(
            SchedulerSettings::default().missed_max_age,
            Duration::from_secs(600)
        );
        let file: File =
            toml::from_str("[scheduler]\nmissed_max_age_s = 0\nreceipts_kept = 5000\n").unwrap();
        let mut findings = Findings::new();
        let settings = scheduler(&file.scheduler.unwrap(), &mut findings);
        assert_eq!(settings.missed_max_age, Duration::from_secs(1));
        assert_eq!(settings.receipts_kept, 1000);
        let keys: Vec<String> = findings.into_iter().map(|f| f.key_path).collect();
        assert_eq!(
            keys,
            ["scheduler.missed_max_age_s", "scheduler.receipts_kept"]
        );
        assert!(toml::from_str::<File>("[scheduler]\nmissed_max_age = 3\n").is_err());
    }
}
