//! `surface.channels.*`: create, rename and delete guild channels — the agent's hands on the
//! server's structure, so the allowlist asks more of them than of a post: a channel is created
//! only in a guild or under a category the allowlist lists, and changed or deleted only when
//! its guild or category is listed (a channel listed alone may be used, not changed). None of
//! them is in the default `agent.tool_scope`; `switchboard.example.toml` asks before each.

use async_trait::async_trait;
use protocol::{Effects, ErrorCode};
use schemars::JsonSchema;
use serde::Deserialize;
use serde_json::json;

use super::channel_name;
use crate::error::ToolError;
use crate::invocation::{parse_id, Invocation, PlanContext, SessionView};
use crate::registry::{
    example, output, output_schema, PlaceRequest, Planned, SessionRequest, Tool, ToolOutput,
    ToolSpec,
};
use crate::surface::{ChannelEdit, NewChannel, NewChannelKind, SessionKind};

/// The longest topic Discord takes for a channel of `kind` (forums: 4,096; text: 1,024).
fn max_topic_chars(kind: NewChannelKind) -> usize {
    match kind {
        NewChannelKind::Forum => 4096,
        NewChannelKind::Text | NewChannelKind::Voice => 1024,
    }
}

/// A checked topic, at most `max` characters.
fn channel_topic(topic: &str, max: usize) -> Result<String, ToolError> {
    let chars = topic.chars().count();
    if chars > max {
        return Err(ToolError::usage(
            ErrorCode::InvalidInput,
            format!("topic must be at most {max} characters, got {chars}"),
        )
        .with_details(json!({ "field": "topic" })));
    }
    Ok(topic.to_owned())
}

pub struct CreateChannel;

#[derive(Debug, Deserialize, JsonSchema)]
#[serde(deny_unknown_fields, rename_all = "camelCase")]
pub struct CreateChannelInput {
    /// The guild (server) id to create it in; defaults to the category's guild, else your
    /// context session's guild. The allowlist must list the guild, or the category.
    pub guild: Option<String>,
    /// The channel's name (1 to 100 characters; Discord lowercases text channel names and
    /// writes spaces as `-`).
    pub name: String,
    /// text (default), forum or voice.
    pub kind: Option<NewChannelKind>,
    /// The category to create it under (its id); without it, at the guild's top level.
    pub parent_id: Option<String>,
    /// What the channel is for (text: up to 1,024 characters, forum: 4,096; none for voice).
    pub topic: Option<String>,
}

/// A checked channel creation.
pub struct CreatePlan {
    name: String,
    kind: NewChannelKind,
    topic: Option<String>,
}

#[async_trait]
impl Tool for CreateChannel {
    type Input = CreateChannelInput;
    type Plan = CreatePlan;

    fn spec(&self) -> ToolSpec {
        ToolSpec {
            id: "surface.channels.create",
            title: "Create a channel",
            effects: Effects::ADD,
            output_schema: Some(output_schema::<SessionView<'static>>()),
            description: "Create a text, forum or voice channel in a guild.",
            help: "Creates a guild channel, in a guild the allowlist lists (discord.allowed_guild_ids) or under a category it lists (discord.allowed_category_ids): listing channels allows using them, not making new ones. Answers the new session, with a reference usable as sessionId at once. Not in the default agent.tool_scope.",
            mutating: true,
            primary: Some("name"),
            examples: vec![
                example("A text channel under a category", "tools surface.channels.create --parent-id=1000000000000000700 --topic=\"what ships when\" launch-plan", json!({"parentId": "1000000000000000700", "topic": "what ships when", "name": "launch-plan"})),
                example("A forum in the context session's guild", "tools surface.channels.create --kind=forum \"questions\"", json!({"kind": "forum", "name": "questions"})),
            ],
        }
    }

    fn plan(
        &self,
        _: &PlanContext<'_>,
        input: CreateChannelInput,
    ) -> Result<Planned<CreatePlan>, ToolError> {
        let name = channel_name(&input.name)?;
        let kind = input.kind.unwrap_or(NewChannelKind::Text);
        let topic = match (input.topic.as_deref().map(str::trim), kind) {
            (None | Some(""), _) => None,
            (Some(_), NewChannelKind::Voice) => return Err(ToolError::usage(
                ErrorCode::InvalidInput,
                "a voice channel has no topic: leave topic out, or make a text or forum channel",
            )
            .with_details(json!({ "field": "topic" }))),
            (Some(topic), kind) => Some(channel_topic(topic, max_topic_chars(kind))?),
        };
        let guild = input
            .guild
            .as_deref()
            .map(|id| parse_id("guild", id))
            .transpose()?;
        let category = input
            .parent_id
            .as_deref()
            .map(|id| parse_id("parentId", id))
            .transpose()?;
        Ok(Planned::creating(
            CreatePlan { name, kind, topic },
            PlaceRequest { guild, category },
        ))
    }

    async fn run(&self, cx: &Invocation<'_>, plan: CreatePlan) -> Result<ToolOutput, ToolError> {
        let made = cx
            .surface()
            .create_channel(NewChannel {
                place: cx.place()?,
                name: plan.name,
                kind: plan.kind,
                topic: plan.topic,
            })
            .await?;
        output(&cx.session_info_json(&made))
    }
}

pub struct EditChannel;

#[derive(Debug, Deserialize, JsonSchema)]
#[serde(deny_unknown_fields, rename_all = "camelCase")]
pub struct EditChannelInput {
    /// The channel (id, <#id>, or reference); defaults to your context's session. Its guild or
    /// category must be allowlisted.
    pub session_id: Option<String>,
    /// A new name (1 to 100 characters).
    pub name: Option<String>,
    /// A new topic; an empty one clears it.
    pub topic: Option<String>,
}

#[async_trait]
impl Tool for EditChannel {
    type Input = EditChannelInput;
    type Plan = ChannelEdit;

    fn spec(&self) -> ToolSpec {
        ToolSpec {
            id: "surface.channels.edit",
            title: "Rename a channel or change its topic",
            effects: Effects::OVERWRITE,
            output_schema: Some(output_schema::<SessionView<'static>>()),
            description: "Rename a guild channel, or change its topic.",
            help: "Changes a guild channel (not a thread or DM) whose guild or category the allowlist lists; a channel listed alone in discord.allowed_channel_ids may be used, not changed. Give name, topic or both; an empty topic clears it. Answers the session as it is now (a new name gives a new reference). Not in the default agent.tool_scope.",
            mutating: true,
            primary: Some("name"),
            examples: vec![
                example("Rename #random", "tools surface.channels.edit --session-id=#random watercooler", json!({"sessionId": "#random", "name": "watercooler"})),
                example("Set the topic of #ops", "tools surface.channels.edit --session-id=#ops --topic=\"deploys and incidents\"", json!({"sessionId": "#ops", "topic": "deploys and incidents"})),
            ],
        }
    }

    fn plan(
        &self,
        _: &PlanContext<'_>,
        input: EditChannelInput,
    ) -> Result<Planned<ChannelEdit>, ToolError> {
        if input.name.is_none() && input.topic.is_none() {
            return Err(ToolError::usage(
                ErrorCode::InvalidInput,
                "nothing to change: give name, topic or both",
            ));
        }
        let name = input.name.as_deref().map(channel_name).transpose()?;
        // The channel's kind is known only once it is resolved: the forum limit here, Discord
        // holds text channels to 1,024.
        let topic = input
            .topic
            .as_deref()
            .map(|topic| channel_topic(topic.trim(), max_topic_chars(NewChannelKind::Forum)))
            .transpose()?;
        Ok(Planned::in_session(
            ChannelEdit { name, topic },
            SessionRequest::session_id(input.session_id.as_deref(), 1).changing_the_channel(),
        ))
    }

    async fn run(&self, cx: &Invocation<'_>, edit: ChannelEdit) -> Result<ToolOutput, ToolError> {
        let target = cx.target()?;
        if let (Some(topic), SessionKind::Channel) = (&edit.topic, target.location.kind) {
            channel_topic(topic, max_topic_chars(NewChannelKind::Text))?;
        }
        let info = cx.surface().edit_channel(target.channel, edit).await?;
        output(&cx.session_info_json(&info))
    }
}

pub struct DeleteChannel;

#[derive(Debug, Deserialize, JsonSchema)]
#[serde(deny_unknown_fields, rename_all = "camelCase")]
pub struct DeleteChannelInput {
    /// The channel (id, <#id>, or reference); required: a delete never defaults to your
    /// context's session. Its guild or category must be allowlisted.
    pub session_id: String,
}

/// `surface.channels.delete`'s answer.
#[derive(serde::Serialize, JsonSchema)]
#[serde(rename_all = "camelCase")]
struct Deleted {
    /// The channel that was deleted, with its threads and messages.
    #[schemars(with = "String")]
    deleted_channel_id: entity::Snowflake,
}

#[async_trait]
impl Tool for DeleteChannel {
    type Input = DeleteChannelInput;
    type Plan = ();

    fn spec(&self) -> ToolSpec {
        ToolSpec {
            id: "surface.channels.delete",
            title: "Delete a channel",
            effects: Effects::OVERWRITE,
            output_schema: Some(output_schema::<Deleted>()),
            description: "Delete a guild channel, with its threads and messages.",
            help: "Deletes a guild channel (not a thread or DM) whose guild or category the allowlist lists; a channel listed alone in discord.allowed_channel_ids may be used, not deleted. Its threads and messages go with it, for good. sessionId is required. Not in the default agent.tool_scope.",
            mutating: true,
            primary: Some("sessionId"),
            examples: vec![example(
                "Delete #old-launch",
                "tools surface.channels.delete #old-launch",
                json!({"sessionId": "#old-launch"}),
            )],
        }
    }

    fn plan(
        &self,
        _: &PlanContext<'_>,
        input: DeleteChannelInput,
    ) -> Result<Planned<()>, ToolError> {
        if input.session_id.trim().is_empty() {
            return Err(ToolError::usage(
                ErrorCode::InvalidInput,
                "sessionId: name the channel to delete",
            )
            .with_details(json!({ "field": "sessionId" })));
        }
        Ok(Planned::in_session(
            (),
            SessionRequest::session_id(Some(&input.session_id), 1).changing_the_channel(),
        ))
    }

    async fn run(&self, cx: &Invocation<'_>, (): ()) -> Result<ToolOutput, ToolError> {
        let target = cx.target()?;
        cx.surface().delete_channel(target.channel).await?;
        output(&Deleted {
            deleted_channel_id: target.channel_id(),
        })
    }
}
