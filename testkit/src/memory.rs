//! An in-memory [`Surface`] that records every call: the stand-in for Discord in tests,
//! benchmarks and examples.

use std::collections::{BTreeMap, VecDeque};
use std::sync::{Arc, Mutex, MutexGuard};
use std::time::Duration;

use async_trait::async_trait;
use entity::{LearnedNames, NameDirectory, Snowflake};

use crate::approvals::ApprovalCard;
use crate::surface::{
    AllowedChannel, Attachment, ChannelEdit, ChannelLocation, ConnectionState, Fetched,
    MentionPolicy, MessageInfo, MessageQuery, NewChannel, NewChannelKind, NewThread,
    OutgoingMessage, PinnedMessage, Reaction, SearchHit, SearchMatch, SearchQuery, Session,
    SessionKind, Surface, SurfaceError, Thread, ThreadState,
};

pub use crate::platform::SurfaceCall;

struct State {
    bot_id: Snowflake,
    connection: ConnectionState,
    sessions: BTreeMap<Snowflake, Session>,
    /// Channels only `channel_info` knows (not in the cache).
    uncached: BTreeMap<Snowflake, ChannelLocation>,
    messages: BTreeMap<Snowflake, BTreeMap<Snowflake, Arc<MessageInfo>>>,
    user_names: BTreeMap<Snowflake, String>,
    names: LearnedNames,
    calls: Vec<SurfaceCall>,
    next_id: u64,
    failures: VecDeque<SurfaceError>,
    delay: Option<Duration>,
    /// Attachment bodies by url.
    files: BTreeMap<String, Vec<u8>>,
    /// What is known of each thread beyond its session.
    threads: BTreeMap<Snowflake, ThreadState>,
    /// Pinned messages per channel, oldest pin first, with when they were pinned.
    pins: BTreeMap<Snowflake, Vec<(Snowflake, String)>>,
}

/// Most pins a channel holds, as on Discord.
const MAX_PINS: usize = 250;

pub use crate::platform::demo;

/// An in-memory chat platform.
pub struct MemorySurface {
    state: Mutex<State>,
}

fn timestamp(seq: u64) -> String {
    let seconds = seq % 86_400;
    format!(
        "2026-11-22T{:02}:{:02}:{:02}.000Z",
        seconds / 3600,
        (seconds / 60) % 60,
        seconds % 60
    )
}

impl MemorySurface {
    /// An empty platform whose bot is `bot_id`: no sessions, users or messages, connection
    /// [`ConnectionState::None`], and message ids counting up from 1000000000000000901.
    pub fn new(bot_id: Snowflake) -> Self {
        MemorySurface {
            state: Mutex::new(State {
                bot_id,
                connection: ConnectionState::None,
                sessions: BTreeMap::new(),
                uncached: BTreeMap::new(),
                messages: BTreeMap::new(),
                user_names: BTreeMap::new(),
                names: LearnedNames::new(),
                calls: Vec::new(),
                next_id: 1000000000000000900,
                failures: VecDeque::new(),
                delay: None,
                files: BTreeMap::new(),
                threads: BTreeMap::new(),
                pins: BTreeMap::new(),
            }),
        }
    }

    /// The shared demo world (the `demo_world` crate, as fake-discord serves it): guild Lab
    /// with #ops, #release-room, #secret, #random, threads incident-42 (under #ops) and
    /// off-topic-thread (under #random), a DM with stanley, users stanley and tomas, role
    /// oncall. Plus this surface's extras ([`demo`]): a channel "elsewhere" in an unlisted
    /// guild, and an uncached channel of Lab only `channel_info` knows.
    pub fn demo() -> Self {
        use demo::*;
        let surface = MemorySurface::new(Snowflake(BOT));
        let guild = Some(Snowflake(GUILD));
        for channel in CHANNELS {
            surface.add_session(Session {
                id: Snowflake(channel.id),
                guild_id: guild,
                parent_id: channel.parent.map(Snowflake),
                kind: match channel.kind {
                    ChannelKind::Text => SessionKind::Channel,
                    ChannelKind::Thread => SessionKind::Thread,
                },
                name: channel.name.to_owned(),
            });
        }
        for dm in DMS {
            surface.add_session(Session {
                id: Snowflake(dm.id),
                guild_id: None,
                parent_id: None,
                kind: SessionKind::Dm,
                name: user(dm.recipient).map_or("", |u| u.username).to_owned(),
            });
        }
        surface.add_session(Session {
            id: Snowflake(OTHER_CHANNEL),
            guild_id: Some(Snowflake(OTHER_GUILD)),
            parent_id: None,
            kind: SessionKind::Channel,
            name: "elsewhere".to_owned(),
        });
        surface.add_uncached_channel(
            Snowflake(UNCACHED),
            ChannelLocation {
                guild_id: guild,
                parent_channel_id: None,
                kind: SessionKind::Channel,
            },
        );
        surface.add_user(Snowflake(BOT), BOT_USERNAME, None);
        for user in USERS {
            surface.add_user(Snowflake(user.id), user.username, user.global_name);
        }
        for role in ROLES {
            surface.lock().names.add_role(Snowflake(role.id), role.name);
        }
        surface
    }

    fn lock(&self) -> MutexGuard<'_, State> {
        // A panic while holding the lock leaves plain data behind; keep serving it.
        self.state
            .lock()
            .unwrap_or_else(std::sync::PoisonError::into_inner)
    }

    /// Caches a session (channel, thread or DM) and learns its title as a channel name.
    pub fn add_session(&self, info: Session) {
        let mut state = self.lock();
        state.names.add_channel(info.id, &info.name);
        state.sessions.insert(info.id, info);
    }

    /// Sets what is known of a cached thread: archived, and locked (only a moderator reopens
    /// a locked thread). A thread never set is open and unlocked.
    pub fn set_thread_state(&self, id: Snowflake, archived: bool, locked: bool) {
        let mut state = self.lock();
        let entry = state.threads.entry(id).or_default();
        entry.archived = archived;
        entry.locked = locked;
    }

    fn thread_info(state: &State, id: Snowflake) -> Option<Thread> {
        let session = state.sessions.get(&id)?;
        if session.kind != SessionKind::Thread {
            return None;
        }
        session.parent_id?;
        Some(Thread {
            session: session.clone(),
            state: state.threads.get(&id).copied().unwrap_or_default(),
        })
    }

    /// A channel only [`Surface::channel_info`] knows: not listed, and with no messages.
    pub fn add_uncached_channel(&self, id: Snowflake, location: ChannelLocation) {
        self.lock().uncached.insert(id, location);
    }

    /// Learns a user's names; their messages show `global_name` if given, else `username`.
    pub fn add_user(&self, id: Snowflake, username: &str, global_name: Option<&str>) {
        let mut state = self.lock();
        state.names.add_user(id, username, global_name);
        state
            .user_names
            .insert(id, global_name.unwrap_or(username).to_owned());
    }

    /// Caches a message as if `author` posted it; returns its id.
    pub fn post(&self, channel_id: Snowflake, author: Snowflake, content: &str) -> Snowflake {
        let mut state = self.lock();
        Self::store_message(&mut state, channel_id, author, content, None, &[])
    }

    /// Caches a message with attachments (`(filename, bytes)`) as if `author` posted it; the
    /// files are served by [`Surface::fetch_attachment`].
    pub fn post_with_files(
        &self,
        channel_id: Snowflake,
        author: Snowflake,
        content: &str,
        files: &[(&str, &[u8])],
    ) -> Snowflake {
        let mut state = self.lock();
        Self::store_message(&mut state, channel_id, author, content, None, files)
    }

    fn store_message(
        state: &mut State,
        channel_id: Snowflake,
        author: Snowflake,
        content: &str,
        reply_to: Option<Snowflake>,
        files: &[(&str, &[u8])],
    ) -> Snowflake {
        state.next_id += 1;
        let id = Snowflake(state.next_id);
        let attachments = files
            .iter()
            .enumerate()
            .map(|(index, (filename, bytes))| {
                let url = format!("memory://attachments/{id}/{index}/{filename}");
                state.files.insert(url.clone(), bytes.to_vec());
                Attachment {
                    filename: (*filename).to_owned(),
                    url,
                    size: bytes.len() as u64,
                    content_type: None,
                }
            })
            .collect();
        let author_name = state
            .user_names
            .get(&author)
            .cloned()
            .unwrap_or_else(|| format!("user_{author}"));
        let message = MessageInfo {
            message_id: id,
            channel_id,
            author_id: author,
            author_name,
            content: content.to_owned(),
            timestamp: timestamp(state.next_id),
            edited_timestamp: None,
            reply_to,
            attachments,
            reactions: Vec::new(),
            revision: 0,
        };
        state
            .messages
            .entry(channel_id)
            .or_default()
            .insert(id, Arc::new(message));
        id
    }

    /// Every action taken so far, in order.
    pub fn calls(&self) -> Vec<SurfaceCall> {
        self.lock().calls.clone()
    }

    /// Forgets the actions recorded so far (the messages they made stay).
    pub fn clear_calls(&self) {
        self.lock().calls.clear();
    }

    /// The next action fails with `error` (queued; one failure per action).
    pub fn fail_next(&self, error: SurfaceError) {
        self.lock().failures.push_back(error);
    }

    /// Every action waits this long first (for timeout tests).
    pub fn set_delay(&self, delay: Option<Duration>) {
        self.lock().delay = delay;
    }

    /// What [`Surface::connection`] reports from now on (and so what `/health` says).
    pub fn set_connection(&self, connection: ConnectionState) {
        self.lock().connection = connection;
    }

    /// Records an action and returns the failure queued for it, if any.
    async fn begin(&self, call: SurfaceCall) -> Result<(), SurfaceError> {
        let delay = {
            let mut state = self.lock();
            state.calls.push(call);
            state.delay
        };
        if let Some(delay) = delay {
            tokio::time::sleep(delay).await;
        }
        match self.lock().failures.pop_front() {
            Some(error) => Err(error),
            None => Ok(()),
        }
    }

    fn with_message<T>(
        &self,
        channel_id: Snowflake,
        message_id: Snowflake,
        change: impl FnOnce(&mut MessageInfo, Snowflake) -> Result<T, SurfaceError>,
    ) -> Result<T, SurfaceError> {
        let mut state = self.lock();
        let bot = state.bot_id;
        let message = state
            .messages
            .get_mut(&channel_id)
            .and_then(|messages| messages.get_mut(&message_id))
            .ok_or_else(|| SurfaceError::NotFound(format!("Unknown message {message_id}")))?;
        let message = Arc::make_mut(message);
        message.revision += 1;
        change(message, bot)
    }
}

impl NameDirectory for MemorySurface {
    fn user_by_key(&self, key: &str) -> Option<Snowflake> {
        self.lock().names.user_by_key(key)
    }
    fn role_by_key(&self, key: &str) -> Option<Snowflake> {
        self.lock().names.role_by_key(key)
    }
    fn channel_by_key(&self, key: &str) -> Option<Snowflake> {
        self.lock().names.channel_by_key(key)
    }
    fn users_by_key(&self, key: &str) -> Vec<Snowflake> {
        self.lock().names.users_by_key(key)
    }
    fn channels_by_key(&self, key: &str) -> Vec<Snowflake> {
        self.lock().names.channels_by_key(key)
    }
    fn find_user_name(&self, id: Snowflake, accept: &mut dyn FnMut(&str) -> bool) {
        // `accept` looks names up again, so it must run without the lock held.
        let mut names = Vec::new();
        self.lock().names.find_user_name(id, &mut |name| {
            names.push(name.to_owned());
            false
        });
        for name in names {
            if accept(&name) {
                return;
            }
        }
    }
    fn role_name(&self, id: Snowflake) -> Option<String> {
        self.lock().names.role_name(id)
    }
    fn channel_name(&self, id: Snowflake) -> Option<String> {
        self.lock().names.channel_name(id)
    }
}

#[async_trait]
impl Surface for MemorySurface {
    fn connection(&self) -> ConnectionState {
        self.lock().connection
    }

    fn bot_user_id(&self) -> Option<Snowflake> {
        Some(self.lock().bot_id)
    }

    fn sessions(&self) -> Vec<Session> {
        self.lock().sessions.values().cloned().collect()
    }

    fn session(&self, channel_id: Snowflake) -> Option<Session> {
        self.lock().sessions.get(&channel_id).cloned()
    }

    fn messages(&self, channel: AllowedChannel, query: MessageQuery) -> Vec<Arc<MessageInfo>> {
        let state = self.lock();
        let Some(messages) = state.messages.get(&channel.id()) else {
            return Vec::new();
        };
        let lower = query.after.map_or(0, |id| id.get().saturating_add(1));
        let upper = query.before.map_or(u64::MAX, protocol::Snowflake::get);
        let mut newest: Vec<Arc<MessageInfo>> = messages
            .range(Snowflake(lower)..Snowflake(upper))
            .rev()
            .take(query.limit)
            .map(|(_, m)| Arc::clone(m))
            .collect();
        newest.reverse();
        newest
    }

    fn message(&self, channel: AllowedChannel, message_id: Snowflake) -> Option<Arc<MessageInfo>> {
        self.lock()
            .messages
            .get(&channel.id())
            .and_then(|messages| messages.get(&message_id))
            .cloned()
    }

    async fn channel_info(&self, channel_id: Snowflake) -> Result<ChannelLocation, SurfaceError> {
        self.begin(SurfaceCall::ChannelInfo(channel_id)).await?;
        let state = self.lock();
        state
            .sessions
            .get(&channel_id)
            .map(ChannelLocation::from)
            .or_else(|| state.uncached.get(&channel_id).copied())
            .ok_or_else(|| SurfaceError::NotFound(format!("Unknown channel {channel_id}")))
    }

    async fn send_message(&self, message: OutgoingMessage) -> Result<Snowflake, SurfaceError> {
        self.begin(SurfaceCall::Send(message.clone())).await?;
        let mut state = self.lock();
        if state
            .threads
            .get(&message.channel_id.id())
            .is_some_and(|t| t.archived)
        {
            return Err(SurfaceError::Conflict("Thread is archived".into()));
        }
        if let Some(reply_to) = message.reply_to {
            let exists = state
                .messages
                .get(&message.channel_id.id())
                .is_some_and(|m| m.contains_key(&reply_to));
            if !exists {
                return Err(SurfaceError::InvalidInput {
                    message: format!("Reply target {reply_to} is not a message in this channel"),
                    details: serde_json::json!({"message_reference": "unknown message"}),
                });
            }
        }
        let bot = state.bot_id;
        let files: Vec<(&str, &[u8])> = message
            .files
            .iter()
            .map(|f| (f.filename.as_str(), f.content.as_slice()))
            .collect();
        Ok(Self::store_message(
            &mut state,
            message.channel_id.id(),
            bot,
            &message.content,
            message.reply_to,
            &files,
        ))
    }

    async fn edit_message(
        &self,
        channel: AllowedChannel,
        message_id: Snowflake,
        content: String,
        mentions: MentionPolicy,
    ) -> Result<(), SurfaceError> {
        let channel_id = channel.id();
        self.begin(SurfaceCall::Edit {
            channel_id,
            message_id,
            content: content.clone(),
            mentions,
        })
        .await?;
        self.with_message(channel_id, message_id, |message, bot| {
            if message.author_id != bot {
                return Err(SurfaceError::Denied(
                    "Cannot edit a message authored by another user".into(),
                ));
            }
            message.content = content;
            message.edited_timestamp = Some(message.timestamp.clone());
            Ok(())
        })
    }

    async fn delete_message(
        &self,
        channel: AllowedChannel,
        message_id: Snowflake,
    ) -> Result<(), SurfaceError> {
        let channel_id = channel.id();
        self.begin(SurfaceCall::Delete {
            channel_id,
            message_id,
        })
        .await?;
        let mut state = self.lock();
        state
            .messages
            .get_mut(&channel_id)
            .and_then(|messages| messages.remove(&message_id))
            .map(|_| ())
            .ok_or_else(|| SurfaceError::NotFound(format!("Unknown message {message_id}")))
    }

    async fn add_reaction(
        &self,
        channel: AllowedChannel,
        message_id: Snowflake,
        emoji: String,
    ) -> Result<(), SurfaceError> {
        let channel_id = channel.id();
        self.begin(SurfaceCall::AddReaction {
            channel_id,
            message_id,
            emoji: emoji.clone(),
        })
        .await?;
        self.with_message(channel_id, message_id, |message, _| {
            match message.reactions.iter_mut().find(|r| r.emoji == emoji) {
                Some(reaction) if reaction.me => {}
                Some(reaction) => {
                    reaction.me = true;
                    reaction.count += 1;
                }
                None => message.reactions.push(Reaction {
                    emoji,
                    count: 1,
                    me: true,
                }),
            }
            Ok(())
        })
    }

    async fn remove_reaction(
        &self,
        channel: AllowedChannel,
        message_id: Snowflake,
        emoji: String,
    ) -> Result<(), SurfaceError> {
        let channel_id = channel.id();
        self.begin(SurfaceCall::RemoveReaction {
            channel_id,
            message_id,
            emoji: emoji.clone(),
        })
        .await?;
        self.with_message(channel_id, message_id, |message, _| {
            if let Some(reaction) = message
                .reactions
                .iter_mut()
                .find(|r| r.emoji == emoji && r.me)
            {
                reaction.me = false;
                reaction.count -= 1;
            }
            message.reactions.retain(|r| r.count > 0);
            Ok(())
        })
    }

    async fn typing(&self, channel: AllowedChannel) -> Result<(), SurfaceError> {
        self.begin(SurfaceCall::Typing(channel.id())).await
    }

    async fn post_approval(
        &self,
        channel: AllowedChannel,
        card: &ApprovalCard,
    ) -> Result<Snowflake, SurfaceError> {
        self.begin(SurfaceCall::PostApproval {
            channel_id: channel.id(),
            card: card.clone(),
        })
        .await?;
        let mut state = self.lock();
        let bot = state.bot_id;
        let text = format!("Approval needed: {} in {}", card.tool, card.session_label);
        Ok(Self::store_message(
            &mut state,
            channel.id(),
            bot,
            &text,
            None,
            &[],
        ))
    }

    async fn update_approval(
        &self,
        channel: AllowedChannel,
        message_id: Snowflake,
        card: &ApprovalCard,
    ) -> Result<(), SurfaceError> {
        self.begin(SurfaceCall::UpdateApproval {
            channel_id: channel.id(),
            message_id,
            card: card.clone(),
        })
        .await
    }

    async fn fetch_attachment(
        &self,
        attachment: &Attachment,
        limit: u64,
    ) -> Result<Fetched, SurfaceError> {
        self.begin(SurfaceCall::FetchAttachment(attachment.url.clone()))
            .await?;
        let state = self.lock();
        let bytes = state
            .files
            .get(&attachment.url)
            .ok_or_else(|| SurfaceError::NotFound(format!("no file at {}", attachment.url)))?;
        if bytes.len() as u64 > limit {
            return Ok(Fetched::OverLimit);
        }
        Ok(Fetched::Bytes(bytes.clone()))
    }

    fn thread(&self, channel_id: Snowflake) -> Option<Thread> {
        Self::thread_info(&self.lock(), channel_id)
    }

    fn threads(&self, parent: Option<Snowflake>) -> Vec<Thread> {
        let state = self.lock();
        state
            .sessions
            .keys()
            .filter_map(|id| Self::thread_info(&state, *id))
            .filter(|t| parent.is_none_or(|p| t.parent_id() == Some(p)))
            .collect()
    }

    async fn list_threads(
        &self,
        parent: AllowedChannel,
        include_archived: bool,
    ) -> Result<Vec<Thread>, SurfaceError> {
        self.begin(SurfaceCall::ListThreads {
            parent: parent.id(),
            include_archived,
        })
        .await?;
        Ok(self
            .threads(Some(parent.id()))
            .into_iter()
            .filter(|t| include_archived || !t.state.archived)
            .collect())
    }

    async fn create_thread(&self, thread: NewThread) -> Result<Thread, SurfaceError> {
        self.begin(SurfaceCall::CreateThread(thread.clone()))
            .await?;
        let mut state = self.lock();
        let parent = thread.parent.id();
        let guild_id = state.sessions.get(&parent).and_then(|s| s.guild_id);
        // A thread started from a message takes the message's id, as on Discord.
        let id = match thread.from_message {
            Some(message_id) => {
                let exists = state
                    .messages
                    .get(&parent)
                    .is_some_and(|m| m.contains_key(&message_id));
                if !exists {
                    return Err(SurfaceError::NotFound(format!(
                        "Unknown message {message_id}"
                    )));
                }
                if state.sessions.contains_key(&message_id) {
                    return Err(SurfaceError::InvalidInput {
                        message: "A thread has already been created for this message".into(),
                        details: serde_json::Value::Null,
                    });
                }
                message_id
            }
            None => {
                state.next_id += 1;
                Snowflake(state.next_id)
            }
        };
        state.names.add_channel(id, &thread.name);
        state.sessions.insert(
            id,
            Session {
                id,
                guild_id,
                parent_id: Some(parent),
                kind: SessionKind::Thread,
                name: thread.name.clone(),
            },
        );
        let bot = state.bot_id;
        state.threads.insert(
            id,
            ThreadState {
                auto_archive_minutes: thread.auto_archive_minutes.unwrap_or(1440),
                owner_id: Some(bot),
                ..ThreadState::default()
            },
        );
        Self::thread_info(&state, id)
            .ok_or_else(|| SurfaceError::Unavailable("the new thread vanished".into()))
    }

    async fn set_thread_archived(
        &self,
        thread: AllowedChannel,
        archived: bool,
    ) -> Result<Thread, SurfaceError> {
        let id = thread.id();
        self.begin(SurfaceCall::SetThreadArchived {
            channel_id: id,
            archived,
        })
        .await?;
        let mut state = self.lock();
        if Self::thread_info(&state, id).is_none() {
            return Err(SurfaceError::NotFound(format!("Unknown thread {id}")));
        }
        let entry = state.threads.entry(id).or_default();
        if entry.locked && !archived {
            return Err(SurfaceError::Denied(
                "Missing Permissions: the thread is locked (Manage Threads reopens it)".into(),
            ));
        }
        entry.archived = archived;
        Self::thread_info(&state, id)
            .ok_or_else(|| SurfaceError::NotFound(format!("Unknown thread {id}")))
    }

    async fn pin_message(
        &self,
        channel: AllowedChannel,
        message_id: Snowflake,
    ) -> Result<(), SurfaceError> {
        let channel_id = channel.id();
        self.begin(SurfaceCall::Pin {
            channel_id,
            message_id,
        })
        .await?;
        let mut state = self.lock();
        let exists = state
            .messages
            .get(&channel_id)
            .is_some_and(|m| m.contains_key(&message_id));
        if !exists {
            return Err(SurfaceError::NotFound(format!(
                "Unknown message {message_id}"
            )));
        }
        let seq = state.next_id;
        let pins = state.pins.entry(channel_id).or_default();
        if pins.iter().any(|(id, _)| *id == message_id) {
            return Ok(());
        }
        if pins.len() >= MAX_PINS {
            return Err(SurfaceError::InvalidInput {
                message: format!("Maximum number of pins reached ({MAX_PINS})"),
                details: serde_json::Value::Null,
            });
        }
        pins.push((message_id, timestamp(seq)));
        Ok(())
    }

    async fn unpin_message(
        &self,
        channel: AllowedChannel,
        message_id: Snowflake,
    ) -> Result<(), SurfaceError> {
        let channel_id = channel.id();
        self.begin(SurfaceCall::Unpin {
            channel_id,
            message_id,
        })
        .await?;
        let mut state = self.lock();
        if let Some(pins) = state.pins.get_mut(&channel_id) {
            pins.retain(|(id, _)| *id != message_id);
        }
        Ok(())
    }

    async fn pinned_messages(
        &self,
        channel: AllowedChannel,
    ) -> Result<Vec<PinnedMessage>, SurfaceError> {
        let channel_id = channel.id();
        self.begin(SurfaceCall::ListPins(channel_id)).await?;
        let state = self.lock();
        let Some(pins) = state.pins.get(&channel_id) else {
            return Ok(Vec::new());
        };
        Ok(pins
            .iter()
            .rev()
            .filter_map(|(id, at)| {
                let message = state.messages.get(&channel_id)?.get(id)?;
                Some(PinnedMessage {
                    message: Arc::clone(message),
                    pinned_at: Some(at.clone()),
                })
            })
            .collect())
    }

    async fn search(&self, query: SearchQuery) -> Result<Vec<SearchHit>, SurfaceError> {
        self.begin(SurfaceCall::Search(query.clone())).await?;
        let state = self.lock();
        let mut hits = Vec::new();
        for channel in &query.channels {
            let Some(messages) = state.messages.get(&channel.id()) else {
                continue;
            };
            for (id, message) in messages {
                if query.before.is_some_and(|b| *id >= b)
                    || query.after.is_some_and(|a| *id <= a)
                    || query.author.is_some_and(|a| message.author_id != a)
                {
                    continue;
                }
                if let Some(hit) = memory_match(&query, message) {
                    hits.push(hit);
                }
            }
        }
        // Best first; among equals, newest first.
        hits.sort_by(|a: &SearchHit, b: &SearchHit| {
            b.score
                .total_cmp(&a.score)
                .then(b.message.message_id.cmp(&a.message.message_id))
        });
        hits.truncate(query.limit);
        Ok(hits)
    }

    async fn create_channel(&self, channel: NewChannel) -> Result<Session, SurfaceError> {
        self.begin(SurfaceCall::CreateChannel(channel.clone()))
            .await?;
        let mut state = self.lock();
        state.next_id += 1;
        let id = Snowflake(state.next_id);
        let info = Session {
            id,
            guild_id: Some(channel.place.guild()),
            parent_id: channel.place.category(),
            kind: match channel.kind {
                NewChannelKind::Forum => SessionKind::Forum,
                NewChannelKind::Text | NewChannelKind::Voice => SessionKind::Channel,
            },
            name: channel.name,
        };
        state.names.add_channel(id, &info.name);
        state.sessions.insert(id, info.clone());
        Ok(info)
    }

    async fn edit_channel(
        &self,
        channel: AllowedChannel,
        edit: ChannelEdit,
    ) -> Result<Session, SurfaceError> {
        let id = channel.id();
        self.begin(SurfaceCall::EditChannel {
            channel_id: id,
            edit: edit.clone(),
        })
        .await?;
        let mut state = self.lock();
        let Some(mut info) = state.sessions.get(&id).cloned() else {
            return Err(SurfaceError::NotFound(format!("Unknown Channel {id}")));
        };
        if let Some(name) = edit.name {
            info.name = name;
            state.names.add_channel(id, &info.name);
        }
        state.sessions.insert(id, info.clone());
        Ok(info)
    }

    async fn delete_channel(&self, channel: AllowedChannel) -> Result<(), SurfaceError> {
        let id = channel.id();
        self.begin(SurfaceCall::DeleteChannel(id)).await?;
        let mut state = self.lock();
        if state.sessions.remove(&id).is_none() {
            return Err(SurfaceError::NotFound(format!("Unknown Channel {id}")));
        }
        state.messages.remove(&id);
        let threads: Vec<Snowflake> = state
            .sessions
            .values()
            .filter(|s| s.kind == SessionKind::Thread && s.parent_id == Some(id))
            .map(|s| s.id)
            .collect();
        for thread in threads {
            state.sessions.remove(&thread);
            state.messages.remove(&thread);
            state.threads.remove(&thread);
        }
        Ok(())
    }
}

/// The memory surface's search: a message matches when each term matches its raw text (words
/// as the index splits them, lowercase) or its mentions; the score counts matched words.
fn memory_match(query: &SearchQuery, message: &Arc<MessageInfo>) -> Option<SearchHit> {
    let words: Vec<String> = message
        .content
        .split(|c: char| !c.is_alphanumeric())
        .filter(|w| !w.is_empty())
        .map(str::to_lowercase)
        .collect();
    let mentions = entity::discord_mentions(&message.content);
    let mut score = 0.0;
    let mut first_hit: Option<String> = None;
    for term in &query.terms {
        let mut matched = false;
        for alternative in &term.any_of {
            match alternative {
                SearchMatch::Words { text, prefix } => {
                    let wanted: Vec<&str> = text.split(' ').collect();
                    let found = words.windows(wanted.len()).position(|window| {
                        window
                            .iter()
                            .zip(&wanted)
                            .enumerate()
                            .all(|(i, (have, want))| {
                                if *prefix && i + 1 == wanted.len() {
                                    have.starts_with(want)
                                } else {
                                    have == want
                                }
                            })
                    });
                    if let Some(at) = found {
                        matched = true;
                        score += 1.0;
                        first_hit.get_or_insert_with(|| words[at].clone());
                    }
                }
                SearchMatch::Mentions(mention) => {
                    if mentions.contains(mention) {
                        matched = true;
                        score += 1.0;
                    }
                }
            }
        }
        if !matched {
            return None;
        }
    }
    let snippet = match first_hit {
        Some(word) => words
            .iter()
            .map(|w| {
                if *w == word {
                    format!("**{w}**")
                } else {
                    w.clone()
                }
            })
            .collect::<Vec<_>>()
            .join(" "),
        None => message.content.clone(),
    };
    Some(SearchHit {
        message: Arc::clone(message),
        snippet,
        score,
    })
}
