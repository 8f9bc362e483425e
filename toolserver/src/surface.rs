//! The seam between the tool server and a chat platform.
//!
//! The bot implements [`Surface`] for Discord; [`crate::memory::MemorySurface`] implements it in
//! memory for tests. Reads come from the implementation's cache and are synchronous; actions are
//! async and may fail with a typed [`SurfaceError`].

use std::sync::Arc;
use std::time::Duration;

use async_trait::async_trait;
use entity::{NameDirectory, Snowflake};
use serde::Serialize;
use serde_json::Value;

/// A channel the allowlist let a call act in.
///
/// Only the tool server's pipeline (and [`crate::Core::allowed`], for the agent bridge) makes
/// one, after resolving the reference and applying the allowlist; every platform action and
/// every read of message content takes one. So no code path reaches the platform with a channel
/// nobody checked.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash, PartialOrd, Ord)]
pub struct AllowedChannel(Snowflake);

impl AllowedChannel {
    /// Made only once the allowlist agreed.
    pub(crate) fn checked(id: Snowflake) -> AllowedChannel {
        AllowedChannel(id)
    }

    /// The channel's id.
    pub fn id(self) -> Snowflake {
        self.0
    }
}

impl std::fmt::Display for AllowedChannel {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        self.0.fmt(f)
    }
}

/// What kind of conversation a session is.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize)]
#[serde(rename_all = "lowercase")]
pub enum SessionKind {
    Channel,
    Thread,
    Dm,
    Forum,
    /// A guild category: holds channels, never messages.
    Category,
}

/// A channel, thread or DM as the cache knows it.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct SessionInfo {
    pub channel_id: Snowflake,
    pub guild_id: Option<Snowflake>,
    pub parent_channel_id: Option<Snowflake>,
    pub kind: SessionKind,
    pub title: String,
}

/// Where a channel sits, for the allowlist: what `channel_info` answers.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct ChannelLocation {
    pub guild_id: Option<Snowflake>,
    pub parent_channel_id: Option<Snowflake>,
    pub kind: SessionKind,
}

impl From<&SessionInfo> for ChannelLocation {
    fn from(info: &SessionInfo) -> Self {
        ChannelLocation {
            guild_id: info.guild_id,
            parent_channel_id: info.parent_channel_id,
            kind: info.kind,
        }
    }
}

#[derive(Debug, Clone, PartialEq, Eq, Serialize)]
#[serde(rename_all = "camelCase")]
pub struct AttachmentInfo {
    pub filename: String,
    pub url: String,
    pub size: u64,
    pub content_type: Option<String>,
}

#[derive(Debug, Clone, PartialEq, Eq, Serialize)]
pub struct ReactionInfo {
    pub emoji: String,
    pub count: u32,
    /// Whether the bot itself reacted.
    pub me: bool,
}

/// A cached message. `content` is Discord's raw text; the tool server rewrites it for readers.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct MessageInfo {
    pub message_id: Snowflake,
    pub channel_id: Snowflake,
    pub author_id: Snowflake,
    pub author_name: String,
    pub content: String,
    /// RFC 3339.
    pub timestamp: String,
    pub edited_timestamp: Option<String>,
    pub reply_to: Option<Snowflake>,
    pub attachments: Vec<AttachmentInfo>,
    pub reactions: Vec<ReactionInfo>,
    /// Changes whenever anything above changes (edit, reaction, ...): readers may cache what
    /// they derive from a message under its id and revision.
    pub revision: u64,
}

/// Which cached messages to read: the newest `limit` before/after a cursor, oldest first.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct MessageQuery {
    pub limit: usize,
    pub before: Option<Snowflake>,
    pub after: Option<Snowflake>,
}

/// Who a message may ping. `@everyone`/`@here` are never in it. The pipeline decides it (from
/// `discord.allow_role_mentions`) and hands it to the platform with every post and edit; the
/// Discord code never decides it.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Default)]
pub struct MentionPolicy {
    /// `<@id>` pings the user.
    pub users: bool,
    /// `<@&id>` pings the role.
    pub roles: bool,
    /// A reply pings the author of the message it replies to.
    pub replied_user: bool,
}

impl MentionPolicy {
    /// Nobody is pinged.
    pub const NONE: MentionPolicy = MentionPolicy {
        users: false,
        roles: false,
        replied_user: false,
    };
}

/// A file to upload with a message.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct OutgoingFile {
    /// One safe path component.
    pub filename: String,
    pub content: Vec<u8>,
}

/// One message to post; `content` is already Discord text within the length limit (it may be
/// empty when files are attached).
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct OutgoingMessage {
    pub channel_id: AllowedChannel,
    pub content: String,
    pub reply_to: Option<Snowflake>,
    pub mentions: MentionPolicy,
    pub files: Vec<OutgoingFile>,
}

/// What fetching an attachment gave.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum Fetched {
    Bytes(Vec<u8>),
    /// The attachment is larger than the cap; nothing past the cap was kept.
    OverLimit,
}

/// Whether the platform connection works, for `/health`.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum ConnectionState {
    Ready,
    Connecting,
    Down,
    /// No platform behind this surface (tests, offline tools).
    None,
}

impl ConnectionState {
    pub fn as_str(self) -> &'static str {
        match self {
            ConnectionState::Ready => "ready",
            ConnectionState::Connecting => "connecting",
            ConnectionState::Down => "down",
            ConnectionState::None => "none",
        }
    }
}

/// A platform failure, mapped onto the protocol's error kinds by the tool server.
#[derive(Debug, Clone, PartialEq, thiserror::Error)]
pub enum SurfaceError {
    #[error("not found: {0}")]
    NotFound(String),
    #[error("denied: {0}")]
    Denied(String),
    #[error("rate limited; retry after {retry_after:?}")]
    RateLimited { retry_after: Duration },
    #[error("invalid input: {message}")]
    InvalidInput { message: String, details: Value },
    #[error("conflict: {0}")]
    Conflict(String),
    #[error("unavailable: {0}")]
    Unavailable(String),
}

/// A chat platform, as the callables see it. Names it learned (users, roles, channels) feed the
/// entity mapper through the [`NameDirectory`] supertrait.
#[async_trait]
pub trait Surface: NameDirectory + Send + Sync + 'static {
    fn connection(&self) -> ConnectionState;
    /// The bot's own user id, once known.
    fn bot_user_id(&self) -> Option<Snowflake>;
    /// Every cached session.
    fn sessions(&self) -> Vec<SessionInfo>;
    fn session(&self, channel_id: Snowflake) -> Option<SessionInfo>;
    fn messages(&self, channel: AllowedChannel, query: MessageQuery) -> Vec<Arc<MessageInfo>>;
    fn message(&self, channel: AllowedChannel, message_id: Snowflake) -> Option<Arc<MessageInfo>>;
    /// Changes whenever learned names change, since readable text depends on them.
    fn names_revision(&self) -> u64 {
        0
    }

    /// A channel's guild and parent when the cache doesn't know it (one lookup; the caller
    /// remembers the answer).
    async fn channel_info(&self, channel_id: Snowflake) -> Result<ChannelLocation, SurfaceError>;
    /// Posts one message; returns its id.
    async fn send_message(&self, message: OutgoingMessage) -> Result<Snowflake, SurfaceError>;
    /// Replaces the text of one of the bot's messages.
    async fn edit_message(
        &self,
        channel: AllowedChannel,
        message_id: Snowflake,
        content: String,
        mentions: MentionPolicy,
    ) -> Result<(), SurfaceError>;
    async fn delete_message(
        &self,
        channel: AllowedChannel,
        message_id: Snowflake,
    ) -> Result<(), SurfaceError>;
    async fn add_reaction(
        &self,
        channel: AllowedChannel,
        message_id: Snowflake,
        emoji: String,
    ) -> Result<(), SurfaceError>;
    /// Removes the bot's own reaction.
    async fn remove_reaction(
        &self,
        channel: AllowedChannel,
        message_id: Snowflake,
        emoji: String,
    ) -> Result<(), SurfaceError>;
    async fn typing(&self, channel: AllowedChannel) -> Result<(), SurfaceError>;
    /// Fetches an attachment of a cached message, keeping at most `limit` bytes.
    async fn fetch_attachment(
        &self,
        attachment: &AttachmentInfo,
        limit: u64,
    ) -> Result<Fetched, SurfaceError>;
}
