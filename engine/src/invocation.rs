//! One call in progress: who is calling, in which context, and the helpers every callable uses
//! to resolve sessions, apply the allowlist and shape answers.

use entity::{Mapper, Snowflake};
use protocol::ErrorCode;
use std::borrow::Cow;
use std::sync::Arc;

use schemars::JsonSchema;
use serde::Serialize;
use serde_json::value::RawValue;
use serde_json::{json, Value};

use crate::auth::Caller;
use crate::error::ToolError;
use crate::live::Settings;
use crate::server::Core;
pub use crate::surface::Target;
use crate::surface::{
    AllowedChannel, AllowedPlace, Attachment, ChannelLocation, MentionPolicy, MessageInfo,
    MessageQuery, Session, SessionKind, Surface,
};

/// The context a call carries: from headers for the operator, from the token for a capability.
#[derive(Debug, Clone)]
pub struct CallContext {
    /// Who is calling, as authentication found them.
    pub caller: Caller,
    /// The request (agent run) the call belongs to, for the audit log; a capability's is
    /// fixed.
    pub request_id: Option<String>,
    /// The default session, as any reference the entity mapper resolves.
    pub session_ref: Option<String>,
    /// Who is calling (`discord`, an agent host's name, ...), as `surface.help` reports it.
    pub client: Option<String>,
    /// The directory files are read from and saved to; `None`: calls that touch files are
    /// refused.
    pub cwd: Option<String>,
    /// The model's id for this tool call, for the audit log.
    pub tool_call_id: Option<String>,
    /// The message that started the run, when there is one.
    pub trigger_message_id: Option<Snowflake>,
    /// Which front made the call, as the server knows it: never taken from anything a client
    /// sends (a client's `x-switchboard-client` is only [`CallContext::client`]).
    pub front: Front,
}

pub use crate::auth::Front;

impl CallContext {
    /// The operator calling in-process with nothing else known: no session, run or working
    /// directory.
    pub fn operator() -> Self {
        CallContext {
            caller: Caller::Operator,
            request_id: None,
            session_ref: None,
            client: None,
            cwd: None,
            tool_call_id: None,
            trigger_message_id: None,
            front: Front::Api,
        }
    }
}

/// What a callable's `plan` may use: the caller's context and the server's pure helpers (the
/// mention rewrite, limits). Nothing here reaches the platform.
pub struct PlanContext<'a> {
    /// The engine (its pure helpers; a plan reaches no platform).
    pub core: &'a Core,
    /// The settings the call started with.
    pub settings: &'a Settings,
    /// Who is calling, and the call's context.
    pub context: &'a CallContext,
}

impl PlanContext<'_> {
    /// The mention rewrite with the configured aliases and the names the platform learned.
    pub fn mapper(&self) -> Mapper<'_> {
        Mapper::new(self.settings.aliases(), self.core.surface.as_ref())
    }

    /// `toolserver.max_parts_per_send`.
    pub fn max_parts_per_send(&self) -> usize {
        self.settings.config().toolserver.max_parts_per_send
    }

    /// The settings the call started with.
    pub fn settings(&self) -> &Settings {
        self.settings
    }
}

/// What a callable's handler gets besides its plan: the caller's context, the targets the
/// pipeline resolved and allowed (in the order the plan named them), and the mention policy.
/// Only the pipeline makes one.
pub struct Invocation<'a> {
    /// The engine the call runs in.
    pub core: &'a Core,
    /// The settings the call started with.
    pub settings: &'a Settings,
    /// Who is calling, and the call's context.
    pub context: &'a CallContext,
    /// The callable's id.
    pub tool_id: &'a str,
    pub(crate) targets: Vec<Target>,
    /// Where the call creates a channel, allowed; `None` when its plan creates none.
    pub(crate) place: Option<AllowedPlace>,
    /// Who posts may ping, as the operator configured it.
    pub mentions: MentionPolicy,
    /// Who is told what the call waits for while it runs (MCP's progress), when anyone is.
    pub observer: Option<&'a dyn crate::observer::CallObserver>,
}

/// A session as callables answer it.
#[derive(Debug, Serialize, JsonSchema)]
#[serde(rename_all = "camelCase")]
pub struct SessionView<'a> {
    /// The channel, thread or DM channel.
    #[schemars(with = "String")]
    pub channel_id: Snowflake,
    /// Its guild; `None` for DMs.
    #[schemars(with = "Option<String>")]
    pub guild_id: Option<Snowflake>,
    /// A channel's category, a thread's channel.
    #[schemars(with = "Option<String>")]
    pub parent_channel_id: Option<Snowflake>,
    /// What kind of conversation it is.
    pub kind: SessionKind,
    /// Its name (a DM: the other person's username); `None` when the cache doesn't know it.
    pub title: Option<String>,
    /// The token the operator configured for it (`entity.sessions.NAME`), if any.
    pub token: Option<&'a str>,
    /// How to name it as `sessionId` and in text: `#token`, else its name as a token (spaces
    /// as `-`: `#release-checklist`), else `#channel_<id>`. Always resolves back to it.
    pub reference: String,
}

/// One emoji's reactions on a message, as callables answer them.
#[derive(Debug, Serialize, JsonSchema)]
pub struct ReactionCount<'a> {
    /// A unicode emoji, or a custom one as `name:id`.
    pub emoji: &'a str,
    /// How many people reacted with it.
    pub count: u32,
}

/// A message as callables answer it.
#[derive(Debug, Serialize, JsonSchema)]
#[serde(rename_all = "camelCase")]
pub struct MessageView<'a> {
    /// The message.
    #[schemars(with = "String")]
    pub message_id: Snowflake,
    /// Who wrote it.
    #[schemars(with = "String")]
    pub author_id: Snowflake,
    /// The name people see for the author now (display name, else username).
    pub author_name: &'a str,
    /// Its text as people read it: mentions as `@name` and `#token`, not Discord markup.
    pub text: Cow<'a, str>,
    /// When it was posted, RFC 3339.
    pub ts: &'a str,
    /// When it was last edited, RFC 3339; `None` if never.
    pub edited_ts: Option<&'a str>,
    /// The message it replies to, if it is a reply.
    #[schemars(with = "Option<String>")]
    pub reply_to_message_id: Option<Snowflake>,
    /// Its files (name, URL, size, media type).
    pub attachments: &'a [Attachment],
    /// Its reactions, one entry per emoji.
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
    /// Publishes a workspace event (`fs.changed`, ...) about `session` on `/v1/events` and notes
    /// it in this call's audit row (`events`, bounded; argv, cwd and path cut or hashed as the
    /// input is).
    pub fn publish_event(&self, kind: &'static str, session: Snowflake, fields: Value) {
        crate::call_events::note_call_event(kind, &fields);
        self.core.events.publish(kind, Some(session), fields);
    }

    /// The posts counted for nonces when the caller is an agent run (`crate::nonce`): a send
    /// takes its parts' nonces here, so the same run run again posts none of them twice.
    pub fn run_posts(&self) -> Option<Arc<crate::nonce::RunPosts>> {
        match &self.context.caller {
            Caller::Capability(capability) => capability.posts.clone(),
            _ => None,
        }
    }

    /// The platform.
    pub fn surface(&self) -> &dyn Surface {
        self.core.surface.as_ref()
    }

    /// The mention rewrite with the configured aliases and the names the platform learned.
    pub fn mapper(&self) -> Mapper<'_> {
        Mapper::new(self.settings.aliases(), self.core.surface.as_ref())
    }

    /// The settings the call started with.
    pub fn settings(&self) -> &Settings {
        self.settings
    }

    /// The targets, in the order the plan named their sessions.
    pub fn targets(&self) -> &[Target] {
        &self.targets
    }

    /// The first target: the session a one-session callable acts in.
    pub fn target(&self) -> Result<Target, ToolError> {
        self.targets.first().copied().ok_or_else(|| {
            ToolError::internal(format!(
                "{} acts in a session but its plan named none (a bug)",
                self.tool_id
            ))
        })
    }

    /// Where the call creates a channel, as the pipeline allowed it.
    pub fn place(&self) -> Result<AllowedPlace, ToolError> {
        self.place.ok_or_else(|| {
            ToolError::internal(format!(
                "{} creates a channel but its plan named no place (a bug)",
                self.tool_id
            ))
        })
    }

    /// A message from the cache of the target session, or `not_found`.
    pub fn cached_message(
        &self,
        target: &Target,
        message_id: Snowflake,
    ) -> Result<Arc<MessageInfo>, ToolError> {
        self.surface()
            .message(target.channel, message_id)
            .ok_or_else(|| {
                ToolError::not_found(
                    ErrorCode::UnknownMessage,
                    format!(
                        "Message {message_id} is not in the cache of session {}; list recent messages with surface.messages.list",
                        target.channel
                    ),
                )
            })
    }

    /// `{"channelId","guildId","parentChannelId","kind","title","token","reference"}`.
    pub fn session_json(&self, target: &Target) -> SessionView<'_> {
        let title = self.surface().session(target.channel_id()).map(|i| i.name);
        self.session_view(target.channel_id(), &target.location, title)
    }

    /// A cached session as callables answer it, like [`Invocation::session_json`] but from what
    /// the cache knows (for listings, where no target was resolved).
    pub fn session_info_json(&self, info: &Session) -> SessionView<'_> {
        self.session_view(
            info.id,
            &ChannelLocation::from(info),
            Some(info.name.clone()),
        )
    }

    fn session_view(
        &self,
        channel_id: Snowflake,
        location: &ChannelLocation,
        title: Option<String>,
    ) -> SessionView<'_> {
        SessionView {
            channel_id,
            guild_id: location.guild_id,
            parent_channel_id: location.parent_channel_id,
            kind: location.kind,
            title,
            token: self
                .settings
                .aliases()
                .alias_for(entity::AliasKind::Session, channel_id),
            reference: self.mapper().session_reference(channel_id),
        }
    }

    /// A cached message as readers see it, rendered once per revision.
    pub fn message_json(&self, message: &MessageInfo) -> Result<Arc<RawValue>, ToolError> {
        self.core.rendered.get_or_render(
            message.message_id,
            message.revision,
            self.render_names(),
            || crate::registry::output(&self.message_view(message)),
        )
    }

    /// What a rendered message depends on beside the message: the names it was rendered with
    /// and the settings' generation (aliases).
    fn render_names(&self) -> (u64, u64) {
        (self.surface().names_revision(), self.settings.generation)
    }

    /// Cached messages of an allowed session as readers see them, oldest first
    /// ([`Surface::messages`] through [`Invocation::message_json`]). When the surface knows
    /// the messages' revisions, only a message whose revision the render cache does not hold
    /// is read and rendered; the others cost a lookup (issue 22 §5).
    pub fn messages_json(
        &self,
        channel: AllowedChannel,
        query: MessageQuery,
    ) -> Result<Vec<Arc<RawValue>>, ToolError> {
        let surface = self.surface();
        let Some(revisions) = surface.message_revisions(channel, query) else {
            return surface
                .messages(channel, query)
                .iter()
                .map(|message| self.message_json(message))
                .collect();
        };
        let names = self.render_names();
        let mut rendered = Vec::with_capacity(revisions.len());
        for (message_id, revision) in revisions {
            if let Some(hit) = self.core.rendered.get(message_id, revision, names) {
                rendered.push(hit);
            } else if let Some(message) = surface.message(channel, message_id) {
                // Read now, it is the message as it is now, cached under its own revision
                // (newer than the listed one if it changed meanwhile).
                rendered.push(self.message_json(&message)?);
            }
            // Gone since the revisions were read: deleted meanwhile, so not listed.
        }
        Ok(rendered)
    }

    /// A cached message as readers see it: `text` is the inbound-canonical text.
    pub fn message_view<'m>(&'m self, message: &'m MessageInfo) -> MessageView<'m> {
        MessageView {
            message_id: message.message_id,
            author_id: message.author_id,
            author_name: &message.author_name,
            text: self.mapper().inbound(&message.content),
            ts: &message.timestamp,
            edited_ts: message.edited_timestamp.as_deref(),
            reply_to_message_id: message.reply_to,
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

    /// Who a post may ping: the configured policy, pinging the replied-to author only for a
    /// reply, and nobody when silent. Never `@everyone` or `@here`.
    pub fn mention_policy(&self, replying: bool, silent: bool) -> MentionPolicy {
        if silent {
            return MentionPolicy::NONE;
        }
        MentionPolicy {
            replied_user: replying && self.mentions.users,
            ..self.mentions
        }
    }
}

impl Invocation<'_> {
    /// The sessions a search reads: the named one and, for a channel, its cached threads; or every
    /// cached session the allowlist allows. Either way only sessions where the permission rules
    /// allow this callable outright: a rule that denies (or asks for) it in one session must not
    /// be stepped around by leaving `sessionId` out.
    pub fn searchable(&self, one_session: bool) -> Result<Vec<AllowedChannel>, ToolError> {
        let cx = self;
        let surface = cx.surface();
        let permitted = |id: Snowflake| {
            cx.core
                .governance
                .decide(cx.tool_id, &cx.context.caller, &[id])
                .policy
                == switchboard_config::Policy::Allow
        };
        if one_session {
            let target = cx.target()?;
            let mut channels = vec![target.channel];
            if target.location.kind == crate::surface::SessionKind::Channel {
                channels.extend(
                    surface
                        .threads(Some(target.channel_id()))
                        .into_iter()
                        .map(|t| t.session.id)
                        .filter(|id| permitted(*id))
                        .map(AllowedChannel::checked),
                );
            }
            return Ok(channels);
        }
        let allowlist = &cx.core.allowlist();
        let location = |id: Snowflake| {
            surface
                .session(id)
                .map(|s| crate::surface::ChannelLocation::from(&s))
        };
        Ok(surface
            .sessions()
            .into_iter()
            .filter(|s| {
                !matches!(
                    s.kind,
                    crate::surface::SessionKind::Category | crate::surface::SessionKind::Forum
                )
            })
            .filter(|s| allowlist.allows_cached(s.id, location))
            .filter(|s| permitted(s.id))
            .map(|s| AllowedChannel::checked(s.id))
            .collect())
    }
}
