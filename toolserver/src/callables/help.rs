//! `surface.help`: what an agent needs to know to use the other callables.

use async_trait::async_trait;
use entity::AliasKind;
use schemars::JsonSchema;
use serde::Deserialize;
use serde_json::{json, Value};

use crate::auth::Caller;
use crate::error::ToolError;
use crate::invocation::{Invocation, PlanContext};
use crate::registry::{example, output, Planned, Tool, ToolOutput, ToolSpec};

pub struct Help;

/// No input.
#[derive(Debug, Deserialize, JsonSchema)]
#[serde(deny_unknown_fields, rename_all = "camelCase")]
pub struct HelpInput {}

#[async_trait]
impl Tool for Help {
    type Input = HelpInput;
    type Plan = ();

    fn spec(&self) -> ToolSpec {
        ToolSpec {
            id: "surface.help",
            description: "Your context (session, token), how to name sessions, the configured session tokens, and the callables you may use.",
            help: "Call this first. `sessionId` in every other callable defaults to the session in your context; it accepts a channel id, a <#id> mention, or a configured token with or without '#'.",
            mutating: false,
            primary: None,
            examples: vec![example("Show your context", "tools surface.help --output=text", json!({}))],
        }
    }

    fn plan(&self, _: &PlanContext<'_>, _: HelpInput) -> Result<Planned<()>, ToolError> {
        Ok(Planned::nowhere(()))
    }

    async fn run(&self, cx: &Invocation<'_>, (): ()) -> Result<ToolOutput, ToolError> {
        let core = cx.core;
        let (caller, scope) = match &cx.context.caller {
            Caller::Operator => ("operator", None),
            Caller::Unauthenticated => ("unauthenticated", None),
            Caller::Capability(c) => ("capability", Some(c.grant.scope.clone())),
            Caller::Token(t) => ("token", Some(t.scope.clone())),
        };
        let session = cx.context.session_ref.as_deref().map(|reference| {
            match cx.mapper().resolve_session(reference) {
                Ok(id) => json!({
                    "channelId": id.to_string(),
                    "token": cx.settings().aliases().alias_for(AliasKind::Session, id),
                    "title": cx.surface().session(id).map(|s| s.title),
                }),
                Err(error) => json!({ "reference": reference, "error": error.to_string() }),
            }
        });
        let config = cx.settings().config();
        let sessions: Vec<Value> = config
            .aliases
            .iter(AliasKind::Session)
            .map(|(token, id)| {
                json!({
                    "token": token,
                    "channelId": id.to_string(),
                    "comment": config.alias_comments.get(&(AliasKind::Session, token.to_owned())),
                })
            })
            .collect();
        let callables: Vec<Value> = core
            .tools_for(&cx.context.caller)
            .into_iter()
            .map(|t| json!({ "id": t.id, "description": t.description, "mutating": t.mutating }))
            .collect();
        output(&json!({
            "context": {
                "caller": caller,
                "scope": scope,
                "session": session,
                "requestId": cx.context.request_id,
                "client": cx.context.client,
                "cwd": cx.context.cwd,
                "messageId": cx.context.trigger_message_id.map(|id| id.to_string()),
            },
            "sessionFormats": [
                "a channel or thread id: 334455667788990011",
                "a mention: <#334455667788990011>",
                "a configured token: ops or #ops (any case)",
            ],
            "sessions": sessions,
            "mentions": "Write @name for people and roles and #token for channels; they become real mentions. @everyone and @here never ping.",
            "callables": callables,
        }))
    }
}
