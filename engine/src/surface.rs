//! The seam between the tool server and a chat platform.
//!
//! The bot implements [`Surface`] for Discord; the test kit's `platform::RecordingPlatform`
//! implements it over the store's memory backend for tests. Both read from the store's cache
//! (synchronously); actions are async and may fail with a typed [`SurfaceError`].

use std::sync::Arc;
use std::time::Duration;

use async_trait::async_trait;

use entity::{NameDirectory, Snowflake};
use serde::Serialize;
use serde_json::Value;
use switchboard_records::ApprovalCard;
pub use switchboard_records::{
    Attachment, Reaction, SearchMatch, SearchTerm, Session, SessionKind, Thread, ThreadState,
};
use switchboard_store::Store;

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

    /// A channel taken as allowed without the allowlist, for tests of the parts below the
    /// pipeline (feature `testing`; never in the service).
    #[cfg(feature = "testing")]
    pub fn assumed_for_tests(id: Snowflake) -> AllowedChannel {
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

/// Where the allowlist lets a call create a channel: a guild it lists, or a category it lists.
///
/// Only the tool server's pipeline makes one, like [`AllowedChannel`]: a channel is created
/// nowhere the allowlist did not agree to.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
pub struct AllowedPlace {
    guild: Snowflake,
    category: Option<Snowflake>,
}

impl AllowedPlace {
    /// Made only once the allowlist agreed.
    pub(crate) fn checked(guild: Snowflake, category: Option<Snowflake>) -> AllowedPlace {
        AllowedPlace { guild, category }
    }

    /// The guild the channel is created in.
    pub fn guild(self) -> Snowflake {
        self.guild
    }

    /// The category it is created under; `None`: at the guild's top level.
    pub fn category(self) -> Option<Snowflake> {
        self.category
    }
}

/// Where a channel sits, for the allowlist: what `channel_info` answers.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct ChannelLocation {
    /// Its guild; `None` for DMs.
    pub guild_id: Option<Snowflake>,
    /// A channel's category, a thread's channel.
    pub parent_channel_id: Option<Snowflake>,
    /// What kind of conversation it is.
    pub kind: SessionKind,
}

impl From<&Session> for ChannelLocation {
    fn from(info: &Session) -> Self {
        ChannelLocation {
            guild_id: info.guild_id,
            parent_channel_id: info.parent_id,
            kind: info.kind,
        }
    }
}

/// A cached message. `content` is Discord's raw text; the tool server rewrites it for readers.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct MessageInfo {
    /// The message.
    pub message_id: Snowflake,
    /// Its session.
    pub channel_id: Snowflake,
    /// Who wrote it.
    pub author_id: Snowflake,
    /// The name people see for the author now (display name, else username).
    pub author_name: String,
    /// Discord's raw text (mentions as `<@id>`); readers get it rendered readable.
    pub content: String,
    /// When it was posted, RFC 3339.
    pub timestamp: String,
    /// When it was last edited, RFC 3339.
    pub edited_timestamp: Option<String>,
    /// The message it replies to.
    pub reply_to: Option<Snowflake>,
    /// Its files.
    pub attachments: Vec<Attachment>,
    /// Its reactions.
    pub reactions: Vec<Reaction>,
    /// Changes whenever anything above changes (edit, reaction, ...): readers may cache what
    /// they derive from a message under its id and revision.
    pub revision: u64,
}

impl MessageInfo {
    /// A message read from elsewhere than the store's cache (a search hit, Discord's answer)
    /// as callables see it, its author called `author_name`. Its revision is derived from
    /// what readers see of it, with the top bit set: the cache's revisions (a counter, see
    /// [`MessageInfo::from_cached`]) never reach that range, so neither is taken for the other.
    pub fn from_stored(message: switchboard_records::Message, author_name: String) -> MessageInfo {
        let revision = message.revision() | 1 << 63;
        MessageInfo::from_cached(message, author_name, revision)
    }

    /// A message `cache` answered at its revision there, its author called what the cache
    /// calls them now: how [`Surface`]'s reads answer.
    pub fn cached(
        cache: &Store,
        (message, revision): (switchboard_records::Message, u64),
    ) -> Arc<MessageInfo> {
        let author_name = cache.author_name(message.author_id);
        Arc::new(MessageInfo::from_cached(message, author_name, revision))
    }

    /// A message of the store's cache as callables see it, its author called `author_name`
    /// (what the store calls them now), at the cache's `revision` of it
    /// (`Store::message_with_revision`): how a platform that reads from the store answers reads.
    pub fn from_cached(
        message: switchboard_records::Message,
        author_name: String,
        revision: u64,
    ) -> MessageInfo {
        MessageInfo {
            revision,
            message_id: message.id,
            channel_id: message.channel_id,
            author_id: message.author_id,
            author_name,
            content: message.content,
            timestamp: message.timestamp,
            edited_timestamp: message.edited_timestamp,
            reply_to: message.reply_to,
            attachments: message.attachments,
            reactions: message.reactions,
        }
    }
}

/// Which cached messages to read: the newest `limit` before/after a cursor, oldest first.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct MessageQuery {
    /// At most this many.
    pub limit: usize,
    /// Only messages older than this one.
    pub before: Option<Snowflake>,
    /// Only messages newer than this one.
    pub after: Option<Snowflake>,
}

impl From<MessageQuery> for switchboard_records::MessageQuery {
    fn from(query: MessageQuery) -> Self {
        switchboard_records::MessageQuery {
            limit: query.limit,
            before: query.before,
            after: query.after,
        }
    }
}

/// A thread to create under an allowed channel.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct NewThread {
    /// The channel the thread lives in, checked.
    pub parent: AllowedChannel,
    /// Its name (1 to 100 characters).
    pub name: String,
    /// Start it from this message of the parent; `None`: a standalone thread.
    pub from_message: Option<Snowflake>,
    /// Minutes of inactivity before it is archived (60, 1440, 4320 or 10080); `None`: the
    /// platform's default.
    pub auto_archive_minutes: Option<u32>,
}

/// What kind of channel to create.
#[derive(
    Debug, Clone, Copy, PartialEq, Eq, serde::Deserialize, Serialize, schemars::JsonSchema,
)]
#[serde(rename_all = "lowercase")]
pub enum NewChannelKind {
    /// A text channel (Discord type 0).
    Text,
    /// A forum channel: its posts are threads (type 15).
    Forum,
    /// A voice channel (type 2); it has no topic.
    Voice,
}

/// A channel to create where the allowlist allows creating one.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct NewChannel {
    /// The guild, and the category when there is one, checked.
    pub place: AllowedPlace,
    /// Its name (1 to 100 characters).
    pub name: String,
    /// Text, forum or voice.
    pub kind: NewChannelKind,
    /// Its topic (not for voice channels).
    pub topic: Option<String>,
}

/// Changes to a guild channel; `None` leaves a field as it is.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct ChannelEdit {
    /// A new name (1 to 100 characters).
    pub name: Option<String>,
    /// A new topic; `Some("")` clears it.
    pub topic: Option<String>,
}

/// A pinned message, as the platform lists it.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct PinnedMessage {
    /// The message.
    pub message: Arc<MessageInfo>,
    /// When it was pinned, RFC 3339, when the platform says.
    pub pinned_at: Option<String>,
}

/// A full-text search over the messages of allowed sessions: the store's query, its sessions
/// each checked by the allowlist (its bounds: `switchboard_records::SearchQuery::MAX_TERMS`,
/// `MAX_ALTERNATIVES`).
pub type SearchQuery = switchboard_records::SearchQuery<AllowedChannel>;

/// One search hit.
#[derive(Debug, Clone, PartialEq)]
pub struct SearchHit {
    /// The message.
    pub message: Arc<MessageInfo>,
    /// A short excerpt with the matched words between `**` and `**`.
    pub snippet: String,
    /// How well it matches: higher is better (only comparable within one answer).
    pub score: f64,
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
    /// The file's bytes.
    pub content: Vec<u8>,
}

/// One message to post; `content` is already Discord text within the length limit (it may be
/// empty when files are attached).
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct OutgoingMessage {
    /// Where to post it, checked.
    pub channel_id: AllowedChannel,
    /// Discord text, at most 2,000 characters.
    pub content: String,
    /// The message it replies to.
    pub reply_to: Option<Snowflake>,
    /// Who it may ping.
    pub mentions: MentionPolicy,
    /// Files to attach.
    pub files: Vec<OutgoingFile>,
    /// The nonce the platform is to enforce for this post (an agent run's, see
    /// [`crate::nonce`]), so the same post made again gives back the earlier message; `None`:
    /// the platform makes a unique one.
    pub nonce: Option<String>,
}

/// What fetching an attachment gave.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum Fetched {
    /// The whole file.
    Bytes(Vec<u8>),
    /// The attachment is larger than the cap; nothing past the cap was kept.
    OverLimit,
}

/// Whether the platform connection works, for `/health`.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum ConnectionState {
    /// Connected, the cache is complete, and whatever was posted while the connection was
    /// away has been fetched: nothing is missing.
    Ready,
    /// Connecting for the first time, or waiting for the guilds after an identify.
    Connecting,
    /// The connection dropped and is being resumed (events missed meanwhile are replayed by
    /// the platform when the resume succeeds).
    Resuming,
    /// Connected after a fresh identify, and fetching what was posted while the connection was
    /// away; live events flow meanwhile.
    Backfilling,
    /// Disconnected.
    Down,
    /// No platform behind this surface (tests, offline tools).
    None,
}

impl ConnectionState {
    /// The name `/health` reports.
    pub fn as_str(self) -> &'static str {
        match self {
            ConnectionState::Ready => "ready",
            ConnectionState::Connecting => "connecting",
            ConnectionState::Resuming => "resuming",
            ConnectionState::Backfilling => "backfilling",
            ConnectionState::Down => "down",
            ConnectionState::None => "none",
        }
    }
}

/// A platform failure, mapped onto the protocol's error kinds by the tool server.
#[derive(Debug, Clone, PartialEq, thiserror::Error)]
pub enum SurfaceError {
    /// The platform has no such thing (channel, message, file).
    #[error("not found: {0}")]
    NotFound(String),
    /// The platform refused (a missing permission, a bad token).
    #[error("denied: {0}")]
    Denied(String),
    /// The platform is rate limiting this action.
    #[error("rate limited; retry after {retry_after:?}")]
    RateLimited {
        /// When to try again.
        retry_after: Duration,
    },
    /// The platform refused the input.
    #[error("invalid input: {message}")]
    InvalidInput {
        /// What the platform said.
        message: String,
        /// Its field errors, when it gave them.
        details: Value,
    },
    /// The action conflicts with the platform's state.
    #[error("conflict: {0}")]
    Conflict(String),
    /// The platform is unreachable or failing.
    #[error("unavailable: {0}")]
    Unavailable(String),
}

/// A chat platform, as the callables see it. Names it learned (users, roles, channels) feed the
/// entity mapper through the [`NameDirectory`] supertrait.
#[async_trait]
pub trait Surface: NameDirectory + Send + Sync + 'static {
    /// Whether the platform connection works.
    fn connection(&self) -> ConnectionState;
    /// The bot's own user id, once known.
    fn bot_user_id(&self) -> Option<Snowflake>;
    /// The store's read cache the platform keeps what it sees in: the reads below answer from
    /// it.
    fn cache(&self) -> &Store;
    /// Every cached session.
    fn sessions(&self) -> Vec<Session> {
        self.cache().sessions()
    }
    /// One cached session (any: the allowlist uses it to locate channels).
    fn session(&self, channel_id: Snowflake) -> Option<Session> {
        self.cache().session(channel_id)
    }
    /// Cached messages of an allowed session, oldest first.
    fn messages(&self, channel: AllowedChannel, query: MessageQuery) -> Vec<Arc<MessageInfo>> {
        let cache = self.cache();
        cache
            .messages_with_revisions(channel.id(), query.into())
            .into_iter()
            .map(|cached| MessageInfo::cached(cache, cached))
            .collect()
    }
    /// One cached message of an allowed session.
    fn message(&self, channel: AllowedChannel, message_id: Snowflake) -> Option<Arc<MessageInfo>> {
        let cache = self.cache();
        cache
            .message_with_revision(channel.id(), message_id)
            .map(|cached| MessageInfo::cached(cache, cached))
    }
    /// The ids and revisions of what [`Surface::messages`] answers, without building the
    /// messages (their revisions are the ones [`Surface::message`] answers them with): a reader
    /// that caches by revision reads only what changed. `None`: not known without reading the
    /// messages.
    fn message_revisions(
        &self,
        channel: AllowedChannel,
        query: MessageQuery,
    ) -> Option<Vec<(Snowflake, u64)>> {
        Some(self.cache().message_revisions(channel.id(), query.into()))
    }
    /// Changes whenever learned names change, since readable text depends on them.
    fn names_revision(&self) -> u64 {
        self.cache().names_revision()
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
    /// Deletes a message.
    async fn delete_message(
        &self,
        channel: AllowedChannel,
        message_id: Snowflake,
    ) -> Result<(), SurfaceError>;
    /// Adds the bot's reaction (`present`) or removes its own.
    async fn set_reaction(
        &self,
        channel: AllowedChannel,
        message_id: Snowflake,
        emoji: String,
        present: bool,
    ) -> Result<(), SurfaceError>;
    /// Shows the bot typing for a few seconds.
    async fn typing(&self, channel: AllowedChannel) -> Result<(), SurfaceError>;
    /// Posts an approval request (in Discord: a message with Approve and Deny buttons whose
    /// custom ids carry the card's id); returns the message's id.
    async fn post_approval(
        &self,
        channel: AllowedChannel,
        card: &ApprovalCard,
    ) -> Result<Snowflake, SurfaceError>;
    /// Redraws an approval request after it was decided or expired (buttons disabled).
    async fn update_approval(
        &self,
        channel: AllowedChannel,
        message_id: Snowflake,
        card: &ApprovalCard,
    ) -> Result<(), SurfaceError>;
    /// Fetches an attachment of a cached message, keeping at most `limit` bytes.
    async fn fetch_attachment(
        &self,
        attachment: &Attachment,
        limit: u64,
    ) -> Result<Fetched, SurfaceError>;

    /// A cached thread (any: callers check the allowlist on what they show).
    fn thread(&self, channel_id: Snowflake) -> Option<Thread>;
    /// Every cached thread, of one channel (`parent`) or of all; archived ones included.
    fn threads(&self, parent: Option<Snowflake>) -> Vec<Thread>;
    /// A channel's threads from the platform: the active ones, and the archived ones too with
    /// `include_archived` (a bounded number of them, newest first).
    async fn list_threads(
        &self,
        parent: AllowedChannel,
        include_archived: bool,
    ) -> Result<Vec<Thread>, SurfaceError>;
    /// Creates a thread (from a message or standalone); the bot joins it.
    async fn create_thread(&self, thread: NewThread) -> Result<Thread, SurfaceError>;
    /// Archives or unarchives a thread; an unarchived thread is joined again.
    async fn set_thread_archived(
        &self,
        thread: AllowedChannel,
        archived: bool,
    ) -> Result<Thread, SurfaceError>;
    /// Pins a message (`pinned`) or unpins it.
    async fn set_pinned(
        &self,
        channel: AllowedChannel,
        message_id: Snowflake,
        pinned: bool,
    ) -> Result<(), SurfaceError>;
    /// The pinned messages of a session, most recently pinned first.
    async fn pinned_messages(
        &self,
        channel: AllowedChannel,
    ) -> Result<Vec<PinnedMessage>, SurfaceError>;
    /// Full-text search over the stored messages of the query's (allowed) sessions, best
    /// first. A query the index cannot run answers [`SurfaceError::InvalidInput`].
    async fn search(&self, query: SearchQuery) -> Result<Vec<SearchHit>, SurfaceError>;

    /// Creates a guild channel where the allowlist allows it; the new session is cached at once.
    async fn create_channel(&self, channel: NewChannel) -> Result<Session, SurfaceError>;
    /// Renames a guild channel or changes its topic; answers the session as it is now.
    async fn edit_channel(
        &self,
        channel: AllowedChannel,
        edit: ChannelEdit,
    ) -> Result<Session, SurfaceError>;
    /// Deletes a guild channel (its threads with it); the session leaves the cache.
    async fn delete_channel(&self, channel: AllowedChannel) -> Result<(), SurfaceError>;
}

impl From<SurfaceError> for crate::error::ToolError {
    fn from(error: SurfaceError) -> Self {
        match error {
            SurfaceError::NotFound(what) => {
                crate::error::ToolError::not_found(protocol::ErrorCode::NotFound, what)
            }
            SurfaceError::Denied(why) => {
                crate::error::ToolError::denied(protocol::ErrorCode::DiscordDenied, why)
            }
            SurfaceError::RateLimited { retry_after } => crate::error::ToolError::rate_limited(
                protocol::ErrorCode::DiscordRateLimited,
                format!(
                    "Discord is rate limiting this action; retry after {:.1} s",
                    retry_after.as_secs_f64()
                ),
                retry_after,
            ),
            SurfaceError::InvalidInput { message, details } => {
                crate::error::ToolError::usage(protocol::ErrorCode::DiscordRejected, message)
                    .with_details(details)
            }
            SurfaceError::Conflict(why) => crate::error::ToolError::new(
                protocol::ErrorKind::Conflict,
                protocol::ErrorCode::Conflict,
                why,
            ),
            SurfaceError::Unavailable(why) => crate::error::ToolError::new(
                protocol::ErrorKind::Unavailable,
                protocol::ErrorCode::DiscordUnavailable,
                format!("Discord is unavailable: {why}; retry shortly"),
            ),
        }
    }
}

/// A session a call may act in: resolved, allowlisted.
#[derive(Debug, Clone, Copy)]
pub struct Target {
    /// The channel, checked.
    pub channel: AllowedChannel,
    /// Where it sits.
    pub location: ChannelLocation,
}

impl Target {
    /// The channel's id.
    pub fn channel_id(&self) -> Snowflake {
        self.channel.id()
    }
}
