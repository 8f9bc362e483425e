//! Model usage (issue 26): one row per model call, with who it is charged to, summed over a
//! time window for budgets and folded into reports.

use serde::{Deserialize, Serialize};

/// Usage rows are kept 400 days (monthly budgets and a year of reports).
pub const USAGE_KEPT_MS: u64 = 400 * 24 * 3600 * 1000;

/// Who and what a model call is charged to: the same for every call of one run.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "camelCase")]
pub struct UsageCharge {
    /// The run that called the model.
    pub run_id: String,
    /// The agent.
    pub agent: String,
    /// Who triggered the run: a Discord user id, `token:NAME` for the chat API.
    pub user: Option<String>,
    /// The session it ran in: a channel id, or an API session's key.
    pub session: Option<String>,
    /// The session's guild (none for DMs and API sessions).
    pub guild: Option<String>,
    /// The model.
    pub model: String,
}

/// One model call's usage.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "camelCase")]
pub struct UsageRow {
    /// Who and what it is charged to.
    #[serde(flatten)]
    pub charge: UsageCharge,
    /// Prompt tokens.
    pub tokens_in: u64,
    /// Completion tokens.
    pub tokens_out: u64,
    /// What it cost, in millionths of a US dollar.
    pub micro_usd: u64,
    /// The tokens were estimated (the model sent no `usage`), not reported.
    pub estimated: bool,
    /// When, ms since the Unix epoch.
    pub at_ms: u64,
}

/// The most tokens (each way) or micro-dollars one row keeps: a model that reports absurd
/// figures is capped here, so no sum over a year of rows can overflow.
pub const USAGE_VALUE_MAX: u64 = 1 << 40;

impl UsageRow {
    /// The row with its figures capped at [`USAGE_VALUE_MAX`] (what a store keeps).
    pub fn capped(mut self) -> UsageRow {
        self.tokens_in = self.tokens_in.min(USAGE_VALUE_MAX);
        self.tokens_out = self.tokens_out.min(USAGE_VALUE_MAX);
        self.micro_usd = self.micro_usd.min(USAGE_VALUE_MAX);
        self
    }
}

/// A usage row as a store keeps it, under its id (what copying a store moves).
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct KeptUsage {
    /// Its id: rows recorded later have higher ones.
    pub id: u64,
    /// The row.
    pub row: UsageRow,
}

/// Whose usage to sum.
#[derive(Debug, Clone, PartialEq, Eq, Hash)]
pub enum UsageSubject {
    /// One user's (a user id, `token:NAME`).
    User(String),
    /// One session's.
    Session(String),
    /// One guild's.
    Guild(String),
    /// One agent's.
    Agent(String),
}

impl UsageSubject {
    /// Whether `row` is charged to it.
    pub fn matches(&self, row: &UsageRow) -> bool {
        match self {
            UsageSubject::User(id) => row.charge.user.as_ref() == Some(id),
            UsageSubject::Session(id) => row.charge.session.as_ref() == Some(id),
            UsageSubject::Guild(id) => row.charge.guild.as_ref() == Some(id),
            UsageSubject::Agent(name) => &row.charge.agent == name,
        }
    }
}

/// Usage summed.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Default, Serialize, Deserialize)]
#[serde(rename_all = "camelCase")]
pub struct UsageTotals {
    /// Model calls.
    pub calls: u64,
    /// Prompt tokens.
    pub tokens_in: u64,
    /// Completion tokens.
    pub tokens_out: u64,
    /// Cost in millionths of a US dollar.
    pub micro_usd: u64,
    /// Some of the rows were estimated, not reported by the model.
    pub estimated: bool,
}

impl UsageTotals {
    /// Adds one row.
    pub fn add(&mut self, row: &UsageRow) {
        self.calls += 1;
        self.tokens_in = self.tokens_in.saturating_add(row.tokens_in);
        self.tokens_out = self.tokens_out.saturating_add(row.tokens_out);
        self.micro_usd = self.micro_usd.saturating_add(row.micro_usd);
        self.estimated |= row.estimated;
    }

    /// Prompt and completion tokens.
    pub fn tokens(&self) -> u64 {
        self.tokens_in.saturating_add(self.tokens_out)
    }
}

/// How a report groups usage.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash, Serialize, Deserialize)]
#[serde(rename_all = "snake_case")]
pub enum UsageBy {
    /// By the user who triggered the run.
    User,
    /// By session.
    Session,
    /// By guild.
    Guild,
    /// By agent.
    Agent,
    /// By UTC day.
    Day,
}

/// The day (UTC) of a time in ms since the Unix epoch, as `YYYY-MM-DD`.
pub fn utc_day(ms: u64) -> String {
    let days = i64::try_from(ms / 86_400_000).unwrap_or(i64::MAX);
    chrono::DateTime::from_timestamp(days.saturating_mul(86_400), 0).map_or_else(
        || "9999-12-31".to_owned(),
        |t| t.format("%Y-%m-%d").to_string(),
    )
}

impl UsageBy {
    /// The group `row` falls in (`None`: a row without a user, session or guild).
    pub fn key(self, row: &UsageRow) -> Option<String> {
        match self {
            UsageBy::User => row.charge.user.clone(),
            UsageBy::Session => row.charge.session.clone(),
            UsageBy::Guild => row.charge.guild.clone(),
            UsageBy::Agent => Some(row.charge.agent.clone()),
            UsageBy::Day => Some(utc_day(row.at_ms)),
        }
    }
}

/// What a report asks for: rows with `since_ms <= at_ms < until_ms`, grouped.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct UsageQuery {
    /// How to group.
    pub by: UsageBy,
    /// From (inclusive), ms since the Unix epoch.
    pub since_ms: u64,
    /// To (exclusive).
    pub until_ms: u64,
    /// At most this many groups, the largest (by tokens) first (a store caps it at
    /// [`UsageQuery::MAX_LIMIT`]).
    pub limit: usize,
}

impl UsageQuery {
    /// The most groups one report answers.
    pub const MAX_LIMIT: usize = 10_000;
}

/// One group of a report.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "camelCase")]
pub struct UsageGroup {
    /// The user, session or guild, the agent, or the day; `None` for rows without one.
    pub key: Option<String>,
    /// Its sums.
    pub totals: UsageTotals,
}

/// The reference fold every backend's report matches: group, sum, largest first (then by key),
/// cut at the limit.
pub fn fold_usage<'a>(
    rows: impl IntoIterator<Item = &'a UsageRow>,
    query: &UsageQuery,
) -> Vec<UsageGroup> {
    let mut groups: std::collections::BTreeMap<Option<String>, UsageTotals> =
        std::collections::BTreeMap::new();
    for row in rows {
        if row.at_ms >= query.since_ms && row.at_ms < query.until_ms {
            groups.entry(query.by.key(row)).or_default().add(row);
        }
    }
    let mut groups: Vec<UsageGroup> = groups
        .into_iter()
        .map(|(key, totals)| UsageGroup { key, totals })
        .collect();
    sort_groups(&mut groups);
    groups.truncate(query.limit.min(UsageQuery::MAX_LIMIT));
    groups
}

/// The order of a report: most tokens first, then by key.
pub fn sort_groups(groups: &mut [UsageGroup]) {
    groups.sort_by(|a, b| {
        b.totals
            .tokens()
            .cmp(&a.totals.tokens())
            .then_with(|| a.key.cmp(&b.key))
    });
}

#[cfg(test)]
mod tests {
    use super::*;

    fn row(user: u64, at_ms: u64, tokens_in: u64) -> UsageRow {
        UsageRow {
            charge: UsageCharge {
                run_id: "r".into(),
                agent: "a".into(),
                user: Some(user.to_string()),
                session: None,
                guild: None,
                model: "m".into(),
            },
            tokens_in,
            tokens_out: 1,
            micro_usd: 10,
            estimated: false,
            at_ms,
        }
    }

    #[test]
    fn a_report_groups_sums_sorts_and_cuts() {
        let rows = [row(1, 0, 5), row(2, 10, 50), row(1, 20, 5), row(3, 99, 500)];
        let query = UsageQuery {
            by: UsageBy::User,
            since_ms: 0,
            until_ms: 99,
            limit: 2,
        };
        let groups = fold_usage(&rows, &query);
        assert_eq!(groups.len(), 2);
        assert_eq!(groups[0].key.as_deref(), Some("2"));
        assert_eq!(groups[1].key.as_deref(), Some("1"));
        assert_eq!(groups[1].totals.calls, 2);
        assert_eq!(groups[1].totals.tokens(), 12);
        assert_eq!(groups[1].totals.micro_usd, 20);
        let by_session = fold_usage(
            &rows,
            &UsageQuery {
                by: UsageBy::Session,
                ..query
            },
        );
        assert_eq!(by_session[0].key, None);
    }

    #[test]
    fn days_are_utc_dates() {
        assert_eq!(utc_day(0), "1970-01-01");
        assert_eq!(utc_day(1_764_115_200_000 + 86_399_999), "2025-11-26");
        assert_eq!(utc_day(u64::MAX), "9999-12-31");
    }
}
