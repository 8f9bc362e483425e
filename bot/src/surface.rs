//! `DiscordSurface`: the tool server's [`Surface`] for Discord. Reads come from the store;
//! actions go through [`DiscordRest`], and what the bot sends is stored from the REST answer.

use std::sync::atomic::{AtomicU64, AtomicU8, Ordering};
use std::sync::{Arc, OnceLock};

use async_trait::async_trait;
use entity::{Aliases, Mapper, NameDirectory, Snowflake};
use serde_json::{json, Value};
use switchboard_engine::approvals::ApprovalCard;
use switchboard_engine::events::Observers;
use switchboard_engine::live::{Live, SharedAliases};
use switchboard_engine::surface::{
    AllowedChannel, Attachment, ChannelEdit, ChannelLocation, ConnectionState, Fetched,
    MentionPolicy, MessageInfo, NewChannel, NewChannelKind, NewThread, OutgoingMessage,
    PinnedMessage, SearchHit, SearchQuery, Session, Surface, SurfaceError, Thread,
};

use crate::payload::stored_message_from_json;
use crate::rest::DiscordRest;
use switchboard_records as records;
use switchboard_records::{SessionKind, ThreadState};
use switchboard_store::Store;

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

fn state_code(state: ConnectionState) -> u8 {
    match state {
        ConnectionState::Connecting => 0,
        ConnectionState::Ready => 1,
        ConnectionState::Down => 2,
        ConnectionState::None => 3,
        ConnectionState::Resuming => 4,
        ConnectionState::Backfilling => 5,
    }
}

impl Connection {
    /// Records the gateway's state; `/health` sees it at once.
    pub fn set(&self, state: ConnectionState) {
        let code = state_code(state);
        let before = self.state.swap(code, Ordering::SeqCst);
        if before != code {
            self.published(state);
        }
    }

    /// Moves from `from` to `to` only when the state is still `from` (a backfill that caught
    /// up must not call a connection that dropped meanwhile ready). True when it moved.
    pub fn replace(&self, from: ConnectionState, to: ConnectionState) -> bool {
        let moved = self
            .state
            .compare_exchange(
                state_code(from),
                state_code(to),
                Ordering::SeqCst,
                Ordering::SeqCst,
            )
            .is_ok();
        if moved && from != to {
            self.published(to);
        }
        moved
    }

    fn published(&self, state: ConnectionState) {
        if let Some(observers) = self.observers.get() {
            observers.metrics.gateway_state(state.as_str());
            observers
                .events
                .publish("gateway.state", None, json!({ "state": state.as_str() }));
        }
    }

    /// The state last set; [`ConnectionState::Connecting`] before any.
    pub fn get(&self) -> ConnectionState {
        match self.state.load(Ordering::SeqCst) {
            0 => ConnectionState::Connecting,
            1 => ConnectionState::Ready,
            2 => ConnectionState::Down,
            4 => ConnectionState::Resuming,
            5 => ConnectionState::Backfilling,
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
    aliases: SharedAliases,
    connection: Arc<Connection>,
    bot_id: Arc<AtomicU64>,
    observers: OnceLock<Observers>,
}

/// Where a stored session sits, for the allowlist.
pub fn location(session: &records::Session) -> ChannelLocation {
    ChannelLocation {
        guild_id: session.guild_id,
        parent_channel_id: session.parent_id,
        kind: session.kind,
    }
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
            aliases: Arc::new(Live::new(aliases)),
            connection,
            bot_id,
            observers: OnceLock::new(),
        }
    }

    /// The aliases it renders stored text with: share them with the gateway's ingest and the
    /// workflows, and swap them on a config reload.
    pub fn aliases(&self) -> &SharedAliases {
        &self.aliases
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

    fn message_info(&self, message: records::Message) -> Arc<MessageInfo> {
        let author_name = self.store.author_name(message.author_id);
        Arc::new(MessageInfo::from_stored(message, author_name))
    }

    /// Stores a message the bot just sent, from Discord's answer (its gateway echo is then a
    /// no-op: the store keeps each id once), and answers its id.
    fn store_own_message(&self, answer: &Value) -> Result<Snowflake, SurfaceError> {
        let aliases = self.aliases.load();
        let mapper = Mapper::new(&aliases, &self.store);
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
        answer
            .get("id")
            .and_then(Value::as_str)
            .and_then(|id| id.parse::<u64>().ok())
            .map(Snowflake)
            .ok_or_else(|| SurfaceError::Unavailable("Discord's answer has no message id".into()))
    }
}

/// How long a search may run before it is stopped (it runs on the store's writer thread, so
/// this also bounds how long it holds up writes).
const SEARCH_BUDGET: std::time::Duration = std::time::Duration::from_millis(500);
/// Pages of 50 pins read at most (Discord keeps at most 250 pins per channel).
const MAX_PIN_PAGES: usize = 5;
/// Archived threads asked for in one listing.
const ARCHIVED_THREADS: u32 = 100;

/// An id field of Discord's JSON (ids are strings there).
fn json_id(value: &Value, key: &str) -> Option<Snowflake> {
    value
        .get(key)
        .and_then(Value::as_str)
        .and_then(|s| s.parse::<u64>().ok())
        .map(Snowflake)
}

/// A channel or thread from Discord's channel JSON, as the store keeps it.
fn session_from_json(value: &Value) -> Option<records::Session> {
    Some(records::Session {
        id: json_id(value, "id")?,
        guild_id: json_id(value, "guild_id"),
        parent_id: json_id(value, "parent_id"),
        kind: SessionKind::from_channel_type(value.get("type").and_then(Value::as_u64)?),
        name: value
            .get("name")
            .and_then(Value::as_str)
            .unwrap_or_default()
            .to_owned(),
    })
}

/// A thread from Discord's channel JSON: its session and its state; `None` when it is not a
/// thread.
fn thread_from_json(value: &Value) -> Option<records::Thread> {
    let session = session_from_json(value).filter(|s| s.kind == SessionKind::Thread)?;
    let meta = value.get("thread_metadata");
    let flag = |key: &str| {
        meta.and_then(|m| m.get(key))
            .and_then(Value::as_bool)
            .unwrap_or(false)
    };
    Some(records::Thread {
        session,
        state: ThreadState {
            archived: flag("archived"),
            locked: flag("locked"),
            auto_archive_minutes: meta
                .and_then(|m| m.get("auto_archive_duration"))
                .and_then(Value::as_u64)
                .and_then(|m| u32::try_from(m).ok())
                .unwrap_or(1440),
            owner_id: json_id(value, "owner_id"),
        },
    })
}

/// A search past its budget is the caller's to narrow (one session, rarer words); anything
/// else is the store's trouble.
fn search_error(error: switchboard_store::StoreError) -> SurfaceError {
    match error.kind() {
        switchboard_store::StoreErrorKind::TimedOut => SurfaceError::InvalidInput {
            message: error.to_string(),
            details: Value::Null,
        },
        _ => SurfaceError::Unavailable(format!("the message store cannot search: {error}")),
    }
}

impl DiscordSurface {
    /// Keeps a thread Discord described (session and state); its info, when it is one.
    fn remember_thread(&self, value: &Value) -> Option<Thread> {
        let thread = thread_from_json(value)?;
        self.store.upsert_session(thread.session.clone());
        self.store.set_thread_state(thread.session.id, thread.state);
        thread.parent_id().is_some().then_some(thread)
    }

    /// Stores a channel from Discord's answer to `what`, as the gateway's event would: the
    /// session is right at once.
    fn remember_channel(&self, value: &Value, what: &str) -> Result<Session, SurfaceError> {
        let session = session_from_json(value).ok_or_else(|| {
            SurfaceError::Unavailable(format!("Discord's answer to {what} is not a channel"))
        })?;
        self.store.upsert_session(session.clone());
        Ok(session)
    }

    /// Asks Discord about a thread again (after it said the thread is archived), so the next
    /// look at the cache is right.
    async fn refresh_thread(&self, channel: Snowflake) {
        match self.rest.channel_json(channel).await {
            Ok(value) => {
                self.remember_thread(&value);
            }
            Err(error) => tracing::debug!(%channel, %error, "could not refresh a thread"),
        }
    }

    /// Joins a thread; a failure is logged, not returned (the thread itself is fine).
    async fn join(&self, thread: Snowflake) {
        if let Err(error) = self.rest.join_thread(thread).await {
            tracing::warn!(%thread, %error, "could not join the thread; its messages may not arrive over the gateway");
        }
    }

    /// A message from a REST answer as callables see it; its author is learned on the way.
    fn message_from_json(&self, value: &Value) -> Option<Arc<MessageInfo>> {
        if let Some(author) = value.get("author") {
            if let (Some(id), Some(name)) = (
                author
                    .get("id")
                    .and_then(Value::as_str)
                    .and_then(|s| s.parse::<u64>().ok()),
                author.get("username").and_then(Value::as_str),
            ) {
                self.store.upsert_user(records::User {
                    id: Snowflake(id),
                    username: name.to_owned(),
                    global_name: author
                        .get("global_name")
                        .and_then(Value::as_str)
                        .map(str::to_owned),
                    is_bot: author.get("bot").and_then(Value::as_bool).unwrap_or(false),
                });
            }
        }
        let aliases = self.aliases.load();
        let mapper = Mapper::new(&aliases, &self.store);
        stored_message_from_json(value, &mapper).map(|m| self.message_info(m))
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
    fn users_by_key(&self, key: &str) -> Vec<Snowflake> {
        self.store.users_by_key(key)
    }
    fn channels_by_key(&self, key: &str) -> Vec<Snowflake> {
        self.store.channels_by_key(key)
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

    fn cache(&self) -> &Store {
        &self.store
    }

    /// One `GET /channels/{id}`; the allowlist remembers the answer (found or not).
    async fn channel_info(&self, channel_id: Snowflake) -> Result<ChannelLocation, SurfaceError> {
        let facts = self.rest.channel(channel_id).await?;
        Ok(ChannelLocation {
            guild_id: facts.guild_id,
            parent_channel_id: facts.parent_id,
            kind: SessionKind::from_channel_type(facts.kind),
        })
    }

    async fn send_message(&self, message: OutgoingMessage) -> Result<Snowflake, SurfaceError> {
        let sent = self
            .rest
            .send_message(
                message.channel_id.id(),
                &message.content,
                message.reply_to,
                allowed_mentions(&message.mentions),
                &message.files,
                message.nonce.as_deref(),
            )
            .await;
        let answer = match sent {
            Err(SurfaceError::Conflict(why)) => {
                // Discord says the thread is archived: learn its state, so the caller can
                // reopen it (or refuse, when it is locked).
                self.refresh_thread(message.channel_id.id()).await;
                return Err(SurfaceError::Conflict(why));
            }
            other => other?,
        };
        self.store_own_message(&answer)
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
        let aliases = self.aliases.load();
        let mapper = Mapper::new(&aliases, &self.store);
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

    async fn set_reaction(
        &self,
        channel: AllowedChannel,
        message_id: Snowflake,
        emoji: String,
        present: bool,
    ) -> Result<(), SurfaceError> {
        let (channel, emoji) = (channel.id(), emoji.as_str());
        if present {
            self.rest.add_reaction(channel, message_id, emoji).await
        } else {
            self.rest.remove_reaction(channel, message_id, emoji).await
        }
    }

    async fn typing(&self, channel: AllowedChannel) -> Result<(), SurfaceError> {
        self.rest.typing(channel.id()).await
    }

    async fn post_approval(
        &self,
        channel: AllowedChannel,
        card: &ApprovalCard,
    ) -> Result<Snowflake, SurfaceError> {
        // An input too long to show inline goes whole as a file beside the card.
        let files: Vec<_> = crate::approvals::attachment(card).into_iter().collect();
        let answer = self
            .rest
            .post_message_body(channel.id(), crate::approvals::message(card), &files)
            .await?;
        self.store_own_message(&answer)
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
        attachment: &Attachment,
        limit: u64,
    ) -> Result<Fetched, SurfaceError> {
        self.rest.fetch(&attachment.url, limit).await
    }

    fn thread(&self, channel_id: Snowflake) -> Option<Thread> {
        // A thread whose parent is unknown is not shown (nothing could post under it).
        self.store
            .thread(channel_id)
            .filter(|t| t.parent_id().is_some())
    }

    fn threads(&self, parent: Option<Snowflake>) -> Vec<Thread> {
        self.store
            .threads(parent)
            .into_iter()
            .filter(|t| t.parent_id().is_some())
            .collect()
    }

    /// The guild's active threads (one request, filtered to the channel), then with
    /// `include_archived` one page of its archived public threads; each is remembered.
    async fn list_threads(
        &self,
        parent: AllowedChannel,
        include_archived: bool,
    ) -> Result<Vec<Thread>, SurfaceError> {
        let parent_id = parent.id();
        let guild = match self.store.session(parent_id).and_then(|s| s.guild_id) {
            Some(guild) => guild,
            None => self
                .rest
                .channel(parent_id)
                .await?
                .guild_id
                .ok_or_else(|| SurfaceError::InvalidInput {
                    message: format!("channel {parent_id} is not in a guild, so it has no threads"),
                    details: Value::Null,
                })?,
        };
        let mut found = Vec::new();
        let mut pages = vec![self.rest.active_threads(guild).await?];
        if include_archived {
            pages.push(
                self.rest
                    .archived_public_threads(parent_id, ARCHIVED_THREADS)
                    .await?,
            );
        }
        for page in &pages {
            for value in page
                .get("threads")
                .and_then(Value::as_array)
                .map(Vec::as_slice)
                .unwrap_or_default()
            {
                if let Some(thread) = self.remember_thread(value) {
                    if thread.parent_id() == Some(parent_id)
                        && !found
                            .iter()
                            .any(|t: &Thread| t.session.id == thread.session.id)
                    {
                        found.push(thread);
                    }
                }
            }
        }
        Ok(found)
    }

    async fn create_thread(&self, thread: NewThread) -> Result<Thread, SurfaceError> {
        let parent = thread.parent.id();
        let answer = match thread.from_message {
            Some(message) => {
                self.rest
                    .create_thread_from_message(
                        parent,
                        message,
                        &thread.name,
                        thread.auto_archive_minutes,
                    )
                    .await?
            }
            None => {
                self.rest
                    .create_thread(parent, &thread.name, thread.auto_archive_minutes)
                    .await?
            }
        };
        let info = self.remember_thread(&answer).ok_or_else(|| {
            SurfaceError::Unavailable(
                "Discord's answer to a thread creation is not a thread".into(),
            )
        })?;
        self.join(info.session.id).await;
        Ok(info)
    }

    async fn set_thread_archived(
        &self,
        thread: AllowedChannel,
        archived: bool,
    ) -> Result<Thread, SurfaceError> {
        let answer = self
            .rest
            .modify_channel(thread.id(), json!({ "archived": archived }))
            .await?;
        let info = self
            .remember_thread(&answer)
            .ok_or_else(|| SurfaceError::InvalidInput {
                message: format!("channel {thread} is not a thread"),
                details: Value::Null,
            })?;
        if !archived {
            self.join(info.session.id).await;
        }
        Ok(info)
    }

    async fn set_pinned(
        &self,
        channel: AllowedChannel,
        message_id: Snowflake,
        pinned: bool,
    ) -> Result<(), SurfaceError> {
        if pinned {
            self.rest.pin(channel.id(), message_id).await
        } else {
            self.rest.unpin(channel.id(), message_id).await
        }
    }

    async fn pinned_messages(
        &self,
        channel: AllowedChannel,
    ) -> Result<Vec<PinnedMessage>, SurfaceError> {
        let mut pins = Vec::new();
        let mut before: Option<String> = None;
        for _ in 0..MAX_PIN_PAGES {
            let page = self.rest.pins(channel.id(), before.as_deref()).await?;
            let items = page
                .get("items")
                .and_then(Value::as_array)
                .map(Vec::as_slice)
                .unwrap_or_default();
            for item in items {
                let pinned_at = item
                    .get("pinned_at")
                    .and_then(Value::as_str)
                    .map(str::to_owned);
                if let Some(message) = item.get("message").and_then(|m| self.message_from_json(m)) {
                    pins.push(PinnedMessage { message, pinned_at });
                }
            }
            let more = page.get("has_more").and_then(Value::as_bool) == Some(true);
            let next = items
                .last()
                .and_then(|i| i.get("pinned_at"))
                .and_then(Value::as_str)
                .map(str::to_owned);
            match next {
                // Each page must move the cursor, or the loop would ask for the same page.
                Some(next) if more && before.as_deref() != Some(next.as_str()) => {
                    before = Some(next);
                }
                _ => break,
            }
        }
        Ok(pins)
    }

    async fn search(&self, query: SearchQuery) -> Result<Vec<SearchHit>, SurfaceError> {
        let search = query.map_channels(AllowedChannel::id);
        let hits = self
            .store
            .backend()
            .search(search, SEARCH_BUDGET)
            .await
            .map_err(search_error)?;
        Ok(hits
            .into_iter()
            .map(|hit| SearchHit {
                message: self.message_info(hit.message),
                snippet: hit.snippet,
                score: hit.score,
            })
            .collect())
    }

    async fn create_channel(&self, channel: NewChannel) -> Result<Session, SurfaceError> {
        let mut body = json!({
            "name": channel.name,
            "type": match channel.kind {
                NewChannelKind::Text => 0,
                NewChannelKind::Voice => 2,
                NewChannelKind::Forum => 15,
            },
        });
        if let Some(category) = channel.place.category() {
            body["parent_id"] = json!(category.to_string());
        }
        if let Some(topic) = channel.topic {
            body["topic"] = json!(topic);
        }
        let answer = self
            .rest
            .create_channel(channel.place.guild(), body)
            .await?;
        self.remember_channel(&answer, "a channel creation")
    }

    async fn edit_channel(
        &self,
        channel: AllowedChannel,
        edit: ChannelEdit,
    ) -> Result<Session, SurfaceError> {
        let mut body = json!({});
        if let Some(name) = edit.name {
            body["name"] = json!(name);
        }
        if let Some(topic) = edit.topic {
            body["topic"] = json!(topic);
        }
        let answer = self.rest.modify_channel(channel.id(), body).await?;
        self.remember_channel(&answer, "a channel change")
    }

    async fn delete_channel(&self, channel: AllowedChannel) -> Result<(), SurfaceError> {
        self.rest.delete_channel(channel.id()).await?;
        // The gateway's CHANNEL_DELETE says the same; the cache is right before it comes.
        self.store.remove_channel(channel.id());
        Ok(())
    }
}
