//! `surface.reactions.*`.

use async_trait::async_trait;
use protocol::ErrorCode;
use schemars::JsonSchema;
use serde::Deserialize;
use serde_json::json;

use crate::error::ToolError;
use crate::invocation::{parse_id, Invocation};
use crate::registry::{example, output, Tool, ToolOutput, ToolSpec};

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

/// Checks the input and the session: the channel, message and emoji to act on.
async fn reaction_target(
    cx: &Invocation<'_>,
    input: &ReactionInput,
) -> Result<(entity::Snowflake, entity::Snowflake, String), ToolError> {
    let message_id = parse_id("messageId", &input.message_id)?;
    let emoji = checked_emoji(&input.emoji)?;
    let target = cx.target(input.session_id.as_deref()).await?;
    Ok((target.channel_id, message_id, emoji))
}

pub struct AddReaction;

#[async_trait]
impl Tool for AddReaction {
    type Input = ReactionInput;

    fn spec(&self) -> ToolSpec {
        ToolSpec {
            id: "surface.reactions.add",
            description: "React to a message.",
            help: "Adds the bot's reaction; adding one that is already there succeeds.",
            mutating: true,
            primary: Some("emoji"),
            examples: vec![example(
                "Acknowledge",
                "tools surface.reactions.add --session-id=#ops --message-id=1000000000000000900 ✅",
                json!({"sessionId": "#ops", "messageId": "1000000000000000900", "emoji": "✅"}),
            )],
        }
    }

    async fn run(
        &self,
        cx: &Invocation<'_>,
        input: ReactionInput,
    ) -> Result<ToolOutput, ToolError> {
        let (channel_id, message_id, emoji) = reaction_target(cx, &input).await?;
        cx.surface()
            .add_reaction(channel_id, message_id, emoji)
            .await?;
        output(&json!({ "ok": true }))
    }
}

pub struct RemoveReaction;

#[async_trait]
impl Tool for RemoveReaction {
    type Input = ReactionInput;

    fn spec(&self) -> ToolSpec {
        ToolSpec {
            id: "surface.reactions.remove",
            description: "Remove the bot's own reaction from a message.",
            help: "Only the bot's reaction is removed; other people's stay.",
            mutating: true,
            primary: Some("emoji"),
            examples: vec![example("Take back a reaction", "tools surface.reactions.remove --session-id=#ops --message-id=1000000000000000900 ⏳", json!({"sessionId": "#ops", "messageId": "1000000000000000900", "emoji": "⏳"}))],
        }
    }

    async fn run(
        &self,
        cx: &Invocation<'_>,
        input: ReactionInput,
    ) -> Result<ToolOutput, ToolError> {
        let (channel_id, message_id, emoji) = reaction_target(cx, &input).await?;
        cx.surface()
            .remove_reaction(channel_id, message_id, emoji)
            .await?;
        output(&json!({ "ok": true }))
    }
}

pub struct ListReactions;

#[derive(Debug, Deserialize, JsonSchema)]
#[serde(deny_unknown_fields, rename_all = "camelCase")]
pub struct ListReactionsInput {
    /// Channel id, <#id>, or configured token; defaults to your context's session.
    pub session_id: Option<String>,
    pub message_id: String,
}

#[async_trait]
impl Tool for ListReactions {
    type Input = ListReactionsInput;

    fn spec(&self) -> ToolSpec {
        ToolSpec {
            id: "surface.reactions.list",
            description: "The reactions on a cached message, with whether the bot reacted.",
            help: "Reads the cache; a message that is not cached answers not_found.",
            mutating: false,
            primary: Some("messageId"),
            examples: vec![example(
                "Reactions on a message",
                "tools surface.reactions.list --session-id=#ops 1000000000000000900",
                json!({"sessionId": "#ops", "messageId": "1000000000000000900"}),
            )],
        }
    }

    async fn run(
        &self,
        cx: &Invocation<'_>,
        input: ListReactionsInput,
    ) -> Result<ToolOutput, ToolError> {
        let message_id = parse_id("messageId", &input.message_id)?;
        let target = cx.target(input.session_id.as_deref()).await?;
        let message = cx.cached_message(&target, message_id)?;
        output(&json!({ "reactions": message.reactions }))
    }
}
