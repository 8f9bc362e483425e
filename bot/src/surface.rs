//! `DiscordSurface`: the tool server's [`Surface`] for Discord. Reads come from the store;
//! actions go through [`DiscordRest`], and what the bot sends is stored from the REST answer.

use std::hash::{Hash, Hasher};
use std::sync::atomic::{AtomicU64, AtomicU8, Ordering};
use std::sync::{Arc, OnceLock};

use async_trait::async_trait;
use entity::{Aliases, Mapper, NameDirectory, Snowflake};
use serde_json::{json, Value};
use toolserver::approvals::ApprovalCard;
use toolserver::events::Observers;
use toolserver::surface::{
    AllowedChannel, AttachmentInfo, ChannelLocation, ConnectionState, Fetched, MentionPolicy,
    MessageInfo, MessageQuery, OutgoingMessage, ReactionInfo, SessionInfo,
    SessionKind as ToolSessionKind, Surface, SurfaceError,
};

use crate::payload::stored_message_from_json;
use crate::rest::DiscordRest;
use crate::store::{SessionKind, Store, StoredMessage, StoredSession};

/// The gateway's state, shared by the event handler (which sets it) and `/health`; each change
/// is published (`gateway.state`) once [`Connection::observe`] is called.
#[derive(Default)]
pub struct Connection {
    state: AtomicU8,
    observers: OnceLock<Observers>,
}

impl std::fmt::Debug for Connection {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_tuple("Connection").field(&self.get()).finish()
    }
}

impl Connection {
    /// Records the gateway's state; `/health` sees it at once.
    pub fn set(&self, state: ConnectionState) {
        let code = match state {
            ConnectionState::Connecting => 0,
            ConnectionState::Ready => 1,
            ConnectionState::Down => 2,
            ConnectionState::None => 3,
        };
        let before = self.state.swap(code, Ordering::Relaxed);
        if before != code {
            if let Some(observers) = self.observers.get() {
                observers.metrics.gateway_state(state.as_str());
                observers
                    .events
                    .publish("gateway.state", None, json!({ "state": state.as_str() }));
            }
        }
    }

    /// The state last set; [`ConnectionState::Connecting`] before any.
    pub fn get(&self) -> ConnectionState {
        match self.state.load(Ordering::Relaxed) {
            0 => ConnectionState::Connecting,
            1 => ConnectionState::Ready,
            2 => ConnectionState::Down,
            _ => ConnectionState::None,
        }
    }

    /// Publishes every later change of state (once).
    pub fn observe(&self, observers: Observers) {
        observers.metrics.gateway_state(self.get().as_str());
        let _ = self.observers.set(observers);
    }
}

/// Discord, as the callables see it.
pub struct DiscordSurface {
    store: Store,
    rest: DiscordRest,
    aliases: Aliases,
    connection: Arc<Connection>,
    bot_id: Arc<AtomicU64>,
    observers: OnceLock<Observers>,
}

pub(crate) fn tool_kind(kind: SessionKind) -> ToolSessionKind {
    match kind {
        SessionKind::Channel => ToolSessionKind::Channel,
        SessionKind::Thread => ToolSessionKind::Thread,
        SessionKind::Dm => ToolSessionKind::Dm,
        SessionKind::Forum => ToolSessionKind::Forum,
        SessionKind::Category => ToolSessionKind::Category,
    }
}

/// Discord channel type → session kind.
pub fn session_kind(channel_type: u64) -> SessionKind {
    match channel_type {
        1 | 3 => SessionKind::Dm,
        4 => SessionKind::Category,
        10..=12 => SessionKind::Thread,
        15 | 16 => SessionKind::Forum,
        _ => SessionKind::Channel,
    }
}

/// Where a stored session sits, for the allowlist.
pub fn location(session: &StoredSession) -> ChannelLocation {
    ChannelLocation {
        guild_id: session.guild_id,
        parent_channel_id: session.parent_id,
        kind: tool_kind(session.kind),
    }
}

fn session_info(session: &StoredSession) -> SessionInfo {
    SessionInfo {
        channel_id: session.id,
        guild_id: session.guild_id,
        parent_channel_id: session.parent_id,
        kind: tool_kind(session.kind),
        title: session.name.clone(),
    }
}

/// A revision that changes whenever the parts readers see change.
fn revision_of(message: &StoredMessage) -> u64 {
    let mut hasher = std::collections::hash_map::DefaultHasher::new();
    message.content.hash(&mut hasher);
    message.edited_timestamp.hash(&mut hasher);
    for attachment in &message.attachments {
        attachment.url.hash(&mut hasher);
        attachment.size.hash(&mut hasher);
    }
    for reaction in &message.reactions {
        reaction.emoji.hash(&mut hasher);
        reaction.count.hash(&mut hasher);
        reaction.me.hash(&mut hasher);
    }
    hasher.finish()
}

impl DiscordSurface {
    /// A surface that reads from `store` and acts through `rest`, with `aliases` for canonical
    /// text. `connection` and `bot_id` are shared with the gateway's
    /// [`Ingest`](crate::gateway::Ingest), which sets them; `bot_id` is 0 until READY.
    pub fn new(
        store: Store,
        rest: DiscordRest,
        aliases: Aliases,
        connection: Arc<Connection>,
        bot_id: Arc<AtomicU64>,
    ) -> Self {
        DiscordSurface {
            store,
            rest,
            aliases,
            connection,
            bot_id,
            observers: OnceLock::new(),
        }
    }

    /// Publishes what the surface stores (`message.*`) and counts Discord's answers, from now
    /// on (once).
    pub fn observe(&self, observers: Observers) {
        self.rest.observe(std::sync::Arc::clone(&observers.metrics));
        let _ = self.observers.set(observers);
    }

    /// The store the surface reads from.
    pub fn store(&self) -> &Store {
        &self.store
    }

    fn message_info(&self, message: StoredMessage) -> Arc<MessageInfo> {
        let author_name = self.store.author_name(message.author_id);
        let revision = revision_of(&message);
        Arc::new(MessageInfo {
            message_id: message.id,
            channel_id: message.channel_id,
            author_id: message.author_id,
            author_name,
            content: message.content,
            timestamp: message.timestamp,
            edited_timestamp: message.edited_timestamp,
            reply_to: message.reply_to,
            attachments: message
                .attachments
                .into_iter()
                .map(|a| AttachmentInfo {
                    filename: a.filename,
                    url: a.url,
                    size: a.size,
                    content_type: a.content_type,
                })
                .collect(),
            reactions: message
                .reactions
                .into_iter()
                .map(|r| ReactionInfo {
                    emoji: r.emoji,
                    count: r.count,
                    me: r.me,
                })
                .collect(),
            revision,
        })
    }

    /// Stores a message the bot just sent, from Discord's answer (its gateway echo is then a
    /// no-op: the store keeps each id once).
    fn store_own_message(&self, answer: &Value) {
        let mapper = Mapper::new(&self.aliases, &self.store);
        match stored_message_from_json(answer, &mapper) {
            Some(message) => {
                let event = self.observers.get().map(|o| (o, message.clone()));
                if self.store.insert_message(message) {
                    if let Some((observers, message)) = event {
                        let name = self.store.author_name(message.author_id);
                        crate::observe::message_created(observers, &message, &name);
                    }
                }
            }
            None => tracing::warn!("Discord's answer to a send is not a message; not stored"),
        }
    }
}

fn allowed_mentions(policy: &MentionPolicy) -> Value {
    let mut parse = Vec::new();
    if policy.users {
        parse.push("users");
    }
    if policy.roles {
        parse.push("roles");
    }
    json!({ "parse": parse, "replied_user": policy.replied_user })
}

impl NameDirectory for DiscordSurface {
    fn user_by_key(&self, key: &str) -> Option<Snowflake> {
        self.store.user_by_key(key)
    }
    fn role_by_key(&self, key: &str) -> Option<Snowflake> {
        self.store.role_by_key(key)
    }
    fn channel_by_key(&self, key: &str) -> Option<Snowflake> {
        self.store.channel_by_key(key)
    }
    fn find_user_name(&self, id: Snowflake, accept: &mut dyn FnMut(&str) -> bool) {
        self.store.find_user_name(id, accept);
    }
    fn role_name(&self, id: Snowflake) -> Option<String> {
        self.store.role_name(id)
    }
    fn channel_name(&self, id: Snowflake) -> Option<String> {
        self.store.channel_name(id)
    }
}

#[async_trait]
impl Surface for DiscordSurface {
    fn connection(&self) -> ConnectionState {
        self.connection.get()
    }

    fn bot_user_id(&self) -> Option<Snowflake> {
        match self.bot_id.load(Ordering::Relaxed) {
            0 => None,
            id => Some(Snowflake(id)),
        }
    }

    fn sessions(&self) -> Vec<SessionInfo> {
        self.store.sessions().iter().map(session_info).collect()
    }

    fn session(&self, channel_id: Snowflake) -> Option<SessionInfo> {
        self.store.session(channel_id).as_ref().map(session_info)
    }

    fn names_revision(&self) -> u64 {
        self.store.names_revision()
    }

    fn messages(&self, channel: AllowedChannel, query: MessageQuery) -> Vec<Arc<MessageInfo>> {
        self.store
            .messages(channel.id(), query.limit, query.before, query.after)
            .into_iter()
            .map(|m| self.message_info(m))
            .collect()
    }

    fn message(&self, channel: AllowedChannel, message_id: Snowflake) -> Option<Arc<MessageInfo>> {
        self.store
            .message(channel.id(), message_id)
            .map(|m| self.message_info(m))
    }

    /// One `GET /channels/{id}`; the allowlist remembers the answer (found or not).
    async fn channel_info(&self, channel_id: Snowflake) -> Result<ChannelLocation, SurfaceError> {
        let facts = self.rest.channel(channel_id).await?;
        Ok(ChannelLocation {
            guild_id: facts.guild_id,
            parent_channel_id: facts.parent_id,
            kind: tool_kind(session_kind(facts.kind)),
        })
    }

    async fn send_message(&self, message: OutgoingMessage) -> Result<Snowflake, SurfaceError> {
        let answer = self
            .rest
            .send_message(
                message.channel_id.id(),
                &message.content,
                message.reply_to,
                allowed_mentions(&message.mentions),
                &message.files,
            )
            .await?;
        self.store_own_message(&answer);
        answer
            .get("id")
            .and_then(Value::as_str)
            .and_then(|id| id.parse::<u64>().ok())
            .map(Snowflake)
            .ok_or_else(|| SurfaceError::Unavailable("Discord's answer has no message id".into()))
    }

    async fn edit_message(
        &self,
        channel: AllowedChannel,
        message_id: Snowflake,
        content: String,
        mentions: MentionPolicy,
    ) -> Result<(), SurfaceError> {
        let channel_id = channel.id();
        let answer = self
            .rest
            .edit_message(
                channel_id,
                message_id,
                &content,
                allowed_mentions(&mentions),
            )
            .await?;
        let mapper = Mapper::new(&self.aliases, &self.store);
        let text = mapper.inbound(&content).into_owned();
        let edited = answer
            .get("edited_timestamp")
            .and_then(Value::as_str)
            .map(str::to_owned);
        let event = self.observers.get().map(|o| (o, text.clone()));
        if self
            .store
            .update_message(channel_id, message_id, content, text, edited)
        {
            if let Some((observers, text)) = event {
                crate::observe::message_edited(observers, channel_id, message_id, &text);
            }
        }
        Ok(())
    }

    async fn delete_message(
        &self,
        channel: AllowedChannel,
        message_id: Snowflake,
    ) -> Result<(), SurfaceError> {
        self.rest.delete_message(channel.id(), message_id).await?;
        if self.store.delete_message(channel.id(), message_id) {
            if let Some(observers) = self.observers.get() {
                crate::observe::message_deleted(observers, channel.id(), message_id);
            }
        }
        Ok(())
    }

    async fn add_reaction(
        &self,
        channel: AllowedChannel,
        message_id: Snowflake,
        emoji: String,
    ) -> Result<(), SurfaceError> {
        self.rest
            .add_reaction(channel.id(), message_id, &emoji)
            .await
    }

    async fn remove_reaction(
        &self,
        channel: AllowedChannel,
        message_id: Snowflake,
        emoji: String,
    ) -> Result<(), SurfaceError> {
        self.rest
            .remove_reaction(channel.id(), message_id, &emoji)
            .await
    }

    async fn typing(&self, channel: AllowedChannel) -> Result<(), SurfaceError> {
        self.rest.typing(channel.id()).await
    }

    async fn post_approval(
        &self,
        channel: AllowedChannel,
        card: &ApprovalCard,
    ) -> Result<Snowflake, SurfaceError> {
        let answer = self
            .rest
            .post_message_body(channel.id(), crate::approvals::message(card))
            .await?;
        self.store_own_message(&answer);
        answer
            .get("id")
            .and_then(Value::as_str)
            .and_then(|id| id.parse::<u64>().ok())
            .map(Snowflake)
            .ok_or_else(|| SurfaceError::Unavailable("Discord's answer has no message id".into()))
    }

    async fn update_approval(
        &self,
        channel: AllowedChannel,
        message_id: Snowflake,
        card: &ApprovalCard,
    ) -> Result<(), SurfaceError> {
        self.rest
            .edit_message_body(channel.id(), message_id, crate::approvals::message(card))
            .await
            .map(drop)
    }

    async fn fetch_attachment(
        &self,
        attachment: &AttachmentInfo,
        limit: u64,
    ) -> Result<Fetched, SurfaceError> {
        self.rest.fetch(&attachment.url, limit).await
    }
}
