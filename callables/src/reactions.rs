//! `surface.reactions.*`.

use async_trait::async_trait;
use entity::Snowflake;
use protocol::ErrorCode;
use schemars::JsonSchema;
use serde::Deserialize;
use serde_json::json;

use crate::error::ToolError;
use crate::invocation::{parse_id, Invocation, PlanContext};
use crate::messages::Done;
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
    /// A Unicode emoji (✅), a shortcode (:tada:), or a custom emoji (<:name:id> or name:id).
    pub emoji: String,
}

/// Longest emoji text looked at (a custom emoji is at most 32 + 1 + 20 characters plus `<:>`).
const MAX_EMOJI_BYTES: usize = 128;

fn invalid_emoji(why: String) -> ToolError {
    ToolError::usage(
        ErrorCode::InvalidEmoji,
        format!("{why}; give one Unicode emoji (✅), a shortcode (:tada:), or a custom emoji as <:name:id> or name:id"),
    )
}

/// A custom emoji as Discord's reaction routes take it: `name:id` (a name of 2 to 32 letters,
/// digits or underscores; an id).
fn custom_emoji(name: &str, id: &str, given: &str) -> Result<String, ToolError> {
    let name_ok = (2..=32).contains(&name.len())
        && name.bytes().all(|b| b.is_ascii_alphanumeric() || b == b'_');
    if !name_ok || protocol::parse_digits(id.as_bytes()).is_none() {
        return Err(invalid_emoji(format!(
            "{given:?} is not a custom emoji (a name of 2 to 32 letters, digits or underscores, then its id)"
        )));
    }
    Ok(format!("{name}:{id}"))
}

/// The emoji as Discord's reaction routes take it: a Unicode emoji as it is, a shortcode
/// (`:tada:`, GitHub's names, which Discord's mostly share) as its Unicode emoji, a custom one
/// (`<:name:id>`, `<a:name:id>`, `name:id`) as `name:id`.
pub(crate) fn discord_emoji(given: &str) -> Result<String, ToolError> {
    let text = given.trim();
    if text.is_empty() {
        return Err(invalid_emoji("emoji is empty".to_owned()));
    }
    if text.len() > MAX_EMOJI_BYTES {
        return Err(invalid_emoji(format!(
            "emoji is {} bytes, longer than any emoji",
            text.len()
        )));
    }
    if let Some(inner) = text.strip_prefix('<').and_then(|t| t.strip_suffix('>')) {
        let inner = inner
            .strip_prefix("a:")
            .or_else(|| inner.strip_prefix(':'))
            .unwrap_or(inner);
        let (name, id) = inner.split_once(':').unwrap_or((inner, ""));
        return custom_emoji(name, id, given);
    }
    if let Some(code) = text
        .strip_prefix(':')
        .and_then(|t| t.strip_suffix(':'))
        .filter(|code| !code.is_empty() && !code.contains(':'))
    {
        let found = emojis::get_by_shortcode(code)
            .or_else(|| emojis::get_by_shortcode(&code.to_ascii_lowercase().replace('-', "_")));
        return match found {
            Some(emoji) => Ok(emoji.as_str().to_owned()),
            None => Err(invalid_emoji(format!(
                "no emoji has the shortcode :{code}:"
            ))),
        };
    }
    if let Some((name, id)) = text.split_once(':') {
        return custom_emoji(name, id, given);
    }
    match emojis::get(text) {
        Some(_) => Ok(text.to_owned()),
        None => Err(invalid_emoji(format!("{text:?} is not one emoji"))),
    }
}

/// A checked reaction: the message and the emoji.
pub struct ReactionPlan {
    message_id: Snowflake,
    emoji: String,
}

/// Checks the input: the message and emoji to act on, in the input's session.
fn reaction_plan(input: ReactionInput) -> Result<Planned<ReactionPlan>, ToolError> {
    let message_id = parse_id("messageId", &input.message_id)?;
    let emoji = discord_emoji(&input.emoji)?;
    Ok(Planned::in_session(
        ReactionPlan { message_id, emoji },
        SessionRequest::session_id(input.session_id.as_deref(), 1),
    ))
}

/// `surface.reactions.add` and `surface.reactions.remove`: the bot's own reaction on a
/// message, put on or taken back (one plan and one run, two callables).
#[derive(Debug, Clone, Copy)]
pub enum ChangeReaction {
    Add,
    Remove,
}

#[async_trait]
impl Tool for ChangeReaction {
    type Input = ReactionInput;
    type Plan = ReactionPlan;

    fn spec(&self) -> ToolSpec {
        match self {
            ChangeReaction::Add => {
                ToolSpec {
                    id: "surface.reactions.add",
                    description: "React to a message.",
                    help: "Adds the bot's reaction; adding one that is already there succeeds. The emoji is a Unicode emoji (✅), a shortcode (:tada:, :white_check_mark:), or one of the server's custom emoji (<:name:id> as Discord writes it, or name:id).",
                    mutating: true,
                    primary: Some("emoji"),
                    title: "Add a reaction",
                    effects: Effects::MARK,
                    output_schema: Some(output_schema::<Done>()),
                    examples: vec![
                        example(
                            "Acknowledge",
                            "tools surface.reactions.add --session-id=#ops --message-id=1000000000000000900 ✅",
                            json!({"sessionId": "#ops", "messageId": "1000000000000000900", "emoji": "✅"}),
                        ),
                        example(
                            "Celebrate, by shortcode",
                            "tools surface.reactions.add --session-id=#ops --message-id=1000000000000000900 :tada:",
                            json!({"sessionId": "#ops", "messageId": "1000000000000000900", "emoji": ":tada:"}),
                        ),
                    ],
                }
            }
            ChangeReaction::Remove => {
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
        let add = matches!(self, ChangeReaction::Add);
        cx.surface()
            .set_reaction(target.channel, plan.message_id, plan.emoji, add)
            .await?;
        output(&Done::OK)
    }
}

/// `surface.reactions.list` (run by [`crate::messages::OnMessage::Reactions`]).
pub(crate) fn list_spec() -> ToolSpec {
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

/// `surface.reactions.list`'s answer for a cached message.
pub(crate) fn list_answer(message: &crate::surface::MessageInfo) -> Result<ToolOutput, ToolError> {
    output(&ReactionList {
        reactions: &message.reactions,
    })
}

/// `surface.reactions.list`'s answer.
#[derive(serde::Serialize, JsonSchema)]
struct ReactionList<'a> {
    /// One entry per emoji.
    reactions: &'a [crate::surface::Reaction],
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn shortcodes_custom_and_unicode_emoji_become_what_discord_takes() {
        assert_eq!(discord_emoji(":tada:").unwrap(), "🎉");
        assert_eq!(discord_emoji(" :white_check_mark: ").unwrap(), "✅");
        assert_eq!(discord_emoji(":+1:").unwrap(), "👍");
        assert_eq!(discord_emoji(":Thumbsup:").unwrap(), "👍");
        assert_eq!(discord_emoji("✅").unwrap(), "✅");
        assert_eq!(discord_emoji("👍🏽").unwrap(), "👍🏽");
        assert_eq!(
            discord_emoji("<:shipit:1000000000000000701>").unwrap(),
            "shipit:1000000000000000701"
        );
        assert_eq!(discord_emoji("<a:dance_2:42>").unwrap(), "dance_2:42");
        assert_eq!(
            discord_emoji("shipit:1000000000000000701").unwrap(),
            "shipit:1000000000000000701"
        );
        for bad in [
            "",
            "   ",
            ":nosuchemoji:",
            "::",
            "thumbsup",
            "é",
            "👍👍",
            "<:x:1>",
            "<:shipit:abc>",
            "<:ship it:1>",
            "shipit:",
            "a:b:c",
            &"x".repeat(500),
        ] {
            let error = discord_emoji(bad).expect_err(bad);
            assert_eq!(error.code, ErrorCode::InvalidEmoji, "{bad}");
            assert!(
                error.message.contains("shortcode (:tada:)"),
                "{}",
                error.message
            );
        }
    }
}
