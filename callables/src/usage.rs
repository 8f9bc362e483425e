//! `usage.report` (issue 26 §4): the model usage the store keeps, grouped by user, session,
//! guild, agent or day, with its cost. An operator callable: the operator, or a token whose
//! scope names it; never an agent run.

use async_trait::async_trait;
use protocol::{Effects, ErrorCode};
use serde_json::json;
use switchboard_records::{UsageBy, UsageQuery};
use switchboard_usage::{By, ReportInput, ReportRow, UsageReport};

use crate::error::ToolError;
use crate::invocation::{Invocation, PlanContext};
use crate::registry::{example, output, output_schema, Planned, Tool, ToolOutput, ToolSpec};

/// How far back a report reaches when `since` is not given: 30 days.
const DEFAULT_SINCE_MS: u64 = 30 * 86_400_000;

pub struct ReportUsage;

/// The store's grouping for a report's.
pub fn usage_by(by: By) -> UsageBy {
    match by {
        By::User => UsageBy::User,
        By::Session => UsageBy::Session,
        By::Guild => UsageBy::Guild,
        By::Agent => UsageBy::Agent,
        By::Day => UsageBy::Day,
    }
}

/// Reads a report from `store`: rows with `since_ms <= at`, grouped by `by`.
pub async fn report(
    store: &dyn switchboard_store::UsageStore,
    by: By,
    since_ms: u64,
) -> Result<UsageReport, switchboard_store::StoreError> {
    let groups = store
        .usage_report(UsageQuery {
            by: usage_by(by),
            since_ms,
            until_ms: u64::MAX,
            limit: UsageQuery::MAX_LIMIT,
        })
        .await?;
    let mut rows: Vec<ReportRow> = groups
        .into_iter()
        .map(|group| ReportRow {
            by,
            key: group.key,
            prompt_tokens: group.totals.tokens_in,
            completion_tokens: group.totals.tokens_out,
            micros: group.totals.micro_usd,
            estimated: group.totals.estimated,
        })
        .collect();
    // Days read best oldest first (a chart); the rest largest first, as the store sorts.
    if by == By::Day {
        rows.sort_by(|a, b| a.key.cmp(&b.key));
    }
    Ok(UsageReport { rows })
}

#[async_trait]
impl Tool for ReportUsage {
    type Input = ReportInput;
    type Plan = (By, u64);

    fn spec(&self) -> ToolSpec {
        ToolSpec {
            id: "usage.report",
            title: "Report model usage",
            description: "Model usage (prompt, completion and total tokens) and its cost in US dollars, by user, session, guild, agent or day.",
            help: "An operator callable: the operator, or a token whose scope names it (usage.report, usage.*, *); an agent run never. `since` takes an RFC 3339 time or an age (15m, 2h, 7d); default 30 days. Rows whose tokens the model did not report are estimated and say so (estimated: true). Costs use each agent's price_in_per_mtok / price_out_per_mtok.",
            mutating: false,
            primary: Some("by"),
            effects: Effects::LOCAL_READ,
            output_schema: Some(output_schema::<UsageReport>()),
            examples: vec![example(
                "Usage per user this week",
                "tools usage.report user --since=7d",
                json!({"by": "user", "since": "7d"}),
            )],
        }
    }

    fn plan(
        &self,
        _: &PlanContext<'_>,
        input: ReportInput,
    ) -> Result<Planned<(By, u64)>, ToolError> {
        let now = crate::clock::now_ms();
        let since = match input.since.as_deref() {
            Some(text) => super::audit::parse_time("since", text, now)?,
            None => now.saturating_sub(DEFAULT_SINCE_MS),
        };
        Ok(Planned::nowhere((input.by, since)))
    }

    async fn run(
        &self,
        cx: &Invocation<'_>,
        (by, since): (By, u64),
    ) -> Result<ToolOutput, ToolError> {
        let store = cx.core.usage().ok_or_else(|| {
            ToolError::new(
                protocol::ErrorKind::Denied,
                ErrorCode::parse("usage_unavailable"),
                "Usage is not recorded here: it is the agent's, so run `switchboard run` with an [agent] section in the config.",
            )
        })?;
        let answer = report(store.as_ref(), by, since).await.map_err(|error| {
            ToolError::store_unavailable(format!("the usage could not be read: {error}; try again"))
        })?;
        output(&answer)
    }
}
