//! `audit.list`: the audit log, newest first, filtered and paged. For the operator and named
//! tokens whose scope includes it; never an agent run's (governance refuses `audit.*` to
//! capabilities).

use async_trait::async_trait;
use chrono::{DateTime, Utc};
use protocol::ErrorCode;
use schemars::JsonSchema;
use serde::{Deserialize, Serialize};
use serde_json::{json, Value};

use crate::error::ToolError;
use crate::invocation::{Invocation, PlanContext};
use crate::registry::{example, output, output_schema, Planned, Tool, ToolOutput, ToolSpec};
use protocol::Effects;
use switchboard_engine::governance::AuditFilter;

pub struct ListAudit;

/// Rows a page holds unless `limit` says otherwise.
const DEFAULT_LIMIT: u32 = 50;

#[derive(Debug, Deserialize, JsonSchema)]
#[serde(deny_unknown_fields, rename_all = "camelCase")]
pub struct ListAuditInput {
    /// Only calls at or after this time: RFC 3339 (`2026-11-23T10:00:00Z`) or an age (`90s`,
    /// `15m`, `2h`, `7d`).
    pub since: Option<String>,
    /// Only calls before this time (same forms as `since`).
    pub until: Option<String>,
    /// Only calls of callables matching this name or glob (`surface.messages.*`).
    pub tool: Option<String>,
    /// Only calls that acted in this session (alias like `#ops`, or id).
    pub session_id: Option<String>,
    /// Only calls by this caller: `operator`, `token:NAME`, `cap:ID` (an agent run), or
    /// `discord:USER_ID` (a `/tools` change).
    pub caller: Option<String>,
    /// Only calls with this decision: `allow`, `ask`, `deny`, or `-` (refused before the
    /// permission stage).
    pub decision: Option<String>,
    /// At most this many rows (1 to 1000, default 50).
    pub limit: Option<u32>,
    /// The previous page's `nextCursor`: continue with older rows.
    pub cursor: Option<u64>,
}

/// A time as `since`/`until` take it, in ms since the epoch.
pub(super) fn parse_time(field: &str, text: &str, now_ms: u64) -> Result<u64, ToolError> {
    let text = text.trim();
    if let Ok(time) = DateTime::parse_from_rfc3339(text) {
        return u64::try_from(time.timestamp_millis()).map_err(|_| {
            ToolError::usage(
                ErrorCode::InvalidInput,
                format!("{field}: {text} is before 1970"),
            )
        });
    }
    let split = text
        .find(|c: char| !c.is_ascii_digit())
        .unwrap_or(text.len());
    let (digits, unit) = text.split_at(split);
    let unit_ms: u64 = match unit {
        "s" => 1_000,
        "m" => 60_000,
        "h" => 3_600_000,
        "d" => 86_400_000,
        _ => 0,
    };
    match digits.parse::<u64>() {
        Ok(count) if unit_ms > 0 => Ok(now_ms.saturating_sub(count.saturating_mul(unit_ms))),
        _ => Err(ToolError::usage(
            ErrorCode::InvalidInput,
            format!(
                "{field}: '{text}' is neither an RFC 3339 time (2026-11-23T10:00:00Z) nor an age (90s, 15m, 2h, 7d)"
            ),
        )),
    }
}

#[async_trait]
impl Tool for ListAudit {
    type Input = ListAuditInput;
    type Plan = AuditFilter;

    fn spec(&self) -> ToolSpec {
        ToolSpec {
            id: "audit.list",
            description: "Read the audit log: every call that reached the pipeline, with its decision and outcome, newest first.",
            help: "Filters combine (all must hold). `since`/`until` take an RFC 3339 time or an age (15m, 2h, 7d). Pass the answer's `nextCursor` as `cursor` for older rows. Inputs are kept cut to audit.text_chars characters per text field, or only as a hash with audit.redact. Agent runs can never call this.",
            mutating: false,
            primary: None,
            title: "Read the audit log",
            // The server's own log: nothing on the chat platform.
            effects: Effects::LOCAL_READ,
            output_schema: Some(output_schema::<AuditPage>()),
            examples: vec![
                example(
                    "What was denied in the last hour",
                    "tools audit.list --since=1h --decision=deny --output=text",
                    json!({"since": "1h", "decision": "deny"}),
                ),
                example(
                    "Every send in #ops",
                    "tools audit.list --tool=surface.messages.send --session-id=#ops",
                    json!({"tool": "surface.messages.send", "sessionId": "#ops"}),
                ),
            ],
        }
    }

    fn plan(
        &self,
        cx: &PlanContext<'_>,
        input: ListAuditInput,
    ) -> Result<Planned<AuditFilter>, ToolError> {
        let now_ms = crate::clock::now_ms();
        let limit = input.limit.unwrap_or(DEFAULT_LIMIT);
        if !(1..=1000).contains(&limit) {
            return Err(ToolError::usage(
                ErrorCode::InvalidInput,
                format!("limit must be between 1 and 1000, got {limit}"),
            ));
        }
        if let Some(decision) = &input.decision {
            if !["allow", "ask", "deny", "-"].contains(&decision.as_str()) {
                return Err(ToolError::usage(
                    ErrorCode::InvalidInput,
                    format!("decision must be allow, ask, deny or -, got '{decision}'"),
                ));
            }
        }
        // The session is only a filter: a session the allowlist refuses now may still have
        // rows from before, so it is resolved, never allowlisted.
        let session = match input.session_id.as_deref() {
            Some(reference) => Some(cx.mapper().resolve_session(reference).map_err(|error| {
                ToolError::usage(ErrorCode::UnknownSession, format!("sessionId: {error}"))
            })?),
            None => None,
        };
        Ok(Planned::nowhere(AuditFilter {
            since_ms: input
                .since
                .as_deref()
                .map(|t| parse_time("since", t, now_ms))
                .transpose()?,
            until_ms: input
                .until
                .as_deref()
                .map(|t| parse_time("until", t, now_ms))
                .transpose()?,
            tool: input.tool.map(|t| t.trim().to_owned()),
            session,
            caller: input.caller.map(|c| c.trim().to_owned()),
            decision: input.decision,
            limit: limit as usize,
            before_id: input.cursor,
        }))
    }

    async fn run(&self, cx: &Invocation<'_>, filter: AuditFilter) -> Result<ToolOutput, ToolError> {
        let page = cx
            .core
            .governance()
            .audit()
            .audit_page(filter)
            .await
            .map_err(|error| ToolError::store_unavailable(error.to_string()))?;
        let rows: Vec<Value> = page
            .rows
            .iter()
            .map(|entry| {
                let mut row = serde_json::to_value(entry).unwrap_or(Value::Null);
                let time = i64::try_from(entry.row.time_ms)
                    .ok()
                    .and_then(DateTime::<Utc>::from_timestamp_millis)
                    .map(|t| t.to_rfc3339_opts(chrono::SecondsFormat::Millis, true));
                let labels: Vec<String> = entry
                    .row
                    .sessions
                    .iter()
                    .map(|id| cx.mapper().session_reference(*id))
                    .collect();
                if let Value::Object(map) = &mut row {
                    map.insert("time".into(), json!(time));
                    map.insert("sessionLabels".into(), json!(labels));
                }
                row
            })
            .collect();
        output(&AuditPage {
            audit: rows,
            next_cursor: page.next_cursor,
        })
    }
}

/// `audit.list`'s answer.
#[derive(Serialize, JsonSchema)]
#[serde(rename_all = "camelCase")]
struct AuditPage {
    /// The rows, newest first: each call's tool, caller, sessions (and `sessionLabels`),
    /// decision, outcome, duration and `time` (RFC 3339), and `count`: 1, or for a burst of
    /// refusals of one caller, callable and code, how many calls the row stands for; `events`
    /// (absent when none): what the call caused in a workspace, its `shell.started`,
    /// `shell.exited` and `fs.changed` as `/v1/events` carries them.
    audit: Vec<Value>,
    /// Pass as `cursor` for older rows; `None` when this page is the last.
    next_cursor: Option<u64>,
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn times_are_rfc3339_or_ages() {
        let now = 10_000_000;
        assert_eq!(parse_time("since", "15m", now).unwrap(), now - 900_000);
        assert_eq!(parse_time("since", "2h", now).unwrap(), 2_800_000);
        assert_eq!(parse_time("since", "999999999d", now).unwrap(), 0);
        assert_eq!(
            parse_time("since", "2026-11-23T10:00:00Z", now).unwrap(),
            1_795_428_000_000
        );
        for bad in [
            "",
            "5",
            "5y",
            "m",
            "-5m",
            "yesterday",
            "1970-13-01T00:00:00Z",
        ] {
            assert!(parse_time("since", bad, now).is_err(), "{bad}");
        }
    }
}
