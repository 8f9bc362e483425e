//! `surface.typing`: show that the bot is typing in a session. The agent bridge shows it for
//! its runs (as the run, audited once per run); an agent may too.

use async_trait::async_trait;
use schemars::JsonSchema;
use serde::Deserialize;
use serde_json::json;

use crate::error::ToolError;
use crate::invocation::{Invocation, PlanContext};
use crate::messages::Done;
use crate::registry::{
    example, output, output_schema, Planned, SessionRequest, Tool, ToolOutput, ToolSpec,
};
use protocol::Effects;

pub struct ShowTyping;

#[derive(Debug, Deserialize, JsonSchema)]
#[serde(deny_unknown_fields, rename_all = "camelCase")]
pub struct TypingInput {
    /// Channel id, <#id>, or configured token; defaults to your context's session.
    pub session_id: Option<String>,
}

#[async_trait]
impl Tool for ShowTyping {
    type Input = TypingInput;
    type Plan = ();

    fn spec(&self) -> ToolSpec {
        ToolSpec {
            id: "surface.typing",
            title: "Show typing",
            effects: Effects::MARK,
            output_schema: Some(output_schema::<Done>()),
            description: "Show that the bot is typing in a session.",
            help: "Discord shows the indicator for about 10 seconds, or until the bot posts; call it again to keep it up.",
            mutating: true,
            primary: None,
            examples: vec![example(
                "Show typing in #ops",
                "tools surface.typing --session-id=#ops",
                json!({"sessionId": "#ops"}),
            )],
        }
    }

    fn plan(&self, _: &PlanContext<'_>, input: TypingInput) -> Result<Planned<()>, ToolError> {
        Ok(Planned::in_session(
            (),
            SessionRequest::session_id(input.session_id.as_deref(), 0),
        ))
    }

    async fn run(&self, cx: &Invocation<'_>, (): ()) -> Result<ToolOutput, ToolError> {
        cx.surface().typing(cx.target()?.channel).await?;
        output(&Done::OK)
    }
}
