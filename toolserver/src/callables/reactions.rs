//! `surface.reactions.*`.

use async_trait::async_trait;
use entity::Snowflake;
use protocol::ErrorCode;
use schemars::JsonSchema;
use serde::Deserialize;
use serde_json::json;

use crate::callables::messages::{Done, MessageRefInput};
use crate::error::ToolError;
use crate::invocation::{parse_id, Invocation, PlanContext};
use crate::registry::{
    example, output, output_schema, Planned, SessionRequest, Tool, ToolOutput, ToolSpec,
};
use protocol::Effects;

/// `sessionId`, `messageId` and `emoji`, shared by add and remove.
#[derive(Debug, Deserialize, JsonSchema)]
#[serde(deny_unknown_fields, rename_all = "camelCase")]
pub struct ReactionInput {
    /// Channel id, <#id>, or configured token; defaults to your context's session.
    pub session_id: Option<String>,
    pub message_id: String,
    /// A unicode emoji (✅) or a custom one as name:id.
    pub emoji: String,
}

fn checked_emoji(emoji: &str) -> Result<String, ToolError> {
    let emoji = emoji.trim();
    if emoji.is_empty() || emoji.chars().count() > 100 || emoji.contains(char::is_whitespace) {
        return Err(ToolError::usage(
            ErrorCode::InvalidEmoji,
            "emoji must be one unicode emoji (✅) or a custom emoji as name:id",
        ));
    }
    Ok(emoji.to_owned())
}

/// A checked reaction: the message and the emoji.
pub struct ReactionPlan {
    message_id: Snowflake,
    emoji: String,
}

/// Checks the input: the message and emoji to act on, in the input's session.
fn reaction_plan(input: ReactionInput) -> Result<Planned<ReactionPlan>, ToolError> {
    let message_id = parse_id("messageId", &input.message_id)?;
    let emoji = checked_emoji(&input.emoji)?;
    Ok(Planned::in_session(
        ReactionPlan { message_id, emoji },
        SessionRequest::session_id(input.session_id.as_deref(), 1),
    ))
}

pub struct AddReaction;

#[async_trait]
impl Tool for AddReaction {
    type Input = ReactionInput;
    type Plan = ReactionPlan;

    fn spec(&self) -> ToolSpec {
        ToolSpec {
            id: "surface.reactions.add",
            description: "React to a message.",
            help: "Adds the bot's reaction; adding one that is already there succeeds.",
            mutating: true,
            primary: Some("emoji"),
            title: "Add a reaction",
            effects: Effects {
                destructive: false,
                idempotent: true,
                open_world: true,
            },
            output_schema: Some(output_schema::<Done>()),
            examples: vec![example(
                "Acknowledge",
                "tools surface.reactions.add --session-id=#ops --message-id=1000000000000000900 ✅",
                json!({"sessionId": "#ops", "messageId": "1000000000000000900", "emoji": "✅"}),
            )],
        }
    }

    fn plan(
        &self,
        _: &PlanContext<'_>,
        input: ReactionInput,
    ) -> Result<Planned<ReactionPlan>, ToolError> {
        reaction_plan(input)
    }

    async fn run(&self, cx: &Invocation<'_>, plan: ReactionPlan) -> Result<ToolOutput, ToolError> {
        let target = cx.target()?;
        cx.surface()
            .add_reaction(target.channel, plan.message_id, plan.emoji)
            .await?;
        output(&Done::OK)
    }
}

pub struct RemoveReaction;

#[async_trait]
impl Tool for RemoveReaction {
    type Input = ReactionInput;
    type Plan = ReactionPlan;

    fn spec(&self) -> ToolSpec {
        ToolSpec {
            id: "surface.reactions.remove",
            description: "Remove the bot's own reaction from a message.",
            help: "Only the bot's reaction is removed; other people's stay.",
            mutating: true,
            primary: Some("emoji"),
            title: "Remove a reaction",
            effects: Effects::OVERWRITE,
            output_schema: Some(output_schema::<Done>()),
            examples: vec![example("Take back a reaction", "tools surface.reactions.remove --session-id=#ops --message-id=1000000000000000900 ⏳", json!({"sessionId": "#ops", "messageId": "1000000000000000900", "emoji": "⏳"}))],
        }
    }

    fn plan(
        &self,
        _: &PlanContext<'_>,
        input: ReactionInput,
    ) -> Result<Planned<ReactionPlan>, ToolError> {
        reaction_plan(input)
    }

    async fn run(&self, cx: &Invocation<'_>, plan: ReactionPlan) -> Result<ToolOutput, ToolError> {
        let target = cx.target()?;
        cx.surface()
            .remove_reaction(target.channel, plan.message_id, plan.emoji)
            .await?;
        output(&Done::OK)
    }
}

pub struct ListReactions;

#[async_trait]
impl Tool for ListReactions {
    type Input = MessageRefInput;
    type Plan = Snowflake;

    fn spec(&self) -> ToolSpec {
        ToolSpec {
            id: "surface.reactions.list",
            description: "The reactions on a cached message, with whether the bot reacted.",
            help: "Reads the cache; a message that is not cached answers not_found.",
            mutating: false,
            primary: Some("messageId"),
            title: "List reactions",
            effects: Effects::READ,
            output_schema: Some(output_schema::<ReactionList>()),
            examples: vec![example(
                "Reactions on a message",
                "tools surface.reactions.list --session-id=#ops 1000000000000000900",
                json!({"sessionId": "#ops", "messageId": "1000000000000000900"}),
            )],
        }
    }

    fn plan(
        &self,
        _: &PlanContext<'_>,
        input: MessageRefInput,
    ) -> Result<Planned<Snowflake>, ToolError> {
        input.plan(0)
    }

    async fn run(
        &self,
        cx: &Invocation<'_>,
        message_id: Snowflake,
    ) -> Result<ToolOutput, ToolError> {
        let target = cx.target()?;
        let message = cx.cached_message(&target, message_id)?;
        output(&ReactionList {
            reactions: &message.reactions,
        })
    }
}

/// `surface.reactions.list`'s answer.
#[derive(serde::Serialize, JsonSchema)]
struct ReactionList<'a> {
    /// One entry per emoji.
    reactions: &'a [crate::surface::ReactionInfo],
}
