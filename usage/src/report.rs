//! `usage.report`: usage rows summed by user, session, guild, agent or day.
//!
//! The fold here is the definition; a store may sum in SQL instead, and its conformance test
//! compares with this.

use std::collections::BTreeMap;

use chrono::{DateTime, Utc};
use chrono_tz::Tz;
use schemars::JsonSchema;
use serde::de::Error as _;
use serde::ser::SerializeMap;
use serde::{Deserialize, Deserializer, Serialize, Serializer};
use serde_json::{Map, Value};

use crate::budget::Spent;
use crate::money::usd_number;
use crate::usage::Usage;

/// One model call's usage, as the store keeps it.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "camelCase")]
pub struct UsageRecord {
    /// When the call finished.
    pub at: DateTime<Utc>,
    /// The run it belongs to.
    pub run_id: String,
    /// Who triggered the run (a user id, `token:NAME` for the chat API), if anyone.
    pub user: Option<String>,
    /// The session it ran in (a channel id, or the API session's key).
    pub session: Option<String>,
    /// The guild of that session, if any (none for DMs and API sessions).
    pub guild: Option<String>,
    /// The agent that ran.
    pub agent: String,
    /// The tokens.
    pub usage: Usage,
    /// Their cost, in micro-dollars, at the agent's prices when the call was made.
    pub micros: u64,
}

impl UsageRecord {
    /// Tokens and cost, for budget sums.
    pub fn spent(&self) -> Spent {
        Spent {
            tokens: self.usage.total(),
            micros: self.micros,
        }
    }
}

/// What a report sums by.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash, Serialize, Deserialize, JsonSchema)]
#[serde(rename_all = "snake_case")]
pub enum By {
    /// Each user who triggered runs.
    User,
    /// Each session.
    Session,
    /// Each guild.
    Guild,
    /// Each agent.
    Agent,
    /// Each day, in `budgets.tz`, as `YYYY-MM-DD`.
    Day,
}

impl By {
    /// The row's key field: `user`, `session`, `guild`, `agent` or `day`.
    pub fn as_str(self) -> &'static str {
        match self {
            By::User => "user",
            By::Session => "session",
            By::Guild => "guild",
            By::Agent => "agent",
            By::Day => "day",
        }
    }

    fn parse(text: &str) -> Option<By> {
        Some(match text {
            "user" => By::User,
            "session" => By::Session,
            "guild" => By::Guild,
            "agent" => By::Agent,
            "day" => By::Day,
            _ => return None,
        })
    }
}

/// `usage.report`'s input.
#[derive(Debug, Clone, Deserialize, JsonSchema)]
#[serde(deny_unknown_fields, rename_all = "camelCase")]
pub struct ReportInput {
    /// What to sum by: `user`, `session`, `guild`, `agent` or `day`.
    pub by: By,
    /// Only usage at or after this time: RFC 3339 (`2026-11-23T10:00:00Z`) or an age (`90s`,
    /// `15m`, `2h`, `7d`), as `audit.list` takes it.
    #[serde(default)]
    pub since: Option<String>,
}

/// One row of a report.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct ReportRow {
    /// What the row sums by.
    pub by: By,
    /// The user, session, guild, agent or day; `None` for usage without one (a schedule's
    /// runs have no user, DMs no guild).
    pub key: Option<String>,
    /// Prompt tokens.
    pub prompt_tokens: u64,
    /// Completion tokens.
    pub completion_tokens: u64,
    /// Their cost, in micro-dollars.
    pub micros: u64,
    /// Whether any of the calls summed had estimated counts.
    pub estimated: bool,
}

impl ReportRow {
    /// Prompt and completion tokens.
    pub fn total_tokens(&self) -> u64 {
        self.prompt_tokens.saturating_add(self.completion_tokens)
    }
}

/// On the wire: `{"user": "…", "promptTokens", "completionTokens", "totalTokens", "usd",
/// "usdMicros", "estimated"}`, the key field named by what the report sums by.
impl Serialize for ReportRow {
    fn serialize<S: Serializer>(&self, serializer: S) -> Result<S::Ok, S::Error> {
        let mut map = serializer.serialize_map(Some(7))?;
        map.serialize_entry(self.by.as_str(), &self.key)?;
        map.serialize_entry("promptTokens", &self.prompt_tokens)?;
        map.serialize_entry("completionTokens", &self.completion_tokens)?;
        map.serialize_entry("totalTokens", &self.total_tokens())?;
        map.serialize_entry("usd", &usd_number(self.micros))?;
        map.serialize_entry("usdMicros", &self.micros)?;
        map.serialize_entry("estimated", &self.estimated)?;
        map.end()
    }
}

impl<'de> Deserialize<'de> for ReportRow {
    fn deserialize<D: Deserializer<'de>>(deserializer: D) -> Result<Self, D::Error> {
        let map = Map::<String, Value>::deserialize(deserializer)?;
        let by = ["user", "session", "guild", "agent", "day"]
            .into_iter()
            .find(|key| map.contains_key(*key))
            .and_then(By::parse)
            .ok_or_else(|| {
                D::Error::custom("a report row needs one of user, session, guild, agent, day")
            })?;
        let key = match &map[by.as_str()] {
            Value::Null => None,
            Value::String(key) => Some(key.clone()),
            _ => return Err(D::Error::custom("a report row's key is a string or null")),
        };
        let number = |name: &str| {
            map.get(name).and_then(Value::as_u64).ok_or_else(|| {
                D::Error::custom(format!("a report row needs {name}, a whole number"))
            })
        };
        Ok(ReportRow {
            by,
            key,
            prompt_tokens: number("promptTokens")?,
            completion_tokens: number("completionTokens")?,
            micros: number("usdMicros")?,
            estimated: map
                .get("estimated")
                .and_then(Value::as_bool)
                .unwrap_or(false),
        })
    }
}

/// `usage.report`'s answer.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct UsageReport {
    /// One row per key, in key order (days chronologically); usage without a key last.
    pub rows: Vec<ReportRow>,
}

impl JsonSchema for UsageReport {
    fn schema_name() -> std::borrow::Cow<'static, str> {
        "UsageReport".into()
    }

    fn json_schema(_: &mut schemars::SchemaGenerator) -> schemars::Schema {
        let key = serde_json::json!({"type": ["string", "null"]});
        schemars::json_schema!({
            "type": "object",
            "required": ["rows"],
            "properties": {
                "rows": {
                    "type": "array",
                    "items": {
                        "type": "object",
                        "description": "One of user, session, guild, agent or day (what the report sums by), then the sums.",
                        "required": ["promptTokens", "completionTokens", "totalTokens", "usd", "usdMicros", "estimated"],
                        "properties": {
                            "user": key, "session": key, "guild": key, "agent": key, "day": key,
                            "promptTokens": {"type": "integer", "minimum": 0},
                            "completionTokens": {"type": "integer", "minimum": 0},
                            "totalTokens": {"type": "integer", "minimum": 0},
                            "usd": {"type": "number", "minimum": 0, "description": "Dollars; usdMicros is the exact figure."},
                            "usdMicros": {"type": "integer", "minimum": 0},
                            "estimated": {"type": "boolean", "description": "Some calls reported no usage: their tokens are estimated from text length."}
                        }
                    }
                }
            }
        })
    }
}

fn key_of(record: &UsageRecord, by: By, tz: Tz) -> Option<String> {
    match by {
        By::User => record.user.clone(),
        By::Session => record.session.clone(),
        By::Guild => record.guild.clone(),
        By::Agent => Some(record.agent.clone()),
        By::Day => Some(record.at.with_timezone(&tz).format("%Y-%m-%d").to_string()),
    }
}

/// Sums `records` at or after `since` by `by`, days counted in `tz`.
pub fn report<'a>(
    records: impl IntoIterator<Item = &'a UsageRecord>,
    by: By,
    since: Option<DateTime<Utc>>,
    tz: Tz,
) -> UsageReport {
    // `None` sorts first in a BTreeMap; the answer puts it last.
    let mut sums: BTreeMap<Option<String>, ReportRow> = BTreeMap::new();
    for record in records {
        if since.is_some_and(|since| record.at < since) {
            continue;
        }
        let key = key_of(record, by, tz);
        let row = sums.entry(key.clone()).or_insert_with(|| ReportRow {
            by,
            key,
            prompt_tokens: 0,
            completion_tokens: 0,
            micros: 0,
            estimated: false,
        });
        row.prompt_tokens = row.prompt_tokens.saturating_add(record.usage.prompt_tokens);
        row.completion_tokens = row
            .completion_tokens
            .saturating_add(record.usage.completion_tokens);
        row.micros = row.micros.saturating_add(record.micros);
        row.estimated |= record.usage.estimated;
    }
    let unkeyed = sums.remove(&None);
    let mut rows: Vec<ReportRow> = sums.into_values().collect();
    rows.extend(unkeyed);
    UsageReport { rows }
}

#[cfg(test)]
mod tests {
    use super::*;
    use serde_json::json;

    fn record(
        at: &str,
        user: Option<&str>,
        agent: &str,
        prompt: u64,
        completion: u64,
        micros: u64,
    ) -> UsageRecord {
        UsageRecord {
            at: DateTime::parse_from_rfc3339(at)
                .unwrap()
                .with_timezone(&Utc),
            run_id: "r".into(),
            user: user.map(str::to_owned),
            session: Some("1000000000000000401".into()),
            guild: None,
            agent: agent.into(),
            usage: Usage::reported(prompt, completion),
            micros,
        }
    }

    fn records() -> Vec<UsageRecord> {
        vec![
            record("2026-03-10T23:30:00Z", Some("111"), "support", 100, 10, 5),
            record("2026-03-11T08:00:00Z", Some("222"), "support", 200, 20, 7),
            record("2026-03-11T09:00:00Z", Some("111"), "release", 300, 30, 11),
            record("2026-03-11T10:00:00Z", None, "release", 400, 40, 13),
        ]
    }

    #[test]
    fn a_report_by_user_sums_each_user_and_puts_usage_without_one_last() {
        let report = report(&records(), By::User, None, Tz::UTC);
        let value = serde_json::to_value(&report).unwrap();
        assert_eq!(
            value,
            json!({"rows": [
                {"user": "111", "promptTokens": 400, "completionTokens": 40, "totalTokens": 440, "usd": 0.000016, "usdMicros": 16, "estimated": false},
                {"user": "222", "promptTokens": 200, "completionTokens": 20, "totalTokens": 220, "usd": 0.000007, "usdMicros": 7, "estimated": false},
                {"user": null, "promptTokens": 400, "completionTokens": 40, "totalTokens": 440, "usd": 0.000013, "usdMicros": 13, "estimated": false},
            ]})
        );
        let back: UsageReport = serde_json::from_value(value).unwrap();
        assert_eq!(back, report);
    }

    #[test]
    fn a_report_by_day_counts_days_in_the_budget_zone_and_honours_since() {
        let utc_days = report(&records(), By::Day, None, Tz::UTC);
        let keys: Vec<_> = utc_days
            .rows
            .iter()
            .map(|r| r.key.clone().unwrap())
            .collect();
        assert_eq!(keys, ["2026-03-10", "2026-03-11"]);
        // In Paris the 23:30 UTC call is already on the 11th.
        let paris = report(&records(), By::Day, None, Tz::Europe__Paris);
        assert_eq!(paris.rows.len(), 1);
        assert_eq!(paris.rows[0].total_tokens(), 1_100);
        let since = DateTime::parse_from_rfc3339("2026-03-11T09:00:00Z")
            .unwrap()
            .with_timezone(&Utc);
        let recent = report(&records(), By::Agent, Some(since), Tz::UTC);
        assert_eq!(recent.rows.len(), 1);
        assert_eq!(recent.rows[0].key.as_deref(), Some("release"));
        assert_eq!(recent.rows[0].prompt_tokens, 700);
    }

    #[test]
    fn an_estimated_call_marks_its_row() {
        let mut rows = records();
        rows[0].usage.estimated = true;
        let report = report(&rows, By::Agent, None, Tz::UTC);
        assert!(
            report
                .rows
                .iter()
                .find(|r| r.key.as_deref() == Some("support"))
                .unwrap()
                .estimated
        );
        assert!(
            !report
                .rows
                .iter()
                .find(|r| r.key.as_deref() == Some("release"))
                .unwrap()
                .estimated
        );
    }

    #[test]
    fn report_input_takes_by_and_since_only() {
        let input: ReportInput =
            serde_json::from_value(json!({"by": "guild", "since": "7d"})).unwrap();
        assert_eq!(input.by, By::Guild);
        assert!(serde_json::from_value::<ReportInput>(json!({"by": "week"})).is_err());
        assert!(serde_json::from_value::<ReportInput>(json!({"by": "user", "limit": 3})).is_err());
        let schema = serde_json::to_value(schemars::schema_for!(UsageReport)).unwrap();
        assert_eq!(schema["required"], json!(["rows"]));
    }
}
