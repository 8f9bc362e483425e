//! One call in progress: who is calling, in which context, and the helpers every callable uses
//! to resolve sessions, apply the allowlist and shape answers.

use entity::{Mapper, Snowflake};
use protocol::ErrorCode;
use std::borrow::Cow;
use std::sync::Arc;

use serde::Serialize;
use serde_json::json;
use serde_json::value::RawValue;

use crate::auth::Caller;
use crate::error::ToolError;
use crate::server::Core;
use crate::surface::{
    AttachmentInfo, ChannelLocation, MentionPolicy, MessageInfo, SessionInfo, SessionKind, Surface,
};

/// The context a call carries: from headers for the operator, from the token for a capability.
#[derive(Debug, Clone)]
pub struct CallContext {
    pub caller: Caller,
    pub request_id: Option<String>,
    /// The default session, as any reference the entity mapper resolves.
    pub session_ref: Option<String>,
    pub client: Option<String>,
    pub cwd: Option<String>,
    pub tool_call_id: Option<String>,
    /// The message that started the run, when there is one.
    pub trigger_message_id: Option<Snowflake>,
}

impl CallContext {
    pub fn operator() -> Self {
        CallContext {
            caller: Caller::Operator,
            request_id: None,
            session_ref: None,
            client: None,
            cwd: None,
            tool_call_id: None,
            trigger_message_id: None,
        }
    }
}

/// A session a call may act in: resolved, allowlisted.
#[derive(Debug, Clone, Copy)]
pub struct Target {
    pub channel_id: Snowflake,
    pub location: ChannelLocation,
}

/// What a callable's handler gets besides its input.
pub struct Invocation<'a> {
    pub core: &'a Core,
    pub context: &'a CallContext,
    pub tool_id: &'a str,
    pub mutating: bool,
}

/// An id serialized as a JSON string (ids exceed what JSON numbers carry exactly), without
/// allocating.
#[derive(Debug, Clone, Copy)]
pub struct IdStr(pub Snowflake);

impl Serialize for IdStr {
    fn serialize<S: serde::Serializer>(&self, serializer: S) -> Result<S::Ok, S::Error> {
        serializer.collect_str(&self.0)
    }
}

/// A session as callables answer it.
#[derive(Debug, Serialize)]
#[serde(rename_all = "camelCase")]
pub struct SessionView<'a> {
    pub channel_id: IdStr,
    pub guild_id: Option<IdStr>,
    pub parent_channel_id: Option<IdStr>,
    pub kind: SessionKind,
    pub title: Option<String>,
    pub token: Option<&'a str>,
}

#[derive(Debug, Serialize)]
pub struct ReactionCount<'a> {
    pub emoji: &'a str,
    pub count: u32,
}

/// A message as callables answer it.
#[derive(Debug, Serialize)]
#[serde(rename_all = "camelCase")]
pub struct MessageView<'a> {
    pub message_id: IdStr,
    pub author_id: IdStr,
    pub author_name: &'a str,
    pub text: Cow<'a, str>,
    pub ts: &'a str,
    pub edited_ts: Option<&'a str>,
    pub reply_to_message_id: Option<IdStr>,
    pub attachments: &'a [AttachmentInfo],
    pub reactions: Vec<ReactionCount<'a>>,
}

/// Parses an id field (`messageId`), naming the field when it is not one.
pub fn parse_id(field: &str, value: &str) -> Result<Snowflake, ToolError> {
    let trimmed = value.trim();
    let digits = trimmed
        .strip_prefix('<')
        .and_then(|s| s.strip_suffix('>'))
        .map(|s| s.trim_start_matches(['#', '@', '!', '&']))
        .unwrap_or(trimmed);
    digits.parse::<Snowflake>().map_err(|error| {
        ToolError::usage(ErrorCode::InvalidInput, format!("{field}: {error}"))
            .with_details(json!({ "field": field }))
    })
}

impl Invocation<'_> {
    pub fn surface(&self) -> &dyn Surface {
        self.core.surface.as_ref()
    }

    pub fn mapper(&self) -> Mapper<'_> {
        Mapper::new(&self.core.aliases, self.core.surface.as_ref())
    }

    /// Resolves the session to act in (the input's `sessionId`, else the context's), applies the
    /// allowlist, and for mutating calls the per-channel rate limit.
    pub async fn target(&self, explicit: Option<&str>) -> Result<Target, ToolError> {
        self.target_spending(explicit, u32::from(self.mutating))
            .await
    }

    /// [`Invocation::target`] that spends `messages` of the channel's budget (a send split in
    /// k parts spends k; reads spend nothing).
    pub async fn target_spending(
        &self,
        explicit: Option<&str>,
        messages: u32,
    ) -> Result<Target, ToolError> {
        let reference = explicit
            .filter(|r| !r.trim().is_empty())
            .or(self.context.session_ref.as_deref())
            .ok_or_else(|| {
                ToolError::usage(
                    ErrorCode::NoSession,
                    "No session given and none in this call's context. Pass --session-id=ID (a channel id, <#id>, or a configured token such as #ops), or set SWITCHBOARD_SESSION_ID.",
                )
            })?;
        let channel_id = self.mapper().resolve_session(reference).map_err(|error| {
            ToolError::not_found(ErrorCode::UnknownSession, error.to_string())
                .with_details(json!({ "reference": reference }))
        })?;
        let location = self
            .core
            .allowlist
            .check(self.surface(), channel_id)
            .await?;
        if messages > 0 {
            self.core
                .limits
                .check_channel_n(channel_id.get(), messages)?;
        }
        Ok(Target {
            channel_id,
            location,
        })
    }

    /// A message from the cache of the target session, or `not_found`.
    pub fn cached_message(
        &self,
        target: &Target,
        message_id: Snowflake,
    ) -> Result<Arc<MessageInfo>, ToolError> {
        self.surface()
            .message(target.channel_id, message_id)
            .ok_or_else(|| {
                ToolError::not_found(
                    ErrorCode::UnknownMessage,
                    format!(
                        "Message {message_id} is not in the cache of session {}; list recent messages with surface.messages.list",
                        target.channel_id
                    ),
                )
            })
    }

    /// `{"channelId","guildId","parentChannelId","kind","title","token"}`.
    pub fn session_json(&self, target: &Target) -> SessionView<'_> {
        let title = self.surface().session(target.channel_id).map(|i| i.title);
        self.session_view(target.channel_id, &target.location, title)
    }

    pub fn session_info_json(&self, info: &SessionInfo) -> SessionView<'_> {
        self.session_view(
            info.channel_id,
            &ChannelLocation::from(info),
            Some(info.title.clone()),
        )
    }

    fn session_view(
        &self,
        channel_id: Snowflake,
        location: &ChannelLocation,
        title: Option<String>,
    ) -> SessionView<'_> {
        SessionView {
            channel_id: IdStr(channel_id),
            guild_id: location.guild_id.map(IdStr),
            parent_channel_id: location.parent_channel_id.map(IdStr),
            kind: location.kind,
            title,
            token: self
                .core
                .aliases
                .alias_for(entity::AliasKind::Session, channel_id),
        }
    }

    /// A cached message as readers see it, rendered once per revision.
    pub fn message_json(&self, message: &MessageInfo) -> Result<Arc<RawValue>, ToolError> {
        self.core.rendered.get_or_render(
            message.message_id,
            message.revision,
            self.surface().names_revision(),
            || crate::registry::output(&self.message_view(message)),
        )
    }

    /// A cached message as readers see it: `text` is the inbound-canonical text.
    pub fn message_view<'m>(&'m self, message: &'m MessageInfo) -> MessageView<'m> {
        MessageView {
            message_id: IdStr(message.message_id),
            author_id: IdStr(message.author_id),
            author_name: &message.author_name,
            text: self.mapper().inbound(&message.content),
            ts: &message.timestamp,
            edited_ts: message.edited_timestamp.as_deref(),
            reply_to_message_id: message.reply_to.map(IdStr),
            attachments: &message.attachments,
            reactions: message
                .reactions
                .iter()
                .map(|r| ReactionCount {
                    emoji: &r.emoji,
                    count: r.count,
                })
                .collect(),
        }
    }

    /// Who a post may ping: users (and roles when the operator opted in), never `@everyone`
    /// or `@here`; nobody when silent.
    pub fn mention_policy(&self, replying: bool, silent: bool) -> MentionPolicy {
        if silent {
            return MentionPolicy::default();
        }
        MentionPolicy {
            users: true,
            roles: self.core.allow_role_mentions,
            replied_user: replying,
        }
    }
}
