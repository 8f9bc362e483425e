//! `surface.sessions.list`.

use async_trait::async_trait;
use protocol::ErrorCode;
use schemars::JsonSchema;
use serde::Deserialize;
use serde_json::json;

use crate::error::ToolError;
use crate::invocation::{Invocation, PlanContext, SessionView};
use crate::registry::{example, output, output_schema, Planned, Tool, ToolOutput, ToolSpec};
use crate::surface::{ChannelLocation, SessionKind};
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
            description: "List the channels, threads and DMs you may use, with their configured tokens, and the chat API's API-only sessions you may see.",
            help: "Only sessions the allowlist allows are listed; `limit` applies after that filter. `token` is the configured alias for the session, usable as sessionId elsewhere. API-only sessions (kind `api`, `api:<token name>`: where chat-API runs work when the request names no session) follow: all of them for the operator, a token's own for a token.",
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
        let mut sessions: Vec<_> = all
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
        // The chat API's API-only sessions: the operator's view has all, a token's its own.
        let api = cx.core.api_sessions().visible_to(&cx.context.caller);
        let room = limit.saturating_sub(sessions.len());
        sessions.extend(api.into_iter().take(room).map(|s| SessionView {
            channel_id: s.id,
            guild_id: None,
            parent_channel_id: None,
            kind: SessionKind::Api,
            title: Some(s.name.clone()),
            token: None,
            reference: s.name,
        }));
        output(&SessionList { sessions })
    }
}

/// `surface.sessions.list`'s answer.
#[derive(serde::Serialize, JsonSchema)]
struct SessionList<'a> {
    /// The sessions the allowlist allows, as the cache knows them.
    sessions: Vec<SessionView<'a>>,
}
