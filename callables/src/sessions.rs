//! `surface.sessions.list`.

use async_trait::async_trait;
use protocol::ErrorCode;
use schemars::JsonSchema;
use serde::Deserialize;
use serde_json::json;

use crate::error::ToolError;
use crate::invocation::{Invocation, PlanContext, SessionView};
use crate::registry::{example, output, output_schema, Planned, Tool, ToolOutput, ToolSpec};
use crate::surface::ChannelLocation;
use protocol::Effects;

pub struct ListSessions;

#[derive(Debug, Deserialize, JsonSchema)]
#[serde(deny_unknown_fields, rename_all = "camelCase")]
pub struct ListSessionsInput {
    /// At most this many sessions (1 to 1000, default 100).
    pub limit: Option<u32>,
}

#[async_trait]
impl Tool for ListSessions {
    type Input = ListSessionsInput;
    type Plan = usize;

    fn spec(&self) -> ToolSpec {
        ToolSpec {
            id: "surface.sessions.list",
            description: "List the channels, threads and DMs you may use, with their configured tokens.",
            help: "Only sessions the allowlist allows are listed; `limit` applies after that filter. `token` is the configured alias for the session, usable as sessionId elsewhere.",
            mutating: false,
            primary: None,
            title: "List sessions",
            effects: Effects::READ,
            output_schema: Some(output_schema::<SessionList>()),
            examples: vec![example(
                "List up to 20 sessions",
                "tools surface.sessions.list --limit=20 --output=text",
                json!({"limit": 20}),
            )],
        }
    }

    fn plan(
        &self,
        _: &PlanContext<'_>,
        input: ListSessionsInput,
    ) -> Result<Planned<usize>, ToolError> {
        let limit = input.limit.unwrap_or(100);
        if !(1..=1000).contains(&limit) {
            return Err(ToolError::usage(
                ErrorCode::InvalidInput,
                format!("limit must be between 1 and 1000, got {limit}"),
            ));
        }
        Ok(Planned::nowhere(limit as usize))
    }

    async fn run(&self, cx: &Invocation<'_>, limit: usize) -> Result<ToolOutput, ToolError> {
        let allowlist = &cx.settings().allow;
        let all = cx.surface().sessions();
        let sessions: Vec<_> = all
            .iter()
            .filter(|s| {
                allowlist.allows_cached(s.id, |id| {
                    cx.surface()
                        .session(id)
                        .map(|info| ChannelLocation::from(&info))
                })
            })
            .take(limit)
            .map(|s| cx.session_info_json(s))
            .collect();
        output(&SessionList { sessions })
    }
}

/// `surface.sessions.list`'s answer.
#[derive(serde::Serialize, JsonSchema)]
struct SessionList<'a> {
    /// The sessions the allowlist allows, as the cache knows them.
    sessions: Vec<SessionView<'a>>,
}
