//! The fake's mutable state: channels, messages, reactions, interactions, registered commands,
//! the request log and pending REST faults. Plain data behind one mutex; no I/O here.

use std::collections::{BTreeMap, HashMap, VecDeque};

use axum::body::Bytes;
use serde::{Deserialize, Serialize};
use serde_json::Value;

use crate::api_error::ApiError;
use crate::snowflake::Snowflake;
use crate::world::{channel_type, World};

/// A channel, thread or DM as the fake holds it.
#[derive(Clone, Debug)]
pub struct Channel {
    pub id: Snowflake,
    pub guild_id: Option<Snowflake>,
    pub name: String,
    pub kind: u8,
    pub parent_id: Option<Snowflake>,
    pub topic: Option<String>,
    pub position: u16,
    pub bot_can_see: bool,
    pub bot_can_send: bool,
    pub bot_can_manage_messages: bool,
    pub archived: bool,
    /// A locked thread can be unarchived only by someone with MANAGE_THREADS (the bot has
    /// not); sends to it answer 50083 while it is archived.
    pub locked: bool,
    /// A thread's inactivity period before Discord archives it (60, 1440, 4320 or 10080).
    pub auto_archive_minutes: u32,
    /// When a thread was last archived or unarchived (its `archive_timestamp`).
    pub archive_ms: u64,
    /// A thread's members (user, joined at ms), in joining order.
    pub members: Vec<(Snowflake, u64)>,
    /// For DMs: the other user.
    pub recipient_id: Option<Snowflake>,
    pub last_message_id: Option<Snowflake>,
    pub message_count: u32,
    pub created_ms: u64,
    /// Who started a thread; `None`: the guild's owner (threads of the world and the control
    /// API), as the payload says.
    pub owner_id: Option<Snowflake>,
}

/// A reference from a reply to the message it answers.
#[derive(Clone, Copy, Debug, PartialEq)]
pub struct Reference {
    pub message_id: Snowflake,
    pub channel_id: Snowflake,
    pub guild_id: Option<Snowflake>,
}

/// The slash command that produced a message.
#[derive(Clone, Debug)]
pub struct InteractionMeta {
    pub id: Snowflake,
    pub name: String,
    pub user_id: Snowflake,
}

/// The users who reacted with one emoji.
#[derive(Clone, Debug)]
pub struct ReactionEntry {
    pub emoji: Emoji,
    pub users: Vec<Snowflake>,
}

/// A reaction emoji: unicode, or a custom emoji `name:id`.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct Emoji {
    pub name: String,
    pub id: Option<Snowflake>,
}

impl Emoji {
    /// Parses the `{emoji}` path segment Discord takes: a Unicode emoji (one Unicode knows,
    /// with or without its variation selector), or a custom one as `name:id`. Shortcodes
    /// (`:tada:`), plain words (`thumbsup`) and `<:name:id>` are not emoji to Discord's routes;
    /// whether a custom emoji's id exists is checked against the world where it is used.
    pub fn parse(text: &str) -> Result<Emoji, ApiError> {
        if let Some((name, id)) = text.split_once(':') {
            let id = Snowflake::from_digits(id).ok_or_else(ApiError::unknown_emoji)?;
            if name.is_empty() {
                return Err(ApiError::unknown_emoji());
            }
            return Ok(Emoji {
                name: name.to_string(),
                id: Some(id),
            });
        }
        if emojis::get(text).is_none() {
            return Err(ApiError::unknown_emoji());
        }
        Ok(Emoji {
            name: text.to_string(),
            id: None,
        })
    }
}

/// A message as the fake holds it.
#[derive(Clone, Debug)]
pub struct StoredMessage {
    pub id: Snowflake,
    pub channel_id: Snowflake,
    pub guild_id: Option<Snowflake>,
    pub author_id: Snowflake,
    pub content: String,
    pub edited_ms: Option<u64>,
    pub tts: bool,
    pub mention_everyone: bool,
    pub mentions: Vec<Snowflake>,
    pub mention_roles: Vec<Snowflake>,
    pub embeds: Vec<Value>,
    pub components: Vec<Value>,
    pub attachments: Vec<Value>,
    pub reference: Option<Reference>,
    pub nonce: Option<Value>,
    /// Discord's message type: 0 default, 19 reply, 20 chat-input command.
    pub kind: u8,
    pub reactions: Vec<ReactionEntry>,
    pub pinned: bool,
    /// When it was pinned (pins list newest pinned first).
    pub pinned_ms: Option<u64>,
    pub flags: u64,
    pub webhook_id: Option<Snowflake>,
    pub application_id: Option<Snowflake>,
    pub interaction: Option<InteractionMeta>,
}

/// An interaction (slash command invocation) injected through the control API.
#[derive(Clone, Debug)]
pub struct Interaction {
    pub id: Snowflake,
    pub token: String,
    pub channel_id: Snowflake,
    pub guild_id: Option<Snowflake>,
    pub user_id: Snowflake,
    pub command_name: String,
    /// The button click's message and `custom_id`, for a component interaction (type 3);
    /// `None` for a slash command (type 2).
    pub component: Option<(Snowflake, String)>,
    /// The body of the first callback, once the bot answered.
    pub response: Option<Value>,
    pub original_message: Option<Snowflake>,
    pub followups: Vec<Snowflake>,
}

/// One REST request as recorded for `GET /_fake/requests`.
#[derive(Clone, Debug, Serialize, Deserialize, PartialEq)]
pub struct RecordedRequest {
    /// When it arrived, in milliseconds since the Unix epoch by the fake's clock.
    #[serde(default)]
    pub at_ms: u64,
    /// The HTTP method (`POST`).
    pub method: String,
    /// The URL path as requested (`/api/v10/channels/1/messages`), without the query.
    pub path: String,
    /// The query string without the `?` (`limit=50`); `None` when there is none.
    pub query: Option<String>,
    /// The JSON body; for a `multipart/form-data` request, its `payload_json` part (None when
    /// absent or not JSON).
    pub body: Option<Value>,
    /// The HTTP status the fake answered, an injected fault's included.
    pub status: u16,
    /// The parts of a `multipart/form-data` body, in order (`payload_json` included); empty
    /// for every other request. Serialized only when non-empty.
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    pub parts: Vec<RecordedPart>,
}

/// One part of a recorded `multipart/form-data` request.
#[derive(Clone, Debug, Serialize, Deserialize, PartialEq)]
pub struct RecordedPart {
    /// The part's name (`payload_json`, `files[0]`, ...); empty if it had none.
    pub name: String,
    /// The filename of its `Content-Disposition`, if any.
    #[serde(default)]
    pub filename: Option<String>,
    /// Its `Content-Type` header, if any.
    #[serde(default)]
    pub content_type: Option<String>,
    /// Its length in bytes (kept when `content` is dropped).
    pub size: usize,
    /// The bytes as sent (JSON: `content_base64`). Emptied, oldest requests first, once the
    /// log holds more than [`SizeLimits::logged_part_bytes`]; `size` stays.
    #[serde(rename = "content_base64", with = "crate::attachments::base64_serde")]
    pub content: Bytes,
}

/// An attachment's bytes, held for the CDN route.
#[derive(Clone, Debug)]
pub struct StoredFile {
    pub filename: String,
    pub content_type: String,
    pub content: Bytes,
}

/// A pending REST fault: the next `remaining` matching requests answer `status`.
#[derive(Clone, Debug, PartialEq)]
pub struct RestFaultState {
    pub status: u16,
    pub remaining: u32,
    pub retry_after: f64,
    pub path_contains: Option<String>,
}

/// Size limits that keep the fake bounded.
#[derive(Clone, Copy, Debug)]
pub struct SizeLimits {
    /// Messages held per channel (default 10,000); beyond it the oldest are forgotten, and answer
    /// 10008 from then on.
    pub messages_per_channel: usize,
    /// REST requests kept in the request log (default 10,000); beyond it the oldest are dropped.
    pub requests_logged: usize,
    /// Slash-command invocations held (default 1,000); beyond it the oldest are forgotten, and
    /// answering one gets 10062 or 10015.
    pub interactions: usize,
    /// Message nonces remembered for `enforce_nonce`, all channels together (default 10,000); a
    /// send that repeats a forgotten nonce creates a new message.
    pub nonces: usize,
    /// Attachment bytes held for the CDN route; the oldest attachments are forgotten (404)
    /// beyond it.
    pub attachment_bytes: usize,
    /// Multipart part bytes kept in the request log; the oldest parts' `content` is emptied
    /// beyond it.
    pub logged_part_bytes: usize,
}

impl Default for SizeLimits {
    fn default() -> Self {
        SizeLimits {
            messages_per_channel: 10_000,
            requests_logged: 10_000,
            interactions: 1_000,
            nonces: 10_000,
            attachment_bytes: 512 * 1024 * 1024,
            logged_part_bytes: 256 * 1024 * 1024,
        }
    }
}

/// Everything mutable, behind one mutex in [`crate::server::Shared`].
#[derive(Debug)]
pub struct Store {
    pub limits: SizeLimits,
    pub channels: HashMap<Snowflake, Channel>,
    pub messages: HashMap<Snowflake, BTreeMap<Snowflake, StoredMessage>>,
    /// (channel, nonce) → message id, oldest first for eviction.
    pub nonces: HashMap<(Snowflake, String), Snowflake>,
    nonce_order: VecDeque<(Snowflake, String)>,
    pub interactions: HashMap<Snowflake, Interaction>,
    interaction_order: VecDeque<Snowflake>,
    pub global_commands: Vec<Value>,
    pub guild_commands: HashMap<Snowflake, Vec<Value>>,
    pub requests: VecDeque<RecordedRequest>,
    pub rest_faults: VecDeque<RestFaultState>,
    /// The next handshakes closed instead of answered: (close code, how many are left).
    pub handshake_fault: Option<(u16, u32)>,
    /// (channel, attachment) → bytes, oldest first for eviction.
    files: HashMap<(Snowflake, Snowflake), StoredFile>,
    file_order: VecDeque<(Snowflake, Snowflake)>,
    file_bytes: usize,
}

impl Store {
    /// Builds the store from a checked world.
    pub fn new(world: &World, limits: SizeLimits, now_ms: u64) -> Store {
        let mut channels = HashMap::new();
        for guild in &world.guilds {
            for (position, spec) in guild.channels.iter().enumerate() {
                channels.insert(
                    spec.id,
                    Channel {
                        id: spec.id,
                        guild_id: Some(guild.id),
                        name: spec.name.clone(),
                        kind: spec.kind,
                        parent_id: spec.parent_id,
                        topic: spec.topic.clone(),
                        position: position as u16,
                        bot_can_see: spec.bot_can_see,
                        bot_can_send: spec.bot_can_send,
                        bot_can_manage_messages: spec.bot_can_manage_messages,
                        archived: spec.archived,
                        locked: false,
                        auto_archive_minutes: 1440,
                        archive_ms: spec.id.timestamp_ms().min(now_ms),
                        members: Vec::new(),
                        recipient_id: None,
                        last_message_id: None,
                        message_count: 0,
                        created_ms: spec.id.timestamp_ms().min(now_ms),
                        owner_id: None,
                    },
                );
            }
        }
        for dm in &world.dms {
            channels.insert(dm.id, dm_channel(dm.id, dm.recipient_id, now_ms));
        }
        Store {
            limits,
            channels,
            messages: HashMap::new(),
            nonces: HashMap::new(),
            nonce_order: VecDeque::new(),
            interactions: HashMap::new(),
            interaction_order: VecDeque::new(),
            global_commands: Vec::new(),
            guild_commands: HashMap::new(),
            requests: VecDeque::new(),
            rest_faults: VecDeque::new(),
            handshake_fault: None,
            files: HashMap::new(),
            file_order: VecDeque::new(),
            file_bytes: 0,
        }
    }

    /// The channel, or 10003.
    pub fn channel(&self, id: Snowflake) -> Result<&Channel, ApiError> {
        self.channels.get(&id).ok_or_else(ApiError::unknown_channel)
    }

    /// Whether the bot can see `channel` (a thread also needs its parent visible).
    pub fn bot_can_see(&self, channel: &Channel) -> bool {
        if !channel.bot_can_see {
            return false;
        }
        match channel.parent_id.and_then(|p| self.channels.get(&p)) {
            Some(parent) if channel_type::is_thread(channel.kind) => self.bot_can_see(parent),
            _ => true,
        }
    }

    /// The channel if the bot may read it: 10003 if unknown, 50001 if hidden.
    pub fn readable_channel(&self, id: Snowflake) -> Result<&Channel, ApiError> {
        let channel = self.channel(id)?;
        if !self.bot_can_see(channel) {
            return Err(ApiError::missing_access());
        }
        Ok(channel)
    }

    /// The channel if the bot may post in it: 10003, 50001, 50013, 50008 or 50083.
    pub fn sendable_channel(&self, id: Snowflake) -> Result<&Channel, ApiError> {
        let channel = self.readable_channel(id)?;
        if !channel.bot_can_send {
            return Err(ApiError::missing_permissions());
        }
        if !channel_type::holds_messages(channel.kind) {
            return Err(ApiError::cannot_send_in_non_text());
        }
        if channel.archived {
            return Err(ApiError::thread_archived());
        }
        Ok(channel)
    }

    /// A message of a channel, or 10008.
    pub fn message(
        &self,
        channel_id: Snowflake,
        message_id: Snowflake,
    ) -> Result<&StoredMessage, ApiError> {
        self.messages
            .get(&channel_id)
            .and_then(|m| m.get(&message_id))
            .ok_or_else(ApiError::unknown_message)
    }

    /// A mutable message of a channel, or 10008.
    pub fn message_mut(
        &mut self,
        channel_id: Snowflake,
        message_id: Snowflake,
    ) -> Result<&mut StoredMessage, ApiError> {
        self.messages
            .get_mut(&channel_id)
            .and_then(|m| m.get_mut(&message_id))
            .ok_or_else(ApiError::unknown_message)
    }

    /// Stores a new message, evicting the channel's oldest beyond the limit.
    pub fn insert_message(&mut self, message: StoredMessage) {
        let channel_id = message.channel_id;
        if let Some(channel) = self.channels.get_mut(&channel_id) {
            channel.last_message_id = Some(message.id);
            channel.message_count = channel.message_count.saturating_add(1);
        }
        if let Some(key) = message_nonce_key(&message) {
            self.remember_nonce(channel_id, key, message.id);
        }
        let held = self.messages.entry(channel_id).or_default();
        held.insert(message.id, message);
        while held.len() > self.limits.messages_per_channel {
            held.pop_first();
        }
    }

    fn remember_nonce(&mut self, channel_id: Snowflake, key: String, id: Snowflake) {
        let entry = (channel_id, key);
        if self.nonces.insert(entry.clone(), id).is_none() {
            self.nonce_order.push_back(entry);
        }
        while self.nonce_order.len() > self.limits.nonces {
            if let Some(old) = self.nonce_order.pop_front() {
                self.nonces.remove(&old);
            }
        }
    }

    /// The message an earlier send with this nonce created, if it is still held.
    pub fn message_for_nonce(&self, channel_id: Snowflake, key: &str) -> Option<&StoredMessage> {
        let id = self.nonces.get(&(channel_id, key.to_string()))?;
        self.message(channel_id, *id).ok()
    }

    /// Removes a message, or 10008.
    pub fn remove_message(
        &mut self,
        channel_id: Snowflake,
        message_id: Snowflake,
    ) -> Result<StoredMessage, ApiError> {
        self.messages
            .get_mut(&channel_id)
            .and_then(|m| m.remove(&message_id))
            .ok_or_else(ApiError::unknown_message)
    }

    /// Every message of a channel, oldest first.
    pub fn channel_messages(&self, channel_id: Snowflake) -> impl Iterator<Item = &StoredMessage> {
        self.messages
            .get(&channel_id)
            .into_iter()
            .flat_map(|m| m.values())
    }

    /// Total messages held.
    pub fn message_total(&self) -> usize {
        self.messages.values().map(BTreeMap::len).sum()
    }

    /// Records an interaction, evicting the oldest beyond the limit.
    pub fn insert_interaction(&mut self, interaction: Interaction) {
        self.interaction_order.push_back(interaction.id);
        self.interactions.insert(interaction.id, interaction);
        while self.interaction_order.len() > self.limits.interactions {
            if let Some(old) = self.interaction_order.pop_front() {
                self.interactions.remove(&old);
            }
        }
    }

    /// The interaction a webhook token belongs to, or 10015.
    pub fn interaction_by_token(&mut self, token: &str) -> Result<&mut Interaction, ApiError> {
        self.interactions
            .values_mut()
            .find(|i| i.token == token)
            .ok_or_else(ApiError::unknown_webhook)
    }

    /// Appends to the request log, dropping the oldest beyond the limit (and the oldest
    /// multipart bytes beyond theirs).
    pub fn record_request(&mut self, request: RecordedRequest) {
        let has_parts = !request.parts.is_empty();
        self.requests.push_back(request);
        while self.requests.len() > self.limits.requests_logged {
            self.requests.pop_front();
        }
        if has_parts {
            self.trim_logged_parts();
        }
    }

    fn trim_logged_parts(&mut self) {
        let mut total: usize = self
            .requests
            .iter()
            .flat_map(|r| &r.parts)
            .map(|p| p.content.len())
            .sum();
        for part in self.requests.iter_mut().flat_map(|r| r.parts.iter_mut()) {
            if total <= self.limits.logged_part_bytes {
                break;
            }
            total -= part.content.len();
            part.content = Bytes::new();
        }
    }

    /// Holds an attachment's bytes, forgetting the oldest beyond the limit.
    pub fn insert_file(
        &mut self,
        channel_id: Snowflake,
        attachment_id: Snowflake,
        file: StoredFile,
    ) {
        let key = (channel_id, attachment_id);
        self.file_bytes = self.file_bytes.saturating_add(file.content.len());
        if let Some(old) = self.files.insert(key, file) {
            self.file_bytes = self.file_bytes.saturating_sub(old.content.len());
        } else {
            self.file_order.push_back(key);
        }
        while self.file_bytes > self.limits.attachment_bytes {
            let Some(old) = self.file_order.pop_front() else {
                break;
            };
            if let Some(gone) = self.files.remove(&old) {
                self.file_bytes = self.file_bytes.saturating_sub(gone.content.len());
            }
        }
    }

    /// An attachment's bytes, if held.
    pub fn file(&self, channel_id: Snowflake, attachment_id: Snowflake) -> Option<&StoredFile> {
        self.files.get(&(channel_id, attachment_id))
    }

    /// Takes one matching pending REST fault, if any.
    pub fn take_rest_fault(&mut self, path: &str) -> Option<RestFaultState> {
        let index = self.rest_faults.iter().position(|f| {
            f.path_contains
                .as_deref()
                .is_none_or(|needle| path.contains(needle))
        })?;
        let fault = self.rest_faults.get_mut(index)?;
        fault.remaining = fault.remaining.saturating_sub(1);
        let taken = fault.clone();
        if fault.remaining == 0 {
            self.rest_faults.remove(index);
        }
        Some(taken)
    }

    /// Whether a command with this name is registered globally or for the guild.
    pub fn command_registered(&self, name: &str, guild_id: Option<Snowflake>) -> bool {
        let named = |c: &Value| c.get("name").and_then(Value::as_str) == Some(name);
        self.global_commands.iter().any(named)
            || guild_id
                .and_then(|g| self.guild_commands.get(&g))
                .is_some_and(|cmds| cmds.iter().any(named))
    }

    /// A registered command's id, by name.
    pub fn command_id(&self, name: &str, guild_id: Option<Snowflake>) -> Option<String> {
        let named = |c: &&Value| c.get("name").and_then(Value::as_str) == Some(name);
        guild_id
            .and_then(|g| self.guild_commands.get(&g))
            .and_then(|cmds| cmds.iter().find(named))
            .or_else(|| self.global_commands.iter().find(named))
            .and_then(|c| c.get("id"))
            .and_then(Value::as_str)
            .map(str::to_string)
    }
}

/// A guild channel (or category) made now: the bot sees it and may post in it, nothing more.
pub fn guild_channel(
    id: Snowflake,
    guild_id: Snowflake,
    name: String,
    kind: u8,
    parent_id: Option<Snowflake>,
    position: u16,
    now_ms: u64,
) -> Channel {
    Channel {
        guild_id: Some(guild_id),
        name,
        kind,
        parent_id,
        position,
        recipient_id: None,
        ..dm_channel(id, Snowflake(0), now_ms)
    }
}

/// A DM channel record.
pub fn dm_channel(id: Snowflake, recipient_id: Snowflake, now_ms: u64) -> Channel {
    Channel {
        id,
        guild_id: None,
        name: String::new(),
        kind: channel_type::DM,
        parent_id: None,
        topic: None,
        position: 0,
        bot_can_see: true,
        bot_can_send: true,
        bot_can_manage_messages: false,
        archived: false,
        locked: false,
        auto_archive_minutes: 1440,
        archive_ms: now_ms,
        members: Vec::new(),
        recipient_id: Some(recipient_id),
        last_message_id: None,
        message_count: 0,
        created_ms: now_ms,
        owner_id: None,
    }
}

fn message_nonce_key(message: &StoredMessage) -> Option<String> {
    match &message.nonce {
        Some(Value::String(s)) => Some(s.clone()),
        Some(Value::Number(n)) => Some(n.to_string()),
        _ => None,
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn emoji_parsing_matches_discord() {
        assert_eq!(Emoji::parse("👍").expect("unicode").name, "👍");
        let custom = Emoji::parse("party:123").expect("custom");
        assert_eq!(custom.id, Some(Snowflake(123)));
        assert!(Emoji::parse("thumbsup").is_err());
        assert!(
            Emoji::parse(":tada:").is_err(),
            "a shortcode is not an emoji"
        );
        assert!(Emoji::parse("<:party:123>").is_err());
        assert!(
            Emoji::parse("é").is_err(),
            "not every non-ASCII text is an emoji"
        );
        assert!(Emoji::parse("👍👍").is_err(), "one emoji, not two");
        assert!(Emoji::parse("👍🏽").is_ok(), "a skin tone");
        assert!(Emoji::parse("❤").is_ok() && Emoji::parse("❤️").is_ok());
        assert!(Emoji::parse("party:abc").is_err());
        assert!(Emoji::parse("").is_err());
    }

    #[test]
    fn hidden_parent_hides_thread() {
        let mut world = World::demo();
        world.guilds[0].channels[0].bot_can_see = false; // ops
        let store = Store::new(&world, SizeLimits::default(), 0);
        let visible = |id: u64| {
            store
                .channel(Snowflake(id))
                .is_ok_and(|c| store.bot_can_see(c))
        };
        assert!(!visible(1000000000000000411));
        assert!(visible(1000000000000000402));
    }

    #[test]
    fn rest_faults_count_down() {
        let mut store = Store::new(&World::demo(), SizeLimits::default(), 0);
        store.rest_faults.push_back(RestFaultState {
            status: 429,
            remaining: 2,
            retry_after: 0.5,
            path_contains: None,
        });
        assert!(store.take_rest_fault("/a").is_some());
        assert!(store.take_rest_fault("/a").is_some());
        assert!(store.take_rest_fault("/a").is_none());
    }
}
